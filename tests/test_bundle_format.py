"""The bundle format (wattgpu.bundle): versioned, strictly read, checked against ONNX metadata, and
the frozen format-1 bundle still loads (or is refused by version)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Iterator

import pytest

from wattgpu import ArtifactError, Predictor, Workload, bundle

REPO = Path(__file__).resolve().parents[1]
FROZEN_V1 = REPO / "tests" / "fixtures" / "bundle_v1"
PACKAGED = REPO / "runtime" / "wattgpu" / "models"
# Maps whose keys are data, not format: a renamed key there is a different value, checked elsewhere.
FREE_FORM = ("xgboost_params", "sources")


def _key_paths(obj: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every dict key of the manifest as a path, skipping the inside of free-form maps."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield path + (k,)
            if k not in FREE_FORM:
                yield from _key_paths(v, path + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _key_paths(v, path + (i,))


MANIFEST = json.loads((PACKAGED / bundle.SCHEMA_FILE).read_text())
KEY_PATHS = [p for p in _key_paths(MANIFEST) if not (p[0] == "models" and isinstance(p[-1], int))]


def _copy(tmp_path: Path, src: Path = PACKAGED) -> Path:
    d = tmp_path / "bundle"
    shutil.copytree(src, d, ignore=shutil.ignore_patterns("*.md", "EXPECTED.json"))
    return d


def _rewrite(d: Path, fn) -> None:
    data = json.loads((d / bundle.SCHEMA_FILE).read_text())
    fn(data)
    (d / bundle.SCHEMA_FILE).write_text(json.dumps(data))


def _predict(d: Path):
    return Predictor(models=d).predict("NVIDIA A30", "meta-llama/Llama-3.1-8B-Instruct", Workload())


def test_frozen_v1_bundle_loads_or_is_refused_by_version():
    expected = json.loads((FROZEN_V1 / "EXPECTED.json").read_text())["predictions"]
    if 1 in bundle.READERS:
        pred = Predictor(models=FROZEN_V1)
        for row in expected:
            p = pred.predict(row["gpu"], row["llm"], Workload(**row["workload"]))
            assert p.power_w == pytest.approx(row["power_w"], rel=1e-9)
            assert p.itl_s == pytest.approx(row["itl_s"], rel=1e-9)
    else:
        with pytest.raises(ArtifactError, match="made by format version 1"):
            _predict(FROZEN_V1)


def test_packaged_bundle_is_a_format_this_runtime_reads():
    # format 2 added the manifest's `calibration` section; the packaged export (format 1) reads as before
    assert MANIFEST["schema_version"] in bundle.READERS and bundle.FORMAT_VERSION in bundle.READERS


def test_the_calibration_section_is_required_even_when_null(tmp_path):
    """Since format 2 a manifest carries ``calibration`` (null when uncalibrated): null predicts exactly as the
    packaged bundle, a missing key is refused by name."""
    d = _copy(tmp_path)
    m = json.loads((d / bundle.SCHEMA_FILE).read_text())
    assert m["schema_version"] >= 2
    m.pop("calibration", None)
    (d / bundle.SCHEMA_FILE).write_text(json.dumps({**m, "calibration": None}))
    p = Predictor(d).predict("NVIDIA A30", "meta-llama/Llama-3.1-8B-Instruct")
    assert p.calibration is None and p.power_w == Predictor(PACKAGED).predict("NVIDIA A30", "meta-llama/Llama-3.1-8B-Instruct").power_w
    (d / bundle.SCHEMA_FILE).write_text(json.dumps(m))
    with pytest.raises(ArtifactError, match="missing key 'calibration'"):
        Predictor(d).predict("NVIDIA A30", "meta-llama/Llama-3.1-8B-Instruct")


@pytest.mark.parametrize("path", KEY_PATHS, ids=[".".join(map(str, p)) for p in KEY_PATHS])
def test_a_renamed_key_fails_loudly_naming_it(tmp_path, path):
    d = _copy(tmp_path)

    def rename(data: dict) -> None:
        parent = data
        for k in path[:-1]:
            parent = parent[k]
        parent[str(path[-1]) + "_renamed"] = parent.pop(path[-1])

    _rewrite(d, rename)
    with pytest.raises(ArtifactError) as ei:
        _predict(d)
    msg = str(ei.value)
    assert repr(str(path[-1])) in msg or repr(str(path[-1]) + "_renamed") in msg or str(path[-1]) in msg, msg
    assert "\n" not in msg and bundle.SCHEMA_FILE in msg


@pytest.mark.parametrize("section", ["domain", "intervals", "training", "producer", "catalog"])
def test_an_unknown_key_in_any_section_is_refused(tmp_path, section):
    d = _copy(tmp_path)
    _rewrite(d, lambda s: s[section].update(surprise=1) if section != "intervals" else s.update(surprise=1))
    with pytest.raises(ArtifactError, match="surprise"):
        _predict(d)


@pytest.mark.parametrize("key, value", [("recipe", "paper"), ("schema_version", None)])
def test_onnx_metadata_must_agree_with_the_manifest(tmp_path, key, value):
    """The ONNX files carry their recipe/target/transform/features/version; the runtime compares them."""
    import onnxruntime as ort

    meta = ort.InferenceSession(str(PACKAGED / "power.onnx"), providers=["CPUExecutionProvider"]
                                ).get_modelmeta().custom_metadata_map
    schema = bundle.read_manifest((PACKAGED / bundle.SCHEMA_FILE).read_bytes())
    m = schema.models["power"]
    bundle.check_onnx_metadata(meta, schema, m, "power.onnx")  # agrees as shipped
    bad = dict(meta)
    if value is None:
        del bad[bundle.META_PREFIX + key]
    else:
        bad[bundle.META_PREFIX + key] = value
    with pytest.raises(ArtifactError, match=rf"power.onnx: .*{bundle.META_PREFIX}{key}"):
        bundle.check_onnx_metadata(bad, schema, m, "power.onnx")


def test_manifest_recipe_edited_is_caught_by_onnx_metadata(tmp_path):
    d = _copy(tmp_path)
    _rewrite(d, lambda s: s.update(recipe="paper"))
    with pytest.raises(ArtifactError, match="wattgpu.recipe"):
        _predict(d)


def test_write_bundle_refuses_a_manifest_the_runtime_cannot_read(tmp_path):
    manifest = json.loads((PACKAGED / bundle.SCHEMA_FILE).read_text())
    blobs = {m["file"]: (PACKAGED / m["file"]).read_bytes() for m in manifest["models"].values()}
    catalog = (PACKAGED / "specs.json").read_bytes()
    bundle.write_bundle(tmp_path / "ok", manifest, blobs, catalog)
    assert _predict(tmp_path / "ok").power_w == _predict(PACKAGED).power_w
    broken = {**manifest, "domain": {k: v for k, v in manifest["domain"].items() if k != "kinds"}}
    with pytest.raises(ArtifactError, match="missing key 'kinds'"):
        bundle.write_bundle(tmp_path / "bad", broken, blobs, catalog)
    assert not (tmp_path / "bad").exists()

"""Model files, the catalog and the schema are verified at load; any damage is an ArtifactError naming the file."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import wattgpu
from wattgpu import ArtifactError, Predictor, Workload
from wattgpu.errors import ConfigFileError, WattGPUError

REPO = Path(__file__).resolve().parents[1]
MODELS = REPO / "runtime" / "wattgpu" / "models"
SCHEMA = json.loads((MODELS / "feature_schema.json").read_text())
MODEL_FILES = sorted(m["file"] for m in SCHEMA["models"].values())
CATALOG_FILE = SCHEMA["catalog"]["file"]
LLM = next(m.name for m in wattgpu.default_catalog().llms if m.total_params_b < 10)


@pytest.fixture
def models(tmp_path):
    d = tmp_path / "models"
    shutil.copytree(MODELS, d)
    return d


def _predict(d: Path):
    return Predictor(model_dir=d).predict("NVIDIA H100 SXM5 80GB", LLM, Workload())


def _edit_schema(d: Path, fn) -> None:
    data = json.loads((d / "feature_schema.json").read_text())
    fn(data)
    (d / "feature_schema.json").write_text(json.dumps(data))


def test_pristine_copy_predicts_like_the_package(models):
    assert _predict(models).power_w == wattgpu.predict("NVIDIA H100 SXM5 80GB", LLM).power_w


def test_hashes_in_schema_match_shipped_files():
    for m in SCHEMA["models"].values():
        assert hashlib.sha256((MODELS / m["file"]).read_bytes()).hexdigest() == m["sha256"]
    assert hashlib.sha256((MODELS / CATALOG_FILE).read_bytes()).hexdigest() == SCHEMA["catalog"]["sha256"]


@pytest.mark.parametrize("name", MODEL_FILES + [CATALOG_FILE])
@pytest.mark.parametrize("damage", ["flip_byte", "truncate", "empty", "delete", "directory", "swap"])
def test_damaged_artifact_is_named(models, name, damage):
    f = models / name
    raw = f.read_bytes()
    if damage == "flip_byte":
        i = len(raw) // 2
        f.write_bytes(raw[:i] + bytes([raw[i] ^ 0x01]) + raw[i + 1:])
    elif damage == "truncate":
        f.write_bytes(raw[: len(raw) // 3])
    elif damage == "empty":
        f.write_bytes(b"")
    elif damage == "delete":
        f.unlink()
    elif damage == "directory":
        f.unlink()
        f.mkdir()
    elif damage == "swap":  # a valid file from elsewhere in the set, i.e. a mismatched export
        other = next(o for o in MODEL_FILES + [CATALOG_FILE] if o != name)
        f.write_bytes((models / other).read_bytes())
    with pytest.raises(ArtifactError) as ei:
        _predict(models)
    assert name in str(ei.value) and "\n" not in str(ei.value)
    assert ei.value.exit_code == 3


def test_schema_missing_or_garbage(models):
    (models / "feature_schema.json").unlink()
    with pytest.raises(ArtifactError, match="feature_schema.json"):
        _predict(models)
    (models / "feature_schema.json").write_bytes(b"\x89PNG\r\n\x1a\n garbage")
    with pytest.raises(ArtifactError, match="feature_schema.json"):
        _predict(models)


@pytest.mark.parametrize("edit", [
    lambda s: s.update(schema_version=99),
    lambda s: s.update(schema_version="1"),
    lambda s: s.pop("schema_version"),
    lambda s: s.pop("models"),
    lambda s: s.update(models=[1, 2]),
    lambda s: s.update(catalog="specs.json"),
    lambda s: s["models"]["power"].update(transform="cube_root"),
    lambda s: s["models"]["power"]["features"].append({"name": "gpu_colour", "unit": ""}),
    lambda s: s["models"]["power"].update(file="../power.onnx"),
    lambda s: s["models"]["power"].update(sha256="0" * 64),
    lambda s: s["catalog"].update(sha256="0" * 64),
], ids=["version_99", "version_str", "no_version", "no_models", "models_list", "catalog_str", "bad_transform",
        "unknown_feature", "path_traversal", "model_hash", "catalog_hash"])
def test_schema_damage(models, edit):
    _edit_schema(models, edit)
    with pytest.raises(ArtifactError) as ei:
        _predict(models)
    assert "feature_schema.json" in str(ei.value) or any(n in str(ei.value) for n in MODEL_FILES + [CATALOG_FILE])


def test_unknown_schema_version_message(models):
    _edit_schema(models, lambda s: s.update(schema_version=99))
    with pytest.raises(ArtifactError, match=r"feature_schema.json: made by format version 99; this runtime reads"):
        _predict(models)


def test_schema_feature_order_mismatch_is_caught(models):
    """A schema whose feature order differs from the one baked into the ONNX metadata (a model from another
    export with a hand-fixed hash, say) must not silently feed columns in the wrong order."""
    _edit_schema(models, lambda s: s["models"]["power"]["features"].reverse())
    with pytest.raises(ArtifactError, match="feature list"):
        _predict(models)


def test_consistently_edited_invalid_catalog_is_an_artifact_error(models):
    cat = json.loads((models / CATALOG_FILE).read_text())
    cat["gpus"][0]["spec"]["tdp_w"] = -1
    raw = json.dumps(cat).encode()
    (models / CATALOG_FILE).write_bytes(raw)
    _edit_schema(models, lambda s: s["catalog"].update(sha256=hashlib.sha256(raw).hexdigest()))
    with pytest.raises(ArtifactError, match="specs.json"):
        _predict(models)


def test_missing_model_dir():
    """A directory that does not exist is a bad argument (exit 2), not a damaged install."""
    with pytest.raises(ConfigFileError, match="/nonexistent/wattgpu-models: the model bundle directory given "
                                              "as model_dir does not exist"):
        Predictor(model_dir="/nonexistent/wattgpu-models")


def test_cli_exits_3_on_tampered_package(tmp_path):
    """The installed-package path: copy the runtime, damage its power model, run the CLI from the copy."""
    pkg = tmp_path / "wattgpu"
    shutil.copytree(REPO / "runtime" / "wattgpu", pkg, ignore=shutil.ignore_patterns("__pycache__"))
    f = pkg / "models" / MODEL_FILES[0]
    f.write_bytes(f.read_bytes()[:1000])
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    r = subprocess.run([sys.executable, "-m", "wattgpu.cli", "predict", "--llm", LLM, "--gpu", "H100 SXM"],
                       capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path)
    assert r.returncode == 3, r.stderr
    assert r.stderr.startswith("error:") and r.stderr.count("\n") == 1 and MODEL_FILES[0] in r.stderr
    assert "Traceback" not in r.stderr


def test_artifact_error_is_a_wattgpu_error():
    assert issubclass(ArtifactError, WattGPUError)

"""Issue 26: nothing crashes, hangs or lies on the surfaces added since round 2 — model bundles, tensor
parallelism, fleets (replicas), extreme workloads and quantisation configs.

Each test names the class of the issue it guards. Bundles here are copies of the packaged one, altered
in the test (synthetic damage, never shipped).
"""
from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

import wattgpu
from wattgpu import ArtifactError, Predictor, Workload
from wattgpu.bundle import sha256

from .helpers import REPO, run_cli

PACKAGED = REPO / "runtime" / "wattgpu" / "models"
GPU, LLM = "NVIDIA A30", "meta-llama/Llama-3.1-8B-Instruct"


def _copy_bundle(tmp_path: Path, name: str = "b") -> Path:
    out = tmp_path / name
    shutil.copytree(PACKAGED, out)
    return out


def _manifest(b: Path) -> dict:
    return json.loads((b / "feature_schema.json").read_text())


def _write_manifest(b: Path, m: dict | str) -> None:
    (b / "feature_schema.json").write_text(m if isinstance(m, str) else json.dumps(m))


def _refused(b: Path, *needles: str) -> None:
    """The API raises ArtifactError naming ``needles``; the CLI exits 3 with one line saying the same."""
    with pytest.raises(ArtifactError) as info:
        Predictor(models=b).predict(GPU, LLM)
    for n in needles:
        assert n in str(info.value), str(info.value)
    r = run_cli("predict", "--llm", LLM, "--gpu", GPU, "--models", str(b), timeout=60)
    assert r.returncode == 3, r.stderr
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr and all(n in r.stderr for n in needles)


# ---- bundle reader: depth, file kinds, sizes, strict types, finite numbers
def test_a_manifest_nested_thousands_deep_is_refused_without_recursion_error(tmp_path):
    b = _copy_bundle(tmp_path)
    _write_manifest(b, "[" * 50_000 + "]" * 50_000)
    _refused(b, "feature_schema.json", "deeper than 64")


def test_a_catalog_nested_thousands_deep_is_refused_without_recursion_error(tmp_path):
    b = _copy_bundle(tmp_path)
    deep = ('{"gpus": ' + "[" * 50_000 + "]" * 50_000 + "}").encode()
    (b / "specs.json").write_bytes(deep)
    m = _manifest(b)
    m["catalog"]["sha256"] = sha256(deep)  # a consistent, hostile bundle: the hash matches
    _write_manifest(b, m)
    _refused(b, "specs.json", "deeper than 64")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
@pytest.mark.parametrize("name", ["feature_schema.json", "specs.json", "itl.onnx"])
def test_a_bundle_file_that_is_a_fifo_is_refused_not_waited_on(tmp_path, name):
    b = _copy_bundle(tmp_path)
    (b / name).unlink()
    os.mkfifo(b / name)
    _refused(b, name, "FIFO")


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
@pytest.mark.parametrize("name", ["feature_schema.json", "power.onnx"])
def test_a_bundle_file_linked_to_dev_zero_is_refused_before_reading(tmp_path, name):
    b = _copy_bundle(tmp_path)
    (b / name).unlink()
    (b / name).symlink_to("/dev/zero")
    _refused(b, name, "device")


def test_an_oversized_bundle_file_is_refused(tmp_path, monkeypatch):
    from wattgpu import bundle

    b = _copy_bundle(tmp_path)
    monkeypatch.setattr(bundle, "MAX_ARTIFACT_BYTES", 100_000)  # specs.json ~320 kB, itl.onnx ~250 kB
    with pytest.raises(ArtifactError, match=r"(specs.json|\.onnx).*larger than 100,000 bytes"):
        Predictor(models=b).predict(GPU, LLM)


@pytest.mark.parametrize("value, kind", [("1", "string"), (1.0, "number"), (True, "boolean"), (None, "null")])
def test_schema_version_of_the_wrong_type_is_named_as_a_type_error(tmp_path, value, kind):
    b = _copy_bundle(tmp_path)
    m = _manifest(b)
    m["schema_version"] = value
    _write_manifest(b, m)
    with pytest.raises(ArtifactError) as info:
        Predictor(models=b).predict(GPU, LLM)
    msg = str(info.value)
    assert f"is a JSON {kind}, not an integer" in msg and "made by format version" not in msg, msg


@pytest.mark.parametrize("path, value", [
    (("intervals", "itl", "factors", "80"), "[0.5, 1e999]"),       # overflows to inf
    (("intervals", "itl", "factors", "80"), "[0.5, Infinity]"),     # the non-standard literal
    (("intervals", "power", "factors", "95"), "[0.5, NaN]"),
    (("intervals", "itl", "factors", "80"), "[0.5, 1e300]"),        # finite, absurd
    (("intervals", "itl", "factors", "80"), "[1.5, 2.0]"),          # does not hold the prediction
    (("models", "itl", "parity_rtol"), "-1"),
    (("domain", "llm_params_b"), "[-1e999, 10]"),
    (("domain", "gpu_ranges", "tdp_w"), "[-5, 700]"),
    (("domain", "tp_range"), "[0, 8]"),
    (("training", "targets", "power", "rows"), "-3"),
])
def test_every_manifest_number_is_finite_and_in_range(tmp_path, path, value):
    b = _copy_bundle(tmp_path)
    m = _manifest(b)
    node = m
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = "__HOSTILE__"
    _write_manifest(b, json.dumps(m).replace('"__HOSTILE__"', value))
    with pytest.raises(ArtifactError) as info:
        Predictor(models=b).predict(GPU, LLM)
    assert "feature_schema.json" in str(info.value)


def test_no_interval_of_a_loaded_bundle_is_infinite():
    p = Predictor().predict(GPU, LLM)
    assert all(math.isfinite(i.low) and math.isfinite(i.high) for i in (*p.power_intervals, *p.itl_intervals))


# ---- fleets: the Little's-law fixed point is solved, and throughput ≤ batch ÷ ITL
def _served_within_batch_over_itl(p) -> bool:
    return p.throughput_tok_s <= p.effective_batch / p.itl_s * (1 + 1e-9)


@pytest.mark.parametrize("llm, gpu, qps, tp", [
    ("meta-llama/Llama-3.1-8B-Instruct", "RTX A6000", 20, 1),   # 2560 > 2517 tok/s before
    ("meta-llama/Llama-2-13b-chat-hf", "RTX A6000", 20, 1),
    ("deepseek-ai/DeepSeek-R1-0528", "GB200", 5, 4),
    ("deepseek-ai/DeepSeek-R1-0528", "GB300", 5, 4),
])
def test_replica_throughput_never_exceeds_batch_over_itl(llm, gpu, qps, tp):
    r = wattgpu.rank(llm, Workload(kind="server", qps=qps, tp=tp), gpus=[gpu], replicas="auto")
    assert r.candidates, r.excluded
    out_tokens = Workload().output_tokens
    for p in r.candidates:
        assert _served_within_batch_over_itl(p), (p.throughput_tok_s, p.effective_batch / p.itl_s)
        assert p.max_qps is not None and p.throughput_tok_s <= p.max_qps * out_tokens * (1 + 1e-9)
        assert not any("did not converge" in w for w in p.warnings), p.warnings


def test_the_fixed_point_solver_brackets_a_stepped_request_time():
    """T(L) jumps across the line L = λT(L): no exact root exists, damped iteration oscillates, and the
    solver returns the bracket's upper end (L ≥ λ·T(L)) within rtol."""
    from wattgpu import physics

    qps = np.array([1.0, 2.0])

    def t(conc: np.ndarray) -> np.ndarray:
        return np.where(conc < 10.0, 12.0, 8.0) / np.array([1.0, 2.0])[: conc.size]  # steps down at L = 10

    conc, ok = physics.solve_server_concurrency(qps, t, iters=30, upper=np.array([64.0, 64.0]))
    assert ok.all()
    assert np.all(conc >= qps * t(conc)) and np.allclose(conc, 10.0, rtol=1e-5)

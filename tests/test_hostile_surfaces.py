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
    (("intervals", "itl", "factors", "80"), "[2.0, 1.5]"),          # empty
    (("intervals", "itl", "factors", "80"), "[0, 1.5]"),
    (("models", "itl", "parity_rtol"), "-1"),
    (("domain", "llm_params_b"), "[-1e999, 10]"),
    (("domain", "gpu_ranges", "tdp_w"), "[-5, 700]"),
    (("domain", "tp_range"), "[0, 8]"),
    (("training", "targets", "power", "rows"), "-3"),
    (("models", "itl", "parity_rtol"), "1" + "0" * 400),            # an integer too large for a float
    (("models", "itl", "input_name"), '""'),                         # not the ONNX file's input
    (("models", "power", "unit"), "[]"),
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
    assert "feature_schema.json" in str(info.value) or "input_name" in str(info.value), str(info.value)


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


# ---- tiny positive rates: finite or clearly refused, everywhere
@pytest.mark.parametrize("qps", [1e-320, 5e-324, 1e-300, 1e-10])
def test_a_tiny_rate_is_refused_by_name_in_the_api(qps):
    with pytest.raises(wattgpu.SpecValidationError, match="'qps'.*1e-09"):
        wattgpu.predict(GPU, LLM, kind="server", qps=qps)


def test_a_tiny_rate_is_refused_or_finite_in_every_command(tmp_path):
    for args in (["predict", "--gpu", GPU], ["rank", "--gpus", GPU], ["rank", "--gpus", GPU, "--replicas", "auto"],
                 ["rank", "--gpus", GPU, "--replicas", "3"]):
        r = run_cli(*args, "--llm", LLM, "--qps", "1e-320", timeout=60)
        assert r.returncode == 2 and "qps" in r.stderr and "inf" not in r.stdout, (args, r.stderr)
    src = tmp_path / "in.csv"
    src.write_text(f"llm,gpu,workload,qps\n{LLM},{GPU},server,1e-320\n{LLM},{GPU},server,1e-9\n")
    r = run_cli("predict", "--input", str(src), "--output", str(tmp_path / "out.csv"), timeout=60)
    assert r.returncode == 1 and "column 'qps'" in r.stderr, r.stderr
    body = (tmp_path / "out.csv").read_text()
    assert "inf" not in body.replace("info", "")
    # at the floor every figure is finite
    p = wattgpu.predict(GPU, LLM, kind="server", qps=1e-9)
    assert all(math.isfinite(v) for v in (p.energy_per_token_j, p.energy_per_request_j, p.system_s_per_token))


def test_replicas_that_split_the_rate_below_the_floor_are_refused_naming_replicas():
    with pytest.raises(wattgpu.WattGPUError, match="replicas = 1000 splits qps"):
        wattgpu.rank(LLM, Workload(kind="server", qps=1e-7), gpus=[GPU], replicas=1000)


# ---- closed loops: utilization > 1 only with overloaded
@pytest.mark.parametrize("clients, max_batch", [(65536, 256), (65536, 16), (8, 1)])
def test_a_closed_loop_never_claims_more_than_full_utilization(clients, max_batch):
    p = wattgpu.predict("NVIDIA H100 SXM5 80GB", LLM, kind="closed_loop", concurrency=clients, max_batch=max_batch)
    assert p.utilization is not None and p.utilization <= 1.0 and not p.overloaded
    assert p.throughput_tok_s <= p.max_qps * p.workload["output_tokens"] * (1 + 1e-9)
    assert any("closed loop saturated" in w for w in p.warnings), p.warnings


def _closed_loop_csv(path: Path, rows: int) -> Path:
    lines = ["llm,gpu,workload,concurrency,max_batch,qps"]
    gpus = ("NVIDIA H100 SXM5 80GB", GPU, "NVIDIA A10")
    for i in range(rows):
        c, b = (1, 8, 256, 4096, 65536)[i % 5], (1, 16, 256)[i // 5 % 3]
        g = gpus[i // 15 % 3]
        lines.append(f"{LLM},{g},closed_loop,{c},{b}," if i % 2 else f"{LLM},{g},server,,{b},{c / 100:g}")
    path.write_text("\n".join(lines) + "\n")
    return path


def _check_utilization(out: Path) -> int:
    import csv

    n = 0
    with out.open() as f:
        for row in csv.DictReader(f):
            if row["error"]:
                continue
            n += 1
            assert float(row["utilization"]) <= 1.0 or row["overloaded"] == "true", row
    return n


def test_a_csv_of_closed_loop_rows_keeps_utilization_and_overload_consistent(tmp_path):
    from wattgpu.batch import predict_csv

    predict_csv(str(_closed_loop_csv(tmp_path / "in.csv", 90)), str(tmp_path / "out.csv"))
    assert _check_utilization(tmp_path / "out.csv") >= 60


@pytest.mark.slow
def test_a_200k_row_csv_of_closed_loop_rows_keeps_utilization_and_overload_consistent(tmp_path):
    from wattgpu.batch import predict_csv

    predict_csv(str(_closed_loop_csv(tmp_path / "in.csv", 200_000)), str(tmp_path / "out.csv"))
    assert _check_utilization(tmp_path / "out.csv") >= 130_000


# ---- configs the runtime cannot model, impossible heads and bits
def _cfg(tmp_path: Path, name: str, **changes) -> Path:
    base = json.loads((REPO / "tests" / "fixtures" / "hf_configs" / "meta-llama--Llama-2-7b-hf.json").read_text())
    base.update(changes)
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(base))
    return path


def test_a_pure_mamba_hybrid_pattern_is_refused_as_documented(tmp_path):
    layers = 32
    path = _cfg(tmp_path, "mamba", model_type="nemotron_h", num_hidden_layers=layers, hybrid_override_pattern="M" * layers)
    with pytest.raises(wattgpu.UnsupportedModelError, match="Mamba"):
        wattgpu.predict(GPU, str(path))
    r = run_cli("predict", "--llm", str(path), "--gpu", GPU, timeout=60)
    assert r.returncode == 2 and "Mamba" in r.stderr and "W" not in r.stdout


@pytest.mark.parametrize("qc, key", [({"quant_method": "gptq", "bits": 0}, "quantization_config.bits"),
                                     ({"quant_method": "awq", "w_bit": -4}, "quantization_config.w_bit"),
                                     ({"quant_method": "gptq", "bits": 4.5}, "quantization_config.bits"),
                                     ({"quant_method": "gptq", "bits": True}, "quantization_config.bits"),
                                     ({"quant_method": "compressed-tensors", "config_groups": {
                                         "g": {"weights": {"num_bits": 0}}}}, "num_bits")])
def test_impossible_quantisation_bits_are_refused_naming_the_key(tmp_path, qc, key):
    path = _cfg(tmp_path, "q", quantization_config=qc)
    with pytest.raises(wattgpu.SpecValidationError, match=key.replace(".", r"\.")):
        wattgpu.predict(GPU, str(path))


def test_kv_heads_that_do_not_divide_the_attention_heads_are_refused(tmp_path):
    path = _cfg(tmp_path, "kv", num_attention_heads=32, num_key_value_heads=6)
    with pytest.raises(wattgpu.SpecValidationError, match="num_kv_heads.*divisor of num_attention_heads"):
        wattgpu.predict(GPU, str(path))


def test_a_hundred_thousand_experts_are_named_not_called_a_unit_slip(tmp_path):
    path = _cfg(tmp_path, "moe", model_type="mixtral", num_local_experts=100_000, num_experts_per_tok=2)
    r = run_cli("predict", "--llm", str(path), "--gpu", GPU, timeout=60)
    assert r.returncode == 2 and "100,000 experts" in r.stderr and "looks like" not in r.stderr, r.stderr


@pytest.mark.parametrize("encoding", ["utf-32", "utf-32-le", "utf-32-be"])
def test_a_utf32_file_is_named_utf32(tmp_path, encoding):
    cfg = _cfg(tmp_path, "c")
    cfg.write_bytes(cfg.read_text().encode(encoding))
    with pytest.raises(wattgpu.ConfigFileError, match="is UTF-32 text"):
        wattgpu.predict(GPU, str(cfg))
    src = tmp_path / "in.csv"
    src.write_bytes(f"llm,gpu\n{LLM},{GPU}\n".encode(encoding))
    r = run_cli("predict", "--input", str(src), "--output", str(tmp_path / "o.csv"), timeout=60)
    assert r.returncode == 2 and "UTF-32" in r.stderr and "UTF-16" not in r.stderr, r.stderr


def test_utf16_is_still_named_utf16(tmp_path):
    cfg = _cfg(tmp_path, "c")
    cfg.write_bytes(cfg.read_text().encode("utf-16"))
    with pytest.raises(wattgpu.ConfigFileError, match="is UTF-16 text"):
        wattgpu.predict(GPU, str(cfg))


# ---- exit 3 for a damaged install in every command, batch included
@pytest.mark.parametrize("on_error", ["skip", "stop"])
def test_a_damaged_bundle_stops_a_csv_run_with_exit_3(tmp_path, on_error):
    b = _copy_bundle(tmp_path)
    m = _manifest(b)
    m["schema_version"] = "1"
    _write_manifest(b, m)
    src = tmp_path / "in.csv"
    src.write_text("llm,gpu\n" + f"{LLM},{GPU}\n" * 6)
    r = run_cli("predict", "--input", str(src), "--output", str(tmp_path / "o.csv"), "--on-error", on_error,
                "--models", str(b), timeout=60)
    assert r.returncode == 3, r.stderr
    assert r.stderr.count("\n") == 1 and "schema_version" in r.stderr and not (tmp_path / "o.csv").exists()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
@pytest.mark.parametrize("cmd", [["gpus"], ["llms"], ["predict", "--llm", LLM, "--gpu", GPU],
                                 ["rank", "--llm", LLM, "--gpus", GPU], ["rank", "--llm", LLM, "--gpus", GPU,
                                                                         "--qps", "20", "--replicas", "auto"]])
def test_every_command_exits_3_on_a_bundle_with_a_fifo_catalog(tmp_path, cmd):
    b = _copy_bundle(tmp_path)
    (b / "specs.json").unlink()
    os.mkfifo(b / "specs.json")
    r = run_cli(*cmd, "--models", str(b), timeout=60)
    assert r.returncode == 3 and "FIFO" in r.stderr, r.stderr


# ---- outputs that cannot be written
@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("cmd", [["gpus"], ["predict", "--llm", LLM, "--gpu", GPU, "--json"]])
def test_stdout_on_a_full_device_is_one_clear_line(cmd):
    import subprocess
    import sys

    from .helpers import SRC_PATH

    with open("/dev/full", "w") as full:
        r = subprocess.run([sys.executable, "-m", "wattgpu.cli", *cmd], stdout=full, stderr=subprocess.PIPE,
                           text=True, env={**os.environ, "PYTHONPATH": SRC_PATH}, cwd=REPO, timeout=60)
    assert r.returncode == 2 and "device is full" in r.stderr and "internal error" not in r.stderr, r.stderr


def test_a_plot_in_a_missing_folder_is_refused_before_any_work(tmp_path):
    target = tmp_path / "no" / "such" / "plot.svg"
    r = run_cli("rank", "--llm", LLM, "--gpus", GPU, "--plot", str(target), timeout=60)
    assert r.returncode == 2 and "folder" in r.stderr and "does not exist" in r.stderr, r.stderr


def test_a_csv_output_on_a_full_device_names_the_full_device(tmp_path, monkeypatch):
    import errno

    from wattgpu import batch

    src = tmp_path / "in.csv"
    src.write_text(f"llm,gpu\n{LLM},{GPU}\n")

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(batch, "_write_rows", full)
    with pytest.raises(wattgpu.ConfigFileError, match="device is full"):
        batch.predict_csv(str(src), str(tmp_path / "out.csv"))

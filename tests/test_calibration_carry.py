"""Issue 39: runs that agree are matched, the GPU's terms carry to its other LLMs, TTFT is applied, power logs
are checked for coverage and idle stretches, file-system mistakes exit 2.

Every measured run and log here is SYNTHETIC: the packaged prediction times a known factor, or a log written
by the test, to check the machinery — never a claim about any GPU.
"""
from __future__ import annotations

import csv
import json
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from wattgpu import Predictor, Workload
from wattgpu.bundle import SCHEMA_FILE, FORMAT_VERSION

from .helpers import run_cli

GPU = "NVIDIA H100 SXM5 80GB"
LLM = "meta-llama/Llama-3.1-8B-Instruct"
OTHER_LLM = "Qwen/Qwen3-8B"
RUN_CAPS = (8, 32, 128)
OTHER_CAPS = (4, 16, 64, 256)


def _wl(cap: int) -> Workload:
    return Workload(max_batch=cap, input_tokens=512, output_tokens=256)


@pytest.fixture(scope="module")
def agreeing(tmp_path_factory) -> Path:
    """SYNTHETIC: three runs at +10 % over the model's power, ITL and TTFT (the issue's newcomer)."""
    d = tmp_path_factory.mktemp("agree")
    base = Predictor()
    with (d / "runs.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["llm", "gpu", "kind", "max_batch", "input_tokens", "output_tokens", "power_w", "itl_s", "ttft_s"])
        for cap in RUN_CAPS:
            p = base.predict(GPU, LLM, _wl(cap))
            w.writerow([LLM, GPU, "offline", cap, 512, 256, repr(p.power_w * 1.1), repr(p.itl_s * 1.1),
                        repr(p.ttft_s * 1.1)])
    res = run_cli("calibrate", "--measurements", str(d / "runs.csv"), "--out", str(d / "bundle"))
    assert res.returncode == 0, res.stderr
    assert "gap closed" in res.stdout and "own share" in res.stdout
    return d / "bundle"


def _ratios(bundle: Path, llm: str, caps: tuple[int, ...]) -> dict[str, np.ndarray]:
    base, cal = Predictor(), Predictor(models=bundle)
    out: dict[str, list[float]] = {"power": [], "itl": [], "ttft": []}
    for cap in caps:
        b, c = base.predict(GPU, llm, _wl(cap)), cal.predict(GPU, llm, _wl(cap))
        tdp = base.catalog.gpu(GPU).tdp_w
        out["power"].append(c.power_w / min(1.1 * b.power_w, tdp))  # a run cannot draw more than the TDP
        out["itl"].append(c.itl_s / (1.1 * b.itl_s))
        out["ttft"].append(c.ttft_s / (1.1 * b.ttft_s))
    return {k: np.array(v) for k, v in out.items()}


def test_runs_that_agree_are_matched_at_their_points(agreeing):
    r = _ratios(agreeing, LLM, RUN_CAPS)
    # issue 39's 2 % on each quantity (power within 1.6 % today: with σ₀ weighted as one pseudo-run on power the fit
    # shrank the power slope and left 2.1 % at cap 128)
    for q in ("power", "itl", "ttft"):
        assert np.all(np.abs(r[q] - 1) <= 0.02), (q, r[q])


def test_runs_that_agree_carry_to_the_llms_other_caps(agreeing):
    r = _ratios(agreeing, LLM, OTHER_CAPS)
    for q in ("power", "itl", "ttft"):  # issue 39's 5 % (each within 1.3 % today)
        assert np.all(np.abs(r[q] - 1) <= 0.05), (q, r[q])


def test_the_gpu_terms_carry_to_its_other_llms_and_the_llm_share_stays_with_its_llm(agreeing):
    base, cal = Predictor(), Predictor(models=agreeing)
    own = cal.predict(GPU, LLM, _wl(32)).power_w / base.predict(GPU, LLM, _wl(32)).power_w
    other_b, other_c = base.predict(GPU, OTHER_LLM, _wl(32)), cal.predict(GPU, OTHER_LLM, _wl(32))
    assert other_c.power_w > other_b.power_w and other_c.itl_s > other_b.itl_s  # the GPU's level and slope carry
    assert other_c.power_w / other_b.power_w < own  # the measured LLM's own share does not
    section = json.loads((agreeing / SCHEMA_FILE).read_text())["calibration"]
    assert set(section["llms"]) == {LLM} and LLM in section["targets"]["power"]["llm"][GPU]
    a100 = "NVIDIA A100 SXM4 40GB"  # a GPU without runs: unchanged
    assert cal.predict(a100, LLM, _wl(32)).power_w == base.predict(a100, LLM, _wl(32)).power_w


def test_ttft_is_applied_alike_on_the_scalar_and_the_vectorised_path(agreeing):
    cal, base = Predictor(models=agreeing), Predictor()
    rows = [(GPU, LLM, _wl(cap)) for cap in (8, 100)] + [(GPU, OTHER_LLM, _wl(16))]
    many = cal.predict_many(rows)
    for (g, m, wl), p in zip(rows, many):
        one = cal.predict(g, m, wl)
        assert one.ttft_s == pytest.approx(p.ttft_s, rel=1e-9)
        assert one.e2e_latency_s == pytest.approx(one.ttft_s + (wl.output_tokens - 1) * one.itl_s, rel=1e-9)
        assert one.ttft_s != base.predict(g, m, wl).ttft_s
    server = Workload(kind="server", qps=2.0, input_tokens=512, output_tokens=256)
    assert cal.predict(GPU, LLM, server).ttft_s != base.predict(GPU, LLM, server).ttft_s


def _stamp_format(bundle: Path, manifest: dict, version: str) -> None:
    """Rewrite each ONNX file's stamped wattgpu.schema_version and its sha256 in the manifest (an older bundle)."""
    import hashlib

    import onnx

    for entry in manifest["models"].values():
        path = bundle / entry["file"]
        model = onnx.load(str(path))
        for prop in model.metadata_props:
            if prop.key == "wattgpu.schema_version":
                prop.value = version
        onnx.save(model, str(path))
        entry["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_format_3_calibrated_bundle_still_loads_without_llm_shares(agreeing, tmp_path):
    import shutil

    old = tmp_path / "v3"
    shutil.copytree(agreeing, old)
    m = json.loads((old / SCHEMA_FILE).read_text())
    sec = m["calibration"]
    del sec["llms"]
    sec["targets"].pop("ttft")
    for f in sec["targets"].values():
        del f["llm"]
    m["schema_version"] = 3
    m.pop("ttft", None)  # format 5's fitted TTFT section (wattgpu.ttft_fit) is not a format-3 key
    _stamp_format(old, m, "3")  # a format-3 bundle's model files carry format 3 (a refit stamps the current one)
    (old / SCHEMA_FILE).write_text(json.dumps(m))
    assert FORMAT_VERSION >= 4
    p = Predictor(models=old).predict(GPU, LLM, _wl(32))
    b, v4 = Predictor().predict(GPU, LLM, _wl(32)), Predictor(models=agreeing).predict(GPU, LLM, _wl(32))
    assert b.power_w < p.power_w < v4.power_w  # the GPU's terms only: no LLM share
    assert p.ttft_s != v4.ttft_s  # no TTFT scale (its serving math reads the calibrated ITL)


def test_out_under_a_regular_file_exits_2_naming_it(tmp_path):
    runs = tmp_path / "runs.csv"
    p = Predictor().predict(GPU, LLM, _wl(32))
    runs.write_text(f"llm,gpu,max_batch,power_w\n{LLM},{GPU},32,{p.power_w:.1f}\n")
    blocker = tmp_path / "file"
    blocker.write_text("x")
    res = run_cli("calibrate", "--measurements", str(runs), "--out", str(blocker / "sub" / "out"))
    assert res.returncode == 2, res.stderr
    assert str(blocker) in res.stderr and "internal error" not in res.stderr


# ---- power logs
def _bench(tmp: Path, end: datetime, duration: float = 120.0) -> Path:
    p = Predictor().predict(GPU, LLM, Workload(kind="closed_loop", concurrency=16, input_tokens=512, output_tokens=256))
    doc = {"date": end.strftime("%Y%m%d-%H%M%S"), "model_id": LLM, "duration": duration, "completed": 200,
           "total_input_tokens": 200 * 512, "total_output_tokens": 200 * 256, "max_concurrency": 16,
           "mean_tpot_ms": p.itl_s * 1e3, "mean_ttft_ms": p.ttft_s * 1e3}
    (tmp / "bench.json").write_text(json.dumps(doc))
    return tmp / "bench.json"


def _smi(tmp: Path, start: datetime, seconds: float, watts, name: str = "power.csv", bad: dict | None = None) -> Path:
    lines = ["timestamp, power.draw [W]"]
    n = int(seconds / 0.2)
    for i in range(n):
        t = start + timedelta(seconds=0.2 * i)
        cell = (bad or {}).get(i, f"{watts(i / n):.2f} W")
        lines.append(f"{t:%Y/%m/%d %H:%M:%S.%f}"[:-3] + f", {cell}")
    (tmp / name).write_text("\n".join(lines) + "\n")
    return tmp / name


END = datetime(2026, 3, 1, 12, 2, 0)


def _calibrate_bench(tmp: Path, log: Path):
    return run_cli("calibrate", "--vllm-bench", str(_bench(tmp, END)), "--nvidia-smi", str(log), "--gpu", GPU,
                   "--out", str(tmp / "out"))


def test_a_log_covering_part_of_the_run_is_refused_with_its_coverage(tmp_path):
    """The issue's case: a log of 11 s of a 120 s run."""
    log = _smi(tmp_path, END - timedelta(seconds=60), 11, lambda f: 450.0)
    res = _calibrate_bench(tmp_path, log)
    assert res.returncode == 2, res.stderr
    assert "covers 11 s" in res.stderr and "< 80%" in res.stderr and str(log) in res.stderr


def test_a_log_covering_the_run_is_accepted_and_idle_stretches_are_warned(tmp_path):
    full = _smi(tmp_path, END - timedelta(seconds=121), 122, lambda f: 450.0, "full.csv")
    res = _calibrate_bench(tmp_path, full)
    assert res.returncode == 0, res.stderr
    assert "warning" not in res.stderr
    stalled = _smi(tmp_path, END - timedelta(seconds=121), 122, lambda f: 80.0 if 0.4 < f < 0.6 else 450.0, "stall.csv")
    res = run_cli("calibrate", "--vllm-bench", str(tmp_path / "bench.json"), "--nvidia-smi", str(stalled), "--gpu", GPU,
                  "--out", str(tmp_path / "out2"))
    assert res.returncode == 0, res.stderr
    assert "are idle" in res.stderr and "24 s" in res.stderr


def test_every_bad_line_of_a_log_is_reported_in_one_pass(tmp_path):
    log = _smi(tmp_path, END - timedelta(seconds=121), 122, lambda f: 450.0,
               bad={5: "abc W", 50: "-3 W", 400: "lots"})
    res = _calibrate_bench(tmp_path, log)
    assert res.returncode == 2, res.stderr
    assert "3 bad lines" in res.stderr
    for line in (7, 52, 402):  # sample i is on line i + 2 (the header is line 1)
        assert f"line {line}:" in res.stderr


@pytest.mark.parametrize("edit, needle", [
    (lambda s: s.pop("llms"), "no key 'llms'"),
    (lambda s: s["targets"]["power"]["llm"][GPU].update({"someone/else": {"offset": 0.1}}), "not in calibration.llms"),
    (lambda s: s["targets"]["power"]["llm"][GPU][LLM].update({"slope": 0.1}), "unknown parameter 'slope'"),
    (lambda s: s["targets"]["ttft"]["gpu"][GPU].update({"scale": 9.0}), "outside"),
    (lambda s: s["llms"][LLM]["fingerprint"].update({"gpu_tdp_w": 1.0}), "unknown column 'gpu_tdp_w'"),
])
def test_a_bad_format_4_section_is_refused_naming_the_key(agreeing, tmp_path, edit, needle):
    import shutil

    from wattgpu.errors import ArtifactError

    bad = tmp_path / "bad"
    shutil.copytree(agreeing, bad)
    m = json.loads((bad / SCHEMA_FILE).read_text())
    edit(m["calibration"])
    (bad / SCHEMA_FILE).write_text(json.dumps(m))
    with pytest.raises(ArtifactError, match=needle):
        Predictor(models=bad).predict(GPU, LLM, _wl(32))

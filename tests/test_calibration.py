"""`wattgpu calibrate`: fitting (shrinkage), the bounded physical correction, the calibrated bundle, the CLI.

Every measured run here is SYNTHETIC: made in the test from the uncalibrated prediction times a known
factor, to check the machinery — never a claim about any GPU.
"""
from __future__ import annotations

import csv
import json
import math
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from wattgpu import Predictor, Workload
from wattgpu import features as F
from wattgpu.bundle import FORMAT_VERSION, SCHEMA_FILE, ModelBundle
from wattgpu.calibration import (BOUNDS, Calibration, GpuCal, TargetFit, fingerprint, fit_params, itl_map, power_map,
                                 write_calibrated)

from .helpers import run_cli, run_py

LLM = "meta-llama/Llama-3.1-8B-Instruct"
GPU = "NVIDIA A100 SXM4 40GB"
BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def _synthetic_runs(path: Path, itl_factor: float, power_factor: float, batches=(8, 32, 128), idle: float | None = None,
                    gpu: str = GPU, llm: str = LLM) -> Path:
    """A runs CSV whose 'measurements' are the packaged prediction × a factor (SYNTHETIC)."""
    pred = Predictor()
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["llm", "gpu", "kind", "max_batch", "input_tokens", "output_tokens", "power_w", "itl_s",
                    "idle_power_w"])
        for b in batches:
            p = pred.predict(gpu, llm, Workload(max_batch=b, input_tokens=512, output_tokens=256))
            w.writerow([llm, gpu, "offline", b, 512, 256, f"{min(p.power_w * power_factor, 399):.6g}",
                        f"{p.itl_s * itl_factor:.6g}", "" if idle is None else idle])
    return path


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("cal")
    runs = _synthetic_runs(d / "runs.csv", itl_factor=1.3, power_factor=0.9, idle=55.0)
    res = run_cli("calibrate", "--measurements", str(runs), "--out", str(d / "bundle"))
    assert res.returncode == 0, res.stderr
    assert "calibrated on 3 runs: changes NVIDIA A100 SXM4 40GB (3 runs) only" in res.stdout
    assert "LORO before" in res.stdout
    return d / "bundle"


# ---- shrinkage
def _fit_level(target, y, pred):
    """MAP level term for runs measuring ``y`` where the model predicts ``pred`` (ITL: floor 0)."""
    y, pred = np.asarray(y, float), np.asarray(pred, float)
    cols = {"roofline_itl_s": np.full(len(y), 1e-9)}
    f = fit_params(target, ("overhead",), y, lambda q: itl_map(pred, q, cols["roofline_itl_s"]))
    return f.gpu, f.sigma


def test_one_run_moves_less_than_ten_and_never_past_the_evidence():
    p1, _ = _fit_level("itl", [1.5], [1.0])
    p10, _ = _fit_level("itl", [1.5] * 10, [1.0] * 10)
    assert 0 < p1["overhead"] < p10["overhead"] < math.log(1.5) + 1e-9


def test_scattered_runs_move_less_than_consistent_ones():
    rng = np.random.default_rng(0)
    tight = 1.5 * np.exp(rng.normal(0, 0.01, 10))
    loose = 1.5 * np.exp(rng.normal(0, 0.6, 10))
    loose *= 1.5 / np.exp(np.mean(np.log(loose)))  # same mean log, more scatter
    pt, st = _fit_level("itl", tight, np.ones(10))
    pl, sl = _fit_level("itl", loose, np.ones(10))
    assert sl > st and 0 < pl["overhead"] < pt["overhead"]


@pytest.mark.parametrize("offset", [-5.0, -0.5, 0.0, 0.5, 5.0])
@pytest.mark.parametrize("slope", [0.0, 1.0])
def test_the_power_map_stays_inside_idle_and_tdp(offset, slope):
    p = np.linspace(50, 450, 81)
    out = power_map(p, {"offset": offset, "slope": slope}, 60.0, 400.0, np.linspace(-3, 3, 81))
    inside = (p > 60) & (p < 400)
    assert np.all((out[inside] > 60) & (out[inside] < 400))
    assert np.array_equal(out[~inside], p[~inside])
    flat = power_map(p, {"offset": offset}, 60.0, 400.0, 0.0)
    assert np.all(np.diff(flat) >= -1e-9)  # monotone in the model's power


@pytest.mark.parametrize("overhead", [-4.0, 0.0, 4.0])
@pytest.mark.parametrize("bandwidth", [-0.6, 0.0, 3.0])
def test_the_itl_map_stays_above_the_floor_and_monotone(overhead, bandwidth):
    floor = np.linspace(0.005, 0.05, 50)  # grows with the batch
    itl = floor + np.linspace(0.002, 0.004, 50)  # excess never falls with the batch
    out = itl_map(itl, {"overhead": overhead, "bandwidth": bandwidth}, floor)
    assert np.all(out > floor) and np.all(np.diff(out) > 0)


def _extreme_bundle(tmp: Path, gpu_name: str) -> Path:
    """A calibrated bundle with parameters at their bounds, to prove the physics holds anyway."""
    base = ModelBundle(None)
    spec = base.catalog.gpu(gpu_name)
    cal = Calibration(runs=3, gpus={spec.name: GpuCal(3, fingerprint(spec), 0.1 * spec.tdp_w, True, 2.0, (0.0, 4.0))},
                      targets={"itl": TargetFit(3, {spec.name: {"overhead": 4.0, "bandwidth": -0.6}}, {"overhead": -4.0},
                                                0.1, {spec.name: 1.0}),
                               "power": TargetFit(3, {spec.name: {"offset": -5.0, "slope": 1.0}}, {"offset": -5.0},
                                                  0.1, {spec.name: 1.0})}, apply_to_other_gpus=True)
    out = tmp / f"extreme_{gpu_name.replace(' ', '_')}"
    write_calibrated(base, cal, out)
    return out


def test_catalog_sweep_keeps_the_physical_bounds(tmp_path):
    """Over every catalog GPU and a batch sweep: ITL ≥ the roofline floor, power ≤ TDP and ≥ idle, both
    monotone in the batch (the uncalibrated models are: tests/test_physics_bounds.py)."""
    base = Predictor()
    cat = base.catalog
    for bundle in (_extreme_bundle(tmp_path, GPU), _extreme_bundle(tmp_path, "NVIDIA H100 SXM5 80GB")):
        cal = Predictor(bundle)
        checked = 0
        for g in cat.gpus:
            for llm in (LLM, "Qwen/Qwen2.5-0.5B-Instruct"):
                m = cat.llm(llm)
                triples = [(g, m, Workload(max_batch=b)) for b in BATCHES]
                new = cal.predict_table(triples)
                ok = np.isfinite(new["power_w"])
                if not ok.any():
                    continue
                checked += 1
                cols = F.columns([(cal.catalog.gpu(g.name), m, w) for _, m, w in triples])
                assert np.all(new["itl_s"][ok] >= cols["roofline_itl_s"][ok] * (1 - 1e-12)), g.name
                assert np.all(new["power_w"][ok] <= g.tdp_w * (1 + 1e-12)), g.name
                assert np.all(new["power_w"][ok] >= cols["idle_power_w"][ok] - 1e-9), g.name
                for key in ("itl_s", "power_w"):  # more load never means less time per step or less power
                    assert np.all(np.diff(new[key][ok]) >= -1e-12 * new[key][ok][1:]), (g.name, llm, key)
        assert checked > 50


# ---- round trip and integrity
def test_round_trip_moves_predictions_toward_the_runs(calibrated):
    wl = Workload(max_batch=32, input_tokens=512, output_tokens=256)
    before = Predictor().predict(GPU, LLM, wl)
    after = Predictor(calibrated).predict(GPU, LLM, wl)
    assert before.itl_s < after.itl_s < before.itl_s * 1.3 * 1.02  # toward the ×1.3 runs
    assert after.power_w < before.power_w
    assert after.calibration is not None and after.calibration["gpu"] == GPU and after.calibration["changed"]
    assert after.calibration["summary"].startswith("calibrated on 3 runs: changes NVIDIA A100 SXM4 40GB (3 runs) only")


def test_other_gpus_change_only_when_asked(calibrated, tmp_path):
    wl = Workload(max_batch=32)
    plain = Predictor().predict("NVIDIA L40S", LLM, wl)
    other = Predictor(calibrated).predict("NVIDIA L40S", LLM, wl)
    assert other.itl_s == plain.itl_s and other.power_w == plain.power_w
    assert "this GPU has no runs: prediction not changed" in other.calibration["summary"]
    runs = _synthetic_runs(tmp_path / "r.csv", 1.3, 0.9)
    res = run_cli("calibrate", "--measurements", str(runs), "--out", str(tmp_path / "o"), "--apply-to-other-gpus")
    assert res.returncode == 0, res.stderr
    assert "other GPUs get the pooled level terms (asked for with --apply-to-other-gpus)" in res.stdout
    moved = Predictor(tmp_path / "o").predict("NVIDIA L40S", LLM, wl)
    assert moved.itl_s > plain.itl_s and "pooled level terms" in moved.calibration["summary"]


def test_the_scalar_and_vectorised_paths_agree(calibrated):
    wl = Workload(max_batch=32, input_tokens=512, output_tokens=256)
    one = Predictor(calibrated).predict(GPU, LLM, wl)
    many = Predictor(calibrated).predict_many([(GPU, LLM, wl)])[0]
    assert many.itl_s == pytest.approx(one.itl_s, rel=1e-12) and many.power_w == pytest.approx(one.power_w, rel=1e-12)


def test_measured_idle_replaces_the_catalogs(calibrated):
    p = Predictor(calibrated).predict(GPU, LLM, Workload(kind="server", qps=0.2))
    assert p.idle_power_w == 55.0 and "measured by the user" in p.idle_power_source
    assert p.calibration["idle_power_w"] == 55.0


def test_cli_json_and_env_use_the_calibrated_bundle(calibrated):
    args = ("predict", "--llm", LLM, "--gpu", GPU, "--max-batch", "32", "--json")
    via_flag = run_cli(*args, "--models", str(calibrated))
    assert via_flag.returncode == 0, via_flag.stderr
    d = json.loads(via_flag.stdout)
    assert d["calibration"]["runs"] == 3 and d["calibration"]["measured_gpus"] == {GPU: 3}
    env = run_py(f"import wattgpu; print(wattgpu.predict({GPU!r}, {LLM!r}, wattgpu.Workload(max_batch=32)).itl_s)",
                 env={"WATTGPU_MODELS": str(calibrated)})
    assert env.returncode == 0, env.stderr
    assert float(env.stdout) == pytest.approx(d["itl_s"], rel=1e-9)
    text = run_cli("predict", "--llm", LLM, "--gpu", GPU, "--models", str(calibrated))
    assert "note: calibrated on 3 runs" in text.stdout


@pytest.mark.parametrize("tamper", ["power.onnx", "specs.json", "manifest"])
def test_a_tampered_calibrated_bundle_exits_3(calibrated, tmp_path, tamper):
    d = tmp_path / "b"
    shutil.copytree(calibrated, d)
    if tamper == "manifest":
        m = json.loads((d / SCHEMA_FILE).read_text())
        m["calibration"]["targets"]["itl"]["surprise"] = 1
        (d / SCHEMA_FILE).write_text(json.dumps(m))
    else:
        data = bytearray((d / tamper).read_bytes())
        data[len(data) // 2] ^= 0xFF
        (d / tamper).write_bytes(bytes(data))
    res = run_cli("predict", "--llm", LLM, "--gpu", GPU, "--models", str(d))
    assert res.returncode == 3, res.stderr
    assert res.stderr.startswith("error:") and "Traceback" not in res.stderr


def test_a_calibrated_bundle_is_not_calibrated_again(calibrated, tmp_path):
    runs = _synthetic_runs(tmp_path / "r.csv", 1.2, 1.0)
    res = run_cli("calibrate", "--measurements", str(runs), "--out", str(tmp_path / "o"), "--models", str(calibrated))
    assert res.returncode == 2 and "already calibrated" in res.stderr


@pytest.mark.parametrize("cells, message", [
    ({"power_w": "-3"}, "column 'power_w'"),
    ({"itl_s": "fast"}, "column 'itl_s'"),
    ({"power_w": "", "itl_s": ""}, "no measurement"),
    ({"itl_s": "0.0001"}, "below the floor of this offline run"),
    ({"itl_s": "20"}, "milliseconds typed as seconds"),
    ({"power_w": "300000"}, "above the TDP"),
    ({"power_w": "0.3"}, "below the idle power"),
    ({"gpu": "NVIDIA Nonexistent"}, "Unknown GPU"),
    ({"max_batch": "0"}, "max_batch"),
    ({"dtype": "fp3"}, "dtype"),
])
def test_bad_runs_get_one_line_errors(tmp_path, cells, message):
    row = {"llm": LLM, "gpu": GPU, "max_batch": "32", "power_w": "300", "itl_s": "0.02", **cells}
    path = tmp_path / "runs.csv"
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(row))
        w.writeheader()
        w.writerow(row)
    res = run_cli("calibrate", "--measurements", str(path), "--out", str(tmp_path / "o"))
    assert res.returncode == 2 and message in res.stderr and "line 2" in res.stderr, res.stderr
    assert res.stderr.count("\n") == 1 and not (tmp_path / "o").exists()


def test_runs_without_measurement_columns_are_refused(tmp_path):
    path = tmp_path / "runs.csv"
    path.write_text(f"llm,gpu\n{LLM},{GPU}\n")
    res = run_cli("calibrate", "--measurements", str(path), "--out", str(tmp_path / "o"))
    assert res.returncode == 2 and "neither a power_w nor an itl_s column" in res.stderr


# ---- from benchmark logs (SYNTHETIC files in the formats vllm and nvidia-smi write)
def _bench(path: Path, **over) -> Path:
    data = {"date": "20250301-120100", "backend": "vllm", "model_id": LLM, "duration": 60.0, "completed": 200,
            "total_input_tokens": 200 * 512, "total_output_tokens": 200 * 256, "request_rate": "inf",
            "max_concurrency": 32, "mean_ttft_ms": 120.0, "mean_tpot_ms": 21.0, "mean_itl_ms": 20.5,
            "median_itl_ms": 19.0, **over}
    data = {k: v for k, v in data.items() if v is not None}
    path.write_text(json.dumps(data))
    return path


def _smi(path: Path) -> Path:
    """Samples before (100 W), inside (300 W, then 320 W) and after (90 W) the 12:00:00–12:01:00 window."""
    lines = ["timestamp, power.draw [W]"]
    lines += [f"2025/03/01 11:59:{s:02d}.000, 100.00 W" for s in range(0, 50, 10)]
    lines += [f"2025/03/01 12:00:{s:02d}.000, {300 if s < 30 else 320:.2f} W" for s in range(5, 60, 5)]
    lines += [f"2025/03/01 12:01:{s:02d}.500, 90.00 W" for s in range(10, 40, 10)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_vllm_bench_and_nvidia_smi_build_a_run(tmp_path):
    from wattgpu.measured import bench_row

    row, note = bench_row(str(_bench(tmp_path / "b.json")), str(_smi(tmp_path / "p.csv")), GPU)
    inside = [300.0] * 5 + [320.0] * 6
    assert float(row["power_w"]) == pytest.approx(sum(inside) / len(inside))
    assert row["kind"] == "closed_loop" and float(row["concurrency"]) == 32.0
    assert float(row["itl_s"]) == pytest.approx(0.021) and float(row["ttft_s"]) == pytest.approx(0.12)
    assert row["input_tokens"] == "512" and row["output_tokens"] == "256" and "11 samples" in note


def test_dcgm_dump_is_averaged(tmp_path):
    from wattgpu.measured import read_power_log

    p = tmp_path / "dcgm.txt"
    p.write_text("#Entity   POWER   GTEMP\nID        W       C\nGPU 0     250.0   60\nGPU 0     270.0   61\n"
                 "#Entity   POWER   GTEMP\nID        W       C\nGPU 0     N/A     61\n")
    assert [w for _, w in read_power_log(str(p))] == [250.0, 270.0]


def test_cli_calibrates_from_benchmark_logs(tmp_path):
    res = run_cli("calibrate", "--vllm-bench", str(_bench(tmp_path / "b.json")), "--nvidia-smi",
                  str(_smi(tmp_path / "p.csv")), "--gpu", GPU, "--out", str(tmp_path / "o"))
    assert res.returncode == 0, res.stderr
    assert "inside the benchmark's window" in res.stderr and (tmp_path / "o" / SCHEMA_FILE).is_file()


@pytest.mark.parametrize("bench, smi, message", [
    ({"completed": None}, None, "has no 'completed'"),
    ({"mean_tpot_ms": None, "mean_itl_ms": None, "median_itl_ms": None}, None, "mean_tpot_ms"),
    ({"duration": "long"}, None, "'duration'"),
    ({"date": "20250301-130000"}, None, "no power sample between"),
    ({}, "timestamp, temperature.gpu\n2025/03/01 12:00:05.000, 50\n", "no power.draw column"),
    ({}, "timestamp, power.draw [W]\n2025/03/01 12:00:05.000, lots\n", "is not a number of watts"),
    ({}, "", "is empty"),
])
def test_bad_benchmark_files_get_clear_errors(tmp_path, bench, smi, message):
    b = _bench(tmp_path / "b.json", **bench)
    s = _smi(tmp_path / "p.csv")
    if smi is not None:
        s.write_text(smi)
    res = run_cli("calibrate", "--vllm-bench", str(b), "--nvidia-smi", str(s), "--gpu", GPU, "--out", str(tmp_path / "o"))
    assert res.returncode == 2 and message in res.stderr, res.stderr
    assert "Traceback" not in res.stderr


def test_benchmark_needs_its_gpu(tmp_path):
    res = run_cli("calibrate", "--vllm-bench", str(_bench(tmp_path / "b.json")), "--out", str(tmp_path / "o"))
    assert res.returncode == 2 and "--vllm-bench needs --gpu" in res.stderr


# ---- runtime only
def test_calibrate_needs_no_training_stack(tmp_path):
    runs = _synthetic_runs(tmp_path / "runs.csv", 1.2, 0.95)
    code = ("import sys, json\n"
            "from wattgpu.predictor import Predictor\n"
            "from wattgpu.measured import runs_from_csv\n"
            "from wattgpu.calibration import calibrate\n"
            f"base = Predictor()\ncal = calibrate(runs_from_csv({str(runs)!r}, base), base.bundle, {str(tmp_path / 'o')!r})\n"
            f"p = Predictor({str(tmp_path / 'o')!r}).predict({GPU!r}, {LLM!r})\n"
            "print(json.dumps({m: m in sys.modules for m in ('xgboost', 'pandas', 'onnx', 'onnxmltools', 'sklearn')}))\n"
            "print(p.calibration['summary'])\n")
    res = run_py(code)
    assert res.returncode == 0, res.stderr
    heavy = json.loads(res.stdout.splitlines()[0])
    assert not any(heavy.values()), heavy
    assert res.stdout.splitlines()[1].startswith("calibrated on 3 runs")


def test_section_round_trips(calibrated):
    m = json.loads((calibrated / SCHEMA_FILE).read_text())
    assert m["schema_version"] == FORMAT_VERSION
    cal = Calibration.from_section(m["calibration"])
    assert cal.to_section() == m["calibration"]
    assert all(BOUNDS["itl"][k][0] <= v <= BOUNDS["itl"][k][1] for k, v in cal.targets["itl"].gpu[GPU].items())
    assert replace(cal, runs=4).summary().startswith("calibrated on 4 runs")


def test_interval_scale_follows_the_runs_scatter():
    from wattgpu.calibration import interval_scales

    y = np.full(10, 100.0)
    half = math.log(1.25)  # an 80 % band of ×0.8 … ×1.25
    tight = interval_scales(["A"] * 10, y, y * 1.001, half)["A"]
    loose = interval_scales(["A"] * 10, y, y * np.array([0.6, 1.6] * 5), half)["A"]
    assert tight < 1.0 < loose <= 2.0
    assert interval_scales(["A"], y[:1], y[:1] * 1.6, half)["A"] < loose  # one run weighs less than ten


def test_a_format_2_calibration_is_refused_with_the_fix(calibrated, tmp_path):
    """Format 2 held one factor per GPU; its section cannot be read as parameters: calibrate again."""
    d = tmp_path / "old"
    shutil.copytree(calibrated, d)
    m = json.loads((d / SCHEMA_FILE).read_text())
    m["schema_version"] = 2
    (d / SCHEMA_FILE).write_text(json.dumps(m))
    res = run_cli("predict", "--llm", LLM, "--gpu", GPU, "--models", str(d))
    assert res.returncode == 3 and "calibrate again" in res.stderr and res.stderr.count("\n") == 1, res.stderr


def test_a_section_with_parameters_out_of_bounds_is_refused(calibrated, tmp_path):
    d = tmp_path / "b"
    shutil.copytree(calibrated, d)
    m = json.loads((d / SCHEMA_FILE).read_text())
    m["calibration"]["targets"]["power"]["gpu"][GPU] = {"offset": 0.1, "slope": -0.4}
    (d / SCHEMA_FILE).write_text(json.dumps(m))
    res = run_cli("predict", "--llm", LLM, "--gpu", GPU, "--models", str(d))
    assert res.returncode == 3 and "slope" in res.stderr and "outside" in res.stderr, res.stderr


def test_the_fit_starts_from_the_predictions_it_corrects(tmp_path):
    """The raw model output a calibration is fitted on equals what uncalibrated predictions use (offline and
    closed-loop runs: busy the whole run), so an empty parameter set reproduces the uncalibrated error.
    Merging issue 32's equal-load rule broke this once: offline runs were fitted on another kind's output."""
    from wattgpu.measured import runs_from_csv

    path = tmp_path / "runs.csv"
    path.write_text(
        "llm,gpu,kind,max_batch,concurrency,output_tokens,power_w,itl_s\n"
        "Qwen/Qwen3-8B,NVIDIA H100 SXM5 80GB,offline,8,,647,427.0,0.0082\n"
        "Qwen/Qwen3-8B,NVIDIA H100 SXM5 80GB,offline,256,,654,632.8,0.0314\n"
        "Qwen/Qwen3-8B,NVIDIA H100 SXM5 80GB,closed_loop,256,32,600,480.0,0.012\n", encoding="utf-8")
    runs = runs_from_csv(str(path), Predictor())
    for target in ("power", "itl"):
        np.testing.assert_allclose(runs.raw_of(target), runs.predicted[target], rtol=1e-9)


def test_the_compiled_load_path_of_a_calibrated_bundle_equals_its_definitions(calibrated):
    """A calibrated bundle's corrections (model outputs, TTFT) are traced with the rest of the load path
    (wattgpu.trace), or the trace is refused: either way the answers are the definitions', bit for bit."""
    from wattgpu import single
    from wattgpu.results import memo_for

    pred = Predictor(calibrated)
    memo = memo_for(pred.bundle)
    g, m = pred.resolve_gpu(GPU), pred.resolve_llm(LLM)
    for wl in (Workload(max_batch=32, input_tokens=512, output_tokens=256), Workload(kind="closed_loop", concurrency=6)):
        got = [pred.predict(g, m, wl) for _ in range(single.JIT_AFTER + 2)]
        assert all(p == pred.predict_specs([(g, m, wl)])[0] for p in got)
        fn = single._compile(pred.bundle, (g, m, wl), memo, single._jit_key((g, m, wl), memo)[1])
        if fn is None:
            continue
        for conc in ((1.0, 3.0, 40.0) if wl.kind == "closed_loop" else (float("nan"),)):
            row = (g, m, wl if conc != conc else Workload(kind="closed_loop", concurrency=conc))
            try:
                replay = fn(conc, *single._runners(pred.bundle).values())
            except single.trace.Deopt:
                continue
            c, numbers, _ = single.numbers_one(pred.bundle, row, memo)
            assert single._same_numbers(replay, (c, numbers, None))

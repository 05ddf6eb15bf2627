"""`wattgpu calibrate` on hostile or awkward measurement files (issue 33): empty, one run, duplicates,
runs that contradict physics, wrong units, NaN, a GPU the catalog lacks (its spec file), several GPUs,
server runs at ordinary rates, dtype / tp / ttft_s columns.

Every measured run here is SYNTHETIC: made in the test from the uncalibrated prediction times a known
factor (or a deliberately wrong value), to check the machinery — never a claim about any GPU.
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from wattgpu import Predictor, Workload
from wattgpu.bundle import SCHEMA_FILE
from wattgpu.measured import runs_from_csv

from .helpers import run_cli

LLM = "meta-llama/Llama-3.1-8B-Instruct"
GPU = "NVIDIA A100 SXM4 40GB"
COLS = ["llm", "gpu", "kind", "max_batch", "qps", "concurrency", "input_tokens", "output_tokens", "dtype", "tp",
        "power_w", "itl_s", "ttft_s", "idle_power_w"]


def _write(path: Path, rows: list[dict]) -> Path:
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLS)
        w.writeheader()
        for r in rows:
            w.writerow({c: r.get(c, "") for c in COLS})
    return path


def _run(gpu=GPU, llm=LLM, itl_f=1.2, power_f=0.95, ttft_f=None, dtype=None, **wl) -> dict:
    """One SYNTHETIC run: the packaged prediction of (gpu, llm, workload) × factors (ITL: its time
    above the roofline floor × ``itl_f``, so a factor below 1 stays physical)."""
    from wattgpu.quant import with_dtype

    kw = {"input_tokens": 512, "output_tokens": 256, **wl}
    pred = Predictor()
    spec = with_dtype(pred.resolve_llm(llm), dtype)
    p = pred.predict(pred.resolve_gpu(gpu), spec, Workload(**kw))
    floor = p.baselines["roofline_itl_s"]
    row = {"llm": llm, "gpu": gpu, **{k: v for k, v in kw.items()}, "power_w": f"{p.power_w * power_f:.6g}",
           "itl_s": f"{floor + (p.itl_s - floor) * itl_f:.6g}", "dtype": dtype or ""}
    if ttft_f is not None:
        row["ttft_s"] = f"{p.ttft_s * ttft_f:.6g}"
    return row


def _calibrate(tmp_path: Path, rows: list[dict], *extra: str):
    path = _write(tmp_path / "runs.csv", rows)
    return run_cli("calibrate", "--measurements", str(path), "--out", str(tmp_path / "out"), *extra)


def _one_line_error(res, needle: str) -> None:
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert res.stderr.count("\n") == 1 and res.stderr.startswith("error:") and needle in res.stderr, res.stderr
    assert "Traceback" not in res.stderr


def test_an_empty_file_is_refused(tmp_path):
    (tmp_path / "runs.csv").write_text("")
    res = run_cli("calibrate", "--measurements", str(tmp_path / "runs.csv"), "--out", str(tmp_path / "o"))
    assert res.returncode == 2 and "Traceback" not in res.stderr and res.stderr.count("\n") == 1
    assert not (tmp_path / "o").exists()


def test_a_header_without_runs_is_refused(tmp_path):
    _one_line_error(_calibrate(tmp_path, []), "no runs")
    assert not (tmp_path / "out").exists()


def test_one_run_calibrates_the_level_only_and_says_no_check_was_possible(tmp_path):
    res = _calibrate(tmp_path, [_run(max_batch=32)])
    assert res.returncode == 0, res.stderr
    assert "1 run: no leave-one-run-out check possible" in res.stdout
    section = json.loads((tmp_path / "out" / SCHEMA_FILE).read_text())["calibration"]
    assert set(section["targets"]["itl"]["gpu"][GPU]) == {"overhead"}
    assert set(section["targets"]["power"]["gpu"][GPU]) == {"offset"}


def test_duplicate_runs_are_runs_and_their_disagreement_widens_the_noise(tmp_path):
    same = [_run(max_batch=32, itl_f=1.2)] * 4
    res = _calibrate(tmp_path, same)
    assert res.returncode == 0, res.stderr
    tight = json.loads((tmp_path / "out" / SCHEMA_FILE).read_text())["calibration"]["targets"]["itl"]
    (tmp_path / "b").mkdir()
    mixed = [_run(max_batch=32, itl_f=f) for f in (0.8, 1.6, 0.8, 1.6)]
    res = _calibrate(tmp_path / "b", mixed)
    assert res.returncode == 0, res.stderr
    loose = json.loads((tmp_path / "b" / "out" / SCHEMA_FILE).read_text())["calibration"]["targets"]["itl"]
    assert loose["sigma"] > tight["sigma"]


@pytest.mark.parametrize("cells, needle", [
    ({"itl_s": "9"}, "milliseconds typed as seconds"),  # 9 ms typed as 9 s
    ({"itl_s": "0.0004"}, "below the floor of this offline run"),  # faster than reading the weights
    ({"power_w": "330000"}, "not mW"),  # milliwatts
    ({"power_w": "0.33"}, "kW typed as W"),  # kilowatts
    ({"power_w": "450"}, "above the TDP"),  # a group's total, or another GPU
    ({"power_w": "nan"}, "column 'power_w'"),
    ({"itl_s": "inf"}, "column 'itl_s'"),
    ({"idle_power_w": "500"}, "at or above the TDP"),
    ({"power_w": "80", "idle_power_w": "90"}, "below the idle power"),
    ({"ttft_s": "80"}, "milliseconds typed as seconds"),
    ({"dtype": "fp3"}, "dtype"),
])
def test_runs_that_contradict_physics_or_units_are_refused_with_the_reason(tmp_path, cells, needle):
    rows = [_run(max_batch=8), {**_run(max_batch=32), **cells}]
    res = _calibrate(tmp_path, rows)
    _one_line_error(res, needle)
    assert "line 3" in res.stderr and not (tmp_path / "out").exists()


def test_server_runs_at_ordinary_rates_calibrate_itl_against_their_own_running_batch(tmp_path):
    """A Poisson server at 0.2–20 req/s runs a small batch: its floor is that batch's, not the cap's."""
    rows = [_run(kind="server", qps=q, max_batch=256, itl_f=1.25) for q in (0.2, 2.0, 20.0)]
    runs = runs_from_csv(str(_write(tmp_path / "r.csv", rows)), Predictor())
    running = [Predictor().predict(GPU, LLM, t[2]).effective_batch for t in runs.triples]
    assert np.allclose(runs.cols["eff_batch"], running) and np.all(runs.cols["eff_batch"] < 0.75 * 256)  # not the cap 256
    assert np.all(runs.measured["itl"] > runs.cols["roofline_itl_s"])
    res = _calibrate(tmp_path, rows)
    assert res.returncode == 0, res.stderr
    itl = json.loads((tmp_path / "out" / SCHEMA_FILE).read_text())["calibration"]["targets"]["itl"]
    assert itl["runs"] == 3 and itl["gpu"][GPU].get("overhead", 0) > 0
    after = Predictor(tmp_path / "out").predict(GPU, LLM, Workload(kind="server", qps=2.0, input_tokens=512,
                                                                   output_tokens=256))
    before = Predictor().predict(GPU, LLM, Workload(kind="server", qps=2.0, input_tokens=512, output_tokens=256))
    assert after.itl_s > before.itl_s


def test_several_gpus_in_one_file_are_calibrated_each_on_its_own_runs(tmp_path):
    other = "NVIDIA L40S"
    rows = [_run(max_batch=b, itl_f=1.3) for b in (8, 32, 128)] + [_run(gpu=other, max_batch=b, itl_f=0.8)
                                                                   for b in (8, 32, 128)]
    res = _calibrate(tmp_path, rows)
    assert res.returncode == 0, res.stderr
    assert f"changes {GPU} (3 runs), {other} (3 runs) only" in res.stdout
    p = json.loads((tmp_path / "out" / SCHEMA_FILE).read_text())["calibration"]["targets"]["itl"]["gpu"]
    assert p[GPU]["overhead"] > 0 > p[other]["overhead"]
    untouched = Predictor(tmp_path / "out").predict("NVIDIA H100 SXM5 80GB", LLM, Workload(max_batch=32))
    assert untouched.itl_s == Predictor().predict("NVIDIA H100 SXM5 80GB", LLM, Workload(max_batch=32)).itl_s


def test_a_gpu_the_catalog_lacks_is_calibrated_from_its_spec_file(tmp_path):
    spec = {"name": "What-if GPU", "tdp_w": 400, "memory_size_gb": 48, "memory_bandwidth_gb_s": 1500,
            "fp16_tflops": 300, "transistors_million": 50000, "release_year": 2024, "memory_type": "HBM3"}
    path = tmp_path / "gpu.json"
    path.write_text(json.dumps(spec))
    rows = [_run(gpu=str(path), max_batch=b, itl_f=1.3, power_f=0.9) for b in (8, 32, 128)]
    res = _calibrate(tmp_path, rows)
    assert res.returncode == 0, res.stderr
    assert "What-if GPU (3 runs)" in res.stdout
    before = Predictor().predict(str(path), LLM, Workload(max_batch=32))
    after = Predictor(tmp_path / "out").predict(str(path), LLM, Workload(max_batch=32))
    assert after.calibration["gpu"] == "What-if GPU" and after.itl_s > before.itl_s


def test_dtype_tp_and_ttft_columns_are_read(tmp_path):
    big = "meta-llama/Llama-3.1-70B-Instruct"
    gpu = "NVIDIA H100 SXM5 80GB"
    rows = [_run(gpu=gpu, llm=big, tp=4, max_batch=b, ttft_f=1.5) for b in (8, 32)]
    rows += [_run(gpu=gpu, llm=LLM, dtype="fp8", max_batch=b, ttft_f=1.5) for b in (8, 32)]
    runs = runs_from_csv(str(_write(tmp_path / "r.csv", rows)), Predictor())
    assert [t[2].tp for t in runs.triples] == [4, 4, 1, 1]
    assert runs.triples[2][1].weight_bytes_per_param == 1.0  # fp8 as served
    assert np.all(np.isfinite(runs.measured["ttft"]))
    res = _calibrate(tmp_path, rows)
    assert res.returncode == 0, res.stderr
    assert "TTFT" in res.stdout and "scale" in res.stdout  # fitted, kept by leave-one-run-out and applied


def test_the_predict_csv_accepts_a_dtype_column(tmp_path):
    path = tmp_path / "in.csv"
    path.write_text(f"llm,gpu,max_batch,dtype\n{LLM},{GPU},32,\n{LLM},{GPU},32,fp8\n")
    res = run_cli("predict", "--input", str(path), "--output", str(tmp_path / "out.csv"))
    assert res.returncode == 0, res.stderr
    rows = list(csv.DictReader((tmp_path / "out.csv").open()))
    assert float(rows[1]["itl_s"]) < float(rows[0]["itl_s"])  # half the weight bytes to read per step


def test_leave_one_run_out_keeps_no_parameters_where_calibration_hurts(tmp_path):
    """Runs scattered around the prediction with no common shift: held-out runs get no better, so the
    ITL correction keeps fewer parameters or none, and says so."""
    rows = [_run(max_batch=b, itl_f=f) for b, f in ((4, 0.7), (8, 1.4), (16, 0.72), (32, 1.38), (64, 0.71))]
    res = _calibrate(tmp_path, rows)
    assert res.returncode == 0, res.stderr
    itl = json.loads((tmp_path / "out" / SCHEMA_FILE).read_text())["calibration"]["targets"]["itl"]
    loro = itl["loro"][GPU]
    assert loro["after"] <= loro["before"] + 1e-9 or loro["kept"] == []
    assert len(itl["gpu"][GPU]) < 2 and ("made held-out runs worse" in res.stdout)


def test_a_vllm_bench_server_run_calibrates_itl_and_reads_ttft(tmp_path):
    """`vllm bench serve --request-rate 2` (SYNTHETIC result JSON): a server run at its own running batch."""
    p = Predictor().predict(GPU, LLM, Workload(kind="server", qps=2.0, input_tokens=512, output_tokens=256))
    bench = {"date": "20250301-120100", "model_id": LLM, "duration": 60.0, "completed": 120,
             "total_input_tokens": 120 * 512, "total_output_tokens": 120 * 256, "request_rate": 2.0,
             "mean_ttft_ms": p.ttft_s * 1.5e3, "mean_tpot_ms": p.itl_s * 1.2e3}
    (tmp_path / "b.json").write_text(json.dumps(bench))
    res = run_cli("calibrate", "--vllm-bench", str(tmp_path / "b.json"), "--gpu", GPU, "--out", str(tmp_path / "o"))
    assert res.returncode == 0, res.stderr
    assert "server run" in res.stderr and "TTFT" in res.stdout
    itl = json.loads((tmp_path / "o" / SCHEMA_FILE).read_text())["calibration"]["targets"]["itl"]
    assert itl["runs"] == 1 and itl["gpu"][GPU]["overhead"] > 0


def test_low_load_server_runs_give_the_idle_power(tmp_path):
    """SYNTHETIC: server runs whose mean power sits 20 W × (1 − busy share) below the prediction, as if the
    GPU idled 20 W below the catalog's figure: the low-load runs (busy ≤ 30 %) recover that idle power."""
    gpu = "NVIDIA H100 SXM5 80GB"
    pred = Predictor()
    rows = []
    for q in (0.05, 0.1, 2.0):
        p = pred.predict(gpu, LLM, Workload(kind="server", qps=q, input_tokens=512, output_tokens=256))
        rows.append({"llm": LLM, "gpu": gpu, "kind": "server", "qps": q, "input_tokens": 512, "output_tokens": 256,
                     "power_w": f"{p.power_w - (1 - p.busy_fraction) * 20:.6g}", "itl_s": f"{p.itl_s:.6g}"})
    catalog_idle = pred.catalog.gpu(gpu).idle_power_w
    runs = runs_from_csv(str(_write(tmp_path / "r.csv", rows)), pred)
    low = runs.idle_measured[np.isfinite(runs.idle_measured)]
    assert len(low) == 2 and np.allclose(low, catalog_idle - 20, atol=0.1)
    res = _calibrate(tmp_path, rows)
    assert res.returncode == 0, res.stderr and "low-load server runs" in res.stdout
    after = Predictor(tmp_path / "out").predict(gpu, LLM, Workload(kind="server", qps=0.05))
    assert after.idle_power_w == pytest.approx(catalog_idle - 20, abs=0.1)

"""TTFT as benchmarks see it (issue 38 item 2): attention FLOPs in the prefill floor, the ``arrival`` input,
the fitted excess and its interval in the bundle's ``ttft`` section (format 5; earlier formats still load),
and the held-out fit of the training side. Synthetic rows here are labelled test fixtures, not measurements."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from wattgpu import ArtifactError, Predictor, Workload, bundle
from wattgpu import features as F
from wattgpu.serving import latency
from wattgpu import ttft_fit
from wattgpu.errors import SpecValidationError

from .test_calibration_carry import _stamp_format

REPO = Path(__file__).resolve().parents[1]
PACKAGED = REPO / "runtime" / "wattgpu" / "models"
LLM = "meta-llama/Llama-3.1-8B-Instruct"
GPU = "NVIDIA H100 SXM5 80GB"


def _cols(llm: str, *tokens: int) -> dict:
    pred = Predictor()
    g, m = pred.catalog.gpu(GPU), pred.catalog.llm(llm)
    return F.columns([(g, m, Workload(input_tokens=t)) for t in tokens])


# ---- attention FLOPs
def test_attention_flops_grow_with_the_prompts_square_and_add_half_at_32k():
    cols = _cols(LLM, 1024, 2048, 32768)
    attn = np.asarray(latency.prefill_attention_flops(cols))
    assert attn[1] / attn[0] == pytest.approx(4.0, rel=1e-6)  # L² (causal pairs L²/2)
    weights = 2.0 * cols["gpu_active_params_b"] * 1e9 * cols["wl_input_tokens"]
    share = attn[2] / weights[2]
    assert 0.4 < share < 0.65  # an 8B model at 32K tokens: about +50 % (4 × 4096 × 32 layers × L²/2)


def test_a_sliding_window_caps_the_attention_of_its_layers():
    cols = _cols(LLM, 32768)
    full = float(np.asarray(latency.prefill_attention_flops(cols))[0])
    windowed = dict(cols, llm_sliding_window=np.array([4096.0]), llm_sliding_window_layers=np.array([16.0]))
    part = float(np.asarray(latency.prefill_attention_flops(windowed))[0])
    assert part < full
    # half the layers attend to 4096 keys at most: their pairs are W·L − W²/2 instead of L²/2
    L, W = 32768.0, 4096.0
    assert part / full == pytest.approx((16 * L * L / 2 + 16 * (W * L - W * W / 2)) / (32 * L * L / 2), rel=1e-9)


def test_the_prefill_floor_includes_attention():
    wl = Workload(kind="closed_loop", concurrency=1, input_tokens=32768)
    p = Predictor().predict(GPU, LLM, wl)
    b = p.ttft_breakdown
    assert b["prefill_attention_s"] > 0.4 * p.baselines["prefill_roofline_s"]
    floor = (p.baselines["prefill_roofline_s"] + b["prefill_attention_s"]) / b["prefill_efficiency"]
    assert b["prefill_s"] >= floor * (1 - 1e-9)


# ---- the arrival input
def test_arrival_must_fit_the_workload_kind():
    assert Workload(kind="closed_loop", concurrency=8, arrival="burst").burst == 1.0
    assert Workload(kind="closed_loop", concurrency=8, arrival="staggered").burst == 0.0
    assert Workload(kind="closed_loop", concurrency=8, num_requests=32, arrival="burst").burst == 0.25
    assert Workload(kind="server", qps=1.0, arrival="poisson").burst == 0.0
    for kw, word in ((dict(kind="offline", arrival="burst"), "offline"),
                     (dict(kind="server", qps=1.0, arrival="burst"), "poisson"),
                     (dict(kind="closed_loop", concurrency=4, arrival="poisson"), "staggered, burst"),
                     (dict(arrival="now"), "auto, poisson, staggered, burst")):
        with pytest.raises(SpecValidationError, match="arrival") as e:
            Workload(**kw)
        assert word in str(e.value)


def test_a_burst_adds_the_fitted_excess_and_nothing_else():
    pred = Predictor()
    fit = ttft_fit.of(pred.bundle)
    stag = pred.predict(GPU, LLM, Workload(kind="closed_loop", concurrency=64))
    burst = pred.predict(GPU, LLM, Workload(kind="closed_loop", concurrency=64, arrival="burst"))
    assert fit.burst_s > 0
    assert burst.ttft_s - stag.ttft_s == pytest.approx(fit.burst_s, rel=1e-9)
    assert burst.itl_s == stag.itl_s and burst.power_w == stag.power_w


def test_ttft_never_falls_with_more_clients_and_its_interval_holds_it():
    pred = Predictor()
    last = 0.0
    for n in (1, 2, 4, 8, 16, 32, 64, 128, 256):
        p = pred.predict(GPU, LLM, Workload(kind="closed_loop", concurrency=n, input_tokens=2048))
        assert p.ttft_s >= last * (1 - 1e-9)
        last = p.ttft_s
        (iv,) = p.ttft_intervals
        assert iv.level == 0.8 and iv.low <= p.ttft_s <= iv.high
        assert iv.low >= min(p.ttft_s, p.baselines["prefill_roofline_s"]) * (1 - 1e-9)


# ---- the bundle section (format 5) and earlier formats
def _copy(tmp_path: Path) -> Path:
    d = tmp_path / "bundle"
    shutil.copytree(PACKAGED, d)
    return d


def _edit(d: Path, fn) -> None:
    data = json.loads((d / bundle.SCHEMA_FILE).read_text())
    fn(data)
    (d / bundle.SCHEMA_FILE).write_text(json.dumps(data))


def test_packaged_bundle_is_format_5_with_a_ttft_section():
    schema = bundle.ModelBundle(PACKAGED).schema
    assert schema.schema_version == bundle.FORMAT_VERSION == 5
    assert schema.ttft.excess_steps > 0 and schema.ttft.interval is not None and schema.ttft.rows > 0


def test_packaged_ttft_method_names_the_modules_that_compute_it():
    """The shipped section's method is what `wattgpu-train fit-ttft` writes today, and every module it names
    exists (a module move leaves no stale name in the artifact: refit with fit-ttft, the numbers unchanged)."""
    import importlib

    from wattgpu_train.ttft import METHOD

    method = json.loads((PACKAGED / bundle.SCHEMA_FILE).read_text())["ttft"]["method"]
    assert method == METHOD
    for name in sorted(set(re.findall(r"wattgpu(?:\.[a-z_]+)+", method))):
        importlib.import_module(name)


def test_a_format_4_bundle_still_loads_without_excess_or_interval(tmp_path):
    d = _copy(tmp_path)

    def to_v4(m: dict) -> None:
        m["schema_version"] = 4
        del m["ttft"]
        _stamp_format(d, m, "4")  # a freshly exported bundle stamps format 5 into its ONNX files too

    _edit(d, to_v4)
    wl = Workload(kind="closed_loop", concurrency=64, arrival="burst")
    old = Predictor(models=d).predict(GPU, LLM, wl)
    new = Predictor().predict(GPU, LLM, wl)
    assert old.ttft_breakdown["ttft_excess_s"] == 0.0 and old.ttft_intervals == ()
    assert new.ttft_s - new.ttft_breakdown["ttft_excess_s"] == pytest.approx(old.ttft_s, rel=1e-9)


@pytest.mark.parametrize("edit, word", [
    (lambda m: m.pop("ttft"), "ttft"),
    (lambda m: m["ttft"].update(excess_steps=-1.0), "excess_steps"),
    (lambda m: m["ttft"].update(burst_s="0.4"), "burst_s"),
    (lambda m: m["ttft"].update(interval=[1.2, 3.0]), "interval"),
    (lambda m: m["ttft"].update(burst_interval=[0.5]), "burst_interval"),
    (lambda m: m["ttft"].update(extra=1), "unknown"),
    (lambda m: m["ttft"].update(rows=True), "rows"),
    # an integer too large for a float (found by the hypothesis fuzz with 1,000 examples)
    (lambda m: m["ttft"].update(burst_interval=[10 ** 400, 2.0]), "burst_interval"),
    (lambda m: m["ttft"].update(interval=[0.5, 10 ** 400]), "interval"),
    (lambda m: m["ttft"].update(excess_steps=10 ** 400), "excess_steps"),
    (lambda m: m["ttft"].update(pcie_comm=-1.0), "pcie_comm"),
    (lambda m: m["ttft"].update(pcie_comm="10"), "pcie_comm"),
])
def test_a_bad_ttft_section_is_refused_naming_the_key(tmp_path, edit, word):
    d = _copy(tmp_path)
    _edit(d, edit)
    with pytest.raises(ArtifactError, match=word):
        Predictor(models=d).predict(GPU, LLM, Workload())


def test_the_pcie_term_adds_on_pcie_tp_groups_only():
    """pcie_comm × the prompt's modelled all-reduce time, on a TP group linked by PCIe; NVLink groups and one
    GPU are untouched (the measured rows that fit the term are GeForce pairs without NVLink)."""
    pred = Predictor()
    fit = ttft_fit.of(pred.bundle)
    assert fit.pcie_comm > 0
    wl = Workload(kind="closed_loop", concurrency=8, input_tokens=2048, tp=2)
    pcie = pred.predict("NVIDIA GeForce RTX 5090", "Qwen/Qwen3-8B", wl)
    part = pcie.ttft_breakdown
    base = fit.excess_steps * part["step_s"] + fit.burst_s * 0.0
    assert part["ttft_excess_s"] == pytest.approx(base + fit.pcie_comm * part["prefill_allreduce_s"], rel=1e-9)
    nvlink = pred.predict(GPU, LLM, wl).ttft_breakdown
    assert nvlink["prefill_allreduce_s"] > 0
    assert nvlink["ttft_excess_s"] == pytest.approx(fit.excess_steps * nvlink["step_s"], rel=1e-9)


def test_a_format_5_section_without_the_pcie_term_reads_as_zero(tmp_path):
    d = _copy(tmp_path)
    _edit(d, lambda m: m["ttft"].pop("pcie_comm"))
    assert bundle.ModelBundle(d).ttft_fit.pcie_comm == 0.0


def test_a_null_ttft_section_means_no_fit(tmp_path):
    d = _copy(tmp_path)
    _edit(d, lambda m: m.update(ttft=None))
    assert bundle.ModelBundle(d).ttft_fit == ttft_fit.NO_FIT


def test_the_section_round_trips():
    fit = ttft_fit.TtftFit(7.0, 0.4, interval=(0.5, 3.0), burst_interval=(0.6, 1.3), level=0.8, rows=87, method="m")
    assert ttft_fit.read_section(json.loads(json.dumps(fit.to_section()))) == fit
    assert fit.factors(1.0) == (0.6, 1.3) and fit.factors(0.25) == (0.5, 3.0)
    assert ttft_fit.TtftFit(interval=(0.5, 3.0)).factors(1.0) == (0.5, 3.0)  # no burst factors: the others'


def test_a_burst_prediction_takes_the_burst_interval():
    pred = Predictor()
    fit = ttft_fit.of(pred.bundle)
    p = pred.predict(GPU, LLM, Workload(kind="closed_loop", concurrency=64, arrival="burst"))
    (iv,) = p.ttft_intervals
    assert fit.burst_interval is not None
    assert iv.high == pytest.approx(p.ttft_s * fit.burst_interval[1], rel=1e-12)


def test_a_saturated_closed_loop_keeps_littles_law():
    """Clients beyond the batch cap wait for a slot; time spent in the excess (away from the engine) is not
    spent queueing, so the cycle (e2e latency) stays clients / request rate."""
    p = Predictor().predict(GPU, LLM, Workload(kind="closed_loop", concurrency=400, max_batch=64))
    rate = p.throughput_tok_s / 256
    assert p.ttft_breakdown["slot_wait_s"] > 0
    assert rate * p.e2e_latency_s == pytest.approx(400, rel=0.01)


# ---- the training side: the fit and its held-out scoring (labelled synthetic fixtures)
def _synthetic(seed: int = 0, steps: float = 6.0, burst_s: float = 0.4, noise: float = 0.05, pcie_comm: float = 0.0):
    pytest.importorskip("scipy")
    from wattgpu_train.ttft import TtftRows

    rng = np.random.default_rng(seed)
    n = 60
    gpu = np.array([f"g{i % 6}" for i in range(n)])
    step = rng.uniform(0.01, 0.05, n)
    burst = (np.arange(n) % 4 == 0).astype(float)
    physics = rng.uniform(0.02, 2.0, n)
    comm = np.where(np.arange(n) % 3 == 1, rng.uniform(0.02, 0.1, n), 0.0)  # a third of the rows: PCIe TP groups
    y = (physics + steps * step + burst_s * burst + pcie_comm * comm) * np.exp(rng.normal(0.0, noise, n))
    src = np.where(burst > 0, "b", "s")
    return TtftRows(y, physics, step, burst, physics / 2, gpu, src, 0, pcie_comm=comm)


def test_fit_recovers_known_terms_from_labelled_synthetic_rows():
    from wattgpu_train.ttft import fit_terms

    rows = _synthetic()
    fit = fit_terms(rows, np.ones(rows.y.shape, dtype=bool))
    assert fit.excess_steps == pytest.approx(6.0, rel=0.25)
    assert fit.burst_s == pytest.approx(0.4, rel=0.25)
    assert fit.pcie_comm < 0.5  # no PCIe term in these rows


def test_fit_recovers_a_known_pcie_all_reduce_term():
    from wattgpu_train.ttft import fit_terms

    rows = _synthetic(pcie_comm=10.0)
    fit = fit_terms(rows, np.ones(rows.y.shape, dtype=bool))
    assert fit.pcie_comm == pytest.approx(10.0, rel=0.25)
    assert fit.excess_steps == pytest.approx(6.0, rel=0.25)


def test_small_samples_get_the_conformal_interval_not_a_narrower_percentile():
    from wattgpu_train.ttft import _conformal_ranks

    assert _conformal_ranks(9) == [0, 8]  # (n+1)·0.9 = 9: the largest of 9 residuals bounds the 80 % interval
    assert _conformal_ranks(99) == [9, 89]
    assert _conformal_ranks(1) == [0, 0]


def test_held_out_predictions_never_see_their_own_gpu():
    from wattgpu_train.ttft import held_out

    rows = _synthetic()
    every = np.ones(rows.y.shape, dtype=bool)
    base = held_out(rows, every)
    poisoned_y = rows.y.copy()
    poisoned_y[rows.gpu == "g0"] *= 100.0
    import dataclasses
    poisoned = held_out(dataclasses.replace(rows, y=poisoned_y), every)
    g0 = rows.gpu == "g0"
    np.testing.assert_allclose(poisoned[g0], base[g0], rtol=1e-9)  # g0's own rows never fit g0's terms
    assert not np.allclose(poisoned[~g0], base[~g0], rtol=1e-3)  # while they do fit the other GPUs'


def test_no_burst_rows_leave_the_burst_term_at_zero():
    import dataclasses

    from wattgpu_train.ttft import fit_terms

    rows = _synthetic()
    calm = dataclasses.replace(rows, burst=np.zeros_like(rows.burst))
    assert fit_terms(calm, np.ones(rows.y.shape, dtype=bool)).burst_s == 0.0

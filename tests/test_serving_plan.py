"""Issue 24: TTFT and end-to-end latency, the SLA search over the batch cap, fleets with headroom, launch
arguments, the decode-step bound and GPU-hour cost — API, CLI text and JSON."""
from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest
from click.testing import CliRunner

from wattgpu.serving import latency
from wattgpu.cli import main
from wattgpu.errors import WattGPUError
from wattgpu.serving.fleet import MAX_UTILIZATION
from wattgpu.predictor import Predictor
from wattgpu.ranking import batch_caps, rank
from wattgpu.workload import Workload

LLM = "meta-llama/Llama-3.1-8B-Instruct"
LLM70 = "meta-llama/Llama-3.1-70B-Instruct"
H200 = "NVIDIA H200 SXM 141GB"
B300 = "NVIDIA B300 SXM6 (HGX B300, Blackwell Ultra)"


@pytest.fixture(scope="module")
def pred() -> Predictor:
    return Predictor()


def _cli(*args: str):
    return CliRunner().invoke(main, list(args))


def _ttft(p) -> float:
    return math.inf if p.ttft_s is None else p.ttft_s


def test_ttft_monotone_in_load_and_above_the_prefill_roofline_over_the_catalog(pred: Predictor) -> None:
    """More load never shortens TTFT (server qps, closed-loop clients), and TTFT is never below the prompt's
    compute roofline; e2e = TTFT + (out − 1) × ITL."""
    cat = pred.catalog
    llm = cat.llm(LLM)
    qps = (0.05, 0.5, 2.0, 5.0, 10.0, 20.0, 40.0, 80.0)
    clients = (1, 4, 16, 64, 256, 1024)
    checked = 0
    for g in cat.gpus:
        rows = [(g, llm, Workload(kind="server", qps=q)) for q in qps]
        rows += [(g, llm, Workload(kind="closed_loop", concurrency=c)) for c in clients]
        rows += [(g, llm, Workload(max_batch=b)) for b in (1, 8, 64, 256)]
        res = pred.predict_specs_safe(rows)
        if any(isinstance(r, WattGPUError) for r in res):
            continue
        checked += 1
        server, loop = res[:len(qps)], res[len(qps):len(qps) + len(clients)]
        for seq in (server, loop):
            t = [_ttft(p) for p in seq]
            assert all(b >= a * (1 - 1e-9) for a, b in zip(t, t[1:])), (g.name, t)
        for p in res:
            roof = p.baselines["prefill_roofline_s"]
            assert p.ttft_s is None or p.ttft_s >= roof * (1 - 1e-12), (g.name, p.workload)
            if p.ttft_s is not None:
                assert p.e2e_latency_s == pytest.approx(p.ttft_s + (p.workload["output_tokens"] - 1) * p.itl_s)
            if p.overloaded:
                assert p.ttft_s is None
            assert p.bound["kind"] in latency.BOUNDS
            assert sum(p.bound[f"{k}_share"] for k in latency.BOUNDS) == pytest.approx(1.0)
    assert checked > 30


def test_ttft_unbounded_when_overloaded_and_json_keys(pred: Predictor) -> None:
    p = pred.predict("NVIDIA L4", LLM, {"kind": "server", "qps": 500})
    assert p.overloaded and p.ttft_s is None and p.e2e_latency_s is None
    d = p.to_dict()
    for k in ("ttft_s", "e2e_latency_s", "ttft_breakdown", "bound"):
        assert k in d
    assert set(d["ttft_breakdown"]) == {"prefill_s", "prefill_queue_s", "slot_wait_s", "prefill_steps", "prefill_allreduce_s",
                                        "prefill_budget_tokens", "prefill_efficiency", "prefill_attention_s",
                                        "ttft_excess_s", "step_s"}
    assert "prefill_roofline_s" in d["baselines"]
    json.dumps(d, allow_nan=False)  # no NaN/inf in the JSON


def test_prefill_budget_follows_vllm_defaults(pred: Predictor) -> None:
    cat = pred.catalog
    assert latency.prefill_budget(cat.gpu("NVIDIA H100 SXM5 80GB"), Workload()) == 8192
    assert latency.prefill_budget(cat.gpu("NVIDIA A100 SXM4 80GB"), Workload()) == 2048  # vLLM excludes A100s
    assert latency.prefill_budget(cat.gpu("NVIDIA L4"), Workload()) == 2048
    assert latency.prefill_budget(cat.gpu("NVIDIA L4"), Workload(max_batch=4096)) == 4096
    long = pred.predict("NVIDIA L4", LLM, {"input_tokens": 8192, "max_batch": 1})
    assert long.ttft_breakdown["prefill_steps"] == 4


def test_prefill_budget_is_a_gpu_trait_a_spec_can_set(pred: Predictor) -> None:
    """The budget is read from the GPU spec (``vllm_batched_tokens``, else vLLM's rule), not from its name
    in the serving code: a GPU JSON that records the figure gets it, a bad figure is refused by name."""
    from dataclasses import replace

    from wattgpu.errors import SpecValidationError

    h100 = pred.catalog.gpu("NVIDIA H100 SXM5 80GB")
    assert h100.vllm_batched_tokens is None and h100.default_batched_tokens == 8192
    own = replace(h100, name="my H100", vllm_batched_tokens=4096)
    assert latency.prefill_budget(own, Workload()) == 4096
    assert latency.prefill_budget(own, Workload(max_batch=8192)) == 8192
    assert pred.predict(own, LLM).ttft_breakdown["prefill_budget_tokens"] == 4096
    with pytest.raises(SpecValidationError, match="vllm_batched_tokens"):
        replace(h100, vllm_batched_tokens=0)


def test_erlang_c_known_values() -> None:
    assert latency.erlang_c(1, 0.5) == pytest.approx(0.5)  # M/M/1: P(wait) = rho
    assert latency.erlang_c(2, 1.0) == pytest.approx(1 / 3)
    assert latency.erlang_c(4, 4.0) == 1.0
    assert latency.server_wait(1.0, 2.0, 1.0) == pytest.approx(0.5 / (2.0 - 1.0))
    assert math.isnan(latency.server_wait(2.0, 2.0, 1.0))  # at capacity: unbounded


def _erlang_c_recursion(servers: int, offered: float) -> float:
    """The Erlang-B recursion as first written (the product formed twice per step)."""
    if offered >= servers:
        return 1.0
    b = 1.0
    for k in range(1, servers + 1):
        b = offered * b / (k + offered * b)
        if b == 0.0:
            break
    rho = offered / servers
    return b / (1.0 - rho * (1.0 - b))


def test_erlang_c_answers_the_recursion_bit_for_bit() -> None:
    """erlang_c forms each step's product once: the recursion's own float (signed zero included), over loads
    from nearly idle to nearly saturated, tiny loads where the recursion underflows, and int loads."""
    rng = random.Random(37)
    cases = [(n, n * rng.random() ** rng.choice((1, 3, 12))) for n in (rng.randint(1, 1024) for _ in range(400))]
    cases += [(n, a) for n in (1, 2, 7, 256) for a in (0.0, 5e-324, 1e-300, 1e-9, 0.5, n * (1 - 1e-15), n, n + 1.0)]
    cases += [(4, 2), (4, 2.0), (300, 1)]
    for n, a in cases:
        want = _erlang_c_recursion(n, a)
        got = latency.erlang_c(n, a)
        assert got == want and math.copysign(1.0, got) == math.copysign(1.0, want), (n, a)
    assert math.copysign(1.0, latency.erlang_c(3, -0.0)) == math.copysign(1.0, _erlang_c_recursion(3, -0.0))
    assert math.isnan(latency.erlang_c(3, math.nan)) and math.isnan(_erlang_c_recursion(3, math.nan))


def test_70b_itl_sla_keeps_2xh200_and_1xb300_at_a_smaller_batch_cap() -> None:
    res = rank(LLM70, Workload(), max_itl_ms=50, tp="auto")
    got = {(c.gpu, c.tp): c for c in res.candidates}
    for key in ((H200, 2), (B300, 1)):
        assert key in got, key
        c = got[key]
        assert c.itl_s * 1e3 <= 50 and c.max_batch < 256
        assert c.launch_args is not None and "--max-num-seqs" in c.launch_args
        assert c.launch_args[c.launch_args.index("--max-num-seqs") + 1] == str(c.max_batch)
        assert c.launch_args[c.launch_args.index("--tensor-parallel-size") + 1] == str(c.tp)
    for x in res.excluded:
        if x.reason_kind == "misses_sla":
            assert x.reason.startswith("misses SLA even at batch 1: ITL ") and x.reason.endswith("> 50 ms")
    d = res.to_dict()
    assert all({"max_batch", "launch_args", "ttft_s", "e2e_latency_s", "bound"} <= set(c) for c in d["candidates"])


def test_cli_rank_prints_ttft_cap_and_the_launch_line() -> None:
    r = _cli("rank", "--llm", LLM70, "--tp", "auto", "--max-itl-ms", "50", "--gpus", f"{H200},B300")
    assert r.exit_code == 0, r.output
    assert "TTFT ms" in r.output and " cap " in r.output
    assert "vllm serve meta-llama/Llama-3.1-70B-Instruct --tensor-parallel-size" in r.output
    r = _cli("rank", "--llm", LLM, "--max-ttft-ms", "0")
    assert r.exit_code == 2 and "max_ttft_ms" in r.output


def test_batch_caps() -> None:
    assert batch_caps(1) == [1]
    assert batch_caps(19) == [1, 2, 4, 8, 16, 19]
    assert batch_caps(256) == [1, 2, 4, 8, 16, 32, 64, 128, 256]


def test_no_fleet_planned_above_the_utilization_target() -> None:
    for target in (None, 0.5):
        res = rank(LLM, Workload(kind="server", qps=20), replicas="auto", max_utilization=target)
        limit = MAX_UTILIZATION if target is None else target
        assert res.max_utilization == limit and res.candidates
        for c in res.candidates:
            assert c.utilization <= limit + 1e-9, (c.gpu, c.replicas, c.utilization)
    a100 = next(c for c in rank(LLM, Workload(kind="server", qps=20), replicas="auto",
                                gpus=["NVIDIA A100 PCIe 40GB"]).candidates)
    assert a100.utilization <= 0.8


def test_fleet_ttft_sla_and_bad_utilization() -> None:
    res = rank(LLM, Workload(kind="server", qps=20), replicas="auto", max_ttft_ms=200, gpus=["NVIDIA L4"])
    for c in res.candidates:
        assert c.ttft_s is not None and c.ttft_s <= 0.2
    for bad in (0, 1.5, float("nan"), -1, True):
        with pytest.raises(WattGPUError, match="max_utilization"):
            rank(LLM, Workload(kind="server", qps=20), replicas="auto", max_utilization=bad)
    with pytest.raises(WattGPUError, match="max_utilization"):
        rank(LLM, Workload(), max_utilization=0.5)


def test_predict_sla_search_and_gpu_hour_cost() -> None:
    r = _cli("predict", "--llm", LLM70, "--gpu", "B300", "--max-itl-ms", "50", "--json", "--usd-per-gpu-hour", "4")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["sla"]["met"] and d["sla"]["max_batch"] < 256 and d["itl_s"] * 1e3 <= 50
    e = d["energy"]
    assert e["usd_per_mtok_gpu_hours"] == pytest.approx(4 * d["tp"] * d["system_s_per_token"] * 1e6 / 3600)
    r = _cli("predict", "--llm", LLM70, "--gpu", "L40S", "--tp", "4", "--max-itl-ms", "50")
    assert r.exit_code == 0 and "not met: misses SLA even at batch 1: ITL" in r.output
    for bad in ("nan", "-1", "5000", "inf"):
        r = _cli("predict", "--llm", LLM, "--gpu", "L4", "--usd-per-gpu-hour", bad)
        assert r.exit_code == 2 and "usd_per_gpu_hour" in r.output, (bad, r.output)
    r = _cli("predict", "--llm", LLM, "--gpu", "L4")
    assert r.exit_code == 0 and "TTFT" in r.output and "end-to-end latency" in r.output and "-bound" in r.output


def test_docs_json_md_names_every_key(pred: Predictor) -> None:
    """docs/json.md documents every key predict and rank print (the new ones of issue 24 included)."""
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[1] / "docs" / "json.md").read_text()
    p = pred.predict("NVIDIA L4", LLM).to_dict()
    r = rank(LLM, Workload(), gpus=["NVIDIA L4"], predictor=pred).to_dict()
    keys = (set(p) | set(p["energy"]) | set(p["ttft_breakdown"]) | set(p["bound"]) | set(p["baselines"])
            | set(r) | set(r["candidates"][0]))
    assert not sorted(k for k in keys if f"`{k}`" not in doc)


def test_a_fixed_replica_count_ranks_the_fleets_within_headroom_first(pred: Predictor) -> None:
    """Issue 40: `rank --replicas 3` listed an A30 at 83 % and an RTX A5000 at 97 % of capacity among the
    fleets within the 80 % headroom; a fixed count reports utilization without enforcing it, so those
    within the headroom come first, as without --replicas."""
    res = rank(LLM, Workload(kind="server", qps=20), replicas=3, predictor=pred)
    util = [c.utilization for c in res.candidates]
    above = [u > MAX_UTILIZATION + 1e-12 for u in util]
    assert any(above) and not all(above)  # the case the issue saw: both kinds present
    first_above = above.index(True)
    assert all(above[first_above:]), util  # every fleet within the headroom before any above it
    assert all("headroom" in " ".join(c.warnings) for c in res.candidates[first_above:])


def test_does_not_fit_suggests_engine_settings_and_groups_that_fit(pred: Predictor) -> None:
    """Issue 40: a near miss suggests the engine share that makes it fit, a GPU that fits as a pair says so
    (and rank says tp auto ranks the groups); each suggestion is checked by the same memory test."""
    from wattgpu.checks import MAX_ENGINE_SHARE

    with pytest.raises(WattGPUError) as err:
        pred.predict("NVIDIA Tesla P100 PCIe 16GB", "Qwen/Qwen2.5-7B-Instruct", Workload())
    assert "raise gpu_memory_utilization to 0.95" in str(err.value) and "(tp=2)" in str(err.value)
    fits = pred.predict("NVIDIA Tesla P100 PCIe 16GB", "Qwen/Qwen2.5-7B-Instruct",
                        Workload(gpu_memory_utilization=MAX_ENGINE_SHARE))
    assert fits.max_concurrency is not None and fits.max_concurrency >= 1
    res = rank(LLM70, Workload(), gpus=["H100 SXM"], tp=1, predictor=pred)
    assert not res.candidates and "tp auto ranks the groups" in res.excluded[0].reason


def test_kept_server_waits_equal_the_recursion() -> None:
    """server_wait keeps recent answers: a repeat (and any rate, zero, NaN or beyond capacity) gives exactly
    what the Erlang recursion gives."""
    rng = np.random.default_rng(5)
    cases = [(float(q), float(m), float(s)) for q, m, s in zip(rng.uniform(0.0, 3.0, 300), rng.uniform(0.1, 3.0, 300),
                                                               rng.choice([0.5, 1.0, 3.0, 37.0, 256.0], 300))]
    cases += [(0.0, 1.0, 4.0), (-0.0, 1.0, 4.0), (math.nan, 1.0, 4.0), (0.5, math.inf, 4.0), (0.5, 1.0, math.nan)]
    for _ in range(2):
        for q, m, s in cases:
            want = latency._wait(q, m, s) if (q < m and math.isfinite(m) and s >= 1) else math.nan
            got = latency.server_wait(q, m, s)
            assert np.float64(got).tobytes() == np.float64(want).tobytes(), (q, m, s)

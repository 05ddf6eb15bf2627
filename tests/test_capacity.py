"""Capacity, overload state and replicas: the checks of issue 12 end to end (API and CLI)."""
from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from wattgpu.serving import capacity
from wattgpu.checks import row_errors
from wattgpu.cli import main
from wattgpu.errors import WattGPUError
from wattgpu.predictor import Predictor
from wattgpu.ranking import rank
from wattgpu.workload import Workload

LLM = "meta-llama/Llama-3.1-8B-Instruct"


@pytest.fixture(scope="module")
def pred() -> Predictor:
    return Predictor()


def _cli(*args: str):
    return CliRunner().invoke(main, list(args))


def test_l4_is_excluded_as_overloaded_with_its_capacity() -> None:
    res = rank(LLM, Workload(kind="server", qps=5), max_itl_ms=200)
    assert "NVIDIA L4" not in [c.gpu for c in res.candidates]
    l4 = next(x for x in res.excluded if x.gpu == "NVIDIA L4")
    assert l4.reason_kind == "overloaded" and "sustains at most" in l4.reason
    assert l4.entry is not None and l4.entry.max_qps < 5
    for c in res.candidates:  # every candidate carries the load
        assert c.max_qps >= 5 and c.utilization <= 1.0
    r = _cli("rank", "--llm", LLM, "--workload", "server", "--qps", "5", "--max-itl-ms", "200")
    assert r.exit_code == 0 and "NVIDIA L4: overloaded: needs 5 req/s, sustains at most" in r.output


def test_a30_at_1000_qps_is_overloaded_and_held_at_capacity(pred: Predictor) -> None:
    offline = pred.predict("NVIDIA A30", LLM, Workload())
    p = pred.predict("NVIDIA A30", LLM, Workload(kind="server", qps=1000))
    assert p.overloaded and p.utilization > 1
    assert p.throughput_tok_s == pytest.approx(p.max_qps * 256)
    assert p.throughput_tok_s <= offline.throughput_tok_s
    assert p.effective_batch <= 256 and p.energy_per_token_j > 0.01
    r = _cli("predict", "--llm", LLM, "--gpu", "NVIDIA A30", "--workload", "server", "--qps", "1000", "--json")
    assert r.exit_code == 0
    d = json.loads(r.stdout)
    assert d["overloaded"] is True and d["max_qps"] == pytest.approx(p.max_qps)
    assert any(w.startswith("overloaded: needs 1000 req/s, sustains at most") for w in d["warnings"])
    r = _cli("predict", "--llm", LLM, "--gpu", "NVIDIA A30", "--workload", "server", "--qps", "1000")
    assert r.exit_code == 0 and "overloaded: needs 1000 req/s, sustains at most" in r.output


@pytest.mark.parametrize("qps", ["100000", "1e9", "1e12"])
def test_any_positive_finite_qps_is_a_prediction_or_overload(qps: str) -> None:
    r = _cli("predict", "--llm", LLM, "--gpu", "NVIDIA A30", "--qps", qps, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["overloaded"] is True


def test_overload_boundary_is_the_capacity(pred: Predictor) -> None:
    cap = pred.predict("NVIDIA H100 SXM5 80GB", LLM, Workload(kind="server", qps=1)).max_qps
    below = pred.predict("NVIDIA H100 SXM5 80GB", LLM, Workload(kind="server", qps=cap * 0.99))
    above = pred.predict("NVIDIA H100 SXM5 80GB", LLM, Workload(kind="server", qps=cap * 1.01))
    assert not below.overloaded and below.throughput_tok_s == pytest.approx(cap * 0.99 * 256)
    assert above.overloaded and above.throughput_tok_s == pytest.approx(cap * 256)
    assert below.throughput_tok_s <= above.throughput_tok_s


def test_every_prediction_reports_capacity(pred: Predictor) -> None:
    for wl in (Workload(), Workload(kind="server", qps=0.5), Workload(kind="closed_loop", concurrency=8)):
        p = pred.predict("NVIDIA A100 SXM4 80GB", LLM, wl)
        assert p.max_qps > 0 and p.max_concurrency >= 1 and p.utilization > 0
        d = p.to_dict()
        assert {"max_qps", "utilization", "max_concurrency", "overloaded"} <= set(d)
    assert pred.predict("NVIDIA A100 SXM4 80GB", LLM, Workload()).utilization == 1.0


def test_closed_loop_concurrency_cut_by_memory_is_reported(pred: Predictor) -> None:
    p = pred.predict("NVIDIA A30", LLM, Workload(kind="closed_loop", concurrency=64, input_tokens=4096))
    assert p.max_concurrency < 64 and p.effective_batch == p.max_concurrency
    assert any(f"concurrency 64 cut to {p.max_concurrency} sequences" in w for w in p.warnings)


def test_capacity_under_sla_is_at_most_capacity(pred: Predictor) -> None:
    from wattgpu import features as F

    triples = [(g, pred.resolve_llm(LLM), Workload(kind="server", qps=1)) for g in pred.catalog.gpus[:12]]
    ok = [t for t, e in zip(triples, row_errors(triples)[0]) if e is None]
    cols = F.columns(ok)
    free = capacity.capacity_table(pred._evaluate, ok, cols, learned=False)
    import numpy as np

    sla = capacity.capacity_table(pred._evaluate, ok, cols, learned=False, max_itl_s=np.full(len(ok), 0.05))
    assert np.all(sla["max_qps"] <= free["max_qps"]) and np.all(free["max_qps"] > 0)
    assert np.all((sla["max_qps"] == 0) | (sla["itl_s"] <= 0.05))


def test_replicas_auto_lists_replicas_and_fleet_power(pred: Predictor) -> None:
    res = rank(LLM, Workload(kind="server", qps=20), max_itl_ms=50, replicas="auto", predictor=pred)
    assert res.candidates and res.replicas == "auto"
    fleet = [c.fleet_power_w for c in res.candidates]
    assert fleet == sorted(fleet)
    for c in res.candidates[:8]:
        assert c.qps_per_replica == pytest.approx(20 / c.replicas)
        assert c.fleet_power_w == pytest.approx(c.replicas * c.power_w)
        assert c.itl_s * 1e3 <= 50 and c.utilization <= 1.0
        if c.replicas > 1:  # one replica fewer would not carry the load within the SLA
            p = pred.predict(c.gpu, LLM, Workload(kind="server", qps=20 / (c.replicas - 1)))
            assert p.overloaded or p.itl_s * 1e3 > 50, c.gpu
    d = json.loads(json.dumps(res.to_dict()))
    assert "even" in d["fleet_assumption"] and {"replicas", "fleet_power_w", "qps_per_replica"} <= set(d["candidates"][0])
    r = _cli("rank", "--llm", LLM, "--qps", "20", "--max-itl-ms", "50", "--replicas", "auto")
    assert r.exit_code == 0 and "repl" in r.output and "fleet W" in r.output and "split evenly" in r.output


def test_fixed_replicas_exclude_what_they_cannot_carry(pred: Predictor) -> None:
    res = rank(LLM, Workload(kind="server", qps=20), replicas=1, predictor=pred)
    for c in res.candidates:
        assert c.replicas == 1 and c.max_qps >= 20
    assert any(x.reason_kind == "overloaded" and x.reason.startswith("1 replicas:") for x in res.excluded)


@pytest.mark.parametrize("args,field", [
    (["rank", "--llm", LLM, "--qps", "0"], "qps"),
    (["rank", "--llm", LLM, "--qps", "-3"], "qps"),
    (["rank", "--llm", LLM, "--qps", "nan"], "qps"),
    (["predict", "--llm", LLM, "--gpu", "A30", "--qps", "inf"], "qps"),
    (["rank", "--llm", LLM, "--qps", "20", "--replicas", "0"], "replicas"),
    (["rank", "--llm", LLM, "--qps", "20", "--replicas", "1.5"], "replicas"),
    (["rank", "--llm", LLM, "--replicas", "auto"], "replicas"),
    (["rank", "--llm", LLM, "--dtype", "int7"], "dtype"),
    (["predict", "--llm", LLM, "--gpu", "A30", "--kv-cache-dtype", "int4"], "kv-cache-dtype"),
])
def test_bad_input_is_one_line_naming_the_field(args: list[str], field: str) -> None:
    r = _cli(*args)
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and field in lines[0]


def test_api_replicas_validation() -> None:
    with pytest.raises(WattGPUError, match="replicas"):
        rank(LLM, Workload(kind="server", qps=1), replicas=0)
    with pytest.raises(WattGPUError, match="replicas"):
        rank(LLM, Workload(kind="server", qps=1), replicas=math.nan)


def test_batch_csv_carries_capacity_columns(tmp_path) -> None:
    import csv

    from wattgpu.batch import predict_csv

    src, dst = tmp_path / "in.csv", tmp_path / "out.csv"
    src.write_text(f"llm,gpu,workload,qps,kv_cache_dtype\n{LLM},NVIDIA A30,server,1000,\n{LLM},NVIDIA A30,offline,,fp8\n")
    assert predict_csv(str(src), str(dst), predictor=Predictor()) == (2, 0)
    over, off = list(csv.DictReader(dst.open()))
    assert over["overloaded"] == "true" and float(over["max_qps"]) < 1000 and float(over["utilization"]) > 1
    assert off["overloaded"] == "false" and float(off["utilization"]) == 1.0 and int(off["max_concurrency"]) > 0


def test_sub_batch_itl_by_hand() -> None:
    """Batch 4 whose learned ITL (50 ms) is worse than running it as two sub-batches of 2 (15 ms each, so
    30 ms per token): the ITL is bounded at 4 / (2 / 0.015) = 30 ms. A row whose own point is best keeps
    its ITL; grid points above the row's batch do not count."""
    from wattgpu.serving.capacity import sub_batch_itl

    grid_b = np.array([[1.0, 2.0, 4.0], [1.0, 2.0, 4.0], [1.0, 2.0, 4.0]])
    grid_i = np.array([[0.010, 0.015, 0.050], [0.010, 0.012, 0.014], [0.010, 0.004, 0.014]])
    got = sub_batch_itl(np.array([0.050, 0.014, 0.010]), np.array([4.0, 4.0, 1.0]), grid_b, grid_i)
    assert got[0] == pytest.approx(0.030)
    assert got[1] == 0.014
    assert got[2] == 0.010  # the 2-sequence point (faster) is above this row's batch of 1


@pytest.mark.parametrize("learned", [False, True])
def test_power_in_the_grid_pass_equals_power_at_the_chosen_points(pred: Predictor, monkeypatch: pytest.MonkeyPatch,
                                                                    learned: bool) -> None:
    """capacity_table evaluates power on the whole grid in the ITL pass for a few set-ups and only at the chosen
    points for more (ONE_PASS_MAX_SETUPS): both ways give every output bit for bit, over set-up counts on
    both sides of the switch, varied workloads, TP and an SLA."""
    from wattgpu import features as F

    llms = [pred.resolve_llm(m) for m in (LLM, "Qwen/Qwen2.5-0.5B-Instruct", "mistralai/Mixtral-8x7B-Instruct-v0.1")]
    wls = [Workload(), Workload(max_batch=64, input_tokens=1024, output_tokens=512),
           Workload(kind="closed_loop", concurrency=16), Workload(max_batch=8, engine="tgi"), Workload(tp=2)]
    triples = [(g, m, w) for i, g in enumerate(pred.catalog.gpus[::3]) for m in llms for w in wls[i % len(wls):][:2]]
    ok = [t for t, e in zip(triples, row_errors(triples)[0]) if e is None]
    assert len(ok) > 40
    for n in (1, 2, 3, 5, 40):
        rows = ok[n:2 * n]
        cols = F.columns(rows)
        sla = np.where(np.arange(len(rows)) % 2 == 0, 0.05, np.nan)
        got = []
        for limit in (0, 10**9):  # two passes always, one pass always
            monkeypatch.setattr(capacity, "ONE_PASS_MAX_SETUPS", limit)
            with np.errstate(all="ignore"):
                got.append([capacity.capacity_table(pred._evaluate, rows, cols, learned, max_itl_s=s)
                            for s in (None, sla)])
        for a, b in zip(*got):
            assert a.keys() == b.keys()
            for k in a:
                x, y = np.asarray(a[k]), np.asarray(b[k])
                assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes(), (n, k)


@pytest.mark.parametrize("learned", [False, True])
def test_set_ups_differing_in_their_cap_share_their_grids_bit_for_bit(pred: Predictor, learned: bool) -> None:
    """The batch caps an SLA search tries (1, 2, 4, … 256 of one set-up) evaluate each shared grid point once
    (``classes``): every capacity field is the same, bit for bit, as with each set-up's grid on its own, over
    GPUs, LLMs, workloads, TP, memory-bound limits and an SLA; and fewer rows reach the models."""
    from dataclasses import replace

    from wattgpu import features as F
    from wattgpu.results import cap_classes

    llms = [pred.resolve_llm(m) for m in (LLM, "Qwen/Qwen2.5-0.5B-Instruct", "codellama/CodeLlama-70b-hf")]
    wls = [Workload(), Workload(kind="closed_loop", concurrency=16, input_tokens=2048),
           Workload(kind="server", qps=2.0, output_tokens=64), Workload(tp=2)]
    base = [(g, m, w) for i, g in enumerate(pred.catalog.gpus[::4]) for m in llms for w in wls[i % 2::2]]
    triples = [(g, m, replace(w, max_batch=b)) for g, m, w in base for b in (1, 2, 4, 8, 16, 32, 64, 128, 256)]
    rows = [t for t, e in zip(triples, row_errors(triples)[0]) if e is None]
    assert len(rows) > 300
    cols = F.columns(rows)
    classes = cap_classes(pred.bundle, cols)
    assert classes is not None and len(set(classes.tolist())) * 5 < len(rows)
    sla = np.where(np.arange(len(rows)) % 3 == 0, 0.04, np.nan)
    for s in (None, sla):
        counts, got = [], []
        for c in (None, classes):
            n = [0]

            def evaluate(columns: dict, targets: Any = None, n: list = n) -> dict:
                n[0] += len(columns["wl_max_batch"])
                return pred._evaluate(columns, targets)
            with np.errstate(all="ignore"):
                got.append(capacity.capacity_table(evaluate, rows, cols, learned, max_itl_s=s, classes=c))
            counts.append(n[0])
        a, b = got
        assert a.keys() == b.keys()
        for k in a:
            x, y = np.asarray(a[k]), np.asarray(b[k])
            assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes(), k
        assert counts[1] * 2 < counts[0], counts


@pytest.mark.parametrize("qps", [1e30, 1.7976931348623157e308])
def test_replicas_auto_for_a_rate_near_the_float_limit_is_overloaded_not_a_crash(pred: Predictor, qps: float) -> None:
    """qps / (capacity x max utilization) overflows to inf at the largest float: the fleet stops at MAX_REPLICAS
    and says overloaded, as it does for a merely huge rate (found by tests/test_properties.py)."""
    from wattgpu.serving.fleet import MAX_REPLICAS

    res = rank("allenai/OLMo-2-1124-13B-Instruct", Workload(kind="server", qps=qps), gpus=["NVIDIA Jetson AGX Orin 64GB"],
               replicas="auto", predictor=pred)
    assert not res.candidates
    (x,) = res.excluded
    assert x.reason_kind == "overloaded" and f"needs {qps / MAX_REPLICAS:.4g} req/s" in x.reason

"""Sense sweep (issue 32, item 9): every catalog GPU × six LLMs × offline / server / closed loop, clients
1–512 × batch caps 1–256, tensor parallel where the group fits; the vectorised path (``results.core``).

Zero rows may break the plain-sense contracts:

- throughput never above capacity (``throughput ≤ max_qps × output tokens``);
- a closed loop obeys Little's law over the whole loop: clients = request rate × (slot wait + time in a slot);
- the running batch never above the batch cap, nor above the clients of a closed loop;
- TTFT never below one decode step (the step that computes the first token also decodes the running batch);
- offline at batch cap b and a closed loop of b clients under the same cap (the same running batch)
  give the same power and ITL.

The default tier runs a subsample (two GPUs of each memory class, caps and clients on a coarse grid); the
full sweep is in the slow tier.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from wattgpu import assemble, results
from wattgpu.serving import capacity
from wattgpu.checks import row_errors
from wattgpu.predictor import Predictor
from wattgpu.workload import Workload

LLMS = ("Qwen/Qwen2.5-0.5B-Instruct", "meta-llama/Llama-3.1-8B-Instruct", "google/gemma-2-9b-it",
        "Qwen/Qwen3-30B-A3B-Instruct-2507", "meta-llama/Llama-3.1-70B-Instruct", "mistralai/Mistral-7B-Instruct-v0.3")
CLIENTS_FULL = (1, 2, 3, 4, 8, 16, 32, 64, 100, 128, 256, 400, 512)
CAPS_FULL = (1, 2, 4, 8, 16, 32, 64, 128, 256)
CLIENTS_QUICK = (1, 3, 16, 100, 512)
CAPS_QUICK = (1, 4, 64, 256)
QPS = (0.05, 0.5, 5.0, 50.0)
REL = 1e-9


@pytest.fixture(scope="module")
def pred() -> Predictor:
    return Predictor()


def _rows(pred: Predictor, gpus: list[Any], clients: tuple[int, ...], caps: tuple[int, ...]) -> list[tuple]:
    cat = pred.catalog
    llms = [cat.llm(name) for name in LLMS if name in {m.name for m in cat.llms}]
    assert len(llms) >= 6
    rows = []
    for g in gpus:
        for m in llms:
            for tp in (1, 2, 4, 8):
                for cap in caps:
                    base = Workload(max_batch=cap, tp=tp)
                    rows.append((g, m, base))
                    rows.extend((g, m, replace(base, kind="closed_loop", concurrency=float(n))) for n in clients)
                    rows.extend((g, m, replace(base, kind="server", qps=q)) for q in QPS)
    errors, _ = row_errors(rows)
    return [r for r, e in zip(rows, errors) if e is None]


def _numbers(pred: Predictor, rows: list[tuple]) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    _, cols = row_errors(rows)
    cols = assemble.take(cols, np.arange(len(rows)), len(rows))
    numbers, _ = results.core(pred.bundle, pred._evaluate, rows, cols)
    keep = ~numbers["not_finite"]
    return numbers, cols | {"keep": keep}


def _check(pred: Predictor, rows: list[tuple]) -> None:
    n, cols = _numbers(pred, rows)
    keep = cols["keep"]
    assert keep.mean() > 0.95  # almost every fitting row is predictable
    kind = np.array([w.kind for _, _, w in rows])
    cap = np.array([w.max_batch for _, _, w in rows], dtype=float)
    clients = np.array([w.concurrency or np.nan for _, _, w in rows], dtype=float)
    out = cols["wl_output_tokens"]

    over = keep & (n["throughput_tok_s"] > n["max_qps"] * out * (1 + REL))
    assert not over.any(), f"{over.sum()} rows serve above capacity, e.g. {_name(rows, over)}"

    above_cap = keep & (n["effective_batch"] > cap * (1 + REL))
    assert not above_cap.any(), f"{above_cap.sum()} rows run a batch above the cap, e.g. {_name(rows, above_cap)}"
    closed = keep & (kind == "closed_loop")
    above_clients = closed & (n["effective_batch"] > clients * (1 + REL))
    assert not above_clients.any()

    # Little's law over the closed loop: clients = request rate × (slot wait + time in a slot)
    rate = n["throughput_tok_s"] / out
    in_slot = capacity.request_s(cols, n["itl_s"])
    little = rate * (n["slot_wait_s"] + in_slot)
    broken = closed & ~np.isclose(little, clients, rtol=1e-6)
    assert not broken.any(), (f"{broken.sum()} closed-loop rows break Little's law, e.g. {_name(rows, broken)}: "
                              f"{little[broken][:3]} vs {clients[broken][:3]}")
    # clients beyond the running batch wait; none wait while every client has a slot
    assert not (closed & (clients > n["effective_batch"] * 1.01) & ~(n["slot_wait_s"] > 0)).any()

    ttft = n["ttft_s"]
    bounded = keep & np.isfinite(ttft)
    short = bounded & (ttft < n["itl_s"] * (1 - REL))
    assert not short.any(), f"{short.sum()} rows have TTFT below one decode step, e.g. {_name(rows, short)}"
    assert not (bounded & (ttft < n["prefill_roofline_s"] * (1 - REL))).any()
    e2e_short = bounded & (n["e2e_latency_s"] < ttft)
    assert not e2e_short.any()

    # offline at cap b = a closed loop of b clients under cap b: the same running batch, the same answer
    index = {(id(g), id(m), w.tp, w.max_batch, w.kind, w.concurrency): k for k, (g, m, w) in enumerate(rows)}
    pairs = [(k, index[(id(g), id(m), w.tp, w.max_batch, "closed_loop", float(w.max_batch))])
             for k, (g, m, w) in enumerate(rows)
             if w.kind == "offline" and (id(g), id(m), w.tp, w.max_batch, "closed_loop", float(w.max_batch)) in index]
    assert len(pairs) > 10
    a, b = np.array(pairs).T
    both = keep[a] & keep[b]
    for key in ("effective_batch", "power_w", "itl_s", "throughput_tok_s"):
        assert np.allclose(n[key][a][both], n[key][b][both], rtol=1e-9), key


def _name(rows: list[tuple], mask: np.ndarray) -> str:
    g, m, w = rows[int(np.argmax(mask))]
    return f"{g.name} | {m.name} | {w.kind} cap {w.max_batch} clients {w.concurrency} qps {w.qps} tp {w.tp}"


def _quick_gpus(pred: Predictor) -> list[Any]:
    by_memory = sorted(pred.catalog.gpus, key=lambda g: g.memory_size_gb)
    pick = np.linspace(0, len(by_memory) - 1, 8).round().astype(int)
    return [by_memory[i] for i in sorted(set(pick.tolist()))]


def test_sense_sweep_subsample(pred: Predictor) -> None:
    _check(pred, _rows(pred, _quick_gpus(pred), CLIENTS_QUICK, CAPS_QUICK))


@pytest.mark.slow
def test_sense_sweep_every_gpu(pred: Predictor) -> None:
    _check(pred, _rows(pred, list(pred.catalog.gpus), CLIENTS_FULL, CAPS_FULL))


@pytest.mark.parametrize("clients, cap", [(4, 1), (400, 256)])
def test_issue_examples_queue_beyond_the_cap(pred: Predictor, clients: int, cap: int) -> None:
    """The issue's two cases: 4 clients at cap 1 and 400 at cap 256 on an H100 SXM5 (Llama-3.1-8B). The
    running batch is the cap, the rest wait, and the clients' cycle (e2e latency) obeys Little's law."""
    p = pred.predict("NVIDIA H100 SXM5 80GB", "meta-llama/Llama-3.1-8B-Instruct",
                     {"kind": "closed_loop", "concurrency": clients, "max_batch": cap})
    rate = p.throughput_tok_s / 256
    assert p.effective_batch == cap and rate <= p.max_qps * (1 + 1e-9)
    assert p.ttft_breakdown["slot_wait_s"] > 0 and p.e2e_latency_s is not None
    assert rate * p.e2e_latency_s == pytest.approx(clients, rel=0.01)

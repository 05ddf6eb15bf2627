"""The server solve on one row of floats (the one-row path) takes the vectorised solve's
steps: the same answers and convergence flags on smooth, stepped, flat, diverging and NaN request times."""
from __future__ import annotations

import math

import numpy as np
import pytest

from wattgpu import physics


def _smooth(L):
    return 2.0 + 0.5 * L


def _flat(L):
    return 15.3 + 0.0 * L


def _stepped(L):  # a learned T that jumps near capacity: the iteration oscillates, bisection finishes
    return 1.0 + 0.9 * L + 3.0 * (L > 20.0)


def _diverging(L):
    return 1.0 + L


def _nan_beyond(L):
    return np.where(L > 50.0, math.nan, 1.0 + 0.01 * L) if isinstance(L, np.ndarray) else (
        math.nan if L > 50.0 else 1.0 + 0.01 * L)


CASES = [(_smooth, 0.5, None), (_smooth, 1.5, 64.0), (_flat, 0.017, None), (_flat, 0.3, 10.0),
         (_stepped, 1.0, 64.0), (_stepped, 1.05, 40.0), (_diverging, 2.0, None), (_diverging, 2.0, 64.0),
         (_nan_beyond, 40.0, 80.0), (_nan_beyond, 0.5, None)]


@pytest.mark.parametrize("fn,qps,upper", CASES)
def test_one_row_solve_equals_the_vectorised_solve(fn, qps: float, upper: float | None) -> None:
    calls: list[float] = []

    def one(L: float) -> float:
        calls.append(L)
        return float(fn(L))

    got, ok = physics.solve_server_concurrency(qps, one, iters=30, upper=upper)
    want, want_ok = physics.solve_server_concurrency(
        np.array([qps]), lambda L, idx=None: np.asarray(fn(np.asarray(L, dtype=np.float64)), dtype=np.float64),
        iters=30, active_rows=True, upper=None if upper is None else np.array([upper]))
    assert ok == bool(want_ok[0])
    assert np.float64(got).tobytes() == np.float64(want[0]).tobytes() or (math.isnan(got) and math.isnan(want[0]))
    assert calls  # it did evaluate the request time


def test_one_row_solve_meets_littles_law_where_it_converges() -> None:
    L, ok = physics.solve_server_concurrency(0.5, lambda L: 2.0 + 0.5 * L)
    assert ok and L == pytest.approx(0.5 * (2.0 + 0.5 * L), rel=1e-5)
    L, ok = physics.solve_server_concurrency(1.0, lambda L: 1.0 + 0.9 * L + 3.0 * (L > 20.0), iters=30, upper=64.0)
    assert ok and L >= 1.0 * (1.0 + 0.9 * L + 3.0 * (L > 20.0)) * (1 - 1e-9)  # on the side L ≥ λ·T(L)


def _solve_spy(gpu: str, llm: str, qps: float):
    """The one-row server solve of a catalog row: its request-time function, rate, answer and evaluations."""
    import wattgpu
    from wattgpu import Workload

    pred = wattgpu.Predictor()
    real, seen = physics.solve_server_concurrency, {}

    def spy(rate, request_time, *args, **kwargs):
        calls: list[float] = []

        def counted(L):
            calls.append(L)
            return request_time(L)
        out = real(rate, counted, *args, **kwargs)
        seen.update(T=request_time, rate=rate, answer=out, calls=calls, upper=kwargs.get("upper"))
        return out

    physics.solve_server_concurrency = spy
    try:
        pred.predict(pred.catalog.gpu(gpu), pred.catalog.llm(llm), Workload(kind="server", qps=qps))
    finally:
        physics.solve_server_concurrency = real
    return seen


@pytest.mark.parametrize("gpu,llm,qps", [("NVIDIA H20", "meta-llama/Llama-3.1-8B-Instruct", 20.0),
                                         ("NVIDIA A100 SXM4 40GB", "meta-llama/Llama-3.1-8B-Instruct", 20.0),
                                         ("NVIDIA GeForce RTX 3090", "Qwen/Qwen2.5-0.5B-Instruct", 20.0),
                                         ("NVIDIA A30", "meta-llama/Llama-3.1-8B-Instruct", 6.0)])
def test_a_catalog_server_row_sits_on_the_first_crossing(gpu: str, llm: str, qps: float) -> None:
    """The learned request time steps, so L = λ·T(L) can have several roots; the answer is the smallest (the
    load an empty server fills up to): Little's law holds there on the safe side, and a scan below finds no
    earlier point where L ≥ λ·T(L)."""
    s = _solve_spy(gpu, llm, qps)
    L, ok = s["answer"]
    T, lam = s["T"], s["rate"]
    assert ok and L >= lam * T(L) * (1 - 1e-9) and L <= lam * T(L) * (1 + 1e-5) + 1e-9
    scan = np.linspace(1e-3, L * (1 - 1e-3), 300)
    assert all(x < lam * T(float(x)) for x in scan), "an earlier crossing was skipped"


def test_a_light_load_takes_a_few_evaluations() -> None:
    """The bracketed secant solve: a moderate load on a smooth piece of T takes a handful of request-time
    evaluations (the damped iteration it replaced took ~19)."""
    s = _solve_spy("NVIDIA A30", "meta-llama/Llama-3.1-8B-Instruct", 0.5)
    assert s["answer"][1] and len(s["calls"]) <= 6, s["calls"]

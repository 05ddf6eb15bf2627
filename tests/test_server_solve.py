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

"""The Poisson server's concurrency: the smallest root of Little's law L = λ·T(L), exactly.

``T(L)`` is a request's time in the system at mean concurrency ``L`` (prefill + output tokens × the
learned ITL at the busy batch, :func:`wattgpu.serving.capacity.request_time`). The capacity table has already
evaluated ``T`` on its grid of concurrencies (:data:`wattgpu.serving.capacity.BATCH_GRID` below the batch limit, and the limit), so
``g(L) = L − λ·T(L)`` is known there for free: the first grid point with ``g ≥ 0`` bounds the smallest
root from above, and no root lies below ``λ · min T(grid)``.

1. **Climb**: from that lower bound, the fixed-point step ``L ← λ·T(L)`` (one ITL evaluation each)
   rises towards the smallest root and, while ``T`` does not fall with the load, never passes it: the
   root a load rising from zero reaches (a tree model's ``T`` steps, so ``g`` can cross zero more than
   once). Where ``λ·dT/dL`` is small (most loads) it meets Little's law in a few steps; near capacity
   it crawls. (A secant through the last two points below the line was tried instead: it jumps over
   the narrow excursions of a stepped ``T`` and lands on a later root, as Illinois from the grid does.)
2. **Illinois**: rows still open after :data:`CLIMB_STEPS` (near capacity the climb slows down), or
   whose step crossed the line, are finished by regula falsi with the Illinois rule between the last
   point below the line and the first above it (superlinear where ``T`` is smooth, at least
   bisection-like across a step).

Each row stops when

* ``|g(L)| ≤ rtol · L``: Little's law holds to ``rtol`` (the answer is that ``L``), or
* the bracket is narrower than ``rtol`` of its upper end: ``T`` steps across the line ``L = λ·T(L)``
  there and the answer is the upper end, where ``L ≥ λ·T(L)`` (so the served rate λ·output tokens never
  exceeds batch ÷ ITL).

The same steps run on arrays (rows solved together, each row frozen once done, so its answer does not
depend on which rows share the batch; only rows still open are evaluated) and on one row of floats,
giving the same bits (IEEE arithmetic on float64 either way).
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

CLIMB_STEPS = 40  # fixed-point steps from below before the Illinois steps take over
RTOL = 1e-9  # Little's law residual |L − λ·T(L)| / L, or the bracket width on a step, at the answer
MAX_STEPS = 100  # Illinois steps per row (a step of T takes about 30 bisection-like steps)


def solve_concurrency(qps: Any, request_time_s: Callable[..., Any], grid_conc: Any, grid_req: Any,
                      rtol: float = RTOL, max_steps: int = MAX_STEPS) -> tuple[Any, Any]:
    """Smallest root of L = λ·T(L) per row; returns (L, solved).

    ``qps`` (λ, at most the row's capacity): an array of rows, or a float for one row. ``grid_conc`` /
    ``grid_req``: the capacity grid's concurrencies (ascending) and T there, (rows × points) arrays, or
    sequences for one row. ``request_time_s(L, idx)`` gives T of rows ``idx`` at ``L`` on arrays;
    ``request_time_s(L)`` on one float. A grid point within ``rtol`` of the line counts as on it (λ at
    capacity: the capacity's own operating point). ``solved`` is False for rows ``max_steps`` did not
    finish (their L is the bracket's upper end) and rows whose climb found no root while no grid point
    is on or above the line (T not finite there, or λ beyond capacity; their L is the last grid point)."""
    if isinstance(qps, float):
        return _solve_one_row(qps, request_time_s, grid_conc, grid_req, rtol, max_steps)
    q = np.atleast_1d(np.asarray(qps, dtype=np.float64))
    gc = np.atleast_2d(np.asarray(grid_conc, dtype=np.float64))
    a, fa, b, fb, lo, out, done, solved = _bracket(q, gc, np.atleast_2d(np.asarray(grid_req, dtype=np.float64)),
                                                   rtol)
    return _solve_rows(q, request_time_s, lo, a, fa, b, fb, out, done, solved, gc[:, -1], rtol, max_steps)


def _bracket(q: np.ndarray, gc: np.ndarray, gr: np.ndarray, rtol: float) -> tuple[np.ndarray, ...]:
    """(a, g(a), b, g(b)) bracketing each row's smallest root on the grid (b = inf where no grid point is
    on or above the line), the climb's start ``lo``, and (answer, done, solved) (λ = 0: L = 0)."""
    rows = np.arange(q.size)
    with np.errstate(invalid="ignore"):
        g = gc - q[:, None] * gr
        above = g >= -rtol * gc
    first = np.argmax(above, axis=1)
    has = above[rows, first]
    b = np.where(has, gc[rows, first], np.inf)  # none on the line: the climb alone may still find a root
    fb = np.where(has, g[rows, first], np.nan)
    below = has & (first > 0)
    a = np.where(below, gc[rows, first - 1], 0.0)
    fa = np.where(below, g[rows, first - 1], -q * gr[:, 0])
    zero = ~(q > 0.0)
    done = zero.copy()
    out = np.where(zero, 0.0, np.nan)
    with np.errstate(invalid="ignore"):
        lo = q * np.fmin.reduce(gr, axis=1)  # T ≥ its grid minimum, so no root lies below λ·min T
    return a, fa, b, fb, lo, out, done, zero.copy()


def _solve_one_row(qps: float, request_time_s: Callable[[float], float], grid_conc: Any, grid_req: Any,
                   rtol: float, max_steps: int) -> tuple[float, bool]:
    """:func:`solve_concurrency` of one row: :func:`_bracket` on floats (the same operations, so the
    same bits; numpy on a one-row array costs more than the row's whole solve), then :func:`_solve_one`."""
    if not qps > 0.0:
        return 0.0, True
    gc = grid_conc.tolist() if isinstance(grid_conc, np.ndarray) else [float(v) for v in grid_conc]
    gr = grid_req.tolist() if isinstance(grid_req, np.ndarray) else [float(v) for v in grid_req]
    a, fa, b, fb = 0.0, -qps * gr[0], np.inf, math.nan
    prev_c, prev_g = math.nan, math.nan
    for j, (c, r) in enumerate(zip(gc, gr)):
        g = c - qps * r
        if g >= -rtol * c:  # the first grid point on or above the line (NaN: not)
            b, fb = c, g
            if j > 0:
                a, fa = prev_c, prev_g
            break
        prev_c, prev_g = c, g
    finite = [r for r in gr if r == r]
    lo = qps * min(finite) if finite else math.nan  # np.fmin.reduce: the least non-NaN value
    return _solve_one(qps, request_time_s, lo, a, fa, b, fb, gc[-1], rtol, max_steps)


def _solve_one(qps: float, request_time_s: Callable[[float], float], x: float, a: float, fa: float, b: float,
               fb: float, last: float, rtol: float, max_steps: int) -> tuple[float, bool]:
    """:func:`_solve_rows` on one row of floats (the same operations, so the same bits)."""
    for _ in range(CLIMB_STEPS):
        if not (x > 0.0 and x < b):
            break
        fx = x - qps * request_time_s(x)
        if abs(fx) <= rtol * x:
            return x, True
        if fx < 0.0:
            if x > a:
                a, fa = x, fx
            x = x - fx  # = λ·T(x)
        else:
            b, fb = x, fx
            break
    if b == np.inf:  # nothing on or above the line: unsolved, at the grid's last point
        return last, False
    return _illinois_one(qps, request_time_s, a, fa, b, fb, rtol, max_steps)


def _solve_rows(q: np.ndarray, request_time_s: Callable[[np.ndarray, np.ndarray], np.ndarray], x: np.ndarray,
                a: np.ndarray, fa: np.ndarray, b: np.ndarray, fb: np.ndarray, out: np.ndarray, done: np.ndarray,
                solved: np.ndarray, last: np.ndarray, rtol: float, max_steps: int) -> tuple[np.ndarray, np.ndarray]:
    """The climb on the open rows, then :func:`_illinois_rows`."""
    climbing = ~done.copy()
    for _ in range(CLIMB_STEPS):
        with np.errstate(invalid="ignore"):
            climbing &= (x > 0.0) & (x < b)
        idx = np.flatnonzero(climbing)
        if idx.size == 0:
            break
        xi = x[idx]
        with np.errstate(invalid="ignore"):
            fx = xi - q[idx] * request_time_s(xi, idx)
            hit = np.abs(fx) <= rtol * xi
            neg = ~hit & (fx < 0.0)
            raise_a = neg & (xi > a[idx])
        pos = ~hit & ~neg
        out[idx[hit]], done[idx[hit]], solved[idx[hit]] = xi[hit], True, True
        a[idx] = np.where(raise_a, xi, a[idx])
        fa[idx] = np.where(raise_a, fx, fa[idx])
        b[idx] = np.where(pos, xi, b[idx])
        fb[idx] = np.where(pos, fx, fb[idx])
        x[idx] = np.where(neg, xi - fx, xi)  # = λ·T(x)
        climbing[idx] = neg
    stuck = ~done & (b == np.inf)  # nothing on or above the line: unsolved, at the grid's last point
    out[stuck], done[stuck] = last[stuck], True
    return _illinois_rows(q, request_time_s, a, fa, b, fb, out, done, solved, rtol, max_steps)


def _falsi(a: Any, fa: Any, b: Any, fb: Any) -> Any:
    """The regula falsi point of [a, b]; the midpoint where it is not strictly inside (NaN included)."""
    x = b - fb * (b - a) / (fb - fa)
    inside = (x > a) & (x < b)
    if isinstance(inside, (bool, np.bool_)):
        return x if inside else 0.5 * (a + b)
    return np.where(inside, x, 0.5 * (a + b))


def _illinois_one(qps: float, request_time_s: Callable[[float], float], a: float, fa: float, b: float, fb: float,
                  rtol: float, max_steps: int) -> tuple[float, bool]:
    """:func:`_illinois_rows` on one row of floats (the same operations, so the same bits)."""
    side = 0
    for _ in range(max_steps):
        if abs(fb) <= rtol * b or b - a <= rtol * b:
            return b, True
        x = _falsi(a, fa, b, fb)
        fx = x - qps * request_time_s(x)
        if abs(fx) <= rtol * x:
            return x, True
        if fx < 0.0:
            a, fa = x, fx
            if side < 0:
                fb = 0.5 * fb
            side = -1
        else:
            b, fb = x, fx
            if side > 0:
                fa = 0.5 * fa
            side = 1
    return b, bool(b - a <= rtol * b)


def _illinois_rows(qps: np.ndarray, request_time_s: Callable[[np.ndarray, np.ndarray], np.ndarray], a: np.ndarray,
                   fa: np.ndarray, b: np.ndarray, fb: np.ndarray, out: np.ndarray, done: np.ndarray,
                   solved: np.ndarray, rtol: float, max_steps: int) -> tuple[np.ndarray, np.ndarray]:
    """Regula falsi (Illinois) steps on the open rows until Little's law holds to ``rtol`` or the
    bracket closes on a step (answer: its upper end, where L ≥ λ·T(L))."""
    side = np.zeros(qps.size)
    for _ in range(max_steps):
        with np.errstate(invalid="ignore"):
            end = ~done & ((np.abs(fb) <= rtol * b) | (b - a <= rtol * b))
        out[end], done[end], solved[end] = b[end], True, True
        idx = np.flatnonzero(~done)
        if idx.size == 0:
            break
        ai, fai, bi, fbi = a[idx], fa[idx], b[idx], fb[idx]
        with np.errstate(invalid="ignore", divide="ignore"):
            x = _falsi(ai, fai, bi, fbi)
            fx = x - qps[idx] * request_time_s(x, idx)
            hit = np.abs(fx) <= rtol * x
            neg = ~hit & (fx < 0.0)
        pos = ~hit & ~neg
        si = side[idx]
        out[idx[hit]], done[idx[hit]], solved[idx[hit]] = x[hit], True, True
        a[idx] = np.where(neg, x, ai)
        fa[idx] = np.where(neg, fx, np.where(pos & (si > 0), 0.5 * fai, fai))
        b[idx] = np.where(pos, x, bi)
        fb[idx] = np.where(pos, fx, np.where(neg & (si < 0), 0.5 * fbi, fbi))
        side[idx] = np.where(neg, -1.0, np.where(pos, 1.0, si))
    rest = ~done
    out[rest] = b[rest]
    with np.errstate(invalid="ignore"):
        solved[rest] = b[rest] - a[rest] <= rtol * b[rest]
    return out, solved

"""The Poisson-server concurrency solve (wattgpu.serving.solve): Little's law holds at every answer (or
the answer sits on a step of T, with the line crossed between two points 2e-9 apart), the answer is the
smallest root, one row of floats takes the vectorised solve's steps (same bits), and the catalog's
server rows all meet Little's law at the concurrency they are predicted at."""
from __future__ import annotations

import math

import numpy as np
import pytest

from wattgpu import Predictor, Workload, assemble
from wattgpu.serving import capacity, server
from wattgpu import features as F
from wattgpu.results import capacities
from wattgpu.serving.solve import RTOL, solve_concurrency

from .helpers import assert_rows_equal_alone

GRID = np.array([1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0])  # concurrencies, as a capacity grid


def _smooth(L):
    return 2.0 + 0.5 * L


def _flat(L):
    return 15.3 + 0.0 * L


def _stepped(L):  # a learned T that jumps near capacity: the line is crossed on the step
    return 1.0 + 0.9 * L + 3.0 * (L > 20.0)


def _step_down(L):  # T steps down at L = 10 across the line L = λT (λ = 1): no exact root, answer 10
    return np.where(L < 10.0, 12.0, 8.0) if isinstance(L, np.ndarray) else (12.0 if L < 10.0 else 8.0)


def _three_roots(L):  # g = L − 20·T crosses zero at 14.3, back below at 16, again at ~16.03 (a real catalog shape)
    return 0.7 + 0.0013 * L + 0.086 * (L >= 16.0)


def _nan_beyond(L):
    return np.where(L > 50.0, math.nan, 1.0 + 0.01 * L) if isinstance(L, np.ndarray) else (
        math.nan if L > 50.0 else 1.0 + 0.01 * L)


CASES = [(_smooth, 0.5), (_smooth, 1.5), (_flat, 0.017), (_flat, 0.3), (_stepped, 1.0), (_stepped, 0.5),
         (_step_down, 1.0), (_three_roots, 20.0), (_nan_beyond, 40.0), (_nan_beyond, 0.5)]


def _rows(fn, qps: float) -> tuple[np.ndarray, np.ndarray]:
    return np.array([qps]), np.asarray(fn(GRID), dtype=np.float64)[None, :] * np.ones((1, 1))


def _check_littles_law(L: float, qps: float, fn) -> None:
    """Little's law to RTOL at L, or L on a step: on or above the line at L, below it just under L."""
    g = L - qps * float(fn(L))
    if abs(g) <= RTOL * L:
        return
    under = L * (1.0 - 2.0 * RTOL)
    assert g >= 0.0 and under - qps * float(fn(under)) < 0.0, (L, g)


@pytest.mark.parametrize("fn,qps", CASES)
def test_one_row_solve_equals_the_vectorised_solve_and_meets_littles_law(fn, qps: float) -> None:
    calls: list[float] = []

    def one(L: float) -> float:
        calls.append(L)
        return float(fn(L))

    q, req = _rows(fn, qps)
    got, ok = solve_concurrency(qps, one, tuple(GRID), tuple(req[0]))
    want, want_ok = solve_concurrency(q, lambda L, idx: np.asarray(fn(np.asarray(L)), dtype=np.float64),
                                      GRID[None, :], req)
    assert ok == bool(want_ok[0])
    assert np.float64(got).tobytes() == np.float64(want[0]).tobytes()
    if fn is _nan_beyond and qps == 40.0:  # T is not finite at every grid point on the line: refused as unsolved
        return
    assert ok and calls
    _check_littles_law(got, qps, fn)


def test_hand_computed_roots() -> None:
    # T(L) = 2 + 0.5·L s, λ = 0.5/s: L = 0.5·(2 + 0.5 L) → L = 4/3
    L, ok = solve_concurrency(0.5, _smooth, tuple(GRID), tuple(_smooth(GRID)))
    assert ok and L == pytest.approx(4.0 / 3.0, rel=1e-9)
    # constant service time: L = λ·T exactly (0.017 × 15.3 = 0.2601)
    L, ok = solve_concurrency(0.017, _flat, tuple(GRID), tuple(_flat(GRID)))
    assert ok and L == pytest.approx(0.2601, rel=1e-12)
    # T steps down across the line at L = 10: the answer is the step, on the side L ≥ λ·T(L)
    L, ok = solve_concurrency(1.0, _step_down, tuple(GRID), tuple(_step_down(GRID)))
    assert ok and L == pytest.approx(10.0, rel=1e-8) and L >= _step_down(L)


def test_the_smallest_root_is_the_answer() -> None:
    """Several roots between two grid points (a stepped T): the load rising from zero stops at the first."""
    L, ok = solve_concurrency(20.0, _three_roots, tuple(GRID), tuple(_three_roots(GRID)))
    first = 0.7 * 20.0 / (1.0 - 0.0013 * 20.0)  # 14.37…, below the step at 16
    assert ok and L == pytest.approx(first, rel=1e-9)


def test_rows_are_solved_independently_of_each_other() -> None:
    """A row's answer does not depend on which rows share the batch (bit for bit)."""
    fns = [_smooth, _stepped, _three_roots, _flat]
    qps = np.array([1.5, 1.0, 20.0, 0.3])
    req = np.stack([np.asarray(f(GRID), dtype=np.float64) for f in fns])

    def t(L, idx):
        return np.array([float(fns[i](x)) for x, i in zip(np.asarray(L).tolist(), np.asarray(idx).tolist())])

    together, ok = solve_concurrency(qps, t, np.tile(GRID, (4, 1)), req)
    assert ok.all()
    for k in range(4):
        alone, _ = solve_concurrency(qps[k:k + 1], lambda L, idx, k=k: t(L, np.full(len(L), k)),
                                     GRID[None, :], req[k:k + 1])
        assert together[k].tobytes() == alone[0].tobytes()


@pytest.fixture(scope="module")
def pred() -> Predictor:
    return Predictor()


def test_catalog_server_rows_meet_littles_law(pred: Predictor) -> None:
    """Every catalog GPU × three LLMs × four rates within capacity: the solved concurrency L satisfies
    L = λ·T(L) to RTOL (T re-evaluated here through the models), or sits on a step of T."""
    cat = pred.catalog
    llms = [cat.llm(n) for n in ("Qwen/Qwen2.5-0.5B-Instruct", "meta-llama/Llama-3.1-8B-Instruct",
                                 "google/gemma-2-9b-it")]
    rows = [(g, m, Workload(kind="server", qps=q)) for g in cat.gpus for m in llms for q in (0.017, 0.33, 4.0, 20.0)]
    good = [r for r, p in zip(rows, pred.predict_specs_safe(rows)) if not isinstance(p, Exception)]
    cols = F.columns(good)

    def evaluate(at, targets=None):
        return assemble.evaluate(pred.bundle, at, targets)

    learned = "server" in pred.bundle.schema.domain.get("kinds", ())
    cap = capacities(pred.bundle, evaluate, good, cols, learned)
    mix = server.server_mix(evaluate, good, cols, learned, cap["limit"], cap)
    qps = np.array([w.qps for _, _, w in good])
    L = np.array([mix[k]["concurrency"] for k in range(len(good))])
    within = ~np.array([mix[k]["overloaded"] for k in range(len(good))])
    assert within.sum() > 300 and all(mix[k]["converged"] for k in range(len(good)))
    idx = np.flatnonzero(within)

    def T(conc):
        return capacity.request_time(evaluate, cols, idx, conc, cap["limit"][idx], learned, ("itl",))["request_s"]

    g = L[idx] - qps[idx] * T(L[idx])
    exact = np.abs(g) <= RTOL * L[idx]
    under = L[idx] * (1.0 - 2.0 * RTOL)
    on_step = (g >= 0.0) & (under - qps[idx] * T(under) < 0.0)
    assert np.all(exact | on_step), [good[i][0].name for i in idx[~(exact | on_step)]]
    assert exact.sum() > 0.9 * idx.size  # steps are the exception


@pytest.mark.parametrize("req", [
    [math.nan, 3.0, 5.0, 9.0, 20.0, 40.0, 80.0],  # T not finite at the first grid point
    [0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5],  # flat: the line crossed between grid points
    [64.0, 64.0, 64.0, 64.0, 64.0, 64.0, 64.0],  # no grid point on or above the line
    [math.nan] * 7,
])
@pytest.mark.parametrize("qps", [0.0, 0.9, 1.0, 3.0, math.nan])
def test_one_row_bracket_on_floats_equals_the_array_bracket(req: list, qps: float) -> None:
    """The one-row solve brackets on floats (no numpy on one-row arrays): the same answer, bit for bit."""
    fn = lambda L: float(np.interp(L, GRID, np.nan_to_num(np.asarray(req), nan=100.0)))  # noqa: E731
    got, ok = solve_concurrency(qps, fn, tuple(GRID), tuple(req))
    want, want_ok = solve_concurrency(np.array([qps]), lambda L, idx: np.array([fn(x) for x in np.asarray(L)]),
                                      GRID[None, :], np.array([req]))
    assert ok == bool(want_ok[0])
    assert np.float64(got).tobytes() == np.float64(want[0]).tobytes()


def _bits(x: object) -> object:
    return np.asarray(x, dtype=np.float64).tobytes() if isinstance(x, (float, np.ndarray)) else x


def _cap_rows(pred: Predictor) -> list:
    """Catalog GPUs × two LLMs × three rates × every batch cap the SLA search tries (rows that differ in their
    cap only), plus a TP-2 group and rows whose rate overloads the GPU."""
    from wattgpu.ranking import batch_caps

    cat = pred.catalog
    llms = [cat.llm(n) for n in ("Qwen/Qwen2.5-0.5B-Instruct", "meta-llama/Llama-3.1-8B-Instruct")]
    rows = [(g, m, Workload(kind="server", qps=q, max_batch=b, tp=tp)) for g in cat.gpus[::3] for m in llms
            for q in (0.05, 0.5, 30.0) for tp in (1, 2) for b in batch_caps(256)]
    return [r for r, p in zip(rows, pred.predict_specs_safe(rows)) if not isinstance(p, Exception)]


def test_rows_differing_in_their_cap_share_evaluations_with_the_same_answers(pred: Predictor) -> None:
    """server_mix with cap classes (each (class, concurrency) evaluated once) gives every row's solved state
    bit for bit as evaluating each row on its own: the fast path only re-indexes the same model rows."""
    good = _cap_rows(pred)
    cols = F.columns(good)
    assert not assemble.reads(pred.bundle, "wl_max_batch")
    classes = F.cap_classes(cols)
    assert len(np.unique(classes)) < len(good) / 4  # caps of one set-up share a class

    def evaluate(at, targets=None):
        return assemble.evaluate(pred.bundle, at, targets)

    learned = "server" in pred.bundle.schema.domain.get("kinds", ())
    cap = capacities(pred.bundle, evaluate, good, cols, learned)
    alone = server.server_mix(evaluate, good, cols, learned, cap["limit"], cap)
    shared = server.server_mix(evaluate, good, cols, learned, cap["limit"], cap, classes)
    assert any(m["overloaded"] for m in alone.values()) and not all(m["overloaded"] for m in alone.values())
    for k in range(len(good)):
        assert {f: _bits(v) for f, v in shared[k].items()} == {f: _bits(v) for f, v in alone[k].items()}, good[k]


def test_request_time_with_classes_equals_each_row_alone(pred: Predictor) -> None:
    """capacity.request_time with cap classes: every output of every row bit for bit as without, at
    concurrencies within, at and beyond the caps, NaN and 0 included."""
    good = _cap_rows(pred)
    cols = F.columns(good)
    classes = F.cap_classes(cols)

    def evaluate(at, targets=None):
        return assemble.evaluate(pred.bundle, at, targets)

    rng = np.random.default_rng(3)
    limit = capacity.batch_limit(cols)
    idx = rng.integers(0, len(good), size=600)
    conc = np.concatenate([rng.choice([0.0, 0.3, 1.0, 2.0, 3.0, 7.5, 300.0, math.nan], size=300),
                           rng.uniform(0.0, 40.0, size=300)])
    for learned in (False, True):
        for targets in (("itl",), None):
            want = capacity.request_time(evaluate, cols, idx, conc, limit[idx], learned, targets)
            got = capacity.request_time(evaluate, cols, idx, conc, limit[idx], learned, targets, classes)
            assert got.keys() == want.keys() and got["res"].keys() == want["res"].keys()
            for k in ("batch", "roofline_itl_s", "request_s"):
                assert _bits(got[k]) == _bits(want[k]), (k, learned)
            for t in want["res"]:
                assert _bits(got["res"][t]) == _bits(want["res"][t]), (t, learned)


def test_memoised_server_states_equal_fresh_solves(pred: Predictor) -> None:
    """The row memo's solved server states: an evaluation that takes half its rows' states from the memo gives
    every number bit for bit as each row alone with the memo cleared, and a caller changing the states it got
    leaves the memo's intact."""
    from wattgpu.results import memo_for

    rows = _cap_rows(pred)
    memo = memo_for(pred.bundle)
    memo.clear()
    cold = pred.evaluate_rows(rows)
    assert len(memo.mixes) > 0
    for m in cold.mix.values():
        m["power"] = -1.0  # a caller's change must not reach the memo
    for key in list(memo.mixes)[::2]:
        del memo.mixes[key]  # half the rows solved again, half from the memo
    assert_rows_equal_alone(pred, rows, pred.evaluate_rows(rows), clear_memo=True)


@pytest.mark.parametrize("learned", [False, True])
def test_row_keys_equal_each_rows_key(pred: Predictor, learned: bool) -> None:
    """capacity.row_keys reads each workload once; its keys are the per-row keys, shared objects or not."""
    gpus, llms = pred.catalog.gpus[:4], pred.catalog.llms[:2]
    shared = Workload(kind="server", qps=1.0)
    wls = [shared, Workload(kind="server", qps=2.0), Workload(kind="server", qps=1.0, max_batch=8), Workload(),
           Workload(kind="closed_loop", concurrency=4)]
    rows = [(g, m, w) for g in gpus for m in llms for w in (*wls, shared)]
    assert capacity.row_keys(rows, learned) == [capacity._key(r, learned) for r in rows]
    assert capacity.row_keys([], learned) == []

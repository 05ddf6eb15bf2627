"""One prediction on plain Python floats: the scalar path of :meth:`Predictor.predict`.

numpy spends tens of microseconds on the ~60 ufunc calls of one prediction when every array holds
one element. This path evaluates the SAME definitions — :func:`features.row_columns` /
:func:`features.row_vector` (features and physics via :mod:`ops`), :func:`targets.inverse`,
:func:`results.finish`, :func:`results.prediction` — on floats, runs each model once on a one-row
float32 buffer, and so returns the Prediction the vectorised path returns, bit for bit
(tests/test_scalar_path.py).

Rows it does not handle return None and take the vectorised path, so their numbers, warnings and
errors are the vectorised path's by construction: Poisson-server workloads (the fixed point is
solved vectorised), rows that cannot be predicted (no KV cache, an impossible TP group, does not fit,
not finite) and rows
that hit an arithmetic edge a float raises on (a zero divisor) where numpy gives inf/NaN.
"""
from __future__ import annotations

import math
import threading
import weakref
from typing import Any, Callable

import numpy as np

from . import assemble, capacity, latency, ops, parallel
from . import features as F
from .assemble import Row
from .bundle import ModelBundle
from .calibration import apply_ttft
from .checks import NO_KV_CACHE
from .prediction import Prediction
from .results import (CLOSED_LOOP_CODE, ROW_COLUMNS, RowMemo, finish, latency_numbers, memo_for, prediction,
                      served_token_rate, utilization)
from .targets import inverse


class _RowRunner:
    """One model on a prebuilt one-row float32 input buffer bound to onnxruntime (no per-call
    allocation or feed validation); one per thread, model and bundle."""

    def __init__(self, session: Any, input_name: str, names: tuple[str, ...], transform: str) -> None:
        self.session, self.names, self.transform = session, names, transform
        self.x = np.zeros((1, len(names)), dtype=np.float32)
        self.y = np.zeros((1, 1), dtype=np.float32)
        self.binding = session.io_binding()
        self.binding.bind_cpu_input(input_name, self.x)
        self.binding.bind_output(session.get_outputs()[0].name, "cpu", 0, np.float32, [1, 1], self.y.ctypes.data)
        self.run = self._direct_run()

    def _direct_run(self) -> Callable[[], Any]:
        """The C-level run of the binding when this onnxruntime exposes it (skips the Python wrapper's
        per-call bookkeeping), else the public ``run_with_iobinding``."""
        c_sess, c_binding = getattr(self.session, "_sess", None), getattr(self.binding, "_iobinding", None)
        if c_sess is not None and c_binding is not None:
            try:
                c_sess.run_with_iobinding(c_binding, None)
                return lambda: c_sess.run_with_iobinding(c_binding, None)
            except Exception:  # noqa: BLE001 - another onnxruntime version: use the public API
                pass
        return lambda: self.session.run_with_iobinding(self.binding)

    def __call__(self, c: dict[str, float]) -> float:
        """The model's output for one row of scalar columns, in physical units."""
        self.x[0] = F.row_vector(self.names, c)  # float → float32 as the vectorised matrix casts it
        self.run()
        return float(inverse(self.transform, float(self.y[0, 0]), c))  # type: ignore[arg-type]


_LOCAL = threading.local()


def _runners(bundle: ModelBundle) -> dict[str, _RowRunner]:
    by_bundle = getattr(_LOCAL, "by_bundle", None)
    if by_bundle is None:
        by_bundle = _LOCAL.by_bundle = weakref.WeakKeyDictionary()
    runners = by_bundle.get(bundle)
    if runners is None:
        runners = by_bundle[bundle] = {t: _RowRunner(bundle.session(t), m.input_name, m.feature_names, m.transform)
                                       for t, m in bundle.schema.models.items()}
    return runners


def evaluate_one(bundle: ModelBundle, c: dict[str, float]) -> dict[str, float]:
    """Every model of ``bundle`` on one row of scalar columns, in physical units."""
    x = assemble.steady(c) if assemble.reads_kind(bundle) else c  # the same rule as assemble.evaluate
    out = {target: run(x) for target, run in _runners(bundle).items()}
    if bundle.schema.calibration is not None:  # the same correction as assemble.evaluate, on floats
        from .calibration import of

        out = of(bundle).apply(out, c)  # type: ignore[union-attr]
    return out


def numbers_one(bundle: ModelBundle, row: Row, memo: RowMemo | None = None) -> tuple[dict[str, float], dict[str, Any]] | None:
    """(columns, numbers) of one predictable non-server row as floats, or None for the vectorised path."""
    g, llm, wl = row
    if wl.kind == "server" or llm.arch_class in NO_KV_CACHE or (wl.tp > 1 and parallel.group_error(g, llm, wl.tp)):
        return None
    try:
        if memo is None:
            c = F.row_columns(row)
        else:
            c = F.row_columns(row, (memo.spec(g, F.gpu_columns), memo.spec(llm, F.llm_columns),
                                    memo.spec(wl, F.workload_columns)))
        if not c["fit_sequences"] >= 1:
            return None
        out = evaluate_one(bundle, c)
        learned = "server" in bundle.schema.domain.get("kinds", ())
        max_qps, grid_batch, grid_itl = (memo or RowMemo()).capacity(row, learned,
                                                                     lambda: _capacity(bundle, row, c, learned))
        power, batch = out["power"], c["eff_batch"]
        itl = _sub_batch_itl(out["itl"], batch, grid_batch, grid_itl)
        req_s = capacity.request_s(c, itl)  # type: ignore[arg-type]  # floats: the same operations
        rate = served_token_rate(c, batch, req_s, max_qps)  # type: ignore[arg-type]
        numbers = finish(power, itl, batch, 1.0, rate, c["gpu_tdp_w"], c["wl_output_tokens"], False, c["wl_tp"])
        if numbers["not_finite"]:
            return None
        util = utilization(c, max_qps, batch, req_s)  # type: ignore[arg-type]
        clients = c["wl_concurrency"] if c["wl_kind_code"] == CLOSED_LOOP_CODE else math.nan
        wait = latency.closed_loop_wait(clients, rate / c["wl_output_tokens"], req_s)
        numbers.update(latency_numbers(c, latency.prefill_budget(g, wl), batch, itl, rate,
                                       latency.step_envelope_one(batch, grid_batch, grid_itl), wait))
        apply_ttft(bundle, c, numbers)  # a calibrated bundle's TTFT scale (wattgpu.calibration)
    except ArithmeticError:  # ZeroDivisionError, OverflowError: numpy would give inf/NaN
        return None
    numbers.update(max_qps=max_qps, utilization=util, max_concurrency=ops.maximum(c["fit_sequences"], 0.0),
                   overloaded=False)  # overload is a server state; server rows take the vectorised path
    return c, numbers


def _capacity(bundle: ModelBundle, row: Row, c: dict[str, float],
              learned: bool) -> tuple[float, tuple[float, ...], tuple[float, ...]]:
    """The row's ``max_qps`` and its capacity grid (batches and ITL, one-row arrays) from
    :func:`capacity.capacity_table` itself, on one-row arrays of its columns (vectorised, and memoised
    by the caller)."""
    cols = {k: np.array([v]) for k, v in c.items() if not k.startswith("feature:")}
    evaluate = lambda at, targets=None: assemble.evaluate(bundle, at, targets)  # noqa: E731
    with np.errstate(divide="ignore", invalid="ignore"):
        cap = capacity.capacity_table(evaluate, [row], cols, learned)
    return float(cap["max_qps"][0]), tuple(cap["grid_batch"][0].tolist()), tuple(cap["grid_itl"][0].tolist())


def _sub_batch_itl(itl: float, batch: float, grid_batch: tuple[float, ...], grid_itl: tuple[float, ...]) -> float:
    """:func:`capacity.sub_batch_itl` of one row on floats (same operations, so the same bits)."""
    best = 0.0
    for b, i in zip(grid_batch, grid_itl):
        if b <= batch and math.isfinite(i) and i > 0.0:
            best = max(best, b / i)
    return ops.minimum(itl, batch / best) if best > 0.0 else itl


def predict_one(bundle: ModelBundle, row: Row) -> Prediction | None:
    """The Prediction of one row on the scalar path, or None when the row needs the vectorised path."""
    memo = memo_for(bundle)
    got = numbers_one(bundle, row, memo)
    if got is None:
        return None
    c, numbers = got
    one: dict[str, Any] = {k: (v,) for k, v in numbers.items()}
    cols = {k: (c[k],) for k in ROW_COLUMNS}
    return prediction(bundle, 0, row, cols, one, None, memo)  # type: ignore[arg-type]

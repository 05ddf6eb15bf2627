"""One prediction on plain Python floats: the scalar path of :meth:`Predictor.predict`.

A set-up asked for often (:data:`JIT_AFTER` times: the same specs, engine set-up and load fields but the
concurrency) is traced once and replayed as one compiled function of its concurrency (:func:`compiled_numbers`, :mod:`wattgpu.trace`):
the same definitions and operations, without their ~390 Python calls per row.

This path evaluates the SAME definitions — :func:`features.row_columns` /
:func:`features.row_vector` (features and physics via :mod:`ops`), :func:`targets.inverse`,
:func:`results.finish`, :func:`results.prediction` — on floats, runs each model once on a one-row
float32 buffer, and so returns the Prediction the vectorised path returns, bit for bit
(tests/test_scalar_path.py).

Poisson-server rows take the same solve (:func:`serving.solve.solve_concurrency` on floats, one ITL run
per step) and build the same :func:`server.mix_entry`.

Rows it does not handle return None and take the vectorised path, so their numbers, warnings and
errors are the vectorised path's by construction: rows that cannot be predicted (no KV cache, an
impossible TP group, does not fit, not finite) and rows that hit an arithmetic edge a float raises on
(a zero divisor) where numpy gives inf/NaN.
"""
from __future__ import annotations

import math
import threading
import weakref
from typing import Any, Callable

import numpy as np

from . import assemble, ops, parallel, physics, trace, ttft_fit
from .serving import capacity, latency
from . import features as F
from .assemble import Row
from .bundle import ModelBundle
from .calibrated import apply_ttft
from .calibrated import of as calibration_of
from .checks import NO_KV_CACHE
from .prediction import Prediction
from .derived import SETUP_COLUMNS, derive_load, derive_setup
from .raw_columns import at_load, load_free, row_with_concurrency
from .results import (CLOSED_LOOP_CODE, ROW_COLUMNS, Capacity, RowMemo, finish, latency_numbers, memo_for, prediction,
                      served_token_rate, utilization)
from .serving.server import idle_power, mix_entry
from .serving.solve import solve_concurrency
from .targets import ITL, POWER, inverse


class _RowRunner:
    """One model on a prebuilt one-row float32 input buffer bound to onnxruntime (no per-call
    allocation or feed validation); one per thread, model and bundle."""

    def __init__(self, session: Any, input_name: str, names: tuple[str, ...], transform: str) -> None:
        self.session, self.names, self.transform = session, names, transform
        self.x = np.zeros((1, len(names)), dtype=np.float32)
        self.xrow = self.x[0]  # the input row (a view kept, not rebuilt per call)
        self.y = np.zeros((1, 1), dtype=np.float32)
        self.binding = session.io_binding()
        self.binding.bind_cpu_input(input_name, self.x)
        self.binding.bind_output(session.get_outputs()[0].name, "cpu", 0, np.float32, [1, 1], self.y.ctypes.data)
        self.run = self._direct_run()
        self.plan = tuple(("feature:" + n, F.REGISTRY[n]) for n in names) if all(n in F.REGISTRY for n in names) \
            else None  # an unknown name: row_vector's error, on the first call

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

    def split(self, base: dict[str, float]) -> tuple[np.ndarray, tuple[tuple[int, str, Any], ...]] | None:
        """This model's input row with every feature that ``base`` (a row without its load columns:
        :func:`raw_columns.load_free`) determines filled in, and (position, memo key, feature) of the
        others: those that read a load column (a KeyError on ``base``). A feature that reads a column
        only on some branch reads it here too when that branch depends on the load, so what is filled
        in is, for this row, the value at every load. None where a name is unknown."""
        if self.plan is None:
            return None
        fixed = np.zeros(len(self.names), dtype=np.float32)
        rest = []
        for j, (key, feat) in enumerate(self.plan):
            try:
                fixed[j] = float(feat.fn(base))  # type: ignore[arg-type]  # float → float32 as row_vector's row
            except KeyError:
                rest.append((j, key, feat))
        return fixed, tuple(rest)

    def at_load(self, fixed: np.ndarray, rest: tuple[tuple[int, str, Any], ...], c: dict[str, float]) -> float:
        """:meth:`__call__` of ``c`` (the row at a load) given :meth:`split` of its load-free part: only
        the load's features computed (memoised in ``c`` as row_vector does); the same input row."""
        if trace.active() is not None:
            return self._at_load_traced(fixed, rest, c)
        x = self.xrow
        np.copyto(x, fixed)
        for j, key, feat in rest:
            v = c.get(key)
            if v is None:
                v = c[key] = float(feat.fn(c))
            x[j] = v
        self.run()
        return float(inverse(self.transform, float(self.y[0, 0]), c))  # type: ignore[arg-type]

    def _at_load_traced(self, fixed: np.ndarray, rest: tuple[tuple[int, str, Any], ...], c: dict[str, Any]) -> Any:
        """:meth:`at_load` while a trace records (:mod:`wattgpu.trace`): runs it on the concrete values and
        records the same stores, run and output read as lines on this runner (an input of the trace)."""
        t = trace.active()
        me = t.runners[id(self)]  # type: ignore[union-attr]
        x = self.xrow
        np.copyto(x, fixed)
        t.statement(f"{t.ref(np.copyto)}({me}.xrow, {t.ref(fixed)})")  # type: ignore[union-attr]
        for j, key, feat in rest:
            v = c.get(key)
            if v is None:
                v = feat.fn(c)
                v = c[key] = v if type(v) is trace.Sym else float(v)
            x[j] = trace._val(v)
            t.statement(f"{me}.xrow[{j}] = {t.ref(v)}")  # type: ignore[union-attr]
        self.run()
        t.statement(f"{me}.run()")  # type: ignore[union-attr]
        y = t.emit(f"float({me}.y[0, 0])", float(self.y[0, 0]), pure=False)  # type: ignore[union-attr]  # per run
        out = inverse(self.transform, y, c)  # type: ignore[arg-type]
        return out if type(out) is trace.Sym else float(out)


class _AtLoad:
    """One row's models at any load of its server solve (as :func:`evaluate_one` of
    :func:`raw_columns.row_with_concurrency`, the same floats): the row's load-free columns and each
    model's load-free features are built once; each step derives only the load columns and the
    features that read them. Raw model outputs are kept per concurrency level, so the solve's last
    step is not run again for the answer."""

    def __init__(self, bundle: ModelBundle, row: Row, c: dict[str, float], closed_loop: bool, memo: RowMemo) -> None:
        self.runners, self.kind = _models(bundle)
        # the load-free part depends on the specs and every workload field but the concurrency (the
        # capacity key of a learned server: all of them), so it is kept per such set-up as the capacity is
        key = ("load-free", closed_loop, capacity._key(row, True))
        got = memo.capacity_get(key, row)
        if got is None:
            base = load_free(c, closed_loop)
            probe = assemble.steady(base) if self.kind else base
            got = (base, {t: r.split(probe) for t, r in self.runners.items()})
            memo.capacity_put(key, row, got)
        self.base, self.fixed = got
        self.calibration = calibration_of(bundle) if bundle.schema.calibration is not None else None
        self.seen: dict[float, tuple[dict[str, float], dict[str, float], dict[str, float]]] = {}

    def __call__(self, level: float, targets: tuple[str, ...] | None) -> tuple[dict[str, float], dict[str, float]]:
        """(columns at concurrency ``level``, model outputs of ``targets`` in physical units)."""
        hit = self.seen.get(level)
        if hit is None:
            cols = at_load(self.base, level)
            hit = self.seen[level] = (cols, assemble.steady(cols) if self.kind else cols, {})
        return hit[0], self._outputs(*hit, targets)

    def row(self, cols: dict[str, float], targets: tuple[str, ...] | None = None) -> dict[str, float]:
        """:func:`evaluate_one` of ``cols``: the row these load-free parts were built from (offline and
        closed-loop rows at their own load, ``closed_loop`` False)."""
        return self._outputs(cols, assemble.steady(cols) if self.kind else cols, {}, targets)

    def _outputs(self, cols: dict[str, float], x: dict[str, float], raw: dict[str, float],
                 targets: tuple[str, ...] | None) -> dict[str, float]:
        for t, run in self.runners.items():
            if (targets is None or t in targets) and t not in raw:
                split = self.fixed[t]
                if split is None:
                    raw[t] = run(x)
                else:
                    raw[t] = run.at_load(split[0], split[1], x)
        out = {t: v for t, v in raw.items() if targets is None or t in targets}
        if self.calibration is not None:  # the same correction as evaluate_one
            out = self.calibration.apply(out, cols)
        return out


_LOCAL = threading.local()


def _models(bundle: ModelBundle) -> tuple[dict[str, _RowRunner], bool]:
    """This thread's runners of the bundle's models, and whether any model reads the workload kind
    (:func:`assemble.reads_kind`); both fixed for a bundle, so built once per thread and bundle."""
    by_bundle = getattr(_LOCAL, "by_bundle", None)
    if by_bundle is None:
        by_bundle = _LOCAL.by_bundle = weakref.WeakKeyDictionary()
    models = by_bundle.get(bundle)
    if models is None:
        runners = {t: _RowRunner(bundle.session(t), m.input_name, m.feature_names, m.transform)
                   for t, m in bundle.schema.models.items()}
        models = by_bundle[bundle] = (runners, assemble.reads_kind(bundle))
    return models


def _runners(bundle: ModelBundle) -> dict[str, _RowRunner]:
    return _models(bundle)[0]


def evaluate_one(bundle: ModelBundle, c: dict[str, float], targets: tuple[str, ...] | None = None) -> dict[str, float]:
    """Every model of ``bundle`` (or those of ``targets``) on one row of scalar columns, in physical units."""
    runners, kind = _models(bundle)
    x = assemble.steady(c) if kind else c  # the same rule as assemble.evaluate
    out = {target: run(x) for target, run in runners.items() if targets is None or target in targets}
    if bundle.schema.calibration is not None:  # the same correction as assemble.evaluate, on floats
        out = calibration_of(bundle).apply(out, c)  # type: ignore[union-attr]
    return out


def numbers_one(bundle: ModelBundle, row: Row, memo: RowMemo | None = None, load: dict[str, Any] | None = None
                ) -> tuple[dict[str, float], dict[str, Any], dict[str, Any] | None] | None:
    """(columns, numbers, server mix or None) of one predictable row as floats, or None for the
    vectorised path. ``load``: raw load columns that replace the row's own (the traced inputs of
    :func:`compiled_numbers`)."""
    g, llm, wl = row
    if llm.arch_class in NO_KV_CACHE or (wl.tp > 1 and parallel.group_error(g, llm, wl.tp)):
        return None
    try:
        if memo is None:
            c = F.row_columns(row)
        else:
            c = _row_columns(row, memo, load)
        if not c["fit_sequences"] >= 1:
            return None
        learned = "server" in bundle.schema.domain.get("kinds", ())
        memo = memo or RowMemo()
        key = (learned, capacity._key(row, learned))
        cap: Capacity = memo.capacity_get(key, row)
        if cap is None:
            cap = _capacity(bundle, row, c, learned)
            memo.capacity_put(key, row, cap)
        if wl.kind == "server":
            return _server_numbers(bundle, row, c, learned, cap, memo)
        out = _AtLoad(bundle, row, c, False, memo).row(c)
        power, batch = out["power"], c["eff_batch"]
        itl, point = capacity.sub_batch_one(out["itl"], batch, cap.grid_batch, cap.grid_itl)
        if point >= 0 and point == cap.peak_k:  # decoding as sub-batches of a grid batch: the power there
            power = cap.peak_power  # (as results.core)
        elif point >= 0:
            _, level = capacity.load_point(cap.grid_conc[point], cap.limit, learned)
            power = _AtLoad(bundle, row, c, not learned, memo)(level, _POWER_ONLY)[1][POWER]
        req_s = capacity.request_s(c, itl)  # type: ignore[arg-type]  # floats: the same operations
        rate = served_token_rate(c, batch, req_s, cap.max_qps)  # type: ignore[arg-type]
        numbers = finish(power, itl, batch, 1.0, rate, c["gpu_tdp_w"], c["wl_output_tokens"], False, c["wl_tp"])
        if numbers["not_finite"]:
            return None
        util = utilization(c, cap.max_qps, batch, req_s)  # type: ignore[arg-type]
        clients = c["wl_concurrency"] if c["wl_kind_code"] == CLOSED_LOOP_CODE else math.nan
        wait = latency.closed_loop_wait(clients, rate / c["wl_output_tokens"], req_s)
        numbers.update(latency_numbers(c, latency.prefill_budget(g, wl), batch, itl, rate,
                                       latency.step_envelope_one(batch, cap.grid_batch, cap.grid_itl), wait,
                                       ttft_fit.of(bundle), wl.burst))
        apply_ttft(bundle, c, numbers)  # a calibrated bundle's TTFT scale (wattgpu.calibration)
    except ArithmeticError:  # ZeroDivisionError, OverflowError: numpy would give inf/NaN
        return None
    numbers.update(max_qps=cap.max_qps, utilization=util, max_concurrency=ops.maximum(c["fit_sequences"], 0.0),
                   overloaded=False)  # overload is a server state (below)
    return c, numbers, None


def _row_columns(row: Row, memo: RowMemo, load: dict[str, Any] | None = None) -> dict[str, float]:
    """:func:`features.row_columns` of ``row`` with its spec columns and its load-free set-up columns
    (:func:`derived.derive_setup`, per GPU, LLM and engine set-up) from ``memo``; the same floats. ``load``
    replaces raw load columns before the load is derived."""
    g, llm, wl = row
    c = {**memo.spec(g, F.gpu_columns), **memo.spec(llm, F.llm_columns), **memo.spec(wl, F.workload_columns)}
    key = ("setup", capacity._key(row, False))
    setup = memo.capacity_get(key, row)
    if setup is None:
        derive_setup(c)
        memo.capacity_put(key, row, {k: c[k] for k in SETUP_COLUMNS})
    else:
        c.update(setup)
    if load is not None:
        c.update(load)
    return derive_load(c)  # type: ignore[return-value]


def _server_numbers(bundle: ModelBundle, row: Row, c: dict[str, float], learned: bool,
                    cap: Capacity, memo: RowMemo) -> tuple[dict[str, float], dict[str, Any], dict[str, Any]] | None:
    """A Poisson-server row on floats (as server_mix and core); its solved state kept in ``memo`` as the
    vectorised path keeps it (:func:`results.server_mixes`: either path's entry is the other's, bit for bit)."""
    g, _, wl = row
    qps = float(wl.qps)  # type: ignore[arg-type]  # a server workload always has one
    key = (learned, capacity._key(row, True))  # as results.server_mixes keys it: specs and every workload field
    kept = memo.mix_get(key, row)
    mix = _server_mix(bundle, row, c, learned, cap, memo, qps) if kept is None else dict(kept)  # never the entry
    power, itl, busy, batch, req_s = mix["power"], mix["itl"], mix["busy"], mix["batch"], mix["request_s"]
    rate = min(qps, cap.max_qps) * wl.output_tokens
    util = utilization(c, cap.max_qps, batch, req_s)  # type: ignore[arg-type]
    numbers = finish(power, itl, batch, busy, rate, c["gpu_tdp_w"], c["wl_output_tokens"], learned, c["wl_tp"])
    if numbers["not_finite"]:
        return None
    if kept is None:  # kept for rows this path answers (the scalar and vectorised states are tested equal there)
        memo.mix_put(key, row, mix)
    overloaded = util > 1.0 + 1e-9
    numbers.update(max_qps=cap.max_qps, utilization=util if overloaded else ops.minimum(util, 1.0),
                   max_concurrency=ops.maximum(c["fit_sequences"], 0.0), overloaded=overloaded)
    wait = latency.server_wait(c["wl_qps"], cap.max_qps, cap.concurrency)
    numbers.update(latency_numbers(c, latency.prefill_budget(g, wl), batch, itl, rate,
                                   latency.step_envelope_one(batch, cap.grid_batch, cap.grid_itl), wait,
                                       ttft_fit.of(bundle), wl.burst))
    apply_ttft(bundle, c, numbers)  # a calibrated bundle's TTFT scale (wattgpu.calibration)
    return c, numbers, mix


def _server_mix(bundle: ModelBundle, row: Row, c: dict[str, float], learned: bool, cap: Capacity, memo: RowMemo,
                qps: float) -> dict[str, Any]:
    """The solved server state of a Poisson-server row on floats (:func:`server.mix_entry`, as server_mix)."""
    g = row[0]
    models = _AtLoad(bundle, row, c, not learned, memo)

    def at(conc: float, targets: tuple[str, ...] | None) -> tuple[dict[str, float], dict[str, float], float]:
        batch, level = capacity.load_point(conc, cap.limit, learned)
        cols, out = models(level, targets)
        return cols, out, cols["eff_batch"] if learned else batch

    def request_time(conc: float) -> float:
        cols, res, _ = at(conc, _ITL_ONLY)
        return capacity.request_s(cols, res[ITL])  # type: ignore[arg-type]

    over = qps > cap.max_qps * (1.0 + 1e-9)
    if over:  # saturated at the capacity's operating point: nothing to solve
        conc, converged = cap.concurrency, True
    else:
        conc, converged = solve_concurrency(ops.minimum(qps, cap.max_qps), request_time, cap.grid_conc, cap.grid_req)
    cols, res, batch = at(conc, None)  # every model at the solved (or saturated) concurrency
    req_s = capacity.request_s(cols, res[ITL])  # type: ignore[arg-type]
    idle = idle_power(g)
    busy = physics.busy_fraction(conc)  # type: ignore[arg-type]
    power = res[POWER] if learned else physics.server_power_mix(idle[0], res[POWER], conc)  # type: ignore[arg-type]
    return mix_entry(g, learned, power, res[ITL], busy, res[POWER], conc, batch, req_s, idle, converged, over,  # type: ignore[arg-type]
                     cap.max_qps, cols["roofline_itl_s"])


_ITL_ONLY = (ITL,)
_POWER_ONLY = (POWER,)


def _capacity(bundle: ModelBundle, row: Row, c: dict[str, float], learned: bool) -> Capacity:
    """The row's capacity from :func:`capacity.capacity_table` itself, on one-row arrays of its columns
    (vectorised, and memoised by the caller)."""
    cols = _array_row(c)
    evaluate = lambda at, targets=None: assemble.evaluate(bundle, at, targets)  # noqa: E731
    with np.errstate(divide="ignore", invalid="ignore"):
        cap = capacity.capacity_table(evaluate, [row], cols, learned)
    return Capacity.of(cap, 0)


def _array_row(c: dict[str, float]) -> F.Columns:
    """One row of float columns as one-row arrays (for the vectorised code it shares)."""
    return {k: np.array([v]) for k, v in c.items() if not k.startswith("feature:")}


# ---- the compiled load path (wattgpu.trace): a set-up's frequent rows (the same load fields but the concurrency)
# The sighting of a set-up (and its kind, rate and request count) at which its load path is compiled. Compiling costs
# ~2 ms (trace ~0.5, Python's compile ~1.3) and saves ~40 µs per later row, so it pays after ~50 more rows: a set-up
# asked for less often than this never pays it (its rows take the memoised path, ~80 µs), a frequent one does once.
JIT_AFTER = 32
# A compiled path that deoptimises this many times in a row is dropped (its set-up's rows then take the memoised path):
# its rows keep taking other branches (a closed loop asked at concurrencies across a capacity-grid batch), and each
# such row would pay part of the compiled function before the definitions.
MAX_DEOPTS = 8


def _jit_workload(wl: Any) -> tuple[tuple[Any, ...], float]:
    """(what a compiled load path is specific to of a workload: its engine set-up and every load field but the
    concurrency, that concurrency's column: the path's one input); kept per workload object (RowMemo.spec)."""
    return ((*capacity._key((None, None, wl), False)[2:], wl.kind, wl.qps, wl.num_requests),
            F.workload_columns(wl)["wl_concurrency"])


def _jit_key(row: Row, memo: RowMemo) -> tuple[tuple[Any, ...], float]:
    """(the key of a row's compiled load path: the specs and :func:`_jit_workload`, the row's concurrency)."""
    part, conc = memo.spec(row[2], _jit_workload)
    return ("jit", id(row[0]), id(row[1]), part), conc


def compiled_numbers(bundle: ModelBundle, row: Row, memo: RowMemo) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(row columns, numbers) of an offline or closed-loop row as :func:`predict_one` passes them to
    :func:`results.prediction`, from its set-up's compiled load path (:func:`_compile`); None when there is
    none yet (the first sighting), it cannot be compiled, or one of its guards fails (the definitions then
    answer the row)."""
    key, conc = _jit_key(row, memo)
    fn = memo.compiled_get(key, row)
    if fn is None or type(fn) is int:  # seen that many times before
        seen = (fn or 0) + 1
        fn = _compile(bundle, row, memo, conc) if seen >= JIT_AFTER else seen
        memo.compiled_put(key, row, False if fn is None else fn)
        if type(fn) is int or fn is None:
            return None
    elif fn is False:
        return None
    try:
        out = fn(conc, *_runners(bundle).values())
    except trace.Deopt:  # a branch the other way, or an arithmetic error: the definitions answer this row
        fn.deopts = getattr(fn, "deopts", 0) + 1
        if fn.deopts >= MAX_DEOPTS:  # its rows mostly take other branches
            memo.compiled_put(key, row, False)
        return None
    if getattr(fn, "deopts", 0):
        fn.deopts = 0
    return out


def _compile(bundle: ModelBundle, row: Row, memo: RowMemo, conc: float) -> Callable[..., Any] | None:
    """The load path of ``row`` (:func:`numbers_one` from the load columns on) traced with its concurrency column
    ``conc`` (:func:`_jit_key`) as the input and compiled (:mod:`wattgpu.trace`); None when the trace is refused,
    the row is not answered on this path, or the compiled function does not give this row's numbers bit for bit."""
    runners = _runners(bundle)
    plain = numbers_one(bundle, row, memo)  # also memoises what the trace reads as constants (capacity, set-up)
    if plain is None:
        return None

    def body(t: trace.Trace) -> Any:
        a = t.input(conc)
        t.runners = {id(r): t.input(r).name for r in runners.values()}
        return numbers_one(bundle, row, memo, load={"wl_concurrency": a})

    try:
        t, got = trace.record(body)
    except Exception:  # noqa: BLE001 - untraceable (or an error the definitions raise again below): not compiled
        return None
    if got is None or got[2] is not None:
        return None
    c, numbers, _ = got
    cols = "{" + ", ".join(f"{k!r}: ({t.ref(c[k])},)" for k in ROW_COLUMNS) + "}"
    one = "{" + ", ".join(f"{k!r}: ({t.ref(v)},)" for k, v in numbers.items()) + "}"
    fn = t.compile(f"({cols}, {one})", "load_path")
    try:
        replay = fn(conc, *runners.values())
    except trace.Deopt:
        return None
    return fn if _same_numbers(replay, plain) else None


def _same_numbers(replay: tuple[dict[str, Any], dict[str, Any]], plain: tuple[Any, ...]) -> bool:
    """Whether a compiled path's (columns, numbers) are :func:`numbers_one`'s, bit for bit (NaN equals NaN)."""
    c, numbers, _ = plain
    pairs = [(replay[0][k][0], c[k]) for k in ROW_COLUMNS]
    if set(replay[1]) != set(numbers):
        return False
    pairs += [(replay[1][k][0], v) for k, v in numbers.items()]
    return all(type(a) is type(b) and (a == b or (a != a and b != b)) and (not isinstance(a, float)
               or math.copysign(1.0, a) == math.copysign(1.0, b)) for a, b in pairs)


def predict_one(bundle: ModelBundle, row: Row) -> Prediction | None:
    """The Prediction of one row on the scalar path, or None when the row needs the vectorised path."""
    memo = memo_for(bundle)
    if row[2].kind != "server":
        fast = compiled_numbers(bundle, row, memo)
        if fast is not None:
            return prediction(bundle, 0, row, fast[0], fast[1], None, memo)
    got = numbers_one(bundle, row, memo)
    if got is None:
        return None
    c, numbers, mix = got
    one: dict[str, Any] = {k: (v,) for k, v in numbers.items()}
    cols = {k: (c[k],) for k in ROW_COLUMNS}
    return prediction(bundle, 0, row, cols, one, mix, memo)  # type: ignore[arg-type]

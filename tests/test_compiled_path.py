"""The compiled one-row load path (wattgpu.trace, wattgpu.single.compiled_numbers): the same definitions traced
once per set-up and replayed, so the same numbers and Predictions as the definitions, bit for bit, at the
concurrency it was traced at and at any other (or a Deopt, and the definitions answer)."""
from __future__ import annotations

import math
import threading

import numpy as np
import pytest

from wattgpu import single, trace
from wattgpu.predictor import Predictor
from wattgpu.results import memo_for
from wattgpu.workload import Workload

from .test_scalar_path import WORKLOADS

LLMS = ("meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen3-30B-A3B", "meta-llama/Llama-3.1-70B-Instruct",
        "deepseek-ai/DeepSeek-V2-Lite-Chat", "mistralai/Mistral-7B-Instruct-v0.3")
OTHER_CONCURRENCY = (1.0, 2.5, 7.0, 48.0, 300.0, math.nan)  # NaN: the column of a workload without one


@pytest.fixture(scope="module")
def pred() -> Predictor:
    return Predictor()


def _llms(pred: Predictor) -> list:
    names = {m.name for m in pred.catalog.llms}
    picked = [pred.resolve_llm(n) for n in LLMS if n in names]
    assert len(picked) >= 3, "the sweep needs several of LLMS in the catalog"
    return picked


def _bits(x: object) -> object:
    return np.float64(x).tobytes() if isinstance(x, float) else (type(x), x)


def _as_replay(plain: tuple) -> tuple[dict, dict]:
    c, numbers, _ = plain
    from wattgpu.results import ROW_COLUMNS

    return {k: (c[k],) for k in ROW_COLUMNS}, {k: (v,) for k, v in numbers.items()}


def _same(a: tuple[dict, dict], b: tuple[dict, dict]) -> bool:
    return all(a[i].keys() == b[i].keys() and all(_bits(a[i][k][0]) == _bits(b[i][k][0]) for k in a[i])
               for i in (0, 1))


def test_compiled_load_paths_give_the_definitions_numbers_at_every_concurrency(pred: Predictor) -> None:
    """Every catalog GPU × several LLMs × the scalar-path workloads: compiled where the trace allows, and the
    compiled function at the traced concurrency and at others equals numbers_one of that row, bit for bit
    (or raises Deopt where a branch goes the other way)."""
    bundle, memo = pred.bundle, memo_for(pred.bundle)
    compiled = same = deopt = 0
    rows = [(g, m, w) for g in pred.catalog.gpus for m in _llms(pred) for w in WORKLOADS if w.kind != "server"]
    for g, m, w in rows:
        if single.numbers_one(bundle, (g, m, w), memo) is None:
            continue  # rows the scalar path hands to the vectorised one
        fn = single._compile(bundle, (g, m, w), memo, single._jit_key((g, m, w), memo)[1])
        if fn is None:
            continue
        compiled += 1
        runners = list(single._runners(bundle).values())
        for conc in (*OTHER_CONCURRENCY, memo.spec(w, single.F.workload_columns)["wl_concurrency"]):
            if w.kind == "offline" and not math.isnan(conc):
                continue  # an offline row has no concurrency; its compiled path is only ever called with NaN
            try:
                other = Workload(**{**w.to_dict(), "concurrency": None if math.isnan(conc) else conc})
            except ValueError:
                continue  # a closed loop needs its clients
            row = (g, m, other)
            try:
                got = fn(conc, *runners)
            except trace.Deopt:
                deopt += 1
                continue
            plain = single.numbers_one(bundle, row, memo)
            assert plain is not None, row
            assert _same(got, _as_replay(plain)), (g.name, m.name, other)
            same += 1
    assert compiled >= 0.8 * len(rows) // 2, (compiled, len(rows))  # most predictable rows compile
    assert same > compiled  # reused at other concurrencies, not only replayed at its own
    assert deopt > 0  # some concurrencies take another branch: the guards are exercised


def test_predict_compiles_a_frequent_set_up_and_answers_identically(pred: Predictor) -> None:
    memo = memo_for(pred.bundle)
    memo.clear()
    n = single.JIT_AFTER
    small = [m for m in _llms(pred) if m.name in ("meta-llama/Llama-3.1-8B-Instruct", "mistralai/Mistral-7B-Instruct-v0.3")]
    for m in small:
        for w in (Workload(), Workload(kind="closed_loop", concurrency=12.0), Workload(max_batch=32, output_tokens=64)):
            got = [pred.predict("NVIDIA H100 SXM5 80GB", m, w) for _ in range(n + 1)]  # traced at n, then compiled
            vectorised = pred.predict_specs([(pred.resolve_gpu("NVIDIA H100 SXM5 80GB"), m, w)])[0]
            assert all(p == vectorised for p in got)
    kept = [v[2] for v in memo.compiled.values()]
    assert kept and all(callable(f) for f in kept)
    # another concurrency of a compiled closed loop: the same function answers it, as the definitions do
    row = (pred.resolve_gpu("NVIDIA H100 SXM5 80GB"), _llms(pred)[0], Workload(kind="closed_loop", concurrency=5.0))
    assert pred.predict(*row) == pred.predict_specs([row])[0]


def test_a_set_up_that_cannot_be_traced_keeps_the_ordinary_path(pred: Predictor, monkeypatch) -> None:
    """A definition that leaves the recorded operations (here: numpy on a load feature) refuses the trace;
    the row is answered by the definitions and is not traced again."""
    bundle, memo = pred.bundle, memo_for(pred.bundle)
    memo.clear()
    row = (pred.resolve_gpu("NVIDIA A100 SXM4 40GB"), _llms(pred)[0], Workload())
    expected = pred.predict(*row)
    reg = single.F.REGISTRY
    name = next(n for n in ("wl_log_eff_batch",) if n in reg)
    original = reg[name]
    monkeypatch.setitem(reg, name, type(original)(original.name, original.unit, original.description,
                                                  lambda c: np.asarray(original.fn(c)) * 1.0))  # same values
    single._LOCAL.by_bundle = None  # runners hold their features' plan: rebuilt with the patched one
    memo.clear()  # and so do the kept load-free splits
    try:
        assert single._compile(bundle, row, memo, single._jit_key(row, memo)[1]) is None
        for _ in range(3):
            assert pred.predict(*row) == expected
        assert all(v[2] is False or isinstance(v[2], int) for v in memo.compiled.values())
    finally:
        monkeypatch.undo()
        single._LOCAL.by_bundle = None
        memo.clear()


def test_a_sym_refuses_what_a_trace_cannot_record() -> None:
    def body(t: trace.Trace) -> None:
        x = t.input(2.0)
        y = x * 3.0 + 1.0
        assert y.value == 7.0
        for bad in (float, int, hash, np.asarray, math.log):
            with pytest.raises((trace.Untraceable, TypeError)):
                bad(y)

    trace.record(body)
    with pytest.raises(trace.Untraceable):
        trace.record(lambda t: trace.record(lambda u: None))  # no trace inside a trace
    assert trace.active() is None


def test_guards_and_arithmetic_errors_deoptimise() -> None:
    def body(t: trace.Trace) -> object:
        x = t.input(2.0)
        return (10.0 / x) if x > 1.0 else -x  # a guard on x > 1.0

    t, out = trace.record(body)
    fn = t.compile(trace.outputs(t, [out]))
    assert fn(4.0) == (2.5,)
    with pytest.raises(trace.Deopt):
        fn(0.5)  # the other branch
    t, out = trace.record(lambda t: 1.0 / t.input(2.0))
    fn = t.compile(trace.outputs(t, [out]))
    with pytest.raises(trace.Deopt):
        fn(0.0)  # ZeroDivisionError: the definitions give the vectorised path the row


def test_compiled_paths_are_bounded_and_cleared(pred: Predictor) -> None:
    memo = memo_for(pred.bundle)
    memo.clear()
    row = (pred.resolve_gpu("NVIDIA A100 SXM4 40GB"), _llms(pred)[0], Workload())
    for i in range(memo.COMPILED_LIMIT + 5):
        memo.compiled_put(("k", i), row, lambda: None)  # compiled paths
    assert len(memo.compiled) <= memo.COMPILED_LIMIT
    for i in range(memo.LIMIT + 5):
        memo.compiled_put(("n", i), row, 1)  # counts of sightings
    assert len(memo.compiled) <= memo.LIMIT + 1
    memo.clear()
    assert not memo.compiled


def test_threads_share_a_compiled_path_with_their_own_runners(pred: Predictor) -> None:
    memo = memo_for(pred.bundle)
    memo.clear()
    rows = [(pred.resolve_gpu(g), _llms(pred)[0], Workload(kind="closed_loop", concurrency=c))
            for g in ("NVIDIA A100 SXM4 40GB", "NVIDIA H100 SXM5 80GB") for c in (2.0, 9.0)]
    expected = [pred.predict_specs([r])[0] for r in rows]
    errors: list[str] = []

    def work() -> None:
        for _ in range(single.JIT_AFTER + 10):
            for r, e in zip(rows, expected):
                if pred.predict(*r) != e:
                    errors.append(r[0].name)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors


def test_inline_forms_of_ops_equal_the_functions_bit_for_bit() -> None:
    """Each wattgpu.ops function the tracer records inline (trace.INLINE): its expression on every combination of
    special floats (±0, ±inf, NaN, ties) gives the function's own result, the same object type and bits."""
    from wattgpu import ops

    from .test_scalar_path import SPECIALS

    assert set(trace.INLINE) == {ops.maximum, ops.minimum, ops.fmin, ops.clip, ops.where}
    for fn, (types, expr) in trace.INLINE.items():
        code = compile(expr.format(*(f"x{i}" for i in range(len(types)))), "<inline>", "eval")
        pools = [[True, False] if t is bool else SPECIALS for t in types]
        combos = [[]]
        for pool in pools:
            combos = [c + [v] for c in combos for v in pool]
        for args in combos:
            want = fn(*args)
            got = eval(code, {f"x{i}": v for i, v in enumerate(args)})  # noqa: S307 - the tracer's own expression
            assert type(got) is type(want) and _bits(got) == _bits(want), (fn.__name__, args, got, want)


def test_a_set_up_compiles_even_when_its_capacity_was_evicted(pred: Predictor) -> None:
    """The per-set-up memos are bounded apart from the sighting counts: a set-up whose capacity was dropped
    (memo full) before its compiling sighting still compiles (the trace needs it as a constant)."""
    memo = memo_for(pred.bundle)
    memo.clear()
    row = (pred.resolve_gpu("NVIDIA A100 SXM4 40GB"), _llms(pred)[0], Workload(max_batch=64))
    expected = pred.predict_specs([row])[0]
    for _ in range(single.JIT_AFTER - 1):
        assert pred.predict(*row) == expected
    memo.capacities.clear()  # as RowMemo does when it passes LIMIT
    assert pred.predict(*row) == expected
    assert any(callable(v[2]) for v in memo.compiled.values())


def test_a_compiled_path_whose_rows_keep_deoptimising_is_dropped(pred: Predictor) -> None:
    """A closed loop compiled at 12 clients and then asked at 1 takes other branches (the sub-batch grid): after
    single.MAX_DEOPTS such rows in a row the path is dropped; every answer is the definitions'."""
    memo = memo_for(pred.bundle)
    memo.clear()
    g, m = pred.resolve_gpu("NVIDIA H100 SXM5 80GB"), _llms(pred)[0]
    hot = (g, m, Workload(kind="closed_loop", concurrency=12.0))
    for _ in range(single.JIT_AFTER + 1):
        pred.predict(*hot)
    key = single._jit_key(hot, memo)[0]
    assert callable(memo.compiled_get(key, hot))
    other = (g, m, Workload(kind="closed_loop", concurrency=1.0))  # the same set-up key, another concurrency
    assert single._jit_key(other, memo)[0] == key
    expected = pred.predict_specs([other])[0]
    for _ in range(single.MAX_DEOPTS):
        assert pred.predict(*other) == expected
    assert memo.compiled_get(key, hot) is False
    assert pred.predict(*hot) == pred.predict_specs([hot])[0]

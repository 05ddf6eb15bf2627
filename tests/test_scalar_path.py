"""The one-row scalar path (wattgpu.single) is bit-identical to the vectorised path.

Both evaluate the same definitions (features, physics, targets, results via wattgpu.ops), one on
Python floats and one on numpy arrays. These tests compare them bit for bit over the whole catalog ×
many LLMs × workloads: every raw and derived column, EVERY registered feature (not only the shipped
models' — a feature added later that does not evaluate identically on floats fails here), the float32
model inputs, the model outputs and every field of the Prediction.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from wattgpu import features as F
from wattgpu import ops, single
from wattgpu.predictor import Predictor
from wattgpu.results import core, memo_for
from wattgpu.workload import Workload

WORKLOADS = [
    Workload(),
    Workload(max_batch=1, input_tokens=128, output_tokens=64),
    Workload(max_batch=64, input_tokens=4096, output_tokens=1024, engine="tgi"),
    Workload(max_batch=8, input_tokens=32768, output_tokens=512, gpu_memory_utilization=0.5),
    Workload(max_batch=1024, input_tokens=256, output_tokens=256, num_requests=100, engine="tensorrt_llm"),
    Workload(kind="closed_loop", concurrency=1, engine="hf_transformers"),
    Workload(kind="closed_loop", concurrency=3.5, input_tokens=2048, output_tokens=128, engine="deepspeed_mii"),
    Workload(kind="closed_loop", concurrency=200, max_batch=64),
    # tensor-parallel groups (NVLink inside a form factor's group, PCIe beyond it), older stacks, FP8 KV
    Workload(tp=2, max_batch=128),
    Workload(tp=8, max_batch=256, input_tokens=2048, output_tokens=256, kv_cache_dtype="fp8"),
    Workload(kind="closed_loop", concurrency=32, tp=4, engine_era="legacy", itl_stat="mean"),
]


@pytest.fixture(scope="module")
def pred() -> Predictor:
    return Predictor()


@pytest.fixture(scope="module")
def rows(pred: Predictor) -> list:
    cat = pred.catalog
    return [(g, m, w) for g in cat.gpus for m in cat.llms for w in WORKLOADS]


def _same(a: float, b: float) -> bool:
    """Bitwise float equality (NaN == NaN; -0.0 != 0.0)."""
    return np.float64(a).tobytes() == np.float64(b).tobytes()


def test_every_column_and_every_registered_feature_is_bit_identical(rows: list) -> None:
    names = sorted(F.REGISTRY)
    cols = F.columns(rows)
    with np.errstate(all="ignore"):
        feats = {n: np.asarray(F.REGISTRY[n].fn(cols), dtype=np.float64) for n in names}
    X = F.matrix(names, cols)
    bad: list[str] = []
    for i, row in enumerate(rows):
        try:
            c = F.row_columns(row)
            vec = F.row_vector(names, c)
        except ArithmeticError as exc:  # the scalar path would fall back; the catalog must not need it
            bad.append(f"row {i} ({row[0].name}, {row[1].name}): {exc!r}")
            continue
        for k, v in c.items():
            if not k.startswith("feature:") and not _same(v, cols[k][i]):
                bad.append(f"row {i} column {k}: scalar {v!r} vs vector {cols[k][i]!r}")
        for j, n in enumerate(names):
            if not _same(vec[j], feats[n][i]):
                bad.append(f"row {i} feature {n}: scalar {vec[j]!r} vs vector {feats[n][i]!r}")
        x32 = np.array([vec], dtype=np.float32)
        if x32.tobytes() != X[i:i + 1].tobytes():
            bad.append(f"row {i}: float32 feature row differs")
        if len(bad) > 20:
            break
    assert not bad, "\n".join(bad[:20])
    assert len(rows) > 40_000


def test_model_inputs_outputs_and_predictions_are_bit_identical(pred: Predictor, rows: list) -> None:
    sub = rows[::7]  # every GPU, LLM and workload still appears
    errors, cols = pred.predict_specs_safe(sub), F.columns(sub)
    ok = [i for i, e in enumerate(errors) if not isinstance(e, Exception)]
    assert len(ok) > 3000
    X = pred.feature_vectors([sub[i] for i in ok])
    numbers, _ = core(pred.bundle, pred._evaluate, [sub[i] for i in ok], {k: v[ok] for k, v in cols.items()})
    bad = []
    for k, i in enumerate(ok):
        got = single.numbers_one(pred.bundle, sub[i])
        assert got is not None, f"row {i} fell back to the vectorised path"
        c, nums, _ = got
        for target, m in pred.schema.models.items():
            x = np.array([F.row_vector(m.feature_names, c)], dtype=np.float32)
            if x.tobytes() != X[target][k:k + 1].tobytes():
                bad.append(f"row {i}: {target} model input differs")
        for name, v in nums.items():
            if not _same(float(v), float(numbers[name][k])):
                bad.append(f"row {i} {name}: scalar {v!r} vs vector {numbers[name][k]!r}")
        p = single.predict_one(pred.bundle, sub[i])
        if p != errors[i]:
            bad.append(f"row {i}: Prediction differs\n  {p}\n  {errors[i]}")
        if len(bad) > 10:
            break
    assert not bad, "\n".join(bad)


def test_rows_the_scalar_path_does_not_handle_fall_back_with_identical_results(pred: Predictor) -> None:
    cat = pred.catalog
    small = min(cat.gpus, key=lambda g: g.memory_size_gb)
    big_llm = max(cat.llms, key=lambda m: m.total_params_b)
    llm = cat.llm("meta-llama/Llama-3.1-8B-Instruct")
    assert single.predict_one(pred.bundle, (small, big_llm, Workload())) is None  # does not fit
    for g, m, w in [(small, big_llm, Workload()), (small, big_llm, Workload(kind="server", qps=0.5))]:
        a = pred.predict_specs_safe([(g, m, w)])[0]
        try:
            b = pred.predict(g, m, w)
        except Exception as exc:  # noqa: BLE001 - the same error either way
            b = exc
        assert type(a) is type(b) and str(a) == str(b)


SERVER_WORKLOADS = [Workload(kind="server", qps=q) for q in (0.017, 0.33, 2.0, 8.0, 40.0, 1e4)] + [
    Workload(kind="server", qps=1.0, max_batch=8, tp=2, input_tokens=2048, output_tokens=128),
    Workload(kind="server", qps=0.2, engine="hf_transformers", max_batch=4),
]


def test_server_rows_on_the_scalar_path_equal_the_vectorised_path(pred: Predictor) -> None:
    """Poisson-server rows: the one-row solve (serving.solve on floats) returns the
    Prediction the vectorised solve returns, field for field, below, near and beyond capacity."""
    cat = pred.catalog
    llms = [m for m in cat.llms if m.total_params_b < 80][::3]
    rows = [(g, m, w) for g in cat.gpus for m in llms for w in SERVER_WORKLOADS]
    want = pred.predict_specs_safe(rows)
    mixes = memo_for(pred.bundle).mixes
    scalar = bad = overloaded = 0
    for row, w in zip(rows, want):
        mixes.clear()  # the one-row solve itself, not a state the vectorised pass kept
        got = single.predict_one(pred.bundle, row)
        if got is None:
            assert isinstance(w, Exception), f"{row[0].name} {row[1].name}: fell back without an error"
            continue
        scalar += 1
        overloaded += got.overloaded
        bad += got != w
        assert bad < 5, f"{row[0].name} {row[1].name} {row[2]}:\n  {got}\n  {w}"
    assert bad == 0 and scalar > 1000 and 100 < overloaded < scalar


def test_kept_server_states_are_shared_by_both_paths_with_the_same_predictions(pred: Predictor) -> None:
    """The one-row path keeps a row's solved server state in the row memo as the vectorised path does, and each
    reads the other's: a prediction from a state the other path solved equals one solved afresh, field for field
    (and the state itself bit for bit), below, near and beyond capacity; rows that fail fail the same way."""
    cat = pred.catalog
    llms = [m for m in cat.llms if m.total_params_b < 80][::5]
    rows = [(g, m, w) for g in cat.gpus[::5] for m in llms for w in SERVER_WORKLOADS]
    memo = memo_for(pred.bundle)

    def state(row: tuple) -> dict:
        kept = memo.mix_get(row, "server" in pred.schema.domain.get("kinds", ()))
        return {} if kept is None else {k: np.float64(v).tobytes() if isinstance(v, float) else v
                                        for k, v in kept.items()}

    shared = 0
    for row in rows:
        memo.clear()
        fresh = pred.predict_specs_safe([row])[0]  # the vectorised solve, kept
        vector_state = state(row)
        from_vector = single.predict_one(pred.bundle, row)  # reads the vectorised state
        memo.clear()
        alone = single.predict_one(pred.bundle, row)  # the one-row solve, kept
        if alone is None:
            assert from_vector is None, row
            continue
        assert from_vector == alone == fresh, row
        assert state(row) == vector_state, row
        again = pred.predict_specs_safe([row])[0]  # the vectorised path reads the one-row state
        assert again == fresh and single.predict_one(pred.bundle, row) == alone, row
        shared += 1
    assert shared > 100


def test_predict_takes_the_scalar_path_and_equals_predict_specs(pred: Predictor, monkeypatch) -> None:
    calls = []
    real = single.predict_one
    monkeypatch.setattr(single, "predict_one", lambda b, r: calls.append(r) or real(b, r))
    g, m = "NVIDIA A100 SXM4 40GB", "meta-llama/Llama-3.1-8B-Instruct"
    p = pred.predict(g, m)
    assert calls and p == pred.predict_specs([calls[0]])[0]


def test_a_feature_that_only_works_on_arrays_is_caught(monkeypatch) -> None:
    """A future feature written with array-only calls breaks the scalar path loudly, not silently."""
    monkeypatch.setitem(F.REGISTRY, "array_only", F.Feature("array_only", "-", "test", lambda c: (c["llm_num_experts"] > 1).astype(float)))
    row = (Predictor().catalog.gpus[0], Predictor().catalog.llms[0], Workload())
    with pytest.raises(AttributeError):
        F.row_vector(["array_only"], F.row_columns(row))


SPECIALS = [0.0, -0.0, 1.0, -1.0, 0.5, 2.0, 1e-300, 1e300, math.inf, -math.inf, math.nan, 7.25, -3.5]
VALUES = SPECIALS + list(np.geomspace(1e-9, 1e9, 50)) + list(np.linspace(-700, 700, 71))


@pytest.mark.parametrize("name", ["maximum", "minimum", "fmin", "power"])
def test_binary_ops_give_the_same_bits_on_floats_and_arrays(name: str) -> None:
    """ops on two floats (the scalar path) against ops on arrays (the vectorised path), one element and
    many, every pair of special values: one implementation, so identical on any CPU."""
    fn = getattr(ops, name)
    grid = [(a, b) for a in SPECIALS for b in SPECIALS]
    xs = np.array([a for a, _ in grid])
    ys = np.array([b for _, b in grid])
    many = fn(xs, ys)
    for k, (a, b) in enumerate(grid):
        got = fn(a, b)
        one = fn(np.array([a]), np.array([b]))
        assert type(got) is float, (name, a, b)
        assert _same(got, float(many[k])) and _same(got, float(one[0])), (name, a, b, got, many[k], one[0])


@pytest.mark.parametrize("name", ["maximum", "minimum", "fmin", "power"])
def test_binary_ops_on_large_arrays_evaluate_distinct_pairs_with_the_same_bits(name: str) -> None:
    """Above ops._DIRECT elements an array op evaluates each distinct (a, b) bit pattern once
    (:func:`ops.distinct_rows`) and looks the rest up: still every element's own float result."""
    fn = getattr(ops, name)
    rng = np.random.default_rng(7)
    xs = rng.choice(np.array(SPECIALS), 4 * ops._DIRECT)  # many repeated pairs, ±0 and NaN among them
    ys = rng.choice(np.array(SPECIALS), 4 * ops._DIRECT)
    many = fn(xs, ys)
    assert many.shape == xs.shape
    for k in range(len(xs)):
        assert _same(fn(float(xs[k]), float(ys[k])), float(many[k])), (name, xs[k], ys[k], many[k])


def test_distinct_rows_finds_first_occurrences_by_bits() -> None:
    """(first, inverse) as np.unique's return_index / return_inverse give them, up to the order of the
    distinct rows: first occurrences, rows rebuilt from them, -0.0 and 0.0 (and NaN payloads) apart."""
    rng = np.random.default_rng(3)
    vals = np.array([0.0, -0.0, 1.0, math.nan, 2.5])
    for n, k in ((0, 2), (1, 2), (7, 1), (500, 2), (500, 5)):
        rows = rng.choice(vals, (n, k))
        bits = rows.view(np.int64)
        first, inverse = ops.distinct_rows(bits)
        assert np.array_equal(bits[first][inverse], bits)  # every row is its distinct row
        _, ref_first, ref_inverse = np.unique(np.ascontiguousarray(bits).view(np.dtype((np.void, 8 * k))).ravel(),
                                              return_index=True, return_inverse=True)
        assert sorted(first.tolist()) == sorted(ref_first.tolist())  # the same first occurrences
        assert len(set(map(tuple, bits[first].tolist()))) == len(first)  # each distinct row once
        same = ref_inverse.reshape(-1)
        assert all((inverse[i] == inverse[j]) == (same[i] == same[j]) for i in range(min(n, 60)) for j in range(min(n, 60)))


@pytest.mark.parametrize("name", ["log", "exp", "expm1", "floor", "isnan", "isfinite"])
def test_unary_ops_give_the_same_bits_on_floats_and_arrays(name: str) -> None:
    fn = getattr(ops, name)
    arr = np.array(VALUES)
    many = fn(arr)
    for k, a in enumerate(VALUES):
        assert _same(float(fn(float(a))), float(many[k])), (name, a, fn(float(a)), many[k])
        assert _same(float(fn(float(a))), float(fn(np.array([a]))[0]))


@pytest.mark.parametrize("name,ufunc", [("log", np.log), ("exp", np.exp), ("expm1", np.expm1), ("power", np.power)])
def test_transcendental_ops_agree_with_numpy_to_a_few_ulps(name: str, ufunc) -> None:
    """The math-based forms are the functions numpy computes (to a few units in the last place, never bit
    for bit: numpy's SIMD loops differ among CPUs), with the same special values."""
    fn = getattr(ops, name)
    with np.errstate(all="ignore"):
        if name == "power":
            a, b = np.meshgrid(np.array(SPECIALS + [0.3, 0.999, 4.0]), np.array(SPECIALS + [3.0, 600.0, -2.0]))
            want, got = ufunc(a.ravel(), b.ravel()), fn(a.ravel(), b.ravel())
        else:
            arr = np.array(VALUES)
            want, got = ufunc(arr), fn(arr)
    same_special = (np.isnan(want) == np.isnan(got)) & (np.isinf(want) == np.isinf(got))
    assert same_special.all(), (name, np.flatnonzero(~same_special))
    fin = np.isfinite(want) & (want != 0)
    np.testing.assert_allclose(got[fin], want[fin], rtol=8 * np.finfo(np.float64).eps)
    inf = np.isinf(want)
    assert (np.sign(want[inf]) == np.sign(got[inf])).all()


def test_clip_and_where_give_the_same_bits_on_floats_and_arrays() -> None:
    many = ops.clip(np.array(SPECIALS), 0.0, 1.0)
    for k, x in enumerate(SPECIALS):
        assert _same(ops.clip(x, 0.0, 1.0), float(many[k]))
        assert ops.where(x > 0, x, -1.0) == float(np.where(np.float64(x) > 0, x, -1.0)) or math.isnan(x)
    assert isinstance(ops.as_float(True), float) and ops.as_float(np.array([True, False])).tolist() == [1.0, 0.0]


def test_transcendentals_on_arrays_never_call_numpys_simd_loops(monkeypatch) -> None:
    """By construction: the vectorised forms evaluate with math, so numpy's log/exp/power (SVML on
    AVX-512 builds) can be broken without changing a bit."""
    arr = np.array(VALUES)
    want = {n: getattr(ops, n)(arr) for n in ("log", "exp", "expm1")}
    want_pow = ops.power(np.abs(arr[:40]), 0.5)
    for n in ("log", "exp", "expm1", "power"):
        monkeypatch.setattr(np, n, lambda *a, **k: (_ for _ in ()).throw(AssertionError("numpy SIMD loop used")))
    for n, w in want.items():
        assert getattr(ops, n)(arr).tobytes() == w.tobytes()
    assert ops.power(np.abs(arr[:40]), 0.5).tobytes() == want_pow.tobytes()


def _dispatch_targets() -> list[str]:
    from numpy._core import _multiarray_umath as umath  # numpy >= 2; older numpy: numpy.core
    return list(umath.__cpu_dispatch__)


@pytest.mark.slow
def test_agreement_holds_with_numpys_simd_dispatch_disabled() -> None:
    """Run the agreement tests again in a child whose numpy has every dispatch target (AVX2/X86_V3,
    AVX-512/X86_V4, ...) disabled, so the other code path of numpy is exercised on this very machine."""
    import os
    import subprocess
    import sys

    try:
        targets = _dispatch_targets()
    except ImportError:
        pytest.skip("numpy < 2 names its dispatch targets elsewhere")
    env = dict(os.environ, NPY_DISABLE_CPU_FEATURES=" ".join(targets), WATTGPU_DISPATCH_CHILD="1")
    probe = ("import numpy as np; i = np.lib.introspect.opt_func_info(func_name='^log$')['log']['dd']['current'];"
             "print(i)")
    current = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    assert current.stdout.strip().startswith("baseline"), current.stdout + current.stderr
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__,
                          "-k", "bit_identical or same_bits", "-m", "not slow"],
                         env=env, capture_output=True, text=True, timeout=1800)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]


def test_scalar_path_is_thread_safe(pred: Predictor) -> None:
    """Each thread gets its own bound input buffers: concurrent predictions equal sequential ones."""
    import threading

    cat = pred.catalog
    pairs = [(g, m) for g in cat.gpus[::5] for m in cat.llms[::20]]
    want = {}
    for g, m in pairs:
        try:
            want[(g.name, m.name)] = pred.predict(g, m)
        except Exception as exc:  # noqa: BLE001 - rows that cannot be predicted raise the same either way
            want[(g.name, m.name)] = type(exc)
    bad: list[str] = []

    def work(offset: int) -> None:
        for g, m in pairs[offset:] + pairs[:offset]:
            try:
                got = pred.predict(g, m)
            except Exception as exc:  # noqa: BLE001
                got = type(exc)
            if got != want[(g.name, m.name)]:
                bad.append(f"{g.name} / {m.name}")

    threads = [threading.Thread(target=work, args=(k * 7,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad, bad[:5]


def test_load_free_templates_give_the_model_inputs_row_vector_gives(pred: Predictor) -> None:
    """The server solve's inputs: each model's load-free features filled once per set-up
    (``_RowRunner.split``) plus the features that read the load give, at every concurrency, the
    float32 row :func:`features.row_vector` builds from the whole re-derived row."""
    from wattgpu.raw_columns import at_load, load_free, row_with_concurrency

    cat = pred.catalog
    runners = single._runners(pred.bundle)
    rows = [(g, m, w) for g in cat.gpus[::4] for m in cat.llms[::5] for w in WORKLOADS[::2]]
    checked = 0
    for row in rows:
        c = F.row_columns(row)
        for closed_loop in (True, False):
            base = load_free(c, closed_loop)
            for level in (1e-3, 1.0, 2.5, 37.0, 4096.0):
                whole = row_with_concurrency(c, level, closed_loop)
                assert all(_same(v, whole[k]) for k, v in at_load(base, level).items())
                for t, run in runners.items():
                    split = run.split(base)
                    assert split is not None
                    fixed, rest = split
                    try:
                        want = np.array(F.row_vector(run.names, dict(whole)), dtype=np.float32)
                    except ArithmeticError:
                        continue
                    run.at_load(fixed, rest, dict(whole))
                    assert run.x[0].tobytes() == want.tobytes(), (row[0].name, row[1].name, t, level)
                    assert rest, "no feature read the load: the solve would not move"
                    checked += 1
    assert checked > 500

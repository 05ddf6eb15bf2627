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
from wattgpu.results import core
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
        c, nums = got
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
    server = Workload(kind="server", qps=0.5)
    assert single.predict_one(pred.bundle, (small, big_llm, Workload())) is None  # does not fit
    assert single.predict_one(pred.bundle, (small, llm, server)) is None  # Poisson fixed point
    for g, m, w in [(small, big_llm, Workload()), (cat.gpus[0], llm, server)]:
        a = pred.predict_specs_safe([(g, m, w)])[0]
        try:
            b = pred.predict(g, m, w)
        except Exception as exc:  # noqa: BLE001 - the same error either way
            b = exc
        assert type(a) is type(b) and str(a) == str(b)


def test_predict_takes_the_scalar_path_and_equals_predict_specs(pred: Predictor, monkeypatch) -> None:
    calls = []
    real = single.predict_one
    monkeypatch.setattr(single, "predict_one", lambda b, r: calls.append(r) or real(b, r))
    g, m = "NVIDIA A100 SXM4 40GB", "meta-llama/Llama-3.1-8B-Instruct"
    p = pred.predict(g, m)
    assert calls and p == pred.predict_specs([calls[0]])[0]


def test_a_feature_that_only_works_on_arrays_is_caught(monkeypatch) -> None:
    """A future feature written with array-only calls breaks the scalar path loudly, not silently."""
    reg = dict(F.REGISTRY)
    monkeypatch.setattr(F, "REGISTRY", reg)
    reg["array_only"] = F.Feature("array_only", "-", "test", lambda c: (c["llm_num_experts"] > 1).astype(float))
    row = (Predictor().catalog.gpus[0], Predictor().catalog.llms[0], Workload())
    with pytest.raises(AttributeError):
        F.row_vector(["array_only"], F.row_columns(row))


SPECIALS = [0.0, -0.0, 1.0, -1.0, 0.5, 2.0, 1e-300, 1e300, math.inf, -math.inf, math.nan, 7.25, -3.5]


@pytest.mark.parametrize("name,ufunc", [("maximum", np.maximum), ("minimum", np.minimum), ("fmin", np.fmin),
                                        ("power", np.power)])
def test_binary_ops_match_numpy_bitwise(name: str, ufunc) -> None:
    """Against numpy's array loops (what the vectorised path runs), one element and many."""
    fn = getattr(ops, name)
    with np.errstate(all="ignore"):
        for a in SPECIALS:
            for b in SPECIALS:
                if name == "fmin" and a == b == 0.0:
                    continue  # numpy's fmin loops disagree among themselves on ties of ±0
                got = fn(a, b)
                for n in (1, 17):
                    want = float(ufunc(np.full(n, a), np.full(n, b))[-1])
                    assert type(got) is float and _same(got, want), (name, a, b, n, got, want)


@pytest.mark.parametrize("name,ufunc", [("log", np.log), ("exp", np.exp), ("expm1", np.expm1), ("floor", np.floor),
                                        ("isnan", np.isnan), ("isfinite", np.isfinite)])
def test_unary_ops_match_numpy_bitwise(name: str, ufunc) -> None:
    fn = getattr(ops, name)
    with np.errstate(all="ignore"):
        for a in SPECIALS + list(np.geomspace(1e-9, 1e9, 50)) + list(np.linspace(-700, 700, 71)):
            want = ufunc(np.float64(a))
            got = fn(float(a))
            assert _same(float(got), float(want)), (name, a, got, want)


def test_clip_and_where_match_numpy() -> None:
    for x in SPECIALS:
        for n in (1, 17):
            assert _same(ops.clip(x, 0.0, 1.0), float(np.clip(np.full(n, x), 0.0, 1.0)[-1]))
        assert ops.where(x > 0, x, -1.0) == float(np.where(np.float64(x) > 0, x, -1.0)) or math.isnan(x)
    assert isinstance(ops.as_float(True), float) and ops.as_float(np.array([True, False])).tolist() == [1.0, 0.0]


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

"""predict_table: the array form of predict_specs gives the same numbers, NaN + message for bad rows."""
from __future__ import annotations

import math

import numpy as np

from wattgpu import Predictor, Workload
from wattgpu.predictor import TABLE_FIELDS

from .helpers import assert_rows_equal_alone


def test_table_equals_prediction_fields_and_reports_bad_rows() -> None:
    pred = Predictor()
    cat = pred.catalog
    llm = cat.llm("meta-llama/Llama-3.1-8B-Instruct")
    big = cat.llm("meta-llama/Llama-3.1-70B-Instruct")
    rows = [(cat.gpu("A30"), llm, Workload()),
            (cat.gpu("L4"), big, Workload()),  # does not fit
            (cat.gpu("H100 SXM"), llm, Workload(kind="server", qps=0.3)),
            (cat.gpu("A10"), llm, Workload(kind="closed_loop", concurrency=4))]
    table = pred.predict_table(rows)
    objs = pred.predict_specs_safe(rows)
    for k, obj in enumerate(objs):
        if isinstance(obj, Exception):
            assert table["error"][k] == str(obj) and "does not fit" in table["error"][k]
            assert all(math.isnan(table[f][k]) for f in TABLE_FIELDS)
            continue
        assert table["error"][k] is None
        for f in TABLE_FIELDS:
            assert table[f][k] == getattr(obj, f), f  # identical, not approximately equal
    assert isinstance(table["power_w"], np.ndarray) and len(table["error"]) == 4


def test_empty_table() -> None:
    table = Predictor().predict_table([])
    assert table["error"] == [] and all(len(table[f]) == 0 for f in TABLE_FIELDS)


def test_rows_next_to_failing_rows_equal_rows_alone() -> None:
    """Columns of good rows are taken from the whole batch's columns; that must equal computing them alone."""
    pred = Predictor()
    cat = pred.catalog
    llm = cat.llm("meta-llama/Llama-3.1-8B-Instruct")
    rows = [(g, llm, Workload()) for g in cat.gpus]  # some 16 GB GPUs do not fit
    mixed = pred.predict_specs_safe(rows)
    assert any(isinstance(r, Exception) for r in mixed) and any(not isinstance(r, Exception) for r in mixed)
    for row, got in zip(rows, mixed):
        if not isinstance(got, Exception):
            assert pred.predict_specs([row])[0] == got


def test_repeated_server_rows_are_solved_once_with_the_same_numbers() -> None:
    """A table that repeats Poisson-server rows (a CSV, a sweep) solves each distinct row once: every
    repeat gets exactly the numbers of the row predicted alone, and the solve runs on distinct rows only."""
    from wattgpu.serving import server

    pred = Predictor()
    cat = pred.catalog
    llm = cat.llm("meta-llama/Llama-3.1-8B-Instruct")
    combos = [(cat.gpu(g), llm, Workload(kind="server", qps=q)) for g in ("A30", "L4", "H100 SXM") for q in (0.3, 4.0)]
    combos.append((cat.gpu("A30"), llm, Workload(kind="server", qps=0.3, output_tokens=64)))  # differs in one field
    rows = [combos[i % len(combos)] for i in range(60)]
    sizes: list[int] = []
    real = server.solve_concurrency

    def spy(qps, *args, **kwargs):
        sizes.append(len(qps))
        return real(qps, *args, **kwargs)

    server.solve_concurrency = spy
    try:
        table = pred.predict_table(rows)
    finally:
        server.solve_concurrency = real
    assert sizes == [len(combos)]
    for k, row in enumerate(rows):
        alone = pred.predict_specs([row])[0]
        for f in TABLE_FIELDS:
            assert table[f][k] == getattr(alone, f) or (math.isnan(table[f][k]) and getattr(alone, f) is None), f


def test_mixed_kinds_equal_each_kind_alone() -> None:
    """A table mixing Poisson-server rows with offline and closed-loop rows (the models run on the non-server
    rows only; server rows come from the solved mix) equals each row predicted alone, field for field, for
    every number of the vectorised core."""
    from wattgpu import results

    pred = Predictor()
    cat = pred.catalog
    llms = [cat.llm(n) for n in ("meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct")]
    wls = [Workload(), Workload(kind="server", qps=0.5), Workload(kind="closed_loop", concurrency=8),
           Workload(kind="server", qps=50.0, max_batch=16), Workload(max_batch=4)]
    rows = [(g, m, w) for g in cat.gpus[::4] for m in llms for w in wls]
    together = pred.evaluate_rows(rows)
    assert len(together.slot) > 20 and set(results.TABLE_FIELDS) <= set(together.numbers)
    assert_rows_equal_alone(pred, rows, together)

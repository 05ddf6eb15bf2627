"""Capacities kept as rows of the table they were computed in (``wattgpu.results.TableRow``): gathered into arrays
they are the same bytes as the Capacity objects' round trip, and a one-row path reads them as Capacities.

Rows are drawn from the catalog (no measured value is involved); every assertion compares two paths."""
import numpy as np
import pytest

import wattgpu
from wattgpu import assemble, checks
from wattgpu.predictor import default_predictor
from wattgpu.results import (CAPACITY_FIELDS, Capacity, RowMemo, TableRow, _capacity_columns, _gathered,
                             memo_for)
from wattgpu.serving import capacity


@pytest.fixture(scope="module")
def table_rows():
    pred = default_predictor()
    llms = [m for m in pred.catalog.llms if m.total_params_b < 15][:6]
    rows = [(g, m, wattgpu.Workload(max_batch=b, input_tokens=t))
            for g in pred.catalog.gpus[::4] for m in llms for b, t in ((8, 512), (256, 2048))]
    errors, cols = checks.row_errors(rows)
    good = [i for i, e in enumerate(errors) if e is None]
    rows = [rows[i] for i in good]
    cols = assemble.take(cols, good, len(errors))
    return capacity.capacity_table(pred._evaluate, rows, cols, False), len(rows)


def test_gathered_rows_are_the_capacities_bytes(table_rows):
    table, n = table_rows
    assert n > 50
    objects = _capacity_columns([Capacity.of(table, j) for j in range(n)])
    order = list(range(n))[::-1]
    for got in ([TableRow(table, j) for j in range(n)],  # one table, in order
                [TableRow(table, j) if j % 3 else Capacity.of(table, j) for j in range(n)]):  # mixed
        arrays = _gathered(got)
        for k in CAPACITY_FIELDS:
            assert arrays[k].dtype == objects[k].dtype and arrays[k].tobytes() == objects[k].tobytes(), k
    arrays = _gathered([TableRow(table, j) for j in order])  # another order: the rows follow it
    for k in CAPACITY_FIELDS:
        assert arrays[k].tobytes() == objects[k][order].tobytes(), k


def test_the_memo_reads_a_kept_row_as_its_capacity(table_rows):
    table, _ = table_rows
    memo = RowMemo()
    row = (object(), object(), None)
    memo.capacity_put(("k",), row, TableRow(table, 3))
    assert type(memo.capacity_raw(("k",), row)) is TableRow
    cap = memo.capacity_get(("k",), row)
    assert cap == Capacity.of(table, 3)
    assert memo.capacity_raw(("k",), row) is cap, "read once, kept as a Capacity"


def test_a_prediction_after_a_table_reads_the_kept_rows():
    pred = default_predictor()
    memo_for(pred.bundle).clear()
    rows = [(g, pred.resolve_llm("meta-llama/Llama-3.1-8B-Instruct"), wattgpu.Workload(max_batch=64))
            for g in pred.catalog.gpus]
    table = pred.predict_table(rows)
    again = pred.predict_table(rows)  # the kept arrays
    for k in ("power_w", "itl_s", "throughput_tok_s"):
        assert np.array_equal(table[k], again[k], equal_nan=True)
    kept = memo_for(pred.bundle).capacities
    assert any(type(v[2]) is TableRow for v in kept.values())
    i = int(np.flatnonzero(np.isfinite(table["power_w"]))[0])
    one = pred.predict(*rows[i])  # the one-row path reads a TableRow as its Capacity
    assert one.power_w == table["power_w"][i] and one.itl_s == table["itl_s"][i]
    memo_for(pred.bundle).clear()
    assert one.to_dict() == pred.predict(*rows[i]).to_dict()

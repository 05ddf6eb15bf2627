"""What a long-lived process keeps: the row memos stay bounded, and onnxruntime sessions hold no arena that
only grows (the soak test in the slow tier measures the whole; these pin the two causes it found)."""
from __future__ import annotations

import pytest

from wattgpu import Predictor, Workload, default_catalog, rank, raw_columns, results


@pytest.fixture(scope="module")
def pred() -> Predictor:
    return Predictor()


def test_sessions_have_no_growing_arena_or_per_shape_patterns(pred: Predictor) -> None:
    for target in pred.schema.models:
        opts = pred.bundle.session(target).get_session_options()
        assert opts.enable_cpu_mem_arena is False, target
        assert opts.enable_mem_pattern is False, target


def test_row_memo_is_bounded(pred: Predictor, monkeypatch: pytest.MonkeyPatch) -> None:
    limit = 8
    monkeypatch.setattr(results.RowMemo, "LIMIT", limit)
    monkeypatch.setattr(results.RowMemo, "MIX_LIMIT", limit)
    monkeypatch.setattr(results.RowMemo, "OPTIONS_LIMIT", limit)
    monkeypatch.setattr(results.RowMemo, "TABLES_LIMIT", limit)
    monkeypatch.setattr(raw_columns, "SETUP_LIMIT", limit)
    memo = results.memo_for(pred.bundle)
    memo.clear()
    cat = default_catalog()
    gpus = list(cat.gpus)[:6]
    llm = cat.llm("meta-llama/Llama-3.1-8B-Instruct")
    seen_max = {"specs": 0, "warnings": 0, "capacities": 0, "mixes": 0, "options": 0, "tables": 0, "setup columns": 0}
    for i in range(60):  # every row a new Workload object: every call adds memo entries
        rows = [(g, llm, Workload(max_batch=1 + (i + j) % 64, input_tokens=100 + i)) for j, g in enumerate(gpus)]
        server = Workload(kind="server", qps=0.1 * (1 + i))
        for call in (lambda: pred.predict_table(rows),
                     lambda: rank(llm, Workload(kind="closed_loop", concurrency=1 + i), predictor=pred, gpus=gpus),
                     lambda: rank(llm, server, predictor=pred, gpus=gpus),  # solved server states
                     lambda: rank(llm, server, predictor=pred, gpus=gpus, max_itl_ms=50.0)):  # SLA search options
            call()
            for name in seen_max:
                held = len(raw_columns._SETUPS) if name == "setup columns" else len(getattr(memo, name))
                seen_max[name] = max(seen_max[name], held)
    assert all(n <= limit + 1 for n in seen_max.values()), seen_max
    # they did fill (each is sampled between calls, so a memo may be seen just below its bound): the bound was exercised
    assert seen_max["specs"] == limit + 1 and seen_max["mixes"] >= limit and seen_max["options"] >= limit, seen_max
    assert seen_max["tables"] >= limit - 1 and seen_max["setup columns"] >= limit - 1, seen_max

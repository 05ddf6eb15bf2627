"""The model memo of a batch run (wattgpu.assemble.ModelMemo): a model input row is evaluated once per run, the
outputs are the same bits as without it, its size stays bounded, and it reaches no evaluation outside its block."""
from __future__ import annotations

import contextlib
import csv
import threading

import numpy as np
import pytest

from wattgpu import Predictor, Workload, assemble
from wattgpu import features as F
from wattgpu.assemble import ModelMemo, memoised_models
from wattgpu.predictor import NO_KV_CACHE


@pytest.fixture(scope="module")
def pred() -> Predictor:
    return Predictor()


class _Counting:
    """A session proxy that counts the rows it is run on."""

    def __init__(self, session) -> None:
        self.session, self.rows, self.calls = session, 0, 0

    def run(self, outputs, feed):
        self.calls += 1
        self.rows += len(next(iter(feed.values())))
        return self.session.run(outputs, feed)


def _rows(pred: Predictor, n: int, seed: int) -> list:
    """``n`` offline rows that fit, over a few (GPU, LLM) pairs, with varied caps and token counts."""
    cat = pred.catalog
    llms = [m for m in cat.llms if m.arch_class not in NO_KV_CACHE]
    pairs = [(g, m) for g in cat.gpus[:9] for m in llms[:8]]
    fits = F.columns([(g, m, Workload()) for g, m in pairs])["fit_batch"] >= 1
    pairs = [p for p, ok in zip(pairs, fits.tolist()) if ok][:12]
    rng = np.random.default_rng(seed)
    out = []
    for j in range(2 * n):
        wl = Workload(kind="offline", max_batch=int(rng.choice([8, 64, 256])),
                      input_tokens=int(rng.integers(64, 1024)), output_tokens=int(rng.integers(16, 256)))
        out.append((*pairs[j % len(pairs)], wl))
    fits = F.columns(out)["fit_batch"] >= 1
    out = [r for r, ok in zip(out, fits.tolist()) if ok][:n]
    assert len(out) == n
    return out


def _matrix(pred: Predictor, target: str, rows: list) -> np.ndarray:
    return F.matrix(pred.schema.models[target].feature_names, F.columns(rows))


def test_a_memoised_run_gives_the_same_bits_and_evaluates_each_row_once(pred) -> None:
    """Two calls whose rows overlap: inside the memo the second runs the session on its new rows only, and
    every output equals the plain evaluation bit for bit (rows repeated within a call included)."""
    target = "itl"
    m = pred.schema.models[target]
    a = _matrix(pred, target, _rows(pred, 300, seed=1))
    b = np.concatenate([a[100:250], _matrix(pred, target, _rows(pred, 200, seed=2)), a[:5]])
    plain = [assemble.run_distinct(pred._session(target), m.input_name, X) for X in (a, b)]
    counting = _Counting(pred._session(target))
    memo = ModelMemo()
    with memoised_models(memo):
        got = [assemble.run_distinct(counting, m.input_name, X) for X in (a, b)]
    for p, g in zip(plain, got):
        assert p.dtype == g.dtype == np.float32 and p.tobytes() == g.tobytes()

    def distinct(X: np.ndarray) -> set[bytes]:
        return {r.tobytes() for r in np.ascontiguousarray(X)}
    assert counting.rows == len(distinct(a) | distinct(b)) < len(a) + len(b)
    assert counting.calls == 2


def test_the_memo_stays_bounded_and_exact(pred, monkeypatch) -> None:
    """Past its limit a model's table starts again: the answers stay the same bits, the table never grows beyond
    the limit."""
    monkeypatch.setattr(ModelMemo, "LIMIT", 40)
    target = "itl"
    m = pred.schema.models[target]
    X = _matrix(pred, target, _rows(pred, 120, seed=3))
    plain = assemble.run_distinct(pred._session(target), m.input_name, X)
    memo = ModelMemo()
    with memoised_models(memo):
        for start in range(0, len(X), 30):
            part = X[start:start + 30]
            got = assemble.run_distinct(pred._session(target), m.input_name, part)
            assert got.tobytes() == plain[start:start + 30].tobytes()
            assert all(len(t) <= 40 for _, t in memo._tables.values())


def test_the_memo_reaches_only_its_own_block(pred) -> None:
    """Outside the block, and on another thread during it, every row runs through the session."""
    target = "itl"
    m = pred.schema.models[target]
    X = _matrix(pred, target, _rows(pred, 80, seed=4))
    counting = _Counting(pred._session(target))
    assemble.run_distinct(counting, m.input_name, X)
    plain = counting.rows  # what a call without the memo runs (its distinct rows)
    memo = ModelMemo()
    seen_elsewhere: list[int] = []
    with memoised_models(memo):
        assemble.run_distinct(counting, m.input_name, X)
        before = counting.rows

        def other() -> None:
            assemble.run_distinct(counting, m.input_name, X)
            seen_elsewhere.append(counting.rows - before)
        t = threading.Thread(target=other)
        t.start()
        t.join()
    assert seen_elsewhere == [plain]  # the thread ran them all: the memo was not active there
    n = counting.rows
    assemble.run_distinct(counting, m.input_name, X)
    assert counting.rows == n + plain


def test_a_csv_stream_evaluates_a_shared_grid_row_once_across_chunks(pred, tmp_path, monkeypatch) -> None:
    """A CSV answered in chunks: the ITL model runs on no row twice over the whole file (the capacity grids of
    set-ups in different chunks share rows), and the file is the same bytes as answered in one chunk."""
    from wattgpu.batch import predict_csv

    rows = _rows(pred, 240, seed=5)
    src, one, many = tmp_path / "in.csv", tmp_path / "one.csv", tmp_path / "many.csv"
    with open(src, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["llm", "gpu", "workload", "max_batch", "input_tokens", "output_tokens"])
        for g, m, wl in rows:
            w.writerow([m.name, g.name, wl.kind, wl.max_batch, wl.input_tokens, wl.output_tokens])
    def itl_rows(chunk: int) -> list[bytes]:
        fresh = Predictor()
        session = fresh._session("itl")
        seen: list[bytes] = []

        class Recording:
            def run(self, outputs, feed):
                seen.extend(r.tobytes() for r in np.ascontiguousarray(next(iter(feed.values()))))
                return session.run(outputs, feed)
        monkeypatch.setitem(fresh.bundle._sessions, "itl", Recording())
        assert predict_csv(str(src), str(many if chunk < 240 else one), predictor=fresh, chunk=chunk) == (240, 0)
        return seen
    chunked = itl_rows(32)
    assert len(chunked) == len(set(chunked))  # no row twice over the whole file
    itl_rows(4096)
    assert many.read_bytes() == one.read_bytes()
    with monkeypatch.context() as mp:  # the same file without the memo: chunks evaluate shared grid rows again
        mp.setattr(assemble, "memoised_models", lambda memo: contextlib.nullcontext(memo))
        again = itl_rows(32)
    assert set(again) == set(chunked) and len(again) > len(chunked)

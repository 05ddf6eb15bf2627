"""Large model evaluations split over threads (wattgpu.threads): the same outputs bit for bit, whatever the
thread count, and a malformed $WATTGPU_THREADS refused with the variable named."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from wattgpu import Predictor, Workload, threads
from wattgpu import features as F
from wattgpu.errors import ConfigFileError
from wattgpu.predictor import NO_KV_CACHE, TABLE_FIELDS


@pytest.fixture(scope="module")
def pred() -> Predictor:
    return Predictor()


def _varied_rows(pred: Predictor, n: int) -> list:
    """``n`` rows over the catalog's fitting (GPU, LLM) pairs with varied caps, tokens and kinds: enough distinct
    set-ups that their capacity grids reach the threaded slices."""
    cat = pred.catalog
    llms = [m for m in cat.llms if m.arch_class not in NO_KV_CACHE][:12]
    rng = np.random.default_rng(7)
    rows = []
    for j in range(n):
        g, m = cat.gpus[j % len(cat.gpus)], llms[(j // len(cat.gpus)) % len(llms)]
        kind = ("offline", "closed_loop", "server")[j % 3]
        wl = Workload(kind=kind, max_batch=int(rng.choice([8, 32, 128, 256])),
                      input_tokens=int(rng.integers(64, 4096)), output_tokens=int(rng.integers(16, 1024)),
                      concurrency=int(rng.integers(1, 256)) if kind == "closed_loop" else None,
                      qps=float(rng.uniform(0.05, 5.0)) if kind == "server" else None)
        rows.append((g, m, wl))
    return rows


@pytest.mark.parametrize("count", ["2", "3", "7"])
def test_sliced_runs_equal_one_run_bit_for_bit(pred: Predictor, monkeypatch: pytest.MonkeyPatch, count: str) -> None:
    rows = _varied_rows(pred, 1200)
    X = {t: np.tile(x, (4, 1)) for t, x in pred.feature_vectors(rows).items()}  # 4,800 rows: 2-4 slices
    for target, m in pred.schema.models.items():
        session = pred.bundle.session(target)
        monkeypatch.setenv(threads.THREADS_ENV, "1")
        whole = threads.run_rows(session, m.input_name, X[target])
        monkeypatch.setenv(threads.THREADS_ENV, count)
        sliced = threads.run_rows(session, m.input_name, X[target])
        assert sliced.shape == whole.shape and sliced.dtype == whole.dtype
        assert np.array_equal(sliced.view(np.int32), whole.view(np.int32)), target  # the same bits


def test_predict_table_is_the_same_on_one_thread_and_several(pred: Predictor, monkeypatch: pytest.MonkeyPatch) -> None:
    """Capacity grids of ~1,500 set-ups run as one large ITL input: threaded or not, every number is equal."""
    rows = _varied_rows(pred, 1500)
    out = {}
    for count in ("1", "3"):
        monkeypatch.setenv(threads.THREADS_ENV, count)
        fresh = Predictor()  # nothing memoised: every capacity grid evaluated
        sizes: list[int] = []
        real = threads.run_rows

        def spy(session, name, X, real=real, sizes=sizes):
            sizes.append(X.shape[0])
            return real(session, name, X)
        monkeypatch.setattr("wattgpu.assemble.run_rows", spy)
        out[count] = fresh.predict_table(rows)
        assert max(sizes) >= 2 * threads.SLICE_MIN_ROWS  # the threaded path ran
    for f in TABLE_FIELDS:
        a, b = np.asarray(out["1"][f], dtype=np.float64), np.asarray(out["3"][f], dtype=np.float64)
        assert np.array_equal(a.view(np.int64), b.view(np.int64)), f
    assert out["1"]["error"] == out["3"]["error"]


def test_small_inputs_stay_on_the_calling_thread(pred: Predictor, monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[object] = []
    monkeypatch.setattr(threads.threading.Thread, "start", lambda self: started.append(self))
    monkeypatch.setenv(threads.THREADS_ENV, "8")
    X = F.matrix(pred.schema.models["itl"].feature_names, F.columns(_varied_rows(pred, 60)))
    X = np.tile(X, (30, 1))[: 2 * threads.SLICE_MIN_ROWS - 1]
    threads.run_rows(pred.bundle.session("itl"), pred.schema.models["itl"].input_name, X)
    assert started == []


def test_a_failed_slice_raises_on_the_calling_thread() -> None:
    class Broken:
        def run(self, _outputs, feed):
            (x,) = feed.values()
            if x[0, 0] > 0:  # only the second slice fails
                raise RuntimeError("slice failed")
            return [x[:, :1]]
    X = np.zeros((4 * threads.SLICE_MIN_ROWS, 2), dtype=np.float32)
    X[2 * threads.SLICE_MIN_ROWS:] = 1.0
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(threads.THREADS_ENV, "2")
        with pytest.raises(RuntimeError, match="slice failed"):
            threads.run_rows(Broken(), "x", X)


def test_default_thread_count_follows_the_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(threads.THREADS_ENV, raising=False)
    assert threads.thread_count() == min(threads.available_cpus(), threads.MAX_THREADS) >= 1
    monkeypatch.setenv(threads.THREADS_ENV, " 12 ")
    assert threads.thread_count() == 12


@pytest.mark.parametrize("value", ["0", "-1", "two", "1.5", "²", "1e3", "99999", "nan"])
def test_a_malformed_thread_count_is_refused_by_name(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(threads.THREADS_ENV, value)
    with pytest.raises(ConfigFileError) as ei:
        Predictor()
    msg = str(ei.value)
    assert "$WATTGPU_THREADS" in msg and "unset" in msg and "\n" not in msg and ei.value.exit_code == 2


def test_cli_names_a_malformed_thread_count() -> None:
    r = subprocess.run([sys.executable, "-m", "wattgpu.cli", "predict", "--gpu", "A100 SXM4 40GB", "--llm",
                        "meta-llama/Llama-3.1-8B-Instruct"], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "WATTGPU_THREADS": "lots"})
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("error:") and "$WATTGPU_THREADS" in r.stderr and "Traceback" not in r.stderr


def test_the_cpus_are_those_the_process_may_use(monkeypatch: pytest.MonkeyPatch) -> None:
    """Affinity (a container's cpuset, taskset), not the machine's count: the threads, the CSV's worker processes
    and the service's request threads follow it."""
    from wattgpu.service import asgi

    if not hasattr(threads.os, "sched_getaffinity"):
        pytest.skip("no CPU affinity on this OS")
    monkeypatch.setattr(threads.os, "cpu_count", lambda: 64)
    for cpus, want in (({0}, 2), ({0, 1, 2}, 3), (set(range(40)), 8)):
        monkeypatch.setattr(threads.os, "sched_getaffinity", lambda pid, c=cpus: c)
        assert threads.available_cpus() == len(cpus)
        assert asgi.default_workers() == want

"""Soak: a long-running embedding neither grows nor drifts (issue 15).

One process, one shared Predictor, 16 threads: 1,000,000 predictions through the vectorised
``predict_table`` (4,096-row chunks; offline, closed-loop and server rows) and 10,000 ``rank`` calls
over the whole catalog. Every result must equal the single-thread result bit for bit, and the resident
set (after ``gc.collect`` and glibc ``malloc_trim``, i.e. live memory, with the bounded row memos emptied)
must grow by less than 10 MiB from the end of the warm-up to the end of the run (a leak of 10 bytes per
prediction would break that). Jobs go through a bounded queue (``IN_FLIGHT``), as in a server. Runtime:
about 7 minutes on 2 shared CPU cores.

The rows are synthetic *inputs* (catalog GPUs × catalog LLMs × workloads), not measurements.
"""
from __future__ import annotations

import gc
import os
import subprocess
import sys
import threading
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import pytest

from wattgpu import Predictor, Workload, default_catalog, rank
from wattgpu.predictor import TABLE_FIELDS

pytestmark = pytest.mark.slow

THREADS = 16
CHUNK = 4096
PREDICTIONS = 1_000_000
RANKS = 10_000
TEMPLATES = 16
MAX_GROWTH_MIB = 10.0  # the target
IN_FLIGHT = 4 * THREADS  # jobs queued at once


def _trim() -> None:
    """Hand the allocator's free pages back to the OS (glibc ``malloc_trim``), so RSS measures live memory.

    With 16 threads glibc keeps one heap arena per thread and their free-but-cached pages make RSS wander
    by several MiB from run to run; memory that is still referenced (a leak) cannot be trimmed."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _clear_row_memos() -> None:
    """Empty the bounded per-bundle row memos (``results.RowMemo``): they hold up to ``LIMIT`` recent spec
    objects and are cleared when full, so their fill level is a sawtooth of up to ~4 MiB that says nothing
    about a leak; emptying them at both measurements compares like with like (their bound has its own test)."""
    from wattgpu import results

    for memo in list(results._MEMOS.values()):
        memo.clear()


def settled_rss_mib() -> float:
    _clear_row_memos()
    gc.collect()
    _trim()
    return rss_mib()


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _templates(pred: Predictor):
    """TEMPLATES distinct chunks of CHUNK rows mixing GPUs, LLMs and workload kinds."""
    cat = default_catalog()
    gpus, llms = list(cat.gpus), [m for m in cat.llms if m.total_params_b < 20][:12]
    out = []
    for t in range(TEMPLATES):
        rows = []
        for i in range(CHUNK):
            k = t * CHUNK + i
            if k % 16 == 0:
                wl = Workload(kind="server", qps=0.05 * (1 + k % 40), output_tokens=64 + k % 300)
            elif k % 4 == 1:
                wl = Workload(kind="closed_loop", concurrency=1 + k % 64, input_tokens=128 + k % 2000)
            else:
                wl = Workload(max_batch=1 + k % 256, output_tokens=16 + k % 1000, input_tokens=32 + k % 4000)
            rows.append((gpus[k % len(gpus)], llms[(k // len(gpus)) % len(llms)], wl))
        out.append(rows)
    return out


RANK_CONFIGS = [
    ("meta-llama/Llama-3.1-8B-Instruct", Workload(), None),
    ("meta-llama/Llama-3.1-8B-Instruct", Workload(kind="closed_loop", concurrency=16), 60.0),
    ("mistralai/Mistral-7B-Instruct-v0.3", Workload(max_batch=32, output_tokens=512), 40.0),
    ("Qwen/Qwen2.5-7B-Instruct", Workload(input_tokens=2048), None),
]


def _table_key(table: dict) -> tuple:
    return tuple(table[k].tobytes() for k in TABLE_FIELDS) + (tuple(table["error"]),)


CHILD = "WATTGPU_SOAK_CHILD"


def test_soak_16_threads_flat_memory_identical_results():
    """Run in a process of its own, as an embedding application would have it: inside the slow tier's
    pytest process the heap already holds what earlier tests left (about 490 MiB settled, against 145 MiB
    alone), and its fragmentation moved the settled RSS by +26 and +42 MiB in two runs on a loaded machine,
    while the same library code alone grew +7.7 MiB.

    The child runs with glibc's ``MALLOC_ARENA_MAX=2`` (a common setting for threaded Python servers): with one
    heap arena per thread, fragmentation alone moved the settled growth between -1.5 and +8.7 MiB over six runs
    of three commits with no trend between them (2026-12-06; the +10.6/+10.8 MiB that looked like a regression
    were the tail of that spread), while two arenas gave +4.6 and +5.0 MiB and a lower peak. A leak of 10 bytes
    per prediction still breaks the bound."""
    if os.environ.get(CHILD) != "1":
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-m", "slow", "-p", "no:cacheprovider",
                               f"{__file__}::test_soak_16_threads_flat_memory_identical_results"],
                              env={**os.environ, CHILD: "1", "MALLOC_ARENA_MAX": "2"}, capture_output=True, text=True,
                              timeout=3600)
        print(proc.stdout[-3000:])
        assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
        return
    start = time.perf_counter()
    pred = Predictor()
    templates = _templates(pred)
    configs = [(llm, wl, sla) for llm, wl, sla in RANK_CONFIGS]
    # single-thread reference (also the warm-up of sessions and caches)
    ref_tables = [_table_key(pred.predict_table(t)) for t in templates]
    ref_ranks = [rank(llm, wl, max_itl_ms=sla, predictor=pred).to_dict() for llm, wl, sla in configs]

    n_chunks = -(-PREDICTIONS // CHUNK)
    mismatches: list[str] = []
    lock = threading.Lock()

    def table_job(j: int) -> None:
        got = _table_key(pred.predict_table(templates[j % TEMPLATES]))
        if got != ref_tables[j % TEMPLATES]:
            with lock:
                mismatches.append(f"table chunk {j}")

    def rank_job(j: int) -> None:
        llm, wl, sla = configs[j % len(configs)]
        if rank(llm, wl, max_itl_ms=sla, predictor=pred).to_dict() != ref_ranks[j % len(configs)]:
            with lock:
                mismatches.append(f"rank {j}")

    pool = ThreadPoolExecutor(THREADS)  # the same 16 threads for warm-up and run, as in a long-lived server

    def run(n_tables: int, n_ranks: int) -> None:
        jobs = [(table_job, j) for j in range(n_tables)] + [(rank_job, j) for j in range(n_ranks)]
        jobs.sort(key=lambda jb: (jb[1] * 7919) % 1009)  # interleave tables and ranks
        # A bounded queue, as a server has: at most IN_FLIGHT jobs submitted and not yet done. Submitting
        # all 10,245 jobs at once (the first version of this test) raised the peak RSS from ~261 to
        # ~365 MiB and left the settled RSS +11.2 and +13.5 MiB up (bounded: +3.1, +3.0, -2.2 MiB). With
        # PYTHONMALLOC=malloc the unbounded run ended +5.5 MiB: the harness's own transient objects
        # left Python's allocator arenas pinned by the few objects that outlive them (the sampler's
        # floats), which malloc_trim cannot return. The library code was the same in every run.
        inflight: deque[Future[None]] = deque()
        for fn, j in jobs:
            if len(inflight) >= IN_FLIGHT:
                inflight.popleft().result()
            inflight.append(pool.submit(fn, j))
        while inflight:
            inflight.popleft().result()

    # Warm-up with 16 threads (about a fifth of the work): per-thread allocator arenas and onnxruntime
    # buffers reach their working size; then live memory must stay flat for the whole run.
    samples: list[float] = []
    stop = threading.Event()

    def sampler() -> None:
        while not stop.wait(0.05):
            samples.append(rss_mib())

    run(3 * THREADS, RANKS // 10)
    before = settled_rss_mib()
    watcher = threading.Thread(target=sampler, daemon=True)
    watcher.start()
    run(n_chunks, RANKS)
    stop.set()
    watcher.join()
    after = settled_rss_mib()  # threads still alive: their per-thread state counts
    pool.shutdown()
    peak = max(samples + [after])
    elapsed = time.perf_counter() - start
    print(f"soak: {n_chunks * CHUNK:,} predictions + {RANKS:,} ranks on {THREADS} threads in {elapsed:.0f} s; "
          f"settled RSS after warm-up {before:.1f} MiB, at the end {after:.1f} MiB ({after - before:+.1f} MiB); "
          f"peak RSS while running {peak:.1f} MiB")
    assert not mismatches, f"{len(mismatches)} results differ from the single-thread run: {mismatches[:5]}"
    growth = after - before
    assert growth < MAX_GROWTH_MIB, f"RSS grew {growth:.1f} MiB after warm-up (target < {MAX_GROWTH_MIB:g} MiB): a leak"
    assert n_chunks * CHUNK >= PREDICTIONS and np.isfinite(before)

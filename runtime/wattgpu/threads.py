"""Large model evaluations split over the CPUs this process may use, with the same outputs bit for bit.

Each session runs on one thread (``intra_op_num_threads = 1``): onnxruntime's own intra-op threads split a
tree ensemble over its trees, which changes the order of the leaf sums and so the last bits of an output
(measured on the shipped models: 100 rows and more differ). A tree ensemble's output for a row does not
depend on the rows run beside it, so slicing the rows and running the slices on as many threads is exact:
onnxruntime releases the GIL while it runs, so the slices run at once. Small inputs run on the calling
thread (a thread's start costs ~0.1 ms; a slice of :data:`SLICE_MIN_ROWS` rows ~4 ms of trees).

``$WATTGPU_THREADS`` sets the number of threads (1: the calling thread only); by default, the CPUs the
process may run on, at most :data:`MAX_THREADS`.
"""
from __future__ import annotations

import os
import threading
from typing import Any

import numpy as np

from .errors import ConfigFileError

THREADS_ENV = "WATTGPU_THREADS"
SLICE_MIN_ROWS = 1024  # fewer rows per thread than this: not worth a thread
MAX_THREADS = 8  # by default; $WATTGPU_THREADS may ask for more


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity where the OS has one, else the machine's count)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def thread_count() -> int:
    """Threads a large evaluation may use: ``$WATTGPU_THREADS`` when set, else :func:`available_cpus`
    (at most :data:`MAX_THREADS`)."""
    raw = os.environ.get(THREADS_ENV, "").strip()
    if not raw:
        return min(available_cpus(), MAX_THREADS)
    if not (raw.isascii() and raw.isdigit()) or not 1 <= int(raw) <= 1024:
        raise ConfigFileError(f"${THREADS_ENV}", f"{raw[:20]!r} is not a whole number of threads from 1 to 1024; "
                                                 f"set it to 1 to run the models on the calling thread only, or unset "
                                                 f"it to use the CPUs this process may run on")
    return int(raw)


def run_rows(session: Any, input_name: str, X: np.ndarray) -> np.ndarray:
    """``session``'s first output on the rows of ``X``: in slices of at least :data:`SLICE_MIN_ROWS` rows on up
    to :func:`thread_count` threads (the calling thread runs the first), concatenated in row order."""
    parts = min(X.shape[0] // SLICE_MIN_ROWS, thread_count()) if X.shape[0] >= 2 * SLICE_MIN_ROWS else 1
    if parts < 2:
        return session.run(None, {input_name: X})[0]
    slices = np.array_split(X, parts)
    out: list[Any] = [None] * parts
    failed: list[BaseException] = []

    def run(j: int) -> None:
        try:
            out[j] = session.run(None, {input_name: slices[j]})[0]
        except BaseException as exc:  # re-raised on the calling thread, as if the run had not been split
            failed.append(exc)
    workers = [threading.Thread(target=run, args=(j,), name=f"wattgpu-rows-{j}", daemon=True)
               for j in range(1, parts)]
    for w in workers:
        w.start()
    run(0)
    for w in workers:
        w.join()
    if failed:
        raise failed[0]
    return np.concatenate(out)

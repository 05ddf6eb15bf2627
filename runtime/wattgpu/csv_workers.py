"""``predict --input`` on worker processes: a large CSV's chunks answered at once on the CPUs the process may
use, written in file order, byte for byte what one process writes.

Python formats and checks every row under one GIL, so one process leaves all but one CPU idle for most of a
CSV's run (onnxruntime's row slices use the others only while the models run, :mod:`wattgpu.threads`). Here,
with ``n`` = :func:`wattgpu.threads.thread_count` processes in all, the calling process reads the file, splits
each chunk between itself and ``n - 1`` worker processes by the rows' (GPU, LLM) cells (:class:`_Router`: a pair
stays with one process, so its memos serve every set-up of the pair), and writes every chunk's answers in file
order. A worker (``python -c BOOT``, running :func:`wattgpu.batch.csv_worker` from the caller's own wattgpu)
rebuilds the same Predictor (bundle directory, catalog) and answers its parts as the caller would
(``make(pred, defaults, chunk, prices)``: :func:`wattgpu.batch._predict_stream` with
:func:`wattgpu.batch.csv_answers`, its calls sharing their memos). A row's answer depends on the row alone, so the
bytes are the same.

Used by ``wattgpu predict --input`` (and ``predict_csv(workers=None)`` or a count: the Python function keeps to
its own process by default) when the file has more than one chunk, ``n`` is 2 or more (``$WATTGPU_THREADS=1``:
one process), the predictor can be rebuilt (a :class:`~wattgpu.predictor.Predictor` itself, not a subclass) and
``sys.executable`` is a Python interpreter (not an application embedding Python). Messages are pickles
framed by their length on the workers' standard input and output (errors cross as they are:
``WattGPUError.__reduce__``). A worker that cannot start or stops without an answer is no row's fault: its
chunks and the rest run in the calling process, and ``report`` says so once. An error the whole run stops on
(a damaged bundle) stops it as in one process.
"""
from __future__ import annotations

import os
import pickle
import struct
import subprocess
import sys
import tempfile
import threading
import traceback
from collections import deque
from itertools import chain, islice
from typing import IO, Any, Callable, Iterator

from .errors import WattGPUError

Row = tuple[int, dict[str, str], Any]  # (line, cells by column, structural problem or None) as read
Answered = tuple[int, dict[str, str], Any]  # (line, cells by column, answer: CSV cells or a RowError)
Stream = Callable[[Iterator[Row]], Iterator[Answered]]  # rows → their answers, in order
Make = Callable[[Any, Any, int, Any], Stream]  # (predictor, default workload, chunk, prices) → a Stream
_LENGTH = struct.Struct("<Q")
WORKERS_ENV = {"WATTGPU_THREADS": "1"}  # each worker one thread: the processes are the parallelism


class WorkerFailed(Exception):
    """A worker process stopped, or could not be reached, before it answered."""


def stream(rows: Iterator[Row], make: Make, pred: Any, defaults: Any, chunk: int, prices: Any,
           report: Callable[[str], None] = lambda msg: None, workers: int | None = None) -> Iterator[Answered]:
    """``make(pred, defaults, chunk, prices)(rows)`` (:func:`wattgpu.batch._csv_stream`: each row as
    ``(line, cells, answer | RowError)``), in file order; on ``workers`` processes in all (None:
    :func:`wattgpu.threads.thread_count`), this one included, when the file has more than one chunk (each worker
    calls the same ``make`` with the Predictor rebuilt, :func:`serve`)."""
    from .threads import thread_count

    answer = make(pred, defaults, chunk, prices)

    first = list(islice(rows, chunk))
    more = list(islice(rows, chunk))
    n = thread_count() if workers is None else workers
    setup = _setup(pred, defaults, chunk, prices) if more and n >= 2 else None
    if setup is None:
        yield from answer(chain(first, more, rows))
        return
    pool = _Pool(setup, n - 1)
    chunks = _chunks(chain(first, more, rows), chunk)
    try:
        yield from pool.run(chunks, _Answerer(answer))
    except WorkerFailed as exc:
        report(f"warning: CSV worker processes stopped ({exc}); the remaining rows run in this process")
        rest = chain.from_iterable(pool.unanswered)
        pool.close()
        yield from answer(chain(rest, chain.from_iterable(chunks)))
    finally:
        pool.close()


class _Answerer:
    """The parts of one run handed over one at a time, each answered as a whole by ``answer`` (a call per part;
    :func:`wattgpu.batch._csv_stream` makes the calls share their memos and resolved names)."""

    def __init__(self, answer: Stream) -> None:
        self.stream = answer

    def answer(self, part: list[Row]) -> list[Any]:
        """Each row of ``part``: its answer (CSV cells) or RowError."""
        return [r for _, _, r in self.stream(iter(part))]


def _chunks(rows: Iterator[Row], chunk: int) -> Iterator[list[Row]]:
    while True:
        part = list(islice(rows, chunk))
        if not part:
            return
        yield part


AHEAD = 3  # chunks whose parts the workers may hold at once
BALANCE = 1.2  # a chunk whose largest part would exceed this × its fair share is split evenly instead


class _Router:
    """Which process answers each row: every (GPU, LLM) pair of cells goes to one process for the whole run, the
    pairs spread so the processes have answered about as many rows each. A process then sees a pair's every
    set-up, so its memos (capacities, model rows, resolved names) serve them all, where chunks dealt in turn had
    the processes compute the same capacity grids and model rows again. A chunk the pairs cannot share out fairly
    (a file of few pairs) is split into equal runs of rows instead: the answers are the same wherever a row goes."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.owner: dict[tuple[str, str], int] = {}
        self.load = [0] * n

    def owners(self, chunk: list[Row]) -> list[int]:
        """The process (0: the calling one) of each row of ``chunk``."""
        owner, load, start = self.owner, self.load, list(self.load)
        out = []
        for _, cells, _ in chunk:
            key = (cells.get("gpu") or "", cells.get("llm") or "")
            o = owner.get(key)
            if o is None:
                o = owner[key] = load.index(min(load))
                if len(owner) > _PAIRS_LIMIT:
                    owner.clear()
            load[o] += 1
            out.append(o)
        if max(a - b for a, b in zip(load, start)) > BALANCE * len(chunk) / self.n:
            out = [k * self.n // len(chunk) for k in range(len(chunk))]
            self.load = [b + out.count(o) for o, b in enumerate(start)]
        return out


_PAIRS_LIMIT = 1 << 16  # pairs remembered (then the spreading starts again)


def _setup(pred: Any, defaults: Any, chunk: int, prices: Any) -> bytes | None:
    """The first message to every worker: how to rebuild ``pred`` and what to answer with; None when the
    predictor cannot be rebuilt in another process (a subclass, an unpicklable catalog) or Python cannot be
    started again (a frozen application)."""
    from .predictor import Predictor

    if type(pred) is not Predictor or getattr(sys, "frozen", False) or not _is_python(sys.executable):
        return None
    path = pred.bundle.path
    try:
        return pickle.dumps({"models": None if path is None else os.fspath(path), "catalog": pred._catalog,
                             "defaults": defaults, "chunk": chunk, "prices": tuple(prices)},
                            protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # an object in a user catalog that does not pickle: one process
        return None


def _is_python(executable: str) -> bool:
    """Whether ``executable`` is a Python interpreter by its name (``python3.11``, ``python.exe``, ``pypy3``): an
    application embedding Python (a server, a 3D tool) names its own binary there, which must not be started."""
    return os.path.basename(executable or "").lower().startswith(("python", "pypy"))


def _frame(data: bytes) -> bytes:
    return _LENGTH.pack(len(data)) + data


def _read(f: IO[bytes]) -> bytes | None:
    """One framed message from ``f``; None at the end of the stream."""
    head = f.read(_LENGTH.size)
    if len(head) < _LENGTH.size:
        return None
    (size,) = _LENGTH.unpack(head)
    data = f.read(size)
    if len(data) < size:
        return None
    return data


# The worker's command: Python without the working directory on its path, importing the caller's wattgpu (the
# directory it was imported from goes first only where a plain import would find another, or none).
BOOT = """
import sys
from importlib.util import find_spec
root = sys.argv[1]
if sys.path and sys.path[0] in ('', '.'):
    sys.path.pop(0)
spec = find_spec('wattgpu')
if spec is None or spec.origin is None or not spec.origin.startswith(root):
    sys.path.insert(0, root)
from wattgpu.batch import csv_worker
csv_worker()
"""


class _Worker:
    """One worker process: its pipes, a thread writing its messages (so the caller never waits on a worker
    still starting), and a file for what it writes to standard error."""

    def __init__(self, setup: bytes) -> None:
        import queue

        import wattgpu

        root = os.path.dirname(os.path.dirname(os.path.abspath(wattgpu.__file__)))  # this process's wattgpu
        self.err = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([sys.executable, "-c", BOOT, root + os.sep], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.err, env=dict(os.environ, **WORKERS_ENV))
        self.outbox: Any = queue.SimpleQueue()
        self.writer = threading.Thread(target=self._write, name="wattgpu-csv-send", daemon=True)
        self.writer.start()
        self.send(setup)

    def _write(self) -> None:
        stdin = self.proc.stdin
        assert stdin is not None
        try:
            while True:
                item = self.outbox.get()
                if item is None:
                    break
                stdin.write(item)
                stdin.flush()
        except (OSError, ValueError):  # a broken pipe: the worker has stopped (receive() says why)
            pass
        finally:
            try:
                stdin.close()
            except (OSError, ValueError):
                pass

    def send(self, data: bytes | None) -> None:
        """Queue one message for the worker (None: the end of its chunks)."""
        self.outbox.put(None if data is None else _frame(data))

    def receive(self) -> list[Any]:
        """The answers of the oldest chunk sent; :class:`WorkerFailed` when the worker stopped first; an error
        the whole run stops on is raised as it was raised there."""
        assert self.proc.stdout is not None
        data = _read(self.proc.stdout)
        if data is None:
            raise WorkerFailed(self.why())
        kind, value = pickle.loads(data)
        if kind == "ok":
            return value
        if kind == "raise":
            raise value
        last = value.strip().splitlines()[-1] if value.strip() else "no message"
        raise WorkerFailed(f"a worker failed: {last}")

    def why(self) -> str:
        """Why the worker stopped: its exit status and the last line it wrote to standard error."""
        try:
            code: int | None = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        self.err.seek(0)
        lines = self.err.read()[-4096:].decode("utf-8", "replace").strip().splitlines()
        last = f": {lines[-1]}" if lines else ""
        return (f"a worker exited with status {code}{last}" if code is not None
                else f"a worker stopped answering{last}")

    def close(self) -> None:
        """Stop the worker (killed if it still runs) and its writer."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.outbox.put(None)
        self.writer.join(timeout=5)
        try:
            if self.proc.stdout is not None:
                self.proc.stdout.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        self.err.close()


class _Pool:
    """``n`` worker processes and the calling process answering chunks in turn, the answers read back in the
    order the chunks were read."""

    def __init__(self, setup: bytes, n: int) -> None:
        self.workers: list[_Worker] = []
        self.unanswered: list[list[Row]] = []  # after a WorkerFailed: the chunks read and not answered, in order
        self.failed_start: str | None = None
        try:
            for _ in range(n):
                self.workers.append(_Worker(setup))
        except OSError as exc:  # Python cannot be started here: the rows run in the calling process
            self.failed_start = f"cannot start a worker process ({exc.strerror or exc})"

    def run(self, chunks: Iterator[list[Row]], local: _Answerer) -> Iterator[tuple[int, dict[str, str], Any]]:
        """Every chunk's rows with their answers, in order. Each chunk is split between the processes by
        :class:`_Router` (this one answers its part while the workers answer theirs); the workers hold the parts of
        up to :data:`AHEAD` chunks, so they never wait on the rows being written."""
        if self.failed_start is not None:  # nothing sent: every chunk still to come runs in the calling process
            raise WorkerFailed(self.failed_start)
        router = _Router(len(self.workers) + 1)
        plan: deque[tuple[list[Row], list[int], list[list[Row]]]] = deque()  # (chunk, owner per row, parts)
        ended = False

        def fill() -> None:
            nonlocal ended
            while not ended and len(plan) < AHEAD:
                chunk = next(chunks, None)
                if chunk is None:
                    ended = True
                    for w in self.workers:  # no more parts: each worker answers what it holds and exits
                        w.send(None)
                    return
                owners = router.owners(chunk)
                parts: list[list[Row]] = [[] for _ in range(router.n)]
                for row, o in zip(chunk, owners):
                    parts[o].append(row)
                for w, part in zip(self.workers, parts[1:]):
                    w.send(pickle.dumps(part, protocol=pickle.HIGHEST_PROTOCOL))
                plan.append((chunk, owners, parts))
        fill()
        while plan:
            chunk, owners, parts = plan[0]
            try:
                got = [local.answer(parts[0]), *(w.receive() for w in self.workers)]
                if list(map(len, got)) != list(map(len, parts)):
                    raise WorkerFailed(f"a worker answered {sum(map(len, got))} rows of a chunk of {len(chunk)}")
            except WorkerFailed:
                self.unanswered = [c for c, _, _ in plan]
                raise
            plan.popleft()
            fill()
            answers = [iter(g) for g in got]
            for (line, row, _), o in zip(chunk, owners):
                yield line, row, next(answers[o])

    def close(self) -> None:
        for w in self.workers:
            w.close()
        self.workers = []


# ---------------------------------------------------------------- the worker process
def serve(make: Make) -> None:
    """A worker process's life (:func:`wattgpu.batch.csv_worker`): read the set-up, then answer the chunks on
    standard input until it ends, one message of answers per chunk on standard output. Anything else written to
    standard output goes to standard error, so it cannot break a message."""
    out = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    sys.stdout = sys.stderr
    try:
        _serve(sys.stdin.buffer, out, make)
    except BrokenPipeError:  # the caller has gone (it stopped on an error, or was interrupted)
        pass
    finally:
        try:
            out.close()
        except OSError:
            pass


def _serve(inp: IO[bytes], out: IO[bytes], make: Make) -> None:
    from .predictor import Predictor

    def put(kind: str, value: Any) -> None:
        out.write(_frame(pickle.dumps((kind, value), protocol=pickle.HIGHEST_PROTOCOL)))
        out.flush()

    data = _read(inp)
    if data is None:
        return
    try:
        setup = pickle.loads(data)
        pred = Predictor(setup["models"], setup["catalog"])
        local = _Answerer(make(pred, setup["defaults"], setup["chunk"], setup["prices"]))
        while True:
            msg = _read(inp)
            if msg is None:
                return
            put("ok", local.answer(pickle.loads(msg)))
    except WattGPUError as exc:  # what stops a whole run (a damaged bundle): raised in the caller as it is
        put("raise", exc)
    except Exception:
        put("crash", traceback.format_exc())

"""Many predictions from a CSV file, streamed: read, predict and write ``chunk`` rows at a time.

Input columns (:data:`INPUT_COLUMNS`): ``llm``, ``gpu`` (required) and optional workload fields ``workload``
(or ``kind``) and every field of :data:`wattgpu.workload.WORKLOAD_NUMBERS` / ``engine``; an empty cell takes
the default. A column that is none of these (nor an output column of an earlier run) is an error naming the
closest accepted column, so a typo such as ``batch`` for ``max_batch`` never silently takes the default;
with ``lenient`` it is a warning and the column is copied through. Output: the input columns, then :data:`OUTPUT_COLUMNS`, then
``error``. Memory stays flat in the number of rows: only one chunk, and bounded name caches, are held.

The input must be a regular file (never a FIFO or device, which could hang or never end), at most
:data:`MAX_CSV_BYTES` bytes, UTF-8 text without NUL bytes and with lines of at most
:data:`MAX_LINE_CHARS` characters. The output is written to a temporary file next to ``out_path`` and
renamed over it at the end, so a failed run never leaves a half-written or clobbered output.
"""
from __future__ import annotations

import csv
import os
import re
import sys
import stat
import tempfile
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import IO, TYPE_CHECKING, Any, Callable, Iterator, Sequence

from . import record
from .errors import (ArtifactError, ConfigFileError, ModelFitError, SpecValidationError, UnknownEntityError,
                     UnsupportedModelError, WattGPUError)
from .safeio import check_path_type, open_regular, wide_encoding, write_problem
from .energy import Prices
from .workload import WORKLOAD_CHOICES, WORKLOAD_NUMBERS, Workload

if TYPE_CHECKING:
    from .assemble import ModelMemo  # imported where a stream runs: batch stays light to import

CHUNK_ROWS = 4096
MAX_CSV_BYTES = 8 * 1024**3  # streamed, so this bounds run time rather than memory
MAX_LINE_CHARS = 1 << 20
WIDE_CSV = "is {} text; save the CSV as UTF-8"
MAX_COLUMNS = 256
CACHE_LIMIT = 4096  # distinct names / workload cells remembered; cleared when exceeded (bounded memory)
KIND_COLUMNS = ("workload", "kind")
WORKLOAD_COLUMNS = tuple(WORKLOAD_NUMBERS) + tuple(c for c in WORKLOAD_CHOICES if c != "kind")
INPUT_COLUMNS = ("llm", "gpu", "dtype") + KIND_COLUMNS + WORKLOAD_COLUMNS  # dtype: the weight dtype as served (as --dtype)
OUTPUT_COLUMNS = record.csv_columns()  # the prediction fields as CSV cells (wattgpu.record); then "error"


# Spellings other tools use for an input column (vLLM's flags and benchmark fields among them).
COLUMN_SYNONYMS = {
    "batch": "max_batch", "batch_size": "max_batch", "max_num_seqs": "max_batch", "max_batch_size": "max_batch",
    "tokens_out": "output_tokens", "out_tokens": "output_tokens", "output_len": "output_tokens",
    "max_tokens": "output_tokens", "output_length": "output_tokens", "generated_tokens": "output_tokens",
    "tokens_in": "input_tokens", "in_tokens": "input_tokens", "input_len": "input_tokens", "prompt_tokens": "input_tokens",
    "prompt_len": "input_tokens", "input_length": "input_tokens", "prompt_length": "input_tokens",
    "rate": "qps", "request_rate": "qps", "arrival_rate": "qps", "rps": "qps",
    "clients": "concurrency", "users": "concurrency", "concurrent_users": "concurrency", "max_concurrency": "concurrency",
    "tensor_parallel_size": "tp", "tp_size": "tp", "model": "llm", "model_id": "llm", "gpu_name": "gpu",
    "device": "gpu", "requests": "num_requests", "num_prompts": "num_requests",
}


def check_columns(cols: Sequence[str], path: str, lenient: bool = False,
                  warn: Callable[[str], None] = lambda msg: None) -> None:
    """Refuse a header column that is neither an input column (:data:`INPUT_COLUMNS`) nor an output column
    of an earlier run, naming the closest accepted one; with ``lenient``, ``warn`` about it instead (the
    column is then copied through)."""
    import difflib

    known = set(INPUT_COLUMNS) | set(record.csv_columns()) | {"error"}
    for c in cols:
        if c in known:
            continue
        key = c.strip().lower().replace("-", "_").replace(" ", "_")
        close = [COLUMN_SYNONYMS[key]] if key in COLUMN_SYNONYMS else difflib.get_close_matches(key, INPUT_COLUMNS, n=1,
                                                                                                 cutoff=0.5)
        hint = f"did you mean {close[0]!r}? " if close else ""
        problem = (f"column {c[:60]!r} is not an input column: {hint}accepted columns are {', '.join(INPUT_COLUMNS)}")
        if not lenient:
            raise ConfigFileError(path, problem + "; rename it, or pass --lenient to copy it through")
        warn(f"warning: {path}: {problem}; copied through, not used (--lenient)")


# Why a row was skipped, in the order the summary lists them.
REASONS = ("invalid value", "unknown GPU or LLM", "unreadable spec file", "does not fit in GPU memory",
           "unsupported architecture", "not predictable")


def skip_reason(exc: BaseException) -> str:
    """The summary category of a row error."""
    exc = getattr(exc, "cause", None) or exc
    if isinstance(exc, UnknownEntityError):
        return "unknown GPU or LLM"
    if isinstance(exc, ConfigFileError):
        return "unreadable spec file"
    if isinstance(exc, ModelFitError):
        return "does not fit in GPU memory"
    if isinstance(exc, UnsupportedModelError):
        return "unsupported architecture"
    if isinstance(exc, SpecValidationError):
        return "invalid value"
    return "not predictable"


class RowError(WattGPUError):
    """A bad CSV row, named by its line number; ``cause`` is the underlying WattGPUError."""

    def __init__(self, line: int, problem: str, cause: WattGPUError | None = None, column: str = "") -> None:
        self.line, self.cause = line, cause
        self.problem = " ".join(problem.split())  # always one line
        self.reason = skip_reason(cause) if cause is not None else "invalid value"
        self.column = column or _error_column(cause)
        super().__init__(f"line {line}: {self.problem}")


def _error_column(exc: WattGPUError | None) -> str:
    """The CSV column a row error is about, where one is: a bad cell's column, or ``gpu``/``llm`` for a
    name or spec file that could not be resolved; empty when the row as a whole is at fault."""
    if isinstance(exc, SpecValidationError) and exc.entity in ("", "workload"):
        return str(exc.field)
    if isinstance(exc, UnknownEntityError):
        return "gpu" if exc.kind == "GPU" else "llm"
    return ""


def row_workload(row: dict[str, str], defaults: Workload) -> Workload:
    """The Workload a CSV row describes (empty cells keep ``defaults``); a bad cell raises a
    SpecValidationError naming the column and the accepted range."""
    kw: dict[str, Any] = {}
    columns: dict[str, str] = {}
    kind_col = next((c for c in KIND_COLUMNS if (row.get(c) or "").strip()), None)
    if kind_col is not None:
        text = row[kind_col]
        try:
            kind = WORKLOAD_CHOICES["kind"].parse("", kind_col, text)
        except SpecValidationError as exc:
            raise SpecValidationError("", kind_col, text, exc.expected) from None
        kw["kind"], columns["kind"] = kind, kind_col
        if kind != "server":
            kw["qps"] = None
        if kind != "closed_loop":
            kw["concurrency"] = None
    for name in WORKLOAD_COLUMNS:
        text = row.get(name) or ""
        if not text.strip():
            continue
        rule = WORKLOAD_NUMBERS.get(name) or WORKLOAD_CHOICES[name]
        try:
            kw[name] = rule.parse("", name, text)
        except SpecValidationError as exc:
            raise SpecValidationError("", name, text, exc.expected) from None
        columns[name] = name
    try:
        return replace(defaults, **kw)
    except SpecValidationError as exc:
        raise SpecValidationError("", columns.get(exc.field, exc.field), exc.value, exc.expected) from None


def _lines(f: IO[str], path: str) -> Iterator[str]:
    """The file's lines, each at most MAX_LINE_CHARS characters and free of NUL bytes."""
    n = 0
    while True:
        line = f.readline(MAX_LINE_CHARS + 1)
        if not line:
            return
        n += 1
        if len(line) > MAX_LINE_CHARS:
            raise ConfigFileError(path, f"line {n} is longer than {MAX_LINE_CHARS:,} characters; "
                                        "is this really a CSV file?")
        if "\x00" in line:
            wide = wide_encoding(line) if n == 1 else None
            if wide:
                raise ConfigFileError(path, WIDE_CSV.format(wide))
            raise ConfigFileError(path, f"line {n} contains NUL bytes (binary data); pass a text CSV file")
        yield line


def _header(reader: Any, path: str) -> list[str]:
    try:
        head = next(reader)
    except StopIteration:
        raise ConfigFileError(path, "is empty; it needs a header with at least the columns llm and gpu") from None
    cols = [c.strip() for c in head]
    if len(cols) > MAX_COLUMNS:
        raise ConfigFileError(path, f"has {len(cols)} columns; at most {MAX_COLUMNS} are accepted")
    if not {"llm", "gpu"} <= set(cols):
        sep = next((d for d in (";", "\t", "|") if any(d in c for c in cols)), None)
        how = "" if sep is None else (f"; its header separates columns with {sep!r}: "
                                      "separate them with commas")
        raise ConfigFileError(path, "needs a header with at least the columns llm and gpu" + how)
    dup = next((c for i, c in enumerate(cols) if c and c in cols[:i]), None)
    if dup is not None:
        raise ConfigFileError(path, f"column {dup!r} appears twice in the header; keep one")
    return cols


def _rows(f: IO[str], path: str) -> tuple[list[str], Iterator[tuple[int, dict[str, str], str | None]]]:
    """The header and an iterator of (line, row, structural problem or None)."""
    reader = csv.reader(_lines(f, path))
    cols = _header(reader, path)
    n = len(cols)

    def gen() -> Iterator[tuple[int, dict[str, str], str | None]]:
        for cells in reader:
            if not cells or (len(cells) == 1 and not cells[0].strip()):
                continue  # blank line
            problem = None
            if len(cells) > n:
                extra = cells[n:]
                if any(c.strip() for c in extra):
                    problem = f"has {len(cells)} cells but the header has {n} columns"
                cells = cells[:n]
            yield reader.line_num, dict(zip(cols, cells)), problem
    return cols, gen()


class _BoundedCache(dict[Any, Any]):
    def put(self, key: Any, value: Any) -> Any:
        if len(self) >= CACHE_LIMIT:
            self.clear()
        self[key] = value
        return value


def predict_rows(path: str, defaults: Workload | None = None, predictor: Any = None,
                 chunk: int = CHUNK_ROWS) -> Iterator[tuple[int, dict[str, str], Any]]:
    """Yield ``(line, row, Prediction | RowError)`` for every data row, in file order, streaming."""
    with _open_csv(path) as f:
        _, rows = _rows(f, str(path))
        yield from _predict_stream(rows, defaults, predictor, chunk)


def resolve_rows(path: str, defaults: Workload | None = None, predictor: Any = None
                 ) -> Iterator[tuple[int, dict[str, str], Any]]:
    """Yield ``(line, row, (GpuSpec, LlmSpec, Workload) | RowError)`` for every data row, streaming:
    the rows :func:`predict_rows` would predict, resolved by the same rules (``wattgpu calibrate``
    reads its measurements with it)."""
    with _open_csv(path) as f:
        _, rows = _rows(f, str(path))
        yield from _resolve_stream(rows, defaults, predictor)


class ResolveCaches:
    """What resolving keeps across the rows of one run: names → specs, workload cells → Workload, and a row's
    cells → its triple (rows of a file repeat). One per stream; a run answered in parts passes the same one to each
    part, so a part resolves a name another has already resolved to the same objects."""

    def __init__(self) -> None:
        self.by_kind = {"gpu": _BoundedCache(), "llm": _BoundedCache(), "wl": _BoundedCache()}
        self.rows = _BoundedCache()


def _resolve_stream(rows: Iterator[tuple[int, dict[str, str], str | None]], defaults: Workload | None,
                    predictor: Any, kept: ResolveCaches | None = None) -> Iterator[tuple[int, dict[str, str], Any]]:
    """Each CSV row as ``(line, row, triple | RowError)``: names resolved (cached in ``kept``), workload cells
    checked."""
    from .predictor import default_predictor
    from .quant import with_dtype

    pred = predictor or default_predictor()
    defaults = defaults or Workload()
    if not isinstance(defaults, Workload):
        raise WattGPUError(f"defaults: expected a Workload, got {type(defaults).__name__}")
    kept = ResolveCaches() if kept is None else kept
    caches = kept.by_kind
    resolvers = {"gpu": pred.resolve_gpu, "llm": pred.resolve_llm}
    wl_cols = KIND_COLUMNS + WORKLOAD_COLUMNS

    def resolve(kind: str, key: Any, fn: Callable[[], Any]) -> Any:
        cache = caches[kind]
        hit = cache.get(key)
        if hit is None:
            try:
                hit = fn()
            except ArtifactError:
                raise  # a damaged install is no row's fault: the whole run stops with exit 3
            except WattGPUError as exc:
                hit = exc
            cache.put(key, hit)
        if isinstance(hit, WattGPUError):
            raise hit
        return hit

    known = kept.rows  # the cells a row is resolved from → its triple
    key_cols = ("llm", "gpu", "dtype") + wl_cols
    for line, row, problem in rows:
        key = tuple(map(row.get, key_cols))
        if problem is None:
            hit = known.get(key)
            if hit is not None:
                yield line, row, hit
                continue
        try:
            if problem is not None:
                raise RowError(line, problem)
            llm_name, gpu_name = row.get("llm", "").strip(), row.get("gpu", "").strip()
            if not llm_name or not gpu_name:
                missing = "llm" if not llm_name else "gpu"
                raise RowError(line, f"column {missing!r} is empty; name a catalog {missing.upper()} or a spec file",
                               column=missing)
            wl_key = tuple(row.get(c) or "" for c in wl_cols)
            dtype = (row.get("dtype") or "").strip() or None  # the weight dtype as served (as --dtype)
            triple: Any = (resolve("gpu", gpu_name, lambda: resolvers["gpu"](gpu_name)),
                           resolve("llm", (llm_name, dtype), lambda: with_dtype(resolvers["llm"](llm_name), dtype)),
                           resolve("wl", wl_key, lambda: row_workload(row, defaults)))
            known.put(key, triple)
        except RowError as exc:
            triple = exc
        except SpecValidationError as exc:
            triple = RowError(line, _row_message(exc, wl_cols), exc)
        except ArtifactError:
            raise
        except WattGPUError as exc:
            triple = RowError(line, str(exc), exc)
        yield line, row, triple


Answer = Callable[[Any, list[Any]], list[Any]]  # (predictor, resolved rows) → one result or WattGPUError per row


def _predictions(pred: Any, triples: list[Any]) -> list[Any]:
    return pred.predict_specs_safe(triples)


def csv_answers(prices: Prices) -> Answer:
    """An :data:`Answer` giving each row's output cells as CSV text (:func:`wattgpu.csv_table.answer_cells`);
    rows with the same resolved (GPU, LLM, workload) objects are evaluated once per run (a row's answer
    depends on those alone; the answers of up to ``CACHE_LIMIT`` of them are kept, with the objects)."""
    from .csv_table import answer_cells

    known = _BoundedCache()  # (id(gpu), id(llm), id(workload)) → (triple, answer)

    def answer(pred: Any, triples: list[Any]) -> list[Any]:
        got: list[Any] = [None] * len(triples)
        todo: dict[tuple[int, int, int], list[int]] = {}
        for k, t in enumerate(triples):  # the rows and `known` hold the objects, so an id is not reused meanwhile
            key = (id(t[0]), id(t[1]), id(t[2]))
            hit = known.get(key)
            if hit is not None and hit[0][0] is t[0] and hit[0][1] is t[1] and hit[0][2] is t[2]:
                got[k] = hit[1]
            else:
                todo.setdefault(key, []).append(k)
        if todo:
            firsts = [triples[ks[0]] for ks in todo.values()]
            for (key, ks), t, r in zip(todo.items(), firsts, answer_cells(pred.evaluate_rows(firsts), prices)):
                known.put(key, (t, r))
                for k in ks:
                    got[k] = r
        return got
    return answer


def _predict_stream(rows: Iterator[tuple[int, dict[str, str], str | None]], defaults: Workload | None,
                    predictor: Any, chunk: int, answer: Answer = _predictions, memo: ModelMemo | None = None,
                    kept: ResolveCaches | None = None) -> Iterator[tuple[int, dict[str, str], Any]]:
    """Each CSV row as ``(line, row, result | RowError)``, ``chunk`` rows evaluated at a time; a result is
    what ``answer`` makes of the row (default: its Prediction). The chunks share one
    :class:`wattgpu.assemble.ModelMemo` (``memo``; a new one when None): a model input row is evaluated once per
    stream, or per run when the run's parts pass the same memo (and the same ``kept`` names)."""
    from .assemble import ModelMemo, memoised_models
    from .predictor import default_predictor

    pred = predictor or default_predictor()
    wl_cols = KIND_COLUMNS + WORKLOAD_COLUMNS
    pending: list[tuple[int, dict[str, str], Any]] = []
    memo = ModelMemo() if memo is None else memo

    def flush() -> Iterator[tuple[int, dict[str, str], Any]]:
        ok = [(i, t) for i, (_, _, t) in enumerate(pending) if isinstance(t, tuple)]
        with memoised_models(memo):  # set and reset here: never across a yield, where the caller runs
            results = answer(pred, [t for _, t in ok]) if ok else []
        out = {i: r for (i, _), r in zip(ok, results)}
        for i, (line, row, t) in enumerate(pending):
            r = out.get(i, t)
            if isinstance(r, ArtifactError):
                raise r
            if isinstance(r, WattGPUError) and not isinstance(r, RowError):
                r = RowError(line, _row_message(r, wl_cols, row), r)
            yield line, row, r
        pending.clear()

    for item in _resolve_stream(rows, defaults, pred, kept):
        pending.append(item)
        if len(pending) >= chunk:
            yield from flush()
    yield from flush()


# Workload columns that decide whether a model fits in GPU memory (named when a row does not fit)
FIT_COLUMNS = ("gpu_memory_utilization", "input_tokens", "output_tokens", "kv_cache_dtype", "tp")


def _row_message(exc: WattGPUError, columns: Sequence[str], row: dict[str, str] | None = None) -> str:
    """A row's error in the file's terms: a bad workload value names its CSV column (also when the value
    is only wrong for this row's GPU and LLM, e.g. a TP degree the heads do not divide), and a model
    that does not fit names the row's cells that set its memory."""
    if isinstance(exc, SpecValidationError) and (not exc.entity or (exc.entity == "workload" and exc.field in columns)):
        return f"column {exc.field!r} = {_short_value(exc.value)} is invalid; expected {exc.expected}"
    if isinstance(exc, ModelFitError) and row:
        cells = [f"column {c!r} = {row[c].strip()[:40]}" for c in FIT_COLUMNS if (row.get(c) or "").strip()]
        if cells:
            return f"{exc} (this row sets {', '.join(cells)})"
    return str(exc)


def _short_value(value: Any) -> str:
    from .errors import _short

    return _short(value)


@dataclass
class BatchSummary:
    """What a batch run did: rows read, predicted and skipped (by reason)."""

    rows_read: int = 0
    predicted: int = 0
    skipped: int = 0
    reasons: Counter[str] = field(default_factory=Counter)

    def __iter__(self) -> Iterator[int]:  # ``n_ok, n_bad = predict_csv(...)`` keeps working
        return iter((self.predicted, self.skipped))

    def __eq__(self, other: object) -> bool:  # equal to the 0.1 return value (predicted, skipped) too
        if isinstance(other, tuple):
            return (self.predicted, self.skipped) == other
        if isinstance(other, BatchSummary):
            return (self.rows_read, self.predicted, self.skipped, self.reasons) == \
                (other.rows_read, other.predicted, other.skipped, other.reasons)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    @property
    def exit_code(self) -> int:
        """0 when every row was predicted, 1 when any was skipped (see docs/errors.md)."""
        return 0 if self.skipped == 0 else 1

    def line(self) -> str:
        """One summary line, e.g. ``rows read 10, predicted 8, skipped 2 (unknown GPU or LLM 2)``."""
        text = f"rows read {self.rows_read}, predicted {self.predicted}, skipped {self.skipped}"
        if self.skipped:
            order = {r: i for i, r in enumerate(REASONS)}
            parts = sorted(self.reasons.items(), key=lambda kv: (order.get(kv[0], 99), kv[0]))
            text += " (" + ", ".join(f"{r} {n}" for r, n in parts) + ")"
        return text


def _open_csv(path: Any) -> IO[str]:
    return open_regular(path, what="input CSV file", max_bytes=MAX_CSV_BYTES, mode="r", newline="",
                        encoding="utf-8-sig")


def _check_output(out_path: Any) -> str:
    check_path_type(out_path, "output CSV file")
    path = os.fspath(out_path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        from .safeio import _os_problem

        raise ConfigFileError(path, f"{_os_problem(exc)}; choose another output path") from None
    except ValueError as exc:
        raise ConfigFileError(repr(path), f"is not a usable path ({exc}); choose another output path") from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise ConfigFileError(path, "exists and is not a regular file (directory, FIFO or device); "
                                    "choose another output path")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise ConfigFileError(path, "its directory does not exist; create it or choose another output path")
    return path


STDOUT = "-"  # an output path that means standard output (`--output -`)


def predict_csv(in_path: str, out_path: str, on_error: str = "skip", defaults: Workload | None = None,
                prices: Prices = (None, None, 1.0, None), predictor: Any = None,
                report: Callable[[str], None] = lambda msg: None, chunk: int = CHUNK_ROWS,
                errors_path: str | None = None, report_limit: int | None = None, lenient: bool = False,
                examples: dict[str, str] | None = None, workers: int | None = 1) -> BatchSummary:
    """Predict every row of ``in_path`` into ``out_path`` (``"-"``: standard output), streaming; returns a
    :class:`BatchSummary` (which also unpacks as ``(rows predicted, rows skipped)``).

    ``on_error="skip"``: a bad row is reported (``report("error: line N: …")``), written with an
    ``error`` column and the run continues. ``"stop"``: the first bad row raises :class:`RowError` and
    nothing is written. File-level problems (unreadable, not a regular file, binary, not UTF-8, no
    ``llm``/``gpu`` header) raise ConfigFileError and nothing is written either.

    ``report_limit``: report only the first N skipped rows (the summary's reason counts cover the
    rest). ``errors_path``: also write every skipped row as CSV (``line, column, reason, error``).
    ``examples``: filled with the first skipped row of each reason (reason → message). ``lenient``: an
    unknown header column is a warning (``report``), not an error (:func:`check_columns`). ``workers``: processes
    answering a file of more than ``chunk`` rows (:mod:`wattgpu.csv_workers`; the same bytes): 1 (the default) for
    this process alone, None for ``$WATTGPU_THREADS``, else the CPUs this process may use (at most 8; what
    ``wattgpu predict --input`` uses), or a count.
    """
    from .energy import check_prices

    if on_error not in ("skip", "stop"):
        raise WattGPUError(f"on_error = {on_error!r} is invalid; expected skip or stop")
    if not isinstance(prices, (tuple, list)) or len(prices) not in (3, 4):
        raise WattGPUError(f"prices: expected (usd_per_kwh, gco2_per_kwh, pue[, usd_per_gpu_hour]), "
                           f"got {_short_value(prices)}")
    prices = tuple(prices) + (None,) * (4 - len(prices))  # type: ignore[assignment]  # usd_per_gpu_hour: optional
    check_prices(*prices)
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise WattGPUError(f"chunk = {chunk!r} is invalid; expected a positive integer")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= 1024):
        raise WattGPUError(f"workers = {workers!r} is invalid; expected a whole number from 1 to 1024, or None")
    if report_limit is not None and (isinstance(report_limit, bool) or not isinstance(report_limit, int)
                                     or report_limit < 0):
        raise WattGPUError(f"report_limit = {report_limit!r} is invalid; expected a non-negative integer or None")
    to_stdout = out_path == STDOUT
    out = STDOUT if to_stdout else _check_output(out_path)
    err_out = _check_output(errors_path) if errors_path is not None else None
    if err_out is not None and not to_stdout and os.path.abspath(err_out) == os.path.abspath(out):
        raise WattGPUError("the errors file and the output CSV are the same file; choose another --errors path")
    summary = BatchSummary()
    shown = os.fspath(in_path) if isinstance(in_path, (str, os.PathLike)) else repr(in_path)
    with _open_csv(in_path) as f:
        tmp: str | None = None
        err_tmp: str | None = None
        try:
            cols, rows = _rows(f, str(shown))
            check_columns(cols, str(shown), lenient, report)
            fields = cols + [c for c in record.csv_columns() if c not in cols]
            fields += [] if "error" in fields else ["error"]
            err_fo: IO[str] | None = None
            if err_out is not None:
                err_fd, err_tmp = _temp_next_to(err_out)
                err_fo = os.fdopen(err_fd, "w", newline="", encoding="utf-8")
            try:
                from .csv_workers import stream as answer_stream
                from .predictor import default_predictor

                pred, wl = predictor or default_predictor(), defaults or Workload()
                stream = answer_stream(rows, _csv_stream, pred, wl, chunk, prices, report, workers)
                reporter = _Reporter(report, report_limit, err_fo, examples)
                if to_stdout:  # streamed as it is predicted: with on_error="stop", rows before the bad one are out
                    _write_rows(sys.stdout, fields, stream, on_error, prices, reporter, summary)
                    sys.stdout.flush()
                else:
                    tmp_fd, tmp = _temp_next_to(out)
                    with os.fdopen(tmp_fd, "w", newline="", encoding="utf-8") as fo:
                        _write_rows(fo, fields, stream, on_error, prices, reporter, summary)
            finally:
                if err_fo is not None:
                    err_fo.close()
            if tmp is not None:
                os.replace(tmp, out)
                tmp = None
            if err_out is not None and err_tmp is not None:
                os.replace(err_tmp, err_out)
                err_tmp = None
        except UnicodeDecodeError as exc:
            wide = wide_encoding(exc.object[:64]) if exc.start == 0 else None
            if wide:
                raise ConfigFileError(str(shown), WIDE_CSV.format(wide)) from None
            raise ConfigFileError(str(shown), f"is not UTF-8 text (bad byte near offset {exc.start} of a line); "
                                              "save the CSV as UTF-8") from None
        except csv.Error as exc:
            raise ConfigFileError(str(shown), f"is not a readable CSV file ({' '.join(str(exc).split())})") from None
        except OSError as exc:
            raise ConfigFileError(out, f"cannot write: {write_problem(exc)}") from None
        finally:
            if tmp is not None:
                _remove(tmp)
            if err_tmp is not None:
                _remove(err_tmp)
    return summary


def _csv_stream(pred: Any, defaults: Workload, chunk: int, prices: Prices) -> Callable[
        [Iterator[tuple[int, dict[str, str], str | None]]], Iterator[tuple[int, dict[str, str], Any]]]:
    """Rows as read → ``(line, row, CSV cells | RowError)``: :func:`_predict_stream` with :func:`csv_answers`. Every
    call (one stream over a file, or each part of a run answered in parts, :mod:`wattgpu.csv_workers`) shares the
    answers, the model memo and the resolved names of the first."""
    from .assemble import ModelMemo

    answers, memo, kept = csv_answers(prices), ModelMemo(), ResolveCaches()
    return lambda rows: _predict_stream(rows, defaults, pred, chunk, answers, memo, kept)


def csv_worker() -> None:
    """A worker process of :mod:`wattgpu.csv_workers` (started by it): its chunks answered as :func:`predict_csv`
    answers them."""
    from .csv_workers import serve

    serve(_csv_stream)


ERROR_COLUMNS = ("line", "column", "reason", "error")


class _Reporter:
    """Where skipped rows go: the first ``limit`` to ``report`` (all when ``limit`` is None), every one
    to the errors CSV when one is open."""

    def __init__(self, report: Callable[[str], None], limit: int | None, errors: IO[str] | None,
                 examples: dict[str, str] | None = None) -> None:
        self.report, self.limit, self.shown, self.examples = report, limit, 0, examples
        self.writer = csv.writer(errors) if errors is not None else None
        if self.writer is not None:
            self.writer.writerow(ERROR_COLUMNS)

    def __call__(self, err: WattGPUError) -> None:
        if self.examples is not None:
            self.examples.setdefault(getattr(err, "reason", "not predictable"), str(err))
        if self.limit is None or self.shown < self.limit:
            self.report(f"error: {err}")
            self.shown += 1
        if self.writer is not None:
            self.writer.writerow((getattr(err, "line", ""), getattr(err, "column", ""),
                                  getattr(err, "reason", "not predictable"), getattr(err, "problem", str(err))))


WRITE_ROWS = 1024  # rows formatted before one write (a bad row with on_error="stop" writes those before it first)


def _write_rows(fo: IO[str], fields: list[str], results: Iterator[tuple[int, dict[str, str], Any]],
                on_error: str, prices: Prices, report: Callable[[WattGPUError], None], summary: BatchSummary) -> None:
    """Write the header ``fields`` and one row per result: the input cells, then the row's output cells (CSV
    text from :func:`csv_answers`, or a Prediction's :func:`wattgpu.record.csv_row` priced with ``prices``; an
    output column already in the input is overwritten in place) or the row's ``error``; the text
    ``csv.writer`` would write."""
    from .csv_table import quote, text

    cells_of = record.csv_row(prices)

    columns = record.csv_columns()
    at = {c: i for i, c in enumerate(fields)}
    outs = [at[c] for c in columns]
    err_at = at["error"]
    inputs = [c for c in fields if c not in set(columns) | {"error"}]
    n_in = len(inputs)
    plain = fields[:n_in] == inputs and outs == list(range(n_in, n_in + len(outs))) and err_at == len(fields) - 1
    fo.write(_line(fields, quote))  # the header at once, as csv.writer wrote it (--output - streams)
    pending: list[str] = []
    for _, row, r in results:
        summary.rows_read += 1
        if isinstance(r, WattGPUError):
            if on_error == "stop":
                fo.write("".join(pending))
                raise r
            summary.skipped += 1
            summary.reasons[getattr(r, "reason", "not predictable")] += 1
            report(r)
            out = [row.get(c, "") for c in fields]  # an output column of the input keeps its cell
            out[err_at] = getattr(r, "problem", str(r))
            pending.append(_line(out, quote))
        else:
            summary.predicted += 1
            if not isinstance(r, tuple):  # a Prediction
                r = tuple(map(text, cells_of(r)))
            if plain:  # the usual header: input columns, then the output columns, then error
                pending.append(_line([row.get(c, "") for c in inputs], quote, ",".join(r) + ","))
            else:
                out = [quote(row.get(c, "")) for c in fields]
                for i, v in zip(outs, r):
                    out[i] = v
                out[err_at] = ""
                pending.append(",".join(out) + "\r\n")
        if len(pending) >= WRITE_ROWS:
            fo.write("".join(pending))
            pending.clear()
    fo.write("".join(pending))


_QUOTED = re.compile('["\r\n]')


def _line(cells: list[str], quote: Callable[[str], str], tail: str = "") -> str:
    """One CSV line of ``cells`` as ``csv.writer`` writes it, then ``tail`` (cells already as text, after a
    comma) and the line end."""
    text = ",".join(cells)
    if text.count(",") != len(cells) - 1 or _QUOTED.search(text) is not None:
        text = ",".join(map(quote, cells))
    return f"{text},{tail}\r\n" if tail else text + "\r\n"


def _temp_next_to(path: str) -> tuple[int, str]:
    parent = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=".wattgpu-", suffix=".csv.tmp", dir=parent)
    except OSError as exc:
        raise ConfigFileError(path, f"cannot write next to it ({exc.strerror or exc.__class__.__name__}); "
                                    "check the directory's permissions") from None
    try:
        os.chmod(tmp, 0o644)
    except OSError:
        pass
    return fd, tmp


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass

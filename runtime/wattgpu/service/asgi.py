"""The ASGI app: routes, admission bounds, body limits, timeouts and errors as data.

Framework: Starlette (routing, requests/responses) under any ASGI server; see docs/service.md for why.
A request's body is read first, under its own bound (``max_uploads`` bodies in progress, at most
``upload_share`` of them from one client address) and ``body_timeout_s``, so clients that stall their
uploads never hold a computing slot. Then predictions, which are synchronous CPU work, run on a small
thread pool: at most ``max_in_flight`` requests are admitted at once (the next gets 503 with
``Retry-After``), and a request whose work outlasts ``timeout_s`` gets 504; its job is told to stop
(long jobs check between rows) and only then frees its slot, so the bound holds for the CPU work too.
A client that leaves mid-body is dropped quietly: it is not an error of the server.
"""
from __future__ import annotations

import asyncio
import json
import threading
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from typing import Any, Awaitable, Callable

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from .. import questions as Q
from ..answers import batch_answer, llms_answer, predict_answer, predict_in_chunks, rank_result
from ..errors import ConfigFileError, WattGPUError
from ..threads import available_cpus
from . import inputs as I
from .inputs import ApiError

MAX_IN_FLIGHT = 256  # admitted requests (queued or computing); 200 concurrent clients fit
TIMEOUT_S = 30.0  # the work of one request
BODY_TIMEOUT_S = 10.0  # the whole body, from the end of the headers
MAX_UPLOADS = 1024  # bodies being read at once
UPLOAD_SHARE = 512  # of which from one client address
BATCH_CHUNK = 1000  # batch rows predicted between two cancellation checks


def default_workers() -> int:
    """Request threads by default: the CPUs this process may use (its affinity: a container's cpuset, ``taskset``;
    not the machine's count), at least 2 and at most 8."""
    return max(2, min(8, available_cpus()))


WORKERS = default_workers()
STATIC = {"app.js": "text/javascript; charset=utf-8", "style.css": "text/css; charset=utf-8"}


class Gate:
    """A thread-safe count of admitted requests, refused past ``limit`` in all or ``share`` from one client."""

    def __init__(self, limit: int, share: int | None = None) -> None:
        self.limit, self.share, self.count = limit, limit if share is None else share, 0
        self.by_client: dict[str, int] = {}
        self._lock = threading.Lock()

    def enter(self, client: str = "") -> bool:
        with self._lock:
            if self.count >= self.limit or self.by_client.get(client, 0) >= self.share:
                return False
            self.count += 1
            self.by_client[client] = self.by_client.get(client, 0) + 1
            return True

    def leave(self, client: str = "") -> None:
        with self._lock:
            self.count -= 1
            left = self.by_client.pop(client) - 1
            if left:
                self.by_client[client] = left


class Cancelled(Exception):
    """Raised inside a job whose request already answered 504: nobody waits for its result."""


_job = threading.local()


def check_cancelled() -> None:
    """Stop the current job (on a worker thread) if its request timed out; a no-op anywhere else."""
    event = getattr(_job, "cancel", None)
    if event is not None and event.is_set():
        raise Cancelled()


def _client(request: Request | None) -> str:
    client = request.client if request is not None else None
    return client.host if client is not None else ""


# compact (json's C encoder; indent would use the slow pure-Python one), keys sorted as the CLI prints them;
# answers are trees built fresh for each request (never cyclic), so the encoder skips its cycle bookkeeping
_ENCODE = json.JSONEncoder(sort_keys=True, allow_nan=False, separators=(",", ":"), check_circular=False).encode


def _json(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(_ENCODE(data), status_code=status, media_type="application/json", headers=headers)


def _error(err: ApiError, headers: dict[str, str] | None = None) -> Response:
    return _json(err.body(), err.status, headers)


class Service:
    """One predictor per process (created on first use and reused), the gate and the worker threads."""

    def __init__(self, models: str | None, max_in_flight: int, timeout_s: float, workers: int,
                 body_timeout_s: float = BODY_TIMEOUT_S, max_uploads: int = MAX_UPLOADS,
                 upload_share: int = UPLOAD_SHARE) -> None:
        self.models, self.timeout_s, self.body_timeout_s = models, timeout_s, body_timeout_s
        self.gate = Gate(max_in_flight)
        self.uploads = Gate(max_uploads, upload_share)
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="wattgpu")
        self._predictor: Any = None
        self._lock = threading.Lock()

    def predictor(self) -> Any:
        if self._predictor is None:
            with self._lock:
                if self._predictor is None:
                    from ..predictor import Predictor, check_bundle_dir, default_predictor

                    if self.models:
                        check_bundle_dir(self.models, "--models")
                        self._predictor = Predictor(self.models)
                    else:
                        self._predictor = default_predictor()
        return self._predictor

    async def run(self, request: Request | None, work: Callable[[Any], Any],
                  parse: Callable[[bytes], Any] = I.parse_body) -> Response:
        """Read the body (POST) and ``parse`` it (default: a JSON object), admit, run ``work(body)`` on a
        worker thread under the timeout."""
        body: Any = {}
        if request is not None:
            client = _client(request)
            if not self.uploads.enter(client):
                return _error(ApiError(503, "busy", "<server>",
                                       f"{self.uploads.share} request bodies from {client or 'this client'} (or "
                                       f"{self.uploads.limit} in all) are still arriving; retry in a second"),
                              {"Retry-After": "1"})
            try:
                body = await self._body(request, parse)
            except ApiError as err:
                return _error(err)
            except ClientDisconnect:
                return Response(status_code=400)  # nobody is there to read it; no traceback, no slot held
            finally:
                self.uploads.leave(client)
        if not self.gate.enter():
            return _error(ApiError(503, "busy", "<server>",
                                   f"the server has {self.gate.limit} requests in flight; retry in a second"),
                          {"Retry-After": "1"})
        cancel = threading.Event()

        def job() -> Response | None:
            _job.cancel = cancel
            try:
                result = work(body)
                # serialised here, off the event loop: a 10,000-row batch answer is megabytes
                return result if isinstance(result, Response) else _json(result)
            except Cancelled:
                return None
            finally:
                _job.cancel = None
                self.gate.leave()

        try:
            future = asyncio.get_running_loop().run_in_executor(self.pool, job)
        except BaseException:
            self.gate.leave()
            raise
        try:
            result = await asyncio.wait_for(asyncio.shield(future), self.timeout_s)
        except asyncio.TimeoutError:
            cancel.set()
            future.add_done_callback(_consume)
            return _error(ApiError(504, "timeout", "<request>",
                                   f"the request took longer than {self.timeout_s:g} s; ask for less "
                                   "(fewer GPUs or rows) or retry later"))
        except ApiError as err:
            return _error(err)
        assert result is not None  # only a cancelled job returns None, and only after its 504
        return result

    async def _body(self, request: Request, parse: Callable[[bytes], Any]) -> Any:
        declared = request.headers.get("content-length")
        if declared is not None and (not declared.strip().isdigit() or int(declared) > I.MAX_BODY_BYTES):
            raise _too_large()

        async def read() -> bytes:
            chunks, size = [], 0
            async for chunk in request.stream():
                size += len(chunk)
                if size > I.MAX_BODY_BYTES:
                    raise _too_large()
                chunks.append(chunk)
            return b"".join(chunks)

        try:
            raw = await asyncio.wait_for(read(), self.body_timeout_s)
        except asyncio.TimeoutError:
            raise ApiError(408, "timeout", "<body>",
                           f"the request body did not arrive within {self.body_timeout_s:g} s") from None
        return parse(raw)


def _consume(future: "asyncio.Future[Any]") -> None:
    """Retrieve a timed-out job's outcome so asyncio does not log it as never retrieved."""
    if not future.cancelled():
        future.exception()


def _too_large() -> ApiError:
    return ApiError(413, "too_large", "<body>",
                    f"request body over {I.MAX_BODY_BYTES} bytes (1 MiB); send fewer rows per request")


def _guard(where: str, fn: Callable[[], Any]) -> Any:
    """Run ``fn``; a WattGPU error becomes the error record of request field ``where``."""
    try:
        return fn()
    except WattGPUError as exc:
        raise I.from_wattgpu_error(exc, where) from None


# ---------------------------------------------------------------- work (runs on a worker thread)
def _dtype(body: dict[str, Any]) -> str:
    dtype = body.get("dtype", "auto")
    if not isinstance(dtype, str):
        raise ApiError(422, "invalid_field", "dtype", f"dtype = {dtype!r:.60} is invalid; expected a string such as "
                                                      "'auto', 'bfloat16', 'fp8', 'int4'")
    return dtype


def predict_work(svc: Service, body: dict[str, Any]) -> dict[str, Any]:
    I.check_keys(body, I.PREDICT_KEYS, "predict")
    I.check_fields(Q.PREDICT, body)
    for key in ("gpu", "llm"):
        if key not in body:
            raise ApiError(422, "missing_field", key, f"{key}: required (a catalog name or an inline JSON object)")
    pred = _guard("<server>", svc.predictor)
    gpu = I.gpu_input(pred, body["gpu"])
    llm = I.llm_input(pred, body["llm"])
    workload = I.workload_input(body.get("workload"))
    max_itl_ms, max_ttft_ms = I.sla_input(body.get("sla"))
    dtype = _dtype(body)
    layout = {k: body.get(k) for k in ("pp", "dp", "ep", "nodes", "interconnect")}
    return _guard("<request>", lambda: predict_answer(pred, gpu, llm, workload, dtype=dtype, max_itl_ms=max_itl_ms,
                                                      max_ttft_ms=max_ttft_ms, prices=I.prices_input(body),
                                                      layout=layout))


def rank_work(svc: Service, body: dict[str, Any]) -> dict[str, Any]:
    I.check_keys(body, I.RANK_KEYS, "rank")
    I.check_fields(Q.RANK, body)
    if "llm" not in body:
        raise ApiError(422, "missing_field", "llm", "llm: required (a catalog id or an inline config.json object)")
    pred = _guard("<server>", svc.predictor)
    llm = I.llm_input(pred, body["llm"])
    wl = body.get("workload")
    wl_fields = dict(wl) if isinstance(wl, dict) else wl
    tp = body.get("tp")
    tp_auto = isinstance(tp, str) and tp.strip().lower() == "auto"
    if tp is not None and not tp_auto:
        if isinstance(wl_fields, dict):
            wl_fields["tp"] = tp
        elif wl_fields is None:
            wl_fields = {"tp": tp}
    workload = I.workload_input(wl_fields)
    tp_given = tp is not None or (isinstance(wl, dict) and "tp" in wl)
    gpus = body.get("gpus")
    if gpus is not None:
        if not isinstance(gpus, list):
            raise ApiError(422, "invalid_field", "gpus", "gpus: expected an array of GPU names or inline spec objects")
        if len(gpus) > 10_000:
            raise ApiError(422, "invalid_field", "gpus", f"gpus: {len(gpus)} entries; at most 10,000 can be ranked at once")
        gpus = [I.gpu_input(pred, g, "gpus") for g in gpus]
    max_itl_ms, max_ttft_ms = I.sla_input(body.get("sla"))
    if body.get("parallel") == "auto":
        from ..layout_search import layouts_answer

        return _guard("<request>", lambda: layouts_answer(pred, llm, workload, gpus, body.get("max_nodes", 4),
                                                          body.get("interconnect", "InfiniBand NDR"),
                                                          max_itl_ms).to_dict())
    usd, gco2, pue, rent = I.prices_input(body)
    options = dict(max_itl_ms=max_itl_ms, max_ttft_ms=max_ttft_ms, strict=body.get("strict", False),
                   sort=body.get("sort", "energy"), usd_per_kwh=usd, gco2_per_kwh=gco2, pue=pue,
                   usd_per_gpu_hour=rent, replicas=body.get("replicas"), max_utilization=body.get("max_utilization"),
                   max_model_len=body.get("max_model_len"), dtype=_dtype(body))
    res, _ = _guard("<request>", lambda: rank_result(pred, llm, workload, tp_auto=tp_auto, tp_given=tp_given,
                                                     gpus=gpus, **options))
    return res.to_dict()


def batch_work(svc: Service, body: dict[str, Any]) -> dict[str, Any]:
    """Many rows in one vectorised pass; a bad row answers its own error record, the others still run."""
    I.check_keys(body, I.BATCH_KEYS, "predict/batch")
    I.check_fields(Q.BATCH, body)
    rows = body.get("rows")
    if not isinstance(rows, list) or not rows:
        raise ApiError(422, "invalid_field", "rows", "rows: expected a non-empty array of {gpu, llm, workload} objects")
    if len(rows) > I.MAX_BATCH_ROWS:
        raise ApiError(422, "invalid_field", "rows",
                       f"rows: {len(rows)} rows; at most {I.MAX_BATCH_ROWS:,} per request")
    defaults = body.get("workload")
    if defaults is not None and not isinstance(defaults, dict):
        raise ApiError(422, "invalid_field", "workload", "workload: expected an object of default workload fields")
    I.workload_input(defaults)  # bad defaults fail the request, not every row
    prices = I.prices_input(body)  # bounded as declared (wattgpu.questions.PRICES)
    pred = _guard("<server>", svc.predictor)
    out: list[dict[str, Any] | None] = [None] * len(rows)
    triples, where = [], []
    cache: dict[tuple[str, str], Any] = {}

    def cached(kind: str, value: Any, make: Callable[[], Any]) -> Any:
        if not isinstance(value, str):
            return make()
        if (kind, value) not in cache:
            cache[(kind, value)] = make()
        return cache[(kind, value)]

    for k, row in enumerate(rows):
        check_cancelled()
        try:
            if not isinstance(row, dict):
                raise ApiError(422, "invalid_field", "row", "row: expected an object {gpu, llm, workload}")
            I.check_keys(row, I.BATCH_ROW_KEYS, "row")
            for key in ("gpu", "llm"):
                if key not in row:
                    raise ApiError(422, "missing_field", key, f"{key}: required in every row")
            g = cached("gpu", row["gpu"], lambda: I.gpu_input(pred, row["gpu"]))
            m = cached("llm", row["llm"], lambda: I.llm_input(pred, row["llm"]))
            w = I.workload_input(row.get("workload"), defaults=defaults)
        except ApiError as err:
            out[k] = {"row": k, **err.body()}
            continue
        triples.append((g, m, w))
        where.append(k)
    return batch_answer(pred, out, triples, where, prices, lambda err: I.from_wattgpu_error(err).body(),
                        between_chunks=check_cancelled, chunk=BATCH_CHUNK)


# ---------------------------------------------------------------- the batch CSV (POST /v1/predict/batch.csv)
CSV_MEDIA = "text/csv; charset=utf-8"


def parse_csv(raw: bytes) -> tuple[list[str], list[tuple[int, dict[str, str], str | None]]]:
    """A ``text/csv`` body as (header, rows), read by ``wattgpu predict --input``'s rules (batch.py): UTF-8,
    a header naming at least ``llm`` and ``gpu``, no unknown column; at most MAX_BATCH_ROWS data rows."""
    import csv
    import io

    from ..batch import _rows, check_columns

    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ApiError(400, "malformed_csv", "<body>", f"request body: is not UTF-8 text (bad byte at offset "
                                                       f"{exc.start}); send the CSV as UTF-8") from None
    try:
        cols, rows = _rows(io.StringIO(text, newline=""), "request body")
        check_columns(cols, "request body")
        out: list[tuple[int, dict[str, str], str | None]] = []
        for item in rows:
            if len(out) >= I.MAX_BATCH_ROWS:
                raise ApiError(422, "invalid_field", "<body>", f"request body: more than {I.MAX_BATCH_ROWS:,} "
                                                               "data rows; send fewer rows per request")
            out.append(item)
    except ConfigFileError as exc:
        # batch.py's words, less the command-line remedies (a file name, --lenient): the fix is in the body
        msg = str(exc).split("; rename it, or pass --lenient")[0].replace("pass a text CSV file", "send text CSV")
        raise ApiError(422, "invalid_csv", "<body>", msg + ("; rename or drop that column"
                                                           if "not an input column" in msg else "")) from None
    except csv.Error as exc:
        raise ApiError(400, "malformed_csv", "<body>",
                       f"request body: is not a readable CSV ({' '.join(str(exc).split())})") from None
    if not out:
        raise ApiError(422, "invalid_csv", "<body>", "request body: a header but no data rows; add at least one row")
    return cols, out


def batch_csv_work(svc: Service, parsed: tuple[list[str], list[tuple[int, dict[str, str], str | None]]]) -> Response:
    """Every CSV row predicted in one vectorised pass; the answer is the CSV ``wattgpu predict --input``
    writes (the input columns, the output columns, ``error`` per bad row). Names resolve through
    :func:`inputs.gpu_input` / :func:`inputs.llm_input` (catalog names only: no file is ever read)."""
    import io

    from ..batch import (KIND_COLUMNS, OUTPUT_COLUMNS, WORKLOAD_COLUMNS, BatchSummary, RowError, _row_message,
                         _write_rows, row_workload)
    from ..errors import SpecValidationError
    from ..quant import with_dtype
    from ..workload import Workload

    cols, rows = parsed
    pred = _guard("<server>", svc.predictor)
    wl_cols = KIND_COLUMNS + WORKLOAD_COLUMNS
    defaults = Workload()  # as `wattgpu predict --input` with no workload flags
    cache: dict[tuple[Any, ...], Any] = {}

    def cached(key: tuple[Any, ...], make: Callable[[], Any]) -> Any:
        if key not in cache:
            try:
                cache[key] = make()
            except (ApiError, WattGPUError) as exc:
                cache[key] = exc
        hit = cache[key]
        if isinstance(hit, (ApiError, WattGPUError)):
            raise hit
        return hit

    items: list[tuple[int, dict[str, str], Any]] = []
    for line, row, problem in rows:
        check_cancelled()
        try:
            if problem is not None:
                raise RowError(line, problem)
            names = {c: (row.get(c) or "").strip() for c in ("llm", "gpu")}
            for c, name in names.items():
                if not name:
                    raise RowError(line, f"column {c!r} is empty; name a catalog {c.upper()} (GET /v1/{c}s)", column=c)
            dtype = (row.get("dtype") or "").strip() or None
            gpu = cached(("gpu", names["gpu"]), lambda: I.gpu_input(pred, names["gpu"]))
            llm = cached(("llm", names["llm"], dtype),
                         lambda: with_dtype(I.llm_input(pred, names["llm"]), dtype))
            wl = cached(("wl", tuple(row.get(c) or "" for c in wl_cols)), lambda: row_workload(row, defaults))
            items.append((line, row, (gpu, llm, wl)))
        except RowError as exc:
            items.append((line, row, exc))
        except ApiError as exc:
            items.append((line, row, RowError(line, exc.message, column=exc.field)))
        except SpecValidationError as exc:
            items.append((line, row, RowError(line, _row_message(exc, wl_cols), exc)))
        except WattGPUError as exc:
            items.append((line, row, RowError(line, str(exc), exc)))
    ok = [k for k, (_, _, t) in enumerate(items) if isinstance(t, tuple)]
    results = predict_in_chunks(pred, [items[k][2] for k in ok], check_cancelled, BATCH_CHUNK)
    for k, r in zip(ok, results):
        line, row, _ = items[k]
        items[k] = (line, row, RowError(line, _row_message(r, wl_cols, row), r) if isinstance(r, WattGPUError) else r)
    fields = cols + [c for c in OUTPUT_COLUMNS if c not in cols]
    fields += [] if "error" in fields else ["error"]
    out = io.StringIO(newline="")
    summary = BatchSummary()
    _write_rows(out, fields, iter(items), "skip", I.prices_input({}), lambda err: None, summary)
    return Response(out.getvalue(), media_type=CSV_MEDIA,
                    headers={"X-Rows-Predicted": str(summary.predicted), "X-Rows-Failed": str(summary.skipped),
                             "Content-Disposition": 'attachment; filename="wattgpu-predictions.csv"'})


# ---------------------------------------------------------------- the app
def _static(name: str) -> bytes:
    return resources.files("wattgpu.service").joinpath("static").joinpath(name).read_bytes()


def create_app(models: str | None = None, *, max_in_flight: int = MAX_IN_FLIGHT, timeout_s: float = TIMEOUT_S,
               workers: int = WORKERS, body_timeout_s: float = BODY_TIMEOUT_S, max_uploads: int = MAX_UPLOADS,
               upload_share: int = UPLOAD_SHARE) -> Starlette:
    """The ASGI app over the bundle ``models`` (default ``$WATTGPU_MODELS``, else the packaged one); the
    limits are described in the module docstring and docs/service.md."""
    from .openapi import docs_html, openapi_document

    svc = Service(models, max_in_flight, timeout_s, workers, body_timeout_s, max_uploads, upload_share)
    page = {name: _static(name) for name in ("index.html", *STATIC)}
    spec = openapi_document()

    def post(work: Callable[[Service, dict[str, Any]], Any]) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            return await svc.run(request, lambda body: work(svc, body))
        return endpoint

    def get(work: Callable[[Service], Any]) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            return await svc.run(None, lambda _: work(svc))
        return endpoint

    async def batch_csv(request: Request) -> Response:
        return await svc.run(request, lambda parsed: batch_csv_work(svc, parsed), parse=parse_csv)

    async def healthz(request: Request) -> Response:
        from .. import __version__

        return _json({"status": "ok", "version": __version__})

    def gpus(s: Service) -> Any:
        from ..listing import gpu_rows

        pred = _guard("<server>", s.predictor)
        _guard("<server>", pred.bundle.verify)
        return gpu_rows(pred.bundle)

    def llms(s: Service) -> Any:
        pred = _guard("<server>", s.predictor)
        _guard("<server>", pred.bundle.verify)
        return llms_answer(pred)

    async def index(request: Request) -> Response:
        return Response(page["index.html"], media_type="text/html; charset=utf-8")

    async def static(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in STATIC:
            raise HTTPException(404)
        return Response(page[name], media_type=STATIC[name])

    async def openapi(request: Request) -> Response:
        return _json(spec)

    async def docs(request: Request) -> Response:
        return HTMLResponse(docs_html(spec))

    async def http_error(request: Request, exc: Exception) -> Response:
        status = getattr(exc, "status_code", 400)
        kind = {404: "not_found", 405: "method_not_allowed"}.get(status, "http_error")
        msg = {404: f"no such endpoint {request.url.path[:80]!r}; see GET /openapi.json",
               405: f"{request.method} is not allowed on {request.url.path[:80]!r}; see GET /openapi.json"
               }.get(status, str(getattr(exc, "detail", "")) or "bad request")
        return _error(ApiError(status, kind, "<path>", msg))

    async def internal(request: Request, exc: Exception) -> Response:  # a bug: still data, one line
        return _error(ApiError(500, "internal", "<server>",
                               f"internal error ({exc.__class__.__name__}); please report it"))

    routes = [
        Route("/", index), Route("/static/{name}", static), Route("/healthz", healthz),
        Route("/openapi.json", openapi), Route("/docs", docs),
        Route("/v1/gpus", get(gpus)), Route("/v1/llms", get(llms)),
        Route("/v1/predict", post(predict_work), methods=["POST"]),
        Route("/v1/predict/batch", post(batch_work), methods=["POST"]),
        Route("/v1/predict/batch.csv", batch_csv, methods=["POST"]),
        Route("/v1/rank", post(rank_work), methods=["POST"]),
    ]
    app = Starlette(routes=routes, exception_handlers={HTTPException: http_error, Exception: internal})
    app.state.service = svc
    return app


app = create_app()

"""HTTP request bodies → the runtime's inputs, and WattGPU errors → ``{"error": {kind, field, message}}``.

No web framework here: these functions are plain Python, shared by the app and its tests. A server
never reads a file a client names: a GPU or LLM is a catalog name or an inline JSON object, and a
string written as a path is refused before any filesystem call.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from dataclasses import field as dc_field
from typing import Any, Callable, Mapping

from ..errors import (AmbiguousNameError, ArtifactError, ConfigFileError, ModelFitError, SpecValidationError,
                      UnknownEntityError, UnsupportedModelError, WattGPUError, _short)
from .. import questions as Q
from ..specs import GpuSpec, LlmSpec
from ..workload import Workload

MAX_BODY_BYTES = 1 << 20  # 1 MiB
MAX_BATCH_ROWS = 10_000
# The accepted keys come from the request declarations (wattgpu.questions), as do the bounds checked below.
PRICE_KEYS = tuple(p.name for p in Q.PRICES)
SLA_KEYS = tuple(sorted(Q.PREDICT.nested_keys("sla")))
PREDICT_KEYS = Q.PREDICT.body_keys()
RANK_KEYS = Q.RANK.body_keys()
BATCH_KEYS = Q.BATCH.body_keys()
BATCH_ROW_KEYS = frozenset({"gpu", "llm", "workload"})


@dataclass
class ApiError(Exception):
    """An error answered as data: HTTP ``status`` and ``{"error": {kind, field, message, …}}``."""

    status: int
    kind: str
    field: str
    message: str
    extra: dict[str, Any] = dc_field(default_factory=dict)

    def body(self) -> dict[str, Any]:
        one_line = self.message.replace("\r", "\\r").replace("\n", "\\n")
        return {"error": {"kind": self.kind, "field": self.field, "message": one_line, **self.extra}}


_FIELD_PREFIX = re.compile(r"^([A-Za-z_][A-Za-z_0-9]*)(?:\[\d+\])?\s*(?::|=| is | must )")


def from_wattgpu_error(exc: WattGPUError, where: str = "<request>") -> ApiError:
    """The HTTP status and error record of a WattGPU error, with the CLI's one-line message.

    ``where`` is the request field being read when ``exc`` was raised (used when the error itself
    does not name a field)."""
    msg = str(exc)
    if isinstance(exc, UnknownEntityError):  # AmbiguousNameError too
        kind = ("ambiguous_" if isinstance(exc, AmbiguousNameError) else "unknown_") + exc.kind.lower()
        field = where if where != "<request>" else exc.kind.lower()
        return ApiError(404, kind, field, _name_message(exc, field), {"matches": list(exc.suggestions)})
    if isinstance(exc, ArtifactError):
        return ApiError(503, "model_artifacts", "<server>", msg)
    if isinstance(exc, ConfigFileError):
        return ApiError(422, "invalid_config", where, msg)
    if isinstance(exc, ModelFitError):
        return ApiError(422, "does_not_fit", where, msg)
    if isinstance(exc, UnsupportedModelError):
        return ApiError(422, "unsupported_model", where, msg)
    name = exc.field if isinstance(exc, SpecValidationError) else None
    if name is None:
        m = _FIELD_PREFIX.match(msg)
        name = m.group(1) if m else None
    return ApiError(422, "invalid_field", str(name) if name else where, msg)


def _name_message(exc: UnknownEntityError, field: str) -> str:
    """An unknown or ambiguous name in API words (the CLI's say ``--gpu`` and files)."""
    entity = exc.kind.lower()
    if isinstance(exc, AmbiguousNameError):
        return (f"{exc.kind} {_short(exc.name)} is ambiguous: it names {', '.join(exc.choices)}; send one of them "
                f"(e.g. \"{field}\": \"{exc.choices[0]}\")")
    hint = f" Did you mean: {', '.join(exc.suggestions)}?" if exc.suggestions else ""
    inline = "spec" if entity == "gpu" else "config.json"
    return (f"Unknown {exc.kind} {_short(exc.name)}.{hint} (list them with GET /v1/{entity}s, or send the {inline} "
            "as an inline JSON object)")


def parse_body(raw: bytes) -> dict[str, Any]:
    """A request body as a JSON object; 400 for anything that is not strict JSON holding an object."""
    from ..safeio import parse_json_bytes

    try:
        data = parse_json_bytes(raw, "request body", "request", holder="body")
    except ConfigFileError as exc:
        raise ApiError(400, "malformed_json", "<body>", str(exc)) from None
    if not isinstance(data, dict):
        raise ApiError(400, "malformed_request", "<body>",
                       f"request body: expected a JSON object, got a JSON {_json_kind(data)}")
    where = _huge_integer(data, "")
    if where is not None:  # before any arithmetic: float() of a 400-digit integer raises OverflowError
        raise ApiError(422, "invalid_field", where,
                       f"{where}: an integer beyond ±2^53 ({MAX_JSON_INT:,}); no field takes one — send a number in "
                       "the field's range")
    return data


MAX_JSON_INT = 2**53  # the largest integer a JSON number carries exactly in every client (IEEE double)


def _huge_integer(value: Any, path: str) -> str | None:
    """The path (``a.b[2].c``) of the first integer in ``value`` beyond ±``MAX_JSON_INT``, or None."""
    stack = [(value, path)]
    while stack:
        node, at = stack.pop()
        if isinstance(node, dict):
            stack.extend((v, f"{at}.{k}" if at else str(k)) for k, v in reversed(list(node.items())))
        elif isinstance(node, list):
            stack.extend((v, f"{at}[{i}]") for i, v in reversed(list(enumerate(node))))
        elif isinstance(node, int) and not isinstance(node, bool) and abs(node) > MAX_JSON_INT:
            return at or "<body>"
    return None


def _json_kind(value: Any) -> str:
    return {list: "array", str: "string", bool: "boolean", type(None): "null"}.get(type(value), "number")


def check_keys(data: Mapping[str, Any], allowed: frozenset[str], where: str) -> None:
    """Refuse an unknown key by name (a typo must not be silently ignored)."""
    unknown = sorted(k for k in data if k not in allowed)
    if unknown:
        raise ApiError(422, "invalid_field", unknown[0],
                       f"{where}: unknown field {_short(unknown[0])}; expected one of {', '.join(sorted(allowed))}")


def looks_like_client_path(text: str) -> bool:
    """True for a string written as a file path (``/x``, ``./x``, ``~/x``, ``x.json``, ``x/``, ``a\\b``,
    ``..``, ``C:``): judged from the text alone, with no filesystem call. Hugging Face ids
    (``org/name``) are not paths."""
    return (text.startswith(("/", ".", "~", "\\", "file:")) or text.endswith((".json", "/", "\\"))
            or "\\" in text or "\x00" in text or "/../" in text or "/./" in text or bool(re.match(r"^[A-Za-z]:", text)))


def _refuse_path(what: str, text: str) -> ApiError:
    return ApiError(422, "path_refused", what,
                    f"{what}: {_short(text)} looks like a file path; the service never reads files a client names. "
                    f"Send a catalog name (GET /v1/{what}s) or the {'config.json' if what == 'llm' else 'spec'} "
                    "as an inline JSON object")


def _by_name(kind: str, text: str, find: Callable[[str], Any], lookup: Callable[[str], Any]) -> Any:
    """A catalog entry named by ``text`` (``find``: exact name or alias, else None); a path-like string is
    refused without touching the filesystem; anything else gets ``lookup``'s unknown-name error with its
    close matches."""
    hit = find(text)
    if hit is not None:
        return hit
    if looks_like_client_path(text):
        raise _refuse_path(kind, text)
    return lookup(text)


def _input_error(exc: WattGPUError, what: str, value: Any) -> ApiError:
    """The error record of a GPU or LLM input; a field of an inline object is named by its path in the
    request (``llm.num_hidden_layers``: the key the client sent, not the runtime's name for it)."""
    err = from_wattgpu_error(exc, what)
    if isinstance(value, dict) and isinstance(exc, SpecValidationError) and exc.field != "<root>":
        err.field = f"{what}.{exc.key or exc.field}"
    return err


def gpu_input(predictor: Any, value: Any, what: str = "gpu") -> GpuSpec:
    """A GPU: a catalog name or alias, or an inline spec object (the fields of a GPU spec JSON file)."""
    try:
        if isinstance(value, str):
            return _by_name("gpu", value, predictor.catalog.find_gpu, predictor.catalog.gpu)
        if isinstance(value, dict):
            return GpuSpec.from_dict(value, entity="GPU (inline spec)")
    except WattGPUError as exc:
        raise _input_error(exc, what, value) from None
    raise ApiError(422, "invalid_field", what,
                   f"{what}: expected a catalog name or an inline GPU spec object, got a JSON {_json_kind(value)}")


def llm_input(predictor: Any, value: Any, what: str = "llm") -> LlmSpec:
    """An LLM: a catalog id, or an inline Hugging Face ``config.json`` object (named by its
    ``_name_or_path``, else ``user-llm``)."""
    from ..hfconfig import llm_from_hf_config

    try:
        if isinstance(value, str):
            return _by_name("llm", value, predictor.catalog.find_llm, predictor.catalog.llm)
        if isinstance(value, dict):
            given = value.get("_name_or_path")
            name = given.strip()[:200] if isinstance(given, str) and given.strip() else "user-llm"
            return llm_from_hf_config(value, name=name, source="inline config.json (request body)")
    except WattGPUError as exc:
        raise _input_error(exc, what, value) from None
    raise ApiError(422, "invalid_field", what,
                   f"{what}: expected a catalog id or an inline config.json object, got a JSON {_json_kind(value)}")


def workload_input(value: Any, what: str = "workload", defaults: Mapping[str, Any] | None = None) -> Workload:
    """Workload fields as an object; as on the command line, ``kind`` defaults to ``server`` when ``qps``
    is given, else ``offline``."""
    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise ApiError(422, "invalid_field", what,
                       f"{what}: expected an object of workload fields, got a JSON {_json_kind(value)}")
    fields = {**(defaults or {}), **value}
    fields["kind"] = Q.default_kind(fields)
    try:
        return Workload.from_dict(fields)
    except WattGPUError as exc:
        err = from_wattgpu_error(exc, what)
        if err.field not in (what, "<request>") and not err.field.startswith(f"{what}."):
            err.field = f"{what}.{err.field}"
        raise err from None


def sla_input(value: Any) -> tuple[float | None, float | None]:
    """``sla`` as (max ITL ms, max TTFT ms): ``max_itl_ms``/``max_ttft_ms``, or the same in seconds
    (``max_itl_s``/``max_ttft_s``); at most one unit per limit; each bounded as declared (:mod:`wattgpu.questions`)."""
    if value is None:
        return None, None
    if not isinstance(value, dict):
        raise ApiError(422, "invalid_field", "sla", f"sla: expected an object, got a JSON {_json_kind(value)}")
    check_keys(value, frozenset(SLA_KEYS), "sla")
    out: list[float | None] = []
    for name in ("itl", "ttft"):
        ms, s = value.get(f"max_{name}_ms"), value.get(f"max_{name}_s")
        if ms is not None and s is not None:
            raise ApiError(422, "invalid_field", f"sla.max_{name}_s",
                           f"sla: give max_{name}_ms or max_{name}_s, not both")
        ms = checked(Q.PREDICT.param(f"max_{name}_ms"), ms)
        if s is not None:
            ms = checked(Q.PREDICT.param(f"max_{name}_s"), s) * 1e3
        out.append(ms)
    return out[0], out[1]


def checked(param: Q.Param, value: Any) -> Any:
    """``value`` of request field ``param`` checked against its declaration; an error names the body path."""
    try:
        return param.check(value)
    except WattGPUError as exc:
        raise ApiError(422, "invalid_field", param.path, str(exc)) from None


def check_fields(request: Q.Request, body: Mapping[str, Any]) -> None:
    """Every top-level number or choice of ``body`` bounded as ``request`` declares it, before any arithmetic."""
    for p in request.params:
        if p.rule is not None and p.body is not None and "." not in p.path and p.path in body:
            checked(p, body[p.path])


def prices_input(data: Mapping[str, Any]) -> tuple[Any, Any, Any, Any]:
    """(usd_per_kwh, gco2_per_kwh, pue, usd_per_gpu_hour), each bounded as declared (:data:`wattgpu.questions.PRICES`)."""
    return tuple(checked(p, data.get(p.name, p.default)) for p in Q.PRICES)

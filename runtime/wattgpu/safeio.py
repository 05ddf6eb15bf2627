"""Bounded, defensive reading of user-supplied JSON files (spec files, Hugging Face config.json).

Nothing here touches the network. Every refusal is a :class:`ConfigFileError` with a one-line message
that names the file and says what to do about it.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from .errors import ConfigFileError

MAX_DEPTH = 64

# A JSON string literal (escapes included); removed before counting bracket depth.
_STRING_RE = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET_RE = re.compile(r"[^\[\]{}]+")


class _NonFiniteLiteral(ValueError):
    """A NaN/Infinity/-Infinity token, which strict JSON does not allow."""


def _reject_constant(token: str) -> Any:
    raise _NonFiniteLiteral(token)


def _max_depth(text: str, limit: int) -> int:
    """Deepest [ / { nesting of ``text``, ignoring brackets inside strings; stops counting past ``limit``."""
    brackets = _NOT_BRACKET_RE.sub("", _STRING_RE.sub('""', text))
    depth = deepest = 0
    for ch in brackets:
        if ch in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > limit:
                    return deepest
        else:
            depth -= 1
    return deepest


def resolve_json_path(path: str | os.PathLike[str], *, what: str, dir_file: str | None = "config.json") -> Path:
    """Return the file to read for ``path``: the path itself, or ``dir_file`` inside it when it is a directory."""
    p = Path(path)
    shown = str(path)
    if not p.exists():
        raise ConfigFileError(shown, f"no such file or directory; pass the path of an existing {what} JSON file")
    if p.is_dir():
        if dir_file is None:
            raise ConfigFileError(shown, f"is a directory; pass the path of the {what} JSON file itself")
        inner = p / dir_file
        if not inner.is_file():
            raise ConfigFileError(shown, f"directory has no {dir_file}; pass a model directory that holds "
                                         f"{dir_file}, or the path of the {what} JSON file")
        return inner
    if not p.is_file():
        raise ConfigFileError(shown, f"is not a regular file; pass the path of the {what} JSON file")
    return p


def read_json_file(path: str | os.PathLike[str], *, what: str, max_bytes: int = 1_000_000,
                   dir_file: str | None = "config.json") -> dict[str, Any]:
    """Read a JSON object from ``path`` (or ``path/dir_file`` for a directory), refusing anything unsafe.

    At most ``max_bytes + 1`` bytes are read. Refused with ConfigFileError: missing paths, directories
    without ``dir_file``, oversized files, non-UTF-8 or binary content, invalid JSON, NaN/Infinity literals,
    nesting deeper than 64 levels and a top level that is not an object.
    """
    target = resolve_json_path(path, what=what, dir_file=dir_file)
    shown = str(target)
    try:
        with open(target, "rb") as fh:
            raw = fh.read(max_bytes + 1)
    except OSError as exc:
        raise ConfigFileError(shown, f"cannot be read ({exc.strerror or exc}); check the path and its permissions") from None
    if len(raw) > max_bytes:
        raise ConfigFileError(shown, f"is larger than {max_bytes:,} bytes, the limit for {what} files "
                                     f"(check that this is the right file)")
    if b"\x00" in raw:
        raise ConfigFileError(shown, f"contains NUL bytes (binary data); pass a text {what} JSON file")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigFileError(shown, f"is not UTF-8 text (bad byte at offset {exc.start}); "
                                     f"save the {what} file as UTF-8 JSON") from None
    if not text.strip():
        raise ConfigFileError(shown, f"is empty; the {what} file must hold a JSON object")
    depth = _max_depth(text, MAX_DEPTH)
    if depth > MAX_DEPTH:
        raise ConfigFileError(shown, f"nests arrays/objects deeper than {MAX_DEPTH} levels; "
                                     f"flatten the {what} file")
    try:
        data = json.loads(text, parse_constant=_reject_constant)
    except _NonFiniteLiteral as exc:
        raise ConfigFileError(shown, f"contains the literal {exc.args[0]}, which JSON does not allow; "
                                     f"replace it with a finite number or remove the key") from None
    except json.JSONDecodeError as exc:
        raise ConfigFileError(shown, f"is not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}); "
                                     f"fix the {what} file") from None
    except (ValueError, RecursionError) as exc:
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ConfigFileError(shown, f"is not acceptable JSON ({msg}); fix the {what} file") from None
    if not isinstance(data, dict):
        raise ConfigFileError(shown, f"top level is a JSON {_json_kind(data)}; "
                                     f"the {what} file must be a JSON object {{...}}")
    return data


def _json_kind(value: Any) -> str:
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool) or value is None:
        return "literal"
    return "number"

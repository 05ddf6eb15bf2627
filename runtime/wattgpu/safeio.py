"""Bounded, defensive reading of user-supplied JSON files (spec files, Hugging Face config.json).

Nothing here touches the network. Every refusal is a :class:`ConfigFileError` with a one-line message
that names the file and says what to do about it.
"""
from __future__ import annotations

import errno
import json
import os
import re
import stat
from typing import IO, TYPE_CHECKING, Any

from .errors import ArgumentTypeError, ConfigFileError

if TYPE_CHECKING:
    from pathlib import Path

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


def _os_problem(exc: OSError) -> str:
    """A plain-words reason for an OSError raised by stat/open on a user path."""
    code = exc.errno
    if code == errno.ENOENT:
        return "no such file or directory"
    if code == errno.ENAMETOOLONG:
        return "the file name is too long (over the system limit of 255 characters per name)"
    if code == errno.ELOOP:
        return "too many levels of symbolic links (a symlink loop)"
    if code in (errno.EACCES, errno.EPERM):
        return "permission denied"
    if code == errno.ENOTDIR:
        return "a component of the path is not a directory"
    return f"cannot be opened ({exc.strerror or exc.__class__.__name__})"


WRITE_ERRNOS = frozenset(getattr(errno, n) for n in ("ENOSPC", "EDQUOT", "EFBIG", "EROFS", "EIO") if hasattr(errno, n))


def write_problem(exc: OSError) -> str:
    """A plain-words reason why writing an output failed (a full device, a missing folder, …)."""
    code = exc.errno
    if code in (getattr(errno, "ENOSPC", -1), getattr(errno, "EDQUOT", -1)):
        return "no space left on the device (the disk or device is full); free space or write elsewhere"
    if code == getattr(errno, "EFBIG", -1):
        return "the file would be larger than the device allows; write elsewhere"
    if code == getattr(errno, "EROFS", -1):
        return "the file system is read-only; write elsewhere"
    if code == errno.ENOENT:
        return "its folder does not exist; create it or choose another output path"
    if code in (errno.EACCES, errno.EPERM):
        return "permission denied; choose a folder you can write to"
    return f"{exc.strerror or exc.__class__.__name__}; choose another output path"


def check_output_folder(path: str | os.PathLike[str], what: str) -> None:
    """Refuse (ConfigFileError) an output path whose folder does not exist, before any work is done."""
    shown = os.fspath(path)
    parent = os.path.dirname(os.path.abspath(shown))
    if not os.path.isdir(parent):
        raise ConfigFileError(str(shown), f"its folder {parent} does not exist; create it or choose another "
                                          f"path for the {what}")


def _stat(path: str | os.PathLike[str], shown: str, fix: str) -> os.stat_result:
    try:
        return os.stat(path)
    except OSError as exc:
        raise ConfigFileError(shown, f"{_os_problem(exc)}; {fix}") from None
    except (ValueError, TypeError) as exc:  # embedded NUL, wrong type
        raise ConfigFileError(shown, f"is not a usable path ({exc}); {fix}") from None


def check_path_type(path: Any, what: str) -> str | os.PathLike[str]:
    """``path`` if it is a str or os.PathLike (non-empty), else a ConfigFileError naming ``what``."""
    if isinstance(path, bytes) or not isinstance(path, (str, os.PathLike)):
        raise ArgumentTypeError(f"{what}: expected a file path (str or os.PathLike), got {type(path).__name__}")
    if not os.fspath(path):
        raise ConfigFileError("''", f"empty path; pass the path of the {what}")
    return path


def open_regular(path: str | os.PathLike[str], *, what: str, max_bytes: int, mode: str = "rb",
                 **open_kw: Any) -> IO[Any]:
    """Open ``path`` for reading only if it is a regular file of at most ``max_bytes`` bytes.

    Directories, FIFOs, sockets and devices (``/dev/zero``) are refused *before* anything is read,
    so nothing can hang or stream without end; symlink loops, over-long names and unreadable files
    give a ConfigFileError naming the file. The check is repeated on the open descriptor (``fstat``)
    and the open never blocks (``O_NONBLOCK``), so a file swapped for a FIFO in between cannot hang it.
    """
    check_path_type(path, what)
    shown = os.fspath(path) if isinstance(os.fspath(path), str) else repr(path)
    fix = f"pass the path of an existing, readable {what}"
    st = _stat(path, shown, fix)
    _require_regular(st, shown, what, max_bytes)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        raise ConfigFileError(shown, f"{_os_problem(exc)}; {fix}") from None
    try:
        _require_regular(os.fstat(fd), shown, what, max_bytes)
        return os.fdopen(fd, mode, **open_kw)
    except BaseException:
        os.close(fd)
        raise


def _require_regular(st: os.stat_result, shown: str, what: str, max_bytes: int) -> None:
    if stat.S_ISDIR(st.st_mode):
        raise ConfigFileError(shown, f"is a directory; pass the path of the {what} itself")
    if not stat.S_ISREG(st.st_mode):
        kind = ("a FIFO (named pipe)" if stat.S_ISFIFO(st.st_mode) else "a device" if
                (stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)) else "a socket" if stat.S_ISSOCK(st.st_mode)
                else "not a regular file")
        raise ConfigFileError(shown, f"is {kind}, not a regular file; pass the path of the {what} itself")
    if st.st_size > max_bytes:
        raise ConfigFileError(shown, f"is larger than {max_bytes:,} bytes, the limit for a {what} "
                                     f"(check that this is the right file)")


def resolve_json_path(path: str | os.PathLike[str], *, what: str, dir_file: str | None = "config.json") -> Path:
    """Return the file to read for ``path``: the path itself, or ``dir_file`` inside it when it is a directory."""
    from pathlib import Path  # only for user files: keeps pathlib off the cold start

    check_path_type(path, f"{what} file")
    p = Path(path)
    shown = str(path)
    st = _stat(p, shown, f"pass the path of an existing {what} JSON file")
    if stat.S_ISDIR(st.st_mode):
        if dir_file is None:
            raise ConfigFileError(shown, f"is a directory; pass the path of the {what} JSON file itself")
        inner = p / dir_file
        try:
            inner_ok = stat.S_ISREG(os.stat(inner).st_mode)
        except (OSError, ValueError):
            inner_ok = False
        if not inner_ok:
            raise ConfigFileError(shown, f"directory has no {dir_file}; pass a model directory that holds "
                                         f"{dir_file}, or the path of the {what} JSON file")
        return inner
    if not stat.S_ISREG(st.st_mode):
        raise ConfigFileError(shown, f"is not a regular file (FIFO, device or socket); pass the path of the {what} JSON file")
    return p


def _head_bytes(head: bytes | str) -> bytes:
    return head[:64] if isinstance(head, bytes) else head[:64].encode("latin-1", "replace")


def looks_utf32(head: bytes | str) -> bool:
    """Whether ``head`` (a file's first bytes, or its first line as decoded) is UTF-32 text: a UTF-32
    byte-order mark, or ASCII text stored four bytes a character (three of every four bytes NUL)."""
    h = _head_bytes(head)
    if h[:4] in (b"\xff\xfe\x00\x00", b"\x00\x00\xfe\xff"):
        return True
    h = h[: len(h) - len(h) % 4]
    quads = [h[i:i + 4] for i in range(0, len(h), 4)]
    return len(quads) >= 2 and any(all(q[k] != 0 and q.count(0) == 3 for q in quads) for k in (0, 3))


def looks_utf16(head: bytes | str) -> bool:
    """Whether ``head`` (a file's first bytes, or its first line as decoded) is UTF-16 text: a UTF-16
    byte-order mark, or text with every other byte NUL (what a "Unicode" export from Windows tools gives).
    UTF-32 text (:func:`looks_utf32`) is not UTF-16."""
    h = _head_bytes(head)
    if looks_utf32(h):
        return False
    if h[:2] in (b"\xff\xfe", b"\xfe\xff"):
        return True
    return len(h) >= 4 and any(zeros == bytes(len(zeros)) and 0 not in text
                               for zeros, text in ((h[1::2], h[0::2]), (h[0::2], h[1::2])))


def wide_encoding(head: bytes | str) -> str | None:
    """"UTF-32" or "UTF-16" when ``head`` is text in that encoding, else None (one test for every reader)."""
    if looks_utf32(head):
        return "UTF-32"
    return "UTF-16" if looks_utf16(head) else None


def _finite_float(text: str) -> float:
    value = float(text)
    if value != value or value in (float("inf"), float("-inf")):
        raise _NonFiniteLiteral(text)  # 1e999 overflows to inf: as unusable as the literal Infinity
    return value


def parse_json_bytes(raw: bytes, shown: str, what: str, max_depth: int = MAX_DEPTH, holder: str = "file") -> Any:
    """Parse ``raw`` as strict JSON, refusing with ConfigFileError: UTF-16/UTF-32 or non-UTF-8 text, NUL
    bytes, an empty file, nesting deeper than ``max_depth`` (checked before parsing, so no RecursionError),
    NaN/Infinity literals and numbers too large for a float (1e999). The fixes name "the {what} {holder}"
    (a file on the command line, a body over HTTP)."""
    wide = wide_encoding(raw)
    if wide:
        raise ConfigFileError(shown, f"is {wide} text; save the {what} {holder} as UTF-8")
    if b"\x00" in raw:
        raise ConfigFileError(shown, f"contains NUL bytes (binary data); pass a text {what} JSON {holder}")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigFileError(shown, f"is not UTF-8 text (bad byte at offset {exc.start}); "
                                     f"save the {what} {holder} as UTF-8 JSON") from None
    if not text.strip():
        raise ConfigFileError(shown, f"is empty; the {what} {holder} must hold a JSON object")
    depth = _max_depth(text, max_depth)
    if depth > max_depth:
        raise ConfigFileError(shown, f"nests arrays/objects deeper than {max_depth} levels; "
                                     f"flatten the {what} {holder}")
    try:
        return json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
    except _NonFiniteLiteral as exc:
        token = exc.args[0]
        what_it_is = (f"the literal {token}, which JSON does not allow" if token in ("NaN", "Infinity", "-Infinity")
                      else f"the number {token[:40]}, too large for a float")
        raise ConfigFileError(shown, f"contains {what_it_is}; "
                                     f"replace it with a finite number or remove the key") from None
    except json.JSONDecodeError as exc:
        raise ConfigFileError(shown, f"is not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}); "
                                     f"fix the {what} {holder}") from None
    except (ValueError, RecursionError) as exc:
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ConfigFileError(shown, f"is not acceptable JSON ({msg}); fix the {what} {holder}") from None


def read_bounded(path: str | os.PathLike[str], *, what: str, max_bytes: int) -> bytes:
    """The bytes of the regular file ``path`` (at most ``max_bytes``; see :func:`open_regular`), or a
    ConfigFileError naming it: FIFOs, devices (a link to ``/dev/zero``) and oversized files are refused
    before or while reading, so nothing hangs or fills memory."""
    shown = os.fspath(path) if isinstance(os.fspath(path), str) else repr(path)
    try:
        with open_regular(path, what=what, max_bytes=max_bytes) as fh:
            raw = fh.read(max_bytes + 1)
    except OSError as exc:
        raise ConfigFileError(str(shown), f"cannot be read ({exc.strerror or exc}); check the path and its permissions") from None
    if len(raw) > max_bytes:  # grew after the size check
        raise ConfigFileError(str(shown), f"is larger than {max_bytes:,} bytes, the limit for a {what} "
                                          f"(check that this is the right file)")
    return bytes(raw)


def read_json_file(path: str | os.PathLike[str], *, what: str, max_bytes: int = 1_000_000,
                   dir_file: str | None = "config.json") -> dict[str, Any]:
    """Read a JSON object from ``path`` (or ``path/dir_file`` for a directory), refusing anything unsafe.

    At most ``max_bytes + 1`` bytes are read. Refused with ConfigFileError: missing paths, directories
    without ``dir_file``, oversized files, non-UTF-8 or binary content, invalid JSON, NaN/Infinity literals,
    nesting deeper than 64 levels and a top level that is not an object.
    """
    target = resolve_json_path(path, what=what, dir_file=dir_file)
    shown = str(target)
    raw = read_bounded(target, what=f"{what} file", max_bytes=max_bytes)
    data = parse_json_bytes(raw, shown, what)
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

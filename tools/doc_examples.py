#!/usr/bin/env python
"""Run the examples in the docs and check (or rewrite) the output they show.

    python tools/doc_examples.py            # check: exit 1 and a diff when a shown output is stale
    python tools/doc_examples.py --write    # rewrite every shown output from a real run

Every fenced block whose info string is ``console`` in README.md and docs/*.md is an example: a line
``$ command`` (continued by a trailing backslash) is run with bash, and the lines after it, up to the
next ``$`` line or the end of the block, are what it printed (stdout and stderr together). A command
that exits non-zero shows ``(exit N)`` as its last line. Commands run in a fresh temporary directory
holding a copy of docs/examples/ (the input files the examples use), with this interpreter's ``bin``
first on PATH, so ``wattgpu`` is the one installed beside it. To show part of a long output, pipe it
(``| head -n 8``): what is shown is always exactly what the command prints.

Plain ``` blocks are prose: they are never run.

A doc whose examples call the service at ``http://127.0.0.1:8000`` (docs/service.md's curl lines) gets a
real ``wattgpu serve`` for its examples: started on a free port before the doc's first example (the
commands are run with that port in place of 8000) and stopped after its last.
"""
from __future__ import annotations

import argparse
import difflib
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

REPO = Path(__file__).resolve().parents[1]
EXAMPLE_FILES = REPO / "docs" / "examples"
TIMEOUT_S = 300
SERVICE_URL = "http://127.0.0.1:8000"  # how the docs write the service's address
_FENCE = re.compile(r"^(```+|~~~+)\s*(\S*)")


@dataclass
class Example:
    """One ``$ command`` of a console block and the output lines shown under it."""
    doc: Path
    line: int            # 1-based line of the ``$`` in ``doc``
    command: str
    shown: list[str]
    start: int           # index of the first shown line in the doc's lines
    end: int             # index one past the last shown line


def docs() -> list[Path]:
    """README.md and every docs/*.md, in a stable order."""
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def parse(doc: Path) -> list[Example]:
    """The examples of ``doc``'s console blocks."""
    lines = doc.read_text(encoding="utf-8").splitlines()
    out: list[Example] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, info = m.group(1), m.group(2)
        j = i + 1
        while j < len(lines) and not lines[j].startswith(fence[:3]):
            j += 1
        if info == "console":
            out.extend(_block_examples(doc, lines, i + 1, j))
        i = j + 1
    return out


def _block_examples(doc: Path, lines: list[str], first: int, stop: int) -> list[Example]:
    found: list[Example] = []
    k = first
    while k < stop:
        if not lines[k].startswith("$ "):
            k += 1  # text before the first command of a block is not checked
            continue
        at, parts = k, [lines[k][2:]]
        while parts[-1].endswith("\\") and k + 1 < stop:
            k += 1
            parts.append(lines[k])
        k += 1
        start = k
        while k < stop and not lines[k].startswith("$ "):
            k += 1
        found.append(Example(doc, at + 1, "\n".join(parts), lines[start:k], start, k))
    return found


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("COLUMNS", "200")
    env.pop("WATTGPU_MODELS", None)  # the docs show the shipped models
    return env


def run(example: Example, workdir: Path, service_url: str | None = None) -> list[str]:
    """What ``example``'s command prints now, as the doc would show it (``service_url``: where the doc's
    ``http://127.0.0.1:8000`` really listens)."""
    command = example.command if service_url is None else example.command.replace(SERVICE_URL, service_url)
    proc = subprocess.run(["bash", "-c", command], cwd=workdir, env=_env(), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=TIMEOUT_S)
    shown = proc.stdout.splitlines()
    if proc.returncode != 0:
        shown.append(f"(exit {proc.returncode})")
    return [line.rstrip() for line in shown]


@contextmanager
def service(needed: bool) -> Iterator[str | None]:
    """A ``wattgpu serve`` on a free local port for the duration (its URL), or None when not ``needed``."""
    if not needed:
        yield None
        return
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "wattgpu.cli", "serve", "--port", str(port)], env=_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(url + "/healthz", timeout=2):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"wattgpu serve did not start: {proc.stderr.read() if proc.stderr else ''}")
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def workdir() -> tempfile.TemporaryDirectory[str]:
    """A fresh directory holding a copy of docs/examples/."""
    tmp = tempfile.TemporaryDirectory(prefix="wattgpu-docs-")
    if EXAMPLE_FILES.is_dir():
        shutil.copytree(EXAMPLE_FILES, tmp.name, dirs_exist_ok=True)
    return tmp


def check(paths: list[Path], write: bool) -> list[str]:
    """Run every example of ``paths``; return a diff per stale example (and rewrite them when ``write``)."""
    problems: list[str] = []
    for doc in paths:
        examples = parse(doc)
        if not examples:
            continue
        lines = doc.read_text(encoding="utf-8").splitlines()
        replaced: list[tuple[int, int, list[str]]] = []
        with workdir() as tmp, service(any(SERVICE_URL in ex.command for ex in examples)) as url:
            for ex in examples:  # one directory per doc: a later example may use an earlier one's files
                got = run(ex, Path(tmp), url)
                if got != [s.rstrip() for s in ex.shown]:
                    rel = doc.relative_to(REPO) if doc.is_relative_to(REPO) else doc
                    diff = difflib.unified_diff(ex.shown, got, f"{rel}:{ex.line} (shown)", "(printed now)", lineterm="")
                    problems.append(f"{rel}:{ex.line}: $ {ex.command}\n" + "\n".join(diff))
                    replaced.append((ex.start, ex.end, got))
        if write and replaced:
            for start, end, got in reversed(replaced):
                lines[start:end] = got
            doc.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="rewrite stale outputs from a real run")
    ap.add_argument("docs", nargs="*", type=Path, help="markdown files (default: README.md and docs/*.md)")
    args = ap.parse_args(argv)
    paths = [p.resolve() for p in args.docs] or docs()
    problems = check(paths, args.write)
    count = sum(len(parse(p)) for p in paths)
    for p in problems:
        print(p, end="\n\n")
    verb = "rewrote" if args.write else "stale"
    print(f"{count} examples in {len(paths)} files; {len(problems)} {verb}")
    return 1 if problems and not args.write else 0


if __name__ == "__main__":
    sys.exit(main())

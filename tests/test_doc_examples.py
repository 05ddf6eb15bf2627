"""Every ``console`` example in README.md and docs/*.md prints what the docs show (issue 31 item 4).

``tools/doc_examples.py`` runs each ``$ command`` of those blocks in a fresh directory holding
docs/examples/ and compares its output (stdout and stderr, ``(exit N)`` when it fails) with the lines the
doc shows; ``python tools/doc_examples.py --write`` rewrites them from a real run. Slow tier: each example
starts a process.
"""
from __future__ import annotations

import importlib.util
import sys

import pytest

from .helpers import REPO

pytestmark = pytest.mark.slow


def _tool():
    spec = importlib.util.spec_from_file_location("doc_examples", REPO / "tools" / "doc_examples.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["doc_examples"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_the_front_page_and_the_docs_have_examples() -> None:
    tool = _tool()
    assert tool.parse(REPO / "README.md"), "README.md shows no console example"
    assert sum(len(tool.parse(p)) for p in tool.docs()) >= 10


def test_every_console_example_prints_what_the_doc_shows() -> None:
    tool = _tool()
    problems = tool.check(tool.docs(), write=False)
    assert not problems, "stale examples (python tools/doc_examples.py --write):\n\n" + "\n\n".join(problems)


def test_the_checker_notices_a_stale_output(tmp_path) -> None:
    tool = _tool()
    doc = tmp_path / "x.md"
    doc.write_text("```console\n$ echo hello\nhullo\n$ false\n```\n", encoding="utf-8")
    problems = tool.check([doc], write=False)
    assert len(problems) == 2 and "+hello" in problems[0] and "+(exit 1)" in problems[1]
    tool.check([doc], write=True)
    assert doc.read_text(encoding="utf-8") == "```console\n$ echo hello\nhello\n$ false\n(exit 1)\n```\n"
    assert tool.check([doc], write=False) == []

"""reports/parallel.md is the output of tools/score_layouts.py on the shared measurements (issue 41 item 4): the
expert-, data- and pipeline-parallel rows scored with `predict`'s layout path, apart from the TP rows."""
from __future__ import annotations

import importlib.util
import sys

import pytest

from .helpers import REPO

SCRIPT = REPO / "tools" / "score_layouts.py"


def _tool():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("score_layouts", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def test_every_parallel_row_is_read_with_its_layout() -> None:
    tool = _tool()
    if not tool.DATA.is_dir():
        pytest.skip(f"{tool.DATA} not present (the shared measurements)")
    rows = tool.rows()
    kinds = {r.kind for r in rows}
    assert {"ep", "dp+ep", "pp"} <= kinds and any(k.startswith("dp (") for k in kinds)
    assert all(r.tp * r.pp * r.dp > 1 for r in rows)
    assert all(r.ep for r in rows if r.kind in ("ep", "dp+ep")) and not any(r.ep for r in rows if r.kind == "pp")


def test_the_report_is_current() -> None:
    tool = _tool()
    if not tool.DATA.is_dir():
        pytest.skip(f"{tool.DATA} not present (the shared measurements)")
    assert (REPO / "reports" / "parallel.md").read_text() == tool.report(), \
        "reports/parallel.md is stale: run python tools/score_layouts.py --write"

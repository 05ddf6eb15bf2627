"""Golden numbers: predict/rank over the catalog × several LLMs × workloads equal the frozen file.

A refactor must pass this unchanged. A deliberate change of predictions regenerates the file with
``python tests/golden/regenerate.py`` in the same commit, and the commit message says why.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

GOLDEN_DIR = Path(__file__).resolve().parent / "golden"
sys.path.insert(0, str(GOLDEN_DIR))

from compare import REL_TOL, differences  # noqa: E402
from regenerate import GOLDEN, compute  # noqa: E402


def test_predictions_and_ranks_equal_the_golden_file():
    want = json.loads(GOLDEN.read_text())
    diffs = differences(want, compute())
    assert not diffs, (f"{len(diffs)} golden differences (rel tol {REL_TOL}); if intended, run "
                       "tests/golden/regenerate.py and say why in the commit:\n" + "\n".join(diffs[:15]))


def test_the_comparison_catches_a_small_change():
    want = {"a": [1.0, {"b": 2.0}], "t": "x"}
    assert differences(want, {"a": [1.0, {"b": 2.0 * (1 + 1e-7)}], "t": "x"})
    assert differences(want, {"a": [1.0, {"b": 2.0}], "t": "y"})
    assert differences(want, {"a": [1.0, {}], "t": "x"})
    assert not differences(want, {"a": [1.0, {"b": 2.0 * (1 + 1e-12)}], "t": "x"})

"""The benchmark's ONNX floors time Session.run from every thread (wattgpu.threads runs a large input's row
slices at once): a floor is the wall time some run covers, never the sum of overlapping durations."""
from __future__ import annotations

import sys

from .helpers import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
from bench_runtime import wall_seconds  # noqa: E402  (stdlib only at import)


def test_overlapping_runs_count_once() -> None:
    assert wall_seconds([]) == 0.0
    assert wall_seconds([(0.0, 1.0), (0.5, 1.5)]) == 1.5  # two threads overlapping
    assert wall_seconds([(2.0, 3.0), (0.0, 1.0), (0.2, 0.4)]) == 2.0  # disjoint, and one inside another
    assert wall_seconds([(0.0, 1.0), (1.0, 2.0)]) == 2.0  # back to back

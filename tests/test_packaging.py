"""The dependency ranges that pyproject.toml claims are the ranges CI tests (issue 20).

`.ci/oldest.txt` pins every direct dependency to its lower bound; `.ci/run` installs the test extras
under those pins on the oldest supported Python and under no pins (the newest) on the newest one.
"""
from __future__ import annotations

import re

from .helpers import REPO

_REQ = re.compile(r'"([A-Za-z0-9_.\-]+)(\[[^\]]*\])?\s*>=\s*([0-9][^",;\s]*)')


def _lower_bounds() -> dict[str, str]:
    text = (REPO / "pyproject.toml").read_text()
    deps = text[text.index("dependencies = ["):text.index("[project.scripts]")]
    return {m.group(1).lower(): m.group(3) for m in _REQ.finditer(deps) if m.group(1).lower() != "wattgpu"}


def _pins() -> dict[str, str]:
    pins = {}
    for line in (REPO / ".ci" / "oldest.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            pins[name.strip().lower()] = version.strip()
    return pins


def _norm(version: str) -> tuple[int, ...]:
    parts = [int(p) for p in version.split(".")]
    while len(parts) < 3:
        parts.append(0)
    return tuple(parts)


def test_oldest_pins_are_exactly_the_lower_bounds_of_pyproject() -> None:
    bounds, pins = _lower_bounds(), _pins()
    assert bounds, "no lower bounds found in pyproject.toml"
    assert set(bounds) == set(pins), (sorted(set(bounds) ^ set(pins)))
    for name, low in bounds.items():
        assert _norm(pins[name]) == _norm(low), f"{name}: pyproject says >={low}, .ci/oldest.txt pins {pins[name]}"


def test_every_dependency_has_a_lower_bound() -> None:
    text = (REPO / "pyproject.toml").read_text()
    deps = text[text.index("dependencies = ["):text.index("[project.scripts]")]
    listed = re.findall(r'^\s*"([A-Za-z0-9_.\-]+)', deps, flags=re.M)
    pinned = {m.lower() for m in re.findall(r'^\s*"([A-Za-z0-9_.\-]+)==', deps, flags=re.M)}  # the [peers] extra
    bounded = set(_lower_bounds()) | {"wattgpu"} | pinned
    assert {d.lower() for d in listed} <= bounded, "a dependency without a >= lower bound is an untested claim"


def test_ci_runs_the_oldest_and_newest_venvs() -> None:
    ci = (REPO / ".ci" / "run").read_text()
    assert "oldest.txt" in ci and "3.10" in ci and "3.13" in ci

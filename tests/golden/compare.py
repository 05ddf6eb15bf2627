"""Compare two golden structures: numbers at a tight relative tolerance, everything else exactly."""
from __future__ import annotations

import math
from typing import Any

REL_TOL = 1e-9


def differences(want: Any, got: Any, path: str = "$", rel_tol: float = REL_TOL) -> list[str]:
    """Every place where ``got`` differs from ``want`` (empty list when they agree)."""
    if isinstance(want, bool) or isinstance(got, bool) or want is None or got is None or isinstance(want, str):
        return [] if want == got else [f"{path}: want {want!r}, got {got!r}"]
    if isinstance(want, (int, float)):
        if not isinstance(got, (int, float)):
            return [f"{path}: want number {want!r}, got {got!r}"]
        if math.isclose(want, got, rel_tol=rel_tol, abs_tol=0.0) or (math.isnan(want) and math.isnan(got)):
            return []
        return [f"{path}: want {want!r}, got {got!r}"]
    if isinstance(want, dict):
        if not isinstance(got, dict):
            return [f"{path}: want an object, got {type(got).__name__}"]
        out = [f"{path}: missing key {k!r}" for k in want if k not in got]
        out += [f"{path}: unexpected key {k!r}" for k in got if k not in want]
        for k in want:
            if k in got:
                out += differences(want[k], got[k], f"{path}.{k}", rel_tol)
        return out
    if isinstance(want, list):
        if not isinstance(got, list) or len(want) != len(got):
            return [f"{path}: want a list of {len(want)}, got {got!r:.80}"]
        out = []
        for i, (a, b) in enumerate(zip(want, got)):
            out += differences(a, b, f"{path}[{i}]", rel_tol)
        return out
    return [] if want == got else [f"{path}: want {want!r}, got {got!r}"]

"""Accuracy metrics in physical units: MdAPE, Pearson r, Kendall tau-b of rankings, top-k picks.

All functions are plain numpy, deterministic, and ignore nothing silently: the grouped metrics
return how many groups they averaged over.
"""
from __future__ import annotations

from typing import Iterator, Sequence

import numpy as np


def mdape(measured: np.ndarray, predicted: np.ndarray) -> float:
    """Median absolute percentage error, in percent, of ``predicted`` against ``measured``."""
    y = np.asarray(measured, dtype=np.float64)
    p = np.asarray(predicted, dtype=np.float64)
    if y.size == 0:
        return float("nan")
    return float(np.median(np.abs(p - y) / np.abs(y)) * 100.0)


def median_signed_error_pct(measured: np.ndarray, predicted: np.ndarray) -> float:
    """Median of (predicted − measured) / measured, in percent: the bias (negative = predicted low)."""
    y = np.asarray(measured, dtype=np.float64)
    p = np.asarray(predicted, dtype=np.float64)
    if y.size == 0:
        return float("nan")
    return float(np.median((p - y) / np.abs(y)) * 100.0)


def pearson_r(a: np.ndarray, b: np.ndarray) -> float:
    """Pearson correlation; NaN when fewer than 2 points or a constant input."""
    x = np.asarray(a, dtype=np.float64)
    y = np.asarray(b, dtype=np.float64)
    if x.size < 2:
        return float("nan")
    dx, dy = x - x.mean(), y - y.mean()
    den = np.sqrt(np.sum(dx * dx) * np.sum(dy * dy))
    return float(np.sum(dx * dy) / den) if den > 0 else float("nan")


def kendall_tau_b(a: np.ndarray, b: np.ndarray) -> float:
    """Kendall's tau-b (tie-corrected) between two equally long sequences.

    tau_b = (C - D) / sqrt((n0 - n1) (n0 - n2)), n0 = n(n-1)/2 pairs, n1 / n2 = pairs tied in a / b.
    NaN when fewer than 2 items or when either sequence is constant.
    """
    x = np.asarray(a, dtype=np.float64)
    y = np.asarray(b, dtype=np.float64)
    n = x.size
    if n < 2:
        return float("nan")
    i, j = np.triu_indices(n, k=1)
    sx = np.sign(x[i] - x[j])
    sy = np.sign(y[i] - y[j])
    s = float(np.sum(sx * sy))  # concordant - discordant (ties contribute 0)
    n0 = i.size
    tx = float(np.sum(sx == 0))
    ty = float(np.sum(sy == 0))
    den = np.sqrt((n0 - tx) * (n0 - ty))
    return s / den if den > 0 else float("nan")


def _group_index(keys: Sequence[str]) -> dict[str, np.ndarray]:
    keys = np.asarray(keys, dtype=object)
    out: dict[str, np.ndarray] = {}
    for k in sorted(set(keys.tolist())):
        out[k] = np.flatnonzero(keys == k)
    return out


def _item_means(measured: np.ndarray, predicted: np.ndarray, groups: Sequence[str],
                items: Sequence[str]) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Per group with >= 2 distinct items: (measured, predicted) means per item, items in sorted order."""
    y = np.asarray(measured, dtype=np.float64)
    p = np.asarray(predicted, dtype=np.float64)
    items = np.asarray(items, dtype=object)
    for _, idx in _group_index(groups).items():
        names = sorted(set(items[idx].tolist()))
        if len(names) < 2:
            continue
        yield (np.array([y[idx][items[idx] == nm].mean() for nm in names]),
               np.array([p[idx][items[idx] == nm].mean() for nm in names]))


def mean_group_kendall(measured: np.ndarray, predicted: np.ndarray, groups: Sequence[str],
                       items: Sequence[str]) -> tuple[float, int]:
    """Mean Kendall tau-b of the ranking of ``items`` within each group, and the number of groups used.

    Within a group, several rows of the same item (e.g. repeated runs) are averaged first. Groups
    with fewer than 2 distinct items, or where tau is undefined (a constant ranking), are skipped.
    """
    taus = []
    for ym, pm in _item_means(measured, predicted, groups, items):
        t = kendall_tau_b(ym, pm)
        if np.isfinite(t):
            taus.append(t)
    return (float(np.mean(taus)) if taus else float("nan")), len(taus)


def top_k_pick(measured: np.ndarray, predicted: np.ndarray, groups: Sequence[str], items: Sequence[str],
               ks: Sequence[int] = (1, 3)) -> dict[str, float | int]:
    """Share of groups where the truly lowest item is among the ``k`` lowest predicted items.

    Rows of the same item within a group are averaged first; groups with < 2 distinct items are
    skipped. Returns ``{"top1": .., "top3": .., "groups": n, "mean_items": ..}``; note that top-k is
    1 by construction in groups with at most k items (``groups_more_than_k`` says how many are not).
    """
    hits = {k: 0 for k in ks}
    bigger = {k: 0 for k in ks}
    sizes = []
    n = 0
    for ym, pm in _item_means(measured, predicted, groups, items):
        best = int(np.argmin(ym))
        order = np.argsort(pm, kind="stable")
        n += 1
        sizes.append(len(ym))
        for k in ks:
            hits[k] += int(best in order[:k].tolist())
            bigger[k] += int(len(ym) > k)
    out: dict[str, float | int] = {}
    for k in ks:
        out[f"top{k}"] = hits[k] / n if n else float("nan")
        out[f"groups_more_than_{k}"] = bigger[k]
    out["groups"] = n
    out["mean_items"] = float(np.mean(sizes)) if sizes else float("nan")
    return out


def coverage(measured: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> float:
    """Fraction of measured values inside [lo, hi] (in percent)."""
    y = np.asarray(measured, dtype=np.float64)
    if y.size == 0:
        return float("nan")
    return float(np.mean((y >= lo) & (y <= hi)) * 100.0)

"""Poisson-server physics: Little's-law concurrency, busy fraction and the idle/busy power mix."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from . import capacity as capacity_mod
from .. import features as F
from .. import physics
from ..assemble import Evaluate, Row
from ..specs import GpuSpec
from .solve import solve_concurrency
from ..targets import ITL, POWER

IDLE_FRACTION_OF_TDP = physics.IDLE_FRACTION_OF_TDP  # estimate used only when the catalog has no measured idle power


def idle_power(gpu: GpuSpec) -> tuple[float, str]:
    """Idle power of ``gpu`` with a model loaded and no requests, and where the figure comes from."""
    if gpu.idle_power_w is not None:
        return gpu.idle_power_w, f"measured: {gpu.idle_power_source or 'catalog'}"
    return IDLE_FRACTION_OF_TDP * gpu.tdp_w, f"estimated: {IDLE_FRACTION_OF_TDP:.0%} of TDP (no measured figure)"


def server_mix(evaluate: Evaluate, rows: Sequence[Row], cols: F.Columns, learned: bool, cap: np.ndarray,
               capacity: Mapping[str, np.ndarray], classes: np.ndarray | None = None) -> dict[int, dict[str, Any]]:
    """Poisson server: solve Little's law L = λ·(prefill + output tokens × ITL(L)) (:mod:`wattgpu.serving.solve`).

    Without server rows in training the models are evaluated as a closed loop at the busy batch and
    mean power = idle + (1 − e^−L) × (learned busy power − idle). With server rows (``learned``) they
    are evaluated as the server workload at concurrency L, exactly as the training rows were
    described, and the learned power is the mean power. At most ``cap`` sequences decode at once;
    a rate beyond ``capacity["max_qps"]`` is overloaded: the GPU runs saturated at the capacity's
    operating point (see :mod:`wattgpu.serving.capacity`). Repeated rows are solved once; ``classes``
    (:func:`wattgpu.features.cap_classes` of ``cols``) lets rows that differ in their batch cap only share each
    model evaluation at a concurrency within both caps (:func:`wattgpu.serving.capacity.request_time`)."""
    first: dict[Any, int] = {}
    keys = capacity_mod.row_keys(rows, True)  # specs and every workload field
    where = [first.setdefault(k, i) for i, k in enumerate(keys)]
    if len(first) < len(rows):  # repeated rows are solved once
        uniq = np.array(sorted(first.values()), dtype=np.intp)
        solved = server_mix(evaluate, [rows[i] for i in uniq], {k: v[uniq] for k, v in cols.items()}, learned,
                            cap[uniq], {k: v[uniq] for k, v in capacity.items()},
                            None if classes is None else classes[uniq])
        slot = {int(i): j for j, i in enumerate(uniq)}
        return {k: dict(solved[slot[w]]) for k, w in enumerate(where)}
    qps = np.array([w.qps for _, _, w in rows], dtype=np.float64)
    index = np.arange(len(rows))
    state: dict[str, Any] = {}

    def request_time(conc: np.ndarray, idx: np.ndarray | None = None,
                     targets: tuple[str, ...] | None = ("itl",)) -> np.ndarray:
        """Per-request time of the rows ``idx`` (all when None) at concurrency ``conc``. The iterations
        need the ITL model only; the final call (``targets=None``) runs every model."""
        rows_at = index if idx is None else index[idx]
        state.update(capacity_mod.request_time(evaluate, cols, rows_at, conc, cap if idx is None else cap[idx],
                                               learned, targets, classes))
        return state["request_s"]

    over = qps > capacity["max_qps"] * (1.0 + 1e-9)
    # at the capacity's operating point b, max_qps = b / W(b): a rate within capacity has b ≥ λ·W(b), so
    # the capacity grid brackets the root
    conc, converged = solve_concurrency(np.minimum(qps, capacity["max_qps"]), request_time,
                                        capacity["grid_conc"], capacity["grid_req"])
    conc = np.where(over, capacity["concurrency"], conc)
    request_time(conc, None, None)  # every model at the solved (or saturated) concurrency
    res, batch = state["res"], state["batch"]
    idle, sources = zip(*(idle_power(g) for g, _, _ in rows))
    busy = physics.busy_fraction(conc)
    power = res[POWER] if learned else physics.server_power_mix(np.array(idle), res[POWER], conc)
    return {k: mix_entry(rows[k][0], learned, float(power[k]), float(res[ITL][k]), float(busy[k]),
                         float(res[POWER][k]), float(conc[k]), float(batch[k]), float(state["request_s"][k]),
                         (float(idle[k]), sources[k]), bool(converged[k]) or bool(over[k]), bool(over[k]),
                         float(capacity["max_qps"][k]), float(state["roofline_itl_s"][k]))
            for k in range(len(rows))}


def mix_entry(gpu: GpuSpec, learned: bool, power: float, itl: float, busy: float, busy_power: float,
              conc: float, batch: float, request_s: float, idle: tuple[float, str], converged: bool,
              overloaded: bool, max_qps: float, roofline_itl_s: float) -> dict[str, Any]:
    """The solved server state of one row (both paths build it here)."""
    return {"power": power, "itl": itl, "busy": busy, "busy_power": busy_power, "concurrency": conc,
            "batch": batch, "request_s": request_s, "idle_w": None if learned else idle[0],
            "idle_source": None if learned else idle[1], "learned": learned,
            "idle_estimated": not learned and gpu.idle_power_w is None, "converged": converged,
            "overloaded": overloaded, "max_qps": max_qps, "roofline_itl_s": roofline_itl_s}

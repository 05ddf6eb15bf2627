"""Poisson-server physics: Little's-law concurrency, busy fraction and the idle/busy power mix."""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

import numpy as np

from . import features as F
from . import physics
from .assemble import Evaluate, Row
from .specs import GpuSpec

IDLE_FRACTION_OF_TDP = 0.15  # estimate used only when the catalog has no measured idle power
SERVER_FIXED_POINT_ITERS = 30


def idle_power(gpu: GpuSpec) -> tuple[float, str]:
    """Idle power of ``gpu`` with a model loaded and no requests, and where the figure comes from."""
    if gpu.idle_power_w is not None:
        return gpu.idle_power_w, f"measured: {gpu.idle_power_source or 'catalog'}"
    return IDLE_FRACTION_OF_TDP * gpu.tdp_w, f"estimated: {IDLE_FRACTION_OF_TDP:.0%} of TDP (no measured figure)"


def server_mix(evaluate: Evaluate, rows: Sequence[Row], learned: bool = False) -> dict[int, dict[str, Any]]:
    """Poisson server: solve Little's law L = λ·(prefill + output tokens × ITL(L)) (see :mod:`physics`).

    Without server rows in training the models are evaluated as a closed loop at the busy batch and
    mean power = idle + (1 − e^−L) × (learned busy power − idle). With server rows (``learned``) they
    are evaluated as the server workload at concurrency L, exactly as the training rows were
    described, and the learned power is the mean power."""
    qps = np.array([w.qps for _, _, w in rows], dtype=np.float64)
    out_tok = np.array([w.output_tokens for _, _, w in rows], dtype=np.float64)
    state: dict[str, Any] = {}
    # The rows as the models see them (learned: the server workload itself; else a closed loop), built
    # once; each iteration only sets the concurrency column and re-derives, for every row at once.
    if learned:
        seen = rows
    else:
        loops: dict[int, Any] = {}  # one closed-loop workload per distinct workload object
        seen = [(g, m, loops.get(id(w)) or loops.setdefault(id(w), replace(w, kind="closed_loop", qps=None,
                                                                           concurrency=1.0)))
                for g, m, w in rows]
    raw = {k: v for k, v in F.columns(seen).items() if k in F.RAW_KEYS}

    def request_time(conc: np.ndarray, idx: np.ndarray | None = None, targets: tuple[str, ...] = ("itl",)) -> np.ndarray:
        """Per-request time of rows ``idx`` (all when None) at concurrency ``conc``; the iterations
        need the ITL model only, the final call (``targets=None``) every model."""
        batch = physics.busy_batch(conc)
        cols = dict(raw) if idx is None or len(idx) == len(rows) else {k: v[idx] for k, v in raw.items()}
        cols["wl_concurrency"] = np.maximum(conc, 1e-3) if learned else batch
        F.derive(cols)
        step = evaluate(cols, targets)
        prefill = physics.compute_latency_s(cols["llm_active_params_b"], cols["gpu_fp16_tflops"]) * cols["wl_input_tokens"]
        out = out_tok if idx is None else out_tok[idx]
        state.update(res=step, batch=cols["eff_batch"] if learned else batch, request_s=prefill + out * step["itl"])
        return state["request_s"]

    conc, converged = physics.solve_server_concurrency(qps, request_time, iters=SERVER_FIXED_POINT_ITERS,
                                                       active_rows=True)
    request_time(conc, None, None)  # type: ignore[arg-type]  # every model at the solved concurrency
    res, batch = state["res"], state["batch"]
    idle, sources = zip(*(idle_power(g) for g, _, _ in rows))
    busy = physics.busy_fraction(conc)
    power = res["power"] if learned else physics.server_power_mix(np.array(idle), res["power"], conc)
    return {k: {"power": float(power[k]), "itl": float(res["itl"][k]), "busy": float(busy[k]),
                "busy_power": float(res["power"][k]), "concurrency": float(conc[k]), "batch": float(batch[k]),
                "request_s": float(state["request_s"][k]), "idle_w": None if learned else float(idle[k]),
                "idle_source": None if learned else sources[k], "learned": learned,
                "idle_estimated": not learned and rows[k][0].idle_power_w is None,
                "converged": bool(converged[k])}
            for k in range(len(rows))}

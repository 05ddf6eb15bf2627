"""Which rows can be predicted, the warnings each prediction carries, and its calibrated intervals."""
from __future__ import annotations

import math
from dataclasses import replace
from functools import lru_cache
from operator import itemgetter
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from .serving import capacity
from . import features as F
from . import parallel, physics
from .assemble import Row
from .errors import ModelFitError, UnsupportedModelError, WattGPUError
from .prediction import Interval
from .serving.server import IDLE_FRACTION_OF_TDP
from .specs import GpuSpec, LlmSpec
from .workload import Workload

NO_KV_CACHE = {"rnn_rwkv": "a recurrent network", "ssm_mamba": "a pure state-space (Mamba) model"}


def describe(value: Any) -> str:
    """A short repr of a user value for error messages."""
    shown = repr(value) if not isinstance(value, (str, bytes)) else type(value).__name__
    return shown if len(shown) <= 60 else shown[:57] + "..."


def check_row_types(rows: Sequence[Any]) -> None:
    """Raise naming the first entry that is not a (GpuSpec, LlmSpec, Workload) tuple."""
    if _all_rows_ok(rows):
        return
    for k, t in enumerate(rows):
        if not (isinstance(t, (tuple, list)) and len(t) == 3 and isinstance(t[0], GpuSpec)
                and isinstance(t[1], LlmSpec) and isinstance(t[2], Workload)):
            raise WattGPUError(f"triples[{k}]: expected a (GpuSpec, LlmSpec, Workload) tuple, got {describe(t)}")


def _all_rows_ok(rows: Sequence[Any]) -> bool:
    """Fast check (C-level maps over the rows, isinstance per distinct object) that every row is a
    3-tuple/list of (GpuSpec, LlmSpec, Workload); False sends the caller to the row-by-row check."""
    try:
        if not set(map(type, rows)) <= {tuple, list} or set(map(len, rows)) - {3}:
            return False
        for part, cls in enumerate((GpuSpec, LlmSpec, Workload)):
            if not all(issubclass(t, cls) for t in set(map(type, map(itemgetter(part), rows)))):
                return False
    except TypeError:
        return False
    return True


def row_errors(rows: Sequence[Row]) -> tuple[list[WattGPUError | None], F.Columns]:
    """Type-check the rows (raising) and say which cannot be predicted at all; also returns their
    feature columns for reuse."""
    check_row_types(rows)
    cols = F.columns(rows)
    out: list[WattGPUError | None] = [None] * len(rows)
    no_kv = {id(m) for m in {id(r[1]): r[1] for r in rows}.values() if m.arch_class in NO_KV_CACHE}
    # rows that may not be predictable: memory does not fit, or a TP group (its shape is checked per row)
    suspects = set(np.flatnonzero(~(cols["fit_sequences"] >= 1) | (cols["wl_tp"] > 1)).tolist())
    if no_kv:
        suspects.update(i for i, r in enumerate(rows) if id(r[1]) in no_kv)
    for i in sorted(suspects):
        out[i] = row_error(rows[i], cols, i)
    return out, cols


def row_error(row: Row, cols: F.Columns, i: int) -> WattGPUError | None:
    """Why row ``i`` cannot be predicted (no KV cache, an impossible TP group, does not fit in memory), or None."""
    g, m, w = row
    if m.arch_class in NO_KV_CACHE:
        return UnsupportedModelError(f"{m.name} is {NO_KV_CACHE[m.arch_class]} without attention or KV cache; "
                                     "WattGPU models attention-based LLMs only")
    group = parallel.group_error(g, m, w.tp)
    if group is not None:
        return group
    if cols["fit_sequences"][i] < 1:
        one_seq = cols["kv_per_sequence"][i]
        need = float(physics.memory_needed_bytes(cols["weights_bytes"][i], g.memory_size_gb, one_seq)) / physics.BYTES_PER_MEMORY_GB
        have = g.memory_size_gb * w.gpu_memory_utilization
        where = f"{g.name}" if w.tp == 1 else f"{w.tp} × {g.name}"
        per = "" if w.tp == 1 else f" per GPU (1/{w.tp} of the weights and KV cache)"
        fix, fit_tp = _fit_fix(g, m, w)
        err = ModelFitError(f"{m.name} does not fit on {where}: needs {need:.1f} GiB{per} (weights + activation "
                            f"reserve + one {w.context_tokens}-token sequence), GPU has {have:.1f} GiB usable "
                            f"({g.memory_size_gb:g} GiB × {w.gpu_memory_utilization:g}); {fix}")
        err.need_gb, err.have_gb, err.fix, err.fit_tp = need, have, fix, fit_tp  # type: ignore[attr-defined]
        return err
    return None


TP_TRIED = (2, 4, 8, 16, 32, 64)  # tensor-parallel degrees a does-not-fit message may suggest


def smallest_fitting_tp(g: GpuSpec, m: LlmSpec, w: Workload) -> int | None:
    """The smallest tensor-parallel degree above ``w.tp`` (powers of two up to the GPU's group size) whose
    group can run ``m`` and holds it with one full sequence, by the same checks as a prediction; or None."""
    for tp in parallel.candidate_groups(g, m, tuple(t for t in TP_TRIED if t > w.tp)):
        if F.columns([(g, m, replace(w, tp=tp))])["fit_sequences"][0] >= 1:
            return tp
    return None


MAX_ENGINE_SHARE = 0.95  # the highest gpu_memory_utilization a does-not-fit message suggests


def _fits(g: GpuSpec, m: LlmSpec, w: Workload) -> bool:
    return bool(F.columns([(g, m, w)])["fit_sequences"][0] >= 1)


def engine_fixes(g: GpuSpec, m: LlmSpec, w: Workload) -> list[str]:
    """Engine settings that make ``m`` fit on the same GPUs, by the same memory check as a prediction: a
    larger engine share of GPU memory (up to MAX_ENGINE_SHARE) or an fp8 KV cache."""
    out = []
    for share in (0.92, MAX_ENGINE_SHARE):
        if share > w.gpu_memory_utilization and _fits(g, m, replace(w, gpu_memory_utilization=share)):
            out.append(f"raise gpu_memory_utilization to {share:g}")
            break
    if w.kv_cache_dtype == "auto" and _fits(g, m, replace(w, kv_cache_dtype="fp8")):
        out.append("store the KV cache in fp8 (kv_cache_dtype fp8)")
    return out


@lru_cache(maxsize=512)  # a CSV of many rows that do not fit asks the same question again and again
def _fit_fix(g: GpuSpec, m: LlmSpec, w: Workload) -> tuple[str, int | None]:
    """What to do about a model that does not fit: an engine setting that makes it fit on these GPUs (a
    near miss), the smallest group of these GPUs that holds it, if any, or a larger GPU; and that group's
    size (None when no group holds it)."""
    fixes = engine_fixes(g, m, w)
    tp = smallest_fitting_tp(g, m, w)
    if tp is not None:
        fixes.append(f"split it over {tp} of these GPUs (tp={tp})")
    elif (g.max_group or 1) > 1 and not fixes:
        from .layout_predict import smallest_layout, suggestion

        found = smallest_layout(g, m, w, tp=w.tp)
        across = f", or a layout across nodes: {suggestion(*found)}" if found is not None else ""
        return f"use a larger GPU (no group of up to {g.max_group} of these GPUs holds it){across}", None
    return ", ".join(fixes) + (" or " if fixes else "") + "use a larger GPU", tp


def not_finite_error(row: Row) -> WattGPUError:
    gpu, llm, _ = row
    return WattGPUError(f"prediction for {llm.name} on {gpu.name} is not finite; inputs are outside anything "
                        "the models can describe — check the spec values")


def domain_warnings(domain: Mapping[str, Any], gpu: GpuSpec, llm: LlmSpec, wl: Workload) -> Iterable[str]:
    """Say where a prediction leaves what the models were trained on."""
    if not domain:
        return
    for field_name, (lo, hi) in domain.get("gpu_ranges", {}).items():
        v = getattr(gpu, field_name, None)
        if v is not None and not (lo <= v <= hi):
            yield f"GPU {field_name} = {v:g} is outside the training range [{lo:g}, {hi:g}]: extrapolating"
    lo, hi = domain.get("llm_params_b", (0, math.inf))
    if not (lo <= llm.total_params_b <= hi):
        yield f"LLM size {llm.total_params_b:g}B is outside the training range [{lo:g}, {hi:g}]B: extrapolating"
    if llm.arch_class not in domain.get("arch_classes", (llm.arch_class,)):
        yield f"LLM architecture {llm.arch_class} was never in training"
    if llm.is_moe and not domain.get("moe_seen", False):
        yield "mixture-of-experts LLMs were never in training"
    if llm.quantized and not domain.get("quantized_seen", False):
        yield "quantised checkpoints were never in training"
    if wl.kind not in domain.get("kinds", (wl.kind,)):
        yield (f"workload kind '{wl.kind}' was never measured in training; "
               + ("power mixes idle and learned busy power" if wl.kind == "server" else "extrapolating"))
    if wl.engine not in domain.get("engines", (wl.engine,)):
        yield f"engine '{wl.engine}' was never measured in training"
    gpus = set(domain.get("gpus", ()))
    if gpus and gpu.name not in gpus:
        yield f"{gpu.name} was not measured in training (prediction from spec-sheet features)"


def tp_warnings(domain: Mapping[str, Any], gpu: GpuSpec, llm: LlmSpec, wl: Workload) -> Iterable[str]:
    """Flag tensor-parallel predictions: outside the measured TP range, the link used, the MoE assumption."""
    if wl.tp == 1:
        return
    lo, hi = domain.get("tp_range", (1, 1)) if domain else (1, 1)
    if not lo <= wl.tp <= hi:
        seen = "single-GPU rows only" if hi == 1 else f"TP {lo:g}–{hi:g}"
        yield (f"TP {wl.tp} is outside the measured TP range ({seen} in training): per-GPU power and ITL "
               "extrapolate from the TP roofline (sharded weights/KV + all-reduces)")
    yield f"{wl.tp} × {gpu.name} over {parallel.link_name(gpu, wl.tp)}; power is per GPU, energy is for the group"
    if gpu.nvlink_gb_s and 1 < gpu.nvlink_group < wl.tp:
        yield (f"{wl.tp} GPUs exceed {gpu.name}'s {gpu.nvlink_group}-GPU NVLink domain: the ring's all-reduces run at "
               f"PCIe speed ({parallel.link_name(gpu, wl.tp)} against NVLink {gpu.nvlink_gb_s / 2:g} GB/s); "
               "the learned ITL scales the whole roofline step, interconnect part included, so it is an upper "
               "estimate for such a group")
    if llm.is_moe:
        yield f"MoE on {wl.tp} GPUs: {parallel.MOE_ASSUMPTION}"


def context_warnings(llm: LlmSpec, wl: Workload) -> Iterable[str]:
    """A context beyond the model's trained positions is allowed (RoPE scaling can extend it) but flagged."""
    if llm.max_position_embeddings and wl.context_tokens > llm.max_position_embeddings:
        yield (f"context of {wl.context_tokens} tokens (input + output) exceeds {llm.name}'s "
               f"max_position_embeddings {llm.max_position_embeddings}; engines refuse it unless the context "
               "is extended (e.g. rope_scaling)")


def server_warnings(gpu: GpuSpec, mix: Mapping[str, Any]) -> Iterable[str]:
    """Warnings of a solved Poisson-server row (estimated idle power, no fixed point); the overload
    state is reported by :func:`capacity_warnings`."""
    if mix["idle_estimated"]:
        yield (f"idle power of {gpu.name} estimated as {IDLE_FRACTION_OF_TDP:.0%} of TDP "
               "(no measured figure in the catalog)")
    if not mix["converged"]:
        yield "Little's-law fixed point did not converge: the load is close to capacity"


def capacity_warnings(gpu: GpuSpec, wl: Workload, overloaded: bool, max_qps: float, fit_batch: int,
                      max_concurrency: int, saturated: bool = False) -> Iterable[str]:
    """The overload state, a closed loop at capacity (``saturated``), and a closed loop (or fixed
    concurrency) cut by KV memory."""
    if overloaded:
        yield capacity.overload_message(float(wl.qps or 0.0), max_qps)
    if saturated and wl.kind == "closed_loop":
        yield (f"closed loop saturated: {wl.concurrency:g} clients keep {gpu.name} at its capacity "
               f"({max_qps:.4g} req/s); more clients only wait longer in the queue")
    fit = max(fit_batch, 1)
    if wl.concurrency is not None and wl.concurrency > fit:
        yield (f"concurrency {wl.concurrency:g} cut to {fit} sequences: the KV cache of more "
               f"{wl.context_tokens}-token sequences does not fit on {gpu.name}"
               + ("" if fit_batch == max_concurrency else f" (counting full-context KV in every layer, as the "
                  f"models were trained; freeing out-of-window blocks would fit {max_concurrency})"))


def intervals(factors: tuple[tuple[float, float, float], ...], value: float,
              cap: float | None = None, floor: float | None = None) -> tuple[Interval, ...]:
    """Multiplicative intervals around ``value``, inside the physical range: the high end at most ``cap``
    (TDP), the low end at least ``floor`` (idle power; the roofline step for ITL) when given."""
    out = []
    for level, lo, hi in factors:
        low, high = value * lo, value * hi
        if floor is not None and floor > low:  # max(value × lo, floor), as a comparison (hot path)
            low = floor
        if cap is not None and cap < high:
            high = cap
        iv = object.__new__(Interval)  # the frozen dataclass's fields without its __init__ (same values)
        iv.__dict__.update(level=level, low=low, high=high)
        out.append(iv)
    return tuple(out)


def interval_ends(value: np.ndarray, lo: np.ndarray, hi: np.ndarray, floor: np.ndarray,
                  cap: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """:func:`intervals`' (low, high) per row of arrays, for one level's factors ``lo`` and ``hi`` per row: the
    same products and comparisons, so the same numbers."""
    with np.errstate(invalid="ignore", over="ignore"):
        low, high = value * lo, value * hi
    low = np.where(floor > low, floor, low)
    if cap is not None:
        high = np.where(cap < high, cap, high)
    return low, high

"""Raw feature columns: (GPU, LLM, workload) triples → named numpy columns (or one row of floats).

The columns read from the specs, their ordinal vocabularies, and the two ways to build them: ``columns(rows)``
for a batch (numpy arrays) and ``row_columns(row)`` for one row (plain floats, the scalar path). Both end in
:func:`wattgpu.derived.derive`, which adds the physics-derived columns.
"""
from __future__ import annotations

import math
import operator
from operator import itemgetter
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from . import memory, ops, physics
from .derived import SETUP_COLUMNS, Columns, derive, derive_load, derive_setup
from .specs import GpuSpec, LlmSpec, MEMORY_TYPES
from .workload import ENGINE_ERAS, ENGINES, ITL_STATS, KINDS, Workload

# Ordinal vocabularies (fixed order: codes are part of the trained models' meaning).
MEMORY_TYPE_ORDER = ("LPDDR5", "GDDR5", "GDDR6", "GDDR6X", "GDDR7", "HBM2", "HBM2e", "HBM3", "HBM3e")
SCENARIOS = ("offline", "server_low", "server_high", "closed_loop")
MODEL_TYPES = (
    "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma", "gemma2", "gemma3",
    "gemma3_text", "phi", "phi3", "phi3small", "phimoe", "gpt_neox", "gptj", "gpt2", "gpt_bigcode", "starcoder2",
    "falcon", "mpt", "bloom", "codegen", "stablelm", "olmo2", "olmoe", "granite", "granitemoe", "internlm2",
    "deepseek", "deepseek_v3", "nemotron", "nemotron_h", "gpt_oss", "llama4", "exaone", "cohere", "solar",
)
assert set(MEMORY_TYPE_ORDER) == set(MEMORY_TYPES)


def _code(vocab: Sequence[str], value: str) -> float:
    """Ordinal code of ``value`` in ``vocab``; NaN when unseen (trees route NaN down the learned default)."""
    try:
        return float(vocab.index(value))
    except ValueError:
        return math.nan


def _opt(x: float | None) -> float:
    return math.nan if x is None else float(x)


# Raw per-row columns read from the specs; everything else derives from these.
_GPU_FIELDS = ("tdp_w", "memory_size_gb", "memory_bandwidth_gb_s", "fp16_tflops", "release_year")
_LLM_FIELDS = ("num_layers", "hidden_size", "num_attention_heads", "num_kv_heads", "head_dim", "intermediate_size",
               "vocab_size", "total_params_b", "active_params_b", "num_experts", "experts_per_tok",
               "weight_bytes_per_param", "kv_layers")
_WL_FIELDS = ("max_batch", "input_tokens", "output_tokens", "gpu_memory_utilization")


def _gpu_values(g: GpuSpec) -> tuple[float, ...]:
    return (*(float(getattr(g, f)) for f in _GPU_FIELDS), _opt(g.base_clock_mhz), _opt(g.boost_clock_mhz),
            _opt(g.transistors_million), _code(MEMORY_TYPE_ORDER, g.memory_type), _opt(g.fp8_tflops),
            _opt(g.fp4_tflops))


def _llm_values(m: LlmSpec) -> tuple[float, ...]:
    return (*(float(getattr(m, f)) for f in _LLM_FIELDS), _code(MODEL_TYPES, m.model_type),
            float(m.kv_lora_rank), float(m.qk_rope_head_dim), _opt(m.sliding_window), _opt(m.sliding_window_layers),
            float(m.compute_dtype == "fp8"), float(m.compute_dtype == "fp4"))


def _wl_values(w: Workload) -> tuple[float, ...]:
    return (*(float(getattr(w, f)) for f in _WL_FIELDS), _code(KINDS, w.kind), _code(ENGINES, w.engine),
            _code(SCENARIOS, physics.paper_scenario(w.kind, w.qps)), _opt(w.qps), _opt(w.concurrency),
            math.inf if w.num_requests is None else float(w.num_requests), memory.kv_element_bytes(w.kv_cache_dtype),
            _code(ENGINE_ERAS, w.engine_era), _code(ITL_STATS, w.itl_stat))


# Raw column names, in the order the ``_*_values`` functions above return them.
_GPU_KEYS = (*("gpu_" + f for f in _GPU_FIELDS), "gpu_base_clock_mhz", "gpu_boost_clock_mhz",
             "gpu_transistors_million", "gpu_memory_type_code", "gpu_fp8_tflops", "gpu_fp4_tflops")
_LLM_KEYS = (*("llm_" + f for f in _LLM_FIELDS), "llm_model_type_code", "llm_kv_lora_rank", "llm_qk_rope_head_dim",
             "llm_sliding_window", "llm_sliding_window_layers", "llm_fp8_compute", "llm_fp4_compute")
_WL_KEYS = (*("wl_" + f for f in _WL_FIELDS), "wl_kind_code", "wl_engine_code", "wl_scenario_code", "wl_qps",
            "wl_concurrency", "wl_num_requests", "wl_kv_element_bytes", "wl_engine_era_code", "wl_itl_stat_code")


# Tensor-parallel inputs (wattgpu.parallel): the GPU's interconnect and the workload's TP degree.
_GPU_LINK_KEYS = ("gpu_nvlink_gb_s", "gpu_nvlink_group", "gpu_pcie_gen", "gpu_pcie_lanes")
_TP_KEYS = ("wl_tp",)
# The GPU's measured idle power (NaN where the catalog has none): the lower bound of the power model.
_GPU_POWER_KEYS = ("gpu_idle_power_w",)


def _gpu_power_values(g: GpuSpec) -> tuple[float, ...]:
    return (_opt(g.idle_power_w),)


def _gpu_link_values(g: GpuSpec) -> tuple[float, ...]:
    return (_opt(g.nvlink_gb_s), float(g.nvlink_group), _opt(g.pcie_gen), _opt(g.pcie_lanes))


def _tp_values(w: Workload) -> tuple[float, ...]:
    return (float(w.tp),)


# Per row position (GPU, LLM, workload): its column groups and the functions that read them.
_PARTS: tuple[tuple[int, tuple[tuple[tuple[str, ...], Callable[[Any], tuple[float, ...]]], ...]], ...] = (
    (0, ((_GPU_KEYS, _gpu_values), (_GPU_LINK_KEYS, _gpu_link_values), (_GPU_POWER_KEYS, _gpu_power_values))),
    (1, ((_LLM_KEYS, _llm_values),)),
    (2, ((_WL_KEYS, _wl_values), (_TP_KEYS, _tp_values))))


def columns(rows: Iterable[tuple[GpuSpec, LlmSpec, Workload]]) -> Columns:
    """Raw numeric columns for a batch of (GPU, LLM, workload) triples.

    Each distinct GPU, LLM and workload object is read once; rows then gather its values by index
    (batches repeat the same few specs, so this avoids per-row attribute reads). The raw and set-up
    columns of a batch of at most ``SETUP_ROWS`` rows are kept (:func:`_setup_columns`): a batch seen
    before (the same GPU and LLM objects, workloads of the same values, in the same order) derives
    only its load columns. The kept arrays are read-only; every call returns a new dict.
    """
    rows = list(rows)
    parts = []
    for part, groups in _PARTS:
        specs = list(map(itemgetter(part), rows))
        ids = list(map(id, specs))
        slot: dict[int, int] = {}
        index = np.asarray([slot.setdefault(i, len(slot)) for i in ids], dtype=np.intp)  # first-seen order
        by_id = dict(zip(ids, specs))
        parts.append(([by_id[i] for i in slot], index, groups))
    return derive_load(dict(_setup_columns(parts, len(rows))))


_Parts = list[tuple[list[Any], np.ndarray, tuple[tuple[tuple[str, ...], Callable[[Any], tuple[float, ...]]], ...]]]
SETUP_ROWS = 1024  # batches up to this size keep their set-up columns (a whole-catalog rank is ~50-400 rows)
SETUP_LIMIT = 16  # kept batches: at most ~16 × 1024 rows × ~75 columns × 8 bytes ≈ 10 MB
_SETUPS: dict[tuple[Any, ...], tuple[list[Any], list[Any], Columns]] = {}


def _setup_columns(parts: _Parts, n: int) -> Columns:
    """The raw and :data:`SETUP_COLUMNS` of a batch (``parts``: per row position its distinct objects, each
    row's index among them and its column groups), kept per batch: keyed by the GPU and LLM objects (checked
    by identity on a hit), the workloads' raw values by their bits, and every row's indices."""
    (gpus, gi, _), (llms, li, _), (wls, wi, _) = parts
    key = None
    if n <= SETUP_ROWS:
        wl_bits = np.array([_memo_values(w, _wl_values) + _memo_values(w, _tp_values) for w in wls],
                           dtype=np.float64).tobytes()
        key = (tuple(map(id, gpus)), tuple(map(id, llms)), wl_bits, gi.tobytes(), li.tobytes(), wi.tobytes())
        hit = _SETUPS.get(key)
        if hit is not None and all(map(operator.is_, hit[0], gpus)) and all(map(operator.is_, hit[1], llms)):
            return hit[2]
    out: Columns = {}
    for distinct, index, groups in parts:
        for keys, values in groups:
            gathered = _table(distinct, values, len(keys)).T[:, index]  # [keys, rows], each row contiguous
            for j, name in enumerate(keys):
                out[name] = gathered[j]
    out = derive_setup(out)
    if key is not None:
        for v in out.values():
            v.flags.writeable = False  # shared by every later call of this batch
        if len(_SETUPS) >= SETUP_LIMIT:
            _SETUPS.clear()
        _SETUPS[key] = (list(gpus), list(llms), out)
    return out


def forget_setups() -> None:
    """Drop the kept set-up columns (:func:`_setup_columns`); called by ``RowMemo.clear``."""
    _SETUPS.clear()


_TABLES: dict[tuple[tuple[int, ...], Callable[[Any], tuple[float, ...]]], tuple[list[Any], np.ndarray]] = {}
_TABLES_LIMIT = 256


def _table(specs: list[Any], values: Callable[[Any], tuple[float, ...]], width: int) -> np.ndarray:
    """The [specs, width] table of ``values`` of distinct spec objects, kept per list of objects (a whole
    catalog's GPUs are one table, built once, not per batch); a hit is checked object by object. Read-only:
    callers gather copies from it."""
    key = (tuple(map(id, specs)), values)
    hit = _TABLES.get(key)
    if hit is not None and all(map(operator.is_, hit[0], specs)):
        return hit[1]
    if len(_TABLES) > _TABLES_LIMIT:
        _TABLES.clear()
    table = np.array([_memo_values(s, values) for s in specs], dtype=np.float64).reshape(len(specs), width)
    table.flags.writeable = False
    _TABLES[key] = (list(specs), table)
    return table


_VALUES: dict[tuple[int, Callable[[Any], tuple[float, ...]]], tuple[Any, tuple[float, ...]]] = {}
_VALUES_LIMIT = 4096


def _memo_values(spec: Any, values: Callable[[Any], tuple[float, ...]]) -> tuple[float, ...]:
    """``values(spec)``, read once per spec object (specs and workloads are frozen): a catalog's GPUs are
    read once, not on every batch. Keyed by ``id`` and holding the object, so a hit is checked by identity."""
    key = (id(spec), values)
    hit = _VALUES.get(key)
    if hit is not None and hit[0] is spec:
        return hit[1]
    if len(_VALUES) > _VALUES_LIMIT:
        _VALUES.clear()
    got = values(spec)
    _VALUES[key] = (spec, got)
    return got


def gpu_columns(g: GpuSpec) -> dict[str, float]:
    """The raw columns one GPU contributes to a row, as floats."""
    return {**dict(zip(_GPU_KEYS, _gpu_values(g))), **dict(zip(_GPU_LINK_KEYS, _gpu_link_values(g))),
            **dict(zip(_GPU_POWER_KEYS, _gpu_power_values(g)))}


def llm_columns(m: LlmSpec) -> dict[str, float]:
    """The raw columns one LLM contributes to a row, as floats."""
    return dict(zip(_LLM_KEYS, _llm_values(m)))


def workload_columns(w: Workload) -> dict[str, float]:
    """The raw columns one workload contributes to a row, as floats."""
    return {**dict(zip(_WL_KEYS, _wl_values(w))), **dict(zip(_TP_KEYS, _tp_values(w)))}


def row_columns(row: tuple[GpuSpec, LlmSpec, Workload],
                parts: tuple[dict[str, float], dict[str, float], dict[str, float]] | None = None) -> dict[str, float]:
    """The raw and derived columns of ONE row as plain floats (the scalar twin of :func:`columns`).

    ``parts``: the row's :func:`gpu_columns`, :func:`llm_columns`, :func:`workload_columns` when the
    caller has them already (they are read-only here)."""
    g, m, w = row
    gc, lc, wc = parts if parts is not None else (gpu_columns(g), llm_columns(m), workload_columns(w))
    c = {**gc, **lc, **wc}
    return derive(c)  # type: ignore[arg-type,return-value]


GPU_COLUMN_KEYS = (*_GPU_KEYS, *_GPU_LINK_KEYS)  # the spec-sheet columns of one GPU (its identity for calibration; not idle power)
RAW_KEYS = (*_GPU_KEYS, *_LLM_KEYS, *_WL_KEYS, *_GPU_LINK_KEYS, *_TP_KEYS, *_GPU_POWER_KEYS)
_KEPT = (*RAW_KEYS, *SETUP_COLUMNS)  # what a row re-derived at another concurrency keeps
_CLOSED_LOOP_CODES = {"wl_kind_code": _code(KINDS, "closed_loop"), "wl_scenario_code": _code(SCENARIOS, "closed_loop")}


def with_concurrency(cols: Columns, index: np.ndarray, concurrency: np.ndarray, closed_loop: bool) -> Columns:
    """The columns of rows ``index`` at a fixed ``concurrency``, re-derived without building Workloads.

    Equals :func:`columns` of ``replace(w, concurrency=c)`` (and, with ``closed_loop``, also
    ``kind="closed_loop", qps=None``) for each row: only those raw workload columns change."""
    idx = np.asarray(index, dtype=np.intp)
    raw = {k: cols[k][idx] for k in _KEPT}
    raw["wl_concurrency"] = np.asarray(concurrency, dtype=np.float64)
    if closed_loop:
        for k, v in _CLOSED_LOOP_CODES.items():
            raw[k] = np.full(len(idx), v)
        raw["wl_qps"] = np.full(len(idx), math.nan)
    return derive_load(raw)  # the set-up columns do not depend on the load: kept, not recomputed



_CAP_FREE = [k for k in _KEPT if k not in ("wl_max_batch", "wl_concurrency")]


def cap_classes(cols: Columns) -> np.ndarray:
    """A class id per row: rows of one class keep the same columns in :func:`with_concurrency`, bit for bit, but
    for the batch cap ``wl_max_batch`` (and the concurrency it replaces). At one concurrency no larger than the
    caps of both, two such rows get the same columns but ``wl_max_batch`` (the effective batch, min(concurrency,
    cap, fit), does not read the cap then), so models that do not read ``wl_max_batch`` give them the same outputs."""
    kept = np.stack([np.asarray(cols[k], dtype=np.float64) for k in _CAP_FREE], axis=1)
    return ops.distinct_rows(kept.view(np.int64))[1]  # by bits


def row_with_concurrency(c: dict[str, float], concurrency: float, closed_loop: bool) -> dict[str, float]:
    """:func:`with_concurrency` of one row of floats."""
    return at_load(load_free(c, closed_loop), concurrency)


def load_free(c: dict[str, float], closed_loop: bool) -> dict[str, float]:
    """The columns of one row of floats that stay fixed while only its concurrency moves (raw and
    :data:`SETUP_COLUMNS`, with ``closed_loop`` its kind codes as :func:`with_concurrency` sets them):
    every column but ``wl_concurrency`` and the load columns :func:`derived.derive_load` writes."""
    raw = {k: c[k] for k in _KEPT if k != "wl_concurrency"}
    if closed_loop:
        raw.update(_CLOSED_LOOP_CODES)
        raw["wl_qps"] = math.nan
    return raw


def at_load(base: dict[str, float], concurrency: float) -> dict[str, float]:
    """A new row of floats: ``base`` (:func:`load_free`) at ``concurrency``, load columns derived."""
    raw = dict(base)
    raw["wl_concurrency"] = concurrency
    return derive_load(raw)  # type: ignore[arg-type,return-value]

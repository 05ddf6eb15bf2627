"""Model recipes: which features, which target transform and which XGBoost settings per target.

``default`` is what we ship; ``paper`` is the WattGPU paper's recipe (features, targets and
hyperparameters of its notebook), kept for comparison and for reproducing the paper on Watt Counts.
The default carries a small grid of candidates per target; evaluation chooses among them inside each
outer training fold (nested selection), and ``fit`` chooses on all training rows the same way.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from wattgpu.targets import ITL, POWER


@dataclass(frozen=True)
class ModelRecipe:
    target: str  # wattgpu.targets.POWER or ITL
    features: tuple[str, ...]
    transform: str
    params: dict[str, Any] = field(default_factory=dict)
    monotone: dict[str, int] = field(default_factory=dict)  # feature -> +1 / -1
    tp_row_weight: float = 1.0  # XGBoost sample weight of tensor-parallel rows (single-GPU rows weigh 1)


@dataclass(frozen=True)
class Recipe:
    name: str
    power: ModelRecipe
    itl: ModelRecipe
    # Per target, candidate models chosen among by inner cross-validation on the training rows only
    # (``selection.select``); empty = the fixed ``power`` / ``itl`` models.
    grid: dict[str, tuple[ModelRecipe, ...]] = field(default_factory=dict)

    def candidates(self, target: str) -> tuple[ModelRecipe, ...]:
        return self.grid.get(target) or (self.model(target),)

    def model(self, target: str) -> ModelRecipe:
        return {POWER: self.power, ITL: self.itl}[target]


BASE_PARAMS: dict[str, Any] = {
    "objective": "reg:squarederror",
    "tree_method": "hist",
    "random_state": 0,
    "base_score": 0.0,  # the intercept lives in the trees, so ONNX reproduces XGBoost bit for bit
    "n_jobs": 1,
}

_GPU = ("gpu_tdp_w", "gpu_mem_bw_gb_s", "gpu_fp16_tflops", "gpu_mem_gb", "gpu_release_year",
        "gpu_ridge_flop_per_byte", "gpu_bw_per_tdp", "gpu_tflops_per_tdp")
_LLM = ("llm_log_params_b", "llm_active_params_b", "llm_layers", "llm_hidden", "llm_kv_heads",
        "llm_kv_kb_per_token", "llm_is_moe")
_WL = ("wl_kind_code", "wl_engine_code", "wl_log_eff_batch", "wl_input_tokens", "wl_output_tokens",
       "wl_kv_cache_gb", "wl_mem_headroom")
_PHYS = ("bw_latency_s", "compute_latency_s", "log_roofline_itl", "roofline_compute_share",
         "log_roofline_tok_s_per_w")

# Physical direction of each input the default recipes use (+1: the learned factor may only rise with
# the input, -1: only fall). Every input that changes with the batch rises with it (effective batch,
# roofline time, compute shares, duty, tokens/s per W), so a +1 on each, times a physical base that
# itself rises with the batch (duty power; roofline + per-layer overhead), makes predicted power and
# ITL non-decreasing in the batch. ``log_weight_read_s`` (weights / bandwidth) rises as bandwidth
# falls: +1 keeps ITL non-increasing in bandwidth. The arrival rate (server rows) may only raise power.
# Stack descriptors (kind, engine, era, ITL statistic) have no physical direction; the LLM's size has one for ITL
# (``_physics_itl`` below: bytes per GPU and layers +1), none in power (where the default reads log(parameters)).
MONOTONE: dict[str, int] = {
    "wl_log_eff_batch": +1, "roofline_duty": +1, "log_roofline_itl": +1, "roofline_compute_share": +1,
    "weights_compute_share": +1, "log_roofline_tok_s_per_w": +1, "wl_log_arrival_rate": +1,
    "log_weight_read_s": +1,
}


def _monotone(features: tuple[str, ...]) -> dict[str, int]:
    return {f: MONOTONE[f] for f in features if f in MONOTONE}


def _model(target: str, features: tuple[str, ...], transform: str, **params: Any) -> ModelRecipe:
    p = {**BASE_PARAMS, "n_estimators": 300, "max_depth": 3, "learning_rate": 0.05, "min_child_weight": 2.0,
         "reg_lambda": 5.0, "subsample": 1.0, **params}
    return ModelRecipe(target=target, features=features, transform=transform, params=p,
                       monotone=_monotone(features))


# Tensor-parallel inputs (1 / 0 / NaN on single-GPU rows), all independent of the batch so the monotone
# contract above holds for TP groups too: the group size, the link bandwidth and how latency-bound the
# group's all-reduces make a step (their batch-dependent time is in the physical base: the roofline step
# includes it).
_TP = ("wl_tp", "tp_log_link_gb_s", "tp_comm_latency_share")


# Power: the tree learns log(measured / P_duty), P_duty = TDP·(0.3 + 0.7·duty), duty = roofline step time /
# (roofline + per-layer engine overhead) (physics.duty_power_w). No raw spec-sheet columns (with 4 power
# GPUs they act as GPU identities); the GPU enters through roofline time, duty, compute share and
# tokens/s per W. The serving-stack era and the arrival rate (server rows, Watt Counts) are inputs.
# No workload kind either (since issue 32): at the same running batch an offline queue and a closed loop of
# clients keep the GPU equally busy, so the same load must draw the same power. With the kind as an input the
# trees learned which sources ran closed loops; without it single-GPU power LOGO (depth-3 candidate, not
# nested) is 15.6 % against 15.9 % with it, and 19.5 % with it when offline rows are predicted as the
# closed loop of their running batch (what equal power for equal load required of a model that reads it).
_POWER_FEATURES = ("wl_engine_code", "wl_engine_era_code", "wl_log_eff_batch", "wl_log_arrival_rate", "llm_log_params_b", "roofline_duty",
                   "roofline_compute_share", "log_roofline_itl", "log_roofline_tok_s_per_w", *_TP)
# ITL: the tree learns log(measured / (roofline + layers × engine overhead)). Batch enters only through
# inputs constrained to rise with it; the GPU through the weight-read time (monotone in bandwidth).
# No workload kind: at the same batch a decode step takes the same time whether the batch came from a
# queue or from clients (the kind mostly told sources apart), and capacity (closed loop) must not beat
# the offline throughput of the same batch.
_ITL_FEATURES = ("wl_engine_code", "wl_engine_era_code", "wl_itl_stat_code", "wl_log_eff_batch", "llm_log_params_b",
                 "llm_layers", "log_weight_read_s", "weights_compute_share", *_TP)

# Candidates chosen among INSIDE each training fold (evaluate.py, nested): the figure reported for a
# split never comes from a choice that saw its test rows. The first candidate is the fallback.
# With the tensor-parallel rows in training: 600 trees, and TP rows weighted down (power 0.1, ITL 0.3) so
# they refine the TP regime without pulling the single-GPU fit (the two ML.ENERGY stacks' TP power differs
# ~2x). Chosen on non-nested CV/LOGO/LOLO of the depth-3 candidate (model selection on the evaluation data).
_TP_FIT = {POWER: {"n_estimators": 600}, ITL: {"n_estimators": 600}}
_TP_WEIGHT = {POWER: 0.1, ITL: 0.3}
def _grid(target: str, transform: str, depths: tuple[int, ...]) -> tuple[ModelRecipe, ...]:
    feats = _POWER_FEATURES if target == POWER else _ITL_FEATURES
    return tuple(replace(_model(target, feats, transform, max_depth=d, **_TP_FIT[target]), tp_row_weight=_TP_WEIGHT[target])
                 for d in depths)


# Issue 21: every default candidate maps the trees' output INTO the physical range (wattgpu.targets.BOUNDED):
# power between the GPU's idle power and its TDP around the duty-power prior (a physics-structured model:
# idle + (TDP − idle) × activity, activity = σ(prior + trees), the trees on the residual with inputs
# shared by all GPUs), ITL above the roofline floor (excess over it scaled by the engine's per-layer
# overhead, or by the roofline itself). The 0.2 models (unbounded ratio targets, clipped afterwards) are
# kept as the ``v0_2`` recipe so evaluate scores both on the same splits.
POWER_GRID: tuple[ModelRecipe, ...] = _grid(POWER, "logit_activity_over_duty", (3, 2, 4))
# The ITL grid shipped until issue 38 round 4: log(parameters) and the layer count unconstrained, so a bigger model
# could be predicted faster (35 of 133,792 strict-dominance comparisons on the catalog). Kept for the design scripts
# (tools/issue38/logo.py builds its designs on it).
LLM_SIZE_FREE_ITL_GRID: tuple[ModelRecipe, ...] = (*_grid(ITL, "log_excess_over_step", (3, 2)),
                                                    *_grid(ITL, "log_excess_over_roofline", (3,)))


# Issue 38, physics by construction for ITL: a model that reads more is never predicted faster. Every input that
# depends on the LLM carries a +1 direction: the weight bytes each GPU holds (``llm_weights_gb``, the TP shard;
# quantised weights count their real bytes) in place of the unconstrained log(parameters), the layer count, and
# the weight-read time; with a physical base that itself rises with bytes, FLOPs and layers (roofline +
# overhead), a model with at least the bytes, FLOPs, KV and layers of another, on the same GPU, batch and engine,
# is never predicted faster. The step candidates learn the excess in units of ONE layer's engine overhead
# (``log_excess_over_layer_overhead``), not of layers x overhead: in those units the measured excess grows with the
# layer count, so the +1 costs nothing, while in units of layers x overhead it must fall with depth (a +1 on
# layers there cost 1.5 points of ITL LOGO and 10 of TP ITL LOGO). Nested LOGO on the corrected catalog: 17.8 %
# (was 18.4 %), TP 22.9 % (was 24.9 %), 0 catalog inversions (reports/issue38_experiments.md, round 4).
ITL_LLM_MONOTONE: dict[str, int] = {"llm_weights_gb": +1, "llm_layers": +1}


def _physics_itl(m: ModelRecipe) -> ModelRecipe:
    feats = tuple("llm_weights_gb" if f == "llm_log_params_b" else f for f in m.features)
    transform = "log_excess_over_layer_overhead" if m.transform == "log_excess_over_step" else m.transform
    return replace(m, features=feats, transform=transform, monotone={**m.monotone, **ITL_LLM_MONOTONE})


ITL_GRID: tuple[ModelRecipe, ...] = tuple(_physics_itl(m) for m in LLM_SIZE_FREE_ITL_GRID)

DEFAULT = Recipe(name="default", power=POWER_GRID[0], itl=ITL_GRID[0],
                 grid={POWER: POWER_GRID, ITL: ITL_GRID})


# Power, same issue: the LLM enters only through the physics (roofline time, duty, compute share, tokens/s per W,
# all computed from its bytes and FLOPs), not as a raw log(parameters) the trees may split on. On the corrected
# catalog (counts from the architecture) single-GPU power LOGO 16.9 % vs 16.8 % with log(parameters), GPU tau
# 0.33 vs 0.26, TP power 18.7 vs 23.5 % (tools/issue38/logo.py; reports/issue38_experiments.md).
def _physics_power(m: ModelRecipe) -> ModelRecipe:
    return replace(m, features=tuple(f for f in m.features if f != "llm_log_params_b"))


# The physics recipe differs from the default in power only (its ITL grid is the default's, so evaluate reuses
# those predictions).
PHYSICS_POWER_GRID: tuple[ModelRecipe, ...] = tuple(_physics_power(m) for m in POWER_GRID)
PHYSICS = Recipe(name="physics", power=PHYSICS_POWER_GRID[0], itl=ITL_GRID[0],
                 grid={POWER: PHYSICS_POWER_GRID, ITL: ITL_GRID})

V0_2_POWER_GRID = _grid(POWER, "log_ratio_to_duty_power", (3, 2, 4))
V0_2_ITL_GRID = _grid(ITL, "log_ratio_to_step_time", (3, 2, 4))
V0_2 = Recipe(name="v0_2", power=V0_2_POWER_GRID[0], itl=V0_2_ITL_GRID[0],
              grid={POWER: V0_2_POWER_GRID, ITL: V0_2_ITL_GRID})


PAPER = Recipe(
    name="paper",
    power=ModelRecipe(
        target=POWER,
        features=("wl_scenario_code", "llm_log_params_b", "llm_model_type_code", "llm_kv_heads", "llm_layers",
                  "gpu_mem_bw_gb_s", "gpu_boost_base_ratio", "gpu_transistors_million", "gpu_base_clock_mhz",
                  "gpu_release_year", "bw_latency_s"),
        transform="ratio_to_tdp",
        params={**BASE_PARAMS, "n_estimators": 200, "max_depth": 6, "reg_lambda": 150.0},
    ),
    itl=ModelRecipe(
        target=ITL,
        features=("wl_scenario_code", "llm_model_type_code", "llm_params_b", "llm_hidden", "llm_heads",
                  "llm_kv_heads", "llm_layers", "gpu_mem_bw_gb_s", "gpu_mem_gb", "gpu_mem_type_code",
                  "gpu_fp16_tflops", "gpu_release_year", "bw_latency_s", "compute_latency_s"),
        transform="log",
        params={**BASE_PARAMS, "n_estimators": 100, "max_depth": 5, "reg_lambda": 100.0},
    ),
)

RECIPES = {r.name: r for r in (DEFAULT, PAPER, V0_2, PHYSICS)}

"""Issue 38: held-out scores of one target's candidate grid (nested selection, as `wattgpu-train evaluate`
does it) on chosen splits, for designs tried before they are wired into the recipe. Run from the repository root:

    python tools/issue38/logo.py itl DESIGN [logo lolo]

For ITL every design starts from ``recipes.LLM_SIZE_FREE_ITL_GRID`` (the grid shipped until round 3, design
``shipped``); ``default`` is today's ``recipes.DEFAULT`` grid (round 4: ``layer_units``).
"""
import sys
import time
from dataclasses import replace

sys.path.insert(0, "train")
import numpy as np

from wattgpu.specs import default_catalog
from wattgpu_train import recipes as R
from wattgpu_train.dataset import build_dataset
from wattgpu_train.evaluate import make_folds, nested_oof, score
from wattgpu_train.measurements import load_measurements


def design(target: str, name: str) -> R.Recipe:
    grid = R.LLM_SIZE_FREE_ITL_GRID if target == "itl" else R.DEFAULT.candidates(target)
    if name == "monotone_llm":  # LLM size may only raise the learned excess (ITL) / activity (power)
        grid = tuple(replace(m, monotone={**m.monotone, **{f: +1 for f in ("llm_log_params_b", "llm_layers")
                                                           if f in m.features}}) for m in grid)
    elif name == "mono_params":  # only the parameter count constrained (+1); layers free
        grid = tuple(replace(m, monotone={**m.monotone, "llm_log_params_b": +1}) for m in grid)
    elif name == "mono_shard":  # the LLM's size as the weight bytes each GPU holds (+1) instead of log(params)
        grid = tuple(replace(m, features=tuple("llm_weights_gb" if f == "llm_log_params_b" else f for f in m.features),
                             monotone={**m.monotone, "llm_weights_gb": +1}) for m in grid)
    elif name in ("shard_layers", "shard_no_layers"):  # round 4: shard +1 and layers +1 / layers dropped
        grid = design(target, "mono_shard").grid[target]
        if name == "shard_layers":
            grid = tuple(replace(m, monotone={**m.monotone, "llm_layers": +1}) for m in grid)
        else:
            grid = tuple(replace(m, features=tuple(f for f in m.features if f != "llm_layers")) for m in grid)
    elif name == "layer_units":  # round 4: excess in units of one layer's overhead; shard +1, layers +1
        grid = tuple(replace(m, transform="log_excess_over_layer_overhead" if m.transform == "log_excess_over_step"
                             else m.transform, monotone={**m.monotone, "llm_layers": +1})
                     for m in design(target, "mono_shard").grid[target])
    elif name == "layer_units_params":  # as layer_units, with log(parameters) +1 in place of bytes per GPU
        grid = tuple(replace(m, features=tuple("llm_log_params_b" if f == "llm_weights_gb" else f for f in m.features),
                             monotone={**{k: v for k, v in m.monotone.items() if k != "llm_weights_gb"},
                                       "llm_log_params_b": +1})
                     for m in design(target, "layer_units").grid[target])
    elif name == "layer_units_steps":  # as layer_units, the two step candidates only (no roofline-units candidate)
        grid = design(target, "layer_units").grid[target][:2]
    elif name == "no_llm_size":  # the learned excess a function of GPU, engine, batch (and weight-read time, +1)
        grid = tuple(replace(m, features=tuple(f for f in m.features if f not in ("llm_log_params_b", "llm_layers")))
                     for m in grid)
    elif name in ("step_time_no_llm", "step_time_mono"):  # excess in units of the whole physical step
        grid = tuple(replace(m, transform="log_excess_over_step_time") for m in grid[:2])
        if name == "step_time_no_llm":
            grid = tuple(replace(m, features=tuple(f for f in m.features if f not in ("llm_log_params_b", "llm_layers")))
                         for m in grid)
        else:
            grid = tuple(replace(m, monotone={**m.monotone, "llm_log_params_b": +1, "llm_layers": +1}) for m in grid)
    elif name == "power_shard":  # power: the LLM's size as the weight bytes each GPU holds, not log(params)
        grid = tuple(replace(m, features=tuple("llm_weights_gb" if f == "llm_log_params_b" else f for f in m.features))
                     for m in grid)
    elif name == "power_no_size":  # power: the LLM enters only through the physics (roofline time, duty, shares)
        grid = tuple(replace(m, features=tuple(f for f in m.features if f != "llm_log_params_b")) for m in grid)
    elif name == "power_nested_size":  # both forms as candidates: the training folds choose
        grid = (*grid, *(replace(m, features=tuple(f for f in m.features if f != "llm_log_params_b")) for m in grid))
    elif name == "default":
        grid = R.DEFAULT.candidates(target)
    elif name != "shipped":
        raise SystemExit(f"unknown design {name}")
    return replace(R.DEFAULT, grid={**R.DEFAULT.grid, target: grid})


def main() -> None:
    target, name, *splits = sys.argv[1:]
    rec = design(target, name)
    full = build_dataset(load_measurements("data", single_gpu_only=False), default_catalog(), target)
    one = np.asarray(full.cols["wl_tp"]) == 1
    y = full.y_physical(target)
    for split in splits or ["logo"]:
        t0 = time.time()
        p, chosen = nested_oof(rec, target, full, make_folds(full.records, split), split, n_jobs=2)
        s1 = score(y[one], p[one], full.records[one].reset_index(drop=True))
        tp = ~one & np.isfinite(p)
        mdape_tp = float(np.median(np.abs(p[tp] / y[tp] - 1)) * 100) if tp.any() else float("nan")
        print(f"{target} {name} {split}: single-GPU MdAPE {s1['mdape']:.1f} % tau_gpu {s1.get('kendall_tau_gpu')} "
              f"| TP MdAPE {mdape_tp:.1f} % (n={int(tp.sum())}) | {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()

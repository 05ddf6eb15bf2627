"""Issue 38 / round 5: can the tensor-parallel rows' weight in the power fit be chosen inside the training folds?
Run from the repository root: ``python tools/issue38/power_tp_weight.py [WEIGHTS ...]`` (default 0.1 0.0).

The shipped power grid weights TP rows 0.1 (chosen on the evaluation data). This design offers each depth
candidate at every listed weight and lets the nested selection (inner leave-one-GPU-out on the training fold)
choose; it prints single-GPU power LOGO, GPU tau and TP power LOGO as ``logo.py`` does."""
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


def main() -> None:
    weights = [float(w) for w in sys.argv[1:]] or [0.1, 0.0]
    grid = tuple(replace(m, tp_row_weight=w) for w in weights for m in R.POWER_GRID)
    rec = replace(R.DEFAULT, grid={**R.DEFAULT.grid, "power": grid})
    full = build_dataset(load_measurements("data", single_gpu_only=False), default_catalog(), "power")
    one = np.asarray(full.cols["wl_tp"]) == 1
    y = full.y_physical("power")
    t0 = time.time()
    p, chosen = nested_oof(rec, "power", full, make_folds(full.records, "logo"), "logo", n_jobs=1)
    s1 = score(y[one], p[one], full.records[one].reset_index(drop=True))
    tp = ~one & np.isfinite(p)
    print(f"power TP weights {weights} LOGO: single-GPU MdAPE {s1['mdape']:.1f} % tau_gpu {s1['kendall_tau_gpu']:.2f} "
          f"| TP MdAPE {float(np.median(np.abs(p[tp] / y[tp] - 1)) * 100):.1f} % | chosen {chosen} | {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()

"""Experiment (issue 30 item 2): ITL LOGO/LOLO, single-GPU rows, nested selection, for the default grid
and the default grid plus the step-time-scaled excess candidate."""
import sys, time
from _setup import dataset
from wattgpu.targets import ITL
from wattgpu_train import recipes as R
from wattgpu_train.evaluate import make_folds, nested_oof
from wattgpu_train.metrics import mdape
split = sys.argv[1]
full, one, y = dataset(ITL)
folds = make_folds(full.records, split, 5)
new_grid = (*R.ITL_GRID, *R._grid(ITL, "log_excess_over_step_time", (3,)))
designs = {"B_step_time_only": R.Recipe(name="b", power=R.POWER_GRID[0], itl=new_grid[-1], grid={ITL: (new_grid[-1],)}),
           "C_grid_plus_step_time": R.Recipe(name="c", power=R.POWER_GRID[0], itl=R.ITL_GRID[0], grid={ITL: new_grid})}
out = {}
for name, rec in designs.items():
    t = time.time()
    if len(rec.candidates(ITL)) > 1:
        p, ch = nested_oof(rec, ITL, full, folds, split, n_jobs=2)
    else:
        from wattgpu_train.evaluate import oof_predictions
        p = oof_predictions(rec.itl, full, folds, n_jobs=2); ch = None
    m = mdape(y[one], p[one]); mt = mdape(y[~one], p[~one])
    gpus = full.records["gpu"].to_numpy()
    per = {g: round(mdape(y[one & (gpus == g)], p[one & (gpus == g)]), 1) for g in sorted(set(gpus[one]))}
    out[name] = {"single_mdape": round(m, 2), "tp_mdape": round(mt, 2), "per_gpu": per, "chosen": ch, "s": round(time.time() - t)}
    print(split, name, out[name], flush=True)

"""What the issue-30 experiments share: the measured rows (every source, TP groups included) as the dataset of
one target, and for power the training inputs of candidate 0 of the default grid. Run the experiments from the
repository root."""
import sys
sys.path.insert(0, 'train')
import numpy as np
from wattgpu.specs import default_catalog
from wattgpu.targets import POWER, forward
from wattgpu_train import recipes as R
from wattgpu_train.dataset import build_dataset
from wattgpu_train.measurements import load_measurements


def dataset(target):
    """(dataset, mask of single-GPU rows, measured target in physical units)."""
    ds = build_dataset(load_measurements('data', single_gpu_only=False), default_catalog(), target)
    return ds, np.asarray(ds.cols["wl_tp"]) == 1, ds.y_physical(target)


def power_candidate0():
    """(recipe, dataset, single-GPU mask, power W, transformed target, features, row weights, XGBoost params)."""
    rec = R.POWER_GRID[0]
    ds, one, y = dataset(POWER)
    z = forward(rec.transform, y, ds.cols)
    X = ds.X(rec.features)
    weights = np.where(np.asarray(ds.cols["wl_tp"]) > 1, rec.tp_row_weight, 1.0)
    params = dict(rec.params)
    params["n_jobs"] = 1
    params["monotone_constraints"] = tuple(rec.monotone.get(f, 0) for f in rec.features)
    return rec, ds, one, y, z, X, weights, params

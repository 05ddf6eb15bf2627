"""Experiment (issue 30 item 4): power with a per-source offset in the logit space of the bounded power model,
fitted in training (alternating with the trees, 3 rounds) and, at prediction, taken from the row's own source
when that source was in training, else from the training sources with the same measurement protocol
(power window, engine era), else 0 (the duty prior's level). Candidate 0 of the default power grid, no nested
selection, for both designs (A' = no offsets), so the comparison is like for like."""
import sys
import numpy as np, xgboost as xgb
from concurrent.futures import ThreadPoolExecutor
from _setup import power_candidate0
from wattgpu.targets import inverse
from wattgpu_train.evaluate import make_folds
from wattgpu_train.metrics import mdape
rec, ds, one, y, z, X, w, params = power_candidate0()
src = ds.records["source"].to_numpy()
proto = (ds.records["x_power_window"].astype(str) + "|" + ds.records["engine_era"].astype(str)).to_numpy()

def fit(idx, target):
    m = xgb.XGBRegressor(**params); m.fit(X[idx], target[idx].astype(np.float32), sample_weight=w[idx]); return m

def run(test, offsets):
    tr = ~test
    b = np.zeros(len(z))
    if offsets:
        for _ in range(3):
            m = fit(tr, z - b)
            r = z - m.predict(X)
            for s in set(src[tr]):
                b[src == s] = np.median(r[tr & (src == s)])
        m = fit(tr, z - b)
    else:
        m = fit(tr, z)
    off = np.zeros(test.sum())
    if offsets:
        seen = {s: b[tr & (src == s)][0] for s in set(src[tr])}
        for k, i in enumerate(np.flatnonzero(test)):
            if src[i] in seen:
                off[k] = seen[src[i]]
            else:
                same = [seen[s] for s in seen if (proto[tr & (src == s)] == proto[i]).any()]
                off[k] = float(np.median(same)) if same else 0.0
    sub = {k: v[test] for k, v in ds.cols.items()}
    return inverse(rec.transform, m.predict(X[test]) + off, sub)

out = {}
for split in sys.argv[1:]:
    folds = make_folds(ds.records, split, 5)
    for name, offsets in (("A_candidate0", False), ("D_source_offset", True)):
        p = np.full(len(z), np.nan)
        jobs = [t for _, t in folds if t.any() and not t.all()]
        with ThreadPoolExecutor(2) as ex:
            for t, pt in zip(jobs, ex.map(lambda t: run(t, offsets), jobs)):
                p[t] = pt
        per_src = {s: round(mdape(y[one & (src == s)], p[one & (src == s)]), 1) for s in sorted(set(src[one]))}
        gpus = ds.records["gpu"].to_numpy()
        per_gpu = {g: round(mdape(y[one & (gpus == g)], p[one & (gpus == g)]), 1) for g in sorted(set(gpus[one]))}
        res = {"single": round(mdape(y[one], p[one]), 2), "tp": round(mdape(y[~one], p[~one]), 2), "per_source": per_src, "per_gpu": per_gpu}
        out[f"{split}:{name}"] = res
        print(split, name, res, flush=True)

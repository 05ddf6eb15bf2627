"""Experiment (issue 30 item 4, design E): the duty prior as the base with the learned correction shrunk by a
global factor w (power = idle + (TDP − idle)·σ(prior + w·z)); w chosen INSIDE each outer training fold by an
inner leave-one-source-out on the training rows (the grouping that source robustness needs), among
{0, 0.25, 0.5, 0.75, 1}. Candidate 0 of the default power grid."""
import sys
import numpy as np, xgboost as xgb
from concurrent.futures import ThreadPoolExecutor
from _setup import power_candidate0
from wattgpu.targets import inverse
from wattgpu_train.evaluate import make_folds
from wattgpu_train.metrics import mdape
rec, ds, one, y, z, X, wt, params = power_candidate0()
src = ds.records["source"].to_numpy()
W = (0.0, 0.25, 0.5, 0.75, 1.0)
def fitpred(tr, te):
    m = xgb.XGBRegressor(**params); m.fit(X[tr], z[tr].astype(np.float32), sample_weight=wt[tr]); return m.predict(X[te])
def phys(zz, mask):
    return inverse(rec.transform, zz, {k: v[mask] for k, v in ds.cols.items()})
def run(test):
    tr = ~test
    # inner leave-one-source-out on the training rows: learned z for each inner held-out source
    zin = np.full(len(z), np.nan)
    for s in sorted(set(src[tr])):
        te = tr & (src == s)
        if te.all() or not (tr & ~te).any():
            continue
        zin[te] = fitpred(tr & ~te, te)
    ok = tr & np.isfinite(zin) & one
    errs = [mdape(y[ok], phys(w * zin[ok], ok)) for w in W]
    w = W[int(np.argmin(errs))]
    zt = fitpred(tr, test)
    return w, {ww: phys(ww * zt, test) for ww in (*W,)}
out = {}
for split in sys.argv[1:]:
    folds = [t for _, t in make_folds(ds.records, split, 5) if t.any() and not t.all()]
    pn = np.full(len(z), np.nan); pw = {w: np.full(len(z), np.nan) for w in W}; chosen = []
    with ThreadPoolExecutor(2) as ex:
        for t, (w, d) in zip(folds, ex.map(run, folds)):
            chosen.append(w); pn[t] = d[w]
            for ww in W: pw[ww][t] = d[ww]
    res = {"nested_w": round(mdape(y[one], pn[one]), 2), "chosen_w": chosen,
           **{f"w={ww}": round(mdape(y[one], pw[ww][one]), 2) for ww in W},
           "per_source_nested": {s: round(mdape(y[one & (src == s)], pn[one & (src == s)]), 1) for s in sorted(set(src[one]))}}
    out[split] = res; print(split, res, flush=True)

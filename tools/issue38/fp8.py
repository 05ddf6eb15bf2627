"""Issue 38 item 3: where the FP8 rows (x_dtype fp8, rule ``fp8_scored_apart``) belong. Run from the repository root:

    python tools/issue38/fp8.py DESIGN

Designs (ITL, nested LOGO as ``wattgpu-train evaluate`` does it):
- ``apart``: what ships: the FP8 rows never train; each held-out GPU's FP8 rows are predicted by the recipe chosen
  and fitted on every other GPU's training rows (``evaluate.scored_apart``);
- ``trained``: the FP8 rows in training at 1 byte per weight (``quant.with_dtype``), scored out of fold;
- ``weight_only``: as ``trained``, plus a trial input ``quant_weight_only`` (+1): weights below 16 bits multiplied
  at the 16-bit rate, i.e. FP8 on a GPU whose spec sheet lists no FP8 tensor cores (defined here, not shipped).

Prints single-GPU, TP, FP8 and 16-bit LOGO MdAPE, and each GPU's FP8 MdAPE and bias.
"""
import sys
import time
from dataclasses import replace

sys.path.insert(0, "train")
import numpy as np
import pandas as pd

from wattgpu import ops
from wattgpu.feature_registry import REGISTRY, feature
from wattgpu.specs import default_catalog
from wattgpu_train import metrics
from wattgpu_train import recipes as R
from wattgpu_train.dataset import build_dataset
from wattgpu_train.evaluate import make_folds, nested_oof, scored_apart, weight_format
from wattgpu_train.measurements import load_measurements, load_scored_apart

if "quant_weight_only" not in REGISTRY:
    @feature("quant_weight_only", "bool", "trial: weights below 16 bits multiplied at the 16-bit rate")
    def _weight_only(c):
        return ops.as_float((c["llm_weight_bytes_per_param"] < 2.0) & (c["compute_tflops"] <= c["gpu_fp16_tflops"]))


def main() -> None:
    name = sys.argv[1]
    cat = default_catalog()
    train, apart = load_measurements("data", single_gpu_only=False), load_scored_apart("data", single_gpu_only=False)
    rec = R.DEFAULT
    if name == "weight_only":
        grid = tuple(replace(m, features=(*m.features, "quant_weight_only"),
                             monotone={**m.monotone, "quant_weight_only": +1}) for m in R.DEFAULT.candidates("itl"))
        rec = replace(R.DEFAULT, grid={**R.DEFAULT.grid, "itl": grid})
    t0 = time.time()
    if name == "apart":
        full = build_dataset(train, cat, "itl")
        p = nested_oof(rec, "itl", full, make_folds(full.records, "logo"), "logo", n_jobs=1)[0]
        sa = scored_apart(rec, "itl", full, apart, cat, n_jobs=1)
        f8 = sa["per_format"]["fp8"]["logo"]["all"]["default"]["mdape"]
        per_gpu = {g: (v["default"]["mdape"], v["default"]["bias_pct"], v["n"]) for g, v in sa["per_gpu_logo"].items()}
    elif name in ("trained", "weight_only"):
        full = build_dataset(pd.concat([train, apart], ignore_index=True), cat, "itl")
        p = nested_oof(rec, "itl", full, make_folds(full.records, "logo"), "logo", n_jobs=1)[0]
        y = full.y_physical("itl")
        m8 = (full.records["x_dtype"] == "fp8").to_numpy()
        f8 = metrics.mdape(y[m8], p[m8])
        gpu = full.records["gpu"].to_numpy()
        per_gpu = {g: (metrics.mdape(y[m8 & (gpu == g)], p[m8 & (gpu == g)]),
                       metrics.median_signed_error_pct(y[m8 & (gpu == g)], p[m8 & (gpu == g)]), int((m8 & (gpu == g)).sum()))
                   for g in sorted(set(gpu[m8]))}
    else:
        raise SystemExit(f"unknown design {name}; choose apart, trained or weight_only")
    y = full.y_physical("itl")
    one = np.asarray(full.cols["wl_tp"]) == 1
    fmt = weight_format(full.records)
    m16 = one & (fmt == "16-bit")
    single = one & (full.records["x_dtype"] != "fp8").to_numpy()
    print(f"itl {name} LOGO: single-GPU rows scored in evaluate's table {metrics.mdape(y[one], p[one]):.1f} % "
          f"(n={int(one.sum())}) | of them not FP8 {metrics.mdape(y[single], p[single]):.1f} % | TP "
          f"{metrics.mdape(y[~one], p[~one]):.1f} % | 16-bit {metrics.mdape(y[m16], p[m16]):.1f} % | FP8 {f8:.1f} % "
          f"| {time.time() - t0:.0f} s")
    for g, (md, bias, n) in per_gpu.items():
        print(f"  FP8 on {g}: {md:.1f} % (n={n}) bias {bias:+.1f} %")


if __name__ == "__main__":
    main()

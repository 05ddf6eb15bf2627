"""Issue 30: the shipped models (trained before the B200 and brunetta rows existed) scored on those rows.

Run from the repository root: python tools/issue30/shipped_on_new_rows.py"""
import sys; sys.path.insert(0,'train')
import numpy as np
from wattgpu.predictor import Predictor
from wattgpu.errors import WattGPUError
from wattgpu_train.measurements import load_measurements
from wattgpu_train.dataset import build_dataset
from wattgpu_train.metrics import mdape, median_signed_error_pct
recs = load_measurements('data', single_gpu_only=True)
pred = Predictor()  # main's shipped models (branch bundle = main's ONNX)
from wattgpu.specs import default_catalog
CAT = default_catalog()
for name, sub in [("B200 (mlenergy_v3)", recs[recs.gpu.str.contains("B200")]),
                  ("brunetta H100", recs[(recs.source=="brunetta_llm_inference_power") & recs.gpu.str.contains("H100")]),
                  ("brunetta A100 80GB", recs[(recs.source=="brunetta_llm_inference_power") & recs.gpu.str.contains("80GB") & recs.gpu.str.contains("A100")])]:
    ds = build_dataset(sub, CAT)
    res = pred.predict_specs_safe(ds.triples)
    p = np.array([np.nan if isinstance(r, WattGPUError) else r.power_w for r in res])
    i = np.array([np.nan if isinstance(r, WattGPUError) else r.itl_s for r in res])
    y1 = ds.records.power_w.to_numpy(float); y2 = ds.records.itl_s.to_numpy(float)
    m1 = np.isfinite(y1)&np.isfinite(p); m2 = np.isfinite(y2)&np.isfinite(i)
    out = [name, len(sub)]
    if m1.any(): out += [f"power {mdape(y1[m1],p[m1]):.1f}% (bias {median_signed_error_pct(y1[m1],p[m1]):+.0f}) n={m1.sum()}"]
    if m2.any(): out += [f"itl {mdape(y2[m2],i[m2]):.1f}% (bias {median_signed_error_pct(y2[m2],i[m2]):+.0f}) n={m2.sum()}"]
    print(*out)

"""TTFT accuracy on the measured rows that record it: the runtime's physics TTFT against the plain
compute-roofline prefill (``evaluate`` key ``ttft``; ``evaluate --ttft-only``).

Rows: every record with a measured mean TTFT (``x_ttft_mean_s``: llmperf_techgrandpa and
holtmann_consumer_gpu). Both methods take the row's (GPU, LLM, workload) as the runtime does
(:meth:`wattgpu.Predictor.predict_specs_safe` and :func:`wattgpu.capacity.prefill_s`). No parameter of the
TTFT model is fitted on TTFT (its constants are a-priori: :mod:`wattgpu.latency`), so every row is
out-of-sample for the TTFT model itself; the ITL it reads (the step time) comes from the given bundle,
which was trained on these rows' ITL.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from wattgpu.capacity import prefill_s
from wattgpu.errors import WattGPUError
from wattgpu.specs import Catalog
from wattgpu.targets import ITL

from .metrics import mdape, median_signed_error_pct

TTFT_COLUMN = "x_ttft_mean_s"
TARGET_MDAPE = 25.0  # issue 24: TTFT MdAPE <= 25 % and >= 2x better than the prefill roofline
TARGET_RATIO = 2.0


def _score(y: np.ndarray, p: np.ndarray) -> dict[str, Any]:
    return {"mdape": round(mdape(y, p), 2), "bias_pct": round(median_signed_error_pct(y, p), 2), "rows": int(y.size)}


def ttft_scores(records: pd.DataFrame, catalog: Catalog, predictor: Any = None) -> dict[str, Any]:
    """MdAPE and median signed error (bias) of the physics TTFT and the prefill roofline, pooled, per GPU
    and per source, on the rows with a measured TTFT; rows the runtime cannot predict are counted."""
    from wattgpu.predictor import Predictor

    from .dataset import build_dataset

    ttft = pd.to_numeric(records.get(TTFT_COLUMN, pd.Series(np.nan, index=records.index)), errors="coerce")
    sub = records[(ttft > 0).to_numpy()]
    if sub.empty:
        return {"rows": 0}
    ds = build_dataset(sub, catalog, ITL)
    pred = predictor or Predictor()
    res = pred.predict_specs_safe(ds.triples)
    phys = np.array([np.nan if isinstance(r, WattGPUError) or r.ttft_s is None else r.ttft_s for r in res])
    roof = np.asarray(prefill_s(ds.cols), dtype=np.float64)
    y = pd.to_numeric(ds.records[TTFT_COLUMN], errors="coerce").to_numpy(dtype=np.float64)
    ok = np.isfinite(phys) & np.isfinite(y) & (y > 0)
    gpus, sources = ds.records["gpu"].to_numpy(), ds.records["source"].to_numpy()

    def both(m: np.ndarray) -> dict[str, Any]:
        return {"physics": _score(y[m], phys[m]), "prefill_roofline": _score(y[m], roof[m])}

    pooled = both(ok)
    met = (pooled["physics"]["mdape"] <= TARGET_MDAPE
           and pooled["physics"]["mdape"] * TARGET_RATIO <= pooled["prefill_roofline"]["mdape"])
    return {
        "rows": int(ok.sum()), "rows_unpredicted": int((~ok).sum()),
        "sources": sorted(set(sources[ok].tolist())),
        "method": "physics = wattgpu.latency TTFT of the runtime prediction (own prefill at "
                  "PREFILL_EFFICIENCY of the tensor peak or whole chunked-prefill steps, + M/D/1 prefill queue, + "
                  "slot wait); prefill_roofline = 2 x active params x prompt tokens / tensor peak. Nothing is "
                  "fitted on TTFT, so pooled = leave-one-GPU-out for the TTFT model; the step time it reads is the "
                  "shipped bundle's ITL (trained on these rows)",
        "pooled": pooled,
        "per_gpu": {g: both(ok & (gpus == g)) for g in sorted(set(gpus[ok].tolist()))},
        "per_source": {s: both(ok & (sources == s)) for s in sorted(set(sources[ok].tolist()))},
        "target": {"text": f"TTFT MdAPE <= {TARGET_MDAPE:g} % and >= {TARGET_RATIO:g}x better than the prefill roofline",
                   "met": bool(met)},
    }


def markdown(t: dict[str, Any]) -> list[str]:
    """The TTFT section of accuracy.md."""
    out = ["", "## TTFT (time to first token) on the rows that measure it", ""]
    if not t.get("rows"):
        return out + ["No measured row records a TTFT.", ""]
    out += [t["method"] + ".", "",
            f"Rows: {t['rows']} ({', '.join(t['sources'])}); not predictable: {t['rows_unpredicted']}. "
            f"Target ({t['target']['text']}): **{'met' if t['target']['met'] else 'missed'}**.", "",
            "| rows | GPU / source | n | physics MdAPE | physics bias | roofline MdAPE | roofline bias |",
            "|---|---|---|---|---|---|---|"]

    def line(kind: str, name: str, v: dict[str, Any]) -> str:
        p, r = v["physics"], v["prefill_roofline"]
        return (f"| {kind} | {name} | {p['rows']} | {p['mdape']:.1f} % | {p['bias_pct']:+.1f} % | "
                f"{r['mdape']:.1f} % | {r['bias_pct']:+.1f} % |")

    out.append(line("pooled", "all", t["pooled"]))
    out += [line("source", s, v) for s, v in t["per_source"].items()]
    out += [line("GPU", g, v) for g, v in t["per_gpu"].items()]
    return out + [""]

"""Measured runs (a runs CSV, as `wattgpu calibrate --measurements` reads it) against two bundles' predictions.

    python compare_runs.py RUNS.csv BUNDLE_DIR     # per LLM: median |error| of power and ITL, packaged → BUNDLE_DIR
"""
import sys

import numpy as np

from wattgpu import Predictor
from wattgpu.measured import runs_from_csv


def main(runs_csv: str, bundle: str) -> None:
    before, after = runs_from_csv(runs_csv, Predictor()), runs_from_csv(runs_csv, Predictor(models=bundle))
    llms = [t[1].name for t in before.triples]
    print(f"{'LLM':<34} {'runs':>4}  {'power before → after':>22}  {'ITL before → after':>20}")
    for name in [*dict.fromkeys(llms), "all"]:
        m = np.array([name in ("all", x) for x in llms])
        cells = []
        for q in ("power", "itl"):
            y = before.measured[q][m]
            e0 = np.median(np.abs(before.predicted[q][m] / y - 1)) * 100
            e1 = np.median(np.abs(after.predicted[q][m] / y - 1)) * 100
            cells.append(f"{e0:5.1f} % → {e1:5.1f} %")
        print(f"{name:<34} {int(m.sum()):>4}  {cells[0]:>22}  {cells[1]:>20}")


if __name__ == "__main__":
    main(*sys.argv[1:3])

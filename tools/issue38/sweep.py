"""Issue 38: the catalog sweeps (tests/catalog_sweep.py) on a bundle. Run from the repository root:

    python tools/issue38/sweep.py [MODELS_DIR]
"""
import sys
import time

sys.path.insert(0, "tests")
from catalog_sweep import dominance_inversions, saturated_power_steps  # noqa: E402

from wattgpu.predictor import Predictor  # noqa: E402

pred = Predictor(models=sys.argv[1]) if len(sys.argv) > 1 else Predictor()
t0 = time.time()
bad, n, ex = dominance_inversions(pred)
print(f"strict-dominance inversions: {bad} of {n} comparisons ({time.time() - t0:.0f} s)", *ex, sep="\n  ")
t0 = time.time()
bad, flat, ex = saturated_power_steps(pred)
print(f"saturated cap steps with power up > 5 %: {bad} of {flat} flat steps ({time.time() - t0:.0f} s)", *ex, sep="\n  ")

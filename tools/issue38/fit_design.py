"""Issue 38: fit a bundle with one design's ITL grid (tools/issue38/logo.py) and the shipped power grid, to run the
catalog sweeps on it (tools/issue38/sweep.py). Run from the repository root:

    python tools/issue38/fit_design.py DESIGN OUT_DIR
"""
import sys

sys.path.insert(0, "train")
sys.path.insert(0, "tools/issue38")
from logo import design  # noqa: E402

from wattgpu_train.pipeline import export, fit, load  # noqa: E402

name, out = sys.argv[1:]
rec = design("itl", name)
export(fit(load("data", "specs.json"), rec, intervals=False, log=print), out)
print("wrote", out)

"""Issue 38: fit a bundle with the ``physics`` recipe (recipes.PHYSICS: ITL size as the +1 weight-shard bytes, power
without log(parameters)) to run the catalog sweeps on it (tools/issue38/sweep.py). Run from the repository root:

    python tools/issue38/fit_physics.py OUT_DIR
"""
import sys

sys.path.insert(0, "train")
from wattgpu_train.pipeline import export, fit, load  # noqa: E402
from wattgpu_train.recipes import PHYSICS  # noqa: E402

out = sys.argv[1]
export(fit(load("data", "specs.json"), PHYSICS, intervals=False, log=print), out)
print("wrote", out)

"""``wattgpu-train``: the training CLI (:mod:`wattgpu_train.cli`, in the source tree's ``train/``).

The wheel is the serving package and does not carry training: from a wheel install this entry point exits 2
with one line saying where training lives, instead of an import traceback."""
from __future__ import annotations

import importlib
import sys

CHECKOUT_HINT = 'train from a source checkout of WattGPU: pip install -e ".[train]" in its root'


def run() -> None:
    """Run ``wattgpu_train.cli.run``, or exit 2 naming the fix where the training package is not installed."""
    try:
        cli = importlib.import_module("wattgpu_train.cli")  # not a static import: the runtime never needs it
    except ModuleNotFoundError as exc:
        if exc.name not in ("wattgpu_train", "wattgpu_train.cli"):
            raise
        sys.stderr.write(f"error: the wattgpu wheel serves predictions only; {CHECKOUT_HINT}\n")
        raise SystemExit(2) from None
    cli.run()

"""Shared test helpers (paths and subprocess runners)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SRC_PATH = os.pathsep.join(str(REPO / d) for d in ("runtime", "train", "export"))


def run_py(code: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``python -c code`` with the repo's source trees first on the path."""
    full_env = {**os.environ, "PYTHONPATH": SRC_PATH, **(env or {})}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full_env,
                          timeout=timeout, cwd=REPO)


def run_cli(*args: str, module: str = "wattgpu.cli", timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run a CLI module the way a user would, in a fresh process."""
    env = {**os.environ, "PYTHONPATH": SRC_PATH}
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=REPO)


def assert_rows_equal_alone(pred: Any, rows: list[Any], together: Any, clear_memo: bool = False) -> None:
    """Every number (and server state) of each row of ``together`` (``pred.evaluate_rows(rows)``) bit for bit as
    that row evaluated alone (``clear_memo``: with the row memo emptied first); the same rows fail."""
    import numpy as np

    from wattgpu.results import memo_for

    for i, row in enumerate(rows):
        if clear_memo:
            memo_for(pred.bundle).clear()
        alone = pred.evaluate_rows([row])
        assert (i in together.slot) == (0 in alone.slot), row
        if i not in together.slot:
            continue
        k = together.slot[i]
        for f, v in alone.numbers.items():
            assert np.asarray(v[0]).tobytes() == np.asarray(together.numbers[f][k]).tobytes(), (f, row)
        if alone.mix:
            want = {f: np.float64(v).tobytes() if isinstance(v, float) else v for f, v in alone.mix[0].items()}
            assert {f: np.float64(v).tobytes() if isinstance(v, float) else v
                    for f, v in together.mix[k].items()} == want, row

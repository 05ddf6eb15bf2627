"""Shared test helpers (paths and subprocess runners)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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

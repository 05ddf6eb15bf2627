"""wheels/ holds the wheel the tree builds, and that wheel installs and predicts on its own."""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from .helpers import REPO

WHEELS = sorted((REPO / "wheels").glob("wattgpu-*.whl"))


def _contents(path: Path) -> dict[str, str]:
    with zipfile.ZipFile(path) as z:
        return {n: hashlib.sha256(z.read(n)).hexdigest() for n in z.namelist()}


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    res = subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "-o", str(out), str(REPO)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    return next(out.glob("wattgpu-*.whl"))


def test_committed_wheel_matches_the_tree(built: Path) -> None:
    assert len(WHEELS) == 1, "wheels/ must hold exactly one wattgpu wheel"
    committed, fresh = _contents(WHEELS[0]), _contents(built)
    assert sorted(committed) == sorted(fresh), "file list differs: rebuild with `python -m build --wheel -o wheels .`"
    changed = [n for n in fresh if committed[n] != fresh[n]]
    assert not changed, f"stale files in wheels/: {changed}; rebuild the wheel"
    names = set(fresh)
    for needed in ("wattgpu/models/power.onnx", "wattgpu/models/itl.onnx", "wattgpu/models/feature_schema.json",
                   "wattgpu/models/specs.json", "wattgpu/predictor.py", "wattgpu/cli.py"):
        assert needed in names


def test_wheel_installs_and_predicts_in_a_fresh_venv(tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(system_site_packages=True, with_pip=False).create(env_dir)
    py = env_dir / "bin" / "python"
    res = subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "--no-index",
                          "--quiet", str(WHEELS[0])], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    code = ("import json, wattgpu, wattgpu.cli;"
            "print(json.dumps({'file': wattgpu.__file__,"
            " 'p': wattgpu.predict('NVIDIA A30', 'meta-llama/Llama-3.1-8B-Instruct').to_dict()}))")
    res = subprocess.run([str(py), "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                         env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert res.returncode == 0, res.stderr[-2000:]
    out = json.loads(res.stdout)
    assert str(env_dir) in out["file"], f"imported {out['file']} instead of the installed wheel"
    cli = subprocess.run([str(env_dir / "bin" / "wattgpu"), "predict", "--llm", "meta-llama/Llama-3.1-8B-Instruct",
                          "--gpu", "NVIDIA A30", "--json"], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                         env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert cli.returncode == 0, cli.stderr[-2000:]
    assert json.loads(cli.stdout) == out["p"]

"""wheels/ holds the wheel the tree builds, and that wheel installs and predicts on its own."""
from __future__ import annotations

import hashlib
import json
import lzma
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from .helpers import REPO

WHEELS = sorted((REPO / "wheels").glob("wattgpu-*.whl"))


def _contents(path: Path) -> dict[str, str]:
    """Each member's sha256; an ``.xz`` artifact (hatch_build.py) by its unpacked bytes, which are what matter."""
    with zipfile.ZipFile(path) as z:
        return {n: hashlib.sha256(lzma.decompress(z.read(n)) if n.endswith(".xz") else z.read(n)).hexdigest()
                for n in z.namelist()}


def _dist_info(path: Path, name: str) -> list[str]:
    with zipfile.ZipFile(path) as z:
        member = next(n for n in z.namelist() if n.endswith(f".dist-info/{name}"))
        return z.read(member).decode().splitlines()


def _generator(path: Path) -> str:
    """The build backend and version that wrote the wheel (its WHEEL file's Generator line)."""
    return next((ln for ln in _dist_info(path, "WHEEL") if ln.startswith("Generator:")), "")


def _metadata_facts(path: Path) -> tuple[object, ...]:
    """What the metadata says, independent of how a backend version formats it (newer hatchling expands a
    self-referencing extra such as ``wattgpu[train]`` into the requirements it stands for; older keeps it)."""
    import re

    meta = [" ".join(ln.split()) for ln in _dist_info(path, "METADATA")]
    fields = ("Name:", "Version:", "Requires-Python:", "Provides-Extra:", "Summary:")
    by_extra: dict[str, set[str]] = {}
    for ln in meta:
        if ln.startswith("Requires-Dist:"):
            req, _, marker = ln.split(":", 1)[1].strip().partition(";")
            extra = m.group(1) if (m := re.search(r"extra == '([^']+)'", marker)) else ""
            by_extra.setdefault(extra, set()).add(req.strip())
    for extra, reqs in by_extra.items():
        for req in [r for r in reqs if r.startswith("wattgpu[")]:
            reqs.discard(req)
            for inner in req[len("wattgpu["):-1].split(","):
                reqs |= by_extra.get(inner.strip(), set())
    return (sorted(ln for ln in meta if ln.startswith(fields)), {k: sorted(v) for k, v in by_extra.items()},
            _dist_info(path, "entry_points.txt"))


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
    if _generator(WHEELS[0]) != _generator(built):
        # another hatchling (the oldest-dependency tier) formats dist-info differently: the package files must
        # still be identical, and the metadata must say the same things
        changed = [n for n in changed if ".dist-info/" not in n]
        assert _metadata_facts(WHEELS[0]) == _metadata_facts(built), "wheel metadata differs; rebuild the wheel"
    assert not changed, f"stale files in wheels/: {changed}; rebuild the wheel"
    names = set(fresh)
    for needed in ("wattgpu/models/power.onnx.xz", "wattgpu/models/itl.onnx.xz", "wattgpu/models/feature_schema.json",
                   "wattgpu/models/specs.json.xz", "wattgpu/predictor.py", "wattgpu/cli/__init__.py"):
        assert needed in names
    models = REPO / "runtime" / "wattgpu" / "models"
    for packed in ("power.onnx", "itl.onnx", "specs.json"):  # the wheel carries xz copies only, of today's bytes
        assert f"wattgpu/models/{packed}" not in names
        assert fresh[f"wattgpu/models/{packed}.xz"] == hashlib.sha256((models / packed).read_bytes()).hexdigest()


# Issue 23's target is 300 KB; the wheel is about 380 KB (ONNX models fitted on 7 power GPUs, the serving
# plan, calibration, peers and hostile-input code, issue 32's launch plans, headroom order and CSV column
# checks; the package page is docs/package.md, not the 55 KB README), so the target is missed and reported
# as such (issue 31 plans the cut). Issue 34 ships the HTTP service in the package (wattgpu/service: 15 KB
# compressed of Python, 5 KB of page HTML/JS/CSS; its dependencies stay in the [serve] extra): about 21 KB.
# Issue 37's target: <= 400 KB. The wheel is the serving package: training and export (train/, export/: 86 KB
# compressed) run from a source checkout and are not in it; the models and the catalog snapshot ship xz-packed
# (hatch_build.py).
WHEEL_BUDGET_BYTES = 400_000


def _runtime_requirements(wheel: Path) -> list[str]:
    """Distribution names the wheel requires without extras (what `pip install wattgpu` pulls in)."""
    import re

    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        lines = z.read(meta).decode().splitlines()
    reqs = [ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("Requires-Dist:")]
    return [re.split(r"[ ;<>=!~\[(]", r, maxsplit=1)[0] for r in reqs if "extra ==" not in r]


def _closure(names: list[str]) -> set[str]:
    """``names`` and everything they require (no extras), as installed in the running interpreter."""
    import importlib.metadata as md
    import re

    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        key = name.lower().replace("_", "-")
        if key in seen:
            continue
        seen.add(key)
        for r in md.distribution(name).requires or []:
            if "extra ==" not in r:
                todo.append(re.split(r"[ ;<>=!~\[(]", r, maxsplit=1)[0])
    return seen


def runtime_only_venv(tmp_path: Path, wheel: Path) -> Path:
    """A fresh venv holding the wheel and only its runtime dependencies (no [train] extra).

    The dependencies are taken from the running interpreter (wherever they live: a venv, the system
    site-packages, user site) by linking their top-level files into one directory the new venv
    reads through a .pth file — no network, and no dependence on how the outer Python was set up."""
    import importlib.metadata as md

    env_dir = tmp_path / "venv"
    venv.EnvBuilder(system_site_packages=False, with_pip=False).create(env_dir)
    py = env_dir / "bin" / "python"
    deps = tmp_path / "runtime-deps"
    deps.mkdir()
    for name in _closure(_runtime_requirements(wheel)):
        dist = md.distribution(name)
        for top in {Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith("..")}:
            src = Path(str(dist.locate_file(top)))
            if src.exists() and not (deps / top).exists():
                (deps / top).symlink_to(src)
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "wattgpu_test_runtime_deps.pth").write_text(f"{deps}\n")
    res = subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "--no-index",
                          "--quiet", str(wheel)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    return env_dir


def test_wheel_is_small_and_types_ship(built: Path) -> None:
    assert built.stat().st_size <= WHEEL_BUDGET_BYTES, f"wheel is {built.stat().st_size} bytes"
    names = _contents(built)
    assert "wattgpu/py.typed" in names and "wattgpu/train_entry.py" in names
    assert not [n for n in names if n.startswith(("wattgpu_train/", "wattgpu_export/"))], "training rides in the wheel"


@pytest.mark.slow
def test_wheel_installs_and_predicts_in_a_fresh_venv(tmp_path: Path, built: Path) -> None:
    """Runtime-only install of the wheel the tree builds: predict works, training exits 2 naming the extra."""
    env_dir = runtime_only_venv(tmp_path, built)
    py = env_dir / "bin" / "python"
    run_env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    code = ("import json, sys, wattgpu, wattgpu.cli;"
            "print(json.dumps({'file': wattgpu.__file__, 'pandas': 'pandas' in sys.modules,"
            " 'p': wattgpu.predict('NVIDIA A30', 'meta-llama/Llama-3.1-8B-Instruct').to_dict()}))")
    res = subprocess.run([str(py), "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path, env=run_env)
    assert res.returncode == 0, res.stderr[-2000:]
    out = json.loads(res.stdout)
    assert str(env_dir) in out["file"], f"imported {out['file']} instead of the installed wheel"
    no_train = subprocess.run([str(py), "-c", "import pandas"], capture_output=True, text=True, env=run_env)
    assert no_train.returncode != 0, "the runtime-only venv must not see the training stack"
    bin_dir = env_dir / "bin"
    cli = subprocess.run([str(bin_dir / "wattgpu"), "predict", "--llm", "meta-llama/Llama-3.1-8B-Instruct",
                          "--gpu", "NVIDIA A30", "--json"], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                         env=run_env)
    assert cli.returncode == 0, cli.stderr[-2000:]
    assert json.loads(cli.stdout) == out["p"]
    # the installed wheel reads its xz-packed models and catalog (hatch_build.py) and answers as the source tree does
    import wattgpu

    assert out["p"] == json.loads(json.dumps(wattgpu.predict("NVIDIA A30", "meta-llama/Llama-3.1-8B-Instruct").to_dict()))
    for args in (["rank", "--llm", "meta-llama/Llama-3.1-8B-Instruct", "--gpus", "A30,L4"], ["gpus"], ["llms"],
                 ["--help"], ["--version"]):
        r = subprocess.run([str(bin_dir / "wattgpu"), *args], capture_output=True, text=True, timeout=120,
                           cwd=tmp_path, env=run_env)
        assert r.returncode == 0, (args, r.stderr[-2000:])
    for args in (["--help"], ["fit"], ["evaluate", "--quick"], ["sync-catalog"]):
        r = subprocess.run([str(bin_dir / "wattgpu-train"), *args], capture_output=True, text=True, timeout=120,
                           cwd=tmp_path, env=run_env)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert r.stderr.count("\n") == 1 and 'source checkout' in r.stderr and 'pip install -e ".[train]"' in r.stderr
        assert "Traceback" not in r.stderr

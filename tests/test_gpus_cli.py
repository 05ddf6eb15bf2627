"""`wattgpu gpus`: aliases, idle power measured or estimated, sources in --json, catalog hash verified."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from .helpers import REPO, run_cli


def test_table_shows_aliases_and_idle_basis():
    r = run_cli("gpus")
    assert r.returncode == 0, r.stderr
    a30 = next(line for line in r.stdout.splitlines() if line.startswith("NVIDIA A30 "))
    assert "A30 PCIe" in a30 and " est " in a30
    h200 = next(line for line in r.stdout.splitlines() if line.startswith("NVIDIA H200 SXM 141GB"))
    assert " meas " in h200


def test_json_rows_carry_sources_and_idle():
    r = run_cli("gpus", "--json")
    assert r.returncode == 0, r.stderr
    rows = {g["name"]: g for g in json.loads(r.stdout)}
    assert len(rows) >= 50
    for g in rows.values():
        assert (g["aliases"] or g["shared_aliases"]) and g["sources"]["spec_table"]
        assert g["idle"]["basis"] in ("measured", "estimated") and isinstance(g["measured_in_training"], bool)
        assert g["sources"].get("spec_sheet"), g["name"]
    h200 = rows["NVIDIA H200 SXM 141GB"]
    assert h200["idle"]["basis"] == "measured" and h200["sources"]["idle_power"]
    assert rows["NVIDIA A30"]["idle"]["basis"] == "estimated"


def test_tampered_catalog_is_refused_like_predict(tmp_path):
    pkg = tmp_path / "wattgpu"
    shutil.copytree(REPO / "runtime" / "wattgpu", pkg, ignore=shutil.ignore_patterns("__pycache__"))
    cat = pkg / "models" / "specs.json"
    cat.write_text(cat.read_text().replace('"tdp_w": 165.0', '"tdp_w": 965.0', 1))
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    for cmd in (["gpus"], ["gpus", "--json"], ["llms"], ["predict", "--llm", "meta-llama/Llama-3.1-8B-Instruct",
                                                        "--gpu", "A30"]):
        r = subprocess.run([sys.executable, "-m", "wattgpu.cli", *cmd], capture_output=True, text=True, env=env,
                           cwd=tmp_path, timeout=120)
        assert r.returncode == 3 and "specs.json" in r.stderr and "sha256" in r.stderr, (cmd, r.stderr)


def test_listed_aliases_resolve_and_shared_ones_are_marked():
    """Issue 32 item 5: `wattgpu gpus` prints only aliases --gpu accepts; shared ones are named apart."""
    from wattgpu.errors import AmbiguousNameError
    from wattgpu.predictor import default_predictor

    cat = default_predictor().catalog
    rows = json.loads(run_cli("gpus", "--json").stdout)
    assert any(r["shared_aliases"] for r in rows) and any(r["measured_in_training"] for r in rows)
    for r in rows:
        for a in r["aliases"]:
            assert cat.gpu(a).name == r["name"], a
        for a in r["shared_aliases"]:
            with pytest.raises(AmbiguousNameError):
                cat.gpu(a)
    table = run_cli("gpus").stdout
    assert "trained" in table.splitlines()[0] and "shared by several GPUs are not shown" in table

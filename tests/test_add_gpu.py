"""Adding a GPU (or an LLM) is two steps (docs/adding.md): a row in data/catalog/, then
``wattgpu-train sync-catalog``. Here a made-up GPU and a made-up LLM go through exactly that path in a
temporary copy of the tree (the repository's data, catalog, bundle and golden file are never touched) and are
then predicted with.

Both are SYNTHETIC test fixtures, not real products: an L40S row with a new name and 20 % more bandwidth, and
the Llama-3.1-8B row under a new id.
"""
from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from wattgpu import Predictor
from wattgpu.bundle import ModelBundle
from wattgpu.cli import main as wattgpu_cli
from wattgpu.errors import UnknownEntityError
from wattgpu_train.cli import main as train_cli

REPO = Path(__file__).resolve().parents[1]
MODELS = REPO / "runtime" / "wattgpu" / "models"
SYNTHETIC = "SYNTHETIC Test GPU 48GB"
LLM = "meta-llama/Llama-3.1-8B-Instruct"
SYNTHETIC_LLM = "synthetic/Test-LLM-8B"


def _append_copy(table: Path, key: str, of: str, **changes: str) -> None:
    """Step 1: append to a catalog table a copy of row ``of`` (by column ``key``) with ``changes``."""
    with open(table, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        fields, rows = reader.fieldnames, list(reader)
    assert fields is not None
    row = {**next(r for r in rows if r[key] == of), **changes}
    with open(table, "a", newline="", encoding="utf-8") as f:
        csv.DictWriter(f, fieldnames=fields).writerow(row)


def _add_synthetic_rows(catalog: Path) -> None:
    label = "synthetic test fixture (tests/test_add_gpu.py): not a real product"
    with open(catalog / "gpu_specs.csv", newline="", encoding="utf-8") as f:
        l40s = next(r for r in csv.DictReader(f) if r["name"] == "NVIDIA L40S")
    _append_copy(catalog / "gpu_specs.csv", "name", "NVIDIA L40S", name=SYNTHETIC, aliases="SYNTHETIC-GPU",
                 release_year="2026", memory_bandwidth_gb_s=str(round(float(l40s["memory_bandwidth_gb_s"]) * 1.2)),
                 sources=label, notes="SYNTHETIC: made up for a test; never in the shipped catalog")
    _append_copy(catalog / "llm_configs.csv", "hf_id", LLM, hf_id=SYNTHETIC_LLM, source=label, notes="SYNTHETIC")


@pytest.fixture(scope="module")
def synced(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tmp tree after the two steps: data/catalog with the synthetic row, then sync-catalog."""
    root = tmp_path_factory.mktemp("add_gpu")
    shutil.copytree(REPO / "data" / "catalog", root / "catalog")
    shutil.copytree(REPO / "data" / "paper", root / "paper")
    shutil.copytree(MODELS, root / "models")
    (root / "golden").mkdir()
    for name in ("regenerate.py", "compare.py"):
        shutil.copy(REPO / "tests" / "golden" / name, root / "golden" / name)
    _add_synthetic_rows(root / "catalog")
    r = CliRunner().invoke(train_cli, ["sync-catalog", "--catalog-dir", str(root / "catalog"),
                                       "--paper-dir", str(root / "paper"), "--specs", str(root / "specs.json"),
                                       "--models", str(root / "models"), "--golden", str(root / "golden" / "regenerate.py")])
    assert r.exit_code == 0, r.output
    return root


def test_sync_catalog_installs_the_new_catalog_without_refitting(synced: Path) -> None:
    assert (synced / "specs.json").read_bytes() == (synced / "models" / "specs.json").read_bytes()
    assert SYNTHETIC in {g["name"] for g in json.loads((synced / "specs.json").read_text())["gpus"]}
    for onnx in ("power.onnx", "itl.onnx"):  # the models are the packaged ones, byte for byte
        assert (synced / "models" / onnx).read_bytes() == (MODELS / onnx).read_bytes()
    ModelBundle(synced / "models").verify()  # every hash in the manifest matches, the catalog's included
    assert SYNTHETIC in {g.name for g in ModelBundle(synced / "models").catalog.gpus}


def test_the_golden_file_gains_the_new_gpu_and_keeps_every_other_row(synced: Path) -> None:
    new = json.loads((synced / "golden" / "predictions.json").read_text())
    old = json.loads((REPO / "tests" / "golden" / "predictions.json").read_text())
    added = {k for k in new["predictions"] if k.startswith(SYNTHETIC + " | ")}
    assert len(added) == len(old["llms"]) * len(old["workloads"])
    old_texts, new_texts = old["texts"], new["texts"]

    def text(row: list, texts: list[str]) -> list:  # rows refer to interned strings by index
        return row[:-2] + [texts[row[-2]], [texts[i] for i in row[-1]]] if isinstance(row, list) else texts[row["error"]]
    assert {k: text(v, new_texts) for k, v in new["predictions"].items() if k not in added} == \
           {k: text(v, old_texts) for k, v in old["predictions"].items()}


def test_the_new_gpu_is_predicted_with_the_bundle(synced: Path) -> None:
    pred = Predictor(models=synced / "models")
    p = pred.predict(SYNTHETIC, LLM)
    g = pred.catalog.gpu(SYNTHETIC)
    assert g.idle_power_w is None or g.idle_power_w <= p.power_w
    assert 0 < p.power_w <= g.tdp_w and p.itl_s > 0 and p.throughput_tok_s > 0
    assert any(f"{SYNTHETIC} was not measured in training" in w for w in p.warnings)  # as docs/adding.md says
    assert Predictor(models=synced / "models").predict("SYNTHETIC-GPU", LLM) == p  # its alias resolves too
    with pytest.raises(UnknownEntityError, match="SYNTHETIC"):  # the packaged bundle never saw it
        Predictor().predict(SYNTHETIC, LLM)


def test_the_new_llm_is_predicted_like_the_row_it_copies(synced: Path) -> None:
    pred = Predictor(models=synced / "models")
    assert pred.catalog.llm(SYNTHETIC_LLM).name == SYNTHETIC_LLM
    a, b = pred.predict(SYNTHETIC, SYNTHETIC_LLM), pred.predict(SYNTHETIC, LLM)
    assert (a.power_w, a.itl_s) == (b.power_w, b.itl_s)  # the same config: the same numbers


def test_the_new_gpu_is_predicted_by_the_cli(synced: Path) -> None:
    r = CliRunner().invoke(wattgpu_cli, ["predict", "--gpu", SYNTHETIC, "--llm", LLM, "--json",
                                         "--models", str(synced / "models")])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["gpu"] == SYNTHETIC and out["power_w"] > 0


def test_sync_catalog_needs_the_golden_script_or_no_golden(tmp_path: Path) -> None:
    r = CliRunner().invoke(train_cli, ["sync-catalog", "--specs", str(tmp_path / "specs.json"),
                                       "--models", str(tmp_path / "models"), "--golden", str(tmp_path / "none.py")])
    assert r.exit_code == 2 and "none.py" in r.output and "--no-golden" in r.output, r.output
    assert not (tmp_path / "specs.json").exists()

"""User-trained bundles: `wattgpu-train fit --out DIR` (the library) → `--models DIR`, `Predictor(models=)`,
`WATTGPU_MODELS`; the numbers equal the fit's own; a bundle of another format version is refused."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from wattgpu import ArtifactError, ConfigFileError, Predictor, Workload
from wattgpu.targets import TARGETS

from .helpers import REPO, SRC_PATH, run_cli

GPU, LLM = "NVIDIA A30", "meta-llama/Llama-3.1-8B-Instruct"


@pytest.fixture(scope="module")
def user_bundle(tmp_path_factory):
    """A small real fit (20 trees, no intervals) of every target on data/, exported as a bundle."""
    from wattgpu_train.pipeline import export, fit, load

    out = tmp_path_factory.mktemp("bundle") / "my-models"
    result = fit(load(REPO / "data", REPO / "specs.json"), n_estimators=20, intervals=False)
    manifest = export(result, out)
    return out, result, manifest


def test_round_trip_numbers_equal_the_fits_own(user_bundle):
    out, result, manifest = user_bundle
    assert {p.name for p in out.iterdir()} == {"feature_schema.json", "power.onnx", "itl.onnx", "specs.json"}
    pred = Predictor(models=out)
    for target in TARGETS:
        ds = result.datasets[target]
        own = result.predict_physical(target, ds)
        via_bundle = pred._evaluate(ds.cols)[target]
        np.testing.assert_allclose(via_bundle, own, rtol=1e-6, err_msg=target)
    # and a full Prediction: offline rows are exactly the learned models (power capped at TDP)
    ds = result.datasets["power"]
    i = next(k for k, (_, _, w) in enumerate(ds.triples) if w.kind == "offline")
    p = pred.predict_specs([ds.triples[i]])[0]
    assert p.power_w == pytest.approx(min(result.predict_physical("power", ds)[i], ds.triples[i][0].tdp_w), rel=1e-6)
    assert manifest["models"]["power"]["xgboost_params"]["n_estimators"] == 20


def test_models_option_env_var_and_constructor_agree(user_bundle):
    out, _, _ = user_bundle
    api = Predictor(models=out).predict(GPU, LLM, Workload()).to_dict()
    assert Predictor(model_dir=out).predict(GPU, LLM).power_w == api["power_w"]  # the 0.1 keyword
    assert api["power_w"] != Predictor().predict(GPU, LLM).power_w  # really another model set
    r = run_cli("predict", "--llm", LLM, "--gpu", GPU, "--models", str(out), "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["power_w"] == api["power_w"]
    env = {**os.environ, "PYTHONPATH": SRC_PATH, "WATTGPU_MODELS": str(out)}
    r = subprocess.run([sys.executable, "-m", "wattgpu.cli", "rank", "--llm", LLM, "--gpus", GPU, "--json"],
                       capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["candidates"][0]["power_w"] == api["power_w"]


def test_user_bundle_gets_the_same_integrity_checks(user_bundle, tmp_path):
    out, _, _ = user_bundle
    bad = tmp_path / "bad"
    shutil.copytree(out, bad)
    (bad / "itl.onnx").write_bytes((bad / "itl.onnx").read_bytes()[:-10])
    r = run_cli("predict", "--llm", LLM, "--gpu", GPU, "--models", str(bad))
    assert r.returncode == 3 and "itl.onnx" in r.stderr and r.stderr.count("\n") == 1


def test_bundle_of_another_format_version_is_refused_clearly(user_bundle, tmp_path):
    out, _, _ = user_bundle
    other = tmp_path / "v99"
    shutil.copytree(out, other)
    m = json.loads((other / "feature_schema.json").read_text())
    m["schema_version"] = 99
    (other / "feature_schema.json").write_text(json.dumps(m))
    with pytest.raises(ArtifactError, match="made by format version 99"):
        Predictor(models=other).predict(GPU, LLM)
    r = run_cli("predict", "--llm", LLM, "--gpu", GPU, "--models", str(other))
    assert r.returncode == 3 and "made by format version 99" in r.stderr


@pytest.mark.slow
def test_fit_cli_writes_a_bundle_the_runtime_reads(tmp_path):
    out = tmp_path / "cli-models"
    r = run_cli("fit", "--out", str(out), "--trees", "5", "--no-intervals", module="wattgpu_train.cli", timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert Predictor(models=out).predict(GPU, LLM).power_w > 0


def test_a_path_that_is_not_a_bundle_directory_is_a_bad_invocation(tmp_path):
    """A missing path or a file: exit 2 naming where the path came from and the fix (a directory with
    missing or damaged bundle files stays exit 3, above and below)."""
    (tmp_path / "file").write_text("x")
    cases = {"missing": "does not exist", "file": "is not a directory"}
    for name, problem in cases.items():
        path = str(tmp_path / name)
        for kw, origin in (("models", "models"), ("model_dir", "model_dir")):
            with pytest.raises(ConfigFileError) as ei:
                Predictor(**{kw: path})
            assert problem in str(ei.value) and f"given as {origin} " in str(ei.value)
        r = run_cli("predict", "--llm", LLM, "--gpu", GPU, "--models", path)
        assert r.returncode == 2 and problem in r.stderr and "given as --models" in r.stderr, r.stderr
        assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
        env = {**os.environ, "PYTHONPATH": SRC_PATH, "WATTGPU_MODELS": path}
        r = subprocess.run([sys.executable, "-m", "wattgpu.cli", "predict", "--llm", LLM, "--gpu", GPU],
                           capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
        assert r.returncode == 2 and problem in r.stderr and "unset WATTGPU_MODELS" in r.stderr, r.stderr


def test_an_empty_directory_is_a_bundle_missing_its_manifest(tmp_path):
    r = run_cli("predict", "--llm", LLM, "--gpu", GPU, "--models", str(tmp_path))
    assert r.returncode == 3 and "feature_schema.json" in r.stderr, r.stderr

"""Cold start (issue 37): ``import wattgpu`` loads only the package and its errors; every public name still
resolves (PEP 562 lazy attributes), and one prediction loads none of the modules it does not need."""
from __future__ import annotations

import json

import pytest

from .helpers import run_cli, run_py

# Modules a plain prediction with the packaged (uncalibrated) bundle must not import.
NOT_ON_PREDICT = ("wattgpu.ranking", "wattgpu.questions", "wattgpu.layout", "wattgpu.serving.fleet", "wattgpu.launch",
                  "wattgpu.calibration", "wattgpu.cli", "wattgpu.quant", "numpy.ma", "pathlib",
                  "hashlib")  # hashlib loads OpenSSL (4-10 ms): the bundle hashes with the builtin sha256


# Modules `wattgpu predict --gpu G --llm M` must not import (other commands' code, layouts, ranking).
NOT_ON_CLI_PREDICT = ("wattgpu.ranking", "wattgpu.layout", "wattgpu.layout_predict", "wattgpu.launch",
                      "wattgpu.calibration", "wattgpu.cli.rank_command", "wattgpu.cli.list_commands",
                      "wattgpu.cli.calibrate_command", "wattgpu.cli.serve_command", "numpy.ma", "shlex")


def _run_json(code: str) -> object:
    res = run_py(code)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


def _loaded_by_dependencies(names: tuple[str, ...], deps: str) -> set[str]:
    """Those of ``names`` that importing the dependencies ``deps`` alone loads in a fresh process: numpy 1.x
    imports numpy.ma itself, and some onnxruntime versions import pathlib, so they are not wattgpu's to skip."""
    return set(_run_json(f"import sys, json\nimport {deps}\n"  # type: ignore[arg-type]
                         f"print(json.dumps([m for m in {names!r} if m in sys.modules]))"))


def test_import_wattgpu_loads_only_the_package_and_its_errors() -> None:
    loaded = _run_json("import sys, json\nbefore = set(sys.modules)\nimport wattgpu\n"
                       "print(json.dumps(sorted(set(sys.modules) - before)))")
    assert [m for m in loaded if m.startswith("wattgpu")] == ["wattgpu", "wattgpu.errors"]  # type: ignore[union-attr]
    assert "numpy" not in loaded  # type: ignore[operator]


def test_a_prediction_skips_what_it_does_not_need() -> None:
    loaded = _run_json("import sys, json, wattgpu\n"
                       "p = wattgpu.predict('NVIDIA A100 SXM4 40GB', 'meta-llama/Llama-3.1-8B-Instruct')\n"
                       "assert p.power_w > 0\n"
                       f"print(json.dumps([m for m in {NOT_ON_PREDICT!r} if m in sys.modules]))")
    assert set(loaded) - _loaded_by_dependencies(NOT_ON_PREDICT, "numpy, onnxruntime") == set()  # type: ignore[arg-type]


def test_every_public_name_resolves_in_a_fresh_process() -> None:
    got = _run_json("import json, wattgpu\n"
                    "names = {}\n"
                    "for name in wattgpu.__all__:\n"
                    "    exec(f'from wattgpu import {name} as v', names)\n"
                    "    names[name] = names['v'] is getattr(wattgpu, name)\n"
                    "print(json.dumps({k: v for k, v in names.items() if k in wattgpu.__all__}))")
    assert set(got) == set(__import__("wattgpu").__all__)  # type: ignore[arg-type]
    assert all(got.values()), got  # type: ignore[union-attr]


def test_public_names_are_their_modules_objects() -> None:
    import wattgpu
    from wattgpu import prediction, predictor, ranking, resolve, specs, workload

    assert wattgpu.rank is ranking.rank and wattgpu.RankResult is ranking.RankResult
    assert wattgpu.Prediction is prediction.Prediction and wattgpu.Predictor is predictor.Predictor
    assert wattgpu.Catalog is specs.Catalog and wattgpu.default_catalog is specs.default_catalog
    assert wattgpu.Workload is workload.Workload
    # names the package bound before it became lazy, though not in __all__
    assert wattgpu.default_predictor is predictor.default_predictor
    assert wattgpu.resolve_pair is resolve.resolve_pair
    assert set(wattgpu.__all__) <= set(dir(wattgpu))


@pytest.mark.parametrize("first", ["import wattgpu.ranking", "from wattgpu.ranking import rank",
                                   "import wattgpu.cli", "from wattgpu import rank", "pass"])
def test_rank_stays_the_function_whatever_is_imported_first(first: str) -> None:
    """``wattgpu.rank`` is the public function; its module is ``wattgpu.ranking``, so importing the module
    (the CLI does) cannot rebind the package attribute to a module."""
    got = _run_json(f"import json\n{first}\nimport wattgpu, wattgpu.ranking\n"
                    "r = wattgpu.rank('meta-llama/Llama-3.1-8B-Instruct', gpus=['NVIDIA A100 SXM4 40GB'])\n"
                    "print(json.dumps([callable(wattgpu.rank), wattgpu.rank is wattgpu.ranking.rank, r.best.gpu]))")
    assert got == [True, True, "NVIDIA A100 SXM4 40GB"]


def test_submodules_resolve_as_attributes_and_unknown_names_fail() -> None:
    got = _run_json("import json, wattgpu\n"
                    "ok = wattgpu.specs.__name__ == 'wattgpu.specs' and wattgpu.bundle.__name__ == 'wattgpu.bundle'\n"
                    "try:\n    wattgpu.no_such_thing\n    missing = False\n"
                    "except AttributeError:\n    missing = True\n"
                    "print(json.dumps([ok, missing, hasattr(wattgpu, 'no_such_thing')]))")
    assert got == [True, True, False]


def test_batch_grid_is_strictly_increasing() -> None:
    """capacity.BATCH_GRID is sorted, not np.unique'd (numpy.ma stays off the cold start): it must hold
    distinct values all the same."""
    import numpy as np

    from wattgpu.serving.capacity import BATCH_GRID

    assert np.all(np.diff(BATCH_GRID) > 0) and BATCH_GRID[0] == 1.0 and BATCH_GRID[-1] == 65536.0
    assert np.array_equal(BATCH_GRID, np.unique(BATCH_GRID))


def test_cli_predict_loads_only_its_command() -> None:
    """`wattgpu predict` imports its own command module only (the group loads a command when asked for it)
    and its answer does not need ranking or layouts; the command still prints its table."""
    code = ("import atexit, json, sys\n"
            f"atexit.register(lambda: print(json.dumps([m for m in {NOT_ON_CLI_PREDICT!r} if m in sys.modules]), "
            "file=sys.stderr))\n"
            "sys.argv = ['wattgpu', 'predict', '--gpu', 'NVIDIA A100 SXM4 40GB', '--llm', "
            "'meta-llama/Llama-3.1-8B-Instruct']\n"
            "import runpy\nrunpy.run_module('wattgpu.cli', run_name='__main__')\n")
    res = run_py(code)
    assert res.returncode == 0, res.stderr
    assert "mean power" in res.stdout
    loaded = set(json.loads(res.stderr.strip().splitlines()[-1]))
    assert loaded - _loaded_by_dependencies(NOT_ON_CLI_PREDICT, "numpy, onnxruntime, click") == set()


def test_cli_lists_and_runs_every_command_in_a_fresh_process() -> None:
    """Commands load on first use, yet --help lists all of them and each one's own --help works."""
    res = run_cli("--help")
    assert res.returncode == 0, res.stderr
    for name in ("calibrate", "gpus", "llms", "predict", "rank", "serve"):
        assert f"  {name} " in res.stdout, name
        sub = run_cli(name, "--help")
        assert sub.returncode == 0 and "Usage:" in sub.stdout, (name, sub.stderr)
    bad = run_cli("no-such-command")
    assert bad.returncode == 2 and "no-such-command" in bad.stderr


def test_cli_public_names_resolve() -> None:
    got = _run_json("import json, wattgpu.cli as c\n"
                    "print(json.dumps({n: getattr(c, n) is not None for n in c.__all__}))")
    assert got == {n: True for n in __import__("wattgpu.cli", fromlist=["__all__"]).__all__}


def test_sessions_without_graph_passes_give_the_same_outputs() -> None:
    """The bundle's sessions skip onnxruntime's graph optimisation passes (cold start): on the shipped models
    they give the outputs of sessions with every pass, bit for bit."""
    import numpy as np
    import onnxruntime as ort

    from wattgpu.predictor import Predictor

    bundle = Predictor().bundle
    rng = np.random.default_rng(37)
    for target, m in bundle.schema.models.items():
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = opts.inter_op_num_threads = 1
        full = ort.InferenceSession(bundle.read(m.file), opts, providers=["CPUExecutionProvider"])
        n = len(m.features)
        X = (rng.standard_normal((20000, n)) * rng.choice([1e-3, 1.0, 1e3, 1e6], size=(20000, n))).astype(np.float32)
        X[rng.random(X.shape) < 0.01] = np.nan
        ours = bundle.session(target).run(None, {m.input_name: X})[0]
        assert np.array_equal(ours, full.run(None, {m.input_name: X})[0], equal_nan=True), target


# Every name `import wattgpu` bound before the package became lazy (its imports and the submodules they loaded).
EAGER_NAMES = ("ArtifactError", "Catalog", "ConfigFileError", "Excluded", "GpuSpec", "Interval", "LlmSpec",
               "ModelFitError", "Prediction", "Predictor", "RankEntry", "RankResult", "SpecValidationError",
               "UnknownEntityError", "UnsupportedModelError", "WattGPUError", "Workload", "assemble", "bundle",
               "calibration", "calibration_format", "capacity", "checks", "default_catalog", "default_predictor",
               "derived", "energy", "errors", "feature_registry", "features", "flags", "fleet", "latency", "launch",
               "layout", "memory", "ops", "parallel", "physics", "predict", "predict_many", "prediction", "predictor",
               "quant", "questions", "rank", "raw_columns", "record", "resolve", "resolve_pair", "results", "rules",
               "safeio", "schema", "server", "serving", "single", "specs", "targets", "ttft_fit", "workload")


def test_every_name_the_eager_package_bound_still_resolves() -> None:
    got = _run_json("import json, wattgpu\n"
                    f"print(json.dumps([n for n in {EAGER_NAMES!r} if getattr(wattgpu, n, None) is None]))")
    assert got == []

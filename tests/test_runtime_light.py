"""The runtime stays light: predicting never imports the training stack or the CLI toolkit."""
from __future__ import annotations

import json

from .helpers import run_py

HEAVY = ("xgboost", "pandas", "onnx", "onnxmltools", "sklearn", "click", "skl2onnx",
         "aiconfigurator", "aiconfigurator_core", "llm_analysis", "ecologits",  # these four: compare-peers only
         "starlette", "uvicorn", "httpx")  # the [serve] extra: wattgpu.service only


def test_predict_imports_only_numpy_and_onnxruntime() -> None:
    code = (
        "import sys, json, wattgpu\n"
        "p = wattgpu.predict('NVIDIA A30', 'meta-llama/Llama-3.1-8B-Instruct')\n"
        "wattgpu.Predictor().predict('L40S', 'Qwen/Qwen2.5-7B-Instruct', wattgpu.Workload(kind='server', qps=0.3))\n"
        f"print(json.dumps({{m: m in sys.modules for m in {HEAVY!r}}}))\n"
        "print(json.dumps({'ort': 'onnxruntime' in sys.modules, 'power': p.power_w}))\n"
    )
    res = run_py(code)
    assert res.returncode == 0, res.stderr
    heavy, light = (json.loads(line) for line in res.stdout.strip().splitlines()[-2:])
    assert not any(heavy.values()), f"runtime imported {[m for m, v in heavy.items() if v]}"
    assert light["ort"] and light["power"] > 0


def test_runtime_sources_do_not_import_training_stack() -> None:
    """Static check too: no runtime module names a heavy package in an import statement."""
    import ast

    from .helpers import REPO

    for path in (*(REPO / "runtime/wattgpu").glob("*.py"), *(REPO / "runtime/wattgpu/cli").glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module.split(".")[0]]
            bad = set(names) & (set(HEAVY) - {"click"}) | ({"wattgpu_train", "wattgpu_export"} & set(names))
            assert not bad, f"{path.name} imports {bad}"
            if "click" in names:
                assert path.parent.name == "cli", f"{path.name} imports click (only the cli package may)"


def test_only_the_service_package_imports_the_web_stack() -> None:
    """starlette/uvicorn (the [serve] extra) are imported only under runtime/wattgpu/service/."""
    import ast

    from .helpers import REPO

    root = REPO / "runtime/wattgpu"
    for path in root.rglob("*.py"):
        names: list[str] = []
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names += [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.append(node.module.split(".")[0])
        web = {"starlette", "uvicorn", "httpx", "fastapi", "mangum"} & set(names)
        assert not web or path.parent == root / "service", f"{path.relative_to(root)} imports {web}"

"""`wattgpu predict | gpus | llms`: the done-when example, JSON stability, API equality, error exits."""
from __future__ import annotations

import json
import math

import pytest

import wattgpu

from .helpers import run_cli

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
KEYS = {"llm", "gpu", "workload", "power_w", "itl_s", "system_s_per_token", "throughput_tok_s",
        "energy_per_token_j", "energy_per_request_j", "effective_batch", "busy_fraction", "power_method",
        "power_intervals", "itl_intervals", "baselines", "warnings"}


@pytest.fixture(scope="module")
def a30_json() -> dict:
    res = run_cli("predict", "--llm", LLAMA, "--gpu", "NVIDIA A30", "--json")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_done_when_example_is_plausible(a30_json: dict) -> None:
    assert set(a30_json) >= KEYS
    tdp = wattgpu.default_catalog().gpu("NVIDIA A30").tdp_w
    assert 0 < a30_json["power_w"] <= 1.2 * tdp
    assert 0 < a30_json["itl_s"] < 10 and math.isfinite(a30_json["throughput_tok_s"])
    assert a30_json["energy_per_token_j"] == pytest.approx(a30_json["power_w"] * a30_json["system_s_per_token"])


def test_cli_and_api_agree_exactly(a30_json: dict) -> None:
    api = wattgpu.predict("NVIDIA A30", LLAMA).to_dict()
    assert json.loads(json.dumps(api)) == a30_json


def test_table_output_and_listing_commands() -> None:
    res = run_cli("predict", "--llm", LLAMA, "--gpu", "a30")
    assert res.returncode == 0 and "mean power" in res.stdout and "ITL" in res.stdout
    gpus = run_cli("gpus", "--json")
    assert gpus.returncode == 0 and len(json.loads(gpus.stdout)) == 55
    llms = run_cli("llms")
    assert llms.returncode == 0 and LLAMA in llms.stdout


@pytest.mark.parametrize("args,needle", [
    (["--llm", LLAMA, "--gpu", "H100 SXM"], None),
    (["--llm", LLAMA, "--gpu", "H100 SXM9"], "Did you mean"),
    (["--llm", "no/such-model", "--gpu", "A30"], "Unknown LLM"),
    (["--llm", LLAMA, "--gpu", "A30", "--workload", "server"], "qps"),
    (["--llm", LLAMA, "--gpu", "A30", "--max-batch", "-3"], "max_batch"),
    (["--llm", LLAMA, "--gpu", "A30", "--engine", "warp-drive"], "engine"),
    (["--llm", "meta-llama/Llama-3.1-70B-Instruct", "--gpu", "L4"], "does not fit"),
])
def test_input_errors_exit_2_with_one_line(args: list[str], needle: str | None) -> None:
    res = run_cli("predict", *args)
    if needle is None:
        assert res.returncode == 0, res.stderr
        return
    assert res.returncode == 2, (res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0]
    assert "Traceback" not in res.stderr


def test_user_described_gpu_and_llm_files(tmp_path) -> None:
    from .helpers import REPO

    gpu = {"name": "What-if GPU", "tdp_w": 400, "memory_size_gb": 48, "memory_bandwidth_gb_s": 1500,
           "fp16_tflops": 300, "transistors_million": 50000, "release_year": 2024, "memory_type": "HBM3"}
    (tmp_path / "gpu.json").write_text(json.dumps(gpu))
    cfg = REPO / "tests/fixtures/hf_configs/meta-llama--Llama-3.1-70B-Instruct.json"
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "config.json").write_text(cfg.read_text())
    res = run_cli("predict", "--llm", str(model_dir), "--gpu", str(tmp_path / "gpu.json"), "--json")
    assert res.returncode == 2 and "does not fit" in res.stderr  # 70B fp16 on 48 GB
    res = run_cli("predict", "--llm", str(REPO / "tests/fixtures/hf_configs/meta-llama--Meta-Llama-3-8B.json"),
                  "--gpu", str(tmp_path / "gpu.json"), "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["gpu"] == "What-if GPU" and 0 < out["power_w"] <= 400


def test_an_idle_server_prints_readable_figures() -> None:
    """At the smallest rate accepted (1e-9 req/s; issue 26 refused the rates below, which overflowed to inf)
    the idle power spread over almost no tokens gives ~1e+08 J/token: printed with 4 significant digits,
    not as a long fixed-point number, in predict and rank alike."""
    import re

    llm = "meta-llama/Llama-3.1-8B-Instruct"
    for args in (["predict", "--gpu", "NVIDIA A30"], ["rank", "--gpus", "NVIDIA A30,NVIDIA H100 SXM5 80GB"]):
        r = run_cli(*args, "--llm", llm, "--workload", "server", "--qps", "1e-9", "--usd-per-kwh", "0.1",
                    "--gco2-per-kwh", "400")
        assert r.returncode == 0, r.stderr
        assert re.search(r"\d\.\d+e\+\d\d", r.stdout), r.stdout  # the huge figures, in scientific form
        assert max(len(t) for t in re.findall(r"[\d.e+]+", r.stdout)) <= 12, r.stdout
    from wattgpu.cli import num

    assert (num(12.3456, ">8.3f"), num(3.2e7, ">8.3f"), num(-3.2e7, ".1f"), num(float("nan"), ".1f")) == \
        ("  12.346", " 3.2e+07", "-3.2e+07", "nan")

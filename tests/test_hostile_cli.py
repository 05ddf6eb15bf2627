"""The CLI refuses hostile input with status 2 and exactly one ``error:`` line — never a traceback —
and within bounded time (every case runs under a timeout; files are read with a byte cap)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from wattgpu import default_catalog

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(str(REPO / d) for d in ("runtime", "train", "export")),
       "PYTHONWARNINGS": "ignore"}
CAT = default_catalog()
GPU = {**CAT.gpu("NVIDIA H100 SXM5 80GB").to_dict(), "name": "Hostile Test GPU", "aliases": []}
SMALL_LLM = min((m for m in CAT.llms if m.arch_class == "decoder_transformer"), key=lambda m: m.total_params_b).name
BIG_LLM = max(CAT.llms, key=lambda m: m.total_params_b).name
SMALL_GPU = min(CAT.gpus, key=lambda g: g.memory_size_gb).name
LLAMA_CFG = {"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
             "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
             "max_position_embeddings": 8192, "torch_dtype": "bfloat16"}
TIMEOUT_S = 60


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "wattgpu.cli", *args], capture_output=True, text=True,
                          errors="replace", env=ENV, timeout=TIMEOUT_S, cwd=REPO)


def _files(d: Path) -> dict[str, Path]:
    """Hostile files, written once; names are what the cases refer to."""
    def w(name: str, content: str | bytes) -> Path:
        p = d / name
        p.write_bytes(content if isinstance(content, bytes) else content.encode())
        return p

    gpu = lambda **kv: json.dumps({**GPU, **kv})  # noqa: E731
    out = {
        "not_json": w("not_json.json", "tdp_w: 700\nname: GPU\n"),
        "nan": w("nan.json", gpu(tdp_w=1).replace('"tdp_w": 1', '"tdp_w": NaN')),
        "inf": w("inf.json", gpu(tdp_w=1).replace('"tdp_w": 1', '"tdp_w": Infinity')),
        "neg_inf": w("neg_inf.json", gpu(tdp_w=1).replace('"tdp_w": 1', '"tdp_w": -Infinity')),
        "e308": w("e308.json", gpu(memory_bandwidth_gb_s=1e308)),
        "e999": w("e999.json", gpu(tdp_w=1).replace('"tdp_w": 1', '"tdp_w": 1e999')),
        "bigint": w("bigint.json", gpu(tdp_w=1).replace('"tdp_w": 1', '"tdp_w": ' + "9" * 20_000)),
        "deep": w("deep.json", "[" * 200_000 + "]" * 200_000),
        "deep_obj": w("deep_obj.json", '{"a":' * 5_000 + "1" + "}" * 5_000),
        "oversize": w("oversize.json", '{"name": "' + "x" * 3_000_000 + '"}'),
        "wrong_type": w("wrong_type.json", gpu(tdp_w="700 W")),
        "bool_number": w("bool_number.json", gpu(fp16_tflops=True)),
        "negative": w("negative.json", gpu(memory_size_gb=-80)),
        "zero": w("zero.json", gpu(fp16_tflops=0)),
        "missing": w("missing.json", json.dumps({k: v for k, v in GPU.items() if k != "tdp_w"})),
        "unknown_key": w("unknown_key.json", gpu(colour="green")),
        "garbage": w("garbage.json", bytes((i * 7919 + 13) % 256 for i in range(4096)).replace(b"\x00", b"\x01")),
        "nul": w("nul.json", b'{"name": "a\x00b"}'),
        "latin1": w("latin1.json", '{"name": "caf\xe9"}'.encode("latin-1")),
        "empty": w("empty.json", ""),
        "array": w("array.json", json.dumps([GPU])),
        "string": w("string.json", '"H100 SXM"'),
        "llm_nan": w("llm_nan.json", json.dumps(LLAMA_CFG).replace("32,", "NaN,", 1)),
        "llm_wrong_type": w("llm_wrong_type.json", json.dumps({**LLAMA_CFG, "num_hidden_layers": "32"})),
        "llm_missing": w("llm_missing.json", json.dumps({k: v for k, v in LLAMA_CFG.items() if k != "hidden_size"})),
        "llm_heads": w("llm_heads.json", json.dumps({**LLAMA_CFG, "num_attention_heads": 30})),
        "llm_e308": w("llm_e308.json", json.dumps({**LLAMA_CFG, "vocab_size": 1e308})),
        "llm_rwkv": w("llm_rwkv.json", json.dumps({"model_type": "rwkv", "num_hidden_layers": 24, "hidden_size": 2048,
                                                  "vocab_size": 50277})),
        "llm_newline": w("llm_newline.json", json.dumps({**LLAMA_CFG, "_name_or_path": "evil\nerror: forged second line",
                                                        "num_hidden_layers": 1000, "hidden_size": 65536,
                                                        "num_attention_heads": 64, "num_key_value_heads": 64,
                                                        "intermediate_size": 262144})),
        "good_gpu": w("good_gpu.json", json.dumps(GPU)),
    }
    (d / "emptydir").mkdir()
    out["emptydir"] = d / "emptydir"
    if hasattr(os, "mkfifo"):
        os.mkfifo(d / "fifo.json")
        out["fifo"] = d / "fifo.json"
    return out


def _cases(f: dict[str, Path]) -> dict[str, list[str]]:
    base = ["predict", "--llm", SMALL_LLM]
    gpu_file = {k: base + ["--gpu", str(v)] for k, v in f.items()
                if not k.startswith(("llm_", "good_")) and k != "emptydir"}
    llm_file = {k: ["predict", "--gpu", "H100 SXM", "--llm", str(v)] for k, v in f.items() if k.startswith("llm_")}
    h100 = base + ["--gpu", "H100 SXM"]
    return {
        **gpu_file, **llm_file,
        "gpu_dir": base + ["--gpu", str(f["emptydir"])],
        "gpu_missing_path": base + ["--gpu", str(f["emptydir"] / "nope.json")],
        "llm_dir_without_config": ["predict", "--gpu", "H100 SXM", "--llm", str(f["emptydir"])],
        "llm_missing_path": ["predict", "--gpu", "H100 SXM", "--llm", "./no/such/config.json"],
        "gpu_dev_zero": base + ["--gpu", "/dev/zero"],
        "unknown_gpu": base + ["--gpu", "RTX 9999 Ultra"],
        "unknown_llm": ["predict", "--gpu", "H100 SXM", "--llm", "acme/NotAModel-7B"],
        "long_name": base + ["--gpu", "Z" * 50_000],
        "does_not_fit": ["predict", "--llm", BIG_LLM, "--gpu", SMALL_GPU],
        "max_batch_zero": h100 + ["--max-batch", "0"],
        "max_batch_absurd": h100 + ["--max-batch", "1000000000"],
        "max_batch_text": h100 + ["--max-batch", "abc"],
        "input_tokens_absurd": h100 + ["--input-tokens", "1000000000000"],
        "output_tokens_negative": h100 + ["--output-tokens", "-5"],
        "qps_negative": h100 + ["--workload", "server", "--qps", "-1"],
        "qps_zero": h100 + ["--workload", "server", "--qps", "0"],
        "qps_nan": h100 + ["--workload", "server", "--qps", "nan"],
        "qps_inf": h100 + ["--workload", "server", "--qps", "inf"],
        "server_without_qps": h100 + ["--workload", "server"],
        "closed_loop_zero": h100 + ["--workload", "closed_loop", "--concurrency", "0"],
        "unknown_kind": h100 + ["--workload", "batch"],
        "unknown_engine": h100 + ["--engine", "llama.cpp"],
        "mem_util_nan": h100 + ["--gpu-memory-utilization", "nan"],
        "mem_util_big": h100 + ["--gpu-memory-utilization", "1e308"],
        "missing_gpu_option": ["predict", "--llm", SMALL_LLM],
        "unknown_option": h100 + ["--turbo"],
        "unknown_command": ["benchmark"],
    }


pytestmark = pytest.mark.slow  # ~30 CLI subprocesses; run with -m slow


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    files = _files(tmp_path_factory.mktemp("hostile"))
    cases = _cases(files)
    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 2)) as pool:
        done = dict(zip(cases, pool.map(lambda a: run_cli(*a), cases.values())))
    return files, done


def test_enough_cases(results):
    assert len(results[1]) >= 25


def test_every_hostile_case_is_refused_cleanly(results):
    failures = []
    for name, r in results[1].items():
        lines = r.stderr.splitlines()
        ok = (r.returncode == 2 and len(lines) == 1 and lines[0].startswith("error:")
              and "Traceback" not in r.stderr + r.stdout and len(r.stderr) < 2000)
        if not ok:
            failures.append(f"{name}: rc={r.returncode} stderr={r.stderr[:300]!r} stdout={r.stdout[:100]!r}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("name,needle", [
    ("nan", "NaN"), ("inf", "Infinity"), ("e308", "memory_bandwidth_gb_s"), ("deep", "deeper than"),
    ("oversize", "larger than"), ("wrong_type", "tdp_w"), ("missing", "tdp_w"), ("unknown_key", "colour"),
    ("garbage", "UTF-8"), ("nul", "NUL"), ("gpu_dir", "directory"), ("gpu_missing_path", "no such file"),
    ("llm_wrong_type", "num_layers"), ("llm_heads", "num_attention_heads"), ("unknown_engine", "engine"),
    ("qps_negative", "qps"), ("does_not_fit", "does not fit"), ("llm_rwkv", "attention"),
    ("max_batch_text", "--max-batch"), ("gpu_dev_zero", "not a regular file"),
])
def test_messages_name_the_problem(results, name, needle):
    assert needle in results[1][name].stderr


def test_newlines_in_names_cannot_forge_lines(results):
    r = results[1]["llm_newline"]
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "\\n" in r.stderr


@pytest.mark.parametrize("args", [
    ["predict", "--llm", "{llm}", "--gpu", "H100 SXM"],
    ["predict", "--llm", "{llm}", "--gpu", "{good_gpu}", "--json"],
    ["predict", "--llm", "{llm}", "--gpu", "H100 SXM", "--workload", "server", "--qps", "0.5"],
    ["gpus"], ["llms", "--json"], ["--version"], ["predict", "--help"],
])
def test_success_is_status_zero(results, args):
    files = results[0]
    r = run_cli(*(a.format(llm=SMALL_LLM, good_gpu=files["good_gpu"]) for a in args))
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr and not r.stderr.strip()
    if "--json" in args and args[0] == "predict":
        out = json.loads(r.stdout)
        assert out["gpu"] == GPU["name"] and out["power_w"] > 0

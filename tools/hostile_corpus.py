#!/usr/bin/env python3
"""Hostile-input corpus: hundreds of bad inputs through the CLI and the Python API, each classified.

Classes: ``clean error`` (a WattGPUError / ``error:`` line that names what is wrong), ``sane result``
(finite, physically bounded numbers), ``vague message`` (a clean error that does not name the field or
file at fault), ``traceback`` (any other exception, or a CLI internal error / Python traceback),
``nonsense`` (a result where there must be an error, or numbers that break physics), ``hang`` (over the
per-case time limit) and ``memory blow-up`` (over the memory cap). Exits 1 if any case is a traceback,
nonsense, hang or blow-up.

Cases run in worker processes (address space capped at ``--mem-mib``, each case under ``--timeout``
seconds); CLI cases call ``wattgpu.cli.main`` in the worker, and a few also run as real subprocesses.
Uses only the standard library and the wattgpu package:

    PYTHONPATH=runtime python tools/hostile_corpus.py [-v]
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
LLM = "meta-llama/Llama-3.1-8B-Instruct"
GPU_OK = dict(name="Corpus GPU", tdp_w=300, memory_size_gb=48, memory_bandwidth_gb_s=900, fp16_tflops=150,
              transistors_million=None, release_year=2022)
HF_OK = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
         "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256, "max_position_embeddings": 8192}
CLASSES = ("clean error", "sane result", "vague message", "traceback", "nonsense", "hang", "memory blow-up")
BAD = ("traceback", "nonsense", "hang", "memory blow-up")
SPECIAL_NUMBERS: list[Any] = [None, "12", math.nan, math.inf, -math.inf, -1, 0, 1e30, 10**400, True, [], {}]
SPECIAL_TEXT = ["nan", "inf", "-inf", "1e400", "-1", "0", "1e30", "abc", "0x10", "1_000", " ", "１２"]


@dataclass
class Case:
    """One hostile input. ``expect``: words of which a clean error must contain one (the field/file);
    ``must_fail``: a result instead of an error is nonsense."""

    name: str
    run: Callable[[], Any] | None = None
    argv: list[str] | None = None
    expect: tuple[str, ...] = ()
    must_fail: bool = False
    subprocess: bool = False
    tags: dict[str, Any] = field(default_factory=dict)


# ------------------------------------------------------------------ fixtures
def make_fixtures(d: Path) -> dict[str, str]:
    """Files the cases point at (created once, in a temporary directory)."""
    (d / "dir").mkdir(exist_ok=True)
    (d / "modeldir").mkdir(exist_ok=True)
    if not (d / "fifo").exists():
        os.mkfifo(d / "fifo")
    if not (d / "loop").is_symlink():
        (d / "loop").symlink_to(d / "loop")
    files = {
        "empty.json": b"", "empty.csv": b"", "binary.json": bytes(range(256)) * 20,
        "binary.csv": bytes(range(256)) * 20, "latin1.csv": "llm,gpu\ncafé,A30\n".encode("latin-1"),
        "nan.json": b'{"tdp_w": NaN}', "deep.json": b"[" * 5000 + b"]" * 5000, "array.json": b"[1,2]",
        "big.json": b" " * 1_000_001 + b"{}", "bigint.json": b'{"tdp_w": ' + b"9" * 5000 + b"}",
        "longline.csv": b"llm,gpu\n" + b"x" * (2 << 20) + b"\n", "noheader.csv": b"a,b\n1,2\n",
        "dupheader.csv": b"llm,gpu,gpu\nx,y,z\n", "nul.csv": b"llm,gpu\n\x00\x00,A30\n",
        "ok.csv": f"llm,gpu\n{LLM},NVIDIA A30\n".encode(),
        "idle_over_tdp.json": json.dumps({**GPU_OK, "idle_power_w": 500, "tdp_w": 100}).encode(),
        "clocks.json": json.dumps({**GPU_OK, "base_clock_mhz": 2000, "boost_clock_mhz": 1000}).encode(),
        "zero_mem.json": json.dumps({**GPU_OK, "memory_size_gb": 0}).encode(),
        "gpu_ok.json": json.dumps(GPU_OK).encode(), "hf_ok.json": json.dumps(HF_OK).encode(),
        "hf_heads.json": json.dumps({**HF_OK, "num_attention_heads": 30}).encode(),
        "hf_neg.json": json.dumps({**HF_OK, "num_hidden_layers": -3}).encode(),
        "hf_str.json": json.dumps({**HF_OK, "hidden_size": "4096"}).encode(),
        "hf_kv.json": json.dumps({**HF_OK, "num_key_value_heads": 64}).encode(),
        # encodings and units a spreadsheet or a spec sheet invites
        "utf16.json": json.dumps(GPU_OK).encode("utf-16"), "utf16be.json": json.dumps(HF_OK).encode("utf-16-be"),
        "utf16.csv": f"llm,gpu\n{LLM},NVIDIA A30\n".encode("utf-16"),
        "utf16le.csv": f"llm,gpu\n{LLM},NVIDIA A30\n".encode("utf-16-le"),
        "semicolon.csv": f"llm;gpu\n{LLM};NVIDIA A30\n".encode(), "tab.csv": f"llm\tgpu\n{LLM}\tNVIDIA A30\n".encode(),
        "tb_s.json": json.dumps({**GPU_OK, "memory_bandwidth_gb_s": 3.35}).encode(),
        "kw.json": json.dumps({**GPU_OK, "tdp_w": 0.7}).encode(),
        "bytes.json": json.dumps({**GPU_OK, "memory_size_gb": 80e9}).encode(),
        "mib.json": json.dumps({**GPU_OK, "memory_size_gb": 81920}).encode(),
        "flops.json": json.dumps({**GPU_OK, "fp16_tflops": 989.4e12}).encode(),
        "ghz.json": json.dumps({**GPU_OK, "base_clock_mhz": 1.59, "boost_clock_mhz": 1.98}).encode(),
    }
    for name, data in files.items():
        (d / name).write_bytes(data)
    (d / "modeldir" / "config.json").write_bytes(files["hf_ok.json"])
    rows = [("max_batch", "nan"), ("max_batch", "inf"), ("input_tokens", "1e400"), ("output_tokens", "-5"),
            ("qps", "nan"), ("gpu_memory_utilization", "2"), ("engine", "llama.cpp"), ("workload", "burst"),
            ("gpu", str(d / "idle_over_tdp.json")), ("gpu", "/dev/zero"), ("llm", ""), ("gpu", "Nope")]
    lines = ["llm,gpu,workload,qps,max_batch,input_tokens,output_tokens,gpu_memory_utilization,engine"]
    for col, val in rows:
        cells = {"llm": LLM, "gpu": "NVIDIA A30", "workload": "", "qps": "", "max_batch": "", "input_tokens": "",
                 "output_tokens": "", "gpu_memory_utilization": "", "engine": ""}
        cells[col] = val
        lines.append(",".join(cells.values()))
    lines.append(f"{LLM},NVIDIA A30,,,,,,,")
    (d / "mixed.csv").write_text("\n".join(lines) + "\n")
    # more than one chunk (4,096 rows): the CLI answers it on worker processes (wattgpu.csv_workers)
    (d / "bigmixed.csv").write_text("\n".join(lines[:1] + lines[1:] * 400) + "\n")
    (d / "allbad.csv").write_text("llm,gpu\nx,y\n,A30\n")
    make_new_surface_fixtures(d)
    out = {p.name: str(p) for p in d.iterdir()}
    out["long"] = str(d / ("n" * 300 + ".json"))
    out["devzero"] = "/dev/zero"
    return out


# ------------------------------------------------------------------ new surfaces (issue 26): bundles, TP, fleets,
# extreme workloads, quantisation configs
BUNDLE_FILES = ("feature_schema.json", "specs.json", "power.onnx", "itl.onnx")
# manifest damage: (name, JSON path, replacement text) — every one must be refused as a damaged bundle (exit 3)
MANIFEST_DAMAGE: list[tuple[str, tuple[str, ...], str]] = [
    ("version-str", ("schema_version",), '"1"'), ("version-float", ("schema_version",), "1.0"),
    ("version-bool", ("schema_version",), "true"), ("version-null", ("schema_version",), "null"),
    ("version-99", ("schema_version",), "99"), ("version-huge", ("schema_version",), "9" * 400),
    ("interval-inf", ("intervals", "itl", "factors", "80"), "[0.5, 1e999]"),
    ("interval-Infinity", ("intervals", "itl", "factors", "80"), "[0.5, Infinity]"),
    ("interval-nan", ("intervals", "power", "factors", "95"), "[NaN, 2]"),
    ("interval-huge", ("intervals", "itl", "factors", "80"), "[0.5, 1e300]"),
    ("interval-inverted", ("intervals", "itl", "factors", "80"), "[2, 0.5]"),
    ("interval-zero", ("intervals", "itl", "factors", "80"), "[0, 2]"),
    ("interval-level", ("intervals", "itl", "factors"), '{"150": [0.5, 2]}'),
    ("interval-str", ("intervals", "itl", "factors", "80"), '["0.5", "2"]'),
    ("parity-neg", ("models", "itl", "parity_rtol"), "-1"), ("parity-inf", ("models", "power", "parity_max_rel_diff"), "1e999"),
    ("params-range-inf", ("domain", "llm_params_b"), "[0, 1e999]"), ("gpu-range-neg", ("domain", "gpu_ranges", "tdp_w"), "[-5, 700]"),
    ("tp-range-zero", ("domain", "tp_range"), "[0, 8]"), ("rows-neg", ("training", "targets", "power", "rows"), "-3"),
    ("rows-bool", ("training", "targets", "power", "rows"), "true"), ("models-list", ("models",), "[]"),
    ("features-empty", ("models", "itl", "features"), "[]"), ("file-path", ("models", "itl", "file"), '"../itl.onnx"'),
    ("sha-short", ("catalog", "sha256"), '"abc"'), ("deep-value", ("producer", "python"), "[" * 3000 + "]" * 3000),
]


def _json_path_set(doc: dict[str, Any], path: tuple[str, ...], marker: str) -> None:
    node: Any = doc
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = marker


def make_new_surface_fixtures(d: Path) -> None:
    """Damaged copies of the packaged bundle, hostile HF configs and what-if GPUs (synthetic, test-only)."""
    import hashlib
    import shutil

    packaged = ROOT / "runtime" / "wattgpu" / "models"
    bundles = d / "bundles"
    bundles.mkdir(exist_ok=True)

    def copy(name: str) -> Path:
        b = bundles / name
        if not b.exists():
            shutil.copytree(packaged, b)
        return b

    manifest = json.loads((packaged / "feature_schema.json").read_text())
    for name, path, text in MANIFEST_DAMAGE:
        m = json.loads(json.dumps(manifest))
        _json_path_set(m, path, "__HOSTILE__")
        (copy(f"m-{name}") / "feature_schema.json").write_text(json.dumps(m).replace('"__HOSTILE__"', text))
    for f in BUNDLE_FILES:
        tag = f.split(".")[0]
        b = copy(f"fifo-{tag}")
        (b / f).unlink()
        os.mkfifo(b / f)
        b = copy(f"zero-{tag}")
        (b / f).unlink()
        (b / f).symlink_to("/dev/zero")
        b = copy(f"dir-{tag}")
        (b / f).unlink()
        (b / f).mkdir()
        b = copy(f"missing-{tag}")
        (b / f).unlink()
        b = copy(f"trunc-{tag}")
        (b / f).write_bytes((b / f).read_bytes()[:100])
        b = copy(f"loop-{tag}")
        (b / f).unlink()
        (b / f).symlink_to(b / f)
    (copy("deep-manifest") / "feature_schema.json").write_text("[" * 50_000 + "]" * 50_000)
    (copy("deep-manifest-obj") / "feature_schema.json").write_text('{"a":' * 20_000 + "1" + "}" * 20_000)
    (copy("utf32-manifest") / "feature_schema.json").write_bytes(json.dumps(manifest).encode("utf-32"))
    (copy("nul-manifest") / "feature_schema.json").write_bytes(b"\x00" * 64)
    for name, body in (("deep-catalog", b'{"gpus": ' + b"[" * 50_000 + b"]" * 50_000 + b"}"),
                       ("nan-catalog", b'{"catalog_version": NaN}'), ("array-catalog", b"[1, 2]"),
                       ("binary-catalog", bytes(range(256)) * 4)):
        b = copy(name)
        (b / "specs.json").write_bytes(body)
        m = json.loads(json.dumps(manifest))
        m["catalog"]["sha256"] = hashlib.sha256(body).hexdigest()  # consistent hashes: only the content is hostile
        (b / "feature_schema.json").write_text(json.dumps(m))
    # Hugging Face configs (quantisation, heads, experts, Mamba patterns, encodings)
    cfgs = d / "cfgs"
    cfgs.mkdir(exist_ok=True)
    hostile_cfgs: dict[str, dict[str, Any]] = {
        "bits0": {"quantization_config": {"quant_method": "gptq", "bits": 0}},
        "bits-4": {"quantization_config": {"quant_method": "gptq", "bits": -4}},
        "bits4.5": {"quantization_config": {"quant_method": "gptq", "bits": 4.5}},
        "bits-str": {"quantization_config": {"quant_method": "awq", "w_bit": "4"}},
        "bits-true": {"quantization_config": {"quant_method": "gptq", "bits": True}},
        "bits-1000": {"quantization_config": {"quant_method": "gptq", "bits": 1000}},
        "ct-bits0": {"quantization_config": {"quant_method": "compressed-tensors",
                                             "config_groups": {"g": {"weights": {"num_bits": 0}}}}},
        "ct-bits-neg": {"quantization_config": {"quant_method": "compressed-tensors",
                                                "config_groups": {"g": {"weights": {"num_bits": -8}}}}},
        "kv6": {"num_key_value_heads": 6}, "kv5": {"num_key_value_heads": 5, "num_attention_heads": 32},
        "kv0": {"num_key_value_heads": 0}, "kv-neg": {"num_key_value_heads": -8},
        "mamba-pure": {"model_type": "nemotron_h", "hybrid_override_pattern": "M" * 32},
        "mamba-mlp": {"model_type": "nemotron_h", "hybrid_override_pattern": "M-" * 16},
        "mamba-short": {"model_type": "nemotron_h", "hybrid_override_pattern": "M*"},
        "experts-100k": {"model_type": "mixtral", "num_local_experts": 100_000, "num_experts_per_tok": 2},
        "experts-over": {"model_type": "mixtral", "num_local_experts": 100_001, "num_experts_per_tok": 2},
        "experts-topk": {"model_type": "mixtral", "num_local_experts": 8, "num_experts_per_tok": 9},
    }
    for name, change in hostile_cfgs.items():
        (cfgs / f"{name}.json").write_text(json.dumps({**HF_OK, **change}))
    for enc in ("utf-32", "utf-32-le", "utf-32-be"):
        (cfgs / f"{enc}.json").write_bytes(json.dumps(HF_OK).encode(enc))
        (cfgs / f"{enc}.csv").write_bytes(f"llm,gpu\n{LLM},NVIDIA A30\n".encode(enc))
    # what-if GPUs for tensor parallelism over slow links (synthetic specs)
    gpus = d / "gpus"
    gpus.mkdir(exist_ok=True)
    for name, extra in (("nvlink1", {"nvlink_gb_s": 1, "nvlink_group": 8}),
                        ("pcie1x1", {"nvlink_group": 0, "pcie_gen": 1, "pcie_lanes": 1, "max_group": 8}),
                        ("nvlink-fast", {"nvlink_gb_s": 100_000, "nvlink_group": 4096, "max_group": 4096})):
        (gpus / f"{name}.json").write_text(json.dumps({**GPU_OK, "name": f"What-if {name}", "memory_size_gb": 80,
                                                        **extra}))
    # CSVs: closed-loop extremes, tiny rates, and a run against a damaged bundle
    rows = ["llm,gpu,workload,qps,concurrency,max_batch,tp"]
    for c in ("1", "65536", "4096", "0.5"):
        for b in ("1", "16", "65536"):
            rows.append(f"{LLM},NVIDIA H100 SXM5 80GB,closed_loop,,{c},{b},1")
    for q in ("1e-320", "5e-324", "1e-300", "1e-9", "1e300", "1.7976931348623157e308"):
        rows.append(f"{LLM},NVIDIA A30,server,{q},,256,1")
        rows.append(f"{LLM},NVIDIA H100 SXM5 80GB,server,{q},,256,8")
    (d / "extreme.csv").write_text("\n".join(rows) + "\n")


def new_surface_cases(fx: dict[str, str]) -> list[Case]:
    """Cases over model bundles, tensor parallelism, fleets, extreme workloads and quantisation (issue 26)."""
    import wattgpu
    from wattgpu import Predictor, Workload, rank
    from wattgpu.batch import predict_csv

    cases: list[Case] = []
    d = Path(fx["ok.csv"]).parent
    out_csv = str(d / "out.csv")
    bundles = sorted(p.name for p in (d / "bundles").iterdir())
    damaged = {"exit": 3, "error_class": "ArtifactError"}
    for b in bundles:
        path = str(d / "bundles" / b)
        what = ("feature_schema.json", "specs.json", ".onnx", "manifest", "catalog", "bundle")
        cases.append(Case(f"Predictor(models={b})", run=lambda q=path: Predictor(models=q).predict("A30", LLM),
                          must_fail=True, expect=what, tags=damaged))
        cases.append(Case(f"cli predict --models {b}", argv=["predict", "--llm", LLM, "--gpu", "A30", "--models", path],
                          must_fail=True, expect=what, tags=damaged))
        if b.startswith(("m-", "fifo-", "zero-", "deep-", "trunc-feature", "trunc-specs")):
            for argv in (["rank", "--llm", LLM, "--gpus", "A30,H100 SXM"], ["gpus"], ["llms"],
                         ["rank", "--llm", LLM, "--gpus", "A30", "--qps", "20", "--replicas", "auto"],
                         ["predict", "--input", fx["ok.csv"], "--output", out_csv],
                         ["predict", "--input", fx["ok.csv"], "--output", out_csv, "--on-error", "stop"]):
                cases.append(Case(f"cli {' '.join(argv[:2])} --models {b}", argv=[*argv, "--models", path],
                                  must_fail=True, expect=what, tags=damaged))
    for b in ("fifo-feature_schema", "zero-power", "deep-manifest", "fifo-specs"):  # real processes: exit 3, no hang
        path = str(d / "bundles" / b)
        cases.append(Case(f"process predict --models {b}", argv=["predict", "--llm", LLM, "--gpu", "A30", "--models", path],
                          subprocess=True, must_fail=True, expect=("feature_schema.json", "specs.json", ".onnx"),
                          tags={"exit": 3}))
        cases.append(Case(f"process csv --models {b}", argv=["predict", "--input", fx["ok.csv"], "--output", out_csv,
                                                             "--models", path],
                          subprocess=True, must_fail=True, expect=("feature_schema.json", "specs.json", ".onnx"),
                          tags={"exit": 3}))
    # quantisation, heads, experts, Mamba patterns, encodings
    cfg_dir = d / "cfgs"
    cfg_expect = ("quantization_config", "num_kv_heads", "num_key_value_heads", "Mamba", "experts", "num_experts",
                  "hybrid_override_pattern", "UTF-32", "experts_per_tok")
    for f in sorted(cfg_dir.iterdir()):
        if f.suffix == ".csv":
            cases.append(Case(f"cli --input {f.name}", argv=["predict", "--input", str(f), "--output", out_csv],
                              must_fail=True, expect=("UTF-32",)))
            continue
        must = f.stem not in ("mamba-mlp",)
        cases.append(Case(f"llm config {f.name}", run=lambda q=str(f): wattgpu.predict("H100 SXM", q), must_fail=must,
                          expect=cfg_expect))
        cases.append(Case(f"cli --llm {f.name}", argv=["predict", "--llm", str(f), "--gpu", "H100 SXM"], must_fail=must,
                          expect=cfg_expect))
    # tensor parallelism: degrees × GPUs (catalog and what-if slow links) × workloads
    tp_gpus = ["A30", "H100 SXM", "GB200", "RTX A6000", *(str(p) for p in sorted((d / "gpus").iterdir()))]
    for g in tp_gpus:
        for tp in (1, 2, 3, 4, 8, 64, 1024):
            for wl in ({}, {"kind": "server", "qps": 5.0}, {"kind": "closed_loop", "concurrency": 65536}):
                cases.append(Case(f"predict tp={tp} {os.path.basename(g)[:20]} {wl.get('kind', 'offline')}",
                                  run=lambda g=g, tp=tp, wl=wl: wattgpu.predict(g, LLM, tp=tp, **wl),
                                  expect=("tp", "heads", "group", "fit", "link", "interconnect", "GPU")))
        cases.append(Case(f"rank --tp auto {os.path.basename(g)[:20]}",
                          run=lambda g=g: rank("deepseek-ai/DeepSeek-R1-0528", gpus=[g], tp="auto"),
                          expect=("tp", "fit", "GPU")))
    # fleets: replicas × rates × GPUs (the fixed point, throughput ≤ batch ÷ ITL, capacity)
    for llm, gpus, tp in ((LLM, ["RTX A6000", "A30", "H100 SXM", "A10", "L4"], 1),
                          ("meta-llama/Llama-3.1-8B-Instruct", ["RTX A6000"], 1),
                          ("deepseek-ai/DeepSeek-R1-0528", ["GB200", "GB300"], 4)):
        for qps in (1e-9, 0.3, 5.0, 20.0, 1000.0, 1e6):
            for reps in ("auto", 1, 7):
                cases.append(Case(f"rank {llm.split('/')[-1][:14]} qps={qps:g} replicas={reps} tp={tp}",
                                  run=lambda llm=llm, gpus=gpus, qps=qps, reps=reps, tp=tp:
                                  rank(llm, Workload(kind="server", qps=qps, tp=tp), gpus=gpus, replicas=reps),
                                  expect=("replicas", "qps")))
        cases.append(Case(f"cli rank {llm.split('/')[-1][:14]} --qps 20 --replicas auto",
                          argv=["rank", "--llm", llm, "--gpus", ",".join(gpus), "--qps", "20", "--replicas", "auto",
                                "--tp", str(tp)]))
    for reps in ("0", "-1", "1.5", "1e400", "nan", "auto ", "1000001", "x"):
        cases.append(Case(f"cli rank --replicas {reps!r}", argv=["rank", "--llm", LLM, "--gpus", "A30", "--qps", "1",
                                                                 "--replicas", reps], expect=("replicas",)))
    # extreme workloads through predict, rank and the CSV batch
    for qps in ("1e-320", "5e-324", "1e-300", "1e-10", "1e-9", "1e300", "1.7976931348623157e308"):
        for argv in (["predict", "--gpu", "A30"], ["rank", "--gpus", "A30,H100 SXM"],
                     ["rank", "--gpus", "A30", "--replicas", "auto"], ["rank", "--gpus", "A30", "--replicas", "3"]):
            cases.append(Case(f"cli {argv[0]} {' '.join(argv[3:])} --qps {qps}",
                              argv=[*argv, "--llm", LLM, "--workload", "server", "--qps", qps],
                              expect=("qps", "replicas")))
        cases.append(Case(f"predict(qps={qps})", run=lambda q=float(qps): wattgpu.predict("A30", LLM, kind="server", qps=q),
                          expect=("qps",)))
    for conc in (1, 65536, 4096.5):
        for mb in (1, 16, 65536):
            cases.append(Case(f"closed loop {conc} clients, max_batch {mb}",
                              run=lambda c=conc, b=mb: wattgpu.predict("H100 SXM", LLM, kind="closed_loop", concurrency=c,
                                                                        max_batch=b), expect=("concurrency",)))
    for it, ot in ((1, 1), (1_048_576, 1), (1, 1_048_576), (1_048_576, 1_048_576)):
        cases.append(Case(f"tokens {it}->{ot}", run=lambda i=it, o=ot: wattgpu.predict("H100 SXM", LLM, input_tokens=i,
                                                                                   output_tokens=o),
                          expect=("input_tokens", "output_tokens", "fit", "context")))
    cases.append(Case("csv extreme.csv", run=lambda: _csv_sane(fx["extreme.csv"], out_csv)))
    # outputs that cannot be written
    for p in ("/dev/full", str(d / "no" / "such" / "out.csv"), str(d / "no" / "plot.svg")):
        if p.endswith(".svg"):
            cases.append(Case(f"cli rank --plot {os.path.basename(p)} (missing folder)",
                              argv=["rank", "--llm", LLM, "--gpus", "A30", "--plot", p], must_fail=True,
                              expect=("folder", "does not exist")))
        else:
            cases.append(Case(f"cli --output {p[-20:]}", argv=["predict", "--input", fx["ok.csv"], "--output", p],
                              must_fail=True, expect=("not a regular file", "does not exist", "folder", "full")))
    return cases


def _csv_sane(src: str, dst: str) -> Any:
    """A batch run whose every predicted row is consistent (finite, utilization ≤ 1 unless overloaded)."""
    import csv

    from wattgpu.batch import predict_csv

    summary = predict_csv(src, dst)
    with open(dst, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            if row["error"]:
                continue
            for k in ("power_w", "itl_s", "throughput_tok_s", "energy_per_token_j", "utilization", "max_qps"):
                v = float(row[k])
                if not math.isfinite(v):
                    raise AssertionError(f"nonsense: {k} = {row[k]} on line {row}")
            if float(row["utilization"]) > 1 + 1e-9 and row["overloaded"] != "true":
                raise AssertionError(f"nonsense: utilization {row['utilization']} without overloaded")
    return summary


# ------------------------------------------------------------------ cases
def build_cases(fx: dict[str, str]) -> list[Case]:
    import wattgpu
    from wattgpu import Catalog, GpuSpec, LlmSpec, Predictor, Workload, default_catalog, rank
    from wattgpu.batch import predict_csv
    from wattgpu.hfconfig import llm_from_hf_config, load_llm_file
    from wattgpu.plot import render_svg
    from wattgpu.specs import GPU_RANGES, LLM_RANGES
    from wattgpu.workload import WORKLOAD_NUMBERS

    cases: list[Case] = []
    pred = Predictor()
    out_csv = os.path.join(os.path.dirname(fx["ok.csv"]), "out.csv")

    # Workload fields × special values (API)
    for fname in list(WORKLOAD_NUMBERS) + ["kind", "engine"]:
        for v in SPECIAL_NUMBERS:
            base = {"kind": "server", "qps": 1.0} if fname == "qps" else \
                {"kind": "closed_loop", "concurrency": 4} if fname == "concurrency" else {}
            kw = {**base, fname: v}
            cases.append(Case(f"Workload({fname}={v!r:.20})", run=lambda kw=kw: wattgpu.predict("A30", LLM, **kw),
                              expect=(fname,)))
    # GPU fields × specials (API, spec dicts)
    for fname in GPU_RANGES:
        for v in (math.nan, -1, 0, 1e30, "300", None, True):
            d = {**GPU_OK, fname: v}
            cases.append(Case(f"GpuSpec({fname}={v!r:.20})", run=lambda d=d: pred.predict(GpuSpec.from_dict(d), LLM),
                              expect=(fname, "does not fit")))
    # LLM fields × specials
    llm_ok = pred.resolve_llm(LLM).to_dict()
    for fname in LLM_RANGES:
        for v in (math.nan, -1, 0, 1e30, "8"):
            d = {**llm_ok, fname: v}
            cases.append(Case(f"LlmSpec({fname}={v!r:.20})", run=lambda d=d: pred.predict("H100 SXM", LlmSpec.from_dict(d)),
                              expect=(fname, "does not fit", "active_params_b", "num_kv_heads", "hidden_size")))
    # HF configs
    for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size", "num_key_value_heads",
                "intermediate_size", "max_position_embeddings"):
        for v in (None, -1, 0, 1e30, "x", math.nan, [1]):
            cfg = {**HF_OK, key: v}
            cases.append(Case(f"hf_config({key}={v!r:.20})", run=lambda c=cfg: pred.predict("H100 SXM", llm_from_hf_config(c, "x")),
                              expect=(key, "hidden_size", "num_layers", "num_attention_heads", "num_kv_heads",
                                      "vocab_size", "intermediate_size", "max_position_embeddings", "config",
                                      "head", "layers")))
    # cross-field rules
    for f in ("idle_over_tdp.json", "clocks.json", "zero_mem.json"):
        cases.append(Case(f"gpu file {f}", run=lambda f=f: pred.predict(fx[f], LLM), must_fail=True,
                          expect=("idle_power_w", "boost_clock_mhz", "memory_size_gb")))
    for f in ("tb_s.json", "kw.json", "bytes.json", "mib.json", "flops.json", "ghz.json"):  # unit slips: named
        cases.append(Case(f"gpu file {f}", run=lambda f=f: pred.predict(fx[f], LLM), must_fail=True,
                          expect=("looks like",)))
    cases.append(Case("gpu file utf16.json", run=lambda: pred.predict(fx["utf16.json"], LLM), must_fail=True,
                      expect=("UTF-16",)))
    cases.append(Case("llm file utf16be.json", run=lambda: pred.predict("H100 SXM", fx["utf16be.json"]), must_fail=True,
                      expect=("UTF-16",)))
    for f, words in (("utf16.csv", "UTF-16"), ("utf16le.csv", "UTF-16"), ("semicolon.csv", "separates columns"),
                     ("tab.csv", "separates columns")):
        cases.append(Case(f"predict_csv({f})", run=lambda f=f: predict_csv(fx[f], out_csv), must_fail=True,
                          expect=(words,)))
        cases.append(Case(f"cli --input {f}", argv=["predict", "--input", fx[f], "--output", out_csv],
                          must_fail=True, expect=(words,)))
    for kind in ("closed_loop", "offline"):  # fewer than one sequence decoding: only a server's mean can be
        cases.append(Case(f"Workload({kind}, concurrency=0.001)", must_fail=True, expect=("concurrency",),
                          run=lambda k=kind: pred.predict("A30", LLM, Workload(kind=k, concurrency=0.001))))
        cases.append(Case(f"cli --workload {kind} --concurrency 0.5", must_fail=True, expect=("concurrency",),
                          argv=["predict", "--llm", LLM, "--gpu", "A30", "--workload", kind, "--concurrency", "0.5"]))
    for doc in ({}, [], None, "x", {"catalog_version": 1, "gpus": "x", "llms": []},
                {"catalog_version": 1, "gpus": [1], "llms": []}, {"catalog_version": 1, "gpus": [{"spec": []}], "llms": []},
                {"catalog_version": 1, "gpus": [], "llms": [{"name": "x"}]},
                {"catalog_version": 1, "gpus": [{"spec": {"tdp_w": 3}}], "llms": []}):
        cases.append(Case(f"Catalog.from_json({json.dumps(doc)[:30]})", run=lambda d=doc: Catalog.from_json(d),
                          must_fail=True, expect=("malformed catalog", "invalid catalog entry")))
    # model bundle directories that are not one: a bad argument (exit 2) or a bundle missing its manifest (3)
    for p, words in (("missing-dir", "does not exist"), ("ok.csv", "is not a directory"), ("dir", "feature_schema.json"),
                     ("long", "cannot be read"), ("", "does not exist")):
        path = fx.get(p, os.path.join(os.path.dirname(fx["ok.csv"]), p) if p else "")
        cases.append(Case(f"Predictor(models={p!r})", run=lambda q=path: Predictor(models=q).predict("A30", LLM),
                          must_fail=True, expect=(words,)))
        if p:
            cases.append(Case(f"cli --models {p}", argv=["predict", "--llm", LLM, "--gpu", "A30", "--models", path],
                              must_fail=True, expect=(words,)))
    for f in ("hf_heads.json", "hf_neg.json", "hf_str.json", "hf_kv.json"):
        cases.append(Case(f"llm file {f}", run=lambda f=f: pred.predict("H100 SXM", fx[f]), must_fail=True,
                          expect=("num_attention_heads", "num_layers", "num_hidden_layers", "hidden_size", "num_kv_heads")))
    # path kinds × readers
    paths = ["dir", "fifo", "loop", "long", "devzero", "empty.json", "binary.json", "nan.json", "deep.json",
             "array.json", "big.json", "bigint.json"]
    for p in paths:
        path = fx.get(p, p)
        cases.append(Case(f"resolve_gpu({p})", run=lambda q=path: pred.resolve_gpu(Path(q)), must_fail=True,
                          expect=(os.path.basename(path)[:40], "GPU")))
        cases.append(Case(f"load_llm_file({p})", run=lambda q=path: load_llm_file(q), must_fail=True,
                          expect=(os.path.basename(path)[:40],)))
    for p in ["dir", "fifo", "loop", "long", "devzero", "empty.csv", "binary.csv", "latin1.csv", "longline.csv",
              "noheader.csv", "dupheader.csv", "nul.csv"]:
        path = fx.get(p, p)
        cases.append(Case(f"predict_csv({p})", run=lambda q=path: predict_csv(q, out_csv), must_fail=True,
                          expect=(os.path.basename(path)[:40],)))
    for p in ["dir", "fifo", "devzero", "/dev/full", "/nonexistent/dir/o.csv"]:
        path = fx.get(p, p)
        cases.append(Case(f"predict_csv(out={p})", run=lambda q=path: predict_csv(fx["ok.csv"], q), must_fail=True,
                          expect=(os.path.basename(path)[:40] or path,)))
    # public API × wrong types
    cat = default_catalog()
    api: dict[str, Callable[[Any], Any]] = {
        "catalog.gpu": cat.gpu, "catalog.llm": cat.llm, "catalog.find_gpu": cat.find_gpu,
        "predict(llm)": lambda x: wattgpu.predict("A30", x), "predict(gpu)": lambda x: wattgpu.predict(x, LLM),
        "predict(workload)": lambda x: wattgpu.predict("A30", LLM, x), "predict_many": wattgpu.predict_many,
        "rank(llm)": rank, "rank(gpus)": lambda x: rank(LLM, gpus=x), "rank(workload)": lambda x: rank(LLM, x, gpus=["A30"]),
        "rank(sort)": lambda x: rank(LLM, gpus=["A30"], sort=x), "rank(max_itl_ms)": lambda x: rank(LLM, gpus=["A30"], max_itl_ms=x),
        "rank(pue)": lambda x: rank(LLM, gpus=["A30"], pue=x), "Predictor(model_dir)": Predictor,
        "predict_table": pred.predict_table, "predict_specs": pred.predict_specs,
        "Workload.from_dict": Workload.from_dict, "GpuSpec.from_dict": GpuSpec.from_dict,
        "llm_from_hf_config": lambda x: llm_from_hf_config(x, "n"), "predict_csv(in)": lambda x: predict_csv(x, out_csv),
        "render_svg": render_svg,
    }
    for name, fn in api.items():
        for v in (None, "A30", 5, {}, [None], b"x"):
            cases.append(Case(f"{name}({v!r:.12})", run=lambda fn=fn, v=v: fn(v),
                              expect=(name.split("(")[-1].rstrip(")").split(".")[-1], "gpu", "llm", "workload", "rows",
                                      "triples", "Unknown", "model_dir", "result", "<root>", "path", "sort",
                                      "max_itl_ms", "pue", "config")))
    # CSV cells through the batch API
    for col in ("max_batch", "input_tokens", "output_tokens", "qps", "concurrency", "gpu_memory_utilization",
                "num_requests", "engine", "workload"):
        for text in SPECIAL_TEXT:
            cases.append(Case(f"csv cell {col}={text!r}", run=lambda c=col, t=text: _csv_cell(fx, c, t),
                              expect=(f"column {col!r}", "column 'qps'", "column 'concurrency'", "column 'workload'")))
    # CLI (in-process main), options
    for opt in ("--max-batch", "--qps", "--concurrency", "--input-tokens", "--output-tokens",
                "--gpu-memory-utilization", "--pue", "--usd-per-kwh", "--gco2-per-kwh", "--usd-per-gpu-hour",
                "--max-itl-ms", "--max-ttft-ms"):
        for text in ("nan", "inf", "-1", "0", "1e400", "abc"):
            if opt == "--usd-per-gpu-hour" and text == "0":
                continue  # a free GPU-hour is valid
            argv = ["predict", "--llm", LLM, "--gpu", "A30", opt, text]
            if opt == "--qps":
                argv += ["--workload", "server"]
            if opt == "--concurrency":
                argv += ["--workload", "closed_loop"]
            cases.append(Case(f"cli {opt} {text}", argv=argv,
                              expect=(opt, opt.lstrip("-").replace("-", "_"), "usd_per_kwh", "gco2_per_kwh", "pue")))
    for g in ("dir", "fifo", "loop", "long", "devzero", "idle_over_tdp.json", "", " ", "\n", "A30\nB"):
        cases.append(Case(f"cli --gpu {g!r:.20}", argv=["predict", "--llm", LLM, "--gpu", fx.get(g, g)], must_fail=True,
                          expect=(os.path.basename(fx.get(g, g))[:30] or "GPU", "GPU", "idle_power_w")))
    for p in ("dir", "fifo", "loop", "long", "devzero", "empty.csv", "binary.csv", "nul.csv", "noheader.csv"):
        cases.append(Case(f"cli --input {p}", argv=["predict", "--input", fx.get(p, p), "--output", out_csv],
                          must_fail=True, expect=(os.path.basename(fx.get(p, p))[:30], "--input")))
    cases.append(Case("cli --input mixed.csv (skip)", argv=["predict", "--input", fx["mixed.csv"], "--output", out_csv],
                      tags={"batch_exit": 1}))
    cases.append(Case("cli --input allbad.csv (skip)", argv=["predict", "--input", fx["allbad.csv"], "--output", out_csv],
                      tags={"batch_exit": 1}))
    cases.append(Case("cli --input ok.csv", argv=["predict", "--input", fx["ok.csv"], "--output", out_csv],
                      tags={"batch_exit": 0}))
    cases.append(Case("cli --input mixed.csv (stop)", argv=["predict", "--input", fx["mixed.csv"], "--output", out_csv,
                                                            "--on-error", "stop"], must_fail=True, expect=("line",)))
    for gpus in ("", ",", "A30,,", "Nope", "A30," * 50):
        cases.append(Case(f"cli rank --gpus {gpus[:12]!r}", argv=["rank", "--llm", LLM, "--gpus", gpus],
                          expect=("gpus", "GPU")))
    for args in (["--max-ttft-ms", "nan"], ["--max-ttft-ms", "0"], ["--usd-per-gpu-hour", "-2"],
                 ["--usd-per-gpu-hour", "1e9"], ["--max-utilization", "0.5"],
                 ["--qps", "5", "--replicas", "auto", "--max-utilization", "nan"],
                 ["--qps", "5", "--replicas", "auto", "--max-utilization", "1.5"],
                 ["--qps", "5", "--replicas", "auto", "--max-utilization", "0"]):
        cases.append(Case(f"cli rank {' '.join(args)[:40]}", argv=["rank", "--llm", LLM, "--gpus", "A30", *args],
                          must_fail=True, expect=("max_ttft_ms", "usd_per_gpu_hour", "max_utilization")))
    for args in (["--max-itl-ms", "nan"], ["--max-itl-ms", "-1"], ["--sort", "cost"], ["--plot", fx["dir"]],
                 ["--plot", fx["fifo"]], ["--plot", "/dev/full"], ["--plot", "plot.png"], ["--plot", " "],
                 ["--plot", ""]):
        cases.append(Case(f"cli rank {' '.join(args)[:30]}", argv=["rank", "--llm", LLM, "--gpus", "A30", *args],
                          must_fail=True, expect=("max_itl_ms", "--max-itl-ms", "--sort", "plot", "--plot", "dir",
                                                  "fifo", "full", ".svg", "blank path", "empty path")))
    # a few through real processes (exit status, stderr, no hang at process level)
    for p in ("fifo", "devzero", "long", "binary.csv", "mixed.csv", "bigmixed.csv", "ok.csv"):
        cases.append(Case(f"process --input {p}", argv=["predict", "--input", fx.get(p, p), "--output", out_csv],
                          subprocess=True, must_fail=p not in ("mixed.csv", "bigmixed.csv", "ok.csv"),
                          expect=(os.path.basename(fx.get(p, p))[:30],),
                          tags={"batch_exit": {"mixed.csv": 1, "bigmixed.csv": 1, "ok.csv": 0}.get(p)}))
    for argv in (["predict", "--llm", LLM, "--gpu", "A30", "--max-batch", "nan"],
                 ["predict", "--llm", LLM, "--gpu", fx["fifo"]], ["rank", "--llm", LLM, "--gpus", "A30"]):
        cases.append(Case(f"process {' '.join(argv[:5])[:40]}", argv=argv, subprocess=True,
                          expect=("max-batch", "max_batch", "fifo")))
    cases.extend(new_surface_cases(fx))
    return cases


def _csv_cell(fx: dict[str, str], col: str, text: str) -> Any:
    from wattgpu.batch import predict_csv

    d = os.path.dirname(fx["ok.csv"])
    src, dst = os.path.join(d, f"cell_{os.getpid()}.csv"), os.path.join(d, f"cell_{os.getpid()}_out.csv")
    row = {"llm": LLM, "gpu": "NVIDIA A30", "workload": "server" if col == "qps" else
           "closed_loop" if col == "concurrency" else "", col: text}
    import csv

    with open(src, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(row))
        w.writeheader()
        w.writerow(row)
    msgs: list[str] = []
    summary = predict_csv(src, dst, report=msgs.append)
    if summary.skipped:
        from wattgpu import WattGPUError

        raise WattGPUError(msgs[0])  # classified like any other error: clean if it names the column
    return summary


# ------------------------------------------------------------------ classification
def _sane_prediction(p: Any) -> str | None:
    from wattgpu.specs import default_catalog

    vals = {"power_w": p.power_w, "itl_s": p.itl_s, "throughput_tok_s": p.throughput_tok_s,
            "energy_per_token_j": p.energy_per_token_j}
    for k, v in vals.items():
        if not (isinstance(v, float) and math.isfinite(v) and v > 0):
            return f"{k} = {v!r}"
    for k in ("system_s_per_token", "energy_per_request_j", "effective_batch", "busy_fraction"):
        v = getattr(p, k)
        if not (isinstance(v, float) and math.isfinite(v)):
            return f"{k} = {v!r}"
    for iv in (*p.power_intervals, *p.itl_intervals):
        if not (math.isfinite(iv.low) and math.isfinite(iv.high) and 0 < iv.low <= iv.high):
            return f"interval {iv!r}"
    bad = _consistent(p.throughput_tok_s, p.effective_batch, p.itl_s, p.max_qps, p.utilization,
                      p.overloaded, int(p.workload["output_tokens"]))
    if bad:
        return bad
    gpu = default_catalog().find_gpu(p.gpu)
    tdp = gpu.tdp_w if gpu is not None else None
    if tdp is not None and p.power_w > tdp * (1 + 1e-9):
        return f"power {p.power_w} W above TDP {tdp} W"
    if p.idle_power_w is not None and p.power_w < p.idle_power_w - 1e-9:
        return f"power {p.power_w} W below idle {p.idle_power_w} W"
    return None


def _consistent(tokens_s: float, batch: float, itl_s: float, max_qps: float | None, util: float | None,
                overloaded: bool, output_tokens: int) -> str | None:
    """Throughput ≤ batch ÷ ITL and ≤ capacity; utilization > 1 only when overloaded (issue 26)."""
    if tokens_s > batch / itl_s * (1 + 1e-5):  # the fixed point is solved to 4e-6
        return f"throughput {tokens_s:.6g} tok/s above batch / ITL {batch / itl_s:.6g}"
    if max_qps is not None and tokens_s > max_qps * output_tokens * (1 + 1e-6):
        return f"throughput {tokens_s:.6g} tok/s above capacity {max_qps * output_tokens:.6g}"
    if util is not None and (not math.isfinite(util) or (util > 1 + 1e-9 and not overloaded)):
        return f"utilization {util!r} without overloaded"
    return None


def check_result(value: Any) -> str | None:
    """None if ``value`` is a sane result, else what is wrong with it."""
    from wattgpu import Prediction, RankResult

    if isinstance(value, Prediction):
        return _sane_prediction(value)
    if isinstance(value, RankResult):
        for c in value.candidates:
            if not (math.isfinite(c.power_w) and c.power_w > 0 and math.isfinite(c.itl_s) and c.itl_s > 0):
                return f"rank candidate {c.gpu}: power {c.power_w}, itl {c.itl_s}"
            figures = [c.throughput_tok_s, c.fleet_power_w, c.j_per_token,
                       *(v for v in c.energy_figures.values() if isinstance(v, (int, float)))]
            if not all(math.isfinite(v) for v in figures):
                return f"rank candidate {c.gpu}: non-finite figure in {figures}"
            if any(not (math.isfinite(iv.low) and math.isfinite(iv.high))
                   for iv in (*c.power_intervals, *c.itl_intervals)):  # a candidate is a Prediction
                return f"rank candidate {c.gpu}: non-finite interval"
            bad = _consistent(c.throughput_tok_s, c.effective_batch, c.itl_s, c.max_qps, c.utilization, False,
                              int(value.workload.output_tokens))
            if bad:
                return f"rank candidate {c.gpu}: {bad}"
        return None
    if isinstance(value, (list, tuple)):
        for v in value:
            bad = check_result(v)
            if bad:
                return bad
    if isinstance(value, dict):  # predict_table
        for k, v in value.items():
            if hasattr(v, "dtype") and v.size and not (v[~(v != v)] > 0).all():
                return f"table column {k} has non-positive values"
    return None


def classify_exception(case: Case, exc: BaseException) -> tuple[str, str]:
    from wattgpu import WattGPUError

    msg = str(exc)
    if isinstance(exc, MemoryError):
        return "memory blow-up", "MemoryError"
    if isinstance(exc, _Timeout):
        return "hang", msg
    if isinstance(exc, AssertionError) and msg.startswith("nonsense: "):
        return "nonsense", msg[10:210]
    if isinstance(exc, WattGPUError):
        want = case.tags.get("error_class")
        if want and type(exc).__name__ != want:
            return "nonsense", f"{type(exc).__name__} where {want} is due: {msg[:150]}"
        if "\n" in msg or not msg.strip():
            return "vague message", "multi-line or empty message"
        if case.expect and not any(e.lower() in msg.lower() for e in case.expect):
            return "vague message", msg[:200]
        return "clean error", msg[:200]
    return "traceback", f"{type(exc).__name__}: {msg[:200]}"


def classify_cli(case: Case, rc: int | None, out: str, err: str) -> tuple[str, str]:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    if rc is None:
        return "hang", "timed out"
    if "Traceback" in err or "Traceback" in out or rc == 70 or rc < 0:
        return "traceback", (err.strip().splitlines() or ["?"])[-1][:200]
    want = case.tags.get("batch_exit")
    if want is not None:
        summary = lines[-1] if lines else ""
        if rc != want or "rows read" not in summary:
            return "nonsense", f"batch exit {rc} (want {want}): {summary[:150]}"
        return "sane result", summary[:200]
    if case.tags.get("exit") is not None and rc != case.tags["exit"]:
        return "nonsense", f"exit {rc} (want {case.tags['exit']}): {(lines or [''])[-1][:150]}"
    if rc in (2, 3):
        errs = [ln for ln in lines if ln.startswith("error:")]
        if len(errs) != 1 or len(lines) != 1:
            return "vague message", f"{len(lines)} stderr lines"
        if case.expect and not any(e.lower() in errs[0].lower() for e in case.expect):
            return "vague message", errs[0][:200]
        return "clean error", errs[0][:200]
    if rc == 4:  # `rank` found no qualifying GPU (documented exit status): the reasons, then one error line
        errs = [ln for ln in lines if ln.startswith("error:")]
        if len(errs) != 1 or "no GPU qualifies" not in errs[0]:
            return "vague message", f"exit 4 with {len(errs)} error lines"
        if any(tok.strip("(),;:") in ("nan", "inf", "-inf") for tok in out.lower().split()):
            return "nonsense", out[:150]
        return "sane result", errs[0][:200]
    if rc == 0:
        if case.must_fail:
            return "nonsense", f"exit 0 where an error is due: {out[:150]}"
        low = out.lower()
        if any(tok.strip("(),;:") in ("nan", "inf", "-inf") for tok in low.split()):
            return "nonsense", out[:150]
        return "sane result", out.splitlines()[0][:120] if out else ""
    return "nonsense", f"exit {rc}: {err[:150]}"


class _Timeout(Exception):
    pass


def _on_alarm(*_: Any) -> None:
    raise _Timeout("over the per-case time limit")


def run_in_process(case: Case, timeout: float) -> tuple[str, str]:
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        if case.argv is not None:
            return _run_cli_in_process(case)
        try:
            value = case.run()  # type: ignore[misc]
        except BaseException as exc:  # noqa: BLE001 - every escape is classified
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            return classify_exception(case, exc)
        if case.must_fail:
            return "nonsense", f"returned {type(value).__name__} where an error is due"
        bad = check_result(value)
        return ("nonsense", bad) if bad else ("sane result", type(value).__name__)
    except _Timeout:
        return "hang", f"over {timeout:g} s"
    except MemoryError:
        return "memory blow-up", "MemoryError"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def _run_cli_in_process(case: Case) -> tuple[str, str]:
    from wattgpu.cli import main

    out, err = io.StringIO(), io.StringIO()
    rc: int | None = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main(case.argv, prog_name="wattgpu")
    except SystemExit as exc:
        rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except (_Timeout, MemoryError):
        raise
    except BaseException as exc:  # noqa: BLE001
        return "traceback", f"{type(exc).__name__}: {str(exc)[:200]}"
    return classify_cli(case, rc, out.getvalue(), err.getvalue())


# ------------------------------------------------------------------ worker / driver
def worker(fixtures: str, start: int, timeout: float, mem_mib: int) -> None:
    """Run cases from ``start`` (skipping subprocess ones), one JSON line per case on stdout."""
    limit = mem_mib * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    fx = json.loads(fixtures)
    cases = build_cases(fx)
    for i in range(start, len(cases)):
        c = cases[i]
        if c.subprocess:
            continue
        cls, detail = run_in_process(c, timeout)
        print(json.dumps({"i": i, "class": cls, "detail": detail}), flush=True)


def run_subprocess_case(c: Case, timeout: float, mem_mib: int, env: dict[str, str]) -> tuple[str, str]:
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (mem_mib * 2**20, mem_mib * 2**20))

    try:
        r = subprocess.run([sys.executable, "-m", "wattgpu.cli", *(c.argv or [])], capture_output=True, text=True,
                           timeout=timeout, env=env, preexec_fn=limit, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return "hang", f"over {timeout:g} s"
    if "MemoryError" in r.stderr:
        return "memory blow-up", r.stderr.strip().splitlines()[-1][:200]
    return classify_cli(c, r.returncode, r.stdout, r.stderr)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds per case")
    ap.add_argument("--mem-mib", type=int, default=3072, help="address-space cap of a worker (MiB)")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every case, not only the bad ones")
    ap.add_argument("--worker", nargs=2, metavar=("FIXTURES_JSON", "START"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker[0], int(args.worker[1]), args.timeout, args.mem_mib)
        return 0
    t0 = time.perf_counter()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "runtime"), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    sys.path.insert(0, str(ROOT / "runtime"))
    with tempfile.TemporaryDirectory(prefix="wattgpu-corpus-") as tmp:
        fx = make_fixtures(Path(tmp))
        cases = build_cases(fx)
        results: dict[int, tuple[str, str]] = {}
        start = 0
        while start < len(cases):  # workers; a worker that dies blames the case it was running
            proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", json.dumps(fx), str(start),
                                     "--timeout", str(args.timeout), "--mem-mib", str(args.mem_mib)],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp)
            assert proc.stdout is not None
            last = start - 1
            for line in proc.stdout:
                rec = json.loads(line)
                results[rec["i"]] = (rec["class"], rec["detail"])
                last = rec["i"]
            err = proc.stderr.read() if proc.stderr else ""
            rc = proc.wait()
            nxt = next((i for i in range(last + 1, len(cases)) if not cases[i].subprocess), None)
            if nxt is None:
                break
            died = "memory blow-up" if ("MemoryError" in err or rc == -signal.SIGKILL) else "traceback"
            results[nxt] = (died, f"worker died (exit {rc}): {err.strip().splitlines()[-1:] or ''}")
            start = nxt + 1
        for i, c in enumerate(cases):
            if c.subprocess:
                results[i] = run_subprocess_case(c, args.timeout, args.mem_mib, env)
    counts = Counter(cls for cls, _ in results.values())
    for i, c in enumerate(cases):
        cls, detail = results.get(i, ("traceback", "no result"))
        if args.verbose or cls in BAD or cls == "vague message":
            print(f"[{cls}] {c.name}: {detail}")
    print(f"{len(cases)} cases in {time.perf_counter() - t0:.0f} s: "
          + ", ".join(f"{cls} {counts.get(cls, 0)}" for cls in CLASSES))
    return 1 if any(counts.get(cls, 0) for cls in BAD) else 0


if __name__ == "__main__":
    sys.exit(main())

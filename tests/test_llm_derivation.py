"""One LLM derivation: a catalog id and the LLM's own config.json give the same spec and the same predictions.

The catalog builder (``wattgpu_train.catalog``) feeds every LLM's config to the runtime's reader
(``wattgpu.hfconfig.llm_from_hf_config``); these tests read each stored config copy
(``data/catalog/llm_configs_raw/``, byte-identical to ``../shared/data/catalog/llm_configs/raw/`` when that
folder is beside the clone) the way a user's ``--llm config.json`` is read, and compare.
"""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from wattgpu import Predictor
from wattgpu.errors import SpecValidationError
from wattgpu.hfconfig import llm_from_hf_config
from wattgpu.specs import default_catalog
from wattgpu.workload import Workload
from wattgpu_train.catalog import quantization_config

REPO = Path(__file__).resolve().parents[1]
RAW = REPO / "data" / "catalog" / "llm_configs_raw"
SHARED_RAW = REPO.parent / "shared" / "data" / "catalog" / "llm_configs" / "raw"
RAW_FILES = sorted(RAW.glob("*.json"))

# Stored copies that are partial (the evidence file says so): the catalog fills the missing keys from its
# table row (e.g. the KV heads of a sibling config), so reading the bare copy differs. Listed so that the
# test fails if any other LLM's two answers drift apart, or if one of these starts to agree.
PARTIAL_COPIES = {
    "codellama/CodeLlama-34b-hf": "copy lacks num_key_value_heads (8, GQA) and max_position_embeddings",
    "Neutralzz/BiLLa-7B-SFT": "copy lacks vocab_size (the reader refuses it; the catalog assumes 32000)",
}
# Fields that carry where a spec came from, not what it is.
PROVENANCE = ("name", "source", "confidence")


def _doc(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _user_config(doc: dict, row: dict[str, str]) -> dict:
    """The copy as a user's config.json; a copy without its quantization_config gets the one the model's
    release documents (the catalog row's quant_method), as the real config.json carries it."""
    cfg = dict(doc["config"])
    inner = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else cfg
    quant = quantization_config(row)
    if quant is not None and "quantization_config" not in cfg and "quantization_config" not in inner:
        cfg["quantization_config"] = quant
    return cfg


@pytest.fixture(scope="module")
def rows() -> dict[str, dict[str, str]]:
    import csv

    with open(REPO / "data" / "catalog" / "llm_configs.csv", newline="", encoding="utf-8") as f:
        return {r["hf_id"]: r for r in csv.DictReader(f)}


def test_raw_copies_are_the_shared_evidence_files() -> None:
    assert len(RAW_FILES) == 73
    if not SHARED_RAW.is_dir():
        pytest.skip(f"{SHARED_RAW} not present")
    shared = sorted(p.name for p in SHARED_RAW.glob("*.json"))
    assert shared == [p.name for p in RAW_FILES]
    for p in RAW_FILES:
        assert p.read_bytes() == (SHARED_RAW / p.name).read_bytes(), p.name


@pytest.mark.parametrize("path", RAW_FILES, ids=lambda p: p.stem)
def test_catalog_id_and_config_json_give_the_same_spec(path: Path, rows) -> None:
    doc = _doc(path)
    name = doc["hf_id"]
    cat = default_catalog()
    unsupported = dict(cat.unsupported_llms)
    if name in unsupported:
        pytest.skip(f"{name}: not modelled ({unsupported[name]})")
    catalog_spec = cat.llm(name)
    try:
        user = llm_from_hf_config(_user_config(doc, rows[name]), name)
    except SpecValidationError:
        assert name in PARTIAL_COPIES, f"{name}: the reader refuses its config copy"
        return
    differs = {f: (getattr(catalog_spec, f), getattr(user, f)) for f in catalog_spec.to_dict()
               if f not in PROVENANCE and getattr(catalog_spec, f) != getattr(user, f)}
    if name in PARTIAL_COPIES:
        assert differs, f"{name} now reads the same from its copy: remove it from PARTIAL_COPIES"
        return
    # precision labels may differ where the copy has no torch_dtype (bfloat16 vs the table's float16):
    # both are 2 bytes and 16-bit matmuls, so nothing numeric moves
    differs.pop("precision", None) if {*differs.get("precision", ())} <= {"float16", "bfloat16", "float32"} else None
    differs.pop("compute_dtype", None) if {*differs.get("compute_dtype", ())} <= {"float16", "bfloat16"} else None
    assert not differs, f"{name}: catalog vs config.json: {differs}"


def _workloads() -> list[Workload]:
    return [Workload(max_batch=1, input_tokens=512, output_tokens=256),
            Workload(max_batch=64, input_tokens=2048, output_tokens=512),
            Workload(max_batch=32, input_tokens=1024, output_tokens=256, tp=8)]  # the big MoEs fit only here


def test_catalog_id_and_config_json_give_the_same_predictions(rows) -> None:
    """Through the predictor: the same power, ITL and throughput for both forms, on GPUs where each fits."""
    cat = default_catalog()
    pred = Predictor()
    gpus = [cat.gpu(g) for g in ("NVIDIA H100 SXM5 80GB", "NVIDIA L40S", "NVIDIA B200 (HGX/DGX B200)")]
    checked = 0
    for path in RAW_FILES:
        doc = _doc(path)
        name = doc["hf_id"]
        if name in PARTIAL_COPIES or name in dict(cat.unsupported_llms):
            continue
        a = cat.llm(name)
        b = llm_from_hf_config(_user_config(doc, rows[name]), name)  # source "user config.json", confidence "user"
        if {a.compute_dtype, b.compute_dtype} <= {"float16", "bfloat16"}:  # a label only (see the spec test)
            b = replace(b, precision=a.precision, compute_dtype=a.compute_dtype)
        triples = [(g, m, w) for g in gpus for w in _workloads() for m in (a, b)]
        out = pred.predict_specs_safe(triples)
        for k in range(0, len(out), 2):
            x, y = out[k], out[k + 1]
            assert type(x) is type(y), name
            if isinstance(x, Exception):
                assert type(x) is type(y), name
                continue
            for field in ("power_w", "itl_s", "throughput_tok_s", "max_concurrency"):
                assert getattr(x, field) == pytest.approx(getattr(y, field), rel=1e-9), (name, field)
            checked += 1
    assert checked >= 150


# Rows whose fields cannot describe the architecture exactly and that have no config copy: their table counts
# (model card figures) are kept, and the catalog says so in the entry's ``derived`` list.
CARD_COUNTS = {
    "Qwen/Qwen1.5-MoE-A2.7B-Chat": "the shared expert's width (shared_expert_intermediate_size) has no column",
    "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16": "the hybrid Mamba/attention layer pattern has no column",
}


def test_table_counts_are_the_architecture_counts(rows) -> None:
    """Issue 38 item 4: every catalog row's stored total/active parameters are the reader's count from its
    architecture (rounded to 1e-3 B), so a catalog id and its config.json cannot differ in size; only the
    named rows keep a card figure."""
    from wattgpu_train.catalog import counted_from_architecture

    cat = default_catalog()
    unsupported = dict(cat.unsupported_llms)
    copies = {_doc(p)["hf_id"] for p in RAW_FILES}  # read from the model's own config whatever params_method says
    kept = sorted(n for n, r in rows.items()
                  if n not in unsupported and n not in copies and not counted_from_architecture(r))
    assert kept == sorted(CARD_COUNTS)
    off = {}
    for name, row in rows.items():
        if name in unsupported:
            continue
        spec = cat.llm(name)
        for field in ("total_params_b", "active_params_b"):
            if abs(float(row[field]) - getattr(spec, field)) > 0.0005 + 1e-9:
                off[(name, field)] = (row[field], getattr(spec, field))
    assert not off, f"llm_configs.csv counts differ from the architecture's: {off}"
    assert cat.llm("nvidia/Llama-3.1-Minitron-4B-Width-Base").total_params_b == pytest.approx(4.513, abs=5e-4)

"""Property-based tests: for any GPU spec, LLM config and workload, the API returns finite numbers within
physical bounds or raises a WattGPUError — never anything else.

Examples per test default to a CI-friendly count; ``WATTGPU_HYPOTHESIS_EXAMPLES=N`` runs N per test
(see docs/errors.md for the long run).
"""
from __future__ import annotations

import copy
import json
import math
import os
import shutil
import warnings
from pathlib import Path

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import wattgpu
from wattgpu import ArtifactError, GpuSpec, LlmSpec, Predictor, WattGPUError, Workload, default_catalog, rank
from wattgpu.hfconfig import llm_from_hf_config
from wattgpu.specs import GPU_RANGES, LLM_RANGES, MEMORY_TYPES

# Default tier: 100 examples per property; .ci/run reruns this file with WATTGPU_HYPOTHESIS_EXAMPLES=1000.
EXAMPLES = int(os.environ.get("WATTGPU_HYPOTHESIS_EXAMPLES", "100"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
PRED = Predictor()
CAT = default_catalog()

HOSTILE = st.one_of(st.none(), st.booleans(), st.text(max_size=5), st.lists(st.integers(), max_size=2),
                    st.sampled_from([math.nan, math.inf, -math.inf, 1e308, -1e308, 0, -1, 10**30, "1e3"]))
NAMES = st.text(st.characters(codec="ascii", categories=("L", "N", "P", "Zs")), min_size=1, max_size=20).filter(
    str.strip)
ANY_NUMBER = st.one_of(st.integers(-10**6, 10**7), st.floats(allow_nan=True, allow_infinity=True))


EXTREME_QPS = st.sampled_from([5e-324, 1e-320, 1e-300, 1e-10, 1e-9, 2e-9, 1e300, 1.7976931348623157e308])


def number(lo: float, hi: float, *, integer: bool = False):
    """A value inside [lo, hi] (log-uniform-ish: small and large values both show up)."""
    if integer:
        lo_i, hi_i = int(math.ceil(lo)), int(hi)
        return st.one_of(st.integers(lo_i, min(hi_i, lo_i + 64)), st.integers(lo_i, min(hi_i, max(lo_i, 4096))),
                         st.integers(lo_i, hi_i))
    return st.one_of(st.floats(lo, min(hi, lo * 10 + 1), allow_nan=False), st.floats(lo, hi, allow_nan=False))


def corruptible(dicts, extra_keys=()):
    """Mostly well-formed dicts; a quarter get one field replaced by garbage, an out-of-range number,
    or an unknown key."""
    def corrupt(d):
        keys = sorted(d) + list(extra_keys)
        return st.tuples(st.sampled_from(keys), st.one_of(HOSTILE, ANY_NUMBER)).map(lambda kv: {**d, kv[0]: kv[1]})
    return st.one_of(dicts, dicts, dicts, dicts.flatmap(corrupt))


def _gpu_dicts(corrupt: bool = True):
    fields = {k: number(lo, hi, integer=(k == "release_year")) for k, (lo, hi, _) in GPU_RANGES.items()}
    fields["name"] = NAMES
    fields["memory_type"] = st.sampled_from(MEMORY_TYPES)
    fields["transistors_million"] = st.one_of(st.none(), fields["transistors_million"])  # required, may be null
    optional = {"base_clock_mhz", "boost_clock_mhz", "idle_power_w"}
    clean = st.fixed_dictionaries({k: v for k, v in fields.items() if k not in optional},
                                  optional={k: st.one_of(st.none(), fields[k]) for k in optional})
    return corruptible(clean, extra_keys=("tdp", "sm_count", "aliases")) if corrupt else clean


def _catalog_or_random_gpu(corrupt: bool = True):
    return st.one_of(st.sampled_from(CAT.gpus), _gpu_dicts(corrupt))


def _workloads(corrupt: bool = True):
    def shape(d: dict) -> dict:
        kind = d["kind"]
        if kind != "server":
            d.pop("qps", None)
        elif "qps" not in d:
            d["qps"] = 0.5
        if kind == "closed_loop" and "concurrency" not in d:
            d["concurrency"] = 8.0
        return d

    clean = st.fixed_dictionaries({
        "kind": st.sampled_from(["offline", "closed_loop", "server"]),
        "max_batch": number(1, 65536, integer=True),
        "input_tokens": number(1, 1_048_576, integer=True),
        "output_tokens": number(1, 1_048_576, integer=True),
        "engine": st.sampled_from(["vllm", "tgi", "hf", "TRT-LLM", "mii", "deepspeed_mii", "transformers"]),
        "gpu_memory_utilization": number(0.05, 1.0),
    }, optional={
        # tiny and huge rates too: below the 1e-9 floor they must be refused, never give inf (issue 26)
        "qps": st.one_of(number(1e-6, 1e5), EXTREME_QPS),
        "concurrency": st.one_of(number(0.001, 65536), st.sampled_from([65536.0, 4096.0])),
        "num_requests": number(1, 1e9, integer=True),
        "tp": st.sampled_from([1, 2, 4, 8]),
    }).map(shape)
    return corruptible(clean, extra_keys=("batch_size",)) if corrupt else clean


def _llm_spec_dicts(corrupt: bool = True):
    ints = {k: number(lo, hi, integer=True) for k, (lo, hi, _) in LLM_RANGES.items()
            if k not in ("total_params_b", "active_params_b", "weight_bytes_per_param")}

    def shape(d: dict) -> dict:
        if d.get("active_params_b", 0) > d.get("total_params_b", 0):
            d["active_params_b"] = d["total_params_b"]
        if d.get("num_kv_heads", 0) > d.get("num_attention_heads", 0):
            d["num_kv_heads"] = d["num_attention_heads"]
        if d.get("num_experts", 0) <= 1:
            d["experts_per_tok"] = 0
        return d

    clean = st.fixed_dictionaries({
        "name": NAMES,
        "num_layers": ints["num_layers"], "hidden_size": st.sampled_from([256, 1024, 4096, 8192, 16384]),
        "num_attention_heads": st.sampled_from([1, 8, 16, 32, 64, 128]), "num_kv_heads": ints["num_kv_heads"],
        "total_params_b": number(0.01, 10_000.0), "active_params_b": number(0.01, 10_000.0),
    }, optional={
        "head_dim": ints["head_dim"], "intermediate_size": ints["intermediate_size"],
        "vocab_size": ints["vocab_size"], "weight_bytes_per_param": number(0.1, 4.0),
        "num_experts": st.sampled_from([0, 8, 64, 256]), "experts_per_tok": st.sampled_from([1, 2, 8]),
        "arch_class": st.sampled_from(["decoder_transformer", "decoder_moe_transformer", "hybrid_mamba_transformer",
                                       "ssm_mamba", "rnn_rwkv", "encoder_decoder_t5"]),
        "max_position_embeddings": st.one_of(st.none(), number(1, 1e9, integer=True)),
        "kv_layers": number(0, 8, integer=True),
    }).map(shape)
    return corruptible(clean, extra_keys=("layers",)) if corrupt else clean


def _hf_configs(corrupt: bool = True):
    clean = st.fixed_dictionaries({
        "model_type": st.sampled_from(["llama", "mistral", "qwen2", "mixtral", "gemma", "phi3", "gpt2",
                                       "deepseek_v3", "falcon", "t5", "rwkv", "mamba", "gpt_bigcode", "mpt"]),
        "num_hidden_layers": number(1, 160, integer=True),
        "hidden_size": st.sampled_from([512, 1024, 2048, 3072, 4096, 5120, 8192, 12288]),
        "num_attention_heads": st.sampled_from([8, 16, 32, 64, 128]),
        "vocab_size": number(1000, 300_000, integer=True),
    }, optional={
        "num_key_value_heads": st.sampled_from([1, 2, 4, 8]),
        "intermediate_size": number(64, 65536, integer=True),
        "head_dim": st.sampled_from([64, 128, 256]),
        "num_local_experts": st.sampled_from([0, 8, 16, 64]),
        "num_experts_per_tok": st.sampled_from([1, 2, 4]),
        "torch_dtype": st.sampled_from(["bfloat16", "float16", "float32", "int8"]),
        "tie_word_embeddings": st.booleans(),
        "max_position_embeddings": number(128, 1_000_000, integer=True),
        "sliding_window": st.one_of(st.none(), number(1, 100_000, integer=True)),
    })
    return corruptible(clean, extra_keys=("n_layer", "quantization_config")) if corrupt else clean


def _check(gpu_data, llm_builder, wl_data) -> None:
    """Build everything and predict; only WattGPUError may escape, and successes must be physical."""
    try:
        gpu = gpu_data if isinstance(gpu_data, GpuSpec) else GpuSpec.from_dict(gpu_data)
        llm = llm_builder()
        wl = Workload.from_dict(wl_data)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            p = PRED.predict(gpu, llm, wl)
    except WattGPUError as exc:
        assert str(exc) and "\n" not in str(exc)
        event(f"refused: {type(exc).__name__}")
        return
    event("predicted")
    values = [p.power_w, p.itl_s, p.throughput_tok_s, p.system_s_per_token, p.energy_per_token_j,
              p.energy_per_request_j, p.effective_batch, p.busy_fraction]
    assert all(isinstance(v, float) and math.isfinite(v) for v in values), (values, gpu, llm, wl)
    assert 0 < p.power_w <= gpu.tdp_w  # per GPU, capped at its TDP
    assert p.itl_s > 0 and p.throughput_tok_s > 0 and p.system_s_per_token > 0
    # energy is the group's power over its token rate; a server never serves more than is offered or
    # than its capacity
    assert math.isclose(p.energy_per_token_j, p.power_w * wl.tp / p.throughput_tok_s, rel_tol=1e-9)
    offered = min(wl.qps, p.max_qps) if wl.kind == "server" else p.max_qps  # type: ignore[type-var]
    assert p.throughput_tok_s <= offered * wl.output_tokens * (1 + 1e-9), (p.throughput_tok_s, offered)
    assert p.energy_per_token_j > 0 and p.energy_per_request_j > 0
    assert p.effective_batch >= 1 and 0 < p.busy_fraction <= 1
    for iv in p.power_intervals + p.itl_intervals:
        assert math.isfinite(iv.low) and math.isfinite(iv.high) and 0 < iv.low <= iv.high
    _check_consistent(p, wl.output_tokens)


def _check_consistent(p, output_tokens: int) -> None:
    """Issue 26: throughput ≤ batch ÷ ITL (within the fixed point's tolerance) and ≤ capacity by construction;
    utilization > 1 only when overloaded."""
    assert p.throughput_tok_s <= p.effective_batch / p.itl_s * (1 + 1e-5), (p.throughput_tok_s, p.effective_batch, p.itl_s)
    assert p.max_qps is not None and math.isfinite(p.max_qps)
    assert p.throughput_tok_s <= p.max_qps * output_tokens * (1 + 1e-6)
    assert p.utilization is not None and math.isfinite(p.utilization)
    assert p.utilization <= 1 + 1e-9 or p.overloaded, (p.utilization, p.overloaded)


@SETTINGS
@given(gpu=_catalog_or_random_gpu(), llm=st.sampled_from(CAT.llms), wl=_workloads())
def test_gpu_specs_and_workloads(gpu, llm, wl):
    _check(gpu, lambda: llm, wl)


@SETTINGS
@given(gpu=st.sampled_from(CAT.gpus), cfg=_hf_configs(), wl=_workloads())
def test_hf_configs(gpu, cfg, wl):
    _check(gpu, lambda: llm_from_hf_config(cfg, name="hypothesis/model"), wl)


@SETTINGS
@given(gpu=_catalog_or_random_gpu(), data=_llm_spec_dicts(), wl=_workloads())
def test_llm_specs_direct(gpu, data, wl):
    _check(gpu, lambda: LlmSpec.from_dict(data), wl)


@SETTINGS
@given(gpu=st.sampled_from(CAT.gpus), llm=st.sampled_from(CAT.llms), wl=_workloads())
def test_catalog_pairs(gpu, llm, wl):
    _check(gpu, lambda: llm, wl)


@SETTINGS
@given(gpu=_catalog_or_random_gpu(corrupt=False), data=st.one_of(_hf_configs(corrupt=False), _llm_spec_dicts(False)),
       wl=_workloads(corrupt=False))
def test_well_formed_inputs(gpu, data, wl):
    """Only in-range values: most examples reach the models, which must still stay physical."""
    build = (lambda: llm_from_hf_config(data, name="hypothesis/model")) if "model_type" in data and \
        "total_params_b" not in data else (lambda: LlmSpec.from_dict(data))
    _check(gpu, build, wl)


@settings(max_examples=max(50, EXAMPLES // 5), deadline=None, database=None)
@given(rows=st.lists(st.tuples(st.sampled_from(CAT.gpus), st.sampled_from(CAT.llms), _workloads()),
                     min_size=1, max_size=6))
def test_predict_many_matches_single(rows):
    """A batch either fails with a WattGPUError or gives each row exactly its single-row answer."""
    try:
        triples = [(g, m, Workload.from_dict(w)) for g, m, w in rows]
        many = PRED.predict_specs(triples)
    except WattGPUError:
        return
    for t, p in zip(triples, many):
        one = PRED.predict_specs([t])[0]
        assert (p.power_w, p.itl_s, p.throughput_tok_s) == (one.power_w, one.itl_s, one.throughput_tok_s)


# ---- the surfaces added since round 2 (issue 26): fleets, quantisation configs, heads, model bundles
@settings(max_examples=max(20, EXAMPLES // 5), deadline=None, database=None)
@given(gpu=st.sampled_from(CAT.gpus), llm=st.sampled_from(CAT.llms),
       qps=st.one_of(number(1e-3, 1e4), EXTREME_QPS), replicas=st.one_of(st.just("auto"), st.integers(1, 64)),
       tp=st.sampled_from([1, 2, 4, 8]), sla=st.one_of(st.none(), number(1.0, 500.0)))
def test_fleets_are_consistent(gpu, llm, qps, replicas, tp, sla):
    """rank with replicas: a clean refusal, or candidates whose replica throughput stays within batch ÷ ITL
    and capacity, with the fixed point solved (no 'did not converge') and every figure finite."""
    try:
        res = rank(llm, Workload(kind="server", qps=qps, tp=tp), gpus=[gpu], replicas=replicas, max_itl_ms=sla)
    except WattGPUError as exc:
        assert str(exc) and "\n" not in str(exc)
        event("refused")
        return
    event(f"candidates {len(res.candidates)}")
    for c in res.candidates:
        assert c.throughput_tok_s <= c.effective_batch / c.itl_s * (1 + 1e-5)
        assert c.max_qps is not None and c.throughput_tok_s <= c.max_qps * res.workload.output_tokens * (1 + 1e-6)
        assert c.utilization is not None and c.utilization <= 1 + 1e-9
        assert all(math.isfinite(v) for v in (c.power_w, c.itl_s, c.fleet_power_w, c.j_per_token))
        assert all(math.isfinite(v) for v in c.energy_figures.values() if isinstance(v, (int, float)))
        assert not any("did not converge" in w for w in c.warnings), c.warnings


BITS = st.one_of(st.integers(-16, 64), st.floats(allow_nan=True, allow_infinity=True), st.booleans(), st.text(max_size=3),
                 st.none())


@SETTINGS
@given(method=st.sampled_from(["gptq", "awq", "bitsandbytes", "compressed-tensors", "fp8", "", "quark"]),
       key=st.sampled_from(["bits", "w_bit", "num_bits"]), bits=BITS, gpu=st.sampled_from(CAT.gpus))
def test_quantisation_bits_are_a_positive_width_or_refused_by_name(method, key, bits, gpu):
    qc = ({"quant_method": method, "config_groups": {"g": {"weights": {"num_bits": bits}}}}
          if method == "compressed-tensors" else {"quant_method": method, key: bits})
    cfg = {"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
           "num_key_value_heads": 8, "vocab_size": 32000, "quantization_config": qc}
    valid = isinstance(bits, int) and not isinstance(bits, bool) and 1 <= bits <= 16
    try:
        llm = llm_from_hf_config(cfg, name="hypothesis/quant")
    except WattGPUError as exc:
        assert bits is not None and not valid, (qc, exc)
        assert "quantization_config" in str(exc), str(exc)
        return
    assert valid or bits is None, f"bits {bits!r} accepted as {llm.weight_bytes_per_param} bytes/param"
    assert 0 < llm.weight_bytes_per_param <= 4
    _check(gpu, lambda: llm, {"kind": "offline", "max_batch": 8})


@SETTINGS
@given(heads=st.integers(1, 256), kv=st.integers(-4, 300), gpu=st.sampled_from(CAT.gpus))
def test_kv_heads_must_divide_attention_heads(heads, kv, gpu):
    cfg = {"model_type": "llama", "num_hidden_layers": 16, "hidden_size": 128 * heads, "num_attention_heads": heads,
           "num_key_value_heads": kv, "vocab_size": 32000, "intermediate_size": 4096}
    try:
        llm = llm_from_hf_config(cfg, name="hypothesis/heads")
    except WattGPUError as exc:
        assert kv < 1 or kv > heads or heads % kv, (heads, kv, exc)
        return
    assert llm.num_attention_heads % llm.num_kv_heads == 0
    _check(gpu, lambda: llm, {"kind": "offline"})


@SETTINGS
@given(pattern=st.text(st.sampled_from("M*-"), min_size=1, max_size=64))
def test_hybrid_patterns_without_attention_are_refused(pattern):
    cfg = {"model_type": "nemotron_h", "num_hidden_layers": len(pattern), "hidden_size": 1024,
           "num_attention_heads": 8, "num_key_value_heads": 2, "vocab_size": 32000, "intermediate_size": 4096,
           "hybrid_override_pattern": pattern}
    try:
        p = PRED.predict("NVIDIA H100 SXM5 80GB", llm_from_hf_config(cfg, name="hypothesis/hybrid"))
    except WattGPUError as exc:
        event(type(exc).__name__)
        assert "*" not in pattern or "pattern" in str(exc) or "fit" in str(exc), str(exc)
        return
    assert "*" in pattern, f"a pattern without attention ({pattern!r}) predicted {p.power_w} W"


MANIFEST = json.loads((Path(wattgpu.__file__).parent / "models" / "feature_schema.json").read_text())


def _paths(node, prefix=()):
    """Every JSON path of the manifest (the free-form maps included)."""
    yield prefix
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for k, v in items:
        yield from _paths(v, (*prefix, k))


MANIFEST_PATHS = [p for p in _paths(MANIFEST) if p]
MANIFEST_VALUES = st.one_of(HOSTILE, ANY_NUMBER, st.sampled_from(["1", "Infinity", [0.5, math.inf], [math.nan, 1],
                                                                  [[[[]]]], {"x": 1}, 10**400, -10**400]))


@settings(max_examples=max(30, EXAMPLES // 3), deadline=None, database=None)
@given(path=st.sampled_from(MANIFEST_PATHS), value=MANIFEST_VALUES, drop=st.booleans())
def test_a_mutated_bundle_manifest_is_refused_or_still_physical(tmp_path_factory, path, value, drop):
    """Any one key of the manifest replaced (or removed): an ArtifactError, or predictions that are finite,
    physical and carry finite intervals. Never a traceback, a hang or an infinite interval."""
    b = tmp_path_factory.mktemp("bundle")
    for f in (Path(wattgpu.__file__).parent / "models").iterdir():
        shutil.copy(f, b / f.name)
    doc = copy.deepcopy(MANIFEST)
    node = doc
    for k in path[:-1]:
        node = node[k]
    if drop and isinstance(node, dict):
        del node[path[-1]]
    else:
        node[path[-1]] = value
    (b / "feature_schema.json").write_text(json.dumps(doc))  # allow_nan: Infinity/NaN literals reach the reader
    try:
        pred = Predictor(models=b)
        p = pred.predict("NVIDIA A30", CAT.llms[0])
    except ArtifactError as exc:
        assert str(exc) and "\n" not in str(exc)
        event("refused")
        return
    except WattGPUError as exc:  # a valid bundle whose domain/catalog changes what can be predicted
        event(f"row error {type(exc).__name__}")
        return
    event("predicted")
    _check(CAT.gpu("NVIDIA A30"), lambda: CAT.llms[0], {"kind": "offline"})
    for iv in p.power_intervals + p.itl_intervals:
        assert math.isfinite(iv.low) and math.isfinite(iv.high) and 0 < iv.low <= iv.high, iv

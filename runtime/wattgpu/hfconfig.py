"""Build an :class:`LlmSpec` from a Hugging Face ``config.json`` (offline; parameter counts from the geometry).

Parameter counts are computed layer by layer from the config: embeddings, attention (GQA/MQA, explicit
``head_dim``, DeepSeek MLA), MLP (gated = 3 matrices, plain = 2), MoE (routed, shared, router, dense layers),
norms and the main biases, and the LM head when untied. They are approximate (small per-arch extras such as
rotary buffers or attention sinks may be off by a few thousand parameters) but within ~1% of published counts
for the supported families.
"""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Mapping

from .errors import SpecValidationError
from .safeio import read_json_file, resolve_json_path
from .quant import ParamSplit, Quantisation, model_bytes_per_param, parse_quantization
from .specs import LLM_RANGES, LlmSpec, check_number

_MISSING = object()

# Families whose MLP is gated (gate, up, down = 3 matrices); the others use 2 (up, down).
_GATED = {
    "llama", "llama4", "llama4_text", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe",
    "gemma", "gemma2", "gemma3", "gemma3_text", "deepseek", "deepseek_v2", "deepseek_v3", "gpt_oss",
    "olmo", "olmo2", "olmoe", "granite", "granitemoe", "phi3", "phimoe", "phi3small", "internlm",
    "internlm2", "baichuan", "cohere", "cohere2", "exaone", "solar", "minicpm", "yi", "stablelm",
    "mistral3", "ministral", "hunyuan", "glm", "glm4", "smollm3",
}
_PLAIN = {
    "gpt2", "gpt_neox", "gpt_bigcode", "bloom", "mpt", "starcoder2", "codegen", "gptj", "falcon", "phi",
    "nemotron", "opt", "gpt_neo",
}
# LayerNorm with a bias (2 x hidden per norm) instead of RMSNorm (1 x hidden).
_LAYERNORM = {"gpt2", "gpt_neox", "gpt_bigcode", "bloom", "starcoder2", "codegen", "gptj", "falcon", "phi",
              "phi3small", "opt", "gpt_neo", "nemotron"}
# Biases on every attention and MLP projection.
_ALL_BIASES = {"gpt2", "gpt_neox", "gpt_bigcode", "bloom", "phi3small", "opt", "phi", "falcon"}
# LM head tied to the input embedding when the config has no tie_word_embeddings key.
_TIED_BY_DEFAULT = {"gemma", "gemma2", "gemma3", "gemma3_text", "gpt2", "gpt_bigcode", "bloom", "mpt",
                    "starcoder2", "t5", "phi3small", "opt", "gpt_neo", "mamba", "falcon_mamba"}
# Learned absolute position tables.
_POS_TABLE = {"gpt2", "gpt_bigcode", "opt", "gpt_neo"}

# Class-name stems (architectures[0] without its suffix, lower-case, no underscores) → model_type.
_ARCH_STEMS = {
    "llama": "llama", "mistral": "mistral", "mixtral": "mixtral", "qwen2": "qwen2", "qwen2moe": "qwen2_moe",
    "qwen3": "qwen3", "qwen3moe": "qwen3_moe", "gemma": "gemma", "gemma2": "gemma2", "gemma3": "gemma3",
    "gptneox": "gpt_neox", "gptbigcode": "gpt_bigcode", "bloom": "bloom", "mpt": "mpt", "t5": "t5", "mt5": "mt5",
    "gptj": "gptj", "codegen": "codegen", "gpt2": "gpt2", "starcoder2": "starcoder2", "rwkv": "rwkv",
    "phi3small": "phi3small", "phi3": "phi3", "phi": "phi", "deepseekv3": "deepseek_v3", "deepseekv2": "deepseek_v2",
    "gptoss": "gpt_oss", "llama4": "llama4", "nemotronh": "nemotron_h", "falconmamba": "falcon_mamba",
    "mamba": "mamba", "mamba2": "mamba2", "falcon": "falcon", "opt": "opt", "gptneo": "gpt_neo",
}
_ARCH_SUFFIXES = ("ForCausalLM", "ForConditionalGeneration", "LMHeadModel", "Model")

_DTYPE_BYTES = {"float32": 4.0, "fp32": 4.0, "float": 4.0, "float16": 2.0, "fp16": 2.0, "half": 2.0,
                "bfloat16": 2.0, "bf16": 2.0, "float8_e4m3fn": 1.0, "float8_e5m2": 1.0, "fp8": 1.0}

# Bounds for config integers that are not LlmSpec fields (keeps the arithmetic finite and sane).
_AUX_MAX = 10_000_000


class _Reader:
    """Typed access to one config mapping, raising SpecValidationError that names the field and key."""

    def __init__(self, cfg: Mapping[str, Any], entity: str) -> None:
        self.cfg, self.entity = cfg, entity

    def find(self, keys: tuple[str, ...]) -> tuple[str | None, Any]:
        for k in keys:
            v = self.cfg.get(k)
            if v is not None:
                return k, v
        return None, None

    def int_(self, field: str, keys: tuple[str, ...], default: Any = _MISSING, *,
             lo: float | None = None, hi: float | None = None, unit: str = "") -> Any:
        key, value = self.find(keys)
        if key is None:
            if default is _MISSING:
                names = ", ".join(repr(k) for k in keys)
                raise SpecValidationError(self.entity, field, None,
                                          f"a value: config.json needs the key {names}" if len(keys) == 1 else
                                          f"a value: config.json needs one of the keys {names}", key=keys[0])
            return default
        return self.check_int(field, key, value, lo=lo, hi=hi, unit=unit)

    def check_int(self, field: str, key: str, value: Any, *, lo: float | None = None, hi: float | None = None,
                  unit: str = "") -> int:
        try:
            return self._check_int(field, key, value, lo=lo, hi=hi, unit=unit)
        except SpecValidationError as exc:
            exc.key = key
            raise

    def _check_int(self, field: str, key: str, value: Any, *, lo: float | None = None, hi: float | None = None,
                   unit: str = "") -> int:
        if lo is None:
            lo, hi, unit = LLM_RANGES[field] if field in LLM_RANGES else (0, _AUX_MAX, unit or "units")
        assert lo is not None and hi is not None, "give both bounds or neither"
        where = "" if key == field else f" (config key {key!r})"
        expected = f"an integer in [{lo:g}, {hi:g}] {unit}{where}"
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise SpecValidationError(self.entity, field, value, expected)
        check_number(self.entity, field, value, lo, hi, f"{unit}{where}")
        if isinstance(value, float) and not value.is_integer():
            raise SpecValidationError(self.entity, field, value, expected)
        return int(value)

    def num(self, field: str, keys: tuple[str, ...], default: float, lo: float, hi: float) -> float:
        key, value = self.find(keys)
        if key is None:
            return default
        where = "" if key == field else f" (config key {key!r})"
        if isinstance(value, bool):
            raise SpecValidationError(self.entity, field, value, f"a number in [{lo:g}, {hi:g}]{where}", key=key)
        try:
            return check_number(self.entity, field, value, lo, hi, f"units{where}")
        except SpecValidationError as exc:
            exc.key = key
            raise

    def bool_(self, field: str, keys: tuple[str, ...], default: bool) -> bool:
        key, value = self.find(keys)
        if key is None:
            return default
        if not isinstance(value, bool):
            raise SpecValidationError(self.entity, field, value, "true or false", key=key)
        return value

    def str_(self, field: str, keys: tuple[str, ...], default: str = "") -> str:
        key, value = self.find(keys)
        if key is None:
            return default
        if not isinstance(value, str):
            raise SpecValidationError(self.entity, field, value, "a string", key=key)
        return value


def _family(cfg: Mapping[str, Any], entity: str) -> str:
    """Normalised model_type (from ``model_type`` or, when absent, from ``architectures``)."""
    mt = cfg.get("model_type")
    if mt is not None and not isinstance(mt, str):
        raise SpecValidationError(entity, "model_type", mt, "a string such as 'llama'")
    if mt:
        mt = mt.strip().lower().replace("-", "_")
        return "llama4" if mt == "llama4_text" else mt
    archs = cfg.get("architectures")
    if isinstance(archs, list):
        for a in archs:
            if isinstance(a, str):
                stem = a
                for suf in _ARCH_SUFFIXES:
                    if stem.endswith(suf):
                        stem = stem[: -len(suf)]
                        break
                hit = _ARCH_STEMS.get(stem.lower().replace("_", ""))
                if hit:
                    return hit
    return "unknown"


def _arch_class(family: str, cfg: Mapping[str, Any], is_moe: bool) -> str:
    if family in ("t5", "mt5", "umt5", "bart", "mbart") or cfg.get("is_encoder_decoder") is True:
        return "encoder_decoder_t5"
    if family in ("rwkv", "rwkv5", "rwkv6", "rwkv7"):
        return "rnn_rwkv"
    if family in ("mamba", "mamba2", "falcon_mamba"):
        return "ssm_mamba"
    pattern = cfg.get("hybrid_override_pattern")
    if isinstance(pattern, str) and pattern and "*" not in pattern and "M" in pattern:
        return "ssm_mamba"  # a hybrid pattern without one attention layer ("MMM…"): no KV cache, refused as such
    if family in ("nemotron_h", "jamba", "zamba", "zamba2", "falcon_h1", "granitemoehybrid") \
            or "hybrid_override_pattern" in cfg:
        return "hybrid_mamba_transformer"
    return "decoder_moe_transformer" if is_moe else "decoder_transformer"


def _unwrap(config: Mapping[str, Any]) -> tuple[dict[str, Any], str | None]:
    """Flatten multimodal wrappers (Llama-4 ``text_config``): returns (text config, outer model_type)."""
    text = config.get("text_config")
    if isinstance(text, Mapping) and not any(k in config for k in ("num_hidden_layers", "n_layer", "num_layers")):
        merged = dict(text)
        for k in ("quantization_config", "torch_dtype", "dtype", "architectures", "_name_or_path",
                  "tie_word_embeddings"):
            if k in config and k not in merged:
                merged[k] = config[k]
        outer = config.get("model_type")
        return merged, outer if isinstance(outer, str) else None
    return dict(config), None


def _precision(r: _Reader) -> Quantisation:
    """Weight dtype, bytes per parameter and matmul dtype from torch_dtype and quantization_config."""
    dtype = r.str_("torch_dtype", ("torch_dtype", "dtype"), "").strip().lower().replace("torch.", "")
    if dtype in ("", "auto"):
        precision, nbytes = "bfloat16", 2.0
    elif dtype in _DTYPE_BYTES:
        precision, nbytes = dtype, _DTYPE_BYTES[dtype]
        if nbytes > 2.0:  # serving engines load float32 checkpoints in 16 bits (vLLM dtype "auto", TGI)
            precision, nbytes = "float16", 2.0
    else:
        raise SpecValidationError(r.entity, "torch_dtype", dtype, f"one of {', '.join(sorted(_DTYPE_BYTES))}")
    return parse_quantization(r.cfg.get("quantization_config"), precision, nbytes, r.entity)


def _sliding_layers(family: str, cfg: Mapping[str, Any], kv_layers: int) -> int | None:
    """How many KV layers use the sliding window (None = every layer, Mistral style)."""
    types = cfg.get("layer_types")
    if isinstance(types, list) and types and all(isinstance(t, str) for t in types):
        return min(sum(1 for t in types if "sliding" in t), kv_layers)
    if family == "gemma2":  # even-indexed layers slide, odd ones are global
        return (kv_layers + 1) // 2
    if family in ("gemma3", "gemma3_text", "cohere2"):  # one global layer in every `pattern` layers
        pattern = cfg.get("sliding_window_pattern", 6 if family.startswith("gemma3") else 4)
        if isinstance(pattern, int) and not isinstance(pattern, bool) and pattern >= 1:
            return kv_layers - kv_layers // pattern
    if family == "gpt_oss":
        return (kv_layers + 1) // 2
    return None


def _moe_layer(i: int, family: str, r: _Reader) -> bool:
    """Whether decoder layer ``i`` (0-based) is a mixture-of-experts layer."""
    if family in ("deepseek", "deepseek_v2", "deepseek_v3"):
        first_dense = r.int_("first_k_dense_replace", ("first_k_dense_replace",), 0)
        freq = max(1, r.int_("moe_layer_freq", ("moe_layer_freq",), 1))
        return i >= first_dense and i % freq == 0
    if family in ("qwen2_moe", "qwen3_moe"):
        only = r.cfg.get("mlp_only_layers") or []
        step = max(1, r.int_("decoder_sparse_step", ("decoder_sparse_step",), 1))
        return (not isinstance(only, list) or i not in only) and (i + 1) % step == 0
    if family == "llama4":
        step = max(1, r.int_("interleave_moe_layer_step", ("interleave_moe_layer_step",), 1))
        return (i + 1) % step == 0
    step = max(1, r.int_("moe_layer_interval", ("moe_layer_freq", "interleave_moe_layer_step",
                                                  "decoder_sparse_step", "moe_layer_interval"), 1))
    return (i + 1) % step == 0


def _attention_params(family: str, r: _Reader, h: int, nh: int, nkv: int, hd: int, biases: bool) -> int:
    """Parameters of one self-attention block (projections, their biases, q/k norms where present)."""
    if "kv_lora_rank" in r.cfg and r.cfg.get("kv_lora_rank") is not None:  # DeepSeek multi-head latent attention
        kv_rank = r.int_("kv_lora_rank", ("kv_lora_rank",))
        q_rank = r.int_("q_lora_rank", ("q_lora_rank",), 0)
        nope = r.int_("qk_nope_head_dim", ("qk_nope_head_dim",), hd)
        rope = r.int_("qk_rope_head_dim", ("qk_rope_head_dim",), 0)
        v_hd = r.int_("v_head_dim", ("v_head_dim",), hd)
        q = (h * q_rank + q_rank + q_rank * nh * (nope + rope)) if q_rank else h * nh * (nope + rope)
        kv = h * (kv_rank + rope) + kv_rank + kv_rank * nh * (nope + v_hd)
        return q + kv + nh * v_hd * h
    n = h * nh * hd + 2 * h * nkv * hd + nh * hd * h
    if biases or r.bool_("attention_bias", ("attention_bias",), False):
        n += nh * hd + 2 * nkv * hd + h
    elif family in ("qwen2", "qwen2_moe") or r.bool_("qkv_bias", ("qkv_bias",), False):
        n += nh * hd + 2 * nkv * hd
    if family in ("qwen3", "qwen3_moe", "gemma3", "gemma3_text", "olmo2") or r.bool_("use_qk_norm", ("use_qk_norm",), False):
        n += 2 * hd if family != "olmo2" else nh * hd + nkv * hd
    if family == "gpt_oss":
        n += nh  # attention sinks
    return n


def _decoder_params(family: str, r: _Reader, g: dict[str, int]) -> tuple[int, int, ParamSplit]:
    """(total, active) parameters of a decoder-only transformer, dense or MoE, and where they sit."""
    h, n_layers, nh, nkv, hd, inter, vocab = (g[k] for k in ("h", "layers", "nh", "nkv", "hd", "inter", "vocab"))
    hidden_act = r.str_("hidden_act", ("hidden_act", "hidden_activation", "activation_function"), "").lower()
    if family in _GATED:
        gated = True
    elif family in _PLAIN:
        gated = False
    else:
        gated = hidden_act in ("silu", "swish", "swiglu", "gegelu", "geglu")
    all_biases = family in _ALL_BIASES or (family == "starcoder2" and r.bool_("use_bias", ("use_bias",), True))
    if family == "mpt":
        all_biases = not r.bool_("no_bias", ("no_bias",), False)
    norm = 2 * h if family in _LAYERNORM or (family == "mpt" and all_biases) else h
    norms_per_layer = 4 if family in ("gemma2", "gemma3", "gemma3_text") else 1 if family in ("codegen", "gptj") else 2

    attn = _attention_params(family, r, h, nh, nkv, hd, all_biases)
    dense_inter = r.int_("intermediate_size", ("intermediate_size_mlp",), inter) if family == "llama4" else inter
    mlp_bias = all_biases or family in ("codegen", "gptj") or r.bool_("mlp_bias", ("mlp_bias",), False)
    dense_ffn = (3 if gated else 2) * h * dense_inter + ((2 * dense_inter if gated else dense_inter) + h if mlp_bias else 0)

    n_exp = g["experts"]
    top_k = g["top_k"]
    moe_total = moe_active = routed = 0
    if n_exp > 1:
        e_inter = r.int_("moe_intermediate_size", ("moe_intermediate_size",), inter)
        expert = 3 * h * e_inter + (2 * e_inter + h if family == "gpt_oss" else 0)
        router = n_exp * h + (n_exp if family in ("gpt_oss", "deepseek_v3") else 0)
        shared = 0
        n_shared = r.int_("n_shared_experts", ("n_shared_experts", "num_shared_experts"), 1 if family == "llama4" else 0)
        shared_inter = r.int_("shared_expert_intermediate_size", ("shared_expert_intermediate_size",), 0)
        if shared_inter:
            shared = 3 * h * shared_inter + h  # Qwen2-MoE shared expert and its gate
        elif n_shared:
            shared = n_shared * 3 * h * e_inter
        moe_total = n_exp * expert + shared + router
        moe_active = min(top_k, n_exp) * expert + shared + router

    total = active = 0
    for i in range(n_layers):
        layer = attn + norms_per_layer * norm
        if n_exp > 1 and _moe_layer(i, family, r):
            total += layer + moe_total
            active += layer + moe_active
            routed += n_exp * expert
        else:
            total += layer + dense_ffn
            active += layer + dense_ffn
    embeddings = vocab * h
    if family in _POS_TABLE:
        embeddings += g["positions"] * h
    if not g["tied"]:
        embeddings += vocab * h + (vocab if family in ("codegen", "gptj") else 0)
    norms = n_layers * norms_per_layer * norm + norm + (2 * h if family == "bloom" else 0)  # + final norm
    extra = embeddings + norm + (2 * h if family == "bloom" else 0)  # bloom: word_embeddings_layernorm
    split = ParamSplit(total=float(total + extra), embeddings=float(embeddings), norms=float(norms),
                       attention=float(n_layers * attn), experts=float(routed))
    return total + extra, active + extra, split


def _t5_params(r: _Reader, g: dict[str, int]) -> int:
    """All weights of a T5/mT5 encoder-decoder (relative attention bias, RMS norms, shared embedding)."""
    h, nh, hd, ff, vocab = g["h"], g["nh"], g["hd"], g["inter"], g["vocab"]
    enc = g["layers"]
    dec = r.int_("num_decoder_layers", ("num_decoder_layers",), enc, lo=1, hi=1000, unit="layers")
    proj = r.str_("feed_forward_proj", ("feed_forward_proj",), "relu").lower()
    gated = proj.startswith("gated") or r.bool_("is_gated_act", ("is_gated_act",), False)
    buckets = r.int_("relative_attention_num_buckets", ("relative_attention_num_buckets",), 32)
    attn = 4 * h * nh * hd
    ffn = (3 if gated else 2) * h * ff
    total = enc * (attn + ffn + 2 * h) + dec * (2 * attn + ffn + 3 * h) + 2 * buckets * nh + 2 * h
    total += vocab * h * (1 if g["tied"] else 2)
    return total


def _rwkv_params(r: _Reader, g: dict[str, int]) -> int:
    h, inter, vocab = g["h"], g["inter"], g["vocab"]
    att = r.int_("attention_hidden_size", ("attention_hidden_size",), h, lo=1, hi=200_000, unit="units")
    per_layer = 4 * h * att + 5 * h + 2 * h * inter + h * h + 2 * h + 4 * h
    return g["layers"] * per_layer + vocab * h * (1 if g["tied"] else 2) + 4 * h


def _mamba_block(r: _Reader, h: int, mamba2: bool) -> int:
    """One Mamba (v1) or Mamba2 mixer block including its pre-norm."""
    state = r.int_("ssm_state_size", ("ssm_state_size", "state_size", "d_state"), 128)
    conv = r.int_("conv_kernel", ("conv_kernel", "d_conv"), 4)
    if mamba2:
        heads = r.int_("mamba_num_heads", ("mamba_num_heads",), 1)
        d_inner = heads * r.int_("mamba_head_dim", ("mamba_head_dim",), 64)
        groups = r.int_("n_groups", ("n_groups",), 1)
        conv_dim = d_inner + 2 * groups * state
        return (h * (2 * d_inner + 2 * groups * state + heads) + conv_dim * conv + conv_dim
                + 3 * heads + d_inner + d_inner * h + h)
    expand = r.int_("expand", ("expand",), 2)
    d_inner = r.int_("intermediate_size", ("intermediate_size",), expand * h)
    dt_rank = r.int_("time_step_rank", ("time_step_rank", "dt_rank"), math.ceil(h / 16)) \
        if not isinstance(r.cfg.get("time_step_rank"), str) else math.ceil(h / 16)
    return (h * 2 * d_inner + d_inner * conv + d_inner + d_inner * (dt_rank + 2 * state) + dt_rank * d_inner
            + d_inner + d_inner * state + d_inner + d_inner * h + h)


def _hybrid_params(r: _Reader, g: dict[str, int], pattern: str) -> tuple[int, int]:
    """Nemotron-H style hybrid: ``M`` Mamba2, ``*`` attention, ``-`` MLP blocks (each with a pre-norm)."""
    h = g["h"]
    attn = _attention_params("nemotron_h", r, h, g["nh"], g["nkv"], g["hd"], False) + h
    mlp = 2 * h * g["inter"] + h
    mamba = _mamba_block(r, h, mamba2=True)
    body = sum(mamba if c == "M" else attn if c == "*" else mlp for c in pattern)
    total = body + g["vocab"] * h * (1 if g["tied"] else 2) + h
    return total, total


def llm_from_hf_config(config: Mapping[str, Any], name: str, source: str = "user config.json") -> LlmSpec:
    """Build a validated LlmSpec from a Hugging Face config.json mapping; parameter counts are computed.

    Raises SpecValidationError naming the field when a required key is missing, has the wrong type or is
    out of range.
    """
    entity = f"LLM {name!r}"
    if not isinstance(config, Mapping):
        raise SpecValidationError(entity, "<root>", type(config).__name__, "a JSON object (the config.json content)")
    cfg, outer_type = _unwrap(config)
    r = _Reader(cfg, entity)
    family = _family(cfg, entity)
    model_type = (outer_type or cfg.get("model_type") or family)
    is_t5 = family in ("t5", "mt5", "umt5")
    is_rwkv = family.startswith("rwkv")

    layers = r.int_("num_layers", ("num_hidden_layers", "n_layer", "n_layers", "num_layers"))
    h = r.int_("hidden_size", ("hidden_size", "n_embd", "d_model"))
    if is_rwkv:
        nh = r.int_("num_attention_heads", ("num_attention_heads",), max(1, h // 64))
    else:
        nh = r.int_("num_attention_heads", ("num_attention_heads", "n_head", "n_heads", "num_heads"))
    if family == "gpt_bigcode" and r.bool_("multi_query", ("multi_query",), True):
        nkv = 1
    elif family == "mpt" and isinstance(cfg.get("attn_config"), Mapping) and cfg["attn_config"].get("kv_n_heads"):
        nkv = r.check_int("num_kv_heads", "attn_config.kv_n_heads", cfg["attn_config"]["kv_n_heads"])
    else:
        nkv = r.int_("num_kv_heads", ("num_key_value_heads", "num_kv_heads", "n_head_kv", "multi_query_group_num"), nh)
    head_key = ("d_kv",) if is_t5 else ("head_dim",)
    hd = r.int_("head_dim", head_key, 0)
    if hd == 0:
        if is_rwkv:
            hd = max(4, h // nh)
        elif h % nh:
            raise SpecValidationError(entity, "num_attention_heads", nh,
                                      f"a divisor of hidden_size {h}, or give head_dim explicitly in config.json")
        else:
            hd = h // nh
    if family == "mpt":
        ratio = r.num("intermediate_size", ("expansion_ratio",), 4.0, 0.01, 1000.0)
        inter = int(round(ratio * h))
    else:
        inter = r.int_("intermediate_size", ("intermediate_size", "n_inner", "d_ff", "ffn_hidden_size",
                                              "ff_intermediate_size"), 0)
    if inter == 0:
        inter = 4 * h
    vocab = r.int_("vocab_size", ("vocab_size", "padded_vocab_size"))
    experts = r.int_("num_experts", ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts"), 0,
                     lo=0, hi=100_000, unit="experts")
    top_k = 0
    if experts > 1:
        top_k = r.int_("experts_per_tok", ("num_experts_per_tok", "experts_per_token", "moe_top_k", "top_k"),
                       lo=1, hi=experts, unit="experts (at most num_experts)")
    tied = r.bool_("tie_word_embeddings", ("tie_word_embeddings",), family in _TIED_BY_DEFAULT)
    if family in ("bloom", "mpt"):
        tied = True  # these architectures always reuse the input embedding as the output head
    positions = r.int_("max_position_embeddings",
                       ("max_position_embeddings", "n_positions", "max_seq_len", "context_length", "seq_length"),
                       0, lo=0, hi=1e9, unit="tokens")
    g = {"h": h, "layers": layers, "nh": nh, "nkv": nkv, "hd": hd, "inter": inter, "vocab": vocab,
         "experts": experts, "top_k": top_k, "tied": tied, "positions": positions}

    kv_layers = 0
    split: ParamSplit | None = None
    if is_t5:
        total = active = _t5_params(r, g)
        kv_layers = r.int_("num_decoder_layers", ("num_decoder_layers",), layers, lo=1, hi=1000, unit="layers")
    elif is_rwkv:
        total = active = _rwkv_params(r, g)
    elif family in ("mamba", "falcon_mamba"):
        total = active = layers * _mamba_block(r, h, mamba2=False) + vocab * h * (1 if tied else 2) + h
    elif isinstance(cfg.get("hybrid_override_pattern"), str):
        pattern = cfg["hybrid_override_pattern"]
        if len(pattern) != layers:
            raise SpecValidationError(entity, "hybrid_override_pattern", pattern,
                                      f"one character per layer ({layers} = num_hidden_layers)")
        if "*" not in pattern and "M" not in pattern:  # neither attention nor Mamba: not a language model
            raise SpecValidationError(entity, "hybrid_override_pattern", pattern,
                                      "at least one attention ('*') or Mamba ('M') layer")
        total, active = _hybrid_params(r, g, pattern)
        kv_layers = max(1, pattern.count("*"))
    else:
        total, active, split = _decoder_params(family, r, g)
    if split is None:  # other architectures: only the embeddings (and an untied head) are told apart
        split = ParamSplit(total=float(total), embeddings=float(vocab * h * (1 if tied else 2)))

    quant = _precision(r)
    weight_bytes = model_bytes_per_param(quant, split, 2.0)  # unquantised parts are served in 16 bits
    sliding: int | None = None
    if r.cfg.get("use_sliding_window") is not False:
        sw = r.int_("sliding_window", ("sliding_window", "sliding_window_size"), 0,
                    lo=0, hi=1e9, unit="tokens")
        sliding = sw or None
    n_kv_layers = kv_layers or layers
    sliding_layers = _sliding_layers(family, cfg, n_kv_layers) if sliding else None
    mla_rank = mla_rope = 0
    if cfg.get("kv_lora_rank") is not None:  # DeepSeek MLA: the cache holds the latent + the RoPE key
        mla_rank = r.int_("kv_lora_rank", ("kv_lora_rank",), lo=1, hi=100_000, unit="dimensions")
        mla_rope = r.int_("qk_rope_head_dim", ("qk_rope_head_dim",), 0, lo=0, hi=100_000, unit="dimensions")
    most = LLM_RANGES["total_params_b"][1]
    if total / 1e9 > most:  # the sizes are each in range, their product is not (100,000 experts)
        what = (f"{experts:,} experts × {inter:,} intermediate size × {layers:,} layers" if experts > 1
                else f"{layers:,} layers of hidden size {h:,}")
        raise SpecValidationError(entity, "<config>", f"{total / 1e9:,.0f} billion parameters",
                                  f"at most {most:,.0f} billion parameters in all ({what}); check "
                                  f"{'num_experts' if experts > 1 else 'the layer sizes'} in config.json")
    max_pos: int | None = positions or None
    if is_t5 or family == "bloom":
        max_pos = None  # relative positions / ALiBi: n_positions is not a length limit
    try:
        return LlmSpec(
            name=name, num_layers=layers, hidden_size=h, num_attention_heads=nh, num_kv_heads=nkv,
            total_params_b=round(total / 1e9, 6), active_params_b=round(active / 1e9, 6),
            intermediate_size=inter, head_dim=hd, vocab_size=vocab, model_type=str(model_type),
            arch_class=_arch_class(family, cfg, experts > 1), max_position_embeddings=max_pos,
            tie_word_embeddings=tied, num_experts=experts, experts_per_tok=top_k if experts > 1 else 0,
            sliding_window=sliding, weight_bytes_per_param=weight_bytes, precision=quant.precision,
            quantized=quant.quantized, compute_dtype=quant.compute_dtype, kv_layers=kv_layers, source=source,
            confidence="user", kv_lora_rank=mla_rank, qk_rope_head_dim=mla_rope, sliding_window_layers=sliding_layers,
        )
    except SpecValidationError:
        raise
    except (TypeError, ValueError, OverflowError) as exc:
        raise SpecValidationError(entity, "<config>", None, f"a consistent config.json ({exc})") from None


def load_llm_file(path: str | os.PathLike[str]) -> LlmSpec:
    """Read a Hugging Face config.json (or a model directory holding one) into an LlmSpec, offline. A
    ModelOpt ``hf_quant_config.json`` beside a config.json without ``quantization_config`` is read too."""
    target = resolve_json_path(path, what="LLM config", dir_file="config.json")
    data = read_json_file(target, what="LLM config")
    modelopt = target.parent / "hf_quant_config.json"  # ModelOpt checkpoints keep their quantisation here
    if "quantization_config" not in data and target.name == "config.json" and modelopt.is_file():
        data = {**data, "quantization_config": read_json_file(modelopt, what="ModelOpt hf_quant_config")}
    given = data.get("_name_or_path")
    if isinstance(given, str) and given.strip():
        name = given.strip()
    else:
        p = Path(path)
        name = p.name if p.is_dir() else (target.parent.name if target.stem == "config" and target.parent.name
                                           else target.stem)
        name = name or "user-llm"
    return llm_from_hf_config(data, name=name, source=str(target))

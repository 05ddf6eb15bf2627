"""Quantised checkpoints: weight bytes per parameter and matmul dtype from ``quantization_config``.

Recognised (``quant_method`` as Hugging Face writes it):

- ``fp8`` / ``fbgemm_fp8`` / compressed-tensors float 8-bit / ModelOpt ``quant_algo: FP8``: 1 byte per
  parameter (scales and the 16-bit embeddings ignored, as before); the matmuls run in FP8 (W8A8) on GPUs
  with FP8 tensor cores, else weight-only (dequantised to 16 bits);
- compressed-tensors int 8-bit weights with 8-bit activations: W8A8 int8; int 8-bit weights without
  activation quantisation: weight-only, 1 byte per parameter;
- 4-bit formats, priced by what they store per quantised weight, with the embeddings, the LM head, the
  norms and the modules the config's ignore / exclude list names kept in 16 bits:

  - NVFP4 (ModelOpt ``quant_algo: NVFP4``; compressed-tensors ``nvfp4-pack-quantized``): 4-bit E2M1
    values + one FP8 E4M3 scale per 16 = 4.5 bits = 0.5625 bytes for every quantised linear layer; with
    4-bit float activations too (W4A4) the matmuls run on FP4 tensor cores (``compute_dtype`` fp4),
    weight-only on GPUs without them;
  - MXFP4 (gpt-oss): 4 bits + one 8-bit scale per 32 = 4.25 bits = 0.53125 bytes for the MoE experts
    only (attention, router and embeddings stay 16-bit, as the gpt-oss checkpoints store them);
  - int4 with group scales (AWQ, GPTQ, compressed-tensors ``pack-quantized`` W4A16, ModelOpt
    ``W4A16_AWQ``): 0.5 bytes + a 16-bit scale per group (``group_size``, 128 when not given), plus a
    4-bit zero point per group for asymmetric schemes; bitsandbytes NF4: 0.5 bytes + a 32-bit absmax
    per 64; weight-only (16-bit matmuls);

- 2/3-bit and ``--dtype`` overrides keep a flat bytes-per-parameter figure for the whole model.

``Quantisation.weight_bytes_per_param`` is the bytes of one *quantised* weight and ``scope`` says which
weights are quantised (``all``, ``linear``, ``experts``); :func:`model_bytes_per_param` turns that into
the whole model's average from the parameter split the config reader computes (``hfconfig``).
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from .frozen import dataclass
from .errors import SpecValidationError

# ``--dtype`` choices: name -> (precision label, weight bytes per parameter, compute dtype, quantised)
DTYPE_OVERRIDES: dict[str, tuple[str, float, str, bool]] = {
    "bfloat16": ("bfloat16", 2.0, "bfloat16", False),
    "float16": ("float16", 2.0, "float16", False),
    "fp8": ("fp8", 1.0, "fp8", True),
    "int8": ("int8", 1.0, "bfloat16", True),
    "int4": ("int4", 0.55, "bfloat16", True),
}
DTYPE_ALIASES = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "float8": "fp8", "w8a8": "fp8",
                 "awq": "int4", "gptq": "int4", "w4a16": "int4", "w8a16": "int8"}


NVFP4_BYTES = (4 + 8 / 16) / 8  # E2M1 value + one FP8 E4M3 scale per 16 weights
MXFP4_BYTES = (4 + 8 / 32) / 8  # E2M1 value + one 8-bit shared exponent per 32 weights
DEFAULT_GROUP = 128  # AWQ / GPTQ / llm-compressor W4A16 default group size
SCOPES = ("all", "linear", "experts")


@dataclass(frozen=True)
class Quantisation:
    """How a checkpoint's weights are stored and multiplied."""

    precision: str  # weight dtype label: bfloat16, fp8, int8, int4, nvfp4, mxfp4, ...
    weight_bytes_per_param: float  # bytes of one quantised weight incl. its scales (scope "all": every parameter)
    compute_dtype: str  # bfloat16 | float16 | fp8 | int8 | fp4
    quantized: bool
    method: str = ""
    scope: str = "all"  # which weights carry weight_bytes_per_param: all | linear | experts
    attention_excluded: bool = False  # the ignore / exclude list keeps the attention projections 16-bit


@dataclass(frozen=True)
class ParamSplit:
    """Where a model's parameters sit, as the config reader counts them (absolute numbers)."""

    total: float
    embeddings: float  # input embedding + untied LM head + learned position table
    norms: float = 0.0
    attention: float = 0.0  # attention blocks of every layer
    experts: float = 0.0  # routed MoE experts of every MoE layer


def model_bytes_per_param(q: Quantisation, split: ParamSplit, base_bytes: float) -> float:
    """Average bytes per parameter of the whole checkpoint: quantised weights at ``q.weight_bytes_per_param``,
    the rest (embeddings, LM head, norms, excluded modules; all but the experts for scope ``experts``) at
    ``base_bytes``. Rounded to 4 decimals so catalog and config.json give the same figure."""
    if not q.quantized or q.scope == "all" or split.total <= 0:
        return q.weight_bytes_per_param
    if q.scope == "experts":
        quantised = split.experts
    else:
        quantised = split.total - split.embeddings - split.norms - (split.attention if q.attention_excluded else 0.0)
    quantised = min(max(quantised, 0.0), split.total)
    avg = (quantised * q.weight_bytes_per_param + (split.total - quantised) * base_bytes) / split.total
    return round(avg, 4)


def _int4_bytes(group: Any, symmetric: bool, scale_bytes: float = 2.0) -> float:
    """Bytes of one 4-bit integer weight with a ``scale_bytes`` scale (and, asymmetric, a 4-bit zero) per group."""
    g = group if isinstance(group, int) and not isinstance(group, bool) and group > 0 else DEFAULT_GROUP
    return 0.5 + (scale_bytes + (0.0 if symmetric else 0.5)) / g


def _excludes_attention(patterns: Any) -> bool:
    """True when an ignore / exclude list names the language model's attention projections."""
    if not isinstance(patterns, Sequence) or isinstance(patterns, (str, bytes)):
        return False
    for p in patterns:
        text = str(p).lower()
        if "vision" in text or "visual" in text or "audio" in text or "multi_modal" in text:
            continue
        if "self_attn" in text or "attn" in text.split(".")[-1] or text.endswith(("q_proj", "k_proj", "v_proj", "o_proj")):
            return True
    return False


MAX_QUANT_BITS = 16


def _bits(q: Mapping[str, Any], entity: str = "LLM", where: str = "quantization_config") -> Any:
    """The weight bit width a quantisation config states (None when it states none); 0, negative,
    fractional or absurd widths raise naming the key (they used to read silently as 16-bit)."""
    for key in ("bits", "w_bit", "num_bits"):
        if key in q and q[key] is not None:
            bits = q[key]
            if isinstance(bits, bool) or not isinstance(bits, int) or not 1 <= bits <= MAX_QUANT_BITS:
                raise SpecValidationError(entity, f"{where}.{key}", bits,
                                          f"a whole number of bits per weight in [1, {MAX_QUANT_BITS}] (e.g. 4 or 8)")
            return bits
    return None


def _compressed_tensors(q: Mapping[str, Any], base: str, entity: str = "LLM") -> Quantisation:
    """compressed-tensors: read the first config group's weights / input_activations."""
    groups = q.get("config_groups")
    weights: Mapping[str, Any] = {}
    acts: Mapping[str, Any] = {}
    if isinstance(groups, Mapping):
        for grp in groups.values():
            if isinstance(grp, Mapping) and isinstance(grp.get("weights"), Mapping):
                weights = grp["weights"]
                a = grp.get("input_activations")
                acts = a if isinstance(a, Mapping) else {}
                break
    bits, kind = _bits(weights, entity, "quantization_config.config_groups.weights"), str(weights.get("type", "int")).lower()
    a_bits = acts.get("num_bits") if acts else None
    a_kind = str(acts.get("type", "")).lower() if acts else ""
    fmt = str(q.get("format", "")).lower()
    attn = _excludes_attention(q.get("ignore"))
    m = "compressed-tensors"
    if bits == 8 and (kind == "float" or "float" in fmt or "fp8" in fmt):
        return Quantisation("fp8", 1.0, "fp8" if a_bits == 8 else base, True, m)
    if bits == 8:
        return Quantisation("int8", 1.0, "int8" if a_bits == 8 else base, True, m)
    if bits == 4 and (kind == "float" or "nvfp4" in fmt):
        fp4 = a_bits == 4 and a_kind == "float"  # NVFP4 W4A4; without 4-bit activations: NVFP4A16, weight-only
        return Quantisation("nvfp4", NVFP4_BYTES, "fp4" if fp4 else base, True, m, "linear", attn)
    if bits == 4:
        sym = weights.get("symmetric", True) is not False
        return Quantisation("int4", _int4_bytes(weights.get("group_size"), sym), base, True, m, "linear", attn)
    return Quantisation("compressed-tensors", 2.0, base, True, m)


# ModelOpt quant_algo -> (precision, bytes per quantised weight, compute dtype or None = 16-bit, scope)
_MODELOPT = {
    "FP8": ("fp8", 1.0, "fp8", "all"),
    "NVFP4": ("nvfp4", NVFP4_BYTES, "fp4", "linear"),
    "NVFP4_AWQ": ("nvfp4", NVFP4_BYTES, "fp4", "linear"),
    "W4A16_AWQ": ("int4", _int4_bytes(DEFAULT_GROUP, True), None, "linear"),
    "INT4_AWQ": ("int4", _int4_bytes(DEFAULT_GROUP, True), None, "linear"),
    "W4A8_AWQ": ("int4", _int4_bytes(DEFAULT_GROUP, True), "fp8", "linear"),
}


def _modelopt(q: Mapping[str, Any], base: str, entity: str) -> Quantisation:
    """NVIDIA ModelOpt: ``quantization_config`` with ``quant_algo`` (config.json), or the ``quantization``
    block of ``hf_quant_config.json``."""
    block = q.get("quantization")
    inner: Mapping[str, Any] = block if isinstance(block, Mapping) else q
    algo = inner.get("quant_algo")
    key = str(algo).strip().upper() if isinstance(algo, str) else None
    if key not in _MODELOPT:
        raise SpecValidationError(entity, "quantization_config.quant_algo", algo,
                                  f"one of {', '.join(_MODELOPT)} (ModelOpt); use --dtype to say how it is stored")
    precision, nbytes, compute, scope = _MODELOPT[key]
    if precision == "int4":
        nbytes = _int4_bytes(inner.get("group_size"), True)
    attn = _excludes_attention(inner.get("exclude_modules", inner.get("ignore")))
    return Quantisation(precision, nbytes, compute or base, True, "modelopt", scope, attn)


def parse_quantization(q: Any, base_precision: str, base_bytes: float, entity: str) -> Quantisation:
    """The :class:`Quantisation` a ``quantization_config`` describes (``None`` = unquantised 16-bit)."""
    base = base_precision if base_precision in ("bfloat16", "float16") else "bfloat16"
    if q is None:
        return Quantisation(base_precision, base_bytes, base, False)
    if not isinstance(q, Mapping):
        raise SpecValidationError(entity, "quantization_config", q, "a JSON object (or no key at all)")
    producer = q.get("producer")
    method = str(q.get("quant_method", "")).lower().replace("_", "-")
    if method in ("modelopt", "modelopt-fp4") or "quant_algo" in q or (
            isinstance(producer, Mapping) and str(producer.get("name", "")).lower() == "modelopt"):
        return _modelopt(q, base, entity)
    text = " ".join(str(q.get(k, "")) for k in ("fmt", "weight_dtype", "quant_type", "bnb_4bit_quant_type")).lower()
    bits = _bits(q, entity)
    if method == "compressed-tensors":
        return _compressed_tensors(q, base, entity)
    if "mxfp4" in method or "mxfp4" in text:
        return Quantisation("mxfp4", MXFP4_BYTES, base, True, method, "experts")
    if "nvfp4" in method:
        return Quantisation("nvfp4", NVFP4_BYTES, "fp4", True, method, "linear")
    if "fp8" in method or "float8" in text or "e4m3" in text or "e5m2" in text:
        return Quantisation("fp8", 1.0, "fp8", True, method)
    if method == "bitsandbytes" or "load_in_4bit" in q or "load_in_8bit" in q:
        if q.get("load_in_4bit") is True or "4bit" in text:
            return Quantisation("int4", _int4_bytes(64, True, 4.0), base, True, "bitsandbytes", "linear")
        if q.get("load_in_8bit") is True:
            return Quantisation("int8", 1.0, base, True, "bitsandbytes")
    if bits == 4 or "4bit" in text:
        sym = q.get("sym", method != "awq" or q.get("zero_point") is False) is not False
        attn = _excludes_attention(q.get("modules_to_not_convert"))
        return Quantisation("int4", _int4_bytes(q.get("group_size", q.get("q_group_size")), sym), base, True,
                            method, "linear", attn)
    if bits == 8 or "int8" in method + text:
        return Quantisation("int8", 1.0, base, True, method)
    if bits in (2, 3):
        return Quantisation(f"int{bits}", (bits + 0.4) / 8, base, True, method)
    return Quantisation(method or "quantized", base_bytes, base, True, method)


def dtype_override(dtype: str) -> Quantisation:
    """The :class:`Quantisation` for a ``--dtype`` choice; unknown names raise naming the field ``dtype``."""
    key = dtype.strip().lower() if isinstance(dtype, str) else None
    key = DTYPE_ALIASES.get(key, key)  # type: ignore[arg-type,unused-ignore]
    if key not in DTYPE_OVERRIDES:
        raise SpecValidationError("LLM", "dtype", dtype, f"one of {', '.join(DTYPE_OVERRIDES)} (or auto)")
    precision, nbytes, compute, quantized = DTYPE_OVERRIDES[key]
    return Quantisation(precision, nbytes, compute, quantized, "--dtype")


def with_dtype(llm: Any, dtype: str | None) -> Any:
    """``llm`` served at ``dtype`` (``None``/``auto`` = as the checkpoint says)."""
    if dtype is None or (isinstance(dtype, str) and dtype.strip().lower() == "auto"):
        return llm
    from dataclasses import replace

    q = dtype_override(dtype)
    return replace(llm, precision=q.precision, weight_bytes_per_param=q.weight_bytes_per_param,
                   compute_dtype=q.compute_dtype, quantized=q.quantized)


def fp8_warning(llm: Any, gpu: Any) -> str | None:
    """The weight-only note for an FP8 (or FP4) model on a GPU without FP8 (FP4) tensor cores, else None."""
    if llm.compute_dtype == "fp8" and gpu.fp8_tflops is None:
        return (f"{gpu.name} has no FP8 tensor cores: {llm.name}'s FP8 weights are dequantised to 16 bits "
                "(weight-only); the roofline uses the FP16 rate and 1-byte weights")
    if llm.compute_dtype == "fp4" and getattr(gpu, "fp4_tflops", None) is None:
        return (f"{gpu.name} has no FP4 tensor cores: {llm.name}'s {llm.precision} weights are dequantised to 16 bits "
                f"(weight-only); the roofline uses the FP16 rate and {llm.weight_bytes_per_param:g}-byte weights")
    return None

"""Quantised checkpoints: weight bytes per parameter and matmul dtype from ``quantization_config``.

Recognised (``quant_method`` as Hugging Face writes it):

- ``fp8`` / ``fbgemm_fp8`` / compressed-tensors with float 8-bit weights: 1 byte per weight; the
  matmuls run in FP8 (W8A8) on GPUs with FP8 tensor cores, else weight-only (dequantised to 16 bits);
- compressed-tensors int 8-bit weights with 8-bit activations: W8A8 int8; int 4/8-bit weights
  without activation quantisation: weight-only;
- AWQ, GPTQ (``bits``/``w_bit`` 2, 3, 4 or 8): weight-only, 16-bit matmuls;
- bitsandbytes ``load_in_8bit`` / ``load_in_4bit``: weight-only;
- MXFP4 / NVFP4: 4.25 bits (4-bit values + one 8-bit scale per 32) for the quantised weights.

Weight bytes include the per-group scales: 4-bit group-128 formats store 4 bits + a 16-bit scale
(and zero) per 128 weights ≈ 0.53 bytes; rounded up to 0.55 to cover unquantised layers (embeddings,
LM head) that typical 4-bit checkpoints keep in 16 bits.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

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


@dataclass(frozen=True)
class Quantisation:
    """How a checkpoint's weights are stored and multiplied."""

    precision: str  # weight dtype label: bfloat16, fp8, int8, int4, mxfp4, ...
    weight_bytes_per_param: float
    compute_dtype: str  # bfloat16 | float16 | fp8 | int8
    quantized: bool
    method: str = ""


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
    fmt = str(q.get("format", "")).lower()
    if bits == 8 and (kind == "float" or "float" in fmt or "fp8" in fmt):
        return Quantisation("fp8", 1.0, "fp8" if a_bits == 8 else base, True, "compressed-tensors")
    if bits == 8:
        return Quantisation("int8", 1.0, "int8" if a_bits == 8 else base, True, "compressed-tensors")
    if bits == 4 and (kind == "float" or "nvfp4" in fmt):
        return Quantisation("nvfp4", 0.55, base, True, "compressed-tensors")
    if bits == 4:
        return Quantisation("int4", 0.55, base, True, "compressed-tensors")
    return Quantisation("compressed-tensors", 2.0, base, True, "compressed-tensors")


def parse_quantization(q: Any, base_precision: str, base_bytes: float, entity: str) -> Quantisation:
    """The :class:`Quantisation` a ``quantization_config`` describes (``None`` = unquantised 16-bit)."""
    base = base_precision if base_precision in ("bfloat16", "float16") else "bfloat16"
    if q is None:
        return Quantisation(base_precision, base_bytes, base, False)
    if not isinstance(q, Mapping):
        raise SpecValidationError(entity, "quantization_config", q, "a JSON object (or no key at all)")
    method = str(q.get("quant_method", "")).lower().replace("_", "-")
    text = " ".join(str(q.get(k, "")) for k in ("fmt", "weight_dtype", "quant_type", "bnb_4bit_quant_type")).lower()
    bits = _bits(q, entity)
    if method == "compressed-tensors":
        return _compressed_tensors(q, base, entity)
    if "mxfp4" in method or "mxfp4" in text:
        return Quantisation("mxfp4", 0.55, base, True, method)
    if "nvfp4" in method or "modelopt-fp4" in method:
        return Quantisation("nvfp4", 0.55, base, True, method)
    if "fp8" in method or "float8" in text or "e4m3" in text or "e5m2" in text:
        return Quantisation("fp8", 1.0, "fp8", True, method)
    if method == "bitsandbytes" or "load_in_4bit" in q or "load_in_8bit" in q:
        if q.get("load_in_4bit") is True or "4bit" in text:
            return Quantisation("int4", 0.55, base, True, "bitsandbytes")
        if q.get("load_in_8bit") is True:
            return Quantisation("int8", 1.0, base, True, "bitsandbytes")
    if bits == 4 or "4bit" in text:
        return Quantisation("int4", 0.55, base, True, method)
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
    """The weight-only note for an FP8 model on a GPU without FP8 tensor cores, else None."""
    if llm.compute_dtype == "fp8" and gpu.fp8_tflops is None:
        return (f"{gpu.name} has no FP8 tensor cores: {llm.name}'s FP8 weights are dequantised to 16 bits "
                "(weight-only); the roofline uses the FP16 rate and 1-byte weights")
    return None

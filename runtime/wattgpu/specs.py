"""GPU and LLM descriptions (frozen dataclasses) and the packaged catalog with alias/fuzzy lookup."""
from __future__ import annotations

import json
import math
import os
from contextlib import contextmanager
from dataclasses import field, fields
from functools import lru_cache
from typing import Any, Callable, Iterator, Mapping, Sequence

from .frozen import dataclass
from .errors import AmbiguousNameError, ArtifactError, SpecValidationError, UnknownEntityError, UnsupportedModelError, require_type

MAX_PACKED_ARTIFACT_BYTES = 64 << 20  # an unpacked wheel artifact above this is damaged or hostile
CATALOG_RESOURCE = "specs.json"  # inside wattgpu/models/, a snapshot of the repo's top-level specs.json

# Physical ranges every GPU field the features use must satisfy: (min, max, unit).
GPU_RANGES: dict[str, tuple[float, float, str]] = {
    "tdp_w": (5.0, 2000.0, "W"),
    "memory_size_gb": (1.0, 2048.0, "GB"),
    "memory_bandwidth_gb_s": (20.0, 20000.0, "GB/s"),
    "fp16_tflops": (0.1, 20000.0, "dense FP16 TFLOPS"),
    "base_clock_mhz": (100.0, 4000.0, "MHz"),
    "boost_clock_mhz": (100.0, 4000.0, "MHz"),
    "transistors_million": (100.0, 1_000_000.0, "million transistors"),
    "release_year": (2010.0, 2035.0, "year"),
    "idle_power_w": (0.5, 500.0, "W"),
}
GPU_OPTIONAL = {"base_clock_mhz", "boost_clock_mhz", "idle_power_w", "transistors_million"}

LLM_RANGES: dict[str, tuple[float, float, str]] = {
    "num_layers": (1, 1000, "layers"),
    "hidden_size": (16, 200_000, "hidden units"),
    "num_attention_heads": (1, 1024, "heads"),
    "num_kv_heads": (1, 1024, "KV heads"),
    "head_dim": (4, 2048, "per-head dimension"),
    "intermediate_size": (1, 2_000_000, "FFN units"),
    "vocab_size": (1, 10_000_000, "tokens"),
    "total_params_b": (0.01, 10_000.0, "billion parameters"),
    "active_params_b": (0.01, 10_000.0, "billion parameters"),
    "weight_bytes_per_param": (0.1, 4.0, "bytes per parameter"),
}

COMPUTE_DTYPES = ("bfloat16", "float16", "fp8", "int8", "fp4")
MEMORY_TYPES = ("GDDR5", "GDDR6", "GDDR6X", "GDDR7", "HBM2", "HBM2e", "HBM3", "HBM3e", "LPDDR5")
ARCH_CLASSES = (
    "decoder_transformer",
    "decoder_moe_transformer",
    "hybrid_mamba_transformer",
    "ssm_mamba",
    "rnn_rwkv",
    "encoder_decoder_t5",
)


# Unit slips a spec sheet invites, per expected unit: (factor to the expected unit, the unit given).
UNIT_SLIPS: dict[str, tuple[tuple[float, str], ...]] = {
    "W": ((1e3, "kW"),),
    "GB/s": ((1e3, "TB/s"), (1e-9, "bytes/s")),
    "GB": ((1e-9, "bytes"), (2.0**-30, "bytes"), (2.0**-10, "MiB"), (1e3, "TB")),
    "dense FP16 TFLOPS": ((1e-12, "FLOPS"), (1e-3, "GFLOPS"), (1e3, "PFLOPS")),
    "MHz": ((1e3, "GHz"), (1e-6, "Hz")),
    "million transistors": ((1e3, "billions"), (1e-6, "transistors")),
    "billion parameters": ((1e-9, "parameters"), (1e-6, "thousands"), (1e-3, "millions")),
}


def unit_hint(value: float, lo: float, hi: float, unit: str) -> str:
    """`` (… looks like X: that is Y unit)`` when a common unit slip would put ``value`` in [lo, hi], else ''."""
    for factor, given in UNIT_SLIPS.get(unit, ()):
        v = value * factor
        if lo <= v <= hi:
            return f"; {value:g} looks like {given}, which is {v:.4g} {unit}"
    return ""


def check_number(entity: str, name: str, value: Any, lo: float, hi: float, unit: str) -> float:
    """Return ``value`` as a finite float within [lo, hi] or raise a SpecValidationError naming the field
    (and, for a value that a common unit slip explains, the unit it looks like)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecValidationError(entity, name, value, f"a number in [{lo:g}, {hi:g}] {unit}")
    try:
        v = float(value)
    except OverflowError:  # an integer of hundreds of digits (JSON allows it): no float holds it
        raise SpecValidationError(entity, name, value, f"a finite number in [{lo:g}, {hi:g}] {unit}") from None
    if not math.isfinite(v) or v < lo or v > hi:
        hint = unit_hint(v, lo, hi, unit) if math.isfinite(v) else ""
        raise SpecValidationError(entity, name, value, f"a finite number in [{lo:g}, {hi:g}] {unit}{hint}")
    return v


def check_int(entity: str, name: str, value: Any, lo: float, hi: float, unit: str) -> int:
    """Like :func:`check_number` but the value must also be a whole number (``7.0`` is accepted as 7)."""
    v = check_number(entity, name, value, lo, hi, unit)
    if v != int(v):
        raise SpecValidationError(entity, name, value, f"an integer in [{lo:g}, {hi:g}] {unit}")
    return int(v)


def check_str(entity: str, name: str, value: Any, *, optional: bool = False, max_len: int = 500) -> str | None:
    """A string of at most ``max_len`` characters (or None when ``optional``)."""
    if value is None and optional:
        return None
    if not isinstance(value, str) or len(value) > max_len:
        raise SpecValidationError(entity, name, value, f"a string of at most {max_len} characters"
                                  + (" (or null)" if optional else ""))
    return value


def check_bool(entity: str, name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise SpecValidationError(entity, name, value, "true or false")
    return value


# GPU fields the features do not use but that must still be sane numbers when given (min, max, unit).
GPU_EXTRA_RANGES: dict[str, tuple[float, float, str]] = {
    "bf16_tflops": (0.1, 20000.0, "dense BF16 TFLOPS"),
    "fp8_tflops": (0.1, 40000.0, "dense FP8 TFLOPS"),
    "fp4_tflops": (0.1, 80000.0, "dense FP4 TFLOPS"),
    "fp32_tflops": (0.01, 20000.0, "FP32 TFLOPS"),
    "l2_cache_mb": (0.01, 4096.0, "MB"),
}


@dataclass(frozen=True)
class GpuSpec:
    """Spec-sheet numbers of one GPU (per GPU, dense tensor rates, decimal GB/s)."""

    name: str
    tdp_w: float
    memory_size_gb: float
    memory_bandwidth_gb_s: float
    fp16_tflops: float
    transistors_million: float | None
    release_year: int
    memory_type: str = "HBM3"
    architecture: str = "unknown"
    form_factor: str = "unknown"
    base_clock_mhz: float | None = None
    boost_clock_mhz: float | None = None
    bf16_tflops: float | None = None
    fp8_tflops: float | None = None
    fp4_tflops: float | None = None  # dense FP4 tensor rate (Blackwell); None = no FP4 tensor cores
    fp32_tflops: float | None = None
    l2_cache_mb: float | None = None
    sm_count: int | None = None
    idle_power_w: float | None = None
    idle_power_source: str | None = None
    aliases: tuple[str, ...] = ()
    source: str = "user"
    # Interconnect for tensor-parallel groups (see wattgpu.parallel). nvlink_gb_s: total bidirectional
    # NVLink bandwidth per GPU (datasheet figure); nvlink_group: GPUs reachable all-to-all over NVLink
    # (0 = none); pcie_gen/pcie_lanes: host interface; max_group: largest group of this GPU the form
    # factor comes in (None = unknown, so tensor parallelism is refused).
    nvlink_gb_s: float | None = None
    nvlink_group: int = 0
    pcie_gen: int | None = None
    pcie_lanes: int | None = None
    max_group: int | None = None
    interconnect_source: str | None = None
    # vLLM default max_num_batched_tokens; None: vLLM rule
    vllm_batched_tokens: int | None = None

    @property
    def default_batched_tokens(self) -> int:
        """``vllm_batched_tokens``, else vLLM's rule (EngineArgs defaults, V1; it reads the CUDA device name)."""
        if self.vllm_batched_tokens is not None:
            return self.vllm_batched_tokens
        return 8192 if self.memory_size_gb >= 70.0 and "a100" not in self.name.lower() else 2048

    def __post_init__(self) -> None:
        entity = f"GPU {self.name!r}"
        if self.vllm_batched_tokens is not None:
            object.__setattr__(self, "vllm_batched_tokens", check_int(entity, "vllm_batched_tokens",
                                                                      self.vllm_batched_tokens, 1, 10_000_000, "tokens"))
        if not isinstance(self.name, str) or not self.name.strip() or len(self.name) > 500 \
                or not self.name.isprintable():
            raise SpecValidationError("GPU", "name", self.name,
                                      "a non-empty string of at most 500 printable characters (no newlines)")
        for fname, (lo, hi, unit) in GPU_RANGES.items():
            value = getattr(self, fname)
            if value is None and fname in GPU_OPTIONAL:
                continue
            object.__setattr__(self, fname, check_number(entity, fname, value, lo, hi, unit))
        object.__setattr__(self, "release_year", check_int(entity, "release_year", self.release_year,
                                                           *GPU_RANGES["release_year"]))
        for fname, (lo, hi, unit) in GPU_EXTRA_RANGES.items():
            if getattr(self, fname) is not None:
                object.__setattr__(self, fname, check_number(entity, fname, getattr(self, fname), lo, hi, unit))
        if self.sm_count is not None:
            object.__setattr__(self, "sm_count", check_int(entity, "sm_count", self.sm_count, 1, 10_000, "SMs"))
        self._check_interconnect(entity)
        for fname in ("architecture", "form_factor", "source"):
            check_str(entity, fname, getattr(self, fname))
        check_str(entity, "idle_power_source", self.idle_power_source, optional=True)
        if isinstance(self.aliases, (str, bytes)) or not isinstance(self.aliases, (tuple, list)) \
                or not all(isinstance(a, str) and a.strip() and len(a) <= 500 for a in self.aliases) \
                or len(self.aliases) > 100:
            raise SpecValidationError(entity, "aliases", self.aliases, "a list of at most 100 non-empty strings")
        object.__setattr__(self, "aliases", tuple(self.aliases))
        if self.memory_type not in MEMORY_TYPES:
            raise SpecValidationError(entity, "memory_type", self.memory_type, f"one of {', '.join(MEMORY_TYPES)}")
        # cross-field rules (catalog entries, user spec files and CSV-named files all pass through here)
        if self.base_clock_mhz is not None and self.boost_clock_mhz is not None \
                and self.boost_clock_mhz < self.base_clock_mhz:
            raise SpecValidationError(entity, "boost_clock_mhz", self.boost_clock_mhz,
                                      f"at least base_clock_mhz ({self.base_clock_mhz:g} MHz)")
        if self.idle_power_w is not None and self.idle_power_w >= self.tdp_w:
            raise SpecValidationError(entity, "idle_power_w", self.idle_power_w,
                                      f"less than tdp_w ({self.tdp_w:g} W): a GPU idles below its board power limit")

    def _check_interconnect(self, entity: str) -> None:
        if self.nvlink_gb_s is not None:
            object.__setattr__(self, "nvlink_gb_s", check_number(entity, "nvlink_gb_s", self.nvlink_gb_s, 1.0, 100_000.0,
                                                                 "GB/s (bidirectional NVLink per GPU)"))
        object.__setattr__(self, "nvlink_group", check_int(entity, "nvlink_group", self.nvlink_group, 0, 4096,
                                                           "GPUs on one NVLink domain (0 = none)"))
        for fname, lo, hi, unit in (("pcie_gen", 1, 7, "(PCIe generation)"), ("pcie_lanes", 1, 32, "lanes"),
                                    ("max_group", 1, 4096, "GPUs")):
            if getattr(self, fname) is not None:
                object.__setattr__(self, fname, check_int(entity, fname, getattr(self, fname), lo, hi, unit))
        check_str(entity, "interconnect_source", self.interconnect_source, optional=True, max_len=4000)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], entity: str = "GPU") -> "GpuSpec":
        """Build from a mapping (catalog entry or user JSON); unknown keys are rejected by name."""
        return from_mapping(cls, data, entity, "GPU")

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["aliases"] = list(self.aliases)
        return out


@dataclass(frozen=True)
class LlmSpec:
    """Architecture metadata of one LLM, as read from its Hugging Face config.json."""

    name: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    total_params_b: float
    active_params_b: float
    intermediate_size: int = 0
    head_dim: int = 0  # 0 → hidden_size // num_attention_heads
    vocab_size: int = 32000
    model_type: str = "unknown"
    arch_class: str = "decoder_transformer"
    max_position_embeddings: int | None = None
    tie_word_embeddings: bool = False
    num_experts: int = 0
    experts_per_tok: int = 0
    sliding_window: int | None = None
    weight_bytes_per_param: float = 2.0
    precision: str = "bfloat16"
    quantized: bool = False
    kv_layers: int = 0  # layers holding a KV cache; 0 → num_layers
    source: str = "user"
    confidence: str = "user"
    kv_lora_rank: int = 0  # multi-head latent attention (DeepSeek MLA): latent KV width; 0 = not MLA
    qk_rope_head_dim: int = 0  # MLA: decoupled RoPE key width cached next to the latent
    sliding_window_layers: int | None = None  # KV layers that use sliding_window; None = all of them
    # matmul precision: fp8 for W8A8 FP8 checkpoints, fp4 for NVFP4 W4A4 ones (weights AND activations in
    # FP4); weight-only formats multiply in 16 bits. physics.compute_tflops picks the GPU's rate for it.
    compute_dtype: str = "bfloat16"

    def __post_init__(self) -> None:
        entity = f"LLM {self.name!r}"
        if not isinstance(self.name, str) or not self.name.strip() or len(self.name) > 500 \
                or not self.name.isprintable():
            raise SpecValidationError("LLM", "name", self.name,
                                      "a non-empty string of at most 500 printable characters (no newlines)")
        if self.head_dim == 0 and isinstance(self.hidden_size, int) and isinstance(self.num_attention_heads, int) \
                and self.num_attention_heads > 0:
            if self.hidden_size % self.num_attention_heads:
                raise SpecValidationError(entity, "num_attention_heads", self.num_attention_heads,
                                          f"a divisor of hidden_size {self.hidden_size}, or give head_dim explicitly")
            object.__setattr__(self, "head_dim", self.hidden_size // self.num_attention_heads)
        if self.intermediate_size == 0 and isinstance(self.hidden_size, int):
            object.__setattr__(self, "intermediate_size", 4 * self.hidden_size)
        for fname, (lo, hi, unit) in LLM_RANGES.items():
            value = getattr(self, fname)
            checked = check_number(entity, fname, value, lo, hi, unit)
            if fname not in ("total_params_b", "active_params_b", "weight_bytes_per_param"):
                if checked != int(checked):
                    raise SpecValidationError(entity, fname, value, f"an integer in [{lo:g}, {hi:g}] {unit}")
                checked = int(checked)
            object.__setattr__(self, fname, checked)
        if self.num_kv_heads > self.num_attention_heads:
            raise SpecValidationError(entity, "num_kv_heads", self.num_kv_heads,
                                      f"at most num_attention_heads ({self.num_attention_heads})")
        if self.num_attention_heads % self.num_kv_heads:  # 6 KV heads for 32 query heads cannot be grouped
            raise SpecValidationError(entity, "num_kv_heads", self.num_kv_heads,
                                      f"a divisor of num_attention_heads ({self.num_attention_heads}): grouped-query "
                                      "attention shares each KV head among the same number of query heads")
        if self.active_params_b > self.total_params_b * 1.001:
            raise SpecValidationError(entity, "active_params_b", self.active_params_b,
                                      f"at most total_params_b ({self.total_params_b})")
        if self.arch_class not in ARCH_CLASSES:
            raise SpecValidationError(entity, "arch_class", self.arch_class, f"one of {', '.join(ARCH_CLASSES)}")
        self._check_extras(entity)
        if self.kv_layers == 0:
            object.__setattr__(self, "kv_layers", self.num_layers)

    def _check_extras(self, entity: str) -> None:
        """Fields outside LLM_RANGES that the features or the warnings still read."""
        experts = check_int(entity, "num_experts", self.num_experts, 0, 100_000, "experts")
        object.__setattr__(self, "num_experts", experts)
        if experts > 1:
            top_k = check_int(entity, "experts_per_tok", self.experts_per_tok, 1, experts,
                              f"experts (at most num_experts = {experts})")
        else:
            top_k = check_int(entity, "experts_per_tok", self.experts_per_tok, 0, 1, "(no experts: 0)")
        object.__setattr__(self, "experts_per_tok", top_k)
        object.__setattr__(self, "kv_layers", check_int(entity, "kv_layers", self.kv_layers, 0, self.num_layers,
                                                        f"layers (0 = all, at most num_layers = {self.num_layers})"))
        for fname in ("max_position_embeddings", "sliding_window"):
            if getattr(self, fname) is not None:
                object.__setattr__(self, fname, check_int(entity, fname, getattr(self, fname), 1, 1e9, "tokens"))
        check_bool(entity, "tie_word_embeddings", self.tie_word_embeddings)
        check_bool(entity, "quantized", self.quantized)
        for fname in ("kv_lora_rank", "qk_rope_head_dim"):
            object.__setattr__(self, fname, check_int(entity, fname, getattr(self, fname), 0, 100_000, "dimensions"))
        if self.sliding_window_layers is not None:
            object.__setattr__(self, "sliding_window_layers", check_int(
                entity, "sliding_window_layers", self.sliding_window_layers, 0, self.num_layers,
                f"layers (at most num_layers = {self.num_layers})"))
        if self.compute_dtype not in COMPUTE_DTYPES:
            raise SpecValidationError(entity, "compute_dtype", self.compute_dtype, f"one of {', '.join(COMPUTE_DTYPES)}")
        for fname in ("model_type", "precision", "source", "confidence"):
            check_str(entity, fname, getattr(self, fname))

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 1

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], entity: str = "LLM") -> "LlmSpec":
        """Build from a mapping of LlmSpec fields; unknown keys are rejected by name."""
        return from_mapping(cls, data, entity, "LLM")

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def from_mapping(cls: Any, data: Any, entity: str, kind: str) -> Any:
    """Construct the spec dataclass ``cls`` from a mapping: non-mappings, unknown keys and missing
    required fields are refused with a SpecValidationError naming the field."""
    if not isinstance(data, Mapping):
        raise SpecValidationError(entity, "<root>", type(data).__name__, f"a JSON object of {kind} spec fields")
    known = {f.name for f in fields(cls)}
    unknown = sorted((k for k in data if k not in known), key=str)
    if unknown:
        raise SpecValidationError(entity, unknown[0], data[unknown[0]],
                                  f"one of the {kind} fields: {', '.join(sorted(known))}")
    missing = [f.name for f in fields(cls) if f.name not in data and f.default is dataclass_missing()]
    if missing:
        raise SpecValidationError(entity, missing[0], None, f"a value (required {kind} fields: {', '.join(missing)})")
    return _with_entity(cls, data, entity, kind)


def _with_entity(cls: Any, data: Mapping[str, Any], entity: str, default: str) -> Any:
    """Construct ``cls`` from ``data``; a field error keeps saying where the data came from (e.g. the file)."""
    try:
        return cls(**dict(data))
    except SpecValidationError as exc:
        if entity == default or exc.entity == entity:
            raise
        raise SpecValidationError(f"{entity} ({exc.entity})", exc.field, exc.value, exc.expected) from None


def dataclass_missing() -> Any:
    from dataclasses import MISSING

    return MISSING


def _norm(name: str) -> str:
    return " ".join(name.lower().replace("_", " ").split())


_VENDOR_PREFIXES = ("nvidia ", "tesla ")


def _norm_gpu(name: str) -> str:
    """GPU lookup key: normalised, without a leading "NVIDIA"/"Tesla" (so "A100 SXM4 40GB" matches)."""
    key = _norm(name)
    for prefix in _VENDOR_PREFIXES:
        if key.startswith(prefix):
            key = key[len(prefix):]
    return key


@contextmanager
def _catalog_errors(source: str = "specs.json") -> Iterator[None]:
    """Any error while reading a catalog document (``source`` names it), as one :class:`ArtifactError`
    that says in words what is wrong and what to do."""
    fix = "reinstall wattgpu or rebuild the catalog"
    try:
        yield
    except KeyError as exc:
        raise ArtifactError(f"{source}: malformed catalog: an entry lacks the key {exc.args[0]!r}; {fix}") from None
    except (TypeError, AttributeError) as exc:
        raise ArtifactError(f"{source}: malformed catalog: a value has the wrong type ({exc}); {fix}") from None
    except SpecValidationError as exc:
        raise ArtifactError(f"{source}: invalid catalog entry ({exc}); {fix}") from None


def check_catalog_shape(data: Any, source: str = "specs.json") -> None:
    """The catalog document's outline: an object with ``catalog_version``, a ``gpus`` list of objects with
    a ``spec`` object and an ``llms`` list of objects with a ``name``; an ArtifactError naming the part
    that is not, before any entry is read."""
    def bad(what: str) -> ArtifactError:
        return ArtifactError(f"{source}: malformed catalog: {what}; reinstall wattgpu or rebuild the catalog")

    if not isinstance(data, Mapping):
        raise bad(f"expected a JSON object with 'gpus' and 'llms' lists, got {type(data).__name__}")
    for key in ("catalog_version", "gpus", "llms"):
        if key not in data:
            raise bad(f"the top level lacks the key {key!r}")
    for key, inner in (("gpus", "spec"), ("llms", "name")):
        rows = data[key]
        if not isinstance(rows, list):
            raise bad(f"{key!r} must be a list of entries, got {type(rows).__name__}")
        for i, row in enumerate(rows):
            if not isinstance(row, Mapping) or inner not in row:
                raise bad(f"{key}[{i}] must be an object with the key {inner!r}")
            if key == "gpus" and not isinstance(row["spec"], Mapping):
                raise bad(f"gpus[{i}].spec must be an object of GPU fields")


_TOKEN_SPLIT = str.maketrans({"-": " ", "(": " ", ")": " ", ",": " ", "/": " "})


def _tokens(key: str) -> frozenset[str]:
    return frozenset(key.translate(_TOKEN_SPLIT).split())


def gpu_matches(name: str, entries: Sequence[tuple[str, Sequence[str]]]) -> list[str]:
    """Every catalog GPU a typed ``name`` may mean, given ``(name, aliases)`` entries: those that list it
    as their name or an alias, and those whose name holds every word of it ("H100" -> the SXM5, PCIe
    and NVL parts). More than one is an ambiguous name; the order is the catalog's. A full catalog
    name means that GPU alone."""
    key = _norm_gpu(name)
    exact = [canonical for canonical, _ in entries if _norm_gpu(canonical) == key]
    if exact:  # a full catalog name is never ambiguous, even when another name extends it
        return exact[:1]
    words = _tokens(key)
    out = []
    for canonical, aliases in entries:
        if key in _gpu_keys_of(canonical, aliases) or (words and words <= _tokens(_norm_gpu(canonical))):
            out.append(canonical)
    return out


def _gpu_keys_of(name: str, aliases: Any) -> tuple[str, ...]:
    """The lookup keys of a catalog GPU: its name and every alias, normalised."""
    return tuple(_norm_gpu(k) for k in (name, *aliases))


def _llm_keys_of(name: str) -> tuple[str, str]:
    """The lookup keys of a catalog LLM: its id and the id without the organisation, normalised."""
    return _norm(name), _norm(name.split("/", 1)[-1])


def _gpu_from_raw(raw: Mapping[str, Any]) -> GpuSpec:
    return GpuSpec.from_dict(raw, entity=f"catalog GPU {raw.get('name')!r}")


def _llm_from_raw(raw: Mapping[str, Any]) -> LlmSpec:
    return LlmSpec.from_dict(raw["spec"], entity=f"catalog LLM {raw['name']!r}")


_HITS_MAX = 4096  # distinct spellings remembered per catalog (bounded: names may come from untrusted input)
_EXPECTED = {"gpu": "a GPU name (str)", "llm": "an LLM id (str)"}


def _memo_lookup(hits: dict[tuple[str, str], Any], kind: str, name: Any, find: Callable[[], Any]) -> Any:
    """``find()`` for ``name``, remembered per spelling (hits only), after a type check naming ``kind``."""
    if type(name) is not str:
        require_type(kind, name, str, _EXPECTED[kind])
    hit = hits.get((kind, name))
    if hit is None:
        hit = find()
        if hit is not None and len(hits) < _HITS_MAX:
            hits[(kind, name)] = hit
    return hit


def _index_or_none(i: int | None, build: Callable[[int], Any]) -> Any:
    return None if i is None else build(i)


@dataclass(frozen=True)
class Catalog:
    """The versioned catalog of GPUs and LLMs with case-insensitive name/alias lookup."""

    version: str
    gpus: tuple[GpuSpec, ...]
    llms: tuple[LlmSpec, ...]
    unsupported_llms: tuple[tuple[str, str], ...] = ()  # (name, why WattGPU cannot model it)
    _gpu_index: dict[str, GpuSpec] = field(repr=False, compare=False, default_factory=dict)
    _llm_index: dict[str, LlmSpec] = field(repr=False, compare=False, default_factory=dict)
    _hits: dict[tuple[str, str], Any] = field(repr=False, compare=False, default_factory=dict)  # exact spelling -> spec

    def __post_init__(self) -> None:
        for g in self.gpus:
            for key in _gpu_keys_of(g.name, g.aliases):
                self._gpu_index.setdefault(key, g)
        for m in self.llms:
            for key in _llm_keys_of(m.name):
                self._llm_index.setdefault(key, m)

    @classmethod
    def from_json(cls, data: Mapping[str, Any], source: str = "specs.json") -> "Catalog":
        """The catalog of a ``specs.json`` document (``source`` names it in errors: ArtifactError)."""
        check_catalog_shape(data, source)
        with _catalog_errors(source):
            gpus = tuple(_gpu_from_raw(g["spec"]) for g in data["gpus"])
            llms = tuple(_llm_from_raw(m) for m in data["llms"] if m["spec"])
            unsupported = tuple((m["name"], m["unsupported_reason"]) for m in data["llms"] if not m["spec"])
            return cls(version=str(data["catalog_version"]), gpus=gpus, llms=llms, unsupported_llms=unsupported)

    def known_pair(self, gpu: Any, llm: Any) -> tuple[GpuSpec, LlmSpec] | None:
        """(GPU, LLM) when both names were found before, spelled exactly so (:meth:`find_gpu`, :meth:`find_llm`
        remember them), else None: a repeated question skips the lookups and the order check."""
        if type(gpu) is str and type(llm) is str:
            g = self._hits.get(("gpu", gpu))
            if g is not None:
                m = self._hits.get(("llm", llm))
                if m is not None:
                    return g, m
        return None

    def find_gpu(self, name: str) -> GpuSpec | None:
        """The GPU whose name or alias matches ``name`` (case-insensitive) and no other GPU, or None."""
        return _memo_lookup(self._hits, "gpu", name,
                            lambda: _unique_hit(self._gpu_index.get(_norm_gpu(name)), gpu_matches(name, self._gpu_entries())))

    def find_llm(self, name: str) -> LlmSpec | None:
        """The supported LLM whose id matches ``name`` (case-insensitive) and no other LLM, or None."""
        return _memo_lookup(self._hits, "llm", name,
                            lambda: _unique_hit(self._llm_index.get(_norm(name)), llm_matches(name, self._llm_names())))

    def _gpu_entries(self) -> list[tuple[str, Sequence[str]]]:
        return [(g.name, g.aliases) for g in self.gpus]

    def _llm_names(self) -> list[str]:
        return [m.name for m in self.llms]

    def gpu(self, name: str) -> GpuSpec:
        """Find a GPU by name or alias (case-insensitive); an ambiguous name raises with its choices, an
        unknown one with the closest names (those holding the typed words first)."""
        hit = self.find_gpu(name)
        if hit is None:
            choices = gpu_matches(name, self._gpu_entries())
            if len(choices) > 1:
                raise AmbiguousNameError("GPU", name, choices)
            raise UnknownEntityError("GPU", name, _suggest(_norm_gpu(name), [g for g, _ in self._gpu_entries()],
                                                           _norm_gpu, numbers_weigh=2.0))
        return hit

    def llm(self, name: str) -> LlmSpec:
        """Find an LLM by Hugging Face id (or the part after the organisation), case-insensitive."""
        hit = self.find_llm(name)
        if hit is None:
            choices = llm_matches(name, self._llm_names())
            if len(choices) > 1:
                raise AmbiguousNameError("LLM", name, choices)
            for known, why in self.unsupported_llms:
                if _norm(name) in _llm_keys_of(known):
                    raise UnsupportedModelError(f"LLM {known!r} is in the catalog but cannot be modelled: {why}")
            raise UnknownEntityError("LLM", name, _suggest(_norm(name), self._llm_names(), _norm))
        return hit


def _unique_hit(hit: Any, matches: list[str]) -> Any:
    """``hit`` unless the typed name also fits other entries (then None: the caller reports the choices)."""
    return hit if hit is not None and len(matches) <= 1 else None


def llm_matches(name: str, names: Sequence[str]) -> list[str]:
    """Every catalog LLM id that a typed ``name`` fits: the full id, or the part after the organisation
    (``Llama-3.1-8B-Instruct`` may be under two organisations)."""
    key = _norm(name)
    return [n for n in names if key in _llm_keys_of(n)]


MAX_SUGGEST_CHARS = 200  # longer typed names get no spelling suggestions (difflib is quadratic in the length)


def _suggest(key: str, names: Sequence[str], norm: Callable[[str], str], numbers_weigh: float = 1.0) -> list[str]:
    """Up to three catalog names for a miss: those holding the typed text (every word of it, or as a
    substring) first, in catalog order; then the closest, word by word (each typed word scored by its
    best-matching word of the name, words with digits counting ``numbers_weigh`` times: GPU model numbers
    weigh double, so "H100 SXM6" suggests the H100 SXM5 before the V100 SXM2), with the whole spelling to
    break ties."""
    import difflib  # only to suggest names after a miss

    words = _tokens(key)
    normed = [norm(n) for n in names]
    holding = [n for n, k in zip(names, normed) if words and words <= _tokens(k)]
    holding += [n for n, k in zip(names, normed) if key and key in k and n not in holding]
    if len(holding) < 3 and words and len(key) <= MAX_SUGGEST_CHARS:  # a hostile 100k-char name gets none
        def closeness(k: str) -> tuple[float, float]:
            theirs = _tokens(k) | {k.split("/", 1)[-1]}
            per_word = sum(weight[w] * max(difflib.SequenceMatcher(None, w, t).ratio() for t in theirs) for w in words)
            return per_word / sum(weight.values()), difflib.SequenceMatcher(None, key, k).ratio()
        weight = {w: numbers_weigh if any(c.isdigit() for c in w) else 1.0 for w in words}
        scored = sorted(((closeness(k), n) for n, k in zip(names, normed) if n not in holding),
                        key=lambda item: item[0], reverse=True)
        holding += [n for (score, _), n in scored[:6] if score >= 0.6]
    return holding[:3] if len(holding) <= 4 else holding[:4]


def packaged_bytes(name: str) -> bytes:
    """The bytes of ``wattgpu/models/<name>``: a plain file read when the package is on disk (no
    importlib.resources/pathlib import on the cold-start path), importlib.resources otherwise. A built
    wheel carries the large artifacts as ``<name>.xz`` (hatch_build.py): those are decompressed here."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "models", name)
    for candidate, packed in ((path, False), (path + ".xz", True)):
        if os.path.isfile(candidate):
            with open(candidate, "rb") as f:
                data = f.read()
            return _unpack(data, name) if packed else data
    from importlib import resources  # zipped or otherwise virtual package

    models = resources.files("wattgpu") / "models"
    if not (models / name).is_file() and (models / (name + ".xz")).is_file():
        return _unpack((models / (name + ".xz")).read_bytes(), name)
    return (models / name).read_bytes()


def _unpack(data: bytes, name: str) -> bytes:
    """Decompress a packaged ``.xz`` artifact (bounded: a damaged file is an ArtifactError, not a memory blow-up)."""
    import lzma

    unpacker = lzma.LZMADecompressor()
    try:
        out = unpacker.decompress(data, max_length=MAX_PACKED_ARTIFACT_BYTES)
    except lzma.LZMAError as exc:
        raise ArtifactError(f"wattgpu/models/{name}.xz is damaged ({exc}); reinstall wattgpu") from None
    if not unpacker.eof and len(out) < MAX_PACKED_ARTIFACT_BYTES:
        raise ArtifactError(f"wattgpu/models/{name}.xz is damaged (truncated); reinstall wattgpu")
    if len(out) >= MAX_PACKED_ARTIFACT_BYTES:
        raise ArtifactError(f"wattgpu/models/{name}.xz unpacks to more than {MAX_PACKED_ARTIFACT_BYTES} bytes; "
                            "reinstall wattgpu")
    return out


@lru_cache(maxsize=1)
def catalog_json_bytes() -> bytes:
    """Raw bytes of the packaged catalog snapshot."""
    try:
        return packaged_bytes(CATALOG_RESOURCE)
    except (FileNotFoundError, OSError) as exc:
        raise ArtifactError(f"wattgpu/models/{CATALOG_RESOURCE} is missing ({exc}); reinstall wattgpu") from None


class LazyCatalog(Catalog):
    """A :class:`Catalog` over parsed catalog JSON that builds (and validates) a spec only when it is
    first needed: a lookup by name builds that one spec; ``gpus``, ``llms`` or a failed lookup (for
    its suggestions) build them all, once, reusing the specs already built. Keeps the ~175 spec
    constructions off the cold start of a process that predicts a few pairs."""

    _gpu_raw: list[Any]
    _llm_raw: list[Any]
    _unsupported: tuple[tuple[str, str], ...]
    _gpu_keys: dict[str, int]
    _llm_keys: dict[str, int]
    _built_gpus: list[GpuSpec | None]
    _built_llms: list[LlmSpec | None]
    _full: Catalog | None
    _build_lock: Any

    def __init__(self, data: Mapping[str, Any]) -> None:  # noqa: D107 - no dataclass __init__ on purpose
        import threading

        setattr_ = object.__setattr__
        check_catalog_shape(data)
        with _catalog_errors():
            gpu_raw = [g["spec"] for g in data["gpus"]]
            llm_raw = [m for m in data["llms"] if m["spec"]]
            unsupported = tuple((m["name"], m["unsupported_reason"]) for m in data["llms"] if not m["spec"])
            gpu_keys: dict[str, int] = {}
            for i, g in enumerate(gpu_raw):
                for key in _gpu_keys_of(g["name"], g.get("aliases", ())):
                    gpu_keys.setdefault(key, i)
            llm_keys: dict[str, int] = {}
            for i, m in enumerate(llm_raw):
                for key in _llm_keys_of(m["spec"]["name"]):
                    llm_keys.setdefault(key, i)
            version = str(data["catalog_version"])
        for k, v in (("version", version), ("_unsupported", unsupported), ("_gpu_raw", gpu_raw), ("_llm_raw", llm_raw),
                     ("_gpu_keys", gpu_keys), ("_llm_keys", llm_keys), ("_built_gpus", [None] * len(gpu_raw)),
                     ("_built_llms", [None] * len(llm_raw)), ("_full", None), ("_hits", {}),
                     ("_build_lock", threading.Lock())):
            setattr_(self, k, v)

    def _gpu_at(self, i: int) -> GpuSpec:
        return self._built(self._built_gpus, self._gpu_raw, i, _gpu_from_raw)

    def _llm_at(self, i: int) -> LlmSpec:
        return self._built(self._built_llms, self._llm_raw, i, _llm_from_raw)

    def _built(self, built: list[Any], raws: list[Any], i: int, make: Callable[[Any], Any]) -> Any:
        """Entry ``i`` of ``built``, made from ``raws[i]`` the first time (once, under the lock)."""
        spec = built[i]
        if spec is None:
            with self._build_lock:
                spec = built[i]
                if spec is None:
                    with _catalog_errors():
                        spec = built[i] = make(raws[i])
        return spec

    def _all(self) -> Catalog:
        """The fully built catalog (same spec objects as the lookups returned)."""
        full = self._full
        if full is None:
            full = Catalog(version=self.version, gpus=tuple(self._gpu_at(i) for i in range(len(self._gpu_raw))),
                           llms=tuple(self._llm_at(i) for i in range(len(self._llm_raw))),
                           unsupported_llms=self._unsupported)
            object.__setattr__(self, "_full", full)
        return full

    gpus = property(lambda self: self._all().gpus)
    llms = property(lambda self: self._all().llms)
    unsupported_llms = property(lambda self: self._unsupported)
    _gpu_index = property(lambda self: self._all()._gpu_index)
    _llm_index = property(lambda self: self._all()._llm_index)

    def find_gpu(self, name: str) -> GpuSpec | None:
        return _memo_lookup(self._hits, "gpu", name, lambda: self._find_gpu(name))

    def find_llm(self, name: str) -> LlmSpec | None:
        return _memo_lookup(self._hits, "llm", name, lambda: self._find_llm(name))

    def _find_gpu(self, name: str) -> GpuSpec | None:
        entries = [(g["name"], g.get("aliases", ())) for g in self._gpu_raw]
        i = self._gpu_keys.get(_norm_gpu(name)) if len(gpu_matches(name, entries)) <= 1 else None
        return _index_or_none(i, self._gpu_at)

    def _find_llm(self, name: str) -> LlmSpec | None:
        names = [m["spec"]["name"] for m in self._llm_raw]
        i = self._llm_keys.get(_norm(name)) if len(llm_matches(name, names)) <= 1 else None
        return _index_or_none(i, self._llm_at)

    def gpu(self, name: str) -> GpuSpec:
        return self.find_gpu(name) or self._all().gpu(name)

    def llm(self, name: str) -> LlmSpec:
        return self.find_llm(name) or self._all().llm(name)

    def __eq__(self, other: object) -> bool:
        return self._all() == (other._all() if isinstance(other, LazyCatalog) else other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(self._all()).replace("Catalog(", "LazyCatalog(", 1)


@lru_cache(maxsize=1)
def default_catalog() -> Catalog:
    """The catalog shipped with the package (loaded once per process; specs built on first use)."""
    try:
        data = json.loads(catalog_json_bytes())
    except ValueError as exc:
        raise ArtifactError(f"wattgpu/models/{CATALOG_RESOURCE} is not valid JSON ({exc}); reinstall wattgpu") from None
    return LazyCatalog(data)

"""The vLLM command line that realises a predicted configuration (``launch_args``)."""
from __future__ import annotations

from typing import Any

from .quant import DTYPE_ALIASES

# --dtype overrides that vLLM applies to a 16-bit checkpoint at load time: FP8 with its own online
# quantisation; int8 / int4 through bitsandbytes (in-flight). A checkpoint that is already quantised
# (its config.json has quantization_config) needs no flag: vLLM reads the method from the config.
ONLINE_QUANTIZATION = {"fp8": "fp8", "int8": "bitsandbytes", "int4": "bitsandbytes"}


def vllm_args(llm: Any, wl: Any, dtype: str | None = None) -> list[str] | None:
    """``vllm serve`` argument list (model first) for ``llm`` under ``wl`` (tensor-parallel size, batch
    cap, memory share, KV-cache dtype, context length, online quantisation for a ``dtype`` override);
    None for other engines."""
    if wl.engine != "vllm":
        return None
    args = ["vllm", "serve", llm.name, "--tensor-parallel-size", str(wl.tp), "--max-num-seqs", str(wl.max_batch),
            "--gpu-memory-utilization", f"{wl.gpu_memory_utilization:g}", "--kv-cache-dtype", wl.kv_cache_dtype,
            "--max-model-len", str(wl.context_tokens)]
    key = dtype.strip().lower() if isinstance(dtype, str) else None
    key = DTYPE_ALIASES.get(key, key) if key else None
    if key in ONLINE_QUANTIZATION:
        args += ["--quantization", ONLINE_QUANTIZATION[key]]
    return args

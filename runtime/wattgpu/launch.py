"""The vLLM command line that realises a predicted configuration (``launch_args``) and the context it serves.

``--max-model-len`` is the longest sequence (prompt + output) the server accepts: the user's value, else the
model's own context (``max_position_embeddings``), else the workload's input + output tokens when the config
does not say. vLLM refuses to start when its KV cache cannot hold one sequence of that length, so a model
context larger than what fits is lowered to the largest multiple of 256 tokens that does (never below the
workload's input + output); the plan says so and how many such sequences the KV cache holds.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import features as F
from . import physics
from .quant import DTYPE_ALIASES

# --dtype overrides that vLLM applies to a 16-bit checkpoint at load time: FP8 with its own online
# quantisation; int8 / int4 through bitsandbytes (in-flight). A checkpoint that is already quantised
# (its config.json has quantization_config) needs no flag: vLLM reads the method from the config.
ONLINE_QUANTIZATION = {"fp8": "fp8", "int8": "bitsandbytes", "int4": "bitsandbytes"}
LEN_STEP = 256  # a lowered --max-model-len is rounded down to a multiple of this


@dataclass(frozen=True)
class ContextPlan:
    """``max_model_len`` (tokens) the launch line sets, how many sequences of that length the KV cache
    holds per group (``kv_sequences``), and ``note`` when the model's context had to be lowered or a
    user's length does not fit (else None)."""

    max_model_len: int
    kv_sequences: int
    note: str | None = None


def context_plan(gpu: Any, llm: Any, wl: Any, max_model_len: int | None = None) -> ContextPlan:
    """The ``--max-model-len`` for ``llm`` on ``wl.tp`` × ``gpu`` and the KV capacity at that length."""
    c = F.columns([(gpu, llm, wl)])
    budget, per_token = float(c["kv_budget"][0]), float(c["kv_per_token"][0])
    window, sliding = c["llm_sliding_window"], c["sliding_fraction"]

    def sequences(length: int) -> int:
        per_seq = float(physics.kv_bytes_per_sequence(c["kv_per_token"], np.array([float(length)]), window, sliding)[0])
        return int(math.floor(max(budget, 0.0) / max(per_seq, 1.0)))

    need = int(wl.context_tokens)
    if max_model_len is not None:
        n = sequences(max_model_len)
        note = None if n >= 1 else (f"the KV cache holds no {max_model_len}-token sequence on this group: vLLM refuses "
                                    "to start; lower --max-model-len")
        return ContextPlan(int(max_model_len), n, note)
    model_len = int(llm.max_position_embeddings or need)
    length = max(model_len, need)
    if sequences(length) >= 1:
        return ContextPlan(length, sequences(length))
    fits_tokens = budget / max(per_token, 1.0)  # full-context KV per token: a safe bound for sliding layers too
    lowered = max(need, int(fits_tokens // LEN_STEP) * LEN_STEP)
    return ContextPlan(lowered, sequences(lowered),
                       f"--max-model-len lowered from the model's {model_len} tokens to {lowered}: the KV cache "
                       f"holds no longer sequence")


def model_reference(llm_arg: Any, spec: Any) -> str:
    """What ``vllm serve`` loads: the directory of a local config (a path the user gave), else the model id."""
    if isinstance(llm_arg, (str, os.PathLike)) and os.path.exists(os.fspath(llm_arg)):
        path = os.fspath(llm_arg)
        return (os.path.dirname(path) or ".") if os.path.isfile(path) else path
    return str(spec.name)


def vllm_args(llm: Any, wl: Any, dtype: str | None = None, max_model_len: int | None = None,
              model: str | None = None) -> list[str] | None:
    """``vllm serve`` argument list (model first) for ``llm`` under ``wl`` (tensor-parallel size, batch
    cap, memory share, KV-cache dtype, ``max_model_len`` — default the workload's input + output tokens —,
    online quantisation for a ``dtype`` override); ``model`` is what to load (default ``llm.name``); None
    for other engines."""
    if wl.engine != "vllm":
        return None
    args = ["vllm", "serve", model or llm.name, "--tensor-parallel-size", str(wl.tp), "--max-num-seqs",
            str(wl.max_batch), "--gpu-memory-utilization", f"{wl.gpu_memory_utilization:g}", "--kv-cache-dtype",
            wl.kv_cache_dtype, "--max-model-len", str(max_model_len or wl.context_tokens)]
    key = dtype.strip().lower() if isinstance(dtype, str) else None
    key = DTYPE_ALIASES.get(key, key) if key else None
    if key in ONLINE_QUANTIZATION:
        args += ["--quantization", ONLINE_QUANTIZATION[key]]
    return args

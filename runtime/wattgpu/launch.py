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
from typing import Any

import numpy as np

from .frozen import dataclass
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


def context_plans(rows: list[tuple[Any, Any, Any]], max_model_len: int | None = None,
                  cols: F.Columns | None = None) -> list[ContextPlan]:
    """The ``--max-model-len`` and the KV capacity at that length of each (GPU, LLM, workload) row (a group
    of ``wl.tp`` GPUs), in one vectorised pass over the rows' memory columns (``cols``: the rows'
    :func:`features.columns` when the caller has them)."""
    if not rows:
        return []
    c = F.columns(rows) if cols is None else cols
    budget = np.maximum(c["kv_budget"], 0.0)
    window, sliding = c["llm_sliding_window"], c["sliding_fraction"]

    def sequences(length: np.ndarray) -> np.ndarray:
        per_seq = physics.kv_bytes_per_sequence(c["kv_per_token"], length, window, sliding)
        return np.floor(budget / np.maximum(per_seq, 1.0))

    need = np.array([float(w.context_tokens) for _, _, w in rows])
    if max_model_len is not None:
        n = sequences(np.full(len(rows), float(max_model_len)))
        return [ContextPlan(int(max_model_len), int(k), None if k >= 1 else
                            f"the KV cache holds no {max_model_len}-token sequence on this group: vLLM refuses to "
                            "start; lower --max-model-len") for k in n.tolist()]
    model_len = np.array([float(m.max_position_embeddings or w.context_tokens) for _, m, w in rows])
    length = np.maximum(model_len, need)
    full = sequences(length)
    # full-context KV per token: a safe bound for sliding layers too
    lowered = np.maximum(need, np.floor(budget / np.maximum(c["kv_per_token"], 1.0) / LEN_STEP) * LEN_STEP)
    low_n = sequences(lowered)
    out = []
    for fk, lk, wk, nk, mk in zip(full.tolist(), length.tolist(), lowered.tolist(), low_n.tolist(),
                                  model_len.tolist()):  # floats: no numpy scalar per read
        if fk >= 1:
            out.append(ContextPlan(int(lk), int(fk)))
        else:
            out.append(ContextPlan(int(wk), int(nk), f"--max-model-len lowered from the model's {int(mk)} tokens to "
                                                     f"{int(wk)}: the KV cache holds no longer sequence"))
    return out


def context_plan(gpu: Any, llm: Any, wl: Any, max_model_len: int | None = None) -> ContextPlan:
    """:func:`context_plans` of one row."""
    return context_plans([(gpu, llm, wl)], max_model_len)[0]


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

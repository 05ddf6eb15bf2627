"""Time to first token (TTFT), end-to-end latency and what bounds a decode step: the one place they live.

TTFT = slot wait + prefill queue + own prefill, each from the numbers the capacity model already has
(request time ``W`` from :func:`capacity.request_s`, capacity ``max_qps``, the ITL grid):

- **own prefill** ``prefill_s`` = max((prompt matmul FLOPs + attention FLOPs) / (matmul peak ×
  ``PREFILL_EFFICIENCY``) + the prompt's all-reduces in a TP group, prefill steps × decode-step time). The
  attention FLOPs (:func:`prefill_attention_flops`, causal, sliding windows honoured) grow with the prompt's
  square: +50 % over the weights' FLOPs for an 8B model at 32K tokens. A step lasts at least the row's
  ITL: the step that computes the first token also decodes the running batch, so TTFT ≥ one decode step. The engine prefills at most ``budget − running decodes`` prompt tokens
  per step (vLLM's chunked prefill, ``max_num_batched_tokens``: :func:`prefill_budget`), and every step
  lasts at least a decode step of the running batch (the step envelope: the slowest grid ITL at or below the
  batch, monotone in the batch whatever the trees learned). Never below the compute roofline
  (:func:`capacity.prefill_s`), since the efficiency is ≤ 1.
- **prefill queue** (interference from other requests' prefills): prompts are prefilled first come first
  served through that token budget, a single server of time ``stage_s`` per prompt (budget-bound, or the
  compute roofline the capacity model charges a request, the slower) fed at the served request rate;
  M/D/1 (equal prompts): wait = ρ / (2(1 − ρ)) × ``stage_s``, ρ = rate × ``stage_s`` (at most
  ``MAX_PREFILL_RHO``).
- **slot wait**: a Poisson server queues for one of the engine's batch slots: M/M/c (Erlang C) with ``c`` =
  the slots of the capacity's operating point and service time ``c / max_qps`` (= ``W`` there), so
  wait = C(c, a) / (max_qps − qps), a = c × qps / max_qps; undefined (``None``) at or beyond capacity.
  A closed loop runs min(clients, batch cap, what fits) and queues the rest: each client's cycle lasts
  clients / served request rate (Little's law), and what it spends beyond ``W`` is its wait.
  Offline TTFT is counted from a request's admission to a batch slot (its wait in the offline queue
  depends on its position: request k waits about k / ``max_qps``).

- **fitted excess** (:mod:`ttft_fit`, from the bundle's ``ttft`` section; 0 without one): decode steps of the
  running batch between the first token's step and the client (scheduler, detokenization, streaming), plus the
  seconds a burst benchmark adds (``workload.arrival = burst``: all clients start together). In a closed loop
  a client spends that time away from the engine, not queueing for a slot, so the excess adds only beyond the
  slot wait (the cycle stays clients / request rate: Little's law).

Every term is non-decreasing in the offered load (qps, clients), so TTFT is too, and TTFT ≥ the compute
roofline of the prompt. Arrays or, for the one-row scalar path (non-server rows), plain floats.
"""
from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

import numpy as np

from . import capacity
from .. import ops, parallel, physics
from ..workload import KINDS

# Share of the dense tensor peak a prefill reaches: large GEMMs run at 50–70 % of peak in vLLM/TensorRT
# kernels, attention and norms lower; a round a-priori figure, not fitted on the TTFT rows.
PREFILL_EFFICIENCY = 0.5
CLOSED_LOOP_CODE = float(KINDS.index("closed_loop"))  # cols["wl_kind_code"] of a closed loop
MAX_PREFILL_RHO = 0.95  # the prefill queue's load is capped here (beyond it the chunk budget is the bottleneck)


def prefill_budget(gpu: Any, wl: Any) -> float:
    """Prompt tokens the engine batches per step: vLLM's default ``max_num_batched_tokens`` on ``gpu`` (its
    catalog trait :attr:`GpuSpec.default_batched_tokens`), never below the batch cap ``wl.max_batch`` (vLLM
    refuses a budget smaller than max_num_seqs)."""
    return float(max(gpu.default_batched_tokens, wl.max_batch))


def step_envelope(batch: np.ndarray, grid_batch: np.ndarray, grid_itl: np.ndarray) -> np.ndarray:
    """Per row, the slowest decode step of the capacity grid at batches ≤ ``batch`` (rows × points):
    non-decreasing in the batch by construction; the first grid point (batch 1) where none qualifies."""
    with np.errstate(invalid="ignore"):
        ok = (grid_batch <= batch[:, None]) & np.isfinite(grid_itl)
        env = np.where(ok, grid_itl, -np.inf).max(axis=1)
    return np.where(np.isfinite(env), env, grid_itl[:, 0])


def step_envelope_one(batch: float, grid_batch: tuple[float, ...], grid_itl: tuple[float, ...]) -> float:
    """:func:`step_envelope` of one row on floats (max is exact: the same bits)."""
    best = -math.inf
    for b, i in zip(grid_batch, grid_itl):
        if b <= batch and best < i < math.inf:  # finite i (NaN and ±inf fail) above the best so far: max's pick
            best = i
    return best if math.isfinite(best) else grid_itl[0]


def prefill_attention_flops(cols: Any) -> Any:
    """Attention FLOPs of one prompt's prefill per GPU of its TP group: per layer and head, QKᵀ and PV cost
    2 × head_dim FLOPs per (query, key) pair, and a causal prompt of L tokens has L²/2 pairs (a sliding
    window W: W·L − W²/2 once L > W, on the model's sliding layers). Heads split over the TP group."""
    inp = cols["wl_input_tokens"]
    width = cols["llm_num_attention_heads"] * cols["llm_head_dim"]
    window = ops.where(ops.isnan(cols["llm_sliding_window"]), 0.0, cols["llm_sliding_window"])
    sliding = ops.where(ops.isnan(cols["llm_sliding_window_layers"]), 0.0, cols["llm_sliding_window_layers"])
    sliding = ops.where(window > 0.0, ops.minimum(sliding, cols["llm_num_layers"]), 0.0)
    full_pairs = inp * inp / 2.0
    window_pairs = ops.where(inp > window, window * inp - window * window / 2.0, full_pairs)
    pairs = (cols["llm_num_layers"] - sliding) * full_pairs + sliding * window_pairs
    return 4.0 * width * pairs / cols["wl_tp"]


def prefill_attention_s(cols: Any) -> Any:
    """:func:`prefill_attention_flops` at the matmul peak (s), the attention part of the compute roofline."""
    return prefill_attention_flops(cols) / (cols["compute_tflops"] * 1e12)


def ttft(cols: Any, budget: Any, batch: Any, step_s: Any, req_rate: Any, slot_wait_s: Any,
         excess_steps: Any = 0.0, burst_s: Any = 0.0, pcie_comm: Any = 0.0) -> dict[str, Any]:
    """TTFT and its parts (s) of rows with decode batch ``batch``, step time ``step_s`` (the envelope, at
    least the row's ITL: the step that computes the first token also decodes the running batch), served
    request rate ``req_rate`` (req/s) and slot wait ``slot_wait_s`` (NaN = unbounded). TTFT is never
    below one such step, nor below the prompt's compute (weights and attention) plus, in a TP group, its
    all-reduces. The fitted excess (:mod:`ttft_fit`) adds ``excess_steps`` × ``step_s`` + ``burst_s``, and on a
    TP group linked by PCIe ``pcie_comm`` × the prompt's modelled all-reduce time; in a closed loop only what
    exceeds the slot wait (``ttft_excess_s``: the client is away, not queueing)."""
    inp = cols["wl_input_tokens"]
    roofline = capacity.prefill_s(cols)
    attention = prefill_attention_s(cols)
    comm = prefill_allreduce_s(cols)
    compute = (roofline + attention) / PREFILL_EFFICIENCY + comm
    free = ops.maximum(budget - ops.maximum(batch - 1.0, 0.0), 1.0)
    steps = -ops.floor(-(inp / free))  # ceil: whole engine steps
    own = ops.maximum(steps * step_s, compute)
    # time the engine spends on one prompt as the capacity model charges it (compute roofline, or the budget's
    # steps): the queue's load is then below 1 wherever the capacity says the rate is sustainable
    stage = ops.maximum(inp * step_s / free, roofline)
    rho = ops.minimum(req_rate * stage, MAX_PREFILL_RHO)
    queue = rho / (2.0 * (1.0 - rho)) * stage
    # a closed loop's client spends the excess away from the engine, not queueing for a slot: its cycle is
    # clients / request rate either way (Little's law), so the excess adds only beyond the slot wait
    excess = excess_steps * step_s + burst_s + pcie_comm * pcie_allreduce_s(cols, comm)
    closed = cols["wl_kind_code"] == CLOSED_LOOP_CODE
    excess = ops.where(closed, ops.maximum(excess - slot_wait_s, 0.0), excess)
    return {"ttft_s": slot_wait_s + queue + own + excess, "prefill_s": own, "prefill_queue_s": queue,
            "slot_wait_s": slot_wait_s, "prefill_roofline_s": roofline, "prefill_attention_s": attention,
            "prefill_steps": steps, "prefill_allreduce_s": comm, "ttft_excess_s": excess, "step_s": step_s}


def prefill_allreduce_s(cols: Any) -> Any:
    """All-reduce time of a prompt's prefill in a TP group (s): the decode step's two all-reduces per layer,
    over every prompt token's activations (:func:`parallel.comm_step_s` at batch = input tokens); 0 on one GPU."""
    return parallel.comm_step_s(cols["llm_num_layers"], cols["wl_input_tokens"], cols["llm_hidden_size"],
                                cols["wl_tp"], cols["link_gb_s"], cols["link_latency_s"])


def pcie_allreduce_s(cols: Any, comm: Any = None) -> Any:
    """The prompt's all-reduce time (``comm``, default :func:`prefill_allreduce_s`) where the TP group's link is
    PCIe, 0 on NVLink: what the fitted ``pcie_comm`` multiplies (:mod:`ttft_fit`)."""
    return (prefill_allreduce_s(cols) if comm is None else comm) * (1.0 - cols["link_is_nvlink"])


def closed_loop_wait(clients: Any, req_rate: Any, req_s: Any) -> Any:
    """Slot wait of a closed loop: the engine serves ``req_rate`` requests/s (its running batch over the
    request time ``req_s``, never above capacity), so by Little's law over the whole loop each client's
    cycle lasts clients / ``req_rate``; what it spends beyond ``req_s`` in a slot is the wait for one
    (0 while every client has a slot). 0 for other rows (``clients`` NaN)."""
    extra = ops.where(ops.isnan(clients), 0.0, clients / req_rate - req_s)
    return ops.maximum(extra, 0.0)


def erlang_c(servers: int, offered: float) -> float:
    """Probability an arrival waits in an M/M/c queue with ``servers`` and ``offered`` load (Erlangs),
    from the stable Erlang-B recursion; 1 when ``offered`` ≥ ``servers``. A Python loop over every slot
    (~10 µs at 256 slots): :func:`server_wait` keeps its recent answers."""
    if offered >= servers:
        return 1.0
    b = 1.0
    for k in range(1, servers + 1):
        ab = offered * b  # the same product the recursion's numerator and denominator use
        b = ab / (k + ab)
        if b == 0.0:
            break
    rho = offered / servers
    return b / (1.0 - rho * (1.0 - b))


def server_wait(qps: float, max_qps: float, slots: float) -> float:
    """Mean wait (s) for a batch slot of a Poisson server: M/M/c, c = ``slots``, service time c / ``max_qps``:
    C(c, a) / (max_qps − qps); NaN at or beyond capacity. The last :data:`WAITS_KEPT` answers for a positive
    rate are kept (the Erlang recursion runs up to ``slots`` steps; a rank asks for the same loads again)."""
    if not (qps < max_qps and math.isfinite(max_qps) and slots >= 1):
        return math.nan
    return _kept_wait(qps, max_qps, slots) if qps > 0.0 else _wait(qps, max_qps, slots)  # ±0: not by equality


def _wait(qps: float, max_qps: float, slots: float) -> float:
    n = max(1, int(round(slots)))
    return erlang_c(n, n * qps / max_qps) / (max_qps - qps)


WAITS_KEPT = 1024
_kept_wait = lru_cache(maxsize=WAITS_KEPT, typed=True)(_wait)  # a pure function of its floats


def forget_waits() -> None:
    """Empty the kept slot waits (:meth:`wattgpu.results.RowMemo.clear` does, with the row memos)."""
    _kept_wait.cache_clear()


def e2e_latency(ttft_s: Any, itl_s: Any, output_tokens: Any) -> Any:
    """End-to-end latency of one request: TTFT + (output tokens − 1) × ITL."""
    return ttft_s + (output_tokens - 1.0) * itl_s


def step_parts(cols: Any, batch: Any) -> dict[str, Any]:
    """The roofline parts of one decode step at ``batch`` (s): ``memory`` (DRAM bytes / bandwidth),
    ``compute`` (FLOPs / matmul peak) and ``interconnect`` (the group's all-reduces; 0 on one GPU)."""
    step_bytes = physics.decode_step_bytes(cols["active_weights_bytes"], cols["weights_bytes"], batch,
                                           cols["kv_per_token"], cols["mean_context"], cols["llm_num_experts"],
                                           cols["llm_experts_per_tok"])
    mem = step_bytes / (cols["gpu_memory_bandwidth_gb_s"] * 1e9)
    flop = 2.0 * cols["gpu_active_params_b"] * 1e9 * batch / (cols["compute_tflops"] * 1e12)
    comm = parallel.comm_step_s(cols["llm_num_layers"], batch, cols["llm_hidden_size"], cols["wl_tp"],
                                cols["link_gb_s"], cols["link_latency_s"])
    return {"memory": mem, "compute": flop, "interconnect": comm}


BOUNDS = ("memory", "compute", "interconnect")
_BOUND_KEYS = ("kind", *(f"{k}_share" for k in BOUNDS))


def bound(mem: float, flop: float, comm: float) -> dict[str, Any]:
    """What bounds a decode step: ``kind`` (the largest part) and each part's ``*_share`` of their sum."""
    parts = (mem, flop, comm)  # in BOUNDS order
    total = mem + flop + comm
    kind = BOUNDS[parts.index(max(parts))]  # the first largest part (identity first: a NaN finds itself)
    shares = (mem / total, flop / total, comm / total) if total > 0 else (0.0, 0.0, 0.0)
    return dict(zip(_BOUND_KEYS, (kind, *shares)))


def bound_kinds(mem: list[float], flop: list[float], comm: list[float]) -> list[str]:
    """:func:`bound`'s ``kind`` per row of three columns: the first largest part, by the same comparisons; a row
    with a part that is not finite goes through :func:`bound` itself."""
    a, b, c = (np.asarray(x, dtype=np.float64) for x in (mem, flop, comm))
    k = np.where(b > a, 1, 0)
    k = np.where(c > np.where(k == 1, b, a), 2, k)
    kinds = [BOUNDS[i] for i in k.tolist()]
    for i in np.flatnonzero(~(np.isfinite(a) & np.isfinite(b) & np.isfinite(c))).tolist():
        kinds[i] = bound(mem[i], flop[i], comm[i])["kind"]
    return kinds

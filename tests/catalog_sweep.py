"""The issue-38 catalog sweeps, as functions a test and a design script share (tests/test_catalog_sweep.py,
tools/issue38/sweep.py).

- **Strict dominance**: over dense 16-bit catalog LLM pairs where one has >= 1.2x the weights and at least the KV
  bytes per token, the active parameters, the layers and the hidden size of the other, on every catalog GPU at batch
  caps 32 and 256, the bigger model may not be predicted faster: not more tokens/s, and not a shorter ITL when both
  run the same effective batch.
- **Saturated cap steps**: over every catalog GPU x 4 LLMs x caps 8 -> 512 (doubling), a step where tokens/s does not
  rise may not raise power by more than 5 %: at equal work per second a bigger batch reads the weights less often and
  does no more FLOPs.
"""
from __future__ import annotations

from itertools import permutations
from typing import Any

from wattgpu import memory
from wattgpu.predictor import Predictor
from wattgpu.specs import LlmSpec
from wattgpu.workload import Workload

DOMINANCE_CAPS = (32, 256)
WEIGHT_RATIO = 1.2
CAP_STEPS = (8, 16, 32, 64, 128, 256, 512)
CAP_LLMS = ("Qwen/Qwen2.5-0.5B-Instruct", "meta-llama/Llama-3.2-3B-Instruct", "meta-llama/Llama-3.1-8B-Instruct",
            "Qwen/Qwen3-14B")
POWER_RISE = 0.05
REL = 1e-6  # equal within float noise


def dense_16bit(pred: Predictor) -> list[LlmSpec]:
    cat = pred.catalog
    return [m for m in cat.llms if m.num_experts <= 1 and m.weight_bytes_per_param == 2.0 and not m.quantized
            and m.compute_dtype in ("float16", "bfloat16") and m.arch_class == "decoder_transformer"]


def dominates(a: LlmSpec, b: LlmSpec) -> bool:
    """``a`` reads and computes at least as much as ``b`` per token in every respect, and 1.2x the weights."""
    return (a.total_params_b * a.weight_bytes_per_param >= WEIGHT_RATIO * b.total_params_b * b.weight_bytes_per_param
            and memory.llm_kv_bytes_per_token(a) >= memory.llm_kv_bytes_per_token(b)
            and a.active_params_b >= b.active_params_b and a.num_layers >= b.num_layers
            and a.hidden_size >= b.hidden_size)


def dominance_inversions(pred: Predictor) -> tuple[int, int, list[str]]:
    """(inversions, comparisons, examples)."""
    llms = dense_16bit(pred)
    pairs = [(a, b) for a, b in permutations(llms, 2) if dominates(a, b)]
    used = sorted({m.name for p in pairs for m in p})
    by_name = {m.name: m for m in llms}
    bad, n, examples = 0, 0, []
    for cap in DOMINANCE_CAPS:
        wl = Workload(max_batch=cap)
        for g in pred.catalog.gpus:
            out = dict(zip(used, pred.predict_specs_safe([(g, by_name[m], wl) for m in used])))
            for a, b in pairs:
                pa, pb = out[a.name], out[b.name]
                if isinstance(pa, Exception) or isinstance(pb, Exception):
                    continue
                n += 1
                faster = pa.throughput_tok_s > pb.throughput_tok_s * (1 + REL)
                same_batch = abs(pa.effective_batch - pb.effective_batch) <= REL * pb.effective_batch
                shorter = same_batch and pa.itl_s < pb.itl_s * (1 - REL)
                if faster or shorter:
                    bad += 1
                    if len(examples) < 10:
                        examples.append(f"{a.name} faster than {b.name} on {g.name} cap {cap}: "
                                        f"{pa.itl_s * 1e3:.2f} vs {pb.itl_s * 1e3:.2f} ms, "
                                        f"{pa.throughput_tok_s:.0f} vs {pb.throughput_tok_s:.0f} tok/s")
    return bad, n, examples


def saturated_power_steps(pred: Predictor) -> tuple[int, int, list[str]]:
    """(steps with tokens/s flat or falling and power up > 5 %, such flat steps, examples)."""
    cat = pred.catalog
    llms = [cat.llm(n) for n in CAP_LLMS]
    bad, flat, examples = 0, 0, []
    for g in cat.gpus:
        for m in llms:
            rows: list[Any] = pred.predict_specs_safe([(g, m, Workload(max_batch=c)) for c in CAP_STEPS])
            for c0, c1, p0, p1 in zip(CAP_STEPS, CAP_STEPS[1:], rows, rows[1:]):
                if isinstance(p0, Exception) or isinstance(p1, Exception):
                    continue
                if p1.throughput_tok_s > p0.throughput_tok_s * (1 + REL):
                    continue
                flat += 1
                if p1.power_w > p0.power_w * (1 + POWER_RISE):
                    bad += 1
                    if len(examples) < 10:
                        examples.append(f"{m.name} on {g.name}, cap {c0} -> {c1}: {p0.throughput_tok_s:.0f} -> "
                                        f"{p1.throughput_tok_s:.0f} tok/s, {p0.power_w:.0f} -> {p1.power_w:.0f} W")
    return bad, flat, examples

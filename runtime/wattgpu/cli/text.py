"""What the commands print for people: durations, the TTFT line, the decode-step bound, the power method."""
from __future__ import annotations

from typing import Any

from .base import num


def dur(seconds: float) -> str:
    """A duration as ``12.3 ms`` below 10 s, else ``12.35 s``."""
    return f"{seconds * 1e3:.1f} ms" if seconds < 10 else f"{num(seconds, '.2f')} s"


def ttft_text(p: dict[str, Any]) -> str:
    """The TTFT line of ``predict``: the total and its parts."""
    if p["ttft_s"] is None:
        return "unbounded: the queue grows without limit (overloaded)"
    b = p["ttft_breakdown"]
    parts = f"prefill {dur(b['prefill_s'])} in {b['prefill_steps']} step(s) of ≤ {b['prefill_budget_tokens']} tokens"
    if b.get("prefill_allreduce_s", 0.0) >= 5e-5:
        parts += f" (incl. all-reduces {dur(b['prefill_allreduce_s'])})"
    if b["prefill_queue_s"] >= 5e-5:
        parts += f", behind other prompts {dur(b['prefill_queue_s'])}"
    if b["slot_wait_s"] and b["slot_wait_s"] >= 5e-5:
        parts += f", waiting for a batch slot {dur(b['slot_wait_s'])}"
    if b.get("ttft_excess_s", 0.0) >= 5e-5:
        parts += f", engine and client excess {dur(b['ttft_excess_s'])} (fitted)"
    iv = (p.get("ttft_intervals") or {}).get("80")
    span = f"; 80 % interval {dur(iv[0])}–{dur(iv[1])}" if iv else ""
    return f"{dur(p['ttft_s'])} ({parts}; compute roofline {dur(p['baselines']['prefill_roofline_s'])}{span})"


def bound_text(b: dict[str, Any]) -> str:
    """``memory-bound (memory 73 %, compute 27 %, interconnect 0 %)``."""
    return (f"{b['kind']}-bound (memory {b['memory_share']:.0%}, compute {b['compute_share']:.0%}, "
            f"interconnect {b['interconnect_share']:.0%} of the roofline parts)")


def explain_power_method(method: str) -> str:
    """The power method of a prediction in plain words (for the notes under a table)."""
    if method.startswith("server mix"):
        return ("mixes idle and busy power: the GPU idles between requests, so mean power = idle power + "
                "(share of time busy) × (busy power − idle power)")
    if method.startswith("learned (server"):
        return "is predicted directly by the model, which was trained on measured server (arrival-rate) runs"
    return "is predicted directly by the model trained on measured runs"


def money_rows(e: dict[str, Any], pue: float, usd_per_gpu_hour: float | None, gpus: str) -> list[tuple[str, str]]:
    """The cost, GPU rent and carbon lines of a human table from an answer's ``energy`` block (those asked for);
    ``gpus``: how many GPUs the rent covers, in words."""
    rows = []
    if e["usd_per_mtok"] is not None:
        rows.append(("cost", f"${num(e['usd_per_mtok'], '.4f')} per million tokens (PUE {pue:g})"))
    if e["usd_per_mtok_gpu_hours"] is not None:
        rows.append(("GPU rent", f"${num(e['usd_per_mtok_gpu_hours'], '.4f')} per million tokens "
                                 f"(${usd_per_gpu_hour:g} per GPU-hour × {gpus})"))
    if e["gco2_per_mtok"] is not None:
        rows.append(("carbon", f"{num(e['gco2_per_mtok'], '.1f')} gCO2e per million tokens (PUE {pue:g})"))
    return rows

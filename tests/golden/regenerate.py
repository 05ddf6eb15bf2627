"""Regenerate ``tests/golden/predictions.json``: the numbers predict/rank print, frozen.

    python tests/golden/regenerate.py            # rewrite the golden file
    python tests/golden/regenerate.py --check    # exit 1 if the code no longer reproduces it
    python tests/golden/regenerate.py --models DIR   # from another bundle (default: the packaged one)

``wattgpu-train sync-catalog`` runs it after a catalog change (a GPU added: its rows join the file).

Rule: a refactor must leave this file unchanged (``tests/test_golden.py`` compares at 1e-9 relative).
A commit that changes predictions on purpose (new models, new physics) regenerates it *in the same
commit* and says in the message why the numbers moved.

Covers every catalog GPU × five LLMs (small dense, GQA dense, sliding-window dense, MoE, and a 70B
that does not fit on small GPUs) × five workloads (offline at two batch caps, two Poisson server
rates, a closed loop), plus one ``rank`` per workload kind. Rows that cannot be predicted store their
error message.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
GOLDEN = HERE / "predictions.json"

LLMS = ("Qwen/Qwen2.5-0.5B-Instruct", "meta-llama/Llama-3.1-8B-Instruct", "google/gemma-2-9b-it",
        "Qwen/Qwen3-30B-A3B-Instruct-2507", "meta-llama/Llama-3.1-70B-Instruct")
WORKLOADS: dict[str, dict[str, Any]] = {
    "offline": {},
    "offline_b8": {"max_batch": 8, "input_tokens": 1024, "output_tokens": 128},
    "server_low": {"kind": "server", "qps": 0.33},
    "server_high": {"kind": "server", "qps": 20.0},
    "closed8": {"kind": "closed_loop", "concurrency": 8},
}
FIELDS = ("power_w", "itl_s", "throughput_tok_s", "system_s_per_token", "energy_per_token_j",
          "energy_per_request_j", "effective_batch", "busy_fraction", "idle_power_w", "max_qps", "utilization",
          "max_concurrency", "overloaded", "ttft_s", "e2e_latency_s")
RANKS: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {
    "llama8b_offline_energy": ("meta-llama/Llama-3.1-8B-Instruct", {}, {}),
    "llama8b_server_sla": ("meta-llama/Llama-3.1-8B-Instruct", {"kind": "server", "qps": 0.017},
                           {"max_itl_ms": 50}),
    "moe_closed_strict_itl": ("Qwen/Qwen3-30B-A3B-Instruct-2507", {"kind": "closed_loop", "concurrency": 8},
                              {"max_itl_ms": 40, "strict": True, "sort": "itl"}),
    "llama8b_replicas_auto": ("meta-llama/Llama-3.1-8B-Instruct", {"kind": "server", "qps": 20.0},
                              {"max_itl_ms": 50, "replicas": "auto"}),
}


class _Texts:
    """Interns repeated strings (warnings, errors, methods) so the file stays compact."""

    def __init__(self) -> None:
        self.items: list[str] = []
        self._index: dict[str, int] = {}

    def __call__(self, text: str) -> int:
        if text not in self._index:
            self._index[text] = len(self.items)
            self.items.append(text)
        return self._index[text]


def _n(x: float | None) -> float | None:
    """12 significant digits: far tighter than the 1e-9 comparison, a third smaller on disk."""
    return None if x is None else float(f"{x:.12g}")


def _row(p: Any, text: _Texts) -> list[Any]:
    """FIELDS, then [[level, low, high] …] for power and ITL, the power method and the warnings."""
    return [*(_n(getattr(p, f)) for f in FIELDS), [[i.level, _n(i.low), _n(i.high)] for i in p.power_intervals],
            [[i.level, _n(i.low), _n(i.high)] for i in p.itl_intervals], text(p.power_method),
            [text(w) for w in p.warnings]]


def compute(models: str | None = None) -> dict[str, Any]:
    """Every golden number from the code on ``sys.path`` (the tree's runtime when run from tests) and the
    bundle ``models`` (default: the packaged one)."""
    import wattgpu
    from wattgpu.predictor import Predictor
    from wattgpu.workload import Workload

    pred = Predictor(models=models)
    cat = pred.catalog
    llms = [cat.llm(n) for n in LLMS]
    keys, triples = [], []
    for g in cat.gpus:
        for m in llms:
            for wname, wl in WORKLOADS.items():
                keys.append(f"{g.name} | {m.name} | {wname}")
                triples.append((g, m, Workload(**wl)))
    results = pred.predict_specs_safe(triples)
    text = _Texts()
    preds = {k: ({"error": text(str(r))} if isinstance(r, wattgpu.WattGPUError) else _row(r, text))
             for k, r in zip(keys, results)}
    ranks = {}
    for name, (llm, wl, opts) in RANKS.items():
        res = wattgpu.rank(llm, Workload(**wl), predictor=pred, **opts)
        ranks[name] = {"candidates": [[c.gpu, _n(c.power_w), _n(c.itl_s), _n(c.itl_sla_s), _n(c.j_per_token),
                                       c.replicas, c.max_batch, _n(c.ttft_s)] for c in res.candidates],
                       "excluded": [[e.gpu, e.reason_kind, text(e.reason)] for e in res.excluded]}
    return {"about": "golden predictions; regenerate with tests/golden/regenerate.py (see its docstring)",
            "fields": list(FIELDS), "llms": list(LLMS), "workloads": WORKLOADS, "predictions": preds,
            "ranks": ranks, "texts": text.items}


def main(argv: list[str]) -> int:
    for d in ("runtime", "train", "export"):
        sys.path.insert(0, str(REPO / d))
    models = argv[argv.index("--models") + 1] if "--models" in argv else None
    data = compute(models)
    if "--check" in argv:
        from compare import differences  # type: ignore[import-not-found]

        diffs = differences(json.loads(GOLDEN.read_text()), data)
        for d in diffs[:20]:
            print(d)
        return 1 if diffs else 0
    GOLDEN.write_text(json.dumps(data, separators=(",", ":"), sort_keys=True) + "\n")
    print(f"wrote {GOLDEN.relative_to(REPO)} ({len(data['predictions'])} predictions, {len(data['ranks'])} ranks)")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    raise SystemExit(main(sys.argv[1:]))

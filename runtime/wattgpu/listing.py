"""What `wattgpu gpus` / `wattgpu llms` show: catalog rows with aliases, idle-power basis and sources."""
from __future__ import annotations

from typing import Any

from .bundle import ModelBundle
from .serving.server import idle_power
from .specs import GpuSpec


def gpu_rows(bundle: ModelBundle) -> list[dict[str, Any]]:
    """One dict per catalog GPU: its spec fields, the aliases ``--gpu`` accepts for it (``aliases``) and
    those it shares with other GPUs (``shared_aliases``, refused as ambiguous), whether the models were
    trained on its measurements (``measured_in_training``), idle power (value, measured/estimated, source)
    and the sources of its numbers, from the bundle's hash-verified catalog."""
    doc = bundle.catalog_document()
    facts = {str(e.get("name")): e.get("facts") or {} for e in doc.get("gpus", []) if isinstance(e, dict)}
    measured = set(bundle.schema.domain.get("gpus", ()))
    catalog = bundle.catalog
    rows = []
    for g in catalog.gpus:
        w, source = idle_power(g)
        names = [a for a in g.aliases if a != g.name]
        resolves = [a for a in names if _resolves(catalog, a, g)]
        rows.append({**g.to_dict(), "aliases": resolves,
                     "shared_aliases": [a for a in names if a not in resolves],
                     "measured_in_training": g.name in measured,
                     "idle": {"w": w, "basis": "measured" if g.idle_power_w is not None else "estimated",
                              "source": source},
                     "sources": _sources(g, facts.get(g.name, {}))})
    return rows


def _resolves(catalog: Any, alias: str, gpu: GpuSpec) -> bool:
    """True when ``--gpu alias`` names ``gpu`` (an alias several GPUs share is refused as ambiguous)."""
    hit = catalog.find_gpu(alias)
    return hit is not None and hit.name == gpu.name


def _sources(g: GpuSpec, facts: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"spec_table": g.source}
    if isinstance(facts, dict) and facts.get("sources"):
        out["spec_sheet"] = [s.strip() for s in str(facts["sources"]).split(" ; ") if s.strip()]
    if g.idle_power_source:
        out["idle_power"] = g.idle_power_source
    return out

"""What `wattgpu gpus` / `wattgpu llms` show: catalog rows with aliases, idle-power basis and sources."""
from __future__ import annotations

from typing import Any

from .bundle import ModelBundle
from .server import idle_power
from .specs import GpuSpec


def gpu_rows(bundle: ModelBundle) -> list[dict[str, Any]]:
    """One dict per catalog GPU: its spec fields, aliases, idle power (value, measured/estimated,
    source) and the sources of its numbers, from the bundle's hash-verified catalog."""
    doc = bundle.catalog_document()
    facts = {str(e.get("name")): e.get("facts") or {} for e in doc.get("gpus", []) if isinstance(e, dict)}
    rows = []
    for g in bundle.catalog.gpus:
        w, source = idle_power(g)
        rows.append({**g.to_dict(),
                     "idle": {"w": w, "basis": "measured" if g.idle_power_w is not None else "estimated",
                              "source": source},
                     "sources": _sources(g, facts.get(g.name, {}))})
    return rows


def _sources(g: GpuSpec, facts: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"spec_table": g.source}
    if isinstance(facts, dict) and facts.get("sources"):
        out["spec_sheet"] = [s.strip() for s in str(facts["sources"]).split(" ; ") if s.strip()]
    if g.idle_power_source:
        out["idle_power"] = g.idle_power_source
    return out

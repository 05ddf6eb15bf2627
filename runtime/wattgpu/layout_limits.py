"""The layout inputs' bounds and the networks between nodes: what :mod:`wattgpu.questions` declares the layout
fields with, apart from the layout physics in :mod:`wattgpu.layout` (which re-exports these names), so that the
CLI's options do not load that module for a plain prediction (cold start)."""
from __future__ import annotations


from .frozen import dataclass
from .errors import SpecValidationError
from .parallel import MAX_TP

DEFAULT_GPUS_PER_NODE = 8
MAX_NODES = 64
# The largest degree of each layout field (Layout checks them; wattgpu.questions declares the inputs with them).
LIMITS = {"tp": MAX_TP, "pp": 256, "dp": 1024, "ep": 4096, "nodes": MAX_NODES, "gpus_per_node": 72}
DEFAULT_INTERCONNECT = "InfiniBand NDR"


@dataclass(frozen=True)
class InternodeLink:
    """A network between nodes: GB/s per GPU per direction and the fixed latency of one transfer (s)."""

    name: str
    gb_s: float
    latency_s: float
    aliases: tuple[str, ...] = ()


# Copy of data/catalog/internode_links.csv (its sources and notes live there; tests/test_layout.py checks the two
# agree): the runtime reads no CSV.
INTERNODE_LINKS = (
    InternodeLink("InfiniBand NDR", 50.0, 10e-6, ("ndr", "ib-ndr", "infiniband", "ib")),
    InternodeLink("InfiniBand XDR", 100.0, 10e-6, ("xdr", "ib-xdr")),
    InternodeLink("RoCE 400GbE", 50.0, 15e-6, ("roce", "roce400", "roce-400", "400gbe")),
    InternodeLink("RoCE 200GbE", 25.0, 15e-6, ("roce200", "roce-200", "200gbe")),
)


def internode_link(name: str = DEFAULT_INTERCONNECT) -> InternodeLink:
    """The inter-node link called ``name`` (any case, or an alias), or a SpecValidationError listing them."""
    key = str(name).strip().lower()
    for link in INTERNODE_LINKS:
        if key == link.name.lower() or key in link.aliases:
            return link
    names = ", ".join(link.name for link in INTERNODE_LINKS)
    raise SpecValidationError("workload", "interconnect", name, f"one of {names} (or an alias: ndr, xdr, roce, roce200)")

"""The output record, declared once: every field a prediction answers, with its unit, meaning and look.

Everything that prints or describes a prediction reads this module: ``Prediction.to_dict()`` (the JSON of
``predict``, the service and the rank candidates), the rank entry's extra fields (:data:`RANK_ONLY`), the
CSV columns of ``predict --input`` (:func:`csv_columns`, :func:`csv_cells`), the vectorised table's number
columns (:data:`TABLE_FIELDS`), the CLI tables (labels, scale and format), the OpenAPI result schemas
(:func:`json_schema`) and the check of ``docs/json.md`` (:func:`undocumented`). Adding an output field is
one :class:`Out` line here (and, when it is stored rather than computed, the dataclass field of the same
name, which ``tests/test_record.py`` holds equal to this list).

Machine-readable outputs are in SI units (s, W, J, tokens/s; energy sub-keys name theirs); ``scale`` and
``human_unit`` are for people only (s → ms in tables).
"""
from __future__ import annotations

from operator import attrgetter
from typing import Any, Callable, Iterable, NamedTuple

from .frozen import dataclass
from .energy import Prices

# JSON shapes: a number, integer, boolean, string, free object, list of strings, the intervals
# {"80": [low, high]}, or the energy figures object (:data:`ENERGY`, priced by the caller).
KINDS = ("number", "integer", "boolean", "string", "object", "strings", "intervals", "energy")
# CSV forms: None (not a CSV column), "cell" (the value; None → empty, booleans true/false), "resolved" (a
# ``<name>_resolved`` column: the input CSV already has one named like the field), "join" (strings joined
# by " | "), "summary" (the object's ``summary``), "kind" (the object's ``kind``), "interval80" (the 80 %
# interval as ``<prefix>_80_low``/``_high``), "energy" (the :data:`ENERGY` entries marked ``csv``).
CSV_FORMS = (None, "cell", "resolved", "join", "summary", "kind", "interval80", "energy")


@dataclass(frozen=True)
class Out:
    """One output field: ``name`` (the key in every machine-readable output), ``unit`` (SI, "" for none),
    ``doc`` (one line), ``label`` (for people), ``scale`` and ``human_unit`` (what tables multiply by and
    print: s → ms), ``fmt`` (format spec of the scaled value), ``kind`` (JSON shape, :data:`KINDS`),
    ``nullable``, ``csv`` (CSV form, :data:`CSV_FORMS`), ``table`` (a number column of
    ``Predictor.predict_table``) and ``get`` (how to compute it from a prediction; None reads the attribute
    or property of the same name)."""

    name: str
    unit: str
    doc: str
    label: str
    kind: str = "number"
    scale: float = 1.0
    human_unit: str = ""
    fmt: str = ".3g"
    nullable: bool = False
    csv: str | None = "cell"
    table: bool = False
    get: Callable[[Any], Any] | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"Out({self.name!r}): kind {self.kind!r} is not one of {', '.join(KINDS)}")
        if self.csv not in CSV_FORMS:
            raise ValueError(f"Out({self.name!r}): csv {self.csv!r} is not one of {CSV_FORMS}")

    @property
    def shown_unit(self) -> str:
        """The unit tables print (``human_unit``, else ``unit``)."""
        return self.human_unit or self.unit

    def human(self, value: Any, spec: str = "") -> str:
        """``value`` as people read it: scaled, formatted with ``spec`` (default ``fmt``); ``None`` → "–"."""
        if value is None:
            return "–"
        return format(value * self.scale, spec or self.fmt)

    def head(self) -> str:
        """A table column header: the label and the unit people read."""
        return f"{self.label} {self.shown_unit}".strip()


PREDICTION: tuple[Out, ...] = (
    Out("gpu", "", "resolved catalog name of the GPU (or the name in the user's spec)", "GPU", "string",
        csv="resolved"),
    Out("llm", "", "resolved catalog id of the LLM (or the name in the user's config)", "LLM", "string",
        csv="resolved"),
    Out("workload", "", "the workload as validated (the Workload fields)", "workload", "object", csv=None),
    Out("power_w", "W", "mean board power of one GPU, capped at TDP", "power", fmt=".1f", table=True),
    Out("tp", "", "GPUs in the tensor-parallel group", "GPUs", "integer", fmt="d"),
    Out("total_power_w", "W", "mean power of the whole tensor-parallel group (power_w × tp)", "total power",
        fmt=".1f"),
    Out("allreduce_s_per_step", "s", "modelled all-reduce time of one decode step (0 on one GPU)",
        "all-reduce per step", scale=1e3, human_unit="ms", fmt=".2f"),
    Out("itl_s", "s", "per-sequence time between output tokens", "ITL", scale=1e3, human_unit="ms", fmt=".1f",
        table=True),
    Out("system_s_per_token", "s", "wall time per generated token of the whole GPU (1 / throughput)",
        "s per token", scale=1e3, human_unit="ms", fmt=".3f", table=True),
    Out("throughput_tok_s", "tokens/s", "generated tokens per second", "throughput", human_unit="tok/s",
        fmt=".1f", table=True),
    Out("energy_per_token_j", "J", "energy per generated token of the group (total_power_w × system_s_per_token)",
        "energy per token", human_unit="J/tok", fmt=".3f", table=True),
    Out("energy_per_request_j", "J", "energy per request (energy_per_token_j × output tokens)",
        "energy per request", fmt=".1f", table=True),
    Out("energy", "", "energy, cost and carbon figures (J, Wh, kWh, $ and gCO2e; see ENERGY)", "energy", "energy",
        csv="energy"),
    Out("effective_batch", "sequences", "sequences decoding together", "effective batch", fmt=".1f", table=True),
    Out("busy_fraction", "", "share of time with at least one request in flight", "busy", fmt=".0%", table=True),
    Out("power_method", "", "how mean power was obtained (learned, or the server's idle/busy mix)",
        "power method", "string"),
    Out("idle_power_w", "W", "idle power used by the server mix", "idle power", fmt=".1f", nullable=True),
    Out("idle_power_source", "", "whether the idle power was measured (with its source) or estimated",
        "idle power source", "string", nullable=True),
    Out("power_intervals", "W", "prediction intervals of power_w by level ({\"80\": [low, high]})",
        "power interval", "intervals", csv="interval80"),
    Out("itl_intervals", "s", "prediction intervals of itl_s by level ({\"80\": [low, high]})", "ITL interval",
        "intervals", scale=1e3, human_unit="ms", csv="interval80"),
    Out("max_qps", "requests/s", "largest Poisson request rate the GPU sustains", "max q/s", nullable=True,
        table=True),
    Out("utilization", "", "offered load ÷ max_qps (above 1 only when overloaded)", "util", fmt=".0%",
        nullable=True, table=True),
    Out("max_concurrency", "sequences", "full-context sequences whose KV cache fits", "KV sequences", "integer",
        fmt="d", nullable=True, table=True),
    Out("overloaded", "", "a server load beyond capacity", "overloaded", "boolean"),
    Out("ttft_s", "s", "mean time to first token (null when unbounded)", "TTFT", scale=1e3, human_unit="ms",
        fmt=".1f", nullable=True, table=True),
    Out("ttft_intervals", "s", "prediction intervals of ttft_s by level ({\"80\": [low, high]}; empty without a "
        "fitted TTFT section in the bundle)", "TTFT interval", "intervals", scale=1e3, human_unit="ms",
        csv="interval80"),
    Out("e2e_latency_s", "s", "end-to-end latency of one request (null when unbounded)", "end-to-end latency",
        fmt=".2f", nullable=True, table=True),
    Out("ttft_breakdown", "", "the parts of ttft_s (s) and the prefill budget", "TTFT parts", "object", csv=None),
    Out("bound", "", "what bounds a decode step (kind and each roofline part's share)", "bound", "object",
        csv="kind"),
    Out("baselines", "", "TDP, load-scaled TDP and roofline baselines (W, s)", "baselines", "object", csv=None),
    Out("warnings", "", "where the prediction extrapolates, and capacity notes", "warnings", "strings",
        csv="join"),
    Out("calibration", "", "null, or what a calibrated bundle changed (summary in words)", "calibration", "object",
        nullable=True, csv="summary"),
)

# The fields of a rank candidate beyond those of a prediction (the candidate is a prediction plus these).
RANK_ONLY: tuple[Out, ...] = (
    Out("rank", "", "1 for the best candidate", "#", "integer", fmt="d", csv=None),
    Out("itl_sla_s", "s", "the ITL compared with the SLA (the point, or an interval's upper bound)", "ITL for SLA",
        scale=1e3, human_unit="ms", fmt=".1f", csv=None),
    Out("replicas", "", "replicas (each one tensor-parallel group) carrying the load", "repl", "integer", fmt="d",
        csv=None),
    Out("qps_per_replica", "requests/s", "the rate one replica receives", "q/s per replica", nullable=True,
        csv=None),
    Out("fleet_power_w", "W", "mean power of all replicas (replicas × total_power_w)", "fleet", fmt=".0f",
        csv=None),
    Out("max_batch", "sequences", "the engine batch cap of this entry (searched with an SLA)", "cap", "integer",
        fmt="d", csv=None),
    Out("launch_args", "", "the `vllm serve` argument list, or null for other engines", "launch", "strings",
        nullable=True, csv=None),
    Out("max_model_len", "tokens", "vLLM's --max-model-len of the launch line", "max model len", "integer",
        fmt="d", nullable=True, csv=None),
    Out("kv_sequences_at_max_model_len", "sequences", "sequences of max_model_len tokens the KV cache holds",
        "KV sequences at max model len", "integer", fmt="d", nullable=True, csv=None),
    Out("measured_in_training", "", "the models were trained on measurements of this GPU", "meas", "boolean",
        nullable=True, csv=None),
)

# The keys of the ``energy`` object (wattgpu.energy.energy_figures); ``csv``: also a CSV column.
ENERGY: tuple[Out, ...] = (
    Out("j_per_token", "J", "energy per generated token (GPU energy)", "J/tok", fmt=".3f", csv=None),
    Out("j_per_request", "J", "energy per request", "J/req", fmt=".1f", csv=None),
    Out("wh_per_request", "Wh", "energy per request", "Wh/req", fmt=".3f"),
    Out("kwh_per_mtok", "kWh/Mtok", "energy per million tokens", "kWh/Mtok", fmt=".3f"),
    Out("usd_per_mtok", "$/Mtok", "electricity cost per million tokens (PUE applied; null without a price)",
        "$/Mtok", fmt=".4f", nullable=True),
    Out("gco2_per_mtok", "gCO2e/Mtok", "carbon per million tokens (PUE applied; null without an intensity)",
        "gCO2/Mtok", fmt=".1f", nullable=True),
    Out("pue", "", "the facility PUE applied to cost and carbon", "PUE", fmt="g", csv=None),
    Out("usd_per_mtok_gpu_hours", "$/Mtok", "GPU rent per million tokens (null without a GPU-hour price)",
        "$GPUh/Mtok", fmt=".4f", nullable=True),
)

# A candidate of ``rank --parallel auto`` (wattgpu.layout_search.LayoutChoice): roofline figures of one layout.
LAYOUT_CANDIDATE: tuple[Out, ...] = (
    Out("rank", "", "position in the layout ranking (1 = least energy per token)", "#", "integer", fmt="d"),
    Out("gpu", "", "catalog name of the GPU type", "GPU", "string"),
    Out("layout", "", "the layout: tp, pp, dp, ep, nodes, gpus_per_node, interconnect", "layout", "object",
        get=lambda c: c.layout_dict()),
    Out("label", "", "the layout in words (TP8 × PP2 EP8 on 2 nodes)", "layout", "string",
        get=lambda c: c.layout.describe()),
    Out("gpus", "", "GPUs of the whole layout (tp × pp × dp)", "GPUs", "integer", fmt="d",
        get=lambda c: c.layout.gpus),
    Out("nodes", "", "nodes the layout spans", "nodes", "integer", fmt="d", get=lambda c: c.layout.nodes),
    Out("method", "", "anchored (learned stage + layout physics) or roofline: see the layout prediction's method",
        "method", "string", get=lambda c: c.estimate.method),
    Out("power_w", "W", "mean power per GPU (the method's busy power over the stage's duty)", "W/GPU", fmt=".0f",
        get=lambda c: c.estimate.power_per_gpu_w),
    Out("power_per_node_w", "W", "mean power of the fullest node's GPUs", "W/node", fmt=".0f",
        get=lambda c: c.estimate.power_per_node_w),
    Out("total_power_w", "W", "mean power of all the layout's GPUs", "total W", fmt=".0f",
        get=lambda c: c.estimate.power_w),
    Out("itl_s", "s", "decode step as one sequence sees it (never below the roofline's)", "ITL", scale=1e3,
        human_unit="ms", fmt=".1f", get=lambda c: c.estimate.itl_s),
    Out("ttft_s", "s", "prefill of one prompt through every stage (never below the roofline's)", "TTFT", scale=1e3, human_unit="ms",
        fmt=".1f", get=lambda c: c.estimate.ttft_s),
    Out("throughput_tok_s", "tokens/s", "output tokens per second of the whole layout", "tok/s", fmt=".0f",
        get=lambda c: c.estimate.tokens_per_s),
    Out("j_per_token", "J", "energy per output token of all the layout's GPUs", "J/tok", fmt=".3f"),
    Out("bubble", "", "share of a decode round a pipeline stage idles (1 − m × stage time / round)", "bubble", fmt=".2f",
        get=lambda c: c.estimate.bubble),
    Out("batch", "", "running sequences over all DP ranks", "batch", "integer", fmt="d",
        get=lambda c: c.estimate.batch),
    Out("kv_sequences", "", "sequences of input + output tokens the layout's KV cache holds", "seqs", "integer",
        fmt="d", get=lambda c: c.sequences),
    Out("launch_args", "", "the vllm serve command line with vLLM's parallel flags", "launch", "strings"),
)

# ``predict`` with a layout (wattgpu.layout_predict.LayoutPrediction): roofline figures of one layout under the load.
LAYOUT_PREDICTION: tuple[Out, ...] = (
    Out("llm", "", "LLM id", "LLM", "string"),
    Out("gpu", "", "catalog name of the GPU type", "GPU", "string"),
    Out("method", "", "how the figures were obtained: anchored (each engine's stage from the learned models, with the "
        "layout's all-to-all, stage links and bubble: wattgpu.layout_learned) or roofline (wattgpu.layout only)",
        "method", "string"),
    Out("workload", "", "the workload predicted (Workload fields)", "workload", "object",
        get=lambda p: p.workload.to_dict()),
    Out("layout", "", "the layout: tp, pp, dp, ep, nodes, gpus_per_node, interconnect", "layout", "object",
        get=lambda p: {k: getattr(p.layout, k) for k in ("tp", "pp", "dp", "ep", "nodes", "gpus_per_node",
                                                          "interconnect")}),
    Out("label", "", "the layout in words (TP8 × PP2 EP8 on 2 nodes)", "layout", "string",
        get=lambda p: p.layout.describe()),
    Out("gpus", "", "GPUs of the whole layout (tp × pp × dp)", "GPUs", "integer", fmt="d", get=lambda p: p.layout.gpus),
    Out("nodes", "", "nodes the layout spans", "nodes", "integer", fmt="d", get=lambda p: p.layout.nodes),
    Out("weight_gb_per_gpu", "GB", "weight memory of one GPU (GB = 2^30 bytes)", "weights/GPU", fmt=".1f",
        get=lambda p: p.fit.weight_gb),
    Out("kv_budget_gb_per_gpu", "GB", "KV-cache memory of one GPU after the weights", "KV/GPU", fmt=".1f",
        get=lambda p: p.fit.kv_budget_gb),
    Out("kv_sequences", "", "sequences of input + output tokens the layout's KV cache holds (all DP engines)", "seqs",
        "integer", fmt="d", get=lambda p: p.fit.sequences),
    Out("effective_batch", "sequences", "sequences decoding together over all DP engines", "batch", fmt=".1f",
        get=lambda p: p.sequences),
    Out("busy_fraction", "", "share of time a DP engine has a sequence in flight (1 unless a server)", "busy",
        fmt=".0%"),
    Out("power_w", "W", "mean power per GPU (the method's busy power over the stage's duty, idle/busy mix for a "
        "server)", "W/GPU", fmt=".0f", get=lambda p: p.power_per_gpu_w),
    Out("power_per_node_w", "W", "mean power of the fullest node's GPUs", "W/node", fmt=".0f"),
    Out("total_power_w", "W", "mean power of all the layout's GPUs", "total W", fmt=".0f"),
    Out("itl_s", "s", "decode step as one sequence sees it (never below the roofline's)", "ITL", scale=1e3,
        human_unit="ms", fmt=".1f"),
    Out("ttft_s", "s", "prefill of one prompt through every stage (never below the roofline's)", "TTFT", scale=1e3,
        human_unit="ms", fmt=".1f"),
    Out("e2e_latency_s", "s", "TTFT + (output tokens − 1) × ITL", "end-to-end", fmt=".3g"),
    Out("throughput_tok_s", "tokens/s", "output tokens per second of the whole layout", "tok/s", fmt=".0f"),
    Out("max_qps", "requests/s", "capacity: requests/s the layout sustains at its most sequences (Little's law)",
        "max q/s", fmt=".3g"),
    Out("utilization", "", "load ÷ capacity (server: qps ÷ max_qps; else running ÷ most sequences)", "util",
        fmt=".0%"),
    Out("bubble", "", "share of a decode round a pipeline stage idles (1 − m × stage time / round)", "bubble", fmt=".2f",
        get=lambda p: p.at_load.bubble),
    Out("alltoall_s_per_step", "s", "expert all-to-all time in one decode step", "all-to-all", scale=1e3,
        human_unit="ms", fmt=".2f", get=lambda p: p.at_load.alltoall_s),
    Out("p2p_s_per_step", "s", "pipeline stage-to-stage transfer time in one decode step", "stage links", scale=1e3,
        human_unit="ms", fmt=".2f", get=lambda p: p.at_load.p2p_s),
    Out("allreduce_s_per_step", "s", "tensor-parallel all-reduce time in one decode step", "all-reduce", scale=1e3,
        human_unit="ms", fmt=".2f", get=lambda p: p.at_load.allreduce_s),
    Out("energy", "", "energy, cost and carbon of all the layout's GPUs (see ENERGY)", "energy", "energy"),
    Out("roofline", "", "the roofline figures of the same layout and load: itl_s and ttft_s (the bound), power_w "
        "per GPU", "roofline", "object", get=lambda p: p.roofline()),
    Out("baselines", "", "per GPU: TDP and load-scaled TDP (the paper's share of TDP for the workload kind)",
        "baselines", "object", get=lambda p: p.baselines()),
    Out("launch_args", "", "the vllm serve command line with vLLM's parallel flags", "launch", "strings"),
    Out("warnings", "", "what the figures are and where the layout needs care", "warnings", "strings"),
)

FIELDS: dict[str, Out] = {o.name: o for o in (*PREDICTION, *RANK_ONLY, *ENERGY)}
TABLE_FIELDS: tuple[str, ...] = tuple(o.name for o in PREDICTION if o.table)  # Predictor.predict_table's numbers
DEFAULT_PRICES: Prices = (None, None, 1.0, None)  # no price, no carbon intensity, PUE 1, no GPU rent


_ENTRY: list[tuple[tuple[Out, ...], tuple[Out, ...], tuple[Out, ...]]] = []


def rank_entry_fields() -> tuple[Out, ...]:
    """The fields of a rank entry's JSON: :data:`PREDICTION`, then :data:`RANK_ONLY` but ``rank`` (added by the
    ranking); one tuple while the declarations stay the same objects."""
    if not _ENTRY or _ENTRY[0][0] is not PREDICTION or _ENTRY[0][1] is not RANK_ONLY:
        _ENTRY[:] = [(PREDICTION, RANK_ONLY, (*PREDICTION, *(o for o in RANK_ONLY if o.name != "rank")))]
    return _ENTRY[0][2]


def field(name: str) -> Out:
    """The declaration of output field ``name`` (prediction, rank-only or energy key)."""
    return FIELDS[name]


def _level_key(level: float) -> str:
    return f"{int(round(level * 100))}"


_LEVEL_KEYS: dict[float, str] = {}  # the few levels a bundle has (0.8, 0.95), each formatted once


def _intervals(value: Any) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for i in value:
        key = _LEVEL_KEYS.get(i.level)
        if key is None:
            key = _level_key(i.level)
            if len(_LEVEL_KEYS) < 64:
                _LEVEL_KEYS[i.level] = key
        out[key] = [i.low, i.high]
    return out


def _strings(value: Any) -> list[str] | None:
    return None if value is None else list(value)


def _object(value: Any) -> dict[str, Any] | None:
    """A copy (a caller may edit the answer; the prediction's own stays), nested dicts and lists included."""
    if value is None:
        return None
    out = dict(value)
    if not _NESTED.isdisjoint(map(type, out.values())):  # most objects are flat: one C-level scan
        for k, v in out.items():
            if type(v) is dict or type(v) is list:
                out[k] = _copy(v)
    return out


_NESTED = frozenset((dict, list))


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


_CONVERT: dict[str, Callable[[Any], Any]] = {"intervals": _intervals, "strings": _strings, "object": _object}


class _Plan(NamedTuple):
    """How :func:`to_json` writes one record tuple: the field names, a function reading every field's raw value
    at once (record order; an ``energy`` field's is replaced), the fields to convert and the energy fields."""

    names: tuple[str, ...]
    read: Callable[[Any], tuple[Any, ...]]
    convert: tuple[tuple[str, Callable[[Any], Any]], ...]
    energy: tuple[str, ...]


_PLANS: dict[int, tuple[tuple[Out, ...], _Plan]] = {}


def _reader(outs: tuple[Out, ...]) -> Callable[[Any], tuple[Any, ...]]:
    """Every field's raw value of a prediction as one tuple: one C-level attrgetter where every field is a
    stored attribute or property (an ``energy`` method is read too, then replaced), else one call each."""
    if len(outs) > 1 and all(o.get is None for o in outs):
        return attrgetter(*(o.name for o in outs))
    reads = tuple((lambda p: None) if o.kind == "energy" else attrgetter(o.name) if o.get is None else o.get
                  for o in outs)
    return lambda p: tuple(read(p) for read in reads)


def _plan(outs: tuple[Out, ...]) -> _Plan:
    """The :class:`_Plan` of ``outs``, built once per record tuple."""
    hit = _PLANS.get(id(outs))
    if hit is not None and hit[0] is outs:
        return hit[1]
    plan = _Plan(tuple(o.name for o in outs), _reader(outs),
                 tuple((o.name, _CONVERT[o.kind]) for o in outs if o.kind in _CONVERT),
                 tuple(o.name for o in outs if o.kind == "energy"))
    if len(_PLANS) > 64:
        _PLANS.clear()
    _PLANS[id(outs)] = (outs, plan)
    return plan


def value_of(o: Out, p: Any) -> Any:
    """Field ``o`` of prediction ``p`` (stored attribute, or computed by ``o.get``)."""
    return getattr(p, o.name) if o.get is None else o.get(p)


def to_json(p: Any, prices: Prices = DEFAULT_PRICES, record: tuple[Out, ...] | None = None) -> dict[str, Any]:
    """The JSON-ready dict of prediction ``p``: every field of ``record`` (default :data:`PREDICTION`) under its
    name, in record order; ``energy`` priced with ``prices`` (usd_per_kwh, gco2_per_kwh, pue, usd_per_gpu_hour)."""
    plan = _plan(PREDICTION if record is None else record)
    out = dict(zip(plan.names, plan.read(p)))
    for name, convert in plan.convert:
        out[name] = convert(out[name])
    for name in plan.energy:
        out[name] = p.energy(*prices)
    return out


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return value


ENERGY_CSV = tuple(eo.name for eo in ENERGY if eo.csv is not None)  # the energy keys that are CSV columns


def is_level80(level: float) -> bool:
    """Whether an interval of ``level`` (0.8) is the one the CSV's ``*_80_low``/``*_80_high`` columns hold."""
    return round(level * 100) == 80


def _interval_prefix(name: str) -> str:
    return name[:-len("_intervals")] if name.endswith("_intervals") else name


def csv_columns() -> tuple[str, ...]:
    """The output columns of ``predict --input`` (in record order; ``error`` follows them)."""
    cols: list[str] = []
    for o in PREDICTION:
        if o.csv is None:
            continue
        if o.csv == "resolved":
            cols.append(f"{o.name}_resolved")
        elif o.csv == "interval80":
            cols += [f"{_interval_prefix(o.name)}_80_low", f"{_interval_prefix(o.name)}_80_high"]
        elif o.csv == "energy":
            cols += [e.name for e in ENERGY if e.csv is not None]
        else:
            cols.append(o.name)
    return tuple(cols)


def csv_cells(p: Any, prices: Prices = DEFAULT_PRICES) -> dict[str, Any]:
    """The output cells of prediction ``p`` in one CSV row, keyed by :func:`csv_columns`."""
    return dict(zip(csv_columns(), csv_row(prices)(p)))


def csv_row(prices: Prices = DEFAULT_PRICES) -> Callable[[Any], list[Any]]:
    """A function of a prediction giving its output cells as a list in :func:`csv_columns` order (the
    plan built once per call of this function, so a batch builds it once per file)."""
    steps = [_csv_step(o, prices) for o in PREDICTION if o.csv is not None]

    def cells(p: Any) -> list[Any]:
        out: list[Any] = []
        for step in steps:
            step(p, out)
        return out
    return cells


def _csv_step(o: Out, prices: Prices) -> Callable[[Any, list[Any]], None]:
    """Appends field ``o``'s CSV cells of a prediction to a row (its :data:`CSV_FORMS` form)."""
    read: Callable[[Any], Any] = attrgetter(o.name) if o.get is None else o.get
    form = o.csv

    def energy(p: Any, out: list[Any]) -> None:
        e = p.energy(*prices)
        out.extend([_cell(e[k]) for k in ENERGY_CSV])

    def cell(p: Any, out: list[Any]) -> None:
        out.append(_cell(read(p)))

    def join(p: Any, out: list[Any]) -> None:
        out.append(" | ".join(read(p)))

    def summary(p: Any, out: list[Any]) -> None:
        v = read(p)
        out.append("" if v is None else v["summary"])

    def kind(p: Any, out: list[Any]) -> None:
        out.append(read(p).get("kind", ""))

    def interval80(p: Any, out: list[Any]) -> None:
        hit = next((i for i in read(p) if is_level80(i.level)), None)
        out.extend(("", "") if hit is None else (hit.low, hit.high))
    return {"energy": energy, "cell": cell, "resolved": cell, "join": join, "summary": summary, "kind": kind,
            "interval80": interval80}[str(form)]


_SCHEMA_TYPES = {"number": "number", "integer": "integer", "boolean": "boolean", "string": "string",
                 "object": "object", "strings": "array", "intervals": "object", "energy": "object"}


def _schema(o: Out) -> dict[str, Any]:
    base = _SCHEMA_TYPES[o.kind]
    s: dict[str, Any] = {"type": [base, "null"] if o.nullable else base}
    if o.kind == "strings":
        s["items"] = {"type": "string"}
    elif o.kind == "intervals":
        s["additionalProperties"] = {"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 2}
    elif o.kind == "energy":
        s["properties"] = {e.name: _schema(e) for e in ENERGY}
        s["required"] = [e.name for e in ENERGY]
    desc = o.doc + (f" ({o.unit})" if o.unit else "")
    s["description"] = desc
    return s


def json_schema(record: Iterable[Out]) -> dict[str, Any]:
    """A JSON Schema object whose properties are the fields of ``record`` (every one required)."""
    outs = list(record)
    return {"type": "object", "required": [o.name for o in outs], "properties": {o.name: _schema(o) for o in outs}}


def undocumented(doc_text: str, record: Iterable[Out] | None = None) -> list[str]:
    """Fields of ``record`` (default: prediction, rank-only and energy fields) that ``doc_text`` never names
    as ``\\`name\\```; and CSV columns it does not name either."""
    outs = list((*PREDICTION, *RANK_ONLY, *ENERGY) if record is None else record)
    names = [o.name for o in outs] + [c for c in csv_columns() if c not in {o.name for o in outs}]
    return [n for n in names if f"`{n}`" not in doc_text]

"""The questions WattGPU answers (predict, rank, batch, calibrate), each declared once: its fields, their types,
bounds, defaults and meaning.

The click options of the CLI (:mod:`wattgpu.cli.options`), the keys the HTTP service accepts and its validation
(:mod:`wattgpu.service.inputs`) and the OpenAPI request schemas (:mod:`wattgpu.service.openapi`) are generated
from these tables; :meth:`Request.check` bounds every number before any arithmetic on it, so a 400-digit
integer is refused by name on every surface. No click and no web framework here. (Named ``questions`` rather
than ``requests`` so it is never mistaken for the HTTP library.)
"""
from __future__ import annotations

from typing import Any, Mapping

from .frozen import dataclass
from .energy import PRICE_RANGES
from .errors import SpecValidationError, WattGPUError, _short
from .serving.fleet import MAX_REPLICAS
from .layout_limits import DEFAULT_INTERCONNECT, INTERNODE_LINKS, LIMITS, MAX_NODES
from .parallel import MAX_TP
from .quant import DTYPE_ALIASES, DTYPE_OVERRIDES
from .rules import ChoiceRule, NumberRule
from .workload import ENGINES, WORKLOAD_CHOICES, WORKLOAD_NUMBERS, Workload

# Kinds of fields: numbers and choices are checked by their rule; the others by the code that reads them
# (a GPU or LLM name or inline object, a list of GPUs, a TP group size or "auto", a replica count or "auto").
KINDS_OF_FIELD = ("number", "integer", "boolean", "choice", "text", "gpu", "llm", "gpus", "group", "replicas",
                  "switch", "workload", "rows", "path", "paths")
# A "switch" is on/off or a degree (vLLM's --enable-expert-parallel, or the expert-parallel size): these words.
SWITCH_WORDS = {"on": True, "true": True, "yes": True, "off": False, "false": False, "no": False}
MAX_SLA_MS = 1e9  # about 11.6 days: any larger latency limit is a unit mistake
MAX_MODEL_LEN = 2 * 1_048_576


@dataclass(frozen=True)
class Param:
    """One field of a request: ``name`` (the Python keyword and the HTTP body key), ``doc`` (the CLI help and the
    OpenAPI description), ``kind`` (:data:`KINDS_OF_FIELD`), ``rule`` (bounds or choices), ``default``, ``flag``
    (the CLI option, None = not on the CLI), ``body`` (its path in the HTTP body: "" = ``name`` at the top level,
    ``"sla.max_itl_ms"`` nested, None = not over HTTP) and ``expected`` (what an error says is accepted,
    default the rule's own words)."""

    name: str
    doc: str
    kind: str = "number"
    rule: NumberRule | ChoiceRule | None = None
    default: Any = None
    flag: str | None = None
    body: str | None = ""
    expected: str = ""
    show_default: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS_OF_FIELD:
            raise ValueError(f"Param({self.name!r}): kind {self.kind!r} is not one of {', '.join(KINDS_OF_FIELD)}")

    @property
    def path(self) -> str:
        """The field's name in the HTTP body (``sla.max_itl_ms``)."""
        return self.body or self.name

    @property
    def accepts(self) -> str:
        """What the field accepts, in words."""
        if self.expected:
            return self.expected
        return self.rule.expected if self.rule is not None else self.kind

    def check(self, value: Any) -> Any:
        """``value`` checked against the rule (a number as float/int, a choice canonical); None stays None when
        the field is optional (its default is None). Raises a one-line WattGPUError naming the field."""
        if value is None and self.default is None:
            return None
        rule = self.rule
        if rule is None:
            return value
        if self.kind == "switch":
            return self._switch(value)
        if self.kind in ("group", "replicas") and isinstance(value, str):
            text = value.strip().lower()
            try:
                number = float(text)
            except ValueError:
                return value  # "auto", or text the reader refuses in its own words
            try:
                rule.check("", self.name, number)
            except SpecValidationError:
                raise FieldError(self, value) from None
            return value  # the reader parses the text
        try:
            return rule.check("", self.name, value)
        except SpecValidationError:
            raise FieldError(self, value) from None

    def _switch(self, value: Any) -> bool | int:
        """A switch: True/False (also on/off, yes/no as text) or a whole number checked by the rule."""
        if isinstance(value, bool):
            return value
        if isinstance(value, str):
            text = value.strip().lower()
            if text in SWITCH_WORDS:
                return SWITCH_WORDS[text]
            try:
                value = float(text)
            except ValueError:
                raise FieldError(self, value) from None
        assert self.rule is not None
        try:
            return int(self.rule.check("", self.name, value))  # type: ignore[arg-type]
        except SpecValidationError:
            raise FieldError(self, value) from None


class FieldError(WattGPUError, ValueError):
    """A request field outside its declared type or bounds (``param`` says which)."""

    def __init__(self, param: Param, value: Any) -> None:
        self.param, self.field, self.value = param, param.name, value
        super().__init__(f"{param.name} = {_short(value)} is invalid; expected {param.accepts}")


@dataclass(frozen=True)
class Request:
    """A question: its name and fields."""

    name: str
    params: tuple[Param, ...]
    doc: str = ""
    required: tuple[str, ...] = ()  # body keys that must be given

    def param(self, name: str) -> Param:
        """The field ``name``."""
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(name)

    def body_keys(self) -> frozenset[str]:
        """The top-level keys of the HTTP body."""
        return frozenset(p.path.split(".")[0] for p in self.params if p.body is not None)

    def nested_keys(self, group: str) -> frozenset[str]:
        """The keys of the body's nested object ``group`` (``sla``)."""
        return frozenset(p.path.split(".", 1)[1] for p in self.params
                         if p.body is not None and p.path.startswith(group + "."))

    def check(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """Every field of ``values`` that this request bounds, checked (numbers before any arithmetic)."""
        out = dict(values)
        for p in self.params:
            if p.name in values and p.rule is not None:
                out[p.name] = p.check(values[p.name])
        return out


def _number(lo: float, hi: float, unit: str = "", integer: bool = False, open_lo: bool = False) -> NumberRule:
    return NumberRule(lo, hi, unit, integer=integer, open_lo=open_lo)


PRICES = (
    Param("usd_per_kwh", "Electricity price; adds $ per million tokens.", rule=_number(*PRICE_RANGES["usd_per_kwh"]),
          flag="--usd-per-kwh"),
    Param("gco2_per_kwh", "Grid carbon intensity; adds gCO2e per million tokens.",
          rule=_number(*PRICE_RANGES["gco2_per_kwh"]), flag="--gco2-per-kwh"),
    Param("pue", "Facility PUE applied to cost and carbon.", rule=_number(*PRICE_RANGES["pue"]), default=1.0,
          flag="--pue", show_default=True),
    Param("usd_per_gpu_hour", "GPU rent ($ per GPU-hour); adds the GPU-hour cost per million tokens.",
          rule=_number(*PRICE_RANGES["usd_per_gpu_hour"]), flag="--usd-per-gpu-hour"),
)
_SLA_MS = _number(0.0, MAX_SLA_MS, open_lo=True)
_SLA_S = _number(0.0, MAX_SLA_MS / 1e3, open_lo=True)
_MS = f"a positive number of milliseconds (at most {MAX_SLA_MS:g})"
SLA = (
    Param("max_itl_ms", "Latency SLA: largest acceptable ITL per sequence (ms); the batch cap is searched to meet "
          "it.", rule=_SLA_MS, flag="--max-itl-ms", body="sla.max_itl_ms", expected=_MS),
    Param("max_ttft_ms", "Latency SLA: largest acceptable mean time to first token (ms); the batch cap is searched "
          "to meet it.", rule=_SLA_MS, flag="--max-ttft-ms", body="sla.max_ttft_ms", expected=_MS),
    Param("max_itl_s", "max_itl_ms in seconds (HTTP only; give one of the two).", rule=_SLA_S, body="sla.max_itl_s",
          expected=f"a positive number of seconds (at most {MAX_SLA_MS / 1e3:g})"),
    Param("max_ttft_s", "max_ttft_ms in seconds (HTTP only; give one of the two).", rule=_SLA_S,
          body="sla.max_ttft_s", expected=f"a positive number of seconds (at most {MAX_SLA_MS / 1e3:g})"),
)
DTYPE_RULE = ChoiceRule(("auto", *DTYPE_OVERRIDES),
                        tuple((name, name) for name in DTYPE_OVERRIDES) + tuple(DTYPE_ALIASES.items()) + (("auto", "auto"),))
DTYPE = Param("dtype", "Weight dtype as served: auto (the checkpoint's), bfloat16, float16, fp8, int8, int4 "
              f"(also {', '.join(DTYPE_ALIASES)}; any case).", "choice", rule=DTYPE_RULE, default="auto",
              flag="--dtype", show_default=True)
MODELS = Param("models", "Model bundle directory (`wattgpu-train fit --out DIR`); default $WATTGPU_MODELS, else the "
               "packaged models.", "path", flag="--models", body=None)
WORKLOAD = Param("workload", "Workload fields (wattgpu.Workload); unknown fields are refused by name.", "workload",
                 body="workload")
GPU = Param("gpu", "Catalog name or alias (see `wattgpu gpus`), or a GPU spec JSON file.", "gpu", flag="--gpu")
LLM = Param("llm", "Catalog id (see `wattgpu llms`), a config.json, or a model directory.", "llm", flag="--llm")

# The workload fields as CLI options (the HTTP body takes them inside ``workload``); rules: wattgpu.workload.
_WL = Workload()
WORKLOAD_OPTIONS = (
    Param("kind", "offline: all requests queued; server: Poisson arrivals at --qps; closed_loop: --concurrency "
          "clients. Default: server when --qps is given, else offline.", "choice", rule=WORKLOAD_CHOICES["kind"],
          flag="--workload", body=None),
    Param("max_batch", "Engine batch cap (vLLM max_num_seqs).", "integer", rule=WORKLOAD_NUMBERS["max_batch"],
          default=_WL.max_batch, flag="--max-batch", body=None, show_default=True),
    Param("qps", "Arrival rate in requests/s (server).", rule=WORKLOAD_NUMBERS["qps"], flag="--qps", body=None),
    Param("concurrency", "Concurrent sequences (closed_loop, or a fixed batch).", rule=WORKLOAD_NUMBERS["concurrency"],
          flag="--concurrency", body=None),
    Param("input_tokens", "Prompt length of each request (tokens).", "integer", rule=WORKLOAD_NUMBERS["input_tokens"],
          default=_WL.input_tokens, flag="--input-tokens", body=None, show_default=True),
    Param("output_tokens", "Tokens generated per request.", "integer", rule=WORKLOAD_NUMBERS["output_tokens"],
          default=_WL.output_tokens, flag="--output-tokens", body=None, show_default=True),
    Param("engine", f"One of {', '.join(ENGINES)}.", "text", default=_WL.engine, flag="--engine", body=None,
          show_default=True),
    Param("gpu_memory_utilization", "Share of GPU memory the engine may use for weights and KV cache (vLLM's flag "
          "of the same name).", rule=WORKLOAD_NUMBERS["gpu_memory_utilization"], default=_WL.gpu_memory_utilization,
          flag="--gpu-memory-utilization", body=None, show_default=True),
    Param("kv_cache_dtype", "KV-cache element type: auto (16-bit) or fp8 (1 byte).", "choice",
          rule=WORKLOAD_CHOICES["kv_cache_dtype"], default=_WL.kv_cache_dtype, flag="--kv-cache-dtype", body=None,
          show_default=True),
    Param("engine_era", "Serving-stack era: current = vLLM >= 0.6 and its contemporaries (today's stack); legacy = "
          "older stacks (vLLM <= 0.5, HF transformers loops, TGIS).", "choice", rule=WORKLOAD_CHOICES["engine_era"],
          default=_WL.engine_era, flag="--engine-era", body=None, show_default=True),
    Param("itl_stat", "Which ITL statistic to predict: mean decode gap per request ((e2e - TTFT)/(tokens - 1)) or "
          "the median inter-token gap.", "choice", rule=WORKLOAD_CHOICES["itl_stat"], default=_WL.itl_stat,
          flag="--itl-stat", body=None, show_default=True),
    Param("arrival", "How requests reach the engine in time: auto (the kind's own: server poisson, closed_loop "
          "staggered); poisson (server); staggered (closed-loop clients out of step); burst (every client starts "
          "together, as llmperf and aiperf do: adds the bundle's fitted burst excess to TTFT).", "choice",
          rule=WORKLOAD_CHOICES["arrival"], default=_WL.arrival, flag="--arrival", body=None, show_default=True),
    Param("tp", "Tensor-parallel degree: GPUs of the chosen type the model is split over (rank also takes 'auto': "
          "tries 1, 2, 4, 8 per GPU type).", "group", default="1", flag="--tp", body=None, show_default=True),
)

INTERCONNECT_RULE = ChoiceRule(tuple(link.name for link in INTERNODE_LINKS), tuple(
    (spelling, link.name) for link in INTERNODE_LINKS for spelling in (link.name.lower().replace(" ", "_"), *link.aliases)))
LAYOUT_SEARCH = (
    Param("parallel", "Layouts to rank: tp (tensor-parallel groups, as --tp says) or auto (per GPU type the "
          "layout TP × EP × DP × PP on up to --max-nodes nodes of 8 with the least energy per token; figures "
          "anchored on the learned models, and vLLM's parallel flags).", "choice", rule=ChoiceRule(("tp", "auto")), default="tp",
          flag="--parallel", show_default=True),
    Param("max_nodes", "With --parallel auto: the most nodes (of 8 GPUs) a layout may span.", "integer",
          rule=_number(1, MAX_NODES, integer=True), default=4, flag="--max-nodes", show_default=True,
          expected=f"a whole number of nodes in [1, {MAX_NODES}]"),
    Param("interconnect", "With --parallel auto: the network between nodes (data/catalog/internode_links.csv; "
          "also ndr, xdr, roce, roce200).", "choice", rule=INTERCONNECT_RULE, default=DEFAULT_INTERCONNECT,
          flag="--interconnect", show_default=True),
)

# A layout beyond one tensor-parallel group (wattgpu.layout): with any of these, `predict` answers the layout
# (wattgpu.layout_predict: anchored on the learned models); tp is the workload's.
LAYOUT = (
    Param("pp", "Pipeline-parallel stages (vLLM --pipeline-parallel-size): the layers cut into this many stages, "
          "one after the other (across nodes: --nodes). Gives a layout prediction.", "integer",
          rule=_number(1, LIMITS["pp"], integer=True), flag="--pp",
          expected=f"a whole number of stages in [1, {LIMITS['pp']}]"),
    Param("dp", "Data-parallel engines (vLLM --data-parallel-size), each serving its share of the sequences; "
          "with --ep on a MoE model, attention data parallelism. Gives a layout prediction.", "integer",
          rule=_number(1, LIMITS["dp"], integer=True), flag="--dp",
          expected=f"a whole number of engines in [1, {LIMITS['dp']}]"),
    Param("ep", "Expert parallelism for a MoE model (vLLM --enable-expert-parallel): on/off, or its degree, which "
          "vLLM sets to tp × dp. Gives a layout prediction.", "switch", rule=_number(1, LIMITS["ep"], integer=True),
          flag="--ep", expected=f"on, off, true, false, or a whole number of GPUs in [1, {LIMITS['ep']}] (tp × dp)"),
    Param("nodes", "Nodes the layout spans (default: tp × pp × dp GPUs over nodes of 8, or of the GPU's largest "
          "group). Gives a layout prediction.", "integer", rule=_number(1, MAX_NODES, integer=True),
          flag="--nodes", expected=f"a whole number of nodes in [1, {MAX_NODES}]"),
    Param("interconnect", "With a layout on several nodes: the network between them (data/catalog/"
          f"internode_links.csv; also ndr, xdr, roce, roce200). [default: {DEFAULT_INTERCONNECT}]", "choice",
          rule=INTERCONNECT_RULE, flag="--interconnect"),
)
PREDICT = Request("predict", (GPU, LLM, WORKLOAD, DTYPE, *SLA, *PRICES, *LAYOUT), "One LLM on one GPU, one "
                  "tensor-parallel group, or a layout (pp, dp, ep, nodes).", ("gpu", "llm"))
RANK = Request("rank", (
    LLM, WORKLOAD, DTYPE, *SLA,
    Param("strict", "Judge the SLA by the ITL interval's upper bound (95%, else 80%).", "boolean", default=False,
          flag="--strict"),
    Param("gpus", "GPU names or aliases to rank (on the command line comma-separated; default: the whole catalog).",
          "gpus", flag="--gpus"),
    Param("sort", "Order of the candidates: energy per token (with --replicas: fleet energy), mean power, ITL, or "
          "cost ($ per million tokens: --usd-per-gpu-hour rent plus --usd-per-kwh electricity).", "choice",
          rule=ChoiceRule(("energy", "power", "itl", "cost")), default="energy", flag="--sort", show_default=True),
    Param("tp", "Tensor-parallel degree of every GPU, or \"auto\" (1, 2, 4, 8 per GPU type).", "group",
          rule=_number(1, MAX_TP, integer=True), flag=None,
          expected=f"'auto' or a whole number of GPUs in [1, {MAX_TP}]"),
    Param("replicas", "auto: per GPU type the fewest replicas that carry --qps (total) within the SLA and "
          "--max-utilization; or a fixed count.", "replicas", rule=_number(1, MAX_REPLICAS, integer=True),
          flag="--replicas", expected=f"'auto' or a whole number in [1, {MAX_REPLICAS}]"),
    Param("max_utilization", "Headroom for a server load: highest utilization (qps per replica ÷ its capacity) a "
          "replica may run at. With --replicas auto it sizes the fleet; without --replicas, single GPUs above it "
          "are ranked after those within it. [default: 0.8]", rule=_number(0.0, 1.0, open_lo=True),
          flag="--max-utilization", expected="a fraction in (0, 1], e.g. 0.8"),
    Param("max_model_len", "Longest sequence (prompt + output tokens) the launched server must accept; the launch "
          "lines set vLLM's --max-model-len to it and count the sequences the KV cache holds at that length. "
          "[default: the model's context, lowered to what the KV cache holds]", "integer",
          rule=_number(1, MAX_MODEL_LEN, integer=True), flag="--max-model-len",
          expected=f"a whole number of tokens in [1, {MAX_MODEL_LEN:,}]"),
    *PRICES,
    *LAYOUT_SEARCH,
), "Rank GPUs for one LLM.", ("llm",))
_CSV_COLUMNS = ", ".join((*WORKLOAD_NUMBERS, *(c for c in WORKLOAD_CHOICES if c != "kind")))
SHOWN_ROW_ERRORS = 10  # skipped CSV rows printed on stderr; the rest are counted by reason (and --errors FILE)
BATCH = Request("batch", (
    Param("rows", "The rows to predict: {gpu, llm, workload} objects (HTTP) or a CSV file (CLI --input).", "rows"),
    WORKLOAD, *PRICES,
    Param("input_csv", "CSV of many predictions, one row each; needs --output. Columns: llm, gpu (required) and, "
          "optional (an empty cell or a missing column takes the option's value): workload (or kind), "
          f"{_CSV_COLUMNS}, dtype (as --dtype). Any other column is an error naming the closest one (see "
          "--lenient); docs/json.md lists the output columns.", "path", flag="--input", body=None),
    Param("lenient", "With --input: warn about a column that is not an input column and copy it through, instead "
          "of refusing the file.", "boolean", default=False, flag="--lenient", body=None),
    Param("output_csv", "CSV to write (with --input); - writes it to standard output.", "path", flag="--output",
          body=None),
    Param("on_error", "With --input: skip a bad row (reported with its line, `error` column) or stop at it.",
          "choice", rule=ChoiceRule(("skip", "stop")), default="skip", flag="--on-error", body=None,
          show_default=True),
    Param("errors_csv", "With --input: write every skipped row (line, column, reason, error) to this CSV; stderr "
          f"shows the first {SHOWN_ROW_ERRORS} and a summary by reason.", "path", flag="--errors", body=None),
), "Many rows in one vectorised pass.", ("rows",))
CALIBRATE = Request("calibrate", (
    Param("measurements", "CSV of your runs: the columns of `predict --input` plus measured power_w (mean W per "
          "GPU) and/or itl_s (s/token); optional ttft_s, idle_power_w.", "path", flag="--measurements", body=None),
    Param("benches", "Result JSON of `vllm bench serve --save-result` (repeatable; one run each); needs --gpu.",
          "paths", flag="--vllm-bench", body=None),
    Param("power_logs", "Power log of the benchmark(s): nvidia-smi --query-gpu=timestamp,power.draw --format=csv "
          "-lms 200, or a dcgmi dmon -e 155 dump; one per --vllm-bench, or one covering them all.", "paths",
          flag="--nvidia-smi", body=None),
    Param("gpu", "GPU the --vllm-bench runs used (catalog name or spec JSON).", "gpu", flag="--gpu", body=None),
    Param("llm", "LLM of the --vllm-bench runs (default: the JSON's model_id).", "llm", flag="--llm", body=None),
    Param("tp_text", "GPUs per replica of the --vllm-bench runs.", "group", default="1", flag="--tp", body=None,
          show_default=True),
    Param("out_dir", "Directory to write the calibrated bundle to.", "path", flag="--out", body=None),
    Param("other_gpus", "Also move GPUs without runs by the measured GPUs' pooled level terms (default: only the "
          "measured GPUs change).", "boolean", default=False, flag="--apply-to-other-gpus", body=None),
), "Correct the models with your own measured runs (CLI only: it writes a bundle).")
REQUESTS = {r.name: r for r in (PREDICT, RANK, BATCH, CALIBRATE)}


def check_sla_ms(max_itl_ms: Any, max_ttft_ms: Any) -> None:
    """Refuse an SLA that is not a positive finite number of milliseconds, naming the field (the bounds of
    :data:`SLA`)."""
    RANK.check({"max_itl_ms": max_itl_ms, "max_ttft_ms": max_ttft_ms})


def default_kind(fields: Mapping[str, Any]) -> str:
    """The workload kind a request means when it names none: ``server`` when it gives an arrival rate
    (``qps``), else ``offline`` — the one place this rule lives (CLI options, HTTP bodies)."""
    kind = fields.get("kind")
    if kind is not None:
        return str(kind)
    return "server" if fields.get("qps") is not None else "offline"

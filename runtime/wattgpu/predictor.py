"""Predictor: catalog/user specs → features → onnxruntime → physical power and latency.

onnxruntime sessions are created lazily (CPU provider, one intra-op thread for bit-identical
results across machines); every model file and the catalog are checked against the sha256 in
``feature_schema.json`` before first use.
"""
from __future__ import annotations

import hashlib
import math
import os
import threading
from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from . import features as F
from . import physics
from .energy import energy_figures
from .errors import ArtifactError, ModelFitError, UnsupportedModelError, WattGPUError
from .prediction import Interval, Prediction
from .schema import SCHEMA_FILE, FeatureSchema, ModelSchema
from .specs import Catalog, GpuSpec, LlmSpec, default_catalog
from .targets import inverse
from .workload import Workload

IDLE_FRACTION_OF_TDP = 0.15  # estimate used only when the catalog has no measured idle power
SERVER_FIXED_POINT_ITERS = 30


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class _ModelDir:
    """Reads files from the packaged models directory or from an explicit directory."""

    def __init__(self, path: str | os.PathLike[str] | None) -> None:
        self.path = Path(path) if path is not None else None

    def read(self, name: str) -> bytes:
        try:
            if self.path is None:
                return resources.files("wattgpu").joinpath("models", name).read_bytes()
            return (self.path / name).read_bytes()
        except (FileNotFoundError, IsADirectoryError, OSError) as exc:
            where = self.path or "wattgpu/models"
            raise ArtifactError(f"{where}/{name}: cannot read model artifact ({exc.__class__.__name__}); "
                                "reinstall wattgpu or re-export the models") from None

    def label(self, name: str) -> str:
        return f"{self.path or 'wattgpu/models'}/{name}"


class Predictor:
    """Reusable, thread-safe predictor over one exported model set and catalog."""

    def __init__(self, model_dir: str | os.PathLike[str] | None = None, catalog: Catalog | None = None) -> None:
        self._dir = _ModelDir(model_dir)
        self._catalog = catalog
        self._schema: FeatureSchema | None = None
        self._sessions: dict[str, Any] = {}
        self._factor_cache: dict[str, tuple[tuple[float, float, float], ...]] | None = None
        self._lock = threading.RLock()  # _session() reads .schema while holding it

    # ---- artifacts
    @property
    def schema(self) -> FeatureSchema:
        if self._schema is None:
            with self._lock:
                if self._schema is None:
                    schema = FeatureSchema.from_json(self._dir.read(SCHEMA_FILE), self._dir.label(SCHEMA_FILE))
                    cat_bytes = self._dir.read(schema.catalog_file)
                    if _sha256(cat_bytes) != schema.catalog_sha256:
                        raise ArtifactError(f"{self._dir.label(schema.catalog_file)}: sha256 does not match "
                                            f"{SCHEMA_FILE}; the catalog was modified — reinstall or re-export")
                    self._schema = schema
        return self._schema

    @property
    def _factors(self) -> dict[str, tuple[tuple[float, float, float], ...]]:
        if self._factor_cache is None:
            self._factor_cache = interval_factors(self.schema.intervals)
        return self._factor_cache

    @property
    def catalog(self) -> Catalog:
        if self._catalog is None:
            if self._dir.path is None:
                self.schema  # verifies the packaged catalog's hash
                self._catalog = default_catalog()
            else:
                import json

                raw = self._dir.read(self.schema.catalog_file)
                try:
                    data = json.loads(raw)
                except ValueError as exc:
                    raise ArtifactError(f"{self._dir.label(self.schema.catalog_file)}: not valid JSON ({exc}); "
                                        "reinstall or re-export") from None
                self._catalog = Catalog.from_json(data)
        return self._catalog

    def _session(self, target: str) -> Any:
        sess = self._sessions.get(target)
        if sess is None:
            with self._lock:
                sess = self._sessions.get(target)
                if sess is None:
                    sess = self._load_session(self.schema.models[target])
                    self._sessions[target] = sess
        return sess

    def _load_session(self, m: ModelSchema) -> Any:
        import onnxruntime as ort

        data = self._dir.read(m.file)
        if _sha256(data) != m.sha256:
            raise ArtifactError(f"{self._dir.label(m.file)}: sha256 does not match {SCHEMA_FILE} "
                                "(tampered, truncated or from another export); reinstall or re-export")
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        opts.inter_op_num_threads = 1
        opts.log_severity_level = 3
        try:
            sess = ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own exception types
            raise ArtifactError(f"{self._dir.label(m.file)}: onnxruntime cannot load it ({exc.__class__.__name__})") from None
        meta = sess.get_modelmeta().custom_metadata_map
        if meta.get("wattgpu.features") != ",".join(m.feature_names):
            raise ArtifactError(f"{self._dir.label(m.file)}: its feature list differs from {SCHEMA_FILE}; re-export")
        return sess

    # ---- spec resolution
    def resolve_gpu(self, gpu: Any) -> GpuSpec:
        """A GpuSpec from a spec, a catalog name/alias, or a path to a JSON file of spec-sheet numbers.

        Catalog names win over same-named files; pass ``./name`` or a Path to force a file."""
        if isinstance(gpu, GpuSpec):
            return gpu
        if isinstance(gpu, str):  # catalog names first: a dict lookup, no filesystem calls
            hit = self.catalog.find_gpu(gpu)
            if hit is not None:
                return hit
        if isinstance(gpu, os.PathLike) or (isinstance(gpu, str) and _looks_like_path(gpu)):
            from .safeio import read_json_file

            data = read_json_file(gpu, what="GPU spec", dir_file=None)
            return GpuSpec.from_dict(data, entity=f"GPU file {os.fspath(gpu)!r}")
        if not isinstance(gpu, str):
            raise WattGPUError(f"gpu: expected a catalog name, a JSON file path or a GpuSpec, got {type(gpu).__name__}")
        return self.catalog.gpu(gpu)

    def resolve_llm(self, llm: Any) -> LlmSpec:
        """An LlmSpec from a spec, a catalog id, a config.json path or a model directory holding one."""
        if isinstance(llm, LlmSpec):
            return llm
        if isinstance(llm, str):
            hit = self.catalog.find_llm(llm)
            if hit is not None:
                return hit
        if isinstance(llm, os.PathLike) or (isinstance(llm, str) and _looks_like_path(llm)):
            from .hfconfig import load_llm_file

            return load_llm_file(llm)
        if not isinstance(llm, str):
            raise WattGPUError(f"llm: expected a catalog id, a config.json path or an LlmSpec, got {type(llm).__name__}")
        return self.catalog.llm(llm)

    # ---- prediction
    def predict(self, llm: Any, gpu: Any, workload: Workload | None = None) -> Prediction:
        """Predict one (LLM, GPU, workload)."""
        return self.predict_specs([(self.resolve_gpu(gpu), self.resolve_llm(llm), _workload(workload))])[0]

    def predict_many(self, rows: Iterable[tuple[Any, Any, Workload | None]]) -> list[Prediction]:
        """Predict many (llm, gpu, workload) rows in one vectorised pass."""
        if isinstance(rows, (str, bytes, Mapping)) or not isinstance(rows, Iterable):
            raise WattGPUError(f"rows: expected an iterable of (llm, gpu, workload) tuples, got {type(rows).__name__}")
        triples = []
        for k, row in enumerate(rows):
            if not isinstance(row, (tuple, list)) or len(row) != 3:
                raise WattGPUError(f"rows[{k}]: expected an (llm, gpu, workload) tuple, got {_describe(row)}")
            m, g, w = row
            triples.append((self.resolve_gpu(g), self.resolve_llm(m), _workload(w)))
        return self.predict_specs(triples)

    def predict_specs(self, triples: Sequence[tuple[GpuSpec, LlmSpec, Workload]]) -> list[Prediction]:
        """Predict resolved triples in one vectorised pass; the first bad row raises its WattGPUError."""
        out = self.predict_specs_safe(triples)
        for r in out:
            if isinstance(r, WattGPUError):
                raise r
        return out  # type: ignore[return-value]

    def predict_specs_safe(self, triples: Sequence[tuple[GpuSpec, LlmSpec, Workload]]) -> list[Prediction | WattGPUError]:
        """Like :meth:`predict_specs`, but one entry per row: a Prediction, or the WattGPUError that row
        raises (does not fit, unsupported architecture, non-finite result). Good rows are still evaluated
        together in one onnxruntime call per model."""
        if not triples:
            return []
        for k, t in enumerate(triples):
            if not (isinstance(t, (tuple, list)) and len(t) == 3 and isinstance(t[0], GpuSpec)
                    and isinstance(t[1], LlmSpec) and isinstance(t[2], Workload)):
                raise WattGPUError(f"triples[{k}]: expected a (GpuSpec, LlmSpec, Workload) tuple, got {_describe(t)}")
        errors, all_cols = self._check_rows(triples)
        results: list[Prediction | WattGPUError | None] = list(errors)
        good = [i for i, r in enumerate(results) if r is None]
        if not good:
            return results  # type: ignore[return-value]
        sub = [triples[i] for i in good]
        cols, core, mix = self._core(sub, _take(all_cols, good, len(triples)))
        memo: dict[Any, Any] = {}  # per call: domain warnings and workload dicts of repeated specs
        for k, i in enumerate(good):
            try:
                results[i] = self._assemble(k, sub[k], cols, core, mix.get(k), memo)
            except WattGPUError as exc:
                results[i] = exc
        return results  # type: ignore[return-value]

    def predict_table(self, triples: Sequence[tuple[GpuSpec, LlmSpec, Workload]]) -> dict[str, Any]:
        """Array form of :meth:`predict_specs_safe` for large sweeps: no per-row objects or warnings.

        Returns numpy arrays (one entry per row, NaN where the row cannot be predicted) for
        ``power_w``, ``itl_s``, ``system_s_per_token``, ``throughput_tok_s``, ``energy_per_token_j``,
        ``energy_per_request_j``, ``effective_batch`` and ``busy_fraction``, plus ``error``: a list with
        the WattGPUError message of each failed row, else None. The numbers equal the Prediction fields.
        """
        n = len(triples)
        table: dict[str, Any] = {k: np.full(n, np.nan) for k in TABLE_FIELDS}
        errors, all_cols = self._check_rows(triples) if n else ([], {})
        good = np.array([i for i, e in enumerate(errors) if e is None], dtype=np.intp)
        if good.size:
            _, core, _ = self._core([triples[i] for i in good], _take(all_cols, good, n))
            bad = core["not_finite"]
            for k in TABLE_FIELDS:
                table[k][good] = np.where(bad, np.nan, core[k])
            for j in np.flatnonzero(bad):
                errors[good[j]] = _not_finite_error(triples[good[j]])
        table["error"] = [None if e is None else str(e) for e in errors]
        return table

    def _check_rows(self, triples: Sequence[tuple[GpuSpec, LlmSpec, Workload]]
                    ) -> tuple[list[WattGPUError | None], F.Columns]:
        """Type-check the triples (raising) and say which rows cannot be predicted at all; also
        returns their feature columns for reuse."""
        for k, t in enumerate(triples):
            if not (isinstance(t, (tuple, list)) and len(t) == 3 and isinstance(t[0], GpuSpec)
                    and isinstance(t[1], LlmSpec) and isinstance(t[2], Workload)):
                raise WattGPUError(f"triples[{k}]: expected a (GpuSpec, LlmSpec, Workload) tuple, got {_describe(t)}")
        cols = F.columns(triples)
        return [_row_error(t, cols, i) for i, t in enumerate(triples)], cols

    def _core(self, sub: Sequence[tuple[GpuSpec, LlmSpec, Workload]], cols: F.Columns | None = None
              ) -> tuple[F.Columns, dict[str, np.ndarray], dict[int, dict[str, Any]]]:
        """Every number of a prediction, vectorised over rows that passed :meth:`_check_rows`."""
        server_learned = "server" in self.schema.domain.get("kinds", ())
        cols = F.columns(sub) if cols is None else cols
        out = self._evaluate(cols)
        power, itl = out["power"].copy(), out["itl"].copy()
        batch = cols["eff_batch"].copy()
        busy = np.ones(len(sub))
        tokens_per_s = batch / itl
        server = np.array([w.kind == "server" for _, _, w in sub])
        server_rows = list(np.flatnonzero(server))
        mix: dict[int, dict[str, Any]] = {}
        if server_rows:
            mixed = self._server_mix([sub[k] for k in server_rows], learned=server_learned)
            mix = {int(k): mixed[j] for j, k in enumerate(server_rows)}
            for k, m in mix.items():
                power[k], itl[k], busy[k], batch[k] = m["power"], m["itl"], m["busy"], m["batch"]
                tokens_per_s[k] = sub[k][2].qps * sub[k][2].output_tokens  # type: ignore[operator]
        tdp = cols["gpu_tdp_w"]
        with np.errstate(divide="ignore", invalid="ignore"):
            not_finite = ~(np.isfinite(power) & np.isfinite(itl) & (power > 0) & (itl > 0) & (tokens_per_s > 0))
            capped = np.minimum(power, tdp)
            s_per_tok = 1.0 / tokens_per_s
            energy = energy_figures(capped, s_per_tok, cols["wl_output_tokens"])
        core = {"power_w": capped, "raw_power_w": power, "itl_s": itl, "effective_batch": batch,
                "busy_fraction": busy, "throughput_tok_s": tokens_per_s, "system_s_per_token": s_per_tok,
                "energy_per_token_j": energy["j_per_token"], "energy_per_request_j": energy["j_per_request"],
                "not_finite": not_finite, "server_learned": server & server_learned}
        return cols, core, mix

    def feature_vectors(self, triples: Sequence[tuple[GpuSpec, LlmSpec, Workload]]) -> dict[str, np.ndarray]:
        """The float32 model inputs (schema order) for each target — exactly what onnxruntime receives."""
        cols = F.columns(triples)
        return {t: F.matrix(m.feature_names, cols) for t, m in self.schema.models.items()}

    def _evaluate(self, cols: F.Columns) -> dict[str, np.ndarray]:
        res = {}
        matrices: dict[tuple[str, ...], np.ndarray] = {}  # models sharing a feature list share one matrix
        for target, m in self.schema.models.items():
            names = m.feature_names
            X = matrices.get(names)
            if X is None:
                X = matrices[names] = F.matrix(names, cols)
            learned = self._session(target).run(None, {m.input_name: X})[0].reshape(-1)
            res[target] = inverse(m.transform, learned.astype(np.float64), cols)
        return res

    def _server_mix(self, triples: Sequence[tuple[GpuSpec, LlmSpec, Workload]],
                    learned: bool = False) -> dict[int, dict[str, Any]]:
        """Poisson server: solve Little's law L = λ·(prefill + output tokens × ITL(L)) (see :mod:`physics`).

        Without server rows in training the models are evaluated as a closed loop at the busy batch and
        mean power = idle + (1 − e^−L) × (learned busy power − idle). With server rows (``learned``) they
        are evaluated as the server workload at concurrency L, exactly as the training rows were
        described, and the learned power is the mean power."""
        qps = np.array([w.qps for _, _, w in triples], dtype=np.float64)
        out_tok = np.array([w.output_tokens for _, _, w in triples], dtype=np.float64)
        state: dict[str, Any] = {}

        def request_time(conc: np.ndarray) -> np.ndarray:
            batch = physics.busy_batch(conc)
            if learned:
                wl = [replace(w, concurrency=float(c)) for (_, _, w), c in zip(triples, np.maximum(conc, 1e-3))]
            else:
                wl = [replace(w, kind="closed_loop", qps=None, concurrency=float(b)) for (_, _, w), b in zip(triples, batch)]
            cols = F.columns([(g, m, x) for (g, m, _), x in zip(triples, wl)])
            step = self._evaluate(cols)
            prefill = physics.compute_latency_s(cols["llm_active_params_b"], cols["gpu_fp16_tflops"]) * cols["wl_input_tokens"]
            state.update(res=step, batch=cols["eff_batch"] if learned else batch,
                         request_s=prefill + out_tok * step["itl"])
            return state["request_s"]

        conc, converged = physics.solve_server_concurrency(qps, request_time, iters=SERVER_FIXED_POINT_ITERS)
        request_time(conc)  # the predictions at the solved concurrency
        res, batch = state["res"], state["batch"]
        idle, sources = zip(*(idle_power(g) for g, _, _ in triples))
        busy = physics.busy_fraction(conc)
        power = res["power"] if learned else physics.server_power_mix(np.array(idle), res["power"], conc)
        return {k: {"power": float(power[k]), "itl": float(res["itl"][k]), "busy": float(busy[k]),
                    "busy_power": float(res["power"][k]), "concurrency": float(conc[k]), "batch": float(batch[k]),
                    "request_s": float(state["request_s"][k]), "idle_w": None if learned else float(idle[k]),
                    "idle_source": None if learned else sources[k], "learned": learned,
                    "idle_estimated": not learned and triples[k][0].idle_power_w is None,
                    "converged": bool(converged[k])}
                for k in range(len(triples))}

    def _assemble(self, i: int, triple: tuple[GpuSpec, LlmSpec, Workload], cols: F.Columns,
                  core: Mapping[str, np.ndarray], mix: dict[str, Any] | None,
                  memo: dict[Any, Any] | None = None) -> Prediction:
        """Row ``i`` of the vectorised core as a Prediction, with its warnings."""
        gpu, llm, wl = triple
        if core["not_finite"][i]:
            raise _not_finite_error(triple)
        memo = {} if memo is None else memo  # keyed by id(): valid only while the call holds the specs
        wkey = (id(gpu), id(llm), wl.kind, wl.engine)  # all that domain_warnings reads
        base = memo.get(wkey)
        if base is None:
            base = memo[wkey] = tuple(domain_warnings(self.schema.domain, gpu, llm, wl))
        warnings = list(base)
        warnings.extend(context_warnings(llm, wl))
        wl_dict = memo.get(id(wl))
        if wl_dict is None:
            wl_dict = memo[id(wl)] = wl.to_dict()
        idle_w: float | None = None
        idle_src: str | None = None
        if llm.sliding_window and llm.sliding_window < wl.context_tokens:
            warnings.append(f"{llm.name} has a {llm.sliding_window}-token sliding window; memory fit and batch "
                            "limit assume full-context KV for every layer (conservative)")
        power, itl = float(core["power_w"][i]), float(core["itl_s"][i])
        batch, tokens_per_s = float(core["effective_batch"][i]), float(core["throughput_tok_s"][i])
        if mix is not None:
            idle_w, idle_src = mix["idle_w"], mix["idle_source"]
            method = ("learned (server rows in training)" if mix["learned"]
                      else "server mix: idle + busy fraction × (learned busy power − idle)")
            if mix["idle_estimated"]:
                warnings.append(f"idle power of {gpu.name} estimated as {IDLE_FRACTION_OF_TDP:.0%} of TDP "
                                "(no measured figure in the catalog)")
            if not mix["converged"]:
                warnings.append("Little's-law fixed point did not converge: the load is at or beyond capacity")
            if mix["concurrency"] > float(cols["fit_batch"][i]) or tokens_per_s > batch / itl:
                warnings.append("arrival rate exceeds the predicted capacity: the queue grows without bound")
        else:
            method = "learned (server rows in training)" if core["server_learned"][i] else "learned"
        raw = float(core["raw_power_w"][i])
        if raw > gpu.tdp_w:
            warnings.append(f"predicted power {raw:.0f} W exceeds TDP {gpu.tdp_w:.0f} W; capped at TDP")
        scen = physics.paper_scenario(wl.kind, wl.qps)
        baselines = {"tdp_w": gpu.tdp_w, "ls_tdp_w": physics.ls_tdp_power_w(gpu.tdp_w, scen),
                     "roofline_itl_s": float(cols["roofline_itl_s"][i])}
        return Prediction(
            llm=llm.name, gpu=gpu.name, workload=dict(wl_dict), power_w=power, itl_s=itl,
            system_s_per_token=float(core["system_s_per_token"][i]), throughput_tok_s=tokens_per_s,
            energy_per_token_j=float(core["energy_per_token_j"][i]),
            energy_per_request_j=float(core["energy_per_request_j"][i]), effective_batch=batch,
            busy_fraction=float(core["busy_fraction"][i]), power_method=method, idle_power_w=idle_w,
            idle_power_source=idle_src,
            power_intervals=_intervals(self._factors.get("power", ()), power, cap=gpu.tdp_w),
            itl_intervals=_intervals(self._factors.get("itl", ()), itl), baselines=baselines,
            warnings=tuple(warnings))


def _take(cols: F.Columns, rows: Sequence[int] | np.ndarray, n: int) -> F.Columns:
    """The columns of the given rows (features are row-wise, so this equals recomputing them)."""
    if len(rows) == n:
        return cols
    idx = np.asarray(rows, dtype=np.intp)
    return {k: v[idx] for k, v in cols.items()}


TABLE_FIELDS = ("power_w", "itl_s", "system_s_per_token", "throughput_tok_s", "energy_per_token_j",
                "energy_per_request_j", "effective_batch", "busy_fraction")


def _not_finite_error(triple: tuple[GpuSpec, LlmSpec, Workload]) -> WattGPUError:
    gpu, llm, _ = triple
    return WattGPUError(f"prediction for {llm.name} on {gpu.name} is not finite; inputs are outside anything "
                        "the models can describe — check the spec values")


def interval_factors(intervals: Mapping[str, Any]) -> dict[str, tuple[tuple[float, float, float], ...]]:
    """Parse the schema's calibrated factors once: target -> ((level, low factor, high factor), ...)."""
    return {target: tuple(sorted((int(level) / 100.0, float(lo), float(hi))
                                 for level, (lo, hi) in spec.get("factors", {}).items()))
            for target, spec in intervals.items() if spec}


def _intervals(factors: tuple[tuple[float, float, float], ...], value: float,
               cap: float | None = None) -> tuple[Interval, ...]:
    """Multiplicative intervals around ``value`` (the high end capped at ``cap`` when given)."""
    if cap is None:
        return tuple([Interval(level, value * lo, value * hi) for level, lo, hi in factors])
    return tuple([Interval(level, value * lo, min(value * hi, cap)) for level, lo, hi in factors])


NO_KV_CACHE = {"rnn_rwkv": "a recurrent network", "ssm_mamba": "a pure state-space (Mamba) model"}


def idle_power(gpu: GpuSpec) -> tuple[float, str]:
    """Idle power of ``gpu`` with a model loaded and no requests, and where the figure comes from."""
    if gpu.idle_power_w is not None:
        return gpu.idle_power_w, f"measured: {gpu.idle_power_source or 'catalog'}"
    return IDLE_FRACTION_OF_TDP * gpu.tdp_w, f"estimated: {IDLE_FRACTION_OF_TDP:.0%} of TDP (no measured figure)"


def _row_error(triple: tuple[GpuSpec, LlmSpec, Workload], cols: F.Columns, i: int) -> WattGPUError | None:
    """Why row ``i`` cannot be predicted (no KV cache, does not fit in memory), or None."""
    g, m, w = triple
    if m.arch_class in NO_KV_CACHE:
        return UnsupportedModelError(f"{m.name} is {NO_KV_CACHE[m.arch_class]} without attention or KV cache; "
                                     "WattGPU models attention-based LLMs only")
    if cols["fit_batch"][i] < 1:
        one_seq = physics.kv_bytes_per_sequence(cols["kv_per_token"][i], cols["context_tokens"][i])
        need = float(physics.memory_needed_bytes(cols["weights_bytes"][i], g.memory_size_gb, one_seq)) / 1e9
        have = g.memory_size_gb * w.gpu_memory_utilization
        err = ModelFitError(f"{m.name} does not fit on {g.name}: needs {need:.1f} GB (weights + activation "
                            f"reserve + one {w.context_tokens}-token sequence), GPU has {have:.1f} GB usable "
                            f"({g.memory_size_gb:g} GB × {w.gpu_memory_utilization:g}); use a larger GPU")
        err.need_gb, err.have_gb = need, have  # type: ignore[attr-defined]
        return err
    return None


def domain_warnings(domain: Mapping[str, Any], gpu: GpuSpec, llm: LlmSpec, wl: Workload) -> Iterable[str]:
    """Say where a prediction leaves what the models were trained on."""
    if not domain:
        return
    for field_name, (lo, hi) in domain.get("gpu_ranges", {}).items():
        v = getattr(gpu, field_name, None)
        if v is not None and not (lo <= v <= hi):
            yield f"GPU {field_name} = {v:g} is outside the training range [{lo:g}, {hi:g}]: extrapolating"
    lo, hi = domain.get("llm_params_b", (0, math.inf))
    if not (lo <= llm.total_params_b <= hi):
        yield f"LLM size {llm.total_params_b:g}B is outside the training range [{lo:g}, {hi:g}]B: extrapolating"
    if llm.arch_class not in domain.get("arch_classes", (llm.arch_class,)):
        yield f"LLM architecture {llm.arch_class} was never in training"
    if llm.is_moe and not domain.get("moe_seen", False):
        yield "mixture-of-experts LLMs were never in training"
    if llm.quantized and not domain.get("quantized_seen", False):
        yield "quantised checkpoints were never in training"
    if wl.kind not in domain.get("kinds", (wl.kind,)):
        yield (f"workload kind '{wl.kind}' was never measured in training; "
               + ("power mixes idle and learned busy power" if wl.kind == "server" else "extrapolating"))
    if wl.engine not in domain.get("engines", (wl.engine,)):
        yield f"engine '{wl.engine}' was never measured in training"
    gpus = set(domain.get("gpus", ()))
    if gpus and gpu.name not in gpus:
        yield f"{gpu.name} was not measured in training (prediction from spec-sheet features)"


def context_warnings(llm: LlmSpec, wl: Workload) -> Iterable[str]:
    """A context beyond the model's trained positions is allowed (RoPE scaling can extend it) but flagged."""
    if llm.max_position_embeddings and wl.context_tokens > llm.max_position_embeddings:
        yield (f"context of {wl.context_tokens} tokens (input + output) exceeds {llm.name}'s "
               f"max_position_embeddings {llm.max_position_embeddings}; engines refuse it unless the context "
               "is extended (e.g. rope_scaling)")


def _workload(w: Any) -> Workload:
    if w is None:
        return Workload()
    if isinstance(w, Mapping):
        return Workload.from_dict(w)
    if not isinstance(w, Workload):
        raise WattGPUError(f"workload: expected a Workload, a mapping of its fields or None, got {type(w).__name__}")
    return w


def _describe(value: Any) -> str:
    shown = repr(value) if not isinstance(value, (str, bytes)) else type(value).__name__
    return shown if len(shown) <= 60 else shown[:57] + "..."


def _looks_like_path(text: str) -> bool:
    return text.endswith(".json") or os.sep in text and os.path.exists(text) or os.path.isdir(text) \
        or (text.startswith((".", "~")) and os.path.exists(os.path.expanduser(text)))


_DEFAULT: Predictor | None = None
_DEFAULT_LOCK = threading.Lock()


def default_predictor() -> Predictor:
    """The process-wide predictor over the packaged models (created on first use)."""
    global _DEFAULT
    if _DEFAULT is None:
        with _DEFAULT_LOCK:
            if _DEFAULT is None:
                _DEFAULT = Predictor()
    return _DEFAULT

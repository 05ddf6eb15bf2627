"""Predictor: the thin facade over the prediction pipeline.

    resolve.py   user inputs → (GpuSpec, LlmSpec, Workload) rows
    bundle.py    verified artifacts (schema, catalog, ONNX sessions)
    checks.py    rows that cannot be predicted; warnings; intervals
    assemble.py  rows → feature columns → ONNX → physical outputs
    server.py    Poisson-server physics (Little's law, idle/busy mix)
    results.py   the vectorised numbers and the Prediction of each row
    single.py    the same definitions on plain floats for one row (Predictor.predict)

Every row tuple and every function takes ``(gpu, llm, workload)`` in that order.
"""
from __future__ import annotations

import os
import stat
import threading
from typing import Any, Iterable, Mapping, NamedTuple, Sequence

import numpy as np

from . import assemble, checks, results, single
from .assemble import Row
from .bundle import ModelBundle, parse_interval_factors
from .checks import NO_KV_CACHE, context_warnings, domain_warnings
from .errors import ArgumentTypeError, ArtifactError, ConfigFileError, WattGPUError
from .features import Columns
from .prediction import Prediction
from .resolve import as_workload, resolve_gpu, resolve_llm, resolve_pair
from .results import TABLE_FIELDS
from .schema import FeatureSchema
from .serving.server import IDLE_FRACTION_OF_TDP, idle_power
from .specs import Catalog, GpuSpec, LlmSpec
from .threads import thread_count
from .workload import Workload

interval_factors = parse_interval_factors  # 0.1 name; training's calibrate.interval_factors computes them

__all__ = ["Predictor", "Evaluated", "default_predictor", "TABLE_FIELDS", "NO_KV_CACHE", "IDLE_FRACTION_OF_TDP",
           "idle_power", "interval_factors", "domain_warnings", "context_warnings"]


class Predictor:
    """Reusable, thread-safe predictor over one exported model set and catalog."""

    def __init__(self, models: str | os.PathLike[str] | None = None, catalog: Catalog | None = None, *,
                 model_dir: str | os.PathLike[str] | None = None) -> None:
        """``models``: a bundle directory (``wattgpu-train fit --out DIR``); default ``$WATTGPU_MODELS``,
        else the packaged models. ``model_dir`` is the 0.1 name of ``models``. ``catalog`` overrides
        the bundle's catalog for name lookups."""
        for name, value in (("models", models), ("model_dir", model_dir)):
            if value is not None and (isinstance(value, bytes) or not isinstance(value, (str, os.PathLike))):
                raise ArgumentTypeError(f"{name}: expected a directory path or None, got {type(value).__name__}")
        if catalog is not None and not isinstance(catalog, Catalog):
            raise ArgumentTypeError(f"catalog: expected a wattgpu.Catalog or None, got {type(catalog).__name__}")
        if models is not None and model_dir is not None:
            raise WattGPUError("models: pass models or model_dir (its old name), not both")
        given, origin = (models, "models") if models is not None else (model_dir, "model_dir")
        path = models_dir(given)
        if path is not None:
            check_bundle_dir(path, origin if given is not None else f"${MODELS_ENV}")
        thread_count()  # a malformed $WATTGPU_THREADS is refused here, not at the first large table
        self.bundle = ModelBundle(path)
        self._catalog = catalog

    @property
    def schema(self) -> FeatureSchema:
        return self.bundle.schema

    @property
    def catalog(self) -> Catalog:
        return self._catalog if self._catalog is not None else self.bundle.catalog

    def _session(self, target: str) -> Any:
        return self.bundle.session(target)

    def _evaluate(self, cols: Columns, targets: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """Features → ONNX → physical outputs (every model, or those of ``targets``); the single call
        site of the models on the vectorised path."""
        return assemble.evaluate(self.bundle, cols, targets)

    # ---- spec resolution
    def resolve_gpu(self, gpu: Any) -> GpuSpec:
        """A GpuSpec from a spec, a catalog name/alias, or a path to a JSON file of spec-sheet numbers."""
        return resolve_gpu(self.catalog, gpu)

    def resolve_llm(self, llm: Any) -> LlmSpec:
        """An LlmSpec from a spec, a catalog id, a config.json path or a model directory holding one."""
        return resolve_llm(self.catalog, llm)

    # ---- prediction
    def predict(self, gpu: Any, llm: Any, workload: Workload | Mapping[str, Any] | None = None) -> Prediction:
        """Predict one (gpu, llm, workload); the 0.1 order (llm, gpu) still works, with a DeprecationWarning."""
        g, m = resolve_pair(self.catalog, gpu, llm)
        row = (g, m, as_workload(workload))
        fast = single.predict_one(self.bundle, row)  # plain floats; None → the vectorised path
        return fast if fast is not None else self.predict_specs([row])[0]

    def predict_many(self, rows: Iterable[tuple[Any, Any, Any]]) -> list[Prediction]:
        """Predict many (gpu, llm, workload) rows in one vectorised pass."""
        if isinstance(rows, (str, bytes, Mapping)) or not isinstance(rows, Iterable):
            raise WattGPUError(f"rows: expected an iterable of (gpu, llm, workload) tuples, got {type(rows).__name__}")
        triples = []
        for k, row in enumerate(rows):
            if not isinstance(row, (tuple, list)) or len(row) != 3:
                raise WattGPUError(f"rows[{k}]: expected a (gpu, llm, workload) tuple, got {checks.describe(row)}")
            g, m = resolve_pair(self.catalog, row[0], row[1])
            triples.append((g, m, as_workload(row[2])))
        return self.predict_specs(triples)

    def predict_specs(self, triples: Sequence[Row]) -> list[Prediction]:
        """Predict resolved rows in one vectorised pass; the first bad row raises its WattGPUError."""
        out = self.predict_specs_safe(triples)
        for r in out:
            if isinstance(r, WattGPUError):
                raise r
        return out  # type: ignore[return-value]

    def predict_specs_safe(self, triples: Sequence[Row]) -> list[Prediction | WattGPUError]:
        """Like :meth:`predict_specs`, but one entry per row: a Prediction, or the WattGPUError that row
        raises (does not fit, unsupported architecture, non-finite result). Good rows are still evaluated
        together in one onnxruntime call per model."""
        return self.evaluate_rows(triples).predictions()

    def evaluate_rows(self, triples: Sequence[Row], checked: "Checked | None" = None) -> "Evaluated":
        """Every row's numbers in one vectorised pass; Predictions built on demand (:class:`Evaluated`).
        ``checked``: :func:`check_rows` of these rows, when the caller kept it."""
        _check_sequence(triples)
        if not triples:
            return Evaluated(self.bundle, triples, [], [], {}, {}, {})
        errors, all_cols, good, cols = check_rows(triples) if checked is None else checked
        if not good:
            return Evaluated(self.bundle, triples, list(errors), [], {}, {}, {})
        numbers, mix = results.core(self.bundle, self._evaluate, [triples[i] for i in good], cols)
        return Evaluated(self.bundle, triples, list(errors), good, cols, numbers, mix, all_cols)

    def predict_table(self, triples: Sequence[Row]) -> dict[str, Any]:
        """Array form of :meth:`predict_specs_safe` for large sweeps: no per-row objects or warnings.

        Returns numpy arrays (one entry per row, NaN where the row cannot be predicted) for
        ``power_w``, ``itl_s``, ``system_s_per_token``, ``throughput_tok_s``, ``energy_per_token_j``,
        ``energy_per_request_j``, ``effective_batch`` and ``busy_fraction``, plus ``error``: a list with
        the WattGPUError message of each failed row, else None. The numbers equal the Prediction fields.
        """
        _check_sequence(triples)
        n = len(triples)
        table = results.empty_table(n)
        errors, all_cols = checks.row_errors(triples) if n else ([], {})
        clean = errors.count(None) == n
        good = np.arange(n) if clean else np.array([i for i, e in enumerate(errors) if e is None], dtype=np.intp)
        if good.size:
            sub = triples if clean else [triples[i] for i in good]
            numbers, _ = results.core(self.bundle, self._evaluate, sub, assemble.take(all_cols, good, n))
            bad = numbers["not_finite"]
            for k in TABLE_FIELDS:
                table[k][good] = np.where(bad, np.nan, numbers[k])
            for j in np.flatnonzero(bad):
                errors[good[j]] = checks.not_finite_error(triples[good[j]])
        table["error"] = errors if errors.count(None) == n else [None if e is None else str(e) for e in errors]
        return table

    def feature_vectors(self, triples: Sequence[Row]) -> dict[str, np.ndarray]:
        """The float32 model inputs (schema order) for each target — exactly what onnxruntime receives."""
        _check_sequence(triples)
        checks.check_row_types(triples)
        return assemble.feature_vectors(self.bundle, triples)


class Checked(NamedTuple):
    """:func:`check_rows`: per row its error or None, every row's feature columns, the rows that can be
    predicted, and their columns."""

    errors: list[WattGPUError | None]
    all_cols: Columns
    good: list[int]
    cols: Columns


def check_rows(triples: Sequence[Row]) -> Checked:
    """The rows' errors (:func:`wattgpu.checks.row_errors`, raising on a malformed row), their feature columns,
    the rows that can be predicted and those rows' columns: all that depends on the rows' spec objects
    alone, so a caller asking the same rows again may keep it (and must not write to the columns)."""
    errors, all_cols = checks.row_errors(triples)
    good = [i for i, r in enumerate(errors) if r is None]
    return Checked(errors, all_cols, good, assemble.take(all_cols, good, len(triples)))


class Evaluated:
    """Rows evaluated together: errors, numbers (row ``i`` at ``slot[i]``), Predictions on demand."""

    def __init__(self, bundle: ModelBundle, triples: Sequence[Row], errors: list[WattGPUError | None],
                 good: list[int], cols: Columns, numbers: Mapping[str, np.ndarray], mix: Mapping[int, Any],
                 all_cols: Columns | None = None) -> None:
        self.bundle, self.triples, self.errors, self.cols, self.numbers, self.mix = bundle, triples, errors, cols, numbers, mix
        self.all_cols = all_cols  # the feature columns of every row (None: not kept), for callers that need more
        self.slot = {i: k for k, i in enumerate(good)}
        self._lists: tuple[dict[str, list[Any]], dict[str, list[Any]]] | None = None

    def prediction(self, i: int) -> Prediction | WattGPUError:
        """Row ``i``'s Prediction, or the WattGPUError it raises."""
        if self.errors[i] is not None:
            return self.errors[i]  # type: ignore[return-value]
        if self._lists is None:  # lists: row reads without numpy scalar boxing (same values)
            self._lists = ({k: v.tolist() for k, v in self.numbers.items()},
                           {k: self.cols[k].tolist() for k in results.ROW_COLUMNS})
        k = self.slot[i]
        try:
            return results.prediction(self.bundle, k, self.triples[i], self._lists[1], self._lists[0],  # type: ignore[arg-type]
                                      self.mix.get(k), results.memo_for(self.bundle))
        except ArtifactError:
            raise  # a damaged install is no row's error
        except WattGPUError as exc:
            return exc

    def predictions(self) -> list[Prediction | WattGPUError]:
        return [self.prediction(i) for i in range(len(self.triples))]


def _check_sequence(triples: Any) -> None:
    if isinstance(triples, (str, bytes, Mapping)) or not isinstance(triples, Sequence):
        raise ArgumentTypeError(f"triples: expected a list of (GpuSpec, LlmSpec, Workload) tuples, "
                                f"got {type(triples).__name__}")


MODELS_ENV = "WATTGPU_MODELS"


def models_dir(models: str | os.PathLike[str] | None) -> str | os.PathLike[str] | None:
    """The bundle directory to use: ``models`` if given, else ``$WATTGPU_MODELS`` if set, else None
    (the packaged bundle)."""
    if models is not None:
        return models
    env = os.environ.get(MODELS_ENV, "").strip()
    return env or None


def check_bundle_dir(path: str | os.PathLike[str], origin: str) -> None:
    """Refuse a ``path`` (given as ``origin``: ``models``, ``model_dir``, ``$WATTGPU_MODELS``) that is not
    a directory, with a ConfigFileError (exit 2) that names where it came from and the fix. A directory
    whose bundle files are missing or damaged is left to the integrity checks (ArtifactError, exit 3)."""
    shown = os.fspath(path) or "''"
    fix = (f"unset {MODELS_ENV} to use the packaged models" if origin == f"${MODELS_ENV}"
           else "leave it out to use the packaged models")
    try:
        is_dir = stat.S_ISDIR(os.stat(os.fspath(path)).st_mode)
    except FileNotFoundError:
        problem = "does not exist"
    except (OSError, ValueError) as exc:  # too long a name, no permission, NUL in the path
        problem = f"cannot be read ({getattr(exc, 'strerror', None) or exc})"
    else:
        if is_dir:
            return  # a directory missing a bundle file is a damaged bundle: the integrity checks name it
        problem = "is not a directory"
    raise ConfigFileError(shown, f"the model bundle directory given as {origin} {problem}; pass a directory "
                                 f"written by `wattgpu-train fit --out DIR`, or {fix}")


_DEFAULT: Predictor | None = None
_DEFAULT_LOCK = threading.Lock()


def default_predictor() -> Predictor:
    """The process-wide predictor over ``$WATTGPU_MODELS`` or the packaged models (created on first use)."""
    global _DEFAULT
    if _DEFAULT is None:
        with _DEFAULT_LOCK:
            if _DEFAULT is None:
                _DEFAULT = Predictor()
    return _DEFAULT

"""Feature assembly and model evaluation: (GPU, LLM, workload) rows → feature columns → ONNX → W and s."""
from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from . import features as F
from . import ops
from .bundle import ModelBundle
from .calibrated import of as calibration_of
from .specs import GpuSpec, LlmSpec
from .targets import inverse
from .threads import run_rows
from .workload import KINDS, Workload

Row = tuple[GpuSpec, LlmSpec, Workload]  # the one order everywhere: (gpu, llm, workload)
Outputs = dict[str, np.ndarray]  # target (targets.POWER, targets.ITL) -> physical values
Evaluate = Callable[..., Outputs]  # (cols, targets=None) -> outputs
KIND = "wl_kind_code"
_OFFLINE_CODE, _CLOSED_LOOP_CODE = float(KINDS.index("offline")), float(KINDS.index("closed_loop"))


def take(cols: F.Columns, rows: Sequence[int] | np.ndarray, n: int) -> F.Columns:
    """The columns of the given rows (features are row-wise, so this equals recomputing them)."""
    if len(rows) == n:
        return cols
    idx = np.asarray(rows, dtype=np.intp)
    return {k: v[idx] for k, v in cols.items()}


def feature_vectors(bundle: ModelBundle, rows: Sequence[Row]) -> dict[str, np.ndarray]:
    """The float32 model inputs (schema order) for each target — exactly what onnxruntime receives."""
    cols = F.columns(rows)
    return {t: F.matrix(m.feature_names, cols) for t, m in bundle.schema.models.items()}


def steady(cols: Any) -> Any:
    """``cols`` with offline rows described as the closed loop of the same running batch (the models'
    workload-kind input): both keep ``effective_batch`` sequences decoding back to back, so the same load
    gives the same power and ITL whatever the workload kind is called (the capacity grid and the server
    mix already evaluate a running batch this way). Arrays (a shallow copy) or one row of floats.

    Applied where models are evaluated, only for a model that reads the kind (older bundles; issue 32).
    """
    out = dict(cols)
    out[KIND] = ops.where(cols[KIND] == _OFFLINE_CODE, _CLOSED_LOOP_CODE, cols[KIND])
    return out


def reads_kind(bundle: ModelBundle) -> bool:
    """Whether any model of ``bundle`` takes the workload kind as an input."""
    return reads(bundle, KIND)


def reads(bundle: ModelBundle, column: str) -> bool:
    """Whether any model of ``bundle`` takes the feature ``column`` as an input."""
    return any(column in feature_names(m) for m in bundle.schema.models.values())


_NAMES: dict[int, tuple[Any, tuple[str, ...]]] = {}


def feature_names(model: Any) -> tuple[str, ...]:
    """``model.feature_names`` (a tuple the manifest entry rebuilds on every read), kept per entry object
    (entries are frozen; a hit is checked by identity)."""
    hit = _NAMES.get(id(model))
    if hit is not None and hit[0] is model:
        return hit[1]
    if len(_NAMES) > 256:
        _NAMES.clear()
    names = model.feature_names
    _NAMES[id(model)] = (model, names)
    return names


def evaluate(bundle: ModelBundle, cols: F.Columns, targets: Sequence[str] | None = None) -> Outputs:
    """Run every model of ``bundle`` (or those of ``targets``) on ``cols``; outputs in physical units."""
    res = {}
    matrices: dict[tuple[str, ...], np.ndarray] = {}  # models sharing a feature list share one matrix
    for target, m in bundle.schema.models.items():
        if targets is not None and target not in targets:
            continue
        names = feature_names(m)
        X = matrices.get(names)
        if X is None:
            X = matrices[names] = F.matrix(names, steady(cols) if KIND in names else cols)
        learned = run_distinct(bundle.session(target), m.input_name, X)
        res[target] = inverse(m.transform, learned.astype(np.float64), cols)
    if bundle.schema.calibration is not None:  # a `wattgpu calibrate` bundle: its bounded correction
        res = calibration_of(bundle).apply(res, cols)  # type: ignore[union-attr]
    return res


DISTINCT_MIN_ROWS = 64  # smaller inputs run as they are


def run_distinct(session: Any, input_name: str, X: np.ndarray) -> np.ndarray:
    """The model's output per row of ``X``, each distinct row (by its bytes) evaluated once; a large input's
    rows split over threads (:func:`wattgpu.threads.run_rows`: the same bits). Inside :func:`memoised_models`
    a row the run has already evaluated is read back from its :class:`ModelMemo`."""
    n = X.shape[0]
    memo = _MEMO.get()
    if n >= DISTINCT_MIN_ROWS or memo is not None:
        Xc = np.ascontiguousarray(X)
        first, back = ops.distinct_rows(Xc.view(np.dtype(f"i{Xc.dtype.itemsize}")))  # by bits
        if memo is not None:
            return memo.run(session, input_name, Xc[first])[back]
        if len(first) <= 0.8 * n:
            return np.asarray(run_rows(session, input_name, Xc[first])).reshape(-1)[back]
    return np.asarray(run_rows(session, input_name, X)).reshape(-1)


class ModelMemo:
    """Each model's output per input row (by the row's bytes), kept across the calls of one batch run.

    A stream answers its rows a chunk at a time, and the capacity grids of different set-ups share most of
    their rows (the same GPU, LLM and engine at the same batch: the ITL model reads no token counts), so
    without it a CSV of 50,000 varied rows ran the ITL model on 4.4 times the rows it has distinct. A
    session's output for a row does not depend on the rows beside it, so the answers are the same bits.
    At most :data:`LIMIT` rows are kept per model (then it starts again): memory stays bounded on any file.
    """

    LIMIT = 1 << 18

    def __init__(self) -> None:
        self._tables: dict[int, tuple[Any, dict[bytes, float]]] = {}  # id(session) -> (session, row -> output)

    def run(self, session: Any, input_name: str, X: np.ndarray) -> np.ndarray:
        """``session``'s output (float32) per row of ``X`` (distinct rows, C-contiguous): the rows not seen
        before evaluated (:func:`wattgpu.threads.run_rows`) and kept."""
        hit = self._tables.get(id(session))
        if hit is None or hit[0] is not session:  # the memo holds the session, so an id is not reused meanwhile
            hit = self._tables[id(session)] = (session, {})
        table = hit[1]
        keys = X.view(np.dtype((np.void, X.shape[1] * X.dtype.itemsize))).ravel().tolist()
        got = list(map(table.get, keys))
        todo = [i for i, v in enumerate(got) if v is None]
        if todo:
            out = np.asarray(run_rows(session, input_name, X[todo])).reshape(-1).tolist()
            if len(table) + len(todo) > self.LIMIT:
                table.clear()
            for i, v in zip(todo, out):
                got[i] = table[keys[i]] = v
        return np.array(got, dtype=np.float32)


_MEMO: ContextVar[ModelMemo | None] = ContextVar("wattgpu_model_memo", default=None)


@contextmanager
def memoised_models(memo: ModelMemo) -> Iterator[ModelMemo]:
    """Within the block (this thread or task only), every model evaluation reads and fills ``memo``."""
    token = _MEMO.set(memo)
    try:
        yield memo
    finally:
        _MEMO.reset(token)

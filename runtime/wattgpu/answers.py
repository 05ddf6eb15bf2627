"""The answers of predict, rank, batch and llms, built once for the CLI (``--json``), the Python API and the HTTP
service (the questions: :mod:`wattgpu.questions`; the answers' fields: :mod:`wattgpu.record`).

Each function takes resolved inputs (a Predictor, an LLM/GPU given as a name or a spec, a Workload)
and returns the plain dict the CLI prints with ``--json``; :mod:`wattgpu.service` returns the same
dicts as HTTP bodies, so the two cannot drift apart.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from .energy import Prices
from .errors import WattGPUError
from .workload import Workload

if TYPE_CHECKING:  # ranking loads only for rank's answers: `wattgpu predict` does not need it (cold start)
    from .ranking import RankResult



def predict_answer(predictor: Any, gpu: Any, llm: Any, workload: Workload, *, dtype: str = "auto",
                   max_itl_ms: float | None = None, max_ttft_ms: float | None = None,
                   prices: Prices = (None, None, 1.0, None), layout: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``wattgpu predict --json``: ``Prediction.to_dict(prices)``, and ``sla`` only when an SLA is
    given (the batch cap 1, 2, 4, … that meets it at the lowest energy per token). With ``layout`` fields (``pp``,
    ``dp``, ``ep``, ``nodes``, ``interconnect``) that ask for more than one tensor-parallel group, the layout's
    answer instead (:func:`wattgpu.layout_predict.predict_answer`)."""
    from .quant import with_dtype

    if layout and any(v is not None for v in layout.values()):  # no layout field given: nothing to check (cold start)
        from . import layout_predict

        if layout_predict.wants_layout(layout):
            return layout_predict.predict_answer(predictor, gpu, llm, workload, layout, dtype=dtype,
                                                 max_itl_ms=max_itl_ms, max_ttft_ms=max_ttft_ms, prices=prices)
        layout_predict.check_no_layout(layout)

    spec = with_dtype(predictor.resolve_llm(llm), dtype)
    sla: dict[str, Any] | None = None
    if max_itl_ms is not None or max_ttft_ms is not None:
        from .questions import check_sla_ms
        from .ranking import search_caps

        check_sla_ms(max_itl_ms, max_ttft_ms)
        row = (predictor.resolve_gpu(gpu), spec, workload)
        found, chosen, _, why = search_caps(predictor, [row], False, max_itl_ms, max_ttft_ms)[0]
        if isinstance(found, WattGPUError):
            raise found
        pred = found
        sla = {"max_itl_ms": max_itl_ms, "max_ttft_ms": max_ttft_ms, "met": why is None,
               "max_batch": chosen[2].max_batch, "reason": why}
    else:
        pred = predictor.predict(gpu, spec, workload)
    p: dict[str, Any] = pred.to_dict(prices)
    if sla is not None:
        p["sla"] = sla  # only with an SLA: otherwise the JSON equals Prediction.to_dict(prices)
    return p


def rank_result(predictor: Any, llm: Any, workload: Workload, *, tp_auto: bool = False, tp_given: bool = True,
                gpus: Sequence[Any] | None = None, **options: Any) -> tuple[RankResult, bool]:
    """``wattgpu rank``: the RankResult, and whether it fell back to tensor-parallel groups.

    ``tp_auto`` ranks groups of 1, 2, 4 and 8 GPUs. When the degree was not given (``tp_given`` False) and
    no GPU holds the model alone, the ranking is redone as ``tp_auto`` (the question is then which group
    of GPUs) and the second value is True. ``options`` are :func:`wattgpu.ranking.rank`'s keywords."""
    from .ranking import rank

    def ranked(tp: str | None) -> RankResult:
        return rank(llm, workload, gpus=gpus, predictor=predictor, tp=tp, **options)

    res = ranked("auto" if tp_auto else None)
    if not tp_given and not res.candidates and res.excluded \
            and all(x.reason_kind == "does_not_fit" for x in res.excluded):
        return ranked("auto"), True
    return res, False


def rank_answer(predictor: Any, llm: Any, workload: Workload, **kwargs: Any) -> dict[str, Any]:
    """``wattgpu rank --json``: ``RankResult.to_dict()`` of :func:`rank_result`."""
    return rank_result(predictor, llm, workload, **kwargs)[0].to_dict()


def predict_in_chunks(predictor: Any, rows: Sequence[Any], between_chunks: Callable[[], None] = lambda: None,
                      chunk: int = 1000) -> list[Any]:
    """``predictor.predict_specs_safe`` over ``rows``, ``chunk`` rows at a time, ``between_chunks()`` before each
    (where the service stops a request that timed out). The chunks share one model memo
    (:class:`wattgpu.assemble.ModelMemo`): a model input row is evaluated once per call."""
    from .assemble import ModelMemo, memoised_models  # here: answers stays light for the commands that never predict

    rows = list(rows)
    results: list[Any] = []
    with memoised_models(ModelMemo()):
        for start in range(0, len(rows), chunk):
            between_chunks()
            results.extend(predictor.predict_specs_safe(rows[start:start + chunk]))
    return results


def batch_answer(predictor: Any, out: list[dict[str, Any] | None], rows: Sequence[Any], where: Sequence[int],
                 prices: Prices, error_body: Callable[[WattGPUError], dict[str, Any]],
                 between_chunks: Callable[[], None] = lambda: None, chunk: int = 1000) -> dict[str, Any]:
    """``POST /v1/predict/batch`` (and any caller with resolved rows): the resolved ``rows`` (gpu, llm, workload)
    predicted in one vectorised pass into ``out`` at positions ``where`` (slots already filled hold the error
    records of rows that could not be read); a row that cannot be predicted gets ``error_body(err)``. Returns
    ``{"results": [{row, prediction} | {row, error}], "predicted", "failed"}``; each prediction is
    ``Prediction.to_dict(prices)``, the JSON of ``predict``. ``between_chunks`` runs before each ``chunk`` rows
    (the service stops a timed-out request there)."""
    results = predict_in_chunks(predictor, rows, between_chunks, chunk)
    for k, r in zip(where, results):
        if isinstance(r, WattGPUError):
            out[k] = {"row": k, **error_body(r)}
        else:
            out[k] = {"row": k, "prediction": r.to_dict(prices)}
    failed = sum(1 for o in out if o is not None and "error" in o)
    return {"results": out, "predicted": len(out) - failed, "failed": failed}


def llms_answer(predictor: Any) -> list[dict[str, Any]]:
    """``wattgpu llms --json``: every catalog LLM's spec, then the unsupported ones with the reason."""
    cat = predictor.catalog
    out: list[dict[str, Any]] = [m.to_dict() for m in cat.llms]
    out += [{"name": n, "unsupported_reason": why} for n, why in cat.unsupported_llms]
    return out

"""The whole-catalog rank decided on the evaluated numbers (``wattgpu.ranking._table_order``), with and without an
SLA's batch-cap search: the same answer as the entry-by-entry path, entries built as they are read, and a question asked again computing no feature.

No predicted number is hard-coded: every assertion compares the two paths or checks a relation."""
import itertools
import json
import pickle

import pytest

import wattgpu
from wattgpu import Workload, checks, ranking
from wattgpu.predictor import default_predictor
from wattgpu.results import memo_for

LLM = "meta-llama/Llama-3.1-8B-Instruct"


def _answer(llm, wl, **kw):
    try:
        return json.dumps(wattgpu.rank(llm, wl, **kw).to_dict(), sort_keys=True, default=str)
    except wattgpu.WattGPUError as exc:
        return f"error: {exc}"


def _entry_by_entry(monkeypatch, llm, wl, **kw):
    with monkeypatch.context() as m:
        m.setattr(ranking, "_TABLE_SORTS", ())  # every rank takes the entry-by-entry path
        return _answer(llm, wl, **kw)


WORKLOADS = [Workload(), Workload(kind="closed_loop", concurrency=8, input_tokens=2048, output_tokens=128),
             Workload(max_batch=16, tp=2), Workload(kind="server", qps=1.0),  # a server: the headroom order
             Workload(kind="server", qps=10.0, input_tokens=1024)]  # some GPUs overloaded, some above the headroom


@pytest.mark.parametrize("llm", ["meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-70B-Instruct", "deepseek-ai/DeepSeek-V3.1",
                                 "mistralai/Mixtral-8x7B-Instruct-v0.1", "google/gemma-2-9b-it"])
def test_table_path_answers_as_the_entry_path(monkeypatch, llm):
    pred = default_predictor()
    if not any(m.name == llm for m in pred.catalog.llms):
        pytest.skip(f"{llm} not in the catalog")
    for wl, sort, tp in itertools.product(WORKLOADS, ("energy", "power", "itl"), (None, "auto")):
        for extra in ({}, {"max_model_len": 4096, "dtype": "fp8", "usd_per_kwh": 0.12}, {"max_utilization": 0.5},
                      {"max_itl_ms": 30.0}, {"max_itl_ms": 80.0, "max_ttft_ms": 400.0}, {"max_ttft_ms": 150.0}):
            if "max_utilization" in extra and wl.kind != "server":
                continue
            table = _answer(llm, wl, sort=sort, tp=tp, **extra)
            assert table == _entry_by_entry(monkeypatch, llm, wl, sort=sort, tp=tp, **extra), (wl, sort, tp, extra)


def test_the_server_workload_compared_has_both_exclusions_and_the_headroom_order():
    res = wattgpu.rank(LLM, WORKLOADS[-1])
    assert isinstance(res.candidates, ranking.Entries)
    assert any(e.reason_kind == "overloaded" and e.entry is not None for e in res.excluded)
    late = [any("headroom" in w for w in c.warnings) for c in res.candidates]
    assert any(late) and late == sorted(late), "the candidates above the headroom come last"


def test_an_sla_rank_has_every_kind_of_exclusion_the_entry_path_has():
    res = wattgpu.rank(LLM, WORKLOADS[-1], max_itl_ms=30.0)
    assert isinstance(res.candidates, ranking.Entries) and len(res.candidates) > 0
    kinds = {e.reason_kind for e in res.excluded}
    assert {"misses_sla", "does_not_fit"} <= kinds or {"misses_sla", "overloaded"} <= kinds, kinds
    assert all(c.itl_s * 1e3 <= 30.0 for c in res.candidates)


def test_table_path_answers_a_gpu_list_and_a_repeat_alike(monkeypatch):
    gpus = ["H100-SXM5-80GB", "A100-SXM4-40GB", "L4", "T4"]
    pred = default_predictor()
    gpus = [g for g in gpus if g in {s.name for s in pred.catalog.gpus}] or [pred.catalog.gpus[0].name]
    first = _answer(LLM, Workload(), gpus=gpus)
    assert first == _answer(LLM, Workload(), gpus=gpus) == _entry_by_entry(monkeypatch, LLM, Workload(), gpus=gpus)


def test_entries_read_like_a_tuple():
    res = wattgpu.rank(LLM)
    c = res.candidates
    assert isinstance(c, ranking.Entries)
    whole = tuple(c)
    assert len(whole) == len(c) > 2
    assert c[0] is whole[0] is res.best and c[-1] is whole[-1]
    assert c[1:3] == whole[1:3] and isinstance(c[1:3], tuple)
    assert c == whole and whole == c and c != whole[:-1]
    with pytest.raises(IndexError):
        c[len(c)]
    again = pickle.loads(pickle.dumps(c))
    assert [e.to_dict() for e in again] == [e.to_dict() for e in whole]
    e = [x.j_per_token for x in c]
    assert e == sorted(e)


def test_entries_are_built_when_read(monkeypatch):
    built = []
    real = ranking._entry

    def counting(*a, **kw):
        built.append(1)
        return real(*a, **kw)

    monkeypatch.setattr(ranking, "_entry", counting)
    res = wattgpu.rank(LLM)
    assert not built
    res.best
    assert len(built) == 1
    res.to_dict()
    assert len(built) == len(res.candidates)


@pytest.fixture
def feature_calls(monkeypatch):
    """The row counts of every feature computation (``checks.row_errors``) from an empty memo on."""
    memo_for(default_predictor().bundle).clear()
    calls = []
    real = checks.row_errors
    monkeypatch.setattr(checks, "row_errors", lambda rows: calls.append(len(rows)) or real(rows))
    return calls


def test_a_question_asked_again_computes_no_feature(feature_calls):
    pred, calls = default_predictor(), feature_calls
    first = wattgpu.rank(LLM, Workload(max_batch=32)).to_dict()
    assert calls == [len(pred.catalog.gpus)]
    assert wattgpu.rank(LLM, Workload(max_batch=32)).to_dict() == first  # an equal workload: the same question
    assert len(calls) == 1
    wattgpu.rank(LLM, Workload(max_batch=64))
    assert len(calls) == 2
    memo_for(pred.bundle).clear()
    assert wattgpu.rank(LLM, Workload(max_batch=32)).to_dict() == first
    assert len(calls) == 3


def test_kept_columns_are_read_only():
    pred = default_predictor()
    spec = pred.resolve_llm(LLM)
    asked = ranking._asked(pred, list(pred.catalog.gpus), spec, Workload(), 1, None)
    assert asked is ranking._asked(pred, list(pred.catalog.gpus), spec, Workload(), 1, None)
    col = next(iter(asked.checked.all_cols.values()))
    with pytest.raises(ValueError):
        col[0] = 0.0


def test_a_gpu_spec_of_the_same_name_is_another_question():
    pred = default_predictor()
    spec = pred.resolve_llm(LLM)
    gpus = list(pred.catalog.gpus)
    twin = [wattgpu.specs.GpuSpec(**{**g.__dict__}) if i == 0 else g for i, g in enumerate(gpus)]
    assert ranking._asked(pred, gpus, spec, Workload(), 1, None) is not ranking._asked(pred, twin, spec, Workload(), 1, None)


def test_threads_reading_one_result_see_the_same_entries():
    from concurrent.futures import ThreadPoolExecutor

    res = wattgpu.rank(LLM, Workload(kind="server", qps=10.0, input_tokens=1024), max_itl_ms=80.0)
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda _: json.dumps(res.to_dict(), sort_keys=True), range(8)))
    assert len(set(answers)) == 1
    assert answers[0] == json.dumps(res.to_dict(), sort_keys=True)


def test_threads_ranking_at_once_answer_as_one():
    from concurrent.futures import ThreadPoolExecutor

    memo_for(default_predictor().bundle).clear()  # every thread may fill the question memo
    asks = [(Workload(), None), (Workload(kind="server", qps=2.0), 60.0)] * 4
    alone = [_answer(LLM, wl, max_itl_ms=sla) for wl, sla in asks[:2]]
    memo_for(default_predictor().bundle).clear()
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(lambda a: _answer(LLM, a[0], max_itl_ms=a[1]), asks))
    assert together == alone * 4


def test_an_sla_question_asked_again_computes_no_feature(feature_calls):
    calls = feature_calls
    wl = Workload(kind="server", qps=2.0)
    first = wattgpu.rank(LLM, wl, max_itl_ms=60.0).to_dict()
    assert calls, "the first ask computes the rows' features"
    n = len(calls)
    assert wattgpu.rank(LLM, Workload(kind="server", qps=2.0), max_itl_ms=60.0).to_dict() == first
    assert len(calls) == n, "the choices, the chosen rows' checks and their plans are kept"
    wattgpu.rank(LLM, wl, max_itl_ms=30.0).to_dict()  # another SLA: other choices, their checks computed once
    m = len(calls)
    wattgpu.rank(LLM, wl, max_itl_ms=30.0).to_dict()
    assert len(calls) == m

"""One argument order everywhere: (gpu, llm, workload); the 0.1 order still works, with a warning."""
from __future__ import annotations

import warnings

import pytest

import wattgpu
from wattgpu.predictor import Predictor
from wattgpu.workload import Workload

LLM, GPU = "meta-llama/Llama-3.1-8B-Instruct", "NVIDIA A30"


def test_new_order_is_silent_and_legacy_order_warns_with_equal_numbers():
    pred = Predictor()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        new = pred.predict(GPU, LLM, Workload())
        new_api = wattgpu.predict(GPU, LLM)
        rows = pred.predict_many([(GPU, LLM, None)])
    with pytest.warns(DeprecationWarning, match=r"\(gpu, llm, workload\)"):
        old = pred.predict(LLM, GPU, Workload())
    with pytest.warns(DeprecationWarning):
        old_rows = pred.predict_many([(LLM, GPU, None)])
    with pytest.warns(DeprecationWarning):
        old_api = wattgpu.predict(LLM, GPU)
    assert new == old == new_api == old_api == rows[0] == old_rows[0]
    cat = pred.catalog
    with pytest.warns(DeprecationWarning):  # spec objects are unambiguous
        assert pred.predict(cat.llm(LLM), cat.gpu(GPU)) == new


def test_a_bad_name_in_either_order_names_the_right_entity():
    with pytest.raises(wattgpu.UnknownEntityError, match="Unknown LLM"):
        wattgpu.predict(GPU, "no/such-llm")
    with pytest.raises(wattgpu.UnknownEntityError, match="Unknown LLM"), pytest.warns(DeprecationWarning):
        wattgpu.predict("no/such-llm", GPU)
    with pytest.raises(wattgpu.UnknownEntityError, match="Unknown GPU"):
        wattgpu.predict("no such gpu", LLM)

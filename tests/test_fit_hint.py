"""A model that does not fit names the smallest group of the same GPU that holds it, and that group works.

Swept over every catalog GPU × LLMs of 8B to 671B parameters: every suggestion is checked by predicting
with it (and the next smaller power of two must not fit), and "no group holds it" is checked by trying
the GPU's largest group. The rank CLI falls back to --tp auto only when --tp was not given and nothing
fits on one GPU.
"""
from __future__ import annotations

import re

import pytest

from wattgpu import ModelFitError, Predictor, Workload
from wattgpu.errors import WattGPUError

from .helpers import run_cli

LLMS = ("meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen3-30B-A3B-Instruct-2507", "meta-llama/Llama-3.1-70B-Instruct",
        "deepseek-ai/DeepSeek-R1-0528")


@pytest.fixture(scope="module")
def pred() -> Predictor:
    return Predictor()


def _fits(pred: Predictor, g, m, tp: int) -> bool:
    try:
        pred.predict(g, m, Workload(tp=tp))
        return True
    except WattGPUError:
        return False


def test_every_suggested_group_fits_and_is_the_smallest(pred: Predictor) -> None:
    suggested = none = 0
    for name in LLMS:
        m = pred.catalog.llm(name)
        for g in pred.catalog.gpus:
            try:
                pred.predict(g, m, Workload())
                continue
            except ModelFitError as exc:
                msg = str(exc)
            hint = re.search(r"split it over (\d+) of these GPUs \(tp=(\d+)\)", msg)
            if hint:
                tp = int(hint.group(1))
                assert int(hint.group(2)) == tp
                assert _fits(pred, g, m, tp), msg
                assert tp == 2 or not _fits(pred, g, m, tp // 2), msg
                suggested += 1
            else:
                none += 1
                if (g.max_group or 1) > 1:
                    assert f"no group of up to {g.max_group} of these GPUs holds it" in msg
                    assert not _fits(pred, g, m, g.max_group), msg
                else:
                    assert msg.endswith("use a larger GPU"), msg
    assert suggested > 20 and none > 20  # both kinds of answer are exercised


def test_rank_falls_back_to_groups_only_when_nothing_fits_alone() -> None:
    big = run_cli("rank", "--llm", "deepseek-ai/DeepSeek-R1-0528", "--json")
    assert big.returncode == 0, big.stderr
    assert "does not fit on any of these GPUs alone" in big.stderr and '"tp": "auto"' in big.stdout
    single = run_cli("rank", "--llm", "deepseek-ai/DeepSeek-R1-0528", "--tp", "1", "--json")
    # no GPU qualifies: the JSON is printed, then exit 4 (issue 32)
    assert single.returncode == 4 and '"candidates": []' in single.stdout and "alone" not in single.stderr
    small = run_cli("rank", "--llm", "meta-llama/Llama-3.1-8B-Instruct", "--json")
    assert small.returncode == 0 and "alone" not in small.stderr and '"tp": 1' in small.stdout

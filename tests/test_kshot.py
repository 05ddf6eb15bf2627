"""The k-shot calibration scoreboard (wattgpu_train.kshot): the fixed choice of runs, and the CLI."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from wattgpu_train.cli import main
from wattgpu_train.kshot import calibration_rows, markdown

REPO = Path(__file__).resolve().parents[1]


def test_runs_are_the_first_k_of_the_groups_most_measured_llm():
    rec = pd.DataFrame({"llm": ["b", "a", "a", "b", "a", "c"],
                        "row_id": ["s:5", "s:9", "s:2", "s:1", "s:3", "s:0"]})
    idx = np.arange(len(rec))
    assert calibration_rows(rec, idx, 2).tolist() == [2, 4]  # "a" (3 rows) beats "b" (2); s:2, s:3
    assert calibration_rows(rec, idx, 10).tolist() == [2, 4, 1]  # all of them when fewer than k
    tie = pd.DataFrame({"llm": ["y", "x"], "row_id": ["s:0", "s:1"]})
    assert calibration_rows(tie, np.arange(2), 1).tolist() == [1]  # ties by name


def test_cli_kshot_only_writes_the_scoreboard(tmp_path):
    res = CliRunner().invoke(main, ["evaluate", "--kshot-only", "--quick", "--out", str(tmp_path),
                                    "--data-dir", str(REPO / "data"), "--specs", str(REPO / "specs.json")])
    assert res.exit_code == 0, res.output
    r = json.loads((tmp_path / "calibration.json").read_text())
    assert not (tmp_path / "accuracy.json").exists()
    for target in ("power", "itl"):
        for split in ("logo", "loso"):
            groups = r[target][split]["groups"]
            assert groups
            for g in groups.values():
                for k in ("1", "3", "10"):
                    v = g[k]
                    assert v["k_used"] == min(int(k), v["k_used"]) and v["k_used"] + v["all"]["rest"] == g["rows"]
                    assert v["same_source"]["rest"] <= v["all"]["rest"]
            assert set(r[target][split]["summary"]["all"]) == {"1", "3", "10"}
    md = (tmp_path / "calibration.md").read_text()
    assert md == markdown(r) and "| LOGO | power | all | 3 |" in md


def _entry(before: float, after: float) -> dict:
    cell = {"rest": 5, "mdape_before": before, "mdape_after": after}
    return {"1": {"all": cell, "same_source": cell, "other_llms": cell}}


def test_a_held_out_groups_gpu_share_is_chosen_on_the_other_groups_only():
    """SYNTHETIC scores: groups a and b are made worse at share 0.9 and helped at 0.1; group c the reverse.
    c is scored at 0.1 (what a and b say), whatever its own scores would pick; a (and b) see one group helped
    and one made worse either way, and the tie goes to the mean log ratio, which c's large swing decides: 0.9,
    although a's own scores prefer 0.1."""
    from wattgpu_train.kshot import nested, selection_score

    per_share = {0.1: {"power": {"a": _entry(10, 8), "b": _entry(10, 9), "c": _entry(10, 20)}},
                 0.9: {"power": {"a": _entry(10, 12), "b": _entry(10, 11), "c": _entry(10, 5)}}}
    chosen, used = nested(per_share, (1,))
    assert used["power"] == {"a": 0.9, "b": 0.9, "c": 0.1}
    assert chosen["power"]["c"]["1"]["other_llms"]["mdape_after"] == 20  # its own bad score, reported as it is
    assert selection_score([per_share[0.9]], (1,))[0] == 2


def test_the_scoreboard_scores_other_llms_and_the_runs_gap(tmp_path):
    res = CliRunner().invoke(main, ["evaluate", "--kshot-only", "--quick", "--out", str(tmp_path),
                                    "--data-dir", str(REPO / "data"), "--specs", str(REPO / "specs.json")])
    assert res.exit_code == 0, res.output
    assert "target k=3 ≤ 10 %" in res.output and "oracle level" in res.output
    assert "level + slope" in res.output and "(GPU, LLM)" in res.output  # the ceilings beside it
    r = json.loads((tmp_path / "calibration.json").read_text())
    ceil = r["power"]["logo"]["summary"]["other_llms"]["3"]
    # a (GPU, LLM) factor refines the coarser ones, so its summed |log error| is never larger; MdAPE is not bound
    # to that order, but on these data the margin is wide (3.8 % vs 10.5 % and 12.1 % with the full recipe)
    assert ceil["mdape_oracle_llm"] <= min(ceil["mdape_oracle_level"], ceil["mdape_oracle_source"])
    for target in ("power", "itl", "ttft"):
        for g in r[target]["logo"]["groups"].values():
            v = g["3"]
            assert v["other_llms"]["rest"] <= v["all"]["rest"] and len(v["gap_closed"]) == v["k_used"]
        assert set(r["share_used"]["logo"][target]) == set(r[target]["logo"]["groups"])


def test_the_ceilings_fit_their_own_form_and_no_other():
    """SYNTHETIC rows: truth = prediction × 1.3 × batch^0.2 on one source, × 0.8 on another."""
    from wattgpu_train.kshot import oracle_fits

    rng = np.random.default_rng(0)
    lnb = np.log(rng.choice([1, 4, 16, 64, 256], size=40).astype(float))
    p = rng.uniform(100.0, 500.0, size=40)
    src = np.where(np.arange(40) < 20, "g|a", "g|b")
    y = np.where(src == "g|a", p * 1.3 * np.exp(0.2 * lnb), p * 0.8)
    o = oracle_fits(y, p, lnb, {"source": src, "llm": np.full(40, "g|m")})
    err = {k: float(np.median(np.abs(v / y - 1))) for k, v in o.items()}
    assert err["oracle_slope"] < err["oracle"]  # a slope helps when the gap changes with batch
    only_a = src == "g|a"
    a = oracle_fits(y[only_a], p[only_a], lnb[only_a], {"source": src[only_a], "llm": src[only_a]})
    assert np.allclose(a["oracle_slope"], y[only_a], rtol=1e-3)  # its own form is met (almost) exactly
    assert not np.allclose(a["oracle"], y[only_a], rtol=1e-2)
    b = oracle_fits(y[~only_a], p[~only_a], lnb[~only_a], {"source": src[~only_a], "llm": src[~only_a]})
    assert np.allclose(b["oracle_source"], y[~only_a], rtol=1e-9) and np.allclose(b["oracle_llm"], y[~only_a], rtol=1e-9)


def test_design_9_gate_shrinks_a_level_the_runs_or_neighbours_contradict():
    """SYNTHETIC calibration: the GPU's ITL level is kept where runs and neighbours agree with it, else shrunk,
    what it loses moving to the measured LLM's own share (its own prediction unchanged)."""
    from wattgpu.calibration import Calibration, TargetFit

    from wattgpu_train.kshot import gate_level

    def cal(level: float) -> Calibration:
        fit = TargetFit(3, {"g": {"overhead": level}}, {}, 0.1, {}, {}, {"g": {"m": {"overhead": 0.1}}})
        return Calibration(runs=3, gpus={}, targets={"itl": fit})

    agree = cal(0.3)
    assert not gate_level(agree, "itl", "g", "m", np.array([0.2, 0.4, 0.3]), 1.0, 0.0)
    assert agree.targets["itl"].gpu["g"]["overhead"] == 0.3
    for gaps, nb in ((np.array([0.2, -0.1, 0.3]), 1.0), (np.array([0.2, 0.4, 0.3]), -1.0)):
        c = cal(0.3)
        assert gate_level(c, "itl", "g", "m", gaps, nb, 0.5)
        f = c.targets["itl"]
        assert f.gpu["g"]["overhead"] == pytest.approx(0.15) and f.params("g", "m", False)["overhead"] == pytest.approx(0.4)
    assert not gate_level(cal(0.3), "itl", "g", "m", np.array([-0.2]), -1.0, 1.0)  # c = 1: the design off

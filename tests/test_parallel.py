"""Tensor-parallel groups: hand-computed per-GPU memory and all-reduce figures, group checks, CLI end to end."""
from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from wattgpu import SpecValidationError, Workload, features as F, parallel
from wattgpu.cli import main
from wattgpu.errors import ModelFitError
from wattgpu.predictor import default_predictor
from wattgpu.specs import default_catalog

LLAMA70 = "meta-llama/Llama-3.1-70B-Instruct"  # 80 layers, hidden 8192, 64 heads, 8 KV heads, head_dim 128, 70.554 B
H100 = "NVIDIA H100 SXM5 80GB"
A100_40 = "NVIDIA A100 SXM4 40GB"


def _cols(gpu: str, llm: str, **wl: object) -> F.Columns:
    cat = default_catalog()
    return F.columns([(cat.gpu(gpu), cat.llm(llm), Workload(**wl))])  # type: ignore[arg-type]


def test_per_gpu_memory_by_hand():
    c = _cols(H100, LLAMA70, tp=4)
    # weights: 70.553706e9 params (counted from its config.json) × 2 bytes / 4 GPUs
    assert c["weights_bytes"][0] == pytest.approx(70.553706e9 * 2 / 4)
    # KV per token per GPU: K and V × 80 layers × (8 KV heads / 4) × 128 × 2 bytes = 81 920 B
    assert c["kv_per_token"][0] == pytest.approx(2 * 80 * 2 * 128 * 2)
    # more GPUs than KV heads: each GPU keeps one (replicated) KV head of 8, not 8/16
    c16 = F.columns([(default_catalog().gpu("GB200"), default_catalog().llm(LLAMA70), Workload(tp=16))])
    assert c16["kv_per_token"][0] == pytest.approx(2 * 80 * 1 * 128 * 2)
    # KV budget per GPU: 80 GB × 0.9 − weights − 5 % reserve (a GPU's memory "GB" is binary: 2**30 bytes)
    assert c["kv_budget"][0] == pytest.approx(80 * 2**30 * 0.9 - 70.553706e9 * 2 / 4 - 0.05 * 80 * 2**30)


def test_allreduce_bytes_and_time_by_hand():
    # batch 32, hidden 8192, bf16: 32 × 8192 × 2 = 524 288 bytes per all-reduce
    nbytes = parallel.allreduce_bytes(np.array([32.0]), np.array([8192.0]))
    assert nbytes[0] == 524_288
    # ring over 4 H100 SXM on NVLink (900 GB/s bidirectional → 450 each way): 2·3/4 · bytes / 450e9 + 10 µs
    bw, lat, nv = parallel.link(np.array([4.0]), np.array([900.0]), np.array([8.0]), np.array([5.0]), np.array([16.0]))
    assert (bw[0], lat[0], nv[0]) == (450.0, 10e-6, 1.0)
    t = parallel.ring_allreduce_s(nbytes, np.array([4.0]), bw, lat)[0]
    assert t == pytest.approx(1.5 * 524_288 / 450e9 + 10e-6)
    # a decode step: two all-reduces per layer, 80 layers
    step = parallel.comm_step_s(np.array([80.0]), np.array([32.0]), np.array([8192.0]), np.array([4.0]), bw, lat)[0]
    assert step == pytest.approx(2 * 80 * t)
    # beyond the NVLink domain (H100 NVL pairs) the ring runs over PCIe Gen5 x16: 16 × 3.938 GB/s, 40 µs
    bw, lat, nv = parallel.link(np.array([4.0]), np.array([600.0]), np.array([2.0]), np.array([5.0]), np.array([16.0]))
    assert (bw[0], lat[0], nv[0]) == (pytest.approx(63.008), 40e-6, 0.0)
    # one GPU: no all-reduce at all
    assert parallel.ring_allreduce_s(nbytes, np.array([1.0]), bw, lat)[0] == 0.0


def test_feature_columns_carry_the_all_reduces():
    c1, c4 = _cols(H100, "meta-llama/Llama-3.1-8B-Instruct", concurrency=32), \
        _cols(H100, "meta-llama/Llama-3.1-8B-Instruct", concurrency=32, tp=4)
    assert c1["comm_s"][0] == 0.0
    hand = 2 * 32 * (1.5 * 32 * 4096 * 2 / 450e9 + 10e-6)  # 2 all-reduces × 32 layers; hidden 4096, batch 32
    assert c4["comm_s"][0] == pytest.approx(hand)
    assert c4["roofline_itl_s"][0] > c4["comm_s"][0]
    assert c4["weights_bytes"][0] == pytest.approx(c1["weights_bytes"][0] / 4)


def test_more_gpus_never_more_memory_per_gpu_and_comm_grows_with_batch():
    cat = default_catalog()
    g, m = cat.gpu(H100), cat.llm(LLAMA70)
    cols = F.columns([(g, m, Workload(tp=n, concurrency=8)) for n in (2, 4, 8)])
    assert np.all(np.diff(cols["weights_bytes"]) < 0) and np.all(np.diff(cols["kv_per_token"]) < 0)
    comm = F.columns([(g, m, Workload(tp=4, concurrency=b)) for b in (1, 8, 64, 256)])["comm_s"]
    assert np.all(np.diff(comm) > 0)


def test_bad_tp_values_name_the_field():
    for bad in (0, -2, 2.5, True, "2"):
        with pytest.raises(SpecValidationError, match="field 'tp'"):
            Workload(tp=bad)  # type: ignore[arg-type]
    pred = default_predictor()
    with pytest.raises(SpecValidationError, match="field 'tp' = 3 .*64 attention heads"):
        pred.predict(H100, LLAMA70, Workload(tp=3))
    with pytest.raises(SpecValidationError, match="field 'tp' = 16 .*at most 8"):
        pred.predict("NVIDIA H100 NVL 94GB", LLAMA70, Workload(tp=16))
    with pytest.raises(SpecValidationError, match="field 'tp' = 2"):
        pred.predict("NVIDIA GH200 Grace Hopper Superchip (96GB HBM3)", "meta-llama/Llama-3.1-8B-Instruct", Workload(tp=2))


def test_groups_that_exist():
    cat = default_catalog()
    m = cat.llm(LLAMA70)
    assert parallel.candidate_groups(cat.gpu(H100), m) == [1, 2, 4, 8]
    assert parallel.candidate_groups(cat.gpu("NVIDIA Jetson AGX Orin 64GB"), m) == [1]
    assert parallel.candidate_groups(cat.gpu("NVIDIA GH200 Grace Hopper Superchip (144GB HBM3e)"), m) == [1]
    for g in cat.gpus:  # every catalog GPU carries its interconnect facts with a source
        assert g.max_group is not None and g.interconnect_source, g.name


def test_does_not_fit_is_per_gpu():
    with pytest.raises(ModelFitError, match=r"2 × NVIDIA A100 SXM4 40GB: needs .* GiB per GPU"):
        default_predictor().predict(A100_40, LLAMA70, Workload(tp=2))


def test_group_power_and_energy():
    p = default_predictor().predict(H100, LLAMA70, Workload(tp=4))
    assert p.tp == 4 and p.total_power_w == pytest.approx(4 * p.power_w)
    assert p.energy_per_token_j == pytest.approx(p.total_power_w * p.system_s_per_token)
    assert p.baselines["tdp_total_w"] == 4 * 700.0
    assert any("outside the measured TP range" in w or "NVLink" in w for w in p.warnings)


def test_moe_on_several_gpus_is_flagged():
    p = default_predictor().predict(H100, "mistralai/Mixtral-8x7B-Instruct-v0.1", Workload(tp=2))
    assert any(w.startswith("MoE on 2 GPUs: experts sharded with the TP group") for w in p.warnings)


@pytest.mark.parametrize("gpu,n", [(H100, 2), (A100_40, 4)])
def test_cli_predict_llama70b_groups(gpu: str, n: int):
    # The catalog counts memory in decimal GB (80e9 bytes for an "80GB" card that holds ~85.5e9), so a
    # 70B model on exactly 2×80 / 4×40 GB needs the engine share raised from 0.9 to 0.95 to fit.
    args = ["predict", "--llm", LLAMA70, "--gpu", gpu, "--tp", str(n), "--gpu-memory-utilization", "0.95"]
    res = CliRunner().invoke(main, args + ["--json"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    assert d["tp"] == n and d["total_power_w"] == pytest.approx(n * d["power_w"])
    assert 0 < d["power_w"] <= default_catalog().gpu(gpu).tdp_w
    assert d["allreduce_s_per_step"] > 0 and d["itl_s"] > d["allreduce_s_per_step"]
    assert d["energy"]["j_per_token"] == pytest.approx(d["total_power_w"] * d["system_s_per_token"])
    table = CliRunner().invoke(main, args)
    assert table.exit_code == 0 and f"for {n} GPUs" in table.stdout and "tensor parallel" in table.stdout


@pytest.mark.parametrize("value,needle", [("0", "tp"), ("3", "attention heads"), ("x", "tp"), ("16", "at most 8")])
def test_cli_bad_tp_is_one_line(value: str, needle: str):
    res = CliRunner().invoke(main, ["predict", "--llm", LLAMA70, "--gpu", H100, "--tp", value])
    assert res.exit_code == 2
    assert res.stderr.count("\n") == 1 and "tp" in res.stderr and needle in res.stderr


def test_cli_rank_tp_auto():
    res = CliRunner().invoke(main, ["rank", "--llm", LLAMA70, "--tp", "auto", "--max-itl-ms", "50", "--json"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    assert d["tp"] == "auto" and d["candidates"]
    cat = default_catalog()
    for c in d["candidates"]:
        assert c["tp"] in parallel.TP_CHOICES and c["tp"] <= cat.gpu(c["gpu"]).max_group
        assert c["total_power_w"] == pytest.approx(c["tp"] * c["power_w"]) and c["itl_s"] * 1e3 <= 50
    assert any(c["tp"] > 1 for c in d["candidates"])
    energies = [c["energy"]["j_per_token"] for c in d["candidates"]]
    assert energies == sorted(energies)
    assert not any(c["gpu"] == H100 and c["tp"] == 1 for c in d["candidates"])  # 141 GB of weights: no single H100
    jetson = [x for x in d["excluded"] if x["gpu"] == "NVIDIA Jetson AGX Orin 64GB"]
    assert jetson and jetson[0]["reason_kind"] == "does_not_fit"
    table = CliRunner().invoke(main, ["rank", "--llm", LLAMA70, "--tp", "auto", "--max-itl-ms", "50"])
    assert table.exit_code == 0 and "total W" in table.stdout and "W/GPU" in table.stdout


def test_rank_tp_auto_with_replicas_counts_every_gpu():
    from wattgpu import rank

    res = rank(LLAMA70, Workload(kind="server", qps=20), gpus=[H100, "NVIDIA H200 SXM 141GB"], max_itl_ms=50,
               replicas="auto", tp="auto")
    assert res.tp == "auto" and res.candidates
    for c in res.candidates:
        assert c.tp in (2, 4, 8) if c.gpu == H100 else c.tp in parallel.TP_CHOICES
        assert c.fleet_power_w == pytest.approx(c.replicas * c.tp * c.power_w)
    fleet = [c.fleet_power_w for c in res.candidates]
    assert fleet == sorted(fleet)


def test_rank_tp_auto_capacity_is_each_groups_own():
    """Each (GPU, N) candidate carries the capacity of its own group, as a direct prediction gives it
    (a capacity memo keyed without the TP degree once gave every group the single GPU's figure)."""
    import wattgpu

    pred = default_predictor()
    res = wattgpu.rank("meta-llama/Llama-3.1-70B-Instruct", Workload(), tp="auto", predictor=pred,
                       gpus=["NVIDIA B100", "NVIDIA H100 SXM5 80GB"])
    assert len({c.tp for c in res.candidates}) > 1
    for c in res.candidates:
        p = pred.predict(c.gpu, "meta-llama/Llama-3.1-70B-Instruct", Workload(tp=c.tp))
        assert c.max_qps == pytest.approx(p.max_qps, rel=1e-12), (c.gpu, c.tp)


def test_group_beyond_the_nvlink_bridge_says_so_and_is_link_bound() -> None:
    """Issue 32: H200 NVL comes in 4-GPU NVLink bridges; 8 of them ring over PCIe Gen5 x16. The all-reduce
    of a decode step at batch 256 is then 2 × 80 layers × (2·7/8 × 256 × 8192 × 2 B / 63 GB/s + 40 µs) ≈ 25 ms,
    against ≈ 3.8 ms over the bridge's NVLink (450 GB/s per direction, 10 µs per call)."""
    from wattgpu.predictor import default_predictor

    pred = default_predictor()
    p8 = pred.predict("NVIDIA H200 NVL 141GB", "meta-llama/Llama-3.1-70B-Instruct", {"tp": 8})
    p4 = pred.predict("NVIDIA H200 NVL 141GB", "meta-llama/Llama-3.1-70B-Instruct", {"tp": 4})
    assert p8.allreduce_s_per_step == pytest.approx(2 * 80 * (2 * 7 / 8 * 256 * 8192 * 2 / (16 * 3.938e9) + 40e-6), rel=1e-6)
    assert p4.allreduce_s_per_step == pytest.approx(2 * 80 * (2 * 3 / 4 * 256 * 8192 * 2 / 450e9 + 10e-6), rel=1e-6)
    assert p8.bound["kind"] == "interconnect" and p4.bound["kind"] != "interconnect"
    assert any("exceed NVIDIA H200 NVL 141GB's 4-GPU NVLink domain" in w for w in p8.warnings)
    assert not any("NVLink domain" in w for w in p4.warnings)

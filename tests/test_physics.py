"""Memory fit, server load and energy formulas against hand-computed numbers."""
import math

import numpy as np
import pytest

from wattgpu import energy, memory, physics
from wattgpu import features as F
from wattgpu.specs import GpuSpec, default_catalog
from wattgpu.workload import Workload

# Llama-3.1-8B config: 32 layers, 8 KV heads (GQA), head_dim 128, 8.03 B parameters in bf16.
LAYERS, KV_HEADS, HEAD_DIM, PARAMS_B = 32, 8, 128, 8.03


def test_kv_bytes_per_token_llama_8b():
    # K and V (2) × 32 layers × 8 KV heads × 128 dims × 2 bytes = 131 072 bytes = 128 KiB per token
    assert memory.kv_bytes_per_token(np.array([LAYERS]), KV_HEADS, HEAD_DIM)[0] == 131072


def test_weight_bytes_llama_8b():
    # 8.03e9 parameters × 2 bytes = 16.06e9 bytes
    assert physics.weight_bytes(np.array([PARAMS_B]), 2.0)[0] == pytest.approx(16.06e9)


def test_llama_8b_on_24gb_gpu_at_util_0_9_with_2048_context():
    weights = physics.weight_bytes(np.array([PARAMS_B]), 2.0)
    # 24 GB of GPU memory is 24 × 2**30 = 25 769 803 776 bytes (NVIDIA's memory GB is binary)
    # usable × 0.9 = 23 192 823 398.4; activation reserve 0.05 × 24 GiB = 1 288 490 188.8
    # KV budget = 23 192 823 398.4 − 16.06e9 − 1 288 490 188.8 = 5 844 333 209.6 bytes
    budget = physics.kv_budget_bytes(np.array([24.0]), 0.9, weights)
    assert budget[0] == pytest.approx(5_844_333_209.6)
    # one 2048-token sequence: 131 072 × 2048 = 268 435 456 bytes; 5.844e9 / 268 435 456 = 21.77 → 21
    fit = physics.max_batch_that_fits(budget, 131072.0, np.array([2048.0]))
    assert fit[0] == 21
    # offline, batch cap 256, unlimited requests → memory limit 21; a cap of 8 wins over memory
    assert physics.effective_batch(256, np.nan, np.inf, fit)[0] == 21
    assert physics.effective_batch(8, np.nan, np.inf, fit)[0] == 8
    # fixed concurrency 4 is kept; 40 is capped by memory
    assert physics.effective_batch(256, np.array([4.0]), np.inf, fit)[0] == 4
    assert physics.effective_batch(256, np.array([40.0]), np.inf, fit)[0] == 21
    # fewer requests than the cap: 5 requests → batch 5
    assert physics.effective_batch(256, np.nan, np.array([5.0]), fit)[0] == 5


def test_same_case_through_feature_columns():
    llm = default_catalog().llm("meta-llama/Llama-3.1-8B-Instruct")
    gpu = GpuSpec(name="test 24GB", tdp_w=300, memory_size_gb=24, memory_bandwidth_gb_s=1000, fp16_tflops=100,
                  transistors_million=None, release_year=2022)
    cols = F.columns([(gpu, llm, Workload(input_tokens=1536, output_tokens=512))])
    assert cols["context_tokens"][0] == 2048
    assert cols["kv_per_token"][0] == 131072
    assert cols["fit_batch"][0] == 21
    assert cols["eff_batch"][0] == 21


def test_weights_do_not_fit_gives_zero_batch():
    # 16.06e9 weights on a 16 GB (16 × 2**30 bytes) GPU: 15.46e9 usable − 0.86e9 reserve < weights → budget < 0 → 0
    budget = physics.kv_budget_bytes(np.array([16.0]), 0.9, physics.weight_bytes(np.array([PARAMS_B]), 2.0))
    assert budget[0] < 0
    assert physics.max_batch_that_fits(budget, 131072.0, np.array([768.0]))[0] == 0
    # what the message reports: 16.06e9 + 0.05 × 16 × 2**30 (= 858 993 459.2) + 131 072 × 768 (= 100 663 296)
    # = 17 019 656 755.2 bytes = 15.85 × 2**30 → "15.9 GB", in the unit of the GPU's own "16 GB"
    need = physics.memory_needed_bytes(16.06e9, 16.0, physics.kv_bytes_per_sequence(131072.0, 768.0))
    assert float(need) == pytest.approx(17_019_656_755.2)


def test_sliding_window_caps_kv_per_sequence():
    per_tok = 131072.0  # Mistral-7B: 32 layers × 8 KV heads × 128 × 2 × 2 bytes, window 4096
    # every layer slides: an 8192-token sequence holds 4096 tokens per layer → 131 072 × 4096 = 536 870 912
    assert physics.kv_bytes_per_sequence(per_tok, 8192.0, 4096.0) == pytest.approx(536870912)
    # context shorter than the window: no saving (131 072 × 2048 = 268 435 456)
    assert physics.kv_bytes_per_sequence(per_tok, 2048.0, 4096.0) == pytest.approx(268435456)
    # Gemma-2 style, half the layers slide: 131 072 × (0.5 × 4096 + 0.5 × 8192) = 131 072 × 6144 = 805 306 368
    assert physics.kv_bytes_per_sequence(per_tok, 8192.0, 4096.0, 0.5) == pytest.approx(805306368)
    # no window (None or NaN): the full context, 131 072 × 8192 = 1 073 741 824
    assert physics.kv_bytes_per_sequence(per_tok, 8192.0) == pytest.approx(1073741824)
    assert physics.kv_bytes_per_sequence(per_tok, 8192.0, np.nan) == pytest.approx(1073741824)


def test_littles_law_and_busy_fraction():
    # λ = 0.5 req/s, W = 4 s → L = 2 requests in the system
    assert physics.littles_law_concurrency(0.5, 4.0) == 2.0
    # M/G/∞: P(N ≥ 1) = 1 − e^−2 = 0.864 664 7
    assert physics.busy_fraction(2.0) == pytest.approx(0.8646647, rel=1e-6)
    # mean batch while busy = 2 / 0.864 664 7 = 2.313 035
    assert physics.busy_batch(2.0) == pytest.approx(2.313035, rel=1e-5)
    # a nearly idle server still decodes at least one sequence when busy
    assert physics.busy_batch(1e-6) == pytest.approx(1.0)


def test_server_power_mix_hand_computed():
    # idle 30 W, busy 200 W, L = 2: 30 + 0.864 664 7 × 170 = 176.993 W
    assert physics.server_power_mix(30.0, 200.0, 2.0) == pytest.approx(176.993, abs=1e-3)
    # L = 0.017 × 10 s = 0.17: 1 − e^−0.17 = 0.156 335; 25 + 0.156 335 × 75 = 36.725 W
    assert physics.server_power_mix(25.0, 100.0, 0.17) == pytest.approx(36.725, abs=1e-3)
    # no load → idle; saturated → busy; busy below idle never lowers power under idle
    assert physics.server_power_mix(30.0, 200.0, 0.0) == 30.0
    assert physics.server_power_mix(30.0, 200.0, 50.0) == pytest.approx(200.0)
    assert physics.server_power_mix(30.0, 20.0, 2.0) == 30.0


def test_energy_formulas_hand_computed():
    # 100 W at 0.01 s per token → 1 J/token; 256 tokens → 256 J = 0.071 11 Wh
    e = energy.energy_figures(100.0, 0.01, 256, usd_per_kwh=0.15, gco2_per_kwh=400.0, pue=1.2)
    assert e["j_per_token"] == pytest.approx(1.0)
    assert e["j_per_request"] == pytest.approx(256.0)
    assert e["wh_per_request"] == pytest.approx(256 / 3600)
    # 1 J/token × 1e6 tokens = 1e6 J = 0.277 78 kWh
    assert e["kwh_per_mtok"] == pytest.approx(1 / 3.6)
    # × PUE 1.2 × $0.15 = $0.05; × PUE 1.2 × 400 g = 133.33 g
    assert e["usd_per_mtok"] == pytest.approx(0.05)
    assert e["gco2_per_mtok"] == pytest.approx(133.3333, rel=1e-6)
    plain = energy.energy_figures(100.0, 0.01, 256)
    assert plain["usd_per_mtok"] is None and plain["gco2_per_mtok"] is None


@pytest.mark.parametrize("kw", [{"usd_per_kwh": -1.0}, {"gco2_per_kwh": math.nan}, {"pue": 0.9}, {"pue": True}])
def test_energy_rejects_bad_prices(kw):
    from wattgpu.errors import WattGPUError

    with pytest.raises(WattGPUError):
        energy.energy_figures(100.0, 0.01, 10, **kw)

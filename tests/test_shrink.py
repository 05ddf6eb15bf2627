"""Issue 21 design (b): the learned power correction shrinks toward the physical prior outside the
training GPUs' envelope, and never leaves [idle, TDP]. Rows here are synthetic fixtures (labelled so)."""
import numpy as np
import pytest

from wattgpu_train.shrink import SHRINK_FIELDS, envelope_excess, shrink_weight

RANGES = {"gpu_tdp_w": (300.0, 700.0), "gpu_memory_bandwidth_gb_s": (900.0, 3350.0), "gpu_fp16_tflops": (77.0, 990.0)}


def _cols(tdp, bw, fl):
    return {"gpu_tdp_w": np.array(tdp, float), "gpu_memory_bandwidth_gb_s": np.array(bw, float),
            "gpu_fp16_tflops": np.array(fl, float)}


def test_inside_the_envelope_keeps_the_whole_correction():
    e = envelope_excess(_cols([300, 500, 700], [900, 2000, 3350], [77, 300, 990]), RANGES)
    assert np.all(e == 0) and np.all(shrink_weight(e) == 1)


def test_further_out_keeps_less_and_twice_the_edge_keeps_half():
    # synthetic GPUs: TDP 700 (edge), 1400 (2× the edge), 2800 (4×); the other fields inside
    e = envelope_excess(_cols([700, 1400, 2800], [2000] * 3, [300] * 3), RANGES)
    w = shrink_weight(e)
    assert w[0] == 1 and w[1] == pytest.approx(0.5) and 0 < w[2] < w[1]
    below = envelope_excess(_cols([150], [450], [300]), RANGES)  # half the low edge on two fields
    assert shrink_weight(below)[0] == pytest.approx(0.5)
    assert set(SHRINK_FIELDS) == set(RANGES)


def test_shrunk_predictions_stay_between_idle_and_tdp():
    from wattgpu_train.shrink import shrunk_oof

    class _DS:  # synthetic fixture: the columns the bounded power transform reads
        def __init__(self, n):
            rng = np.random.default_rng(0)
            tdp = rng.uniform(150, 1200, n)
            self.cols = {"gpu_tdp_w": tdp, "idle_power_w": 0.1 * tdp, "duty_power_w": tdp * rng.uniform(0.3, 1.0, n),
                         "gpu_memory_bandwidth_gb_s": rng.uniform(300, 8000, n), "gpu_fp16_tflops": rng.uniform(20, 2500, n)}

    ds = _DS(400)
    power = ds.cols["idle_power_w"] + (ds.cols["gpu_tdp_w"] - ds.cols["idle_power_w"]) * np.linspace(0.02, 0.98, 400)
    test = np.zeros(400, bool)
    test[::4] = True
    out = shrunk_oof(ds, [("f", test)], power, "logit_activity_over_duty")
    assert np.all(out[~test] == power[~test])
    assert np.all(out >= ds.cols["idle_power_w"]) and np.all(out <= ds.cols["gpu_tdp_w"])

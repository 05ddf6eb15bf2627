"""Energy, cost and carbon per token and per request: the one place these formulas live.

    J/token        = mean power (W) × wall seconds per generated token of the whole GPU
    Wh/request     = J/token × output tokens / 3600
    kWh/Mtok       = J/token × 1e6 / 3.6e6 = J/token / 3.6            (GPU energy only)
    $/Mtok         = kWh/Mtok × PUE × price ($/kWh)
    gCO2e/Mtok     = kWh/Mtok × PUE × grid intensity (gCO2e/kWh)
    $/Mtok (GPU-h) = GPU price ($/GPU-hour) × GPUs × wall hours per million tokens   (renting the GPUs)

PUE (power usage effectiveness, ≥ 1) scales GPU energy to facility energy for cost and carbon only.
"""
from __future__ import annotations

from typing import Any

from .errors import WattGPUError, _short
from .rules import fmt_bound, is_finite_number

J_PER_KWH = 3.6e6
J_PER_WH = 3600.0
# (usd_per_kwh, gco2_per_kwh, pue, usd_per_gpu_hour): what cost and carbon are priced with
Prices = tuple[float | None, float | None, float, float | None]
MAX_USD_PER_GPU_HOUR = 1000.0  # a rented GPU-hour above this is a typo (list prices are $0.2–$15)


# The accepted range of each price input: the one definition (the request declarations in wattgpu.questions
# read it too).
PRICE_RANGES: dict[str, tuple[float, float]] = {"usd_per_kwh": (0.0, 100.0), "gco2_per_kwh": (0.0, 5000.0),
                                                "pue": (1.0, 5.0), "usd_per_gpu_hour": (0.0, MAX_USD_PER_GPU_HOUR)}


def _check(name: str, value: float | None) -> None:
    if value is None:
        return
    lo, hi = PRICE_RANGES[name]
    if not (is_finite_number(value) and lo <= value <= hi):
        raise WattGPUError(f"{name} = {_short(value)} is invalid; expected a finite number in "
                           f"[{fmt_bound(lo)}, {fmt_bound(hi)}]")


def check_prices(usd_per_kwh: float | None, gco2_per_kwh: float | None, pue: float,
                 usd_per_gpu_hour: float | None = None) -> None:
    """Validate the cost/carbon inputs (one-line WattGPUError naming the bad one)."""
    if usd_per_kwh is None and gco2_per_kwh is None and usd_per_gpu_hour is None and type(pue) is float \
            and pue == 1.0:
        return  # the defaults (no price, PUE 1), which every unpriced prediction's energy figures pass
    for name, value in zip(PRICE_RANGES, (usd_per_kwh, gco2_per_kwh, pue, usd_per_gpu_hour)):
        _check(name, value)


def energy_figures(power_w: Any, s_per_token: Any, output_tokens: Any, usd_per_kwh: float | None = None,
                   gco2_per_kwh: float | None = None, pue: float = 1.0, usd_per_gpu_hour: float | None = None,
                   gpus: Any = 1) -> dict[str, Any]:
    """Energy per token/request, kWh per million tokens and (when priced) $ and gCO2e per million tokens.

    Works elementwise on floats or numpy arrays (the predictor's vectorised core uses it too).

    Keys: ``j_per_token``, ``j_per_request``, ``wh_per_request``, ``kwh_per_mtok``, ``usd_per_mtok``,
    ``gco2_per_mtok`` (the last two None unless a price/intensity is given), ``pue``, and
    ``usd_per_mtok_gpu_hours`` (with ``usd_per_gpu_hour``: the rent of ``gpus`` GPUs for the wall time of a
    million tokens; None otherwise).
    """
    check_prices(usd_per_kwh, gco2_per_kwh, pue, usd_per_gpu_hour)
    j_tok = power_w * s_per_token
    kwh_mtok = j_tok * 1e6 / J_PER_KWH
    return {
        "j_per_token": j_tok,
        "j_per_request": j_tok * output_tokens,
        "wh_per_request": j_tok * output_tokens / J_PER_WH,
        "kwh_per_mtok": kwh_mtok,
        "usd_per_mtok": None if usd_per_kwh is None else kwh_mtok * pue * usd_per_kwh,
        "gco2_per_mtok": None if gco2_per_kwh is None else kwh_mtok * pue * gco2_per_kwh,
        "pue": pue,
        "usd_per_mtok_gpu_hours": None if usd_per_gpu_hour is None else usd_per_gpu_hour * gpus * s_per_token * 1e6 / 3600.0,
    }

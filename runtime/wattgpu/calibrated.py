"""The calibration a bundle carries, as the prediction path uses it: parsed once on first use.

Apart from :mod:`wattgpu.calibration` (the fit, its dataclasses and the bundle writer) so that predicting
with an uncalibrated bundle, the packaged one included, never imports that module (cold start)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:
    from .bundle import ModelBundle
    from .calibration import Calibration


def of(bundle: ModelBundle) -> Calibration | None:
    """The bundle's calibration (parsed once), or None."""
    cal = getattr(bundle, "_calibration", False)
    if cal is False:
        section = bundle.schema.calibration
        if section is None:
            cal = None
        else:
            from .calibration import Calibration

            cal = Calibration.from_section(section)
        bundle._calibration = cal  # type: ignore[attr-defined]
    return cal  # type: ignore[return-value]


def apply_ttft(bundle: ModelBundle, cols: Mapping[str, Any], numbers: dict[str, Any]) -> None:
    """THE TTFT correction of a calibrated bundle: ``numbers["ttft_s"]`` and ``["e2e_latency_s"]`` of …"""
    if bundle.schema.calibration is not None:
        of(bundle).apply_ttft(cols, numbers)  # type: ignore[union-attr]

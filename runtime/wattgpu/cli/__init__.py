"""``wattgpu`` command line: predict, rank, gpus, llms, calibrate, serve — one module per command; the options
come from the request declarations (wattgpu.questions). Input errors exit 2 with one line; never a traceback.

click is imported only under this package (and only when the CLI runs: the runtime never imports it)."""
from __future__ import annotations

from .base import READABLE_FIXED, _predictor, fail, guarded, main, num
from .options import make_workload, parse_tp
from .text import bound_text, dur, explain_power_method, ttft_text
from .predict_command import SHOWN_ROW_ERRORS, predict
from .rank_command import rank_cell, rank_cmd, rank_columns
from .list_commands import gpus, llms
from .calibrate_command import calibrate
from .serve_command import serve

__all__ = ["main", "fail", "guarded", "num", "READABLE_FIXED", "make_workload", "parse_tp", "dur", "ttft_text",
           "bound_text", "explain_power_method", "predict", "rank_cmd", "rank_columns", "rank_cell", "gpus", "llms",
           "calibrate", "serve", "SHOWN_ROW_ERRORS", "_predictor"]

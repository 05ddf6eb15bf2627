"""``wattgpu`` command line: predict, rank, gpus, llms, calibrate, serve — one module per command; the options
come from the request declarations (wattgpu.questions). Input errors exit 2 with one line; never a traceback.

click is imported only under this package (and only when the CLI runs: the runtime never imports it)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .base import READABLE_FIXED, _predictor, fail, guarded, main, num
from .options import make_workload, parse_tp
from .text import bound_text, dur, explain_power_method, ttft_text

if TYPE_CHECKING:
    from .calibrate_command import calibrate
    from .list_commands import gpus, llms
    from .predict_command import SHOWN_ROW_ERRORS, predict
    from .rank_command import rank_cell, rank_cmd, rank_columns
    from .serve_command import serve

__all__ = ["main", "fail", "guarded", "num", "READABLE_FIXED", "make_workload", "parse_tp", "dur", "ttft_text",
           "bound_text", "explain_power_method", "predict", "rank_cmd", "rank_columns", "rank_cell", "gpus", "llms",
           "calibrate", "serve", "SHOWN_ROW_ERRORS", "_predictor"]

# Names of the command modules, imported on first use (PEP 562) like the commands themselves (base.COMMAND_MODULES).
LAZY = {"SHOWN_ROW_ERRORS": "predict_command", "predict": "predict_command", "rank_cell": "rank_command",
        "rank_cmd": "rank_command", "rank_columns": "rank_command", "gpus": "list_commands", "llms": "list_commands",
        "calibrate": "calibrate_command", "serve": "serve_command"}


def __getattr__(name: str) -> Any:
    """A command module's public name (cached here once imported)."""
    if name not in LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(f".{LAZY[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})

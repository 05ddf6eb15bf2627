"""The ``wattgpu`` command group and what every command shares: one-line errors and exit statuses, the
predictor of ``--models``, number formatting for people. Input errors exit 2 with one line; never a traceback."""
from __future__ import annotations

import sys
from typing import Any, Callable

import click

from ..errors import WattGPUError


def fail(problem: object, code: int = 2) -> None:
    """Print ``problem`` (an exception or a message) as one ``error:`` line on stderr and exit ``code``
    (also wattgpu-train's way out)."""
    one_line = str(problem).replace("\r", "\\r").replace("\n", "\\n")  # names from files may hold newlines
    click.echo(f"error: {one_line}", err=True)
    sys.exit(code)


def guarded(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn WattGPU errors (and anything unexpected) into a one-line message and an exit status."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except WattGPUError as exc:
            fail(exc, exc.exit_code)
        except (BrokenPipeError, KeyboardInterrupt):
            sys.exit(130)
        except OSError as exc:
            from ..safeio import WRITE_ERRNOS, write_problem

            if exc.errno not in WRITE_ERRNOS:  # not an output that cannot be written: a bug
                fail(f"internal error ({exc.__class__.__name__}: {exc}); please report it", 70)
            fail(f"cannot write the output: {write_problem(exc)}", 2)  # e.g. stdout redirected to /dev/full
        except Exception as exc:  # a bug: still one line, different status
            fail(f"internal error ({exc.__class__.__name__}: {exc}); please report it", 70)
    return wrapper


READABLE_FIXED = 1e7  # at and above this, fixed-point figures switch to 4 significant digits


def num(x: float, spec: str) -> str:
    """``format(x, spec)`` for a fixed-point ``spec`` such as ``">8.3f"``; 4 significant digits in the same
    width once ``|x|`` reaches READABLE_FIXED (an idle server's J/token can be 1e+20, not 21 digits)."""
    if abs(x) >= READABLE_FIXED and x == x and abs(x) != float("inf"):
        return format(x, spec[:spec.index(".")] + ".4g")
    return format(x, spec)


def _fmt_interval(intervals: dict[str, list[float]], scale: float, fmt: str) -> str:
    if "80" not in intervals:
        return ""
    lo, hi = intervals["80"]
    return f"  (80%: {format(lo * scale, fmt)}–{format(hi * scale, fmt)})"


_NO_ARGS_IS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())  # click >= 8.2


# Each command's module, imported when the command is asked for (or listed by --help): `wattgpu predict` then
# loads neither rank's nor calibrate's nor serve's code and options (cold start). A module registers its
# commands on ``main`` as it is imported (``@main.command()``).
COMMAND_MODULES = {"predict": "predict_command", "rank": "rank_command", "gpus": "list_commands",
                   "llms": "list_commands", "calibrate": "calibrate_command", "serve": "serve_command"}


class _OneLineErrors(click.Group):
    """Click's own usage errors (unknown option, bad number, missing --gpu) as one ``error:`` line, status 2;
    commands load on first use (:data:`COMMAND_MODULES`)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *COMMAND_MODULES})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMAND_MODULES:
            from importlib import import_module

            import_module(f"{__package__}.{COMMAND_MODULES[cmd_name]}")
        return super().get_command(ctx, cmd_name)

    def main(self, *args: Any, **kwargs: Any) -> Any:
        kwargs["standalone_mode"] = False
        try:
            rc = super().main(*args, **kwargs)
        except _NO_ARGS_IS_HELP as exc:  # bare `wattgpu`: show the help, as click < 8.2 did
            click.echo(exc.format_message())
            sys.exit(0)
        except click.ClickException as exc:
            click.echo(f"error: {' '.join(exc.format_message().split())}", err=True)
            sys.exit(exc.exit_code)
        except click.exceptions.Abort:
            sys.exit(130)
        sys.exit(rc if isinstance(rc, int) else 0)


@click.group(cls=_OneLineErrors, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="wattgpu")
def main() -> None:
    """Predict mean GPU power and inter-token latency of serving an LLM on an NVIDIA GPU."""


def _predictor(models: str | None) -> Any:
    """The predictor over ``--models DIR`` (or $WATTGPU_MODELS, or the packaged bundle)."""
    from ..predictor import Predictor, check_bundle_dir, default_predictor

    if models:
        check_bundle_dir(models, "--models")  # named as the option the user typed
        return Predictor(models)
    return default_predictor()

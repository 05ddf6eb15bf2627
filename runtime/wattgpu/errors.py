"""One error hierarchy: every input problem the runtime can detect is a WattGPUError.

Messages are single-line, name the entity and field at fault, and say how to fix it.
"""
from __future__ import annotations


class WattGPUError(Exception):
    """Base class for every error WattGPU raises on purpose."""

    exit_code: int = 2

    def __reduce__(self) -> tuple[object, ...]:
        """Pickled as its message arguments and attributes, without calling the subclass's ``__init__`` (whose
        parameters differ from ``args``), so an error crosses a process boundary as it is (the CSV's worker
        processes, :mod:`wattgpu.csv_workers`)."""
        return (_restore, (type(self), self.args, self.__dict__))


def _restore(cls: type[WattGPUError], args: tuple[object, ...], state: dict[str, object]) -> WattGPUError:
    exc = cls.__new__(cls, *args)  # BaseException.__new__ keeps ``args``; no __init__ runs
    exc.__dict__.update(state)
    return exc


# `wattgpu rank` found no GPU that qualifies (every one excluded): the answer is printed, then this status.
NO_CANDIDATE_EXIT = 4


class ArgumentTypeError(WattGPUError, TypeError):
    """A public API function was given an argument of the wrong type (None, a str for a list, …)."""


def require_type(name: str, value: object, types: type | tuple[type, ...], expected: str) -> None:
    """Raise :class:`ArgumentTypeError` naming ``name`` unless ``value`` is one of ``types``
    (``bool`` never counts as a number)."""
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in (
            types if isinstance(types, tuple) else (types,))):
        raise ArgumentTypeError(f"{name}: expected {expected}, got {type(value).__name__} {_short(value, 40)}")


class UnknownEntityError(WattGPUError, LookupError):
    """A GPU or LLM name that is neither in the catalog nor a readable file."""

    def __init__(self, kind: str, name: str, suggestions: list[str] | tuple[str, ...] = ()) -> None:
        self.kind, self.name, self.suggestions = kind, name, tuple(suggestions)
        hint = f" Did you mean: {', '.join(self.suggestions)}?" if self.suggestions else ""
        listing = "gpus" if kind == "GPU" else "llms"
        super().__init__(
            f"Unknown {kind} {_short(name)}.{hint} (list them with `wattgpu {listing}`, or pass a JSON/config file path)"
        )


class AmbiguousNameError(UnknownEntityError):
    """A name that fits several catalog entries (``H100``: SXM5, PCIe and NVL); the message lists them."""

    def __init__(self, kind: str, name: str, choices: list[str] | tuple[str, ...]) -> None:
        self.choices = tuple(choices)
        flag = "--gpu" if kind == "GPU" else "--llm"
        WattGPUError.__init__(
            self, f"{kind} {_short(name)} is ambiguous: it names {', '.join(self.choices)}; say which "
                  f"(e.g. {flag} {self.choices[0]!r})")
        self.kind, self.name, self.suggestions = kind, name, self.choices


def _short(value: object, limit: int = 60) -> str:
    """repr() of a user value, cut to ``limit`` characters so a hostile value cannot flood the message."""
    shown = repr(value)
    return shown if len(shown) <= limit else shown[: limit - 3] + "..."


class SpecValidationError(WattGPUError, ValueError):
    """A spec field (GPU, LLM or workload) is missing, of the wrong type, not finite or out of range."""

    def __init__(self, entity: str, field: str, value: object, expected: str, key: str | None = None) -> None:
        # ``key``: where the value was read when that differs from ``field`` (a config.json key such as
        # ``num_hidden_layers`` for the field ``num_layers``), so an API error can name what the client sent
        self.entity, self.field, self.value, self.expected, self.key = entity, field, value, expected, key
        super().__init__(f"{entity}: field {_short(field)} = {_short(value)} is invalid; expected {expected}")


class ConfigFileError(WattGPUError, ValueError):
    """A config/spec file that cannot be read or parsed safely."""

    def __init__(self, path: str, problem: str) -> None:
        self.path, self.problem = path, problem
        shown = path if len(path) <= 160 else f"{path[:100]}...{path[-40:]}"  # over-long names stay readable
        super().__init__(f"{shown}: {problem}")


class UnsupportedModelError(WattGPUError):
    """An LLM architecture WattGPU's features cannot describe (no attention, no KV cache)."""


class ModelFitError(WattGPUError):
    """The LLM does not fit in the GPU's memory (weights + minimal KV cache)."""


class ArtifactError(WattGPUError):
    """A packaged model, schema or catalog file is missing, corrupt or mismatched."""

    exit_code = 3

"""A tracing compiler for the one-row path: the same definitions, run once on symbols, replayed as one function.

One warm prediction spends most of its time in Python calls around the models (~390 calls: column dicts,
:mod:`ops` dispatch, physics helpers) rather than in the arithmetic. :func:`record` runs a function
ONCE with some inputs replaced by :class:`Sym` values (:meth:`Trace.input`). Each Sym carries its concrete value (the trace
computes the real answer as it goes) and records every operation on it as one line of straight-line
Python. Everything that does not depend on a Sym is computed once, at trace time, and enters the code as
a constant. The lines become one function of the symbolic inputs, compiled with ``compile`` (:meth:`Trace.compile`).

Why the replay gives the same bits: every recorded line is the operation the definitions ran on Python
floats. Arithmetic is the same IEEE operation, and each :mod:`ops` function is called as such (its
float branch), or written out as that branch's own expression where :data:`INLINE` has one (tested equal).
The operands are the same: the constants are the trace-time objects themselves.

Branches on a Sym's value (``if``, ``and``/``or``, a comparison used as a truth value) become guards. The
replay raises :class:`Deopt` when a guard would take the other branch, and the caller then runs the
definitions as usual. A discarded :func:`ops.where` branch that divides by zero raises in the replay as it
does in the definitions, because both evaluate it.

What the tracer refuses raises :class:`Untraceable`, and the caller keeps the ordinary path. That covers
a Sym passed to ``float``/``int``, numpy or ``math``, used as an index, or hashed.
"""
from __future__ import annotations

import operator
import threading
from typing import Any, Callable, Sequence

_STATE = threading.local()


class Deopt(Exception):
    """A guard of a compiled trace failed (a branch went the other way): run the definitions instead."""


class Untraceable(Exception):
    """The traced code did something a trace cannot record (a Sym in numpy, ``float()``, ``math``, an index)."""


def active() -> "Trace | None":
    """The trace being recorded on this thread, or None."""
    return getattr(_STATE, "trace", None)


class Sym:
    """A traced value: ``name`` in the generated code, ``value`` its value in this trace."""

    __slots__ = ("trace", "name", "value")

    def __init__(self, trace: "Trace", name: str, value: Any) -> None:
        self.trace, self.name, self.value = trace, name, value

    def _op(self, other: Any, sym: str, fn: Callable[[Any, Any], Any], swap: bool = False) -> "Sym":
        a, b = (other, self) if swap else (self, other)
        return self.trace.emit(f"({self.trace.ref(a)} {sym} {self.trace.ref(b)})", fn(_val(a), _val(b)))

    def __add__(self, o: Any) -> "Sym": return self._op(o, "+", lambda a, b: a + b)
    def __radd__(self, o: Any) -> "Sym": return self._op(o, "+", lambda a, b: a + b, True)
    def __sub__(self, o: Any) -> "Sym": return self._op(o, "-", lambda a, b: a - b)
    def __rsub__(self, o: Any) -> "Sym": return self._op(o, "-", lambda a, b: a - b, True)
    def __mul__(self, o: Any) -> "Sym": return self._op(o, "*", lambda a, b: a * b)
    def __rmul__(self, o: Any) -> "Sym": return self._op(o, "*", lambda a, b: a * b, True)
    def __truediv__(self, o: Any) -> "Sym": return self._op(o, "/", lambda a, b: a / b)
    def __rtruediv__(self, o: Any) -> "Sym": return self._op(o, "/", lambda a, b: a / b, True)
    def __pow__(self, o: Any) -> "Sym": return self._op(o, "**", lambda a, b: a ** b)
    def __rpow__(self, o: Any) -> "Sym": return self._op(o, "**", lambda a, b: a ** b, True)
    def __and__(self, o: Any) -> "Sym": return self._op(o, "&", lambda a, b: a & b)
    def __rand__(self, o: Any) -> "Sym": return self._op(o, "&", lambda a, b: a & b, True)
    def __or__(self, o: Any) -> "Sym": return self._op(o, "|", lambda a, b: a | b)
    def __ror__(self, o: Any) -> "Sym": return self._op(o, "|", lambda a, b: a | b, True)
    def __lt__(self, o: Any) -> "Sym": return self._op(o, "<", lambda a, b: a < b)
    def __le__(self, o: Any) -> "Sym": return self._op(o, "<=", lambda a, b: a <= b)
    def __gt__(self, o: Any) -> "Sym": return self._op(o, ">", lambda a, b: a > b)
    def __ge__(self, o: Any) -> "Sym": return self._op(o, ">=", lambda a, b: a >= b)
    def __eq__(self, o: Any) -> "Sym": return self._op(o, "==", lambda a, b: a == b)  # type: ignore[override]
    def __ne__(self, o: Any) -> "Sym": return self._op(o, "!=", lambda a, b: a != b)  # type: ignore[override]

    def __neg__(self) -> "Sym":
        return self.trace.emit(f"(-{self.name})", -self.value)

    def __bool__(self) -> bool:
        truth = bool(self.value)
        self.trace.guard(self, truth)
        return truth

    def _refuse(self, *_: Any) -> Any:
        raise Untraceable(f"{self.name}: a traced value used outside the recorded operations")

    __float__ = __int__ = __index__ = __hash__ = __array__ = __iter__ = __len__ = __abs__ = _refuse


def _val(x: Any) -> Any:
    return x.value if type(x) is Sym else x


# fn -> (argument types, expression): a function's branch for exactly those types written as one expression of
# its arguments ({0}, {1}, …), recorded inline instead of as a call (registered by wattgpu.ops beside each
# function; tests/test_compiled_path.py holds each equal to the function, bit for bit).
INLINE: dict[Callable[..., Any], tuple[tuple[type, ...], str]] = {}


def call(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` recorded as one call where an argument is a Sym (``fn`` runs on the concrete values), or as
    its :data:`INLINE` expression where the arguments have its types."""
    trace = args[0].trace if type(args[0]) is Sym else next(a.trace for a in args if type(a) is Sym)
    values = tuple(map(_val, args))
    form = INLINE.get(fn)
    refs = [trace.ref(a) for a in args]
    if form is not None and len(form[0]) == len(values) and all(map(operator.is_, map(type, values), form[0])):
        return trace.emit(form[1].format(*refs), fn(*values))
    return trace.emit(f"{trace.ref(fn)}({', '.join(refs)})", fn(*values))


class Trace:
    """The lines, constants and inputs of one trace."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.consts: dict[str, Any] = {}
        self._const_ids: dict[int, str] = {}
        self.inputs: list[str] = []
        self.runners: dict[int, str] = {}  # id of a model runner -> its input's name (wattgpu.single)
        self.n = 0
        self._seen: dict[str, Sym] = {}
        self._guards: set[str] = set()

    def input(self, value: Any) -> Sym:
        """A new symbolic input (the generated function's next argument) whose value in this trace is ``value``."""
        name = f"a{len(self.inputs)}"
        self.inputs.append(name)
        return Sym(self, name, value)

    def emit(self, expr: str, value: Any, pure: bool = True) -> Sym:
        """A new line ``tN = expr`` (value ``value`` in this trace). A ``pure`` expression (arithmetic, an
        :mod:`ops` call: the same text of the same names is the same value) already recorded is reused."""
        if pure:
            seen = self._seen.get(expr)
            if seen is not None:
                return seen
        name = f"t{self.n}"
        self.n += 1
        self.lines.append(f"{name} = {expr}")
        sym = Sym(self, name, value)
        if pure:
            self._seen[expr] = sym
        return sym

    def ref(self, x: Any) -> str:
        """``x`` in the generated code: a Sym's name, else a constant bound to the very object."""
        if type(x) is Sym:
            if x.trace is not self:
                raise Untraceable("a value of another trace")
            return x.name
        key = id(x)
        name = self._const_ids.get(key)
        if name is None or self.consts[name] is not x:
            name = f"k{len(self.consts)}"
            self.consts[name] = x
            self._const_ids[key] = name
        return name

    def guard(self, sym: Sym, truth: bool) -> None:
        line = f"if {'not ' if truth else ''}{sym.name}: raise Deopt"
        if line not in self._guards:  # a branch taken again on the same value needs no second check
            self._guards.add(line)
            self.lines.append(line)

    def statement(self, line: str) -> None:
        """A line with a side effect (a model's input store or run), kept as written."""
        self.lines.append(line)

    def compile(self, outputs: str, name: str = "compiled") -> Callable[..., Any]:
        """The traced lines as a function of the inputs returning the expression ``outputs``; arithmetic errors
        raise :class:`Deopt` (the definitions then return what they return for them)."""
        body = "\n".join(f"        {line}" for line in self.lines)
        src = (f"def {name}({', '.join(self.inputs)}):\n    try:\n{body}\n        return {outputs}\n"
               f"    except ArithmeticError:\n        raise Deopt\n")
        scope: dict[str, Any] = {**self.consts, "Deopt": Deopt}
        exec(compile(src, f"<wattgpu.trace {name}>", "exec"), scope)  # noqa: S102 - our own generated code
        return scope[name]


def record(fn: Callable[..., Any], *args: Any) -> tuple[Trace, Any]:
    """Run ``fn(trace, *args)`` with a new trace active on this thread; (the trace, what ``fn`` returned)."""
    if active() is not None:
        raise Untraceable("a trace inside a trace")
    trace = Trace()
    _STATE.trace = trace
    try:
        return trace, fn(trace, *args)
    finally:
        _STATE.trace = None


def outputs(trace: Trace, values: Sequence[Any]) -> str:
    """A tuple expression of ``values`` (Syms or constants) for :meth:`Trace.compile`."""
    return "(" + "".join(f"{trace.ref(v)}, " for v in values) + ")"

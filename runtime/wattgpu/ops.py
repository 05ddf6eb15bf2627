"""Elementwise math that runs on Python floats and on numpy arrays alike.

The feature, physics and target formulas call these instead of ``np.*`` so each formula is written
once and serves both the vectorised path (arrays: a batch, a rank, training) and the one-row scalar
path (plain floats: one prediction in microseconds). With all-scalar arguments each function computes
with ``math`` and returns a Python float (or bool) equal, bit for bit, to what the numpy ufunc returns
for the same values — NaN, ±inf and signed zeros included. Any other argument (arrays, pandas
Series) goes to numpy unchanged.

``math.log``/``exp``/``expm1``/``pow`` equal numpy's ufuncs where numpy calls the C library (most
builds). Where numpy uses its own SIMD code (e.g. AVX-512 builds) they may differ in the last bit, so
at import a probe over a spread of values compares them and, on any difference, the scalar forms call
numpy's ufunc on the float instead (slower, identical). ``SCALAR_LIBM`` says which is in use;
tests/test_scalar_path.py proves identity over the catalog either way.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

_Num = (float, int)
_INTEGRAL = 4503599627370496.0  # 2**52: every float at least this large is an integer


def _np_scalar(ufunc: Callable[..., Any]) -> Callable[..., float]:
    def call(*xs: float) -> float:
        with np.errstate(all="ignore"):
            return float(ufunc(*xs))
    return call


def _libm(fn: Callable[..., float], ufunc: Callable[..., Any]) -> Callable[..., float]:
    """``fn`` from math, falling back to numpy where math raises (log(0), overflow, ...)."""
    slow = _np_scalar(ufunc)

    def call(*xs: float) -> float:
        try:
            return fn(*xs)
        except (ValueError, OverflowError, ZeroDivisionError):
            return slow(*xs)
    return call


def _probe() -> bool:
    """True when math's log/exp/expm1/pow give numpy's bits on a spread of values."""
    x = np.concatenate([np.geomspace(1e-12, 1e12, 41), np.linspace(0.01, 3.0, 23), [1.0, 2.0, 0.5, 7.3e-5]])
    y = np.linspace(-30.0, 10.0, 37)
    base, ex = np.linspace(0.0, 0.999, 11), np.arange(1.0, 600.0, 61.0)
    bb, ee = np.meshgrid(base, ex)
    checks: list[tuple[Callable[..., float], Any, tuple[Any, ...]]] = [
              (math.log, np.log, (x,)), (math.exp, np.exp, (y,)), (math.expm1, np.expm1, (-np.abs(y),)),
              (math.pow, np.power, (bb.ravel(), ee.ravel()))]
    for fn, uf, args in checks:
        want = uf(*args)
        got = np.array([fn(*a) for a in zip(*(v.tolist() for v in args))])
        if not np.array_equal(want, got):
            return False
    return True


SCALAR_LIBM = _probe()
if SCALAR_LIBM:
    _log, _exp = _libm(math.log, np.log), _libm(math.exp, np.exp)
    _expm1, _pow = _libm(math.expm1, np.expm1), _libm(math.pow, np.power)
else:  # numpy's own SIMD code: ask numpy, one float at a time
    _log, _exp, _expm1, _pow = (_np_scalar(np.log), _np_scalar(np.exp), _np_scalar(np.expm1),
                                _np_scalar(np.power))


def asarray(x: Any) -> Any:
    """A float, or a float64 array (what ``np.asarray(x, dtype=np.float64)`` gives for non-scalars)."""
    if type(x) is float:  # the scalar path's common case, checked first
        return x
    return float(x) if isinstance(x, _Num) else np.asarray(x, dtype=np.float64)


def log(x: Any) -> Any:
    return _log(x) if type(x) is float or isinstance(x, _Num) else np.log(x)


def exp(x: Any) -> Any:
    return _exp(x) if type(x) is float or isinstance(x, _Num) else np.exp(x)


def expm1(x: Any) -> Any:
    return _expm1(x) if isinstance(x, _Num) else np.expm1(x)


def power(a: Any, b: Any) -> Any:
    return _pow(a, b) if isinstance(a, _Num) and isinstance(b, _Num) else np.power(a, b)


def maximum(a: Any, b: Any) -> Any:
    """numpy's maximum: NaN wins; ``a`` when ``a > b``, else ``b`` (ties of ±0 give ``b``, as numpy's
    array loops do)."""
    if (type(a) is float or isinstance(a, _Num)) and (type(b) is float or isinstance(b, _Num)):
        return float(a if (a > b or a != a) else b)
    return np.maximum(a, b)


def minimum(a: Any, b: Any) -> Any:
    """numpy's minimum: NaN wins; ``a`` when ``a < b``, else ``b``."""
    if (type(a) is float or isinstance(a, _Num)) and (type(b) is float or isinstance(b, _Num)):
        return float(a if (a < b or a != a) else b)
    return np.minimum(a, b)


def fmin(a: Any, b: Any) -> Any:
    """numpy's fmin: NaN loses; ``a`` when ``a <= b``, else ``b`` (numpy's own loops disagree among
    themselves only on ties of ±0)."""
    if (type(a) is float or isinstance(a, _Num)) and (type(b) is float or isinstance(b, _Num)):
        return float(a if (a <= b or b != b) else b)
    return np.fmin(a, b)


def clip(x: Any, lo: Any, hi: Any) -> Any:
    """numpy's clip: ``lo`` below it, ``hi`` above it, else ``x`` (NaN stays NaN)."""
    if isinstance(x, _Num) and isinstance(lo, _Num) and isinstance(hi, _Num):
        return float(lo if x < lo else hi if x > hi else x)
    return np.clip(x, lo, hi)


def floor(x: Any) -> Any:
    if isinstance(x, _Num):  # |x| >= 2**52 (and inf, NaN, ±0) is already its own floor: no big-int detour
        return float(math.floor(x)) if -_INTEGRAL < x < _INTEGRAL and x != 0 else float(x)
    return np.floor(x)


def where(cond: Any, a: Any, b: Any) -> Any:
    """``a`` where ``cond`` else ``b`` (both already evaluated, as with numpy)."""
    if (type(cond) is bool or isinstance(cond, np.bool_)) and isinstance(a, _Num) and isinstance(b, _Num):
        return float(a if cond else b)
    return np.where(cond, a, b)


def isnan(x: Any) -> Any:
    return x != x if type(x) is float or isinstance(x, _Num) else np.isnan(x)


def isfinite(x: Any) -> Any:
    return math.isfinite(x) if isinstance(x, _Num) else np.isfinite(x)


def logical_not(x: Any) -> Any:
    return not x if isinstance(x, (bool, np.bool_)) else np.logical_not(x)


def as_float(cond: Any) -> Any:
    """A truth value (or array of them) as 1.0 / 0.0."""
    return float(cond) if isinstance(cond, (bool, np.bool_)) else np.asarray(cond, dtype=np.float64)

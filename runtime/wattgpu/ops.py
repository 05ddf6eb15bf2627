"""Elementwise math that runs on Python floats and on numpy arrays alike, with one result whatever the CPU.

The feature, physics and target formulas call these instead of ``np.*`` so each formula is written
once and serves both the vectorised path (arrays: a batch, a rank, training) and the one-row scalar
path (plain floats: one prediction in microseconds). Both paths give the same bits **by construction**,
not by the luck of numpy's SIMD dispatch:

- transcendental functions (``log``, ``exp``, ``expm1``, ``power``) are evaluated by ONE
  implementation, Python's ``math`` (the C library), for both paths: an array is reduced to its
  distinct bit patterns (``np.unique`` or :func:`distinct_rows` on the bits, so ``-0.0`` and ``0.0`` stay apart; the inputs here are spec numbers and workload settings, so there
  are few), each is evaluated with ``math`` and the results are looked up. numpy's own SIMD loops
  (SVML on AVX-512 builds) are never used for them, so an AVX2 and an AVX-512 machine agree
  with themselves between paths (tests/test_scalar_path.py, also run with numpy's AVX-512 and AVX2
  dispatch targets disabled);
- ``maximum``/``minimum``/``fmin``/``clip``/``where`` are comparisons and selections written out
  the same way for floats and arrays (``np.where`` over explicit comparisons), so NaN and signed-zero
  ties follow one rule, not a loop's;
- everything else the formulas do is ``+ - * /`` and ``floor``, correctly rounded in IEEE 754 on
  both paths, applied in the same order.
Special values follow IEEE 754/C99 Annex F: ``log(0) = -inf``, ``log(x < 0) = nan``, overflow gives
``inf``, a negative base with a non-integer exponent gives ``nan``.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from .trace import INLINE as _trace_inline
from .trace import Sym as _Sym
from .trace import call as _traced

_Num = (float, int)
_INTEGRAL = 4503599627370496.0  # 2**52: every float at least this large is an integer
_INF, _NAN = math.inf, math.nan


def _log(x: float) -> float:
    if x > 0.0:
        return math.log(x) if x != _INF else _INF
    return -_INF if x == 0.0 else _NAN  # ±0 -> -inf; negative or NaN -> NaN


def _exp(x: float) -> float:
    try:
        return math.exp(x)
    except OverflowError:
        return _INF


def _expm1(x: float) -> float:
    try:
        return math.expm1(x)
    except OverflowError:
        return _INF


def _odd_integer(b: float) -> bool:
    return math.isfinite(b) and b == math.floor(b) and math.fmod(b, 2.0) != 0.0


def _pow(a: float, b: float) -> float:
    """C99 pow (Annex F) on every Python: math.pow raises where C returns a special value (0 to a negative
    power, which older Pythons also raise for 0 ** -inf; overflow; a negative base to a non-integer)."""
    try:
        return math.pow(a, b)
    except OverflowError:  # |result| too large: negative only for a negative base to an odd integer
        return -_INF if a < 0.0 and _odd_integer(b) else _INF
    except ValueError:
        if a == 0.0:
            return math.copysign(_INF, a) if _odd_integer(b) else _INF
        return _NAN


# up to this size fn runs on every element (same bits; cheaper than np.unique), beyond on distinct values
_DIRECT = 256


def distinct_rows(bits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(first, inverse) of the distinct rows of ``bits`` (n × k integers, e.g. floats viewed as their bits):
    ``first`` the index of each distinct row's first occurrence, ``inverse`` per row the position of its row
    in ``first`` (``bits[first][inverse]`` equals ``bits``). What ``np.unique(..., axis=0, return_index=True,
    return_inverse=True)`` gives up to the order of the distinct rows, by one stable lexsort of the columns
    (several times faster than np.unique's sort of rows as structured or void values)."""
    n = bits.shape[0]
    if n == 0:
        return np.empty(0, dtype=np.intp), np.empty(0, dtype=np.intp)
    order = np.lexsort(bits.T[::-1])  # stable: each run of equal rows starts with its first occurrence
    ranked = bits[order]
    new = np.empty(n, dtype=bool)
    new[0] = True
    np.any(ranked[1:] != ranked[:-1], axis=1, out=new[1:])
    inverse = np.empty(n, dtype=np.intp)
    inverse[order] = np.cumsum(new) - 1
    return order[new], inverse


def _unary(fn: Callable[[float], float], x: Any) -> np.ndarray:
    """``fn`` on every element of ``x`` (float64), evaluated once per distinct bit pattern."""
    arr = np.asarray(x, dtype=np.float64)
    if arr.size <= _DIRECT:
        return np.fromiter(map(fn, arr.ravel().tolist()), dtype=np.float64, count=arr.size).reshape(arr.shape)
    bits, inv = np.unique(np.ascontiguousarray(arr).ravel().view(np.int64), return_inverse=True)  # by bits: -0.0 != 0.0
    vals = np.fromiter((fn(v) for v in bits.view(np.float64).tolist()), dtype=np.float64, count=bits.size)
    return vals[inv.reshape(-1)].reshape(arr.shape)


def _binary(fn: Callable[[float, float], float], a: Any, b: Any) -> np.ndarray:
    """``fn`` on every broadcast pair of ``a`` and ``b`` (float64), evaluated once per distinct pair."""
    x, y = np.broadcast_arrays(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64))
    if x.size <= _DIRECT:
        return np.fromiter(map(fn, x.ravel().tolist(), y.ravel().tolist()), dtype=np.float64,
                           count=x.size).reshape(x.shape)
    pairs = np.stack([x.ravel(), y.ravel()], axis=1)
    first, inv = distinct_rows(pairs.view(np.int64))  # by bits: -0.0 != 0.0
    vals = np.fromiter((fn(p, q) for p, q in pairs[first].tolist()), dtype=np.float64, count=len(first))
    return vals[inv].reshape(x.shape)


def asarray(x: Any) -> Any:
    """A float, or a float64 array (what ``np.asarray(x, dtype=np.float64)`` gives for non-scalars)."""
    if type(x) is float:  # the scalar path's common case, checked first
        return x
    if isinstance(x, _Num):
        return float(x)
    return x if type(x) is _Sym else np.asarray(x, dtype=np.float64)  # a traced value stays one (wattgpu.trace)


def log(x: Any) -> Any:
    if type(x) is float or isinstance(x, _Num):
        return _log(float(x))
    return _traced(log, x) if type(x) is _Sym else _unary(_log, x)


def exp(x: Any) -> Any:
    if type(x) is float or isinstance(x, _Num):
        return _exp(float(x))
    return _traced(exp, x) if type(x) is _Sym else _unary(_exp, x)


def expm1(x: Any) -> Any:
    if isinstance(x, _Num):
        return _expm1(float(x))
    return _traced(expm1, x) if type(x) is _Sym else _unary(_expm1, x)


def power(a: Any, b: Any) -> Any:
    if isinstance(a, _Num) and isinstance(b, _Num):
        return _pow(float(a), float(b))
    return _traced(power, a, b) if type(a) is _Sym or type(b) is _Sym else _binary(_pow, a, b)


def _is_num(a: Any) -> bool:
    return type(a) is float or isinstance(a, _Num)


def maximum(a: Any, b: Any) -> Any:
    """NaN wins; ``a`` when ``a > b``, else ``b`` (a tie of ±0 gives ``b``): one rule for floats and arrays."""
    if type(a) is float and type(b) is float:  # the scalar path's common case, checked first
        return a if (a > b or a != a) else b
    if _is_num(a) and _is_num(b):
        return float(a if (a > b or a != a) else b)
    if type(a) is _Sym or type(b) is _Sym:
        return _traced(maximum, a, b)
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return np.where((a > b) | (a != a), a, b)


def minimum(a: Any, b: Any) -> Any:
    """NaN wins; ``a`` when ``a < b``, else ``b``."""
    if type(a) is float and type(b) is float:
        return a if (a < b or a != a) else b
    if _is_num(a) and _is_num(b):
        return float(a if (a < b or a != a) else b)
    if type(a) is _Sym or type(b) is _Sym:
        return _traced(minimum, a, b)
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return np.where((a < b) | (a != a), a, b)


def fmin(a: Any, b: Any) -> Any:
    """NaN loses; ``a`` when ``a <= b`` (or ``b`` is NaN), else ``b``."""
    if _is_num(a) and _is_num(b):
        return float(a if (a <= b or b != b) else b)
    if type(a) is _Sym or type(b) is _Sym:
        return _traced(fmin, a, b)
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return np.where((a <= b) | (b != b), a, b)


def clip(x: Any, lo: Any, hi: Any) -> Any:
    """``lo`` below it, ``hi`` above it, else ``x`` (NaN stays NaN)."""
    if isinstance(x, _Num) and isinstance(lo, _Num) and isinstance(hi, _Num):
        return float(lo if x < lo else hi if x > hi else x)
    if type(x) is _Sym or type(lo) is _Sym or type(hi) is _Sym:
        return _traced(clip, x, lo, hi)
    x, lo, hi = (np.asarray(v, dtype=np.float64) for v in (x, lo, hi))
    return np.where(x < lo, lo, np.where(x > hi, hi, x))


def floor(x: Any) -> Any:
    if isinstance(x, _Num):  # |x| >= 2**52 (and inf, NaN, ±0) is already its own floor: no big-int detour
        return float(math.floor(x)) if -_INTEGRAL < x < _INTEGRAL and x != 0 else float(x)
    return _traced(floor, x) if type(x) is _Sym else np.floor(x)


def where(cond: Any, a: Any, b: Any) -> Any:
    """``a`` where ``cond`` else ``b`` (both already evaluated, as with numpy)."""
    if type(cond) is bool and type(a) is float and type(b) is float:  # the scalar path's common case
        return a if cond else b
    if (type(cond) is bool or isinstance(cond, np.bool_)) and isinstance(a, _Num) and isinstance(b, _Num):
        return float(a if cond else b)
    if type(cond) is _Sym or type(a) is _Sym or type(b) is _Sym:
        return _traced(where, cond, a, b)
    return np.where(cond, a, b)


# The float branches above as expressions, recorded inline by wattgpu.trace (a call costs more than the comparison):
# the same comparisons in the same order, held equal to the functions by tests/test_compiled_path.py.
_trace_inline.update({
    maximum: ((float, float), "({0} if ({0} > {1} or {0} != {0}) else {1})"),
    minimum: ((float, float), "({0} if ({0} < {1} or {0} != {0}) else {1})"),
    fmin: ((float, float), "({0} if ({0} <= {1} or {1} != {1}) else {1})"),
    clip: ((float, float, float), "({1} if {0} < {1} else {2} if {0} > {2} else {0})"),
    where: ((bool, float, float), "({1} if {0} else {2})"),
})


def isnan(x: Any) -> Any:
    if type(x) is float or isinstance(x, _Num):
        return x != x
    return _traced(isnan, x) if type(x) is _Sym else np.isnan(x)


def isfinite(x: Any) -> Any:
    if isinstance(x, _Num):
        return math.isfinite(x)
    return _traced(isfinite, x) if type(x) is _Sym else np.isfinite(x)


def logical_not(x: Any) -> Any:
    if isinstance(x, (bool, np.bool_)):
        return not x
    return _traced(logical_not, x) if type(x) is _Sym else np.logical_not(x)


def as_float(cond: Any) -> Any:
    """A truth value (or array of them) as 1.0 / 0.0."""
    if isinstance(cond, (bool, np.bool_)):
        return float(cond)
    return _traced(as_float, cond) if type(cond) is _Sym else np.asarray(cond, dtype=np.float64)

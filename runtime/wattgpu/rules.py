"""Field rules: one table entry per validated field gives its type, range and unit.

The same rule checks a value from the Python API (``check``) and parses a text cell from a CSV row
or a command-line string (``parse``), so both refuse the same values with the same accepted range.
Adding a validated field is one line in a table such as :data:`wattgpu.workload.WORKLOAD_NUMBERS`.
"""
from __future__ import annotations

import math
import re
from typing import Any, TypeGuard

from .frozen import dataclass
from .errors import SpecValidationError

# A plain decimal number: no "nan", "inf", "0x10", "1_000" or surrounding junk (Python's float() takes all of those).
_NUMBER_RE = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
MAX_NUMBER_TEXT = 64


def is_finite_number(v: Any) -> TypeGuard[int | float]:
    """True for a finite int or float (true/false are not numbers; an int too large for a float is not finite)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    try:
        return math.isfinite(v)
    except OverflowError:  # 10**400 from a JSON document
        return False


def fmt_bound(x: float) -> str:
    """A range bound as people write it: 65,536 and 1,048,576 in full, 1e-06 and 1e+09 short."""
    if float(x).is_integer() and abs(x) < 1e7:
        return f"{int(x):,}"
    return f"{x:g}"


@dataclass(frozen=True)
class NumberRule:
    """A finite number in ``[lo, hi]`` (``integer``: a whole number; ``optional``: None allowed)."""

    lo: float
    hi: float
    unit: str = ""
    integer: bool = False
    optional: bool = False
    open_lo: bool = False  # lo itself excluded (e.g. a rate > 0)

    @property
    def expected(self) -> str:
        kind = "an integer" if self.integer else "a finite number"
        unit = f" {self.unit}" if self.unit else ""
        if self.hi >= 1.7e308:  # no upper bound worth printing
            return f"{kind} {'>' if self.open_lo else '≥'} {fmt_bound(self.lo)}{unit}" + (" (or empty)" if self.optional else "")
        return f"{kind} in [{fmt_bound(self.lo)}, {fmt_bound(self.hi)}]{unit}" + (" (or empty)" if self.optional else "")

    def check(self, entity: str, name: str, value: Any) -> float | int | None:
        """``value`` as a float (int when ``integer``), or a SpecValidationError naming the field."""
        if value is None and self.optional:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise SpecValidationError(entity, name, value, self.expected)
        try:
            v = float(value)
        except OverflowError:  # an int too large for a float
            raise SpecValidationError(entity, name, value, self.expected) from None
        if not math.isfinite(v) or not self.lo <= v <= self.hi or (self.integer and v != int(v)) \
                or (self.open_lo and v == self.lo):
            raise SpecValidationError(entity, name, value, self.expected)
        return int(v) if self.integer else v

    def parse(self, entity: str, name: str, text: str) -> float | int | None:
        """A text cell ("12", "0.5", "1e3") checked like :meth:`check`; empty means None."""
        t = text.strip()
        if not t:
            return self.check(entity, name, None)
        if len(t) > MAX_NUMBER_TEXT or not _NUMBER_RE.fullmatch(t):
            raise SpecValidationError(entity, name, text, self.expected)
        return self.check(entity, name, float(t))


@dataclass(frozen=True)
class ChoiceRule:
    """One of a fixed set of names; ``aliases`` maps other spellings (lower-cased) onto them."""

    choices: tuple[str, ...]
    aliases: tuple[tuple[str, str], ...] = ()

    @property
    def expected(self) -> str:
        return f"one of {', '.join(self.choices)}"

    def check(self, entity: str, name: str, value: Any) -> str:
        if isinstance(value, str) and value in self.choices:
            return value
        key = value.strip().lower().replace(" ", "_") if isinstance(value, str) else None
        for alias, canonical in self.aliases:
            if key == alias:
                return canonical
        raise SpecValidationError(entity, name, value, self.expected)

    def parse(self, entity: str, name: str, text: str) -> str:
        return self.check(entity, name, text.strip())

    @property
    def spellings(self) -> tuple[str, ...]:
        """Every accepted spelling (the choices, then the aliases), for an OpenAPI enum or a CLI choice list."""
        return tuple(dict.fromkeys((*self.choices, *(alias for alias, _ in self.aliases))))

"""``dataclass(frozen=True)`` without most of its import-time code generation.

The standard decorator writes each class's ``__init__``, ``__repr__``, ``__eq__``, ``__hash__``,
``__setattr__`` and ``__delattr__`` as source text and compiles each one (~0.1 ms a method): the fourteen
frozen dataclasses a first prediction imports cost ~9 ms of a ~40 ms cold start. Here the standard
decorator still collects the fields (so ``fields``, ``replace``, ``asdict``, ``is_dataclass``, pickling
and subclassing behave as before), only ``__init__`` is compiled (one function), and ``__repr__``,
``__eq__``, ``__hash__`` and the frozen ``__setattr__``/``__delattr__`` are closures over the field
names (under a dataclass base the standard decorator still writes the last two, as it checks frozen there), with the same results and errors as the generated ones (tests/test_frozen.py holds them to the
standard decorator's, and every runtime record's ``__init__`` signature to the standard one's).

Type checkers see :func:`dataclasses.dataclass` itself. Any other option than ``frozen=True`` goes to the
standard decorator unchanged. Not supported here (a TypeError says so): ``InitVar`` and ``kw_only`` fields.
"""
from __future__ import annotations

import dataclasses
import sys
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Callable

__all__ = ["dataclass"]


class _FactorySentinel:
    """The default an ``__init__`` shows for a field with a ``default_factory`` (as the standard one does)."""

    def __repr__(self) -> str:
        return "<factory>"


_FACTORY = _FactorySentinel()


def _tuple_getter(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    """obj -> (obj.<name>, ...) for ``names`` (a tuple for every length, as the generated methods compare)."""
    if not names:
        return lambda obj: ()
    if len(names) == 1:
        get1 = attrgetter(names[0])
        return lambda obj: (get1(obj),)
    return attrgetter(*names)


def _eq(names: tuple[str, ...]) -> Callable[[Any, Any], Any]:
    """The standard ``__eq__`` over the compared fields ``names``: up to Python 3.12 the two tuples of them
    compared (identical elements equal, so a NaN field equals itself); from 3.13 ``self is other``, then the
    fields compared one by one with ``==`` and ``and`` (a NaN field is unequal)."""
    compared = _tuple_getter(names)

    def eq_tuples(self: Any, other: Any) -> Any:
        if other.__class__ is self.__class__:
            return compared(self) == compared(other)
        return NotImplemented

    def eq_fields(self: Any, other: Any) -> Any:
        if self is other:
            return True
        if other.__class__ is self.__class__:
            result: Any = True
            for name in names:  # a == b and c == d and ...: the first false result, else the last
                result = getattr(self, name) == getattr(other, name)
                if not result:
                    return result
            return result
        return NotImplemented

    fn = eq_tuples if sys.version_info < (3, 13) else eq_fields
    fn.__name__ = "__eq__"
    return fn


def _init_source(flds: list[dataclasses.Field], post_init: bool) -> tuple[str, dict[str, Any]]:
    """The ``__init__`` of fields ``flds``: its source text and the globals it reads (defaults, factories)."""
    params, body = ["self"], ["_d = self.__dict__"]
    names: dict[str, Any] = {"_FACTORY": _FACTORY}
    for i, f in enumerate(flds):
        has_default = f.default is not dataclasses.MISSING
        has_factory = f.default_factory is not dataclasses.MISSING
        if has_default:
            names[f"_dflt{i}"] = f.default
        if has_factory:
            names[f"_fact{i}"] = f.default_factory
        if f.init:
            params.append(f.name + (f"=_dflt{i}" if has_default else "=_FACTORY" if has_factory else ""))
            if has_factory:
                body.append(f"_d[{f.name!r}] = _fact{i}() if {f.name} is _FACTORY else {f.name}")
            else:
                body.append(f"_d[{f.name!r}] = {f.name}")
        elif has_factory:
            body.append(f"_d[{f.name!r}] = _fact{i}()")
        # (a field out of __init__ with a plain default is read from the class attribute, as the standard one does)
    if post_init:
        body.append("self.__post_init__()")
    return "def __init__(" + ", ".join(params) + "):\n    " + "\n    ".join(body) + "\n", names


def _check_supported(cls: type) -> list[dataclasses.Field]:
    """The fields of ``cls`` (after the standard decorator), or a TypeError for what this module does not do."""
    initvar = getattr(dataclasses, "_FIELD_INITVAR", None)
    flds = list(dataclasses.fields(cls))
    every = getattr(cls, "__dataclass_fields__").values()
    if initvar is not None and any(getattr(f, "_field_type", None) is initvar for f in every):
        raise TypeError(f"{cls.__qualname__}: InitVar fields need dataclasses.dataclass (wattgpu.frozen does not "
                        "write them)")
    if any(getattr(f, "kw_only", False) is True for f in flds):
        raise TypeError(f"{cls.__qualname__}: kw_only fields need dataclasses.dataclass (wattgpu.frozen does not "
                        "write them)")
    return flds


def _set_frozen(cls: type, names: frozenset[str]) -> None:
    """The standard frozen ``__setattr__``/``__delattr__`` of ``cls`` (fields ``names``), as closures."""
    def __setattr__(self: Any, name: str, value: Any) -> None:
        if type(self) is cls or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
        super(cls, self).__setattr__(name, value)  # type: ignore[arg-type]

    def __delattr__(self: Any, name: str) -> None:
        if type(self) is cls or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)  # type: ignore[arg-type]

    for fn in (__setattr__, __delattr__):
        if fn.__name__ in cls.__dict__:  # what the standard decorator refuses
            raise TypeError(f"Cannot overwrite attribute {fn.__name__} in class {cls.__name__}")
        fn.__qualname__ = f"{cls.__qualname__}.{fn.__name__}"
        setattr(cls, fn.__name__, fn)


def _frozen(cls: type) -> type:
    """``cls`` as ``dataclasses.dataclass(frozen=True)`` makes it, with the methods written as described above."""
    own = dict(cls.__dict__)
    if not own.get("__doc__"):  # the standard decorator would read the builtin object.__init__'s signature (~6 ms)
        cls.__doc__ = "(written below)"
    # Under a dataclass base the standard decorator checks frozen against the base's and writes the frozen
    # methods itself (two small compiles); a class of its own gets them as closures below.
    derived = any(dataclasses.is_dataclass(base) for base in cls.__mro__[1:])
    cls = dataclasses.dataclass(cls, init=False, repr=False, eq=False, frozen=derived)
    flds = _check_supported(cls)
    params = getattr(cls, "__dataclass_params__")
    params.init = params.repr = params.eq = params.frozen = True  # what the class now is
    if not derived:
        _set_frozen(cls, frozenset(f.name for f in flds))
    if "__init__" not in own:
        source, env = _init_source(flds, hasattr(cls, "__post_init__"))
        try:
            code = compile(source, f"<wattgpu.frozen {cls.__qualname__}.__init__>", "exec")
        except SyntaxError:  # what the standard decorator refuses with a TypeError
            raise TypeError(f"{cls.__qualname__}: a field without a default follows one with a default") from None
        exec(code, env)
        init = env["__init__"]
        init.__qualname__ = f"{cls.__qualname__}.__init__"
        init.__module__ = cls.__module__
        init.__annotations__ = {**{f.name: f.type for f in flds if f.init}, "return": None}
        cls.__init__ = init  # type: ignore[misc]
    if "__repr__" not in own:
        shown = tuple(f.name for f in flds if f.repr)

        def __repr__(self: Any) -> str:
            return (f"{self.__class__.__qualname__}("
                    + ", ".join(f"{n}={getattr(self, n)!r}" for n in shown) + ")")

        __repr__.__qualname__ = f"{cls.__qualname__}.__repr__"
        cls.__repr__ = __repr__  # type: ignore[assignment]
    if "__eq__" not in own:
        eq = _eq(tuple(f.name for f in flds if f.compare))
        eq.__qualname__ = f"{cls.__qualname__}.__eq__"
        cls.__eq__ = eq  # type: ignore[assignment]
    explicit_hash = "__hash__" in own and not (own["__hash__"] is None and "__eq__" in own)
    if not explicit_hash:
        hashed = _tuple_getter(tuple(f.name for f in flds if (f.compare if f.hash is None else f.hash)))

        def __hash__(self: Any) -> int:
            return hash(hashed(self))

        __hash__.__qualname__ = f"{cls.__qualname__}.__hash__"
        cls.__hash__ = __hash__  # type: ignore[assignment]
    if not own.get("__doc__"):  # the standard decorator writes the signature where a class has no docstring
        import inspect

        cls.__doc__ = cls.__name__ + str(inspect.signature(cls)).replace(" -> None", "")
    return cls


if TYPE_CHECKING:
    from dataclasses import dataclass as dataclass
else:
    def dataclass(cls: type | None = None, /, *, frozen: bool = False, **options: Any) -> Any:
        """``dataclasses.dataclass``: with ``frozen=True`` alone, the class written as this module says."""
        if not frozen or options:
            return dataclasses.dataclass(cls, frozen=frozen, **options)  # cls None: the decorator, as there
        return _frozen if cls is None else _frozen(cls)

"""wattgpu.frozen.dataclass(frozen=True) behaves as dataclasses.dataclass(frozen=True): the same signature,
repr, equality, hash, frozen errors, replace/asdict/fields/pickle and argument errors, on classes using every
feature the runtime's records use; and every runtime record class has the standard __init__ signature."""
from __future__ import annotations

import copy
import dataclasses
import importlib
import inspect
import pickle
import pkgutil
import re
from typing import Any, Callable

import pytest

import wattgpu
from wattgpu import frozen


def _classes(decorate: Callable[..., Any]) -> dict[str, type]:
    """The same class definitions, decorated by ``decorate``."""

    @decorate(frozen=True)
    class Plain:
        """Required fields only."""

        a: int
        b: str

    @decorate(frozen=True)
    class Defaults:
        """Defaults, a factory, a field left out of repr and comparison, and a field not in __init__."""

        a: int
        b: float = 1.5
        c: dict[str, Any] = dataclasses.field(default_factory=dict)
        d: tuple[int, ...] = ()
        hidden: str = dataclasses.field(default="h", repr=False, compare=False)
        later: list[int] = dataclasses.field(init=False, default_factory=list)
        const: int = dataclasses.field(init=False, default=7)

    @decorate(frozen=True)
    class Post:
        """A __post_init__ that validates and derives a field."""

        x: float
        doubled: float = 0.0

        def __post_init__(self) -> None:
            if self.x < 0:
                raise ValueError("x < 0")
            object.__setattr__(self, "doubled", 2 * self.x)

    @decorate(frozen=True)
    class Child(Defaults):
        """A record under a record."""

        extra: int = 3

    @decorate(frozen=True)
    class OwnEq:
        """An explicit __eq__ (kept) without __hash__ (written)."""

        v: int

        def __eq__(self, other: object) -> bool:
            return isinstance(other, OwnEq) and abs(self.v - other.v) < 2

    @decorate(frozen=True)
    class OwnHash:
        """An explicit __hash__ (kept)."""

        v: int

        def __hash__(self) -> int:
            return 12345

    @decorate(frozen=True)
    class Empty:
        """No fields."""

    @decorate(frozen=True)
    class One:
        v: float

    @decorate(frozen=True)
    class HashFlag:
        """hash=False on a compared field."""

        a: int
        b: int = dataclasses.field(default=0, hash=False)

    return {c.__name__: c for c in (Plain, Defaults, Post, Child, OwnEq, OwnHash, Empty, One, HashFlag)}


OURS = _classes(frozen.dataclass)
STD = _classes(dataclasses.dataclass)

# (class name, args, kwargs) constructions, each valid for both
CASES = [("Plain", (1, "x"), {}), ("Plain", (), {"a": 2, "b": "y"}), ("Defaults", (1,), {}),
         ("Defaults", (1, 2.5, {"k": 1}, (1, 2), "z"), {}), ("Defaults", (3,), {"hidden": "other"}),
         ("Post", (2.0,), {}), ("Child", (1,), {"extra": 9}), ("Child", (1, 2.0), {"c": {"q": 2}}),
         ("OwnEq", (5,), {}), ("OwnHash", (5,), {}), ("Empty", (), {}), ("One", (float("nan"),), {}),
         ("One", (0.5,), {}), ("HashFlag", (1, 2), {})]


def _pair(name: str, args: tuple, kwargs: dict) -> tuple[Any, Any]:
    return OURS[name](*args, **kwargs), STD[name](*args, **kwargs)


def _hash(x: Any) -> tuple[str, Any]:
    """("ok", hash(x)), or ("TypeError", message) where x cannot be hashed."""
    try:
        return "ok", hash(x)
    except TypeError as exc:
        return "TypeError", str(exc)


def _norm(text: str) -> str:
    """A message without the class's qualified name (the test's local classes differ only there)."""
    return re.sub(r"[\w.<>]*__init__\(\)", "__init__()", text)


@pytest.mark.parametrize("name", sorted(OURS))
def test_class_surface_is_the_standard_one(name: str) -> None:
    ours, std = OURS[name], STD[name]
    assert str(inspect.signature(ours)) == str(inspect.signature(std))
    assert ours.__doc__.replace(ours.__qualname__, "") == std.__doc__.replace(std.__qualname__, "")
    assert [(f.name, f.init, f.repr, f.compare) for f in dataclasses.fields(ours)] == \
        [(f.name, f.init, f.repr, f.compare) for f in dataclasses.fields(std)]
    assert ours.__match_args__ == std.__match_args__
    assert dataclasses.is_dataclass(ours)
    p, q = ours.__dataclass_params__, std.__dataclass_params__
    assert (p.init, p.repr, p.eq, p.frozen) == (q.init, q.repr, q.eq, q.frozen) == (True, True, True, True)
    assert (ours.__hash__ is None) == (std.__hash__ is None)


@pytest.mark.parametrize("name, args, kwargs", CASES)
def test_instances_behave_as_the_standard_ones(name: str, args: tuple, kwargs: dict) -> None:
    a, b = _pair(name, args, kwargs)
    a2, b2 = _pair(name, args, kwargs)
    assert repr(a).replace(type(a).__qualname__, "") == repr(b).replace(type(b).__qualname__, "")
    assert vars(a) == vars(b) or name == "One"  # NaN: compared below by identity rules
    assert (a == a2) == (b == b2) and (a != a2) == (b != b2)
    assert (a == a) == (b == b)
    assert (_hash(a) == _hash(a2)) == (_hash(b) == _hash(b2))
    assert _hash(a)[0] == _hash(b)[0]  # both hash, or both raise the same error (an unhashable dict field)
    if name not in ("OwnHash",):
        assert _hash(a) == _hash(tuple(getattr(a, f.name) for f in dataclasses.fields(a)
                                       if (f.compare if f.hash is None else f.hash)))
    assert (a == b) is False  # another class: NotImplemented both ways
    fields = [f.name for f in dataclasses.fields(a)]
    for field in fields[:2]:
        with pytest.raises(dataclasses.FrozenInstanceError) as ours_err:
            setattr(a, field, 1)
        with pytest.raises(dataclasses.FrozenInstanceError) as std_err:
            setattr(b, field, 1)
        assert str(ours_err.value) == str(std_err.value)
        with pytest.raises(dataclasses.FrozenInstanceError) as ours_err:
            delattr(a, field)
        with pytest.raises(dataclasses.FrozenInstanceError) as std_err:
            delattr(b, field)
        assert str(ours_err.value) == str(std_err.value)
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.not_a_field = 1  # type: ignore[attr-defined]
    if fields:
        init_fields = [f.name for f in dataclasses.fields(a) if f.init]
        if init_fields:
            changed = dataclasses.replace(a, **{init_fields[0]: getattr(a, init_fields[0])})
            assert changed == a or name == "One"
            assert type(changed) is type(a)
    assert dataclasses.asdict(a).keys() == dataclasses.asdict(b).keys()
    back = copy.deepcopy(a)  # the reduce protocol pickle uses (local classes cannot be pickled by name)
    assert type(back) is type(a) and vars(back).keys() == vars(a).keys()


def test_runtime_records_pickle() -> None:
    p = wattgpu.predict("NVIDIA A100 SXM4 40GB", "meta-llama/Llama-3.1-8B-Instruct")
    for obj in (p, wattgpu.Workload(kind="server", qps=2.0), p.itl_intervals[0]):
        back = pickle.loads(pickle.dumps(obj))
        assert back == obj and _hash(back) == _hash(obj)


def test_factories_give_each_instance_its_own_object_and_post_init_runs() -> None:
    a, b = OURS["Defaults"](1), OURS["Defaults"](1)
    assert a.c == {} and a.c is not b.c and a.later == [] and a.later is not b.later and a.const == 7
    assert OURS["Post"](3.0).doubled == 6.0
    with pytest.raises(ValueError, match="x < 0"):
        OURS["Post"](-1.0)
    child = OURS["Child"](1, extra=4)
    assert (child.a, child.b, child.extra) == (1, 1.5, 4)
    assert OURS["OwnEq"](5) == OURS["OwnEq"](6) and hash(OURS["OwnEq"](5)) != hash(OURS["OwnEq"](6))
    assert hash(OURS["OwnHash"](1)) == 12345
    assert OURS["Defaults"](1, hidden="a") == OURS["Defaults"](1, hidden="b")
    assert hash(OURS["HashFlag"](1, 2)) == hash(OURS["HashFlag"](1, 3))


@pytest.mark.parametrize("name, args, kwargs", [
    ("Plain", (1,), {}), ("Plain", (1, "x", 3), {}), ("Plain", (1, "x"), {"nope": 1}),
    ("Plain", (1,), {"a": 1, "b": "y"}), ("Defaults", (), {}), ("Defaults", (1,), {"later": []}),
    ("Empty", (1,), {}),
])
def test_argument_errors_are_the_standard_ones(name: str, args: tuple, kwargs: dict) -> None:
    with pytest.raises(TypeError) as ours:
        OURS[name](*args, **kwargs)
    with pytest.raises(TypeError) as std:
        STD[name](*args, **kwargs)
    assert _norm(str(ours.value)) == _norm(str(std.value))


def test_what_it_does_not_write_is_refused_or_left_to_the_standard_decorator() -> None:
    with pytest.raises(TypeError, match="InitVar"):
        @frozen.dataclass(frozen=True)
        class WithInitVar:
            """An InitVar."""

            a: dataclasses.InitVar[int]
    with pytest.raises(TypeError, match="kw_only"):
        @frozen.dataclass(frozen=True)
        class KwOnly:
            """A kw_only field."""

            a: int = dataclasses.field(kw_only=True)
    with pytest.raises(TypeError, match="follows one with a default"):
        @frozen.dataclass(frozen=True)
        class Order:
            """A required field after a default."""

            a: int = 1
            b: int  # type: ignore[misc]

    @frozen.dataclass(order=True)
    class Mutable:
        """Not frozen: the standard decorator, ordering included."""

        a: int

    m = Mutable(1)
    m.a = 2
    assert Mutable(1) < m and not Mutable.__init__.__code__.co_filename.startswith("<wattgpu.frozen")


def _runtime_records() -> list[type]:
    out = []
    for info in pkgutil.walk_packages(wattgpu.__path__, "wattgpu."):
        if info.name.endswith("__main__"):
            continue  # running a command
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if (isinstance(value, type) and value.__module__ == module.__name__ and dataclasses.is_dataclass(value)
                    and "__dataclass_params__" in vars(value) and value.__dataclass_params__.frozen):  # decorated itself
                out.append(value)
    return out


def _standard_signature(cls: type) -> str:
    """The signature dataclasses would give ``cls``'s __init__: its init fields, defaults, <factory>."""
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        default = (f.default if f.default is not dataclasses.MISSING else frozen._FACTORY
                   if f.default_factory is not dataclasses.MISSING else inspect.Parameter.empty)
        params.append(inspect.Parameter(f.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default,
                                        annotation=f.type))
    return str(inspect.Signature(params, return_annotation=None))


def test_every_frozen_runtime_record_is_written_here_with_the_standard_signature() -> None:
    records = _runtime_records()
    names = {c.__qualname__ for c in records}
    # the records a first prediction imports are among them (the point of the module)
    assert {"GpuSpec", "LlmSpec", "Workload", "Prediction", "Interval", "RankEntry", "FeatureSchema"} <= names
    for cls in records:
        # every frozen record of the runtime is written by wattgpu.frozen (a new one from dataclasses would cost
        # its code generation at import again)
        assert cls.__init__.__code__.co_filename.startswith("<wattgpu.frozen"), cls
        assert str(inspect.signature(cls.__init__)) == _standard_signature(cls), cls
        assert cls.__dataclass_params__.frozen and cls.__doc__ and not cls.__doc__.startswith("(written")

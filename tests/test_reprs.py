"""`fields_repr`, `fields_eq` and `fields_hash` do what attrs' compiled methods do, and every
class uses them."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from typing import Any

import attrs
import pytest

import agentrt
from agentrt.models.messages import ReasoningDelta
from agentrt.models.messages import TextDelta
from agentrt.models.messages import ToolCallDelta
from agentrt.models.streaming import SSEEvent
from agentrt.vocab.events import ReasoningEvent
from agentrt.vocab.events import TextEvent
from agentrt.vocab.reprs import fields_eq
from agentrt.vocab.reprs import fields_hash
from agentrt.vocab.reprs import fields_repr
from agentrt.vocab.reprs import mutable
from agentrt.vocab.reprs import quick_init
from agentrt.vocab.reprs import record


def _pair(**fields: Any) -> tuple[type, type]:
    """The same attrs class built twice: with attrs' own repr, and with `fields_repr`."""
    compiled = attrs.define(type("Thing", (), dict(fields)))
    ours = attrs.define(type("Thing", (), {**fields, "__repr__": fields_repr}))
    return compiled, ours


def test_plain_hidden_and_custom_fields_print_as_attrs_prints_them() -> None:
    compiled, ours = _pair(
        name=attrs.field(),
        secret=attrs.field(repr=False),
        size=attrs.field(repr=lambda value: f"<{value} bytes>"),
        tags=attrs.field(factory=list),
    )
    for args in [("a", "pw", 3), ('it\'s "quoted"\n', None, 0)]:
        assert repr(ours(*args)) == repr(compiled(*args))
        assert "pw" not in repr(ours(*args))


def test_a_field_not_set_by_init_prints_as_attrs_prints_it() -> None:
    compiled, ours = _pair(name=attrs.field(), late=attrs.field(init=False))
    assert repr(ours("x")) == repr(compiled("x")) == "Thing(name='x', late=NOTHING)"
    set_later = ours("x")
    set_later.late = 5
    assert repr(set_later) == "Thing(name='x', late=5)"


def test_an_object_inside_itself_prints_as_dots() -> None:
    compiled, ours = _pair(children=attrs.field(factory=list))
    for cls in (compiled, ours):
        node = cls()
        node.children.append(node)
        assert repr(node) == "Thing(children=[...])"
    outer = ours([ours()])
    assert repr(outer) == "Thing(children=[Thing(children=[])])"


def test_a_nested_class_prints_its_short_name() -> None:
    def build() -> Any:
        @record
        class Inner:
            value: int

        return Inner

    assert repr(build()(1)) == "Inner(value=1)"


def _compiled_by_attrs(method: Any) -> bool:
    code = getattr(method, "__code__", None)
    return code is not None and code.co_filename.startswith("<attrs generated")


def test_every_attrs_class_of_the_package_uses_the_shared_methods() -> None:
    """A class that lets attrs compile its repr, eq or hash slows every command's start-up."""
    missing = []
    for info in pkgutil.walk_packages(agentrt.__path__, "agentrt."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if isinstance(value, type) and value.__module__ == module.__name__ and attrs.has(value):
                for name in ("__repr__", "__eq__", "__hash__"):
                    if _compiled_by_attrs(vars(value).get(name)):
                        missing.append(f"{module.__name__}.{value.__qualname__}.{name}")
    assert missing == []


def _eq_pair(frozen: bool, **fields: Any) -> tuple[type, type]:
    """The same attrs class built twice: with attrs' own eq and hash, and with ours."""
    make = attrs.frozen if frozen else attrs.define
    compiled = make(type("Thing", (), dict(fields)))
    shared = {"__eq__": fields_eq, **({"__hash__": fields_hash} if frozen else {})}
    ours = make(type("Thing", (), {**fields, **shared}))
    return compiled, ours


def test_fields_eq_and_hash_compare_as_attrs_compares() -> None:
    nan = float("nan")
    compiled, ours = _eq_pair(
        True,
        name=attrs.field(),
        note=attrs.field(eq=False),
        folded=attrs.field(eq=str.casefold, default=""),
    )
    cases = [
        (("a", 1, "X"), ("a", 2, "x")),  # a field left out, a key function applied
        (("a", 1, "X"), ("b", 1, "X")),
        ((nan, 1), (nan, 2)),  # the same object: equal, as in a tuple
        ((float("nan"), 1), (float("nan"), 1)),
        ((1, 0), (1.0, 0)),
    ]
    for left, right in cases:
        assert (ours(*left) == ours(*right)) == (compiled(*left) == compiled(*right))
        assert (ours(*left) != ours(*right)) == (compiled(*left) != compiled(*right))
        if ours(*left) == ours(*right):
            assert hash(ours(*left)) == hash(ours(*right))
    assert ours("a", 1, "X") == ours("a", 2, "x")
    assert ours("a", 1) != compiled("a", 1)  # another class, however alike
    assert ours("a", 1).__eq__(object()) is NotImplemented
    assert hash(ours("a", 1)) != hash(ours("b", 1))


def test_a_mutable_class_with_fields_eq_compares_by_fields_and_is_unhashable() -> None:
    compiled, ours = _eq_pair(False, name=attrs.field(), items=attrs.field(factory=list))
    assert ours("a", [1]) == ours("a", [1]) and ours("a", [1]) != ours("a", [2])
    for cls in (compiled, ours):
        with pytest.raises(TypeError):
            hash(cls("a"))


def test_record_is_a_frozen_attrs_class_with_the_shared_methods() -> None:
    @record
    class Point:
        x: int
        y: int = attrs.field(eq=False)

    assert vars(Point)["__repr__"] is fields_repr
    assert vars(Point)["__eq__"] is fields_eq and vars(Point)["__hash__"] is fields_hash
    assert repr(Point(1, 2)) == "Point(x=1, y=2)"
    assert Point(1, 2) == Point(1, 3) and hash(Point(1, 2)) == hash(Point(1, 3))
    assert Point(1, 2) != Point(2, 2)
    assert attrs.fields(Point).y.eq is False  # an attrs class, its field options kept
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        Point(1, 2).x = 3  # type: ignore[misc]


def test_mutable_keeps_a_method_of_the_class_own_and_leaves_eq_unhashable() -> None:
    @mutable
    class Box:
        items: list[int]

        def __repr__(self) -> str:
            return "a box"

    assert repr(Box([1])) == "a box"
    assert Box([1]) == Box([1]) and Box([1]) != Box([2])
    with pytest.raises(TypeError):
        hash(Box([1]))

    @mutable(eq=False)
    class Plain:
        name: str

    assert repr(Plain("a")) == "Plain(name='a')"
    assert "__eq__" not in vars(Plain) and Plain("a") != Plain("a")  # identity, as asked
    plain = Plain("a")
    plain.name = "b"
    assert repr(plain) == "Plain(name='b')"
    assert plain in {plain}  # hashable by identity, as attrs makes an eq=False class


def test_quick_init_builds_the_value_attrs_builds_and_keeps_it_frozen() -> None:
    @record
    class Slow:
        task: str
        text: str
        agent: str = ""
        count: int | None = None

    @quick_init
    @record
    class Quick:
        task: str
        text: str
        agent: str = ""
        count: int | None = None

    assert Quick.__init__.__code__ is not Slow.__init__.__code__
    assert inspect.signature(Quick) == inspect.signature(Slow)
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
        (("h", "t"), {}),
        (("h",), {"text": "t", "count": 3}),
        (("h", "t", "a", 1), {}),
    ]
    for args, kwargs in calls:
        quick, slow = Quick(*args, **kwargs), Slow(*args, **kwargs)
        assert attrs.asdict(quick) == attrs.asdict(slow)
        assert quick == Quick(*args, **kwargs) and hash(quick) == hash(Quick(*args, **kwargs))
    assert attrs.evolve(Quick("h", "t"), agent="b") == Quick("h", "t", "b")
    with pytest.raises(TypeError):
        Quick("h")  # type: ignore[call-arg]
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        Quick("h", "t").text = "other"  # type: ignore[misc]


@pytest.mark.parametrize(
    "field",
    [
        attrs.field(converter=str),
        attrs.field(validator=attrs.validators.instance_of(str)),
        attrs.field(factory=list),
        attrs.field(kw_only=True),
        attrs.field(alias="other"),
    ],
)
def test_quick_init_refuses_a_field_it_would_not_handle(field: Any) -> None:
    cls = attrs.frozen(type("Thing", (), {"__annotations__": {"value": "Any"}, "value": field}))
    with pytest.raises(TypeError, match="quick_init needs a slotted class of plain fields"):
        quick_init(cls)


def test_the_values_of_a_streamed_piece_have_the_quick_init() -> None:
    for cls in (SSEEvent, TextDelta, ReasoningDelta, ToolCallDelta, TextEvent, ReasoningEvent):
        assert cls.__init__.__code__.co_filename.startswith("<quick_init"), cls

"""`fields_repr` prints exactly what attrs' compiled `__repr__` prints, and every class uses it."""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

import attrs

import agentrt
from agentrt._reprs import fields_repr


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
        @attrs.frozen
        class Inner:
            __repr__ = fields_repr
            value: int

        return Inner

    assert repr(build()(1)) == "Inner(value=1)"


def test_every_attrs_class_of_the_package_uses_fields_repr() -> None:
    """A class that lets attrs compile its repr slows every command's start-up."""
    missing = []
    for info in pkgutil.walk_packages(agentrt.__path__, "agentrt."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and value.__module__ == module.__name__
                and attrs.has(value)
                and value.__repr__.__code__.co_filename.startswith("<attrs generated")
            ):
                missing.append(f"{module.__name__}.{value.__qualname__}")
    assert missing == []

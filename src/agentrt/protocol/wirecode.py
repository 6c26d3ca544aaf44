"""Compiled fast paths for turning frames into JSON objects and back.

`agentrt.frames`' converter (cattrs, with detailed validation) is the
definition of a frame's wire form and of every error a bad frame gets. It is
also tens of microseconds per frame, a large share of a cancel or an answer
between two processes. This module compiles, per frame class, a function of
a few lines that does the same for the ordinary case:

- `compile_encoder` gives the frame's JSON object, equal to the converter's.
- `compile_decoder` gives the frame for a JSON object whose every field is
  plainly valid (a string that UTF-8 can carry, an int that is not a bool, a
  known enum value, no unknown field), or None for anything else: the caller
  then asks the converter, which decides (and words the error) as before.

Classes inside a frame (the tasks of a listing page) get functions of their
own, and tuples of them, of strings, numbers, booleans or of JSON objects are
read item by item as strictly. A field of any other type goes through the converter's own hook
for that type, so the two paths cannot drift apart there.
`tests/test_wirecode.py` checks both against the converter for every frame
class.
"""

from __future__ import annotations

import enum
import functools
import keyword
from collections.abc import Callable
from typing import TYPE_CHECKING
from typing import Any
from typing import Union
from typing import get_args
from typing import get_origin

import attrs

if TYPE_CHECKING:
    import cattrs

Encoder = Callable[[Any], dict[str, Any]]
Decoder = Callable[[dict[str, Any]], Any]

_PLAIN = (str, int, bool, float)


def carries_utf8(value: str) -> bool:
    """Whether `value` has a UTF-8 form (no lone surrogate from a ``\\ud800`` escape)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _optional(kind: Any) -> tuple[Any, bool]:
    """(`kind` without None, whether None was one of its members)."""
    if get_origin(kind) in (Union, type(str | None)):
        members = [arg for arg in get_args(kind) if arg is not type(None)]
        if len(members) == 1 and len(members) < len(get_args(kind)):
            return members[0], True
    return kind, False


def _is_enum(kind: Any) -> bool:
    return isinstance(kind, type) and issubclass(kind, enum.Enum)


def _fields(cls: type) -> tuple[attrs.Attribute[Any], ...]:
    attrs.resolve_types(cls)
    fields: tuple[attrs.Attribute[Any], ...] = attrs.fields(cls)
    for field in fields:
        if not field.init or field.alias != field.name or not field.name.isidentifier():
            raise ValueError(f"{cls.__name__}.{field.name}: not a plain field")
        if keyword.iskeyword(field.name):
            raise ValueError(f"{cls.__name__}.{field.name}: a keyword")
    return fields


def _items_of(kind: Any) -> Any:
    """X of ``tuple[X, ...]``, else None."""
    args = get_args(kind)
    if get_origin(kind) is tuple and len(args) == 2 and args[1] is Ellipsis:
        return args[0]
    return None


def _is_object(kind: Any) -> bool:
    """``dict[str, Any]``: a JSON object, passed through as it is."""
    return get_origin(kind) is dict and get_args(kind) == (str, Any)


def compile_encoder(
    cls: type,
    conv: Callable[[], cattrs.Converter],
    *,
    tagged: bool = True,
) -> Encoder:
    """A function from a `cls` frame to its JSON object: ``type`` first, then each field.

    With `tagged` False, `cls` is a class inside a frame (a listed task): no
    ``type``. `conv` gives the converter; it is called only for a field of a
    type other than a string, a number, a boolean, an enum, a class inside a
    frame, or a tuple of one of those (or one of those or None).
    """
    names: dict[str, Any] = {}
    items = []
    if tagged:
        tag: str = cls.TYPE  # type: ignore[attr-defined]  # every frame class has one
        items.append(f"'type': {tag!r}")
    for field in _fields(cls):
        kind, optional = _optional(field.type)
        get = f"frame.{field.name}"
        inner = _items_of(kind)
        if kind in _PLAIN:
            value = get
        elif _is_enum(kind) or attrs.has(kind):
            if attrs.has(kind):
                names[f"_e_{field.name}"] = _nested_encoder(kind, conv)
                convert = f"_e_{field.name}({{}})"
            else:
                convert = "{}.value"
            if optional:
                value = f"(None if (v := {get}) is None else {convert.format('v')})"
            else:
                value = convert.format(get)
        elif inner in _PLAIN:
            value = f"list({get})"
        elif inner is not None and _is_enum(inner):
            value = f"[item.value for item in {get}]"
        elif inner is not None and attrs.has(inner):
            names[f"_e_{field.name}"] = _nested_encoder(inner, conv)
            value = f"[_e_{field.name}(item) for item in {get}]"
        else:
            hook = f"_h_{field.name}"
            names[hook] = conv().get_unstructure_hook(field.type)
            value = f"{hook}({get})"
        if optional and inner is not None:
            value = f"(None if {get} is None else {value})"
        items.append(f"{field.name!r}: {value}")
    source = "def encode(frame):\n    return {" + ", ".join(items) + "}\n"
    encoder: Encoder = _define(source, "encode", names)
    return encoder


@functools.cache
def _nested_encoder(cls: type, conv: Callable[[], cattrs.Converter]) -> Encoder:
    """`compile_encoder` of a class inside a frame, made once."""
    return compile_encoder(cls, conv, tagged=False)


@functools.cache
def _nested_decoder(cls: type, conv: Callable[[], cattrs.Converter]) -> Decoder:
    """`compile_decoder` of a class inside a frame, made once."""
    return compile_decoder(cls, conv, tagged=False)


def compile_decoder(
    cls: type, conv: Callable[[], cattrs.Converter], *, tagged: bool = True
) -> Decoder:
    """A function from a frame's JSON object to the `cls` frame, or None to ask the converter.

    The object's ``type`` has already been checked: it is allowed and skipped.
    With `tagged` False, `cls` is a class inside a frame, whose object has no
    ``type``. `conv` is called as `compile_encoder` says.
    """
    names: dict[str, Any] = {"_cls": cls, "_utf8": carries_utf8}
    fields = _fields(cls)
    allowed = frozenset([*(["type"] if tagged else []), *(field.name for field in fields)])
    names["_allowed"] = allowed
    lines = [
        "def decode(data):",
        "    for key in data:",
        "        if key not in _allowed:",
        "            return None",
        "    kwargs = {}",
    ]
    for field in fields:
        kind, optional = _optional(field.type)
        name = field.name
        required = field.default is attrs.NOTHING
        check = _check(name, kind, conv, names)
        if required:
            lines += [f"    if {name!r} not in data:", "        return None"]
            pad = "    "
        else:
            lines += [f"    if {name!r} in data:"]
            pad = "        "
        lines.append(f"{pad}v = data[{name!r}]")
        if optional:
            lines.append(f"{pad}if v is not None:")
            lines += [pad + "    " + line for line in check]
        else:
            lines += [pad + line for line in check]
        lines.append(f"{pad}kwargs[{name!r}] = v")
    lines += [
        "    try:",
        "        return _cls(**kwargs)",
        "    except (ValueError, TypeError):",
        "        return None",
    ]
    decoder: Decoder = _define("\n".join(lines) + "\n", "decode", names)
    return decoder


def _check(
    name: str,
    kind: Any,
    conv: Callable[[], cattrs.Converter],
    names: dict[str, Any],
    var: str = "v",
) -> list[str]:
    """Lines that leave `var` as the structured value of field `name`, or return None."""
    if kind is str:
        return [
            f"if type({var}) is not str or not ({var}.isascii() or _utf8({var})):",
            "    return None",
        ]
    if kind is int or kind is bool:
        return [f"if type({var}) is not {kind.__name__}:", "    return None"]
    if kind is float:
        return [
            f"if type({var}) is int:",
            f"    {var} = float({var})",
            f"elif type({var}) is not float:",
            "    return None",
        ]
    if _is_enum(kind):
        members = f"_members_{name}"
        names[members] = {member.value: member for member in kind if isinstance(member.value, str)}
        return [
            f"if type({var}) is not str:",
            "    return None",
            f"{var} = {members}.get({var})",
            f"if {var} is None:",
            "    return None",
        ]
    if attrs.has(kind):
        names[f"_d_{name}"] = _nested_decoder(kind, conv)
        return [
            f"if type({var}) is not dict:",
            "    return None",
            f"{var} = _d_{name}({var})",
            f"if {var} is None:",
            "    return None",
        ]
    if _is_object(kind):
        return [f"if type({var}) is not dict:", "    return None"]
    inner = _items_of(kind)
    if inner is not None and (inner in _PLAIN or attrs.has(inner) or _is_object(inner)):
        one = _check(name, inner, conv, names, "item")
        return [
            f"if type({var}) is not list:",
            "    return None",
            "items = []",
            f"for item in {var}:",
            *("    " + line for line in one),
            "    items.append(item)",
            f"{var} = tuple(items)",
        ]
    hook = f"_h_{name}"
    kind_name = f"_t_{name}"
    names[hook] = conv().get_structure_hook(kind)
    names[kind_name] = kind
    return [
        "try:",
        f"    {var} = {hook}({var}, {kind_name})",
        "except Exception:",
        "    return None",
    ]


def _define(source: str, name: str, names: dict[str, Any]) -> Any:
    scope: dict[str, Any] = dict(names)
    exec(compile(source, f"<agentrt wire {name}>", "exec"), scope)
    return scope[name]

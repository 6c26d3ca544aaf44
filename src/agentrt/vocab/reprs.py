"""One `__repr__` for every attrs class here, read from its fields when called.

attrs compiles a `__repr__` for each class it builds, and at start-up that
compiling is a third of what building a class costs: with some 180 classes,
tens of milliseconds of every command. A class built with `record` (for
`attrs.frozen`) or `mutable` (for `attrs.define`) gets `fields_repr` as its own
``__repr__``, so attrs compiles none (it leaves a class's own `__repr__` alone),
and prints exactly as attrs would have: the fields in
order, ``repr=False`` ones left out, a field's own repr function used, and
``...`` for an object already being printed further up.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING
from typing import Any
from typing import TypeVar

import attrs

_printing = threading.local()


def fields_repr(self: object) -> str:
    """The repr attrs would give `self`, an instance of an attrs class."""
    try:
        seen: set[int] = _printing.seen
    except AttributeError:
        seen = _printing.seen = set()
    if id(self) in seen:
        return "..."
    seen.add(id(self))
    try:
        cls: Any = type(self)
        parts = []
        for field in attrs.fields(cls):
            if field.repr is False:
                continue
            value = (
                getattr(self, field.name)
                if field.init
                else getattr(self, field.name, attrs.NOTHING)
            )
            shown = repr(value) if field.repr is True else field.repr(value)
            parts.append(f"{field.name}={shown}")
        return f"{cls.__qualname__.rsplit('>.', 1)[-1]}({', '.join(parts)})"
    finally:
        seen.discard(id(self))


# -- equality and hashing ----------------------------------------------------------
#
# attrs compiles an `__eq__` and, for a frozen class, a `__hash__` per class too: a
# third of what building a class still cost once its repr was shared. A class that
# `record` or `mutable` gives `fields_eq` (and, frozen, `fields_hash`) gets neither compiled and compares as attrs does: same class only, then each field with
# ``eq=True`` in order (through its ``eq`` key function, if any), ``and``-ed. A mutable
# class that shares `fields_eq` is unhashable, as attrs makes it.

_Compared = tuple[tuple[str, Callable[[Any], Any] | None], ...]


@functools.cache
def _compared(cls: Any, for_hash: bool) -> _Compared:
    """The fields `fields_eq` (or, `for_hash`, `fields_hash`) reads, with their key functions."""
    return tuple(
        (field.name, field.eq_key)
        for field in attrs.fields(cls)
        if (field.eq if not for_hash or field.hash is None else field.hash)
    )


def fields_eq(self: Any, other: object) -> Any:
    """The ``==`` attrs gives `self`, an instance of an attrs class (or NotImplemented)."""
    cls: Any = self.__class__
    compared = _compared(cls, False)
    if other.__class__ is not cls:
        return NotImplemented
    result: Any = True
    for name, key in compared:
        if key is None:
            result = getattr(self, name) == getattr(other, name)
        else:
            result = key(getattr(self, name)) == key(getattr(other, name))
        if not result:
            return result
    return result


def fields_hash(self: Any) -> int:
    """A hash that agrees with `fields_eq`, for a frozen attrs class."""
    cls: Any = self.__class__
    return hash(
        (
            cls,
            *(
                getattr(self, name) if key is None else key(getattr(self, name))
                for name, key in _compared(cls, True)
            ),
        )
    )


def _share(cls: Any, *, eq: bool, hash: bool) -> Any:
    """Give `cls` `fields_repr` (and, with `eq`, `fields_eq`; with `hash`, `fields_hash`).

    A method the class defines itself is kept. An ``__eq__`` given without a hash
    leaves the class unhashable, as a class statement that defines ``__eq__`` does.
    """
    shared: dict[str, object] = {"__repr__": fields_repr}
    if eq:
        shared["__eq__"] = fields_eq
        shared["__hash__"] = fields_hash if hash else None
    for name, method in shared.items():
        if name not in vars(cls):
            setattr(cls, name, method)
    return cls


# -- the decorators ------------------------------------------------------------------
#
# `record` is `attrs.frozen` and `mutable` is `attrs.define`, for a class that shares the
# methods above: each gives the class its own `fields_repr` (and `fields_eq`, and for a
# frozen class `fields_hash`) before attrs builds it, so attrs compiles none of them.
# Type checkers see attrs' own decorators, which is what these build.

if TYPE_CHECKING:
    from attrs import define as mutable
    from attrs import frozen as record
else:

    def record(maybe_cls=None, /, **options):
        """`attrs.frozen`, with the shared repr, ``==`` and hash (``eq=False``: the repr only)."""
        compares = options.get("eq", True) is not False

        def build(cls):
            return attrs.frozen(_share(cls, eq=compares, hash=compares), **options)

        return build if maybe_cls is None else build(maybe_cls)

    def mutable(maybe_cls=None, /, **options):
        """`attrs.define`, with the shared repr and ``==`` (``eq=False``: the repr only).

        A mutable class that compares by its fields is unhashable, as attrs makes it.
        """
        compares = options.get("eq", True) is not False

        def build(cls):
            return attrs.define(_share(cls, eq=compares, hash=False), **options)

        return build if maybe_cls is None else build(maybe_cls)


# -- a quicker constructor, for the values made at every streamed piece -------------------
#
# A frozen class's attrs ``__init__`` sets each field through ``object.__setattr__`` (the
# class's own refuses). Setting the slot through its own descriptor skips that lookup and
# costs half as much: for the three or four values a streamed piece of text is carried in
# (an SSE event, a delta, an event), a fair share of what the piece costs.

_Cls = TypeVar("_Cls", bound=type)


def quick_init(cls: _Cls) -> _Cls:
    """Give `cls`, a frozen slotted attrs class of plain fields, a quicker ``__init__``.

    It takes the same arguments and sets the same slots as attrs' own. Only for
    fields without a converter, validator, factory, alias or ``kw_only``, in a
    class without ``__attrs_post_init__``: anything else raises TypeError here,
    when the class is built, not at the first value.
    """
    fields = attrs.fields(cls)
    plain = not hasattr(cls, "__attrs_post_init__") and all(
        f.init
        and f.converter is None
        and f.validator is None
        and not f.kw_only
        and f.alias == f.name
        and not isinstance(f.default, attrs.Factory)  # type: ignore[arg-type]
        for f in fields
    )
    if not plain or "__slots__" not in vars(cls):
        raise TypeError(f"quick_init needs a slotted class of plain fields, not {cls.__name__}")
    namespace: dict[str, Any] = {}
    params, lines = [], []
    for n, field in enumerate(fields):
        descriptor = next(vars(k)[field.name] for k in cls.__mro__ if field.name in vars(k))
        namespace[f"_set{n}"] = descriptor.__set__
        if field.default is attrs.NOTHING:
            params.append(field.name)
        else:
            namespace[f"_default{n}"] = field.default
            params.append(f"{field.name}=_default{n}")
        lines.append(f"    _set{n}(self, {field.name})")
    source = f"def __init__(self, {', '.join(params)}):\n" + "\n".join(lines or ["    pass"])
    exec(compile(source, f"<quick_init {cls.__qualname__}>", "exec"), namespace)
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__annotations__ = dict(vars(cls)["__init__"].__annotations__)
    cls.__init__ = init  # type: ignore[misc]
    return cls


__all__ = ["fields_eq", "fields_hash", "fields_repr", "mutable", "quick_init", "record"]

"""One `__repr__` for every attrs class here, read from its fields when called.

attrs compiles a `__repr__` for each class it builds, and at start-up that
compiling is a third of what building a class costs: with some 180 classes,
tens of milliseconds of every command. A class whose body says
``__repr__ = fields_repr`` gets none compiled (attrs leaves a class's own
`__repr__` alone) and prints exactly as attrs would have: the fields in
order, ``repr=False`` ones left out, a field's own repr function used, and
``...`` for an object already being printed further up.
"""

from __future__ import annotations

import threading
from typing import Any

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

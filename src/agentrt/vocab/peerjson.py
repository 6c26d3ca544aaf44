"""Reading JSON that a peer sent: strict UTF-8, and integers short enough to read.

Python refuses to turn text of more than 4300 digits into an `int` (a guard
against quadratic-time conversion) and raises a bare `ValueError` from the
middle of `json.loads`. Left alone, that error escapes every handler written
for `json.JSONDecodeError`: a daemon connection dropped and an HTTP request
failed with a 500. Every edge that reads a peer's JSON (frames, HTTP bodies,
the chat services' replies) goes through `loads`, which refuses such a number
with `JsonNumberError`, a `ValueError` whose message says what to do.

Integers are read by the C decoder itself while the interpreter's limit is
the default: a Python call for each integer doubled the cost of a frame of
numbers (a page of 1,000 pending tasks' times: 306 us against 133 us). An
integer past the limit makes the C decoder raise; the text is then read once
more, checking each integer, to say which.
"""

from __future__ import annotations

import json
import sys
from typing import Any
from typing import Final

#: The most digits an integer may have; Python's default conversion limit.
MAX_INT_DIGITS: Final = 4300


class JsonNumberError(ValueError):
    """A JSON number too long to read; the message gives its length, never its digits."""


def _parse_int(text: str) -> int:
    digits = len(text) - text.startswith("-")
    if digits > MAX_INT_DIGITS:
        raise JsonNumberError(
            f"an integer of {digits} digits is longer than the {MAX_INT_DIGITS} digits "
            "accepted; send long numbers as strings"
        )
    try:
        return int(text)
    except ValueError:
        # The interpreter's own limit was set lower (PYTHONINTMAXSTRDIGITS).
        raise JsonNumberError(
            f"an integer of {digits} digits is too long to read; send long numbers as strings"
        ) from None


def loads(data: bytes | str) -> Any:
    """Decode JSON text; bytes must be UTF-8.

    Raises `UnicodeDecodeError`, `json.JSONDecodeError`, `RecursionError` (too
    deeply nested) or `JsonNumberError`; all but the recursion error are
    `ValueError` subclasses.
    """
    # Bytes are decoded strictly: json.loads(bytes) lets an encoded surrogate through.
    text = data.decode("utf-8") if isinstance(data, bytes) else data
    if text.startswith("\ufeff"):  # as json.loads says it
        raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
    if sys.get_int_max_str_digits() != MAX_INT_DIGITS:
        # Unlimited (quadratic time for a long number), or lower: every integer is checked.
        return _CHECKING.decode(text)
    try:
        return _DECODER.decode(text)
    except json.JSONDecodeError:
        raise
    except ValueError:
        # An integer past the limit (the C decoder's bare error): read again to say so.
        return _CHECKING.decode(text)


# One decoder each for every call: json.loads(text, parse_int=...) builds a new one each time.
_DECODER: Final = json.JSONDecoder()
_CHECKING: Final = json.JSONDecoder(parse_int=_parse_int)

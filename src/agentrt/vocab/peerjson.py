"""Reading JSON that a peer sent: strict UTF-8, and integers short enough to read.

Python refuses to turn text of more than 4300 digits into an `int` (a guard
against quadratic-time conversion) and raises a bare `ValueError` from the
middle of `json.loads`. Left alone, that error escapes every handler written
for `json.JSONDecodeError`: a daemon connection dropped and an HTTP request
failed with a 500. Every edge that reads a peer's JSON (frames, HTTP bodies,
the chat services' replies) goes through `loads`, which refuses such a number
with `JsonNumberError`, a `ValueError` whose message says what to do.
"""

from __future__ import annotations

import json
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
    # One decoder for every call: json.loads(text, parse_int=...) builds a new one each time.
    return _DECODER.decode(text)


_DECODER: Final = json.JSONDecoder(parse_int=_parse_int)

"""Clamping of snapshot values: head and tail kept, the middle replaced by a marker.

Sizes are counted in UTF-8 bytes. The result never splits a character and is
never longer than the limit; ``N`` in the marker is exactly the number of bytes
removed from the original.
"""

from __future__ import annotations

import re
from typing import Any

#: The limits the snapshot applies (since v1.1.2 in the spec).
TOOL_RESULT_LIMIT = 32 * 1024
ARGUMENT_LIMIT = 4 * 1024

#: Bytes of a tool result shown as its preview (a run's `tool_result` event carries it).
PREVIEW_BYTES = 200

_MARKER = "...[{n} bytes elided]..."
#: Rounds of handing back what a shorter marker leaves (each N has fewer digits, at most 20).
_FILL_TRIES = 24
MARKER_RE = re.compile(r"\.\.\.\[(\d+) bytes elided\]\.\.\.")


def _cut_head(data: bytes, size: int) -> bytes:
    """The longest prefix of at most `size` bytes that ends on a character boundary."""
    end = min(size, len(data))
    # A UTF-8 continuation byte is 0b10xxxxxx: back off until `end` starts a character.
    while 0 < end < len(data) and (data[end] & 0xC0) == 0x80:
        end -= 1
    return data[:end]


def _cut_tail(data: bytes, size: int) -> bytes:
    """The longest suffix of at most `size` bytes that starts on a character boundary."""
    start = max(len(data) - size, 0)
    while start < len(data) and (data[start] & 0xC0) == 0x80:
        start += 1
    return data[start:]


def preview(result: str, size: int = PREVIEW_BYTES) -> str:
    """The start of a tool result: its first `size` UTF-8 bytes, no character split.

    What a run's ``tool_result`` event shows of the result, and what a front-end
    shows of a saved one, so a conversation read back looks as it did live.
    """
    return result.encode("utf-8", "replace")[:size].decode("utf-8", "ignore")


def clamp(text: str, limit: int) -> str:
    """Return `text` if it fits in `limit` UTF-8 bytes, else head + marker + tail.

    The marker's ``N`` is the exact count of bytes removed. The result fits in
    `limit` bytes whenever `limit` leaves room for the marker itself, and fills
    it exactly unless a character would have to be split.
    """
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= limit:
        return text
    # The marker's own length depends on N, which depends on how much we keep:
    # start from the widest N (all bytes removed) so the result never exceeds the limit,
    # then give the bytes a shorter N leaves back to head and tail. Keeping more only
    # shortens N, so the result never grows past the limit.
    room = max(limit - len(_MARKER.format(n=len(data))), 0)
    head, tail = _cut_head(data, room - room // 2), _cut_tail(data, room // 2)
    for _ in range(_FILL_TRIES):
        removed = len(data) - len(head) - len(tail)
        spare = limit - len(head) - len(tail) - len(_MARKER.format(n=removed))
        if spare <= 0 or room + spare >= len(data):
            break
        room += spare
        wider = _cut_head(data, room - room // 2), _cut_tail(data, room // 2)
        kept = len(wider[0]) + len(wider[1])
        if kept + len(_MARKER.format(n=len(data) - kept)) > limit:
            break  # (a character cut back earlier fits now, but not with the marker)
        head, tail = wider
    removed = len(data) - len(head) - len(tail)
    return (
        head.decode("utf-8", "surrogatepass")
        + _MARKER.format(n=removed)
        + tail.decode("utf-8", "surrogatepass")
    )


def clamp_arguments(value: Any, limit: int = ARGUMENT_LIMIT) -> Any:
    """Clamp every string inside a JSON value (dicts, lists, nested) to `limit` bytes."""
    if isinstance(value, str):
        return clamp(value, limit)
    if isinstance(value, dict):
        return {k: clamp_arguments(v, limit) for k, v in value.items()}
    if isinstance(value, list):
        return [clamp_arguments(v, limit) for v in value]
    return value


def was_clamped(text: str) -> bool:
    """Whether `text` carries an elision marker."""
    return MARKER_RE.search(text) is not None

"""Scrolling the transcript back and forth: PageUp, PageDown and the mouse wheel.

The first line shown is kept as an `Anchor` (an entry and a line of it), so new
output does not move what is being read; back at the end, the view follows it again.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable

from ._state import Anchor
from ._state import TranscriptEntry
from ._state import TuiState

#: How many screen lines an entry takes at the current width (the view knows; state asks).
LineCount = Callable[[TranscriptEntry], int]


def _position(state: TuiState, anchor: Anchor, count: LineCount) -> tuple[int, int]:
    """The (entry index, line) of `anchor`; the first line kept when its entry is gone."""
    entries = state.transcript
    index = bisect.bisect_left(entries, anchor.serial, key=lambda entry: entry.serial)
    if index >= len(entries):
        return len(entries) - 1, max(0, count(entries[-1]) - 1)
    if entries[index].serial != anchor.serial:
        return index, 0
    return index, max(0, min(anchor.line, count(entries[index]) - 1))


def _up(state: TuiState, count: LineCount, index: int, line: int, n: int) -> tuple[int, int]:
    """`n` lines above (index, line), stopping at the first line."""
    while n > line:
        if index == 0:
            return 0, 0
        n -= line + 1
        index -= 1
        line = max(0, count(state.transcript[index]) - 1)
    return index, line - n


def _down(state: TuiState, count: LineCount, index: int, line: int, n: int) -> tuple[int, int]:
    """`n` lines below (index, line), stopping at the last line."""
    entries = state.transcript
    while True:
        left = max(0, count(entries[index]) - 1) - line
        if n <= left:
            return index, line + n
        if index == len(entries) - 1:
            return index, line + left
        n -= left + 1
        index += 1
        line = 0


def _lines_from(state: TuiState, count: LineCount, index: int, line: int, limit: int) -> int:
    """How many lines there are from (index, line) to the end, counting up to `limit`."""
    entries = state.transcript
    total = count(entries[index]) - line
    index += 1
    while total < limit and index < len(entries):
        total += count(entries[index])
        index += 1
    return total


def scroll_top(state: TuiState, count: LineCount, height: int) -> tuple[int, int] | None:
    """The (entry index, line) the view starts at while reading back, or None when it
    follows the end: everything from the anchor on fits in `height` lines (the anchor is
    then dropped, so new output is followed again)."""
    if state.scroll is None or not state.transcript:
        state.scroll = None
        return None
    index, line = _position(state, state.scroll, count)
    if _lines_from(state, count, index, line, height + 1) <= height:
        state.scroll = None
        return None
    return index, line


def scroll_by(state: TuiState, lines: int, count: LineCount, height: int) -> None:
    """Scroll the transcript `lines` lines down (up when negative) in a view `height` high."""
    entries = state.transcript
    if not entries or lines == 0:
        return
    top = scroll_top(state, count, height)
    if top is None:
        if lines > 0:
            return
        last = len(entries) - 1
        top = _up(state, count, last, max(0, count(entries[last]) - 1), height - 1)
    index, line = top
    if lines < 0:
        index, line = _up(state, count, index, line, -lines)
    else:
        index, line = _down(state, count, index, line, lines)
    state.scroll = Anchor(entries[index].serial, line)
    scroll_top(state, count, height)


def scroll_pages(state: TuiState, pages: int, count: LineCount, height: int) -> None:
    """PageUp (negative) / PageDown: a screenful less two lines, so some context stays."""
    scroll_by(state, pages * max(1, height - 2), count, height)

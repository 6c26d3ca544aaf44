"""Painting a redraw: prompt_toolkit's screen diff, given only the rows that changed.

prompt_toolkit redraws by comparing the new screen with the last one cell by cell,
every row, in Python: with the transcript filling the window, a key typed into the
input box paid for comparing every transcript row, though only the input line
changed. A row whose cells are all the same as before (the same `Char` objects, as
the transcript and `Window` take them from one cache) is found equal by a dict
comparison; the diff is handed the other rows, and an empty row on both sides for
each equal one, so it writes exactly what it would have written: nothing for a row
that did not change.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

import prompt_toolkit.renderer
from prompt_toolkit.layout.screen import Char
from prompt_toolkit.layout.screen import Screen

#: prompt_toolkit's own diff, which this one calls with the rows that changed.
_DIFF: Callable[..., Any] = prompt_toolkit.renderer._output_screen_diff

_Rows = defaultdict[int, defaultdict[int, Char]]


def changed_rows(screen: Screen, previous: Screen, height: int) -> tuple[_Rows, _Rows]:
    """The first `height` rows of `screen` and of `previous` for the diff: those that
    differ as they are, each other one as an empty row on both (the diff, finding the
    two the same, writes nothing for it, as it would for the rows themselves)."""
    rows, before = screen.data_buffer, previous.data_buffer
    new: _Rows = defaultdict(rows.default_factory)
    old: _Rows = defaultdict(before.default_factory)
    # One empty row stands for every unchanged one: the diff reads at most its first cell.
    empty_row = rows.default_factory
    assert empty_row is not None
    blank = empty_row()
    for y in range(min(max(screen.height, previous.height), height)):
        if rows.get(y) == before.get(y):
            new[y] = old[y] = blank
        else:
            new[y] = rows[y]
            old[y] = before[y]
    return new, old


def screen_diff(
    app: Any,
    output: Any,
    screen: Screen,
    current_pos: Any,
    color_depth: Any,
    previous_screen: Screen | None,
    last_style: str | None,
    is_done: bool,
    **options: Any,
) -> Any:
    """`prompt_toolkit.renderer._output_screen_diff`, comparing only the rows that changed.

    A first screen, a last one, or one of another width is drawn whole, as before.
    """
    size = options.get("size")
    whole = (
        previous_screen is None
        or is_done
        or size is None
        or options.get("previous_width") != size.columns
    )
    if whole:
        return _DIFF(
            app, output, screen, current_pos, color_depth, previous_screen, last_style, is_done,
            **options,
        )  # fmt: skip
    assert previous_screen is not None and size is not None
    rows, before = screen.data_buffer, previous_screen.data_buffer
    screen.data_buffer, previous_screen.data_buffer = changed_rows(
        screen, previous_screen, size.rows
    )
    try:
        return _DIFF(
            app, output, screen, current_pos, color_depth, previous_screen, last_style, is_done,
            **options,
        )  # fmt: skip
    finally:
        screen.data_buffer, previous_screen.data_buffer = rows, before


def install() -> None:
    """Make prompt_toolkit's renderer use `screen_diff` (once; it draws the same output)."""
    prompt_toolkit.renderer._output_screen_diff = screen_diff  # type: ignore[assignment]

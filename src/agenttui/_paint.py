"""Painting a redraw: prompt_toolkit's screen diff, given only the rows that changed.

prompt_toolkit redraws by comparing the new screen with the last one cell by cell,
every row, in Python: with the transcript filling the window, a key typed into the
input box paid for comparing every transcript row, though only the input line
changed. A row whose cells are all the same as before (the same `Char` objects, as
the transcript and `Window` take them from one cache) is found equal by a dict
comparison; the diff is handed the other rows, and an empty row on both sides for
each equal one, so it writes exactly what it would have written: nothing for a row
that did not change.

A reply streaming in moves the transcript up by a line or more at most redraws, so
every one of its rows changed, and the diff wrote the whole window again, cell by
cell (1.6 ms of a 3.5 ms redraw at 120x40, and the whole screen's bytes to the
terminal). When the rows that changed are old rows moved up, the terminal is told to
scroll them (a scroll region and line feeds: plain VT100, which every terminal
emulator speaks) and the diff is given what the terminal then holds, so it writes
only the rows scrolled in and what else changed.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from collections.abc import Container
from collections.abc import Sequence
from typing import Any

import prompt_toolkit.renderer
from prompt_toolkit.data_structures import Point
from prompt_toolkit.layout.screen import Char
from prompt_toolkit.layout.screen import Screen
from prompt_toolkit.output.vt100 import Vt100_Output

#: prompt_toolkit's own diff, which this one calls with the rows that changed.
_DIFF: Callable[..., Any] = prompt_toolkit.renderer._output_screen_diff

_Rows = defaultdict[int, defaultdict[int, Char]]


def changed_rows(
    screen: Screen, previous: Screen, height: int, changed: Container[int] | None = None
) -> tuple[_Rows, _Rows]:
    """The first `height` rows of `screen` and of `previous` for the diff: those that
    differ as they are, each other one as an empty row on both (the diff, finding the
    two the same, writes nothing for it, as it would for the rows themselves).

    `changed`: the rows that differ, when the caller compared them already.
    """
    rows, before = screen.data_buffer, previous.data_buffer
    new: _Rows = defaultdict(rows.default_factory)
    old: _Rows = defaultdict(before.default_factory)
    # One empty row stands for every unchanged one: the diff reads at most its first cell.
    empty_row = rows.default_factory
    assert empty_row is not None
    blank = empty_row()
    for y in range(min(max(screen.height, previous.height), height)):
        if (y not in changed) if changed is not None else rows.get(y) == before.get(y):
            new[y] = old[y] = blank
        else:
            new[y] = rows[y]
            old[y] = before[y]
    return new, old


#: A redraw scrolls the terminal when at least this many rows with something written moved
#: up together.
SCROLL_MIN = 4


def scrolled(
    rows: _Rows, before: _Rows, changed: Sequence[int], height: int
) -> tuple[int, int, int] | None:
    """Where most rows that `changed` (of the first `height`) are old rows moved up: (top,
    bottom, lines) to scroll the rows from ``top`` to ``bottom`` up by ``lines``, or None.

    The shift is the one that finds the most rows with something written as they were
    that many rows lower (at least `SCROLL_MIN`, and half the rows that changed); the
    region runs from the first such row to the last. Rows in it that match nothing are
    written by the diff, as any row that changed.
    """
    if len(changed) < SCROLL_MIN:
        return None
    best: tuple[int, int, int, int] = (0, 0, 0, 0)  # (rows found, lines, first row, last row)
    for lines in range(1, height - SCROLL_MIN + 1):
        found = [
            y
            for y in changed
            if y + lines < height and rows.get(y) and rows.get(y) == before.get(y + lines)
        ]
        if len(found) > best[0]:
            best = (len(found), lines, found[0], found[-1])
            if 2 * len(found) > len(changed):  # most of them: no other shift finds more
                break
    count, lines, top, last = best
    if count < SCROLL_MIN or 2 * count < len(changed):
        return None
    return top, last + lines + 1, lines


def scroll_up(top: int, bottom: int, lines: int, cursor: Point) -> str:
    """What scrolls the terminal's rows `top` to `bottom` (0-based, `bottom` excluded) up by
    `lines`, the rows below and above left as they are, and puts the cursor back at
    `cursor`: plain VT100 (a scroll region, and line feeds at its last row)."""
    return (
        "\x1b[0m"  # the rows scrolled in take the default background
        f"\x1b[{top + 1};{bottom}r"
        f"\x1b[{bottom};1H" + "\n" * lines + "\x1b[r"
        f"\x1b[{cursor.y + 1};{cursor.x + 1}H"
    )


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
    height = min(max(screen.height, previous_screen.height), size.rows)
    # A full screen is drawn from the terminal's first row, where a scroll region is counted.
    full = options.get("full_screen") and isinstance(output, Vt100_Output)
    changed = [y for y in range(height) if rows.get(y) != before.get(y)] if full else None
    shift = scrolled(rows, before, changed, height) if changed is not None else None
    if shift is not None:
        top, bottom, lines = shift
        # What the terminal holds once it scrolled the rows `top` to `bottom` up by `lines`.
        blank = before.default_factory
        assert blank is not None
        moved: _Rows = defaultdict(blank, before)
        for y in range(top, bottom):
            below = before.get(y + lines) if y + lines < bottom else None
            moved[y] = below if below is not None else blank()
        previous_screen.data_buffer = moved
        output.write_raw(scroll_up(top, bottom, lines, current_pos))
        last_style = None
        changed = None  # against the rows moved: compared anew
    screen.data_buffer, previous_screen.data_buffer = changed_rows(
        screen, previous_screen, size.rows, None if changed is None else set(changed)
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

"""The screen diff given only the changed rows writes what prompt_toolkit's own writes."""

from __future__ import annotations

import io
import os
import random
import shutil
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from prompt_toolkit.data_structures import Point
from prompt_toolkit.data_structures import Size
from prompt_toolkit.layout.screen import _CHAR_CACHE
from prompt_toolkit.layout.screen import Screen
from prompt_toolkit.output.color_depth import ColorDepth
from prompt_toolkit.output.vt100 import Vt100_Output
from prompt_toolkit.renderer import _StyleStringHasStyleCache
from prompt_toolkit.renderer import _StyleStringToAttrsCache
from prompt_toolkit.styles import DummyStyleTransformation
from prompt_toolkit.styles import Style

from agenttui import _paint

SIZE = Size(rows=12, columns=30)
STYLES = ("", "class:md.strong", "class:status", "class:more")
#: A screen as rows of (column, character, style), the same for both diffs.
Drawing = dict[int, list[tuple[int, str, str]]]


def _screen(drawing: Drawing, height: int) -> Screen:
    screen = Screen()
    for y, cells in drawing.items():
        row = screen.data_buffer[y]
        for x, char, style in cells:
            row[x] = _CHAR_CACHE[char, style]
    screen.height = height
    screen.show_cursor = False
    return screen


def _drawings(seed: int, count: int) -> list[tuple[Drawing, int]]:
    """`count` screens, each the one before with a few rows changed, lines made shorter or
    longer, rows blanked or the height changed."""
    rng = random.Random(seed)
    drawing: Drawing = {}
    out: list[tuple[Drawing, int]] = []
    height = SIZE.rows
    for _ in range(count):
        for y in rng.sample(range(SIZE.rows), rng.randint(0, 4)):
            action = rng.random()
            if action < 0.15:
                drawing.pop(y, None)
            else:
                length = rng.randint(0, SIZE.columns)
                style = rng.choice(STYLES)
                text = "".join(rng.choice("ab  xyz") for _ in range(length))
                drawing[y] = [(x, c, style) for x, c in enumerate(text)]
        if rng.random() < 0.1:
            height = rng.randint(SIZE.rows // 2, SIZE.rows)
        out.append(({y: list(cells) for y, cells in drawing.items()}, height))
    return out


def _paint_all(diff: object, drawings: list[tuple[Drawing, int]], width_at: int) -> list[str]:
    """What `diff` writes for each screen in turn, as the renderer calls it."""
    written = io.StringIO()
    output = Vt100_Output(written, lambda: SIZE, term="xterm-256color")
    style = Style.from_dict({"status": "reverse", "md.strong": "bold", "more": "reverse"})
    attrs = _StyleStringToAttrsCache(style.get_attrs_for_style_str, DummyStyleTransformation())
    has_style = _StyleStringHasStyleCache(attrs)
    app = SimpleNamespace(layout=SimpleNamespace(current_window=None))
    previous: Screen | None = None
    position, last_style = Point(0, 0), None
    steps: list[str] = []
    for n, (drawing, height) in enumerate(drawings):
        screen = _screen(drawing, height)
        position, last_style = diff(  # type: ignore[operator]
            app,
            output,
            screen,
            position,
            ColorDepth.DEPTH_8_BIT,
            previous,
            last_style,
            False,
            full_screen=True,
            attrs_for_style_string=attrs,
            style_string_has_style=has_style,
            size=SIZE,
            previous_width=SIZE.columns if n != width_at else SIZE.columns - 1,
        )
        output.flush()
        steps.append(f"{written.getvalue()}|{position}|{last_style}")
        written.seek(0)
        written.truncate()
        previous = screen
    return steps


@pytest.mark.parametrize("seed", range(6))
def test_only_changed_rows_are_compared_and_the_output_is_the_same(seed: int) -> None:
    drawings = _drawings(seed, 40)
    assert _paint_all(_paint.screen_diff, drawings, width_at=20) == _paint_all(
        _paint._DIFF, drawings, width_at=20
    )


def test_unchanged_rows_are_handed_over_empty_and_changed_ones_as_they_are() -> None:
    before = _screen({0: [(0, "a", "")], 1: [(0, "b", "")], 2: [(0, "c", "")]}, 4)
    after = _screen({0: [(0, "a", "")], 1: [(0, "B", "")], 3: [(0, "d", "")]}, 4)
    new, old = _paint.changed_rows(after, before, SIZE.rows)
    assert new[1] is after.data_buffer[1] and old[1] is before.data_buffer[1]
    assert new[2] is after.data_buffer[2] and old[2] is before.data_buffer[2]
    assert new[3] is after.data_buffer[3] and old[3] is before.data_buffer[3]
    assert not new[0] and new[0] is old[0]


def _scrolling(seed: int, count: int) -> list[tuple[Drawing, int]]:
    """`count` screens of a transcript (rows 0 to 8) that moves up by 0 to 3 lines at each,
    its last line growing meanwhile, above a rule, a status line and an input line that
    change now and then: what a streamed reply draws."""
    rng = random.Random(seed)
    lines: list[list[tuple[int, str, str]]] = []
    status = "idle"
    out: list[tuple[Drawing, int]] = []
    for n in range(count):
        for _ in range(rng.choice((0, 1, 1, 2, 3))):
            style = rng.choice(STYLES)
            text = f"{n:02d} " + "".join(rng.choice("ab  xyz") for _ in range(rng.randint(0, 24)))
            lines.append([(x, c, style) for x, c in enumerate(text)])
        if lines and rng.random() < 0.5:
            lines[-1] = [*lines[-1], (len(lines[-1]), "w", "")][: SIZE.columns]
        if rng.random() < 0.3:
            status = rng.choice(("idle", "thinking", "running 1s", "Esc stop"))
        drawing: Drawing = {y: list(cells) for y, cells in enumerate(lines[-9:])}
        drawing[9] = [(x, "-", "") for x in range(SIZE.columns)]
        drawing[10] = [(x, c, "class:status") for x, c in enumerate(status)]
        drawing[11] = [(0, ">", "")]
        out.append((drawing, SIZE.rows))
    return out


def _rows(drawing: Drawing) -> list[str]:
    """The characters of `drawing`, row by row, as a terminal shows them (no trailing spaces)."""
    shown: list[str] = []
    for y in range(SIZE.rows):
        row = [" "] * SIZE.columns
        for x, char, _ in drawing.get(y, []):
            row[x] = char
        shown.append("".join(row).rstrip())
    return shown


@pytest.mark.e2e
@pytest.mark.parametrize("seed", range(2))
def test_a_scrolled_redraw_shows_in_a_real_terminal_what_was_drawn(
    seed: int, tmp_path: Path
) -> None:
    """Each redraw's bytes go to a real terminal (tmux), whose screen must then hold the drawing.

    The transcript moves up at most redraws, so most of them scroll the terminal: the
    rows moved, the rows scrolled in and the ones below the region must all be right.
    """
    drawings = _scrolling(seed, 60)
    steps = [step.split("|")[0] for step in _paint_all(_paint.screen_diff, drawings, width_at=-1)]
    scrolls = sum("\x1b[r" in step for step in steps)
    assert scrolls >= 20, f"only {scrolls} of {len(steps)} redraws scrolled"
    # Without the scroll, prompt_toolkit's diff writes the moved rows again: more bytes.
    plain = [step.split("|")[0] for step in _paint_all(_paint._DIFF, drawings, width_at=-1)]
    assert sum(map(len, steps)) < sum(map(len, plain)) / 2
    assert shutil.which("tmux") is not None, "tmux is not installed (make system-deps)"
    fifo = tmp_path / "screen"
    os.mkfifo(fifo)
    tmux = ["tmux", "-S", os.fspath(tmp_path / "tmux.sock"), "-f", "/dev/null"]
    # Opened for reading and writing, so that it stays open for `cat` between writes.
    pipe = os.open(fifo, os.O_RDWR)
    try:
        subprocess.run(
            [*tmux, "new-session", "-d", "-x", str(SIZE.columns), "-y", str(SIZE.rows),
             f"stty raw -echo; exec cat {fifo}"],
            check=True, timeout=30,
        )  # fmt: skip
        for n, ((drawing, _), step) in enumerate(zip(drawings, steps, strict=True)):
            os.write(pipe, step.encode())
            expected = _rows(drawing)
            deadline = time.monotonic() + 20
            while True:
                screen = subprocess.run(
                    [*tmux, "capture-pane", "-p"], capture_output=True, text=True, timeout=30
                ).stdout.split("\n")[: SIZE.rows]
                shown = [line.rstrip() for line in screen]
                if shown == expected:
                    break
                assert time.monotonic() < deadline, (
                    f"redraw {n}: the terminal shows\n" + "\n".join(shown)
                    + "\ninstead of\n" + "\n".join(expected)
                )  # fmt: skip
                time.sleep(0.02)
    finally:
        os.close(pipe)
        subprocess.run([*tmux, "kill-server"], capture_output=True, timeout=30)

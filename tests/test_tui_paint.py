"""The screen diff given only the changed rows writes what prompt_toolkit's own writes."""

from __future__ import annotations

import io
import random
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

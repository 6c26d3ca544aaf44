"""Laying out the transcript: Markdown replies, word wrapping, code colouring."""

from __future__ import annotations

import random

import pytest
from markdown_it.token import Token

from agenttui import _render
from agenttui._render import OPEN_BLOCK
from agenttui._render import Line
from agenttui._render import LineCache
from agenttui._render import entry_lines
from agenttui._render import render_markdown
from agenttui._render import width_of
from agenttui._render import wrap
from agenttui._state import EntryKind
from agenttui._state import TranscriptEntry
from agenttui._words import HELP_TEXT

REPLY = """\
# Deploying

Run it **now**, *carefully*, with `make deploy`.

- first step
- second step
  1. nested

```python
def greet(name):
    return f"hi {name}"
```

| name | value |
|------|-------|
| a    | 1     |
"""


def text(line: Line) -> str:
    return "".join(t for _, t in line)


def styles_of(lines: list[Line], needle: str) -> set[str]:
    """The styles of the fragments whose text contains `needle`."""
    return {style for line in lines for style, t in line if needle in t}


def test_markdown_headings_emphasis_lists_and_tables() -> None:
    lines = render_markdown(REPLY, 60)
    shown = [text(line) for line in lines]
    assert shown[0] == "Deploying"  # no "#" left
    assert "class:md.h1" in styles_of(lines, "Deploying")
    assert "Run it now, carefully, with make deploy." in shown
    assert "class:md.strong" in styles_of(lines, "now")
    assert "class:md.em" in styles_of(lines, "carefully")
    assert "class:md.code" in styles_of(lines, "deploy")
    assert "• first step" in shown
    assert "• second step" in shown
    assert "  1. nested" in shown
    assert "name │ value" in shown
    assert "a    │ 1" in shown


def test_code_blocks_are_coloured_by_pygments_and_keep_their_indentation() -> None:
    lines = render_markdown(REPLY, 60)
    shown = [text(line) for line in lines]
    assert "  def greet(name):" in shown
    assert '      return f"hi {name}"' in shown
    assert "```" not in "\n".join(shown)
    keyword = styles_of(lines, "def")
    assert any(style.startswith("class:pygments.keyword") for style in keyword)
    # An unknown language is shown plainly, not dropped.
    plain = render_markdown("```nosuchlanguage\nx = 1\n```", 40)
    assert [text(line) for line in plain] == ["  x = 1"]


def test_a_single_line_break_in_a_reply_is_kept() -> None:
    lines = render_markdown("Done.\nwrite_file: wrote 5 bytes", 60)
    assert [text(line) for line in lines] == ["Done.", "write_file: wrote 5 bytes"]


def test_lines_break_between_words() -> None:
    lines = wrap([("", "the quick brown fox jumps over the lazy dog")], 16, [("", "> ")])
    assert [text(line) for line in lines] == [
        "> the quick",
        "  brown fox",
        "  jumps over the",
        "  lazy dog",
    ]
    assert all(width_of(text(line)) <= 16 for line in lines)


def test_a_word_longer_than_a_line_is_cut_and_wide_characters_count_twice() -> None:
    lines = wrap([("", "abcdefghijklmnopqrstuvwxyz end")], 10)
    assert [text(line) for line in lines] == ["abcdefghij", "klmnopqrst", "uvwxyz end"]
    wide = wrap([("", "日本語のテキスト です")], 8)
    assert all(width_of(text(line)) <= 8 for line in wide)
    assert "".join(text(line) for line in wide).replace(" ", "") == "日本語のテキストです"


def test_styles_survive_wrapping() -> None:
    lines = render_markdown("plain words then **bold words that wrap** and more", 20)
    assert "class:md.strong" in styles_of(lines, "wrap")
    assert all(width_of(text(line)) <= 20 for line in lines)


def test_entries_keep_their_prefixes_and_the_subagent_label() -> None:
    user = TranscriptEntry(EntryKind.USER, ["first line\nsecond line"], serial=4)
    assert [text(line) for line in entry_lines(user, 40)] == ["", "> first line", "  second line"]
    sub = TranscriptEntry(EntryKind.ASSISTANT, ["# Title"], agent="sub1")
    assert [text(line) for line in entry_lines(sub, 40)] == ["[sub1] Title"]
    tool = TranscriptEntry(EntryKind.TOOL_CALL, ["write_file path='a' " + "x" * 40])
    lines = [text(line) for line in entry_lines(tool, 30)]
    assert lines[0].startswith("* write_file")
    assert all(line.startswith("  ") for line in lines[1:])


def test_reasoning_is_dimmed_plain_text_and_labels_a_subagent() -> None:
    entry = TranscriptEntry(EntryKind.REASONING, ["**not** markdown, just thoughts " * 2])
    lines = entry_lines(entry, 30)
    assert text(lines[0]).startswith("  **not** markdown")
    assert {style for line in lines for style, t in line if t.strip()} == {"class:reasoning"}
    sub = TranscriptEntry(EntryKind.REASONING, ["hmm"], agent="sub1")
    assert [text(line) for line in entry_lines(sub, 30)] == ["  [sub1] hmm"]


def test_the_reasoning_style_is_dim() -> None:
    from agenttui._app import STYLE

    attrs = STYLE.get_attrs_for_style_str("class:reasoning")
    assert attrs.color == "ansibrightblack"
    assert attrs.italic


def test_help_wraps_under_its_description_column() -> None:
    lines = [text(line) for line in entry_lines(TranscriptEntry(EntryKind.HELP, [HELP_TEXT]), 60)]
    enter = lines.index(next(line for line in lines if line.startswith("  Enter ")))
    assert lines[enter + 1].startswith(" " * 21)
    assert all(width_of(line) <= 60 for line in lines)


def test_the_cache_lays_out_an_entry_again_when_it_grows_or_the_width_changes() -> None:
    cache = LineCache()
    entry = TranscriptEntry(EntryKind.ASSISTANT, ["one"], serial=1)
    first = cache.lines(entry, 40)
    assert cache.lines(entry, 40) is first
    entry.parts.append(" two")
    assert [text(line) for line in cache.lines(entry, 40)] == ["one two"]
    assert cache.lines(entry, 3) is not first


def _reply(lines: int) -> str:
    """A reply of `lines` lines: headings, paragraphs of several lines, lists, code blocks."""
    out: list[str] = []
    for n in range(lines):
        kind = (n // 10) % 4
        if n % 10 == 0:
            out.append(f"\n## Part {n // 10}\n" if kind != 3 else "\n```python")
        elif kind == 0:
            out.append(f"Line {n} of a paragraph with **bold** words and `code` in it.")
        elif kind == 1:
            out.append(f"- item {n}, a point made in the list")
        elif kind == 2:
            out.append(f"{n}. a numbered step with *emphasis*")
        else:
            out.append(f"value_{n} = compute({n}) + 1" if n % 10 != 9 else "```\n")
    return "\n".join(out) + "\n"


def _pieces(text: str, ends: str = " \n") -> list[str]:
    """`text` cut as a model streams it: a word (and the space or newline after it) a piece,
    or a line a piece (`ends` a newline only)."""
    pieces: list[str] = []
    start = 0
    for index, char in enumerate(text):
        if char in ends:
            pieces.append(text[start : index + 1])
            start = index + 1
    return pieces + ([text[start:]] if start < len(text) else [])


def _streamed(
    text: str, width: int, kind: EntryKind = EntryKind.ASSISTANT, ends: str = " \n"
) -> list[Line]:
    """The lines shown while `text` streams in, after its last piece (laid out at each piece)."""
    cache = LineCache()
    entry = TranscriptEntry(kind, [], serial=1, agent="helper")
    lines: list[Line] = []
    for piece in _pieces(text, ends):
        entry.parts.append(piece)
        lines = cache.lines(entry, width, growing=True)
    return lines


def _count_parsing(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The length of every text the Markdown parser reads from now on."""
    read: list[int] = []
    parse = _render.parse

    def counting(text: str, references: _render.References | None = None) -> list[Token]:
        read.append(len(text))
        return parse(text, references)

    monkeypatch.setattr(_render, "parse", counting)
    return read


def test_a_streamed_reply_is_parsed_a_piece_at_a_time_not_whole_at_every_piece(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    read = _count_parsing(monkeypatch)
    work = {}
    for lines in (500, 5000):
        read.clear()
        text = _reply(lines)
        _streamed(text, 80, ends="\n")
        work[lines] = sum(read)
        # Each piece (a line) reads the open block (ten lines at most), never the reply so far.
        assert max(read) < 1000
    # Ten times the reply is ten times the reading: linear, not growing with the reply.
    assert work[5000] / work[500] < 11


def test_a_long_single_line_streams_in_without_reading_it_whole_each_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    read = _count_parsing(monkeypatch)
    text = " ".join(f"word{n}" for n in range(4000))
    lines = _streamed(text, 80)
    assert max(read) <= OPEN_BLOCK + 20
    assert [line_text(line) for line in lines] == [
        line_text(line)
        for line in entry_lines(TranscriptEntry(EntryKind.ASSISTANT, [text], agent="helper"), 80)
    ]


def line_text(line: Line) -> str:
    return text(line).rstrip()


@pytest.mark.parametrize("kind", [EntryKind.ASSISTANT, EntryKind.REASONING])
def test_a_streamed_reply_shows_what_it_shows_once_complete(kind: EntryKind) -> None:
    text = REPLY + _reply(200) + "Last words, no newline"
    whole = entry_lines(TranscriptEntry(kind, [text], agent="helper"), 60)
    assert _streamed(text, 60, kind) == whole
    # Once it stops growing, it is laid out whole: the same lines again.
    cache = LineCache()
    entry = TranscriptEntry(kind, [text], serial=1, agent="helper")
    cache.lines(entry, 60, growing=True)
    assert cache.lines(entry, 60) == whole


#: Blocks of Markdown whose meaning changes as later lines come: emphasis, code spans and
#: links across lines, a line underlined into a heading, lists whose numbers grow wider,
#: code blocks coloured by a lexer (strings across lines), a table, a definition after
#: its use, a quote going on lazily, an indented line.
_BLOCKS = [
    "A paragraph with *emphasis\nacross* lines and **bold\nhere** and `code\nspan` too.",
    "Heading by underline\nof two lines\n===",
    "Not a heading\n---",
    "- one\n- two\n  - nested *item*\n- three\n\n- loose four",
    "\n".join(f"{n}. step {n} of [the plan][ref]" for n in range(7, 13)),
    '```python\ns = """a string\nacross lines"""\nx = 1  # done\n```',
    "```\nplain code\n\n  kept as it is\n```",
    "~~~unknownlang\nsome code\n~~~",
    "    indented code\n    more of it",
    "| a | b |\n|---|:-:|\n| 1 | 22 |\n| longer cell | x |",
    "> a quote\nthat goes on lazily\n> - with a list",
    "See [ref] and [other][] and ![an image](pic.png) and <https://e.org>.",
    "[ref]: https://example.org/ref 'Title'\n[other]: /other",
    "## An ATX heading with `code` ##",
    "***",
    "Some words  \nwith a hard break and\\\nanother, & an &amp; entity.",
    "A line " + "long and wrapped " * 20 + "ends.",
]


def _random_reply(rng: random.Random) -> str:
    blocks = [rng.choice(_BLOCKS) for _ in range(rng.randint(4, 9))]
    # Links used before the definitions that make them links, always.
    blocks.insert(0, _BLOCKS[11])
    blocks.insert(rng.randint(1, len(blocks)), _BLOCKS[12])
    return "".join(block + rng.choice(["\n\n", "\n", "\n\n\n"]) for block in blocks)


@pytest.mark.parametrize("seed", range(16))
def test_a_streamed_reply_shows_at_every_piece_what_the_text_so_far_shows_laid_out_whole(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(seed)
    text = _random_reply(rng)
    kind = EntryKind.REASONING if seed % 8 == 7 else EntryKind.ASSISTANT
    agent = "helper" if seed % 2 else ""
    width = rng.choice([30, 60, 100])
    cache = LineCache()
    # A window following the end asks for its last screenful only: the blocks above it
    # are laid out once it asks for them.
    screen = LineCache()
    entry = TranscriptEntry(kind, [], serial=1, agent=agent)
    at = 0
    while at < len(text):
        # Pieces of any size, cut anywhere: in a word, a marker, a fence, a line break.
        end = min(len(text), at + rng.randint(1, 9))
        entry.parts.append(text[at:end])
        at = end
        shown = cache.lines(entry, width, growing=True)
        whole = entry_lines(TranscriptEntry(kind, [text[:at]], agent=agent), width)
        assert shown == whole, (seed, text[:at])
        height = rng.choice([1, 3, 8])
        assert screen.last(entry, width, height, growing=True) == whole[-height:], text[:at]
    # Once it stops growing, the lines are those of the whole, and are not made again.
    monkeypatch.setattr(_render, "entry_lines", None)
    assert cache.lines(entry, width) == shown
    assert screen.last(entry, width, 5) == shown[-5:]
    assert screen.lines(entry, width) == shown


def test_a_window_following_a_long_reply_lays_out_only_the_blocks_its_screen_shows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    laid_out: list[int] = []
    lay_out = _render._Later.lay_out

    def counting(block: _render._Later) -> list[Line]:
        laid_out.append(len(block.text))
        return lay_out(block)

    monkeypatch.setattr(_render._Later, "lay_out", counting)
    text = _reply(2000)
    screen = LineCache()
    entry = TranscriptEntry(EntryKind.ASSISTANT, [], serial=1, agent="helper")
    for number, piece in enumerate(_pieces(text, "\n")):
        entry.parts.append(piece)
        # Drawn every 200 lines (a fast model: many lines come between two redraws).
        if number % 200 == 0:
            screen.last(entry, 80, 40, growing=True)
    done = screen.last(entry, 80, 40)
    # The blocks that scrolled by unseen were read to find where they end, not laid out:
    # a screenful of 40 lines shows three or four blocks of ten lines of each 200.
    laid_out_while_streaming = sum(laid_out)
    assert laid_out_while_streaming < len(text) / 4
    whole = entry_lines(TranscriptEntry(EntryKind.ASSISTANT, [text], agent="helper"), 80)
    assert done == whole[-40:]
    # Reading back lays them out, once, as the whole shows them.
    assert screen.lines(entry, 80) == whole
    assert screen.lines(entry, 80) == whole
    assert laid_out_while_streaming < sum(laid_out) <= len(text)

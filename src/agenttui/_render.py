"""Laying out the transcript as screen lines: Markdown replies, word wrapping, code colouring.

Everything here is a pure function of an entry's text and the width: a line is a
list of ``(style, text)`` fragments that fits the width exactly or less. Lines
break between words; a word longer than a whole line is cut where it must be.
Replies are Markdown (CommonMark, parsed by markdown-it-py, plus tables):
headings, emphasis, inline code, links, lists, quotes, rules, tables and code
blocks, coloured by Pygments when the block names its language. A single line
break in a reply is kept, as chat models mean it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from collections.abc import Sequence
from typing import TYPE_CHECKING

import attrs
from prompt_toolkit.formatted_text import PygmentsTokens
from prompt_toolkit.formatted_text import to_formatted_text
from prompt_toolkit.utils import get_cwidth

from agentrt.vocab.terminal import visible

from ._state import EntryKind
from ._state import TranscriptEntry

if TYPE_CHECKING:
    from markdown_it import MarkdownIt
    from markdown_it.token import Token

#: One screen line.
Line = list[tuple[str, str]]

#: What starts each kind of entry, and its style; later lines are indented as wide.
PREFIX: dict[EntryKind, tuple[str, str]] = {
    EntryKind.USER: ("class:user", "> "),
    EntryKind.ASSISTANT: ("", ""),
    EntryKind.REASONING: ("class:reasoning", "  "),
    EntryKind.TOOL_CALL: ("class:tool", "* "),
    EntryKind.TOOL_RESULT: ("class:tool-result", "  = "),
    EntryKind.INFO: ("class:info", "-- "),
    EntryKind.ERROR: ("class:error", "!! "),
    EntryKind.HELP: ("class:help", ""),
    EntryKind.ATTACHMENT: ("class:info", "  + "),
    EntryKind.DIFF: ("class:diff", "  "),
}

_SPACE = re.compile(r"(\s+)")
#: A help line with a description column: "  Enter      send the message".
_HELP_COLUMNS = re.compile(r"^( +\S.*?  +)\S")
_TAB = "    "


def width_of(text: str) -> int:
    """Columns `text` takes on a terminal (wide characters count twice)."""
    return get_cwidth(text)


def _cut(text: str, columns: int) -> tuple[str, str]:
    """`text` split after at most `columns` columns (at least one character, so it moves on)."""
    used = 0
    for index, char in enumerate(text):
        used += get_cwidth(char)
        if used > columns:
            return text[: max(index, 1)], text[max(index, 1) :]
    return text, ""


def wrap(
    fragments: Iterable[tuple[str, str]],
    width: int,
    first: Sequence[tuple[str, str]] = (),
    rest: Sequence[tuple[str, str]] | None = None,
) -> list[Line]:
    """Wrap one logical line of styled text at word boundaries into lines of `width`.

    `first` starts the first line and `rest` (default: spaces as wide as `first`)
    every later one. Spaces where a line breaks are dropped; a word wider than a
    line is cut.
    """
    first_line = list(first)
    rest_line = (
        list(rest) if rest is not None else [("", " " * width_of("".join(t for _, t in first)))]
    )
    width = max(width, width_of("".join(t for _, t in first_line)) + 1, 2)
    rest_width = width_of("".join(t for _, t in rest_line))
    if rest_width >= width:
        rest_line, rest_width = [], 0

    # Words: runs of non-space text, possibly in several styles ("**bold**," is one word).
    words: list[tuple[list[tuple[str, str]], tuple[str, str] | None]] = []
    current: list[tuple[str, str]] = []
    for style, text in fragments:
        for piece in _SPACE.split(text.replace("\t", _TAB)):
            if not piece:
                continue
            if piece.isspace():
                words.append((current, (style, piece)))
                current = []
            else:
                current.append((style, piece))
    words.append((current, None))

    lines: list[Line] = []
    line: Line = list(first_line)
    used = width_of("".join(t for _, t in line))
    start = used  # the columns taken by the prefix: a line with no more has no word yet
    if not words[0][0] and words[0][1] is not None:
        # The line's own indentation is kept (an indented line of a message, say).
        style, text = words.pop(0)[1] or ("", "")
        text, _ = _cut(text, max(0, width - used - 1))
        line.append((style, text))
        used = start = used + width_of(text)

    def new_line() -> None:
        nonlocal line, used, start
        while line and len(line) > len(rest_line) and line[-1][1].isspace():
            line.pop()
        lines.append(line)
        line = list(rest_line)
        used = start = rest_width

    for word, space in words:
        size = sum(width_of(t) for _, t in word)
        if size and used + size > width and used > start:
            new_line()
        for style, text in word:
            while text:
                room = width - used
                if room <= 0:
                    new_line()
                    room = width - used
                piece, text = _cut(text, room)
                line.append((style, piece))
                used += width_of(piece)
        if space is not None and used > start:
            style, text = space
            if used + width_of(text) <= width:
                line.append((style, text))
                used += width_of(text)
            else:
                new_line()
    while line and len(line) > len(rest_line) and line[-1][1].isspace():
        line.pop()
    lines.append(line)
    return lines


def _split_lines(fragments: Iterable[tuple[str, str]]) -> list[Line]:
    """Fragments split at their newlines into logical lines."""
    lines: list[Line] = [[]]
    for style, text in fragments:
        pieces = text.split("\n")
        for index, piece in enumerate(pieces):
            if index:
                lines.append([])
            if piece:
                lines[-1].append((style, piece))
    return lines


def wrap_text(
    fragments: Iterable[tuple[str, str]],
    width: int,
    first: Sequence[tuple[str, str]] = (),
    rest: Sequence[tuple[str, str]] | None = None,
) -> list[Line]:
    """Like `wrap`, for text with newlines: each of its lines wrapped, later ones with `rest`."""
    indent = rest if rest is not None else [("", " " * width_of("".join(t for _, t in first)))]
    out: list[Line] = []
    for index, logical in enumerate(_split_lines(fragments)):
        out += wrap(logical, width, first if index == 0 else indent, indent)
    return out


# -- Markdown ----------------------------------------------------------------------------


@functools.cache
def _parser() -> MarkdownIt:
    # Imported on first use: a window that shows no reply never pays for it.
    from markdown_it import MarkdownIt

    # Raw HTML is shown as the text it is: a terminal renders no HTML.
    return MarkdownIt("commonmark", {"html": False}).enable("table")


@attrs.frozen
class _Context:
    width: int
    first: tuple[tuple[str, str], ...] = ()
    rest: tuple[tuple[str, str], ...] = ()

    def nested(self, first: Line, rest: Line) -> _Context:
        return _Context(self.width, (*self.rest, *first), (*self.rest, *rest))

    def first_line(self, first: Line, rest: Line) -> _Context:
        return _Context(self.width, (*self.first, *first), (*self.rest, *rest))


def render_markdown(text: str, width: int) -> list[Line]:
    """A reply in Markdown as screen lines of `width`."""
    tokens = _parser().parse(text)
    lines: list[Line] = []
    _blocks(tokens, 0, len(tokens), _Context(width), lines, gap=True)
    while lines and not lines[-1]:
        lines.pop()
    return lines or [[]]


def _matching(tokens: Sequence[Token], start: int) -> int:
    """The index of the token closing the one opened at `start`."""
    depth = 0
    for index in range(start, len(tokens)):
        depth += tokens[index].nesting
        if depth == 0:
            return index
    return len(tokens) - 1


_BLOCKS = frozenset(
    {
        "heading_open",
        "paragraph_open",
        "fence",
        "code_block",
        "bullet_list_open",
        "ordered_list_open",
        "blockquote_open",
        "hr",
        "table_open",
        "html_block",
    }
)


def _blank(ctx: _Context) -> Line:
    """An empty line inside `ctx`: a quote keeps its bar, indentation is dropped."""
    return list(ctx.rest) if _plain(ctx.rest).strip() else []


def _blocks(
    tokens: Sequence[Token], start: int, end: int, ctx: _Context, out: list[Line], *, gap: bool
) -> None:
    """Lay out the block tokens [start, end); `gap` puts a blank line between blocks."""
    index = start
    produced = False
    while index < end:
        token = tokens[index]
        here_index = index
        close = _matching(tokens, index) if token.nesting == 1 else index
        index = close + 1
        if token.type not in _BLOCKS:
            continue
        if produced and gap:
            out.append(_blank(ctx))
        # Only the first block of a list item or quote starts on the marker's line.
        here = _Context(ctx.width, ctx.rest, ctx.rest) if produced else ctx
        produced = True
        kind = token.type
        if kind == "heading_open":
            _heading(token, tokens[here_index + 1], here, out)
        elif kind == "paragraph_open":
            out += wrap_text(_inline(tokens[here_index + 1]), here.width, here.first, here.rest)
        elif kind in ("fence", "code_block"):
            _code(token, here, out)
        elif kind in ("bullet_list_open", "ordered_list_open"):
            _list(tokens, here_index, close, here, out)
        elif kind == "blockquote_open":
            bar: Line = [("class:md.quote", "│ ")]
            _blocks(tokens, here_index + 1, close, here.first_line(bar, bar), out, gap=True)
        elif kind == "hr":
            rule = "─" * max(1, min(40, here.width - width_of(_plain(here.first))))
            out.append([*here.first, ("class:md.rule", rule)])
        elif kind == "table_open":
            _table(tokens, here_index, close, here, out)
        else:  # html_block: shown as the text it is
            out += wrap_text([("", token.content.rstrip("\n"))], here.width, here.first, here.rest)


def _plain(fragments: Iterable[tuple[str, str]]) -> str:
    return "".join(text for _, text in fragments)


def _heading(open_token: Token, inline: Token, ctx: _Context, out: list[Line]) -> None:
    level = int(open_token.tag[1:] or 1)
    style = "class:md.h1" if level == 1 else "class:md.heading"
    fragments = [(f"{style} {s}".strip(), t) for s, t in _inline(inline)]
    out += wrap_text(fragments, ctx.width, ctx.first, ctx.rest)


def _inline(token: Token) -> list[tuple[str, str]]:
    """An inline token's children as styled fragments (newlines where the text breaks)."""
    fragments: list[tuple[str, str]] = []
    styles: list[str] = []
    links: list[str] = []
    for child in token.children or []:
        kind = child.type
        style = " ".join(styles)
        if kind == "text":
            fragments.append((style, child.content))
        elif kind == "code_inline":
            fragments.append((f"{style} class:md.code".strip(), child.content))
        elif kind in ("softbreak", "hardbreak"):
            fragments.append((style, "\n"))
        elif kind == "em_open":
            styles.append("class:md.em")
        elif kind == "strong_open":
            styles.append("class:md.strong")
        elif kind == "s_open":
            styles.append("class:md.strike")
        elif kind == "link_open":
            styles.append("class:md.link")
            links.append(str(child.attrGet("href") or ""))
        elif kind in ("em_close", "strong_close", "s_close") and styles:
            styles.pop()
        elif kind == "link_close" and styles:
            styles.pop()
            href = links.pop() if links else ""
            shown = _plain(fragments[-1:])
            if href and href != shown and href != f"mailto:{shown}":
                fragments.append(("class:md.url", f" ({href})"))
        elif kind == "image":
            fragments.append((style, f"[image: {child.content or child.attrGet('src')}]"))
        elif kind == "html_inline":
            fragments.append((style, child.content))
    return fragments


def _code(token: Token, ctx: _Context, out: list[Line]) -> None:
    """A code block: coloured by Pygments when its language is known, never word-wrapped."""
    code = token.content.rstrip("\n").replace("\t", _TAB)
    language = token.info.strip().split()[0] if token.info.strip() else ""
    fragments = _highlight(code, language)
    indent = [("class:md.code-block", "  ")]
    first = [*ctx.first, *indent]
    rest = [*ctx.rest, *indent]
    for index, logical in enumerate(_split_lines(fragments)):
        line = list(first if index == 0 else rest)
        used = width_of(_plain(line))
        for style, text in logical:
            while text:
                room = ctx.width - used
                if room <= 0:
                    out.append(line)
                    line = [*rest, ("class:md.code-block", "  ")]
                    used = width_of(_plain(line))
                    room = ctx.width - used
                piece, text = _cut(text, max(room, 1))
                line.append((style or "class:md.code-block", piece))
                used += width_of(piece)
        out.append(line)


def _highlight(code: str, language: str) -> list[tuple[str, str]]:
    if language:
        from pygments.lexers import get_lexer_by_name  # type: ignore[import-untyped]
        from pygments.util import ClassNotFound  # type: ignore[import-untyped]

        try:
            lexer = get_lexer_by_name(language, stripnl=False, ensurenl=False)
        except ClassNotFound:
            lexer = None
        if lexer is not None:
            tokens = to_formatted_text(PygmentsTokens(list(lexer.get_tokens(code))))
            return [(fragment[0], fragment[1]) for fragment in tokens]
    return [("class:md.code-block", code)]


def _list(tokens: Sequence[Token], start: int, end: int, ctx: _Context, out: list[Line]) -> None:
    ordered = tokens[start].type == "ordered_list_open"
    number = int(tokens[start].attrGet("start") or 1) if ordered else 0
    items: list[tuple[int, int]] = []
    index = start + 1
    while index < end:
        if tokens[index].type == "list_item_open":
            close = _matching(tokens, index)
            items.append((index, close))
            index = close + 1
        else:
            index += 1
    last = number + len(items) - 1
    marker_width = len(f"{last}. ") if ordered else 2
    for position, (open_index, close_index) in enumerate(items):
        marker = f"{number + position}. ".rjust(marker_width) if ordered else "• "
        here = ctx if position == 0 else _Context(ctx.width, ctx.rest, ctx.rest)
        item = here.first_line([("class:md.bullet", marker)], [("", " " * marker_width)])
        before = len(out)
        _blocks(tokens, open_index + 1, close_index, item, out, gap=False)
        if len(out) == before:
            out.append(list(item.first))


def _table(tokens: Sequence[Token], start: int, end: int, ctx: _Context, out: list[Line]) -> None:
    """A table with aligned columns; rows wrap as text when it is wider than the screen."""
    rows: list[list[list[tuple[str, str]]]] = []
    header_rows = 0
    in_head = False
    for token in tokens[start:end]:
        if token.type == "thead_open":
            in_head = True
        elif token.type == "thead_close":
            in_head = False
        elif token.type == "tr_open":
            rows.append([])
            if in_head:
                header_rows += 1
        elif token.type == "inline" and rows:
            cell = [(s, t.replace("\n", " ")) for s, t in _inline(token)]
            rows[-1].append(cell)
    if not rows:
        return
    columns = max(len(row) for row in rows)
    widths = [0] * columns
    for row in rows:
        for column, cell in enumerate(row):
            widths[column] = max(widths[column], width_of(_plain(cell)))
    separator = " │ "
    prefix_width = width_of(_plain(ctx.first))
    if sum(widths) + len(separator) * (columns - 1) + prefix_width > ctx.width:
        for number, row in enumerate(rows):
            fragments: list[tuple[str, str]] = []
            for column, cell in enumerate(row):
                if column:
                    fragments.append(("class:md.rule", " | "))
                fragments += cell
            here = ctx if number == 0 else _Context(ctx.width, ctx.rest, ctx.rest)
            out += wrap(fragments, here.width, here.first, here.rest)
        return
    for number, row in enumerate(rows):
        line: Line = list(ctx.first if number == 0 else ctx.rest)
        header = number < header_rows
        for column in range(columns):
            cell = row[column] if column < len(row) else []
            if column:
                line.append(("class:md.rule", separator))
            style = "class:md.strong " if header else ""
            line += [((style + s).strip(), t) for s, t in cell]
            pad = widths[column] - width_of(_plain(cell))
            if pad and column < columns - 1:
                line.append(("", " " * pad))
        out.append(line)
        if header and number == header_rows - 1:
            rule = "─┼─".join("─" * w for w in widths)
            out.append([*ctx.rest, ("class:md.rule", rule)])


# -- entries -----------------------------------------------------------------------------


def diff_style(line: str) -> str:
    """The style of one line of a unified diff: its headers, hunks, additions and removals."""
    if line.startswith(("+++ ", "--- ")):
        return "class:diff.file"
    if line.startswith("@@"):
        return "class:diff.hunk"
    if line.startswith("+"):
        return "class:diff.add"
    if line.startswith("-"):
        return "class:diff.remove"
    return "class:diff"


def entry_lines(entry: TranscriptEntry, width: int) -> list[Line]:
    """The screen lines of one transcript entry at `width` columns."""
    style, prefix = PREFIX[entry.kind]
    # Control characters are laid out as the glyphs drawn for them (as `agentrt` prints
    # them), so a line's width counts what the screen shows.
    text = visible(entry.text)
    if entry.kind is EntryKind.ASSISTANT:
        label: Line = [("class:agent", f"[{entry.agent}] ")] if entry.agent else []
        lines = render_markdown(text, width - width_of(_plain(label)))
        if label:
            pad = [("", " " * width_of(_plain(label)))]
            lines = [[*(label if i == 0 else pad), *line] for i, line in enumerate(lines)]
        return lines
    if entry.kind is EntryKind.HELP:
        # A line that wraps goes on under its description column, or under its own indent.
        out: list[Line] = []
        for line in text.split("\n"):
            columns = _HELP_COLUMNS.match(line)
            body = line.lstrip(" ")
            indent = len(line) - len(body)
            hang = len(columns.group(1)) if columns else indent + 2
            out += wrap([(style, body)], width, [("", " " * indent)], [("", " " * hang)])
        return out
    if entry.kind is EntryKind.DIFF:
        return [
            row
            for line in text.split("\n")
            for row in wrap([(diff_style(line), line)], width, [("", prefix)])
        ]
    if entry.kind is EntryKind.REASONING and entry.agent:
        prefix = f"{prefix}[{entry.agent}] "
    lines = wrap_text([(style, text)], width, [(style, prefix)], [("", " " * len(prefix))])
    if entry.kind is EntryKind.USER and entry.serial:
        # A blank line before each message keeps the exchanges apart.
        lines.insert(0, [])
    return lines


@attrs.define(eq=False)
class LineCache:
    """Screen lines of each entry, made again only when its text or the width changed."""

    _cache: dict[int, tuple[int, int, list[Line]]] = attrs.field(factory=dict, init=False)
    _oldest: int = attrs.field(default=0, init=False)

    def lines(self, entry: TranscriptEntry, width: int) -> list[Line]:
        """`entry_lines` of `entry`, cached by its serial."""
        key = (width, len(entry.parts))
        hit = self._cache.get(entry.serial)
        if hit is not None and hit[:2] == key:
            return hit[2]
        lines = entry_lines(entry, width)
        self._cache[entry.serial] = (*key, lines)
        return lines

    def forget_before(self, serial: int) -> None:
        """Drop the lines of entries older than `serial` (they left the transcript)."""
        if serial <= self._oldest:
            return
        self._oldest = serial
        for old in [s for s in self._cache if s < serial]:
            del self._cache[old]

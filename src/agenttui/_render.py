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
import itertools
import re
from collections.abc import Iterable
from collections.abc import Sequence
from typing import TYPE_CHECKING
from typing import Any
from typing import cast

import attrs
from prompt_toolkit.formatted_text import PygmentsTokens
from prompt_toolkit.formatted_text import to_formatted_text
from prompt_toolkit.utils import get_cwidth

from agentrt.vocab.reprs import mutable
from agentrt.vocab.reprs import record
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
    *,
    continued: bool = False,
) -> list[Line]:
    """Wrap one logical line of styled text at word boundaries into lines of `width`.

    `first` starts the first line and `rest` (default: spaces as wide as `first`)
    every later one. Spaces where a line breaks are dropped; a word wider than a
    line is cut. With `continued`, `first` is a line of text the words go on after
    (a space between), moving to the next line when they do not fit.
    """
    first_line = list(first)
    rest_line = (
        list(rest) if rest is not None else [("", " " * width_of("".join(t for _, t in first)))]
    )
    # A prefix leaves room for a character at least; a line of text carried on may be full.
    least = 0 if continued else width_of("".join(t for _, t in first_line)) + 1
    width = max(width, least, 2)
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
    if continued:
        line.append(("", " "))
        used += 1
        start = 0
    elif not words[0][0] and words[0][1] is not None:
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
    *,
    continued: bool = False,
) -> list[Line]:
    """Like `wrap`, for text with newlines: each of its lines wrapped, later ones with `rest`.

    With `continued`, the first line goes on after the text of `first` (see `wrap`).
    """
    indent = rest if rest is not None else [("", " " * width_of("".join(t for _, t in first)))]
    if continued and rest is None:
        indent = []
    out: list[Line] = []
    for index, logical in enumerate(_split_lines(fragments)):
        if index == 0:
            out += wrap(logical, width, first, indent, continued=continued)
        else:
            out += wrap(logical, width, indent, indent)
    return out


# -- Markdown ----------------------------------------------------------------------------


@functools.cache
def _parser() -> MarkdownIt:
    # Imported on first use: a window that shows no reply never pays for it.
    from markdown_it import MarkdownIt

    # Raw HTML is shown as the text it is: a terminal renders no HTML.
    return MarkdownIt("commonmark", {"html": False}).enable("table")


@record
class _Context:
    width: int
    first: tuple[tuple[str, str], ...] = ()
    rest: tuple[tuple[str, str], ...] = ()
    #: A line of text the first paragraph goes on after (the reply is laid out a piece at
    #: a time, and a long line was cut between two pieces).
    carry: tuple[tuple[str, str], ...] | None = None

    def nested(self, first: Line, rest: Line) -> _Context:
        return _Context(self.width, (*self.rest, *first), (*self.rest, *rest))

    def first_line(self, first: Line, rest: Line) -> _Context:
        return _Context(self.width, (*self.first, *first), (*self.rest, *rest))


#: Link reference definitions, by label: ``[label]: href "title"`` (markdown-it's ``env``).
References = dict[str, Any]


def parse(text: str, references: References | None = None) -> list[Token]:
    """`text`'s Markdown tokens: every reply is read through here.

    `references` are definitions read before `text` (a reply laid out a part at a
    time); the ones `text` makes are added to it.
    """
    if references is None:
        return _parser().parse(text)
    return _parser().parse(text, {"references": references})


def render_markdown(text: str, width: int) -> list[Line]:
    """A reply in Markdown as screen lines of `width`."""
    return _markdown_lines(text, width) or [[]]


def _markdown_lines(
    text: str, width: int, carry: Line | None = None, references: References | None = None
) -> list[Line]:
    """The screen lines of `text` (none when it shows nothing); see `_Context.carry`."""
    tokens = parse(text, references)
    lines = _token_lines(tokens, len(tokens), width, carry)
    if carry is not None and not any(t.type == "paragraph_open" for t in tokens[:1]):
        # The text went on with something else than its paragraph: the line stays as it was.
        lines.insert(0, list(carry))
    return lines


def _token_lines(
    tokens: Sequence[Token], end: int, width: int, carry: Line | None = None
) -> list[Line]:
    """The screen lines of the blocks of `tokens` before `end`, no blank line after them."""
    lines: list[Line] = []
    ctx = _Context(width, carry=None if carry is None else tuple(carry))
    _blocks(tokens, 0, end, ctx, lines, gap=True)
    while lines and not lines[-1]:
        lines.pop()
    return lines


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
            inline = _inline(tokens[here_index + 1])
            if here.carry is not None and here_index == 0:
                out += wrap_text(inline, here.width, here.carry, here.rest, continued=True)
            else:
                out += wrap_text(inline, here.width, here.first, here.rest)
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


@functools.lru_cache(maxsize=32)
def _lexer(language: str) -> Any:
    """Pygments' lexer for `language`, or None when it knows none (found once per name)."""
    from pygments.lexers import get_lexer_by_name  # type: ignore[import-untyped]
    from pygments.util import ClassNotFound  # type: ignore[import-untyped]

    try:
        return get_lexer_by_name(language, stripnl=False, ensurenl=False)
    except ClassNotFound:
        return None


def _highlight(code: str, language: str) -> list[tuple[str, str]]:
    if language:
        lexer = _lexer(language)
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


def _labelled(lines: list[Line], label: Line, first: bool) -> list[Line]:
    """`lines` behind `label` (on the first line when `first`) or as much space."""
    if not label:
        return lines
    pad: Line = [("", " " * width_of(_plain(label)))]
    return [[*(label if first and n == 0 else pad), *line] for n, line in enumerate(lines)]


#: The open block of a reply streaming in (its last paragraph, list, quote, code
#: block...) is laid out whole again as it grows while it is at most this many
#: characters: what shows is then exactly what the reply so far shows laid out whole.
#: A longer one is kept a part at a time (see `_Stream`): a line longer than this, say,
#: is laid out a piece at a time, the full screen lines of a piece kept, the last going
#: on with the next.
OPEN_BLOCK = 4000


@mutable(eq=False)
class _Stream:
    """The screen lines of a reply still streaming in, laid out a completed part at a time.

    The blocks before the last one are closed (no later text changes them): they
    are kept, each laid out once, when first shown (`_Kept`); only the open block
    after them is laid out again as the text grows, so the work done for each new
    piece does not grow with the reply, and the lines are the very lines of the
    reply so far laid out whole. Link reference definitions are the exception,
    handled as one: when the ones the reply makes change, it is laid out again
    from its start with them.

    An open block longer than `OPEN_BLOCK` is kept a part at a time too: the
    earlier lines of a paragraph, the earlier items of a list, the earlier lines
    of a code block, the full screen lines of a long line. Markup spanning two parts (an emphasis across lines, a list's number
    widths, a code block's colours) may then show differently until the reply is
    complete, when it is laid out whole (`exact` says whether it must be).
    """

    width: int
    #: Markdown (a reply), else plain text behind `prefix` in `style` (reasoning).
    markdown: bool
    style: str = ""
    prefix: str = ""
    #: The subagent's label on the first line (replies).
    label: Line = attrs.field(factory=list)
    #: The kept lines (closed blocks are laid out when first shown).
    done: _Kept = attrs.field(factory=lambda: _Kept())
    #: How many of the entry's parts were read.
    seen: int = 0
    #: The text not kept yet: the open part.
    rest: str = ""
    #: What the open part continues, read before it: an open code block's fence line.
    lead: str = ""
    #: The screen line the open part's first paragraph goes on after (a long line's).
    carry: Line | None = None
    #: True when a blank line separates the kept lines from the open part (two blocks).
    gap: bool = False
    #: False once a part was kept inside a block: the lines may differ from the whole's.
    exact: bool = True
    #: The link reference definitions the kept lines were laid out with (the reply's).
    references: References = attrs.field(factory=dict)
    #: Those the kept parts made, so far (the open part's are added to them).
    made: References = attrs.field(factory=dict)
    #: The blocks kept last, their tokens with them.
    fresh: list[_Later] = attrs.field(factory=list)

    @classmethod
    def of(cls, entry: TranscriptEntry, width: int) -> _Stream:
        """An empty stream laying out `entry` (a reply or reasoning) at `width`."""
        if entry.kind is EntryKind.ASSISTANT:
            label: Line = [("class:agent", f"[{entry.agent}] ")] if entry.agent else []
            return cls(width - width_of(_plain(label)), markdown=True, label=label)
        style, prefix = PREFIX[entry.kind]
        if entry.agent:
            prefix = f"{prefix}[{entry.agent}] "
        return cls(width, markdown=False, style=style, prefix=prefix)

    def lines(self, parts: list[str]) -> list[Line]:
        """The screen lines of the text of `parts`, which start with every part given before."""
        return self.last(parts, None)

    def last(self, parts: list[str], count: int | None) -> list[Line]:
        """The last `count` of `lines` (all of them when None): the kept blocks before
        them are not laid out for it."""
        while True:
            self.rest += visible("".join(parts[self.seen :]))
            self.seen = len(parts)
            self._advance()
            rest = self.rest
            made = dict(self.made)
            shown = (
                self._lay_out(self.lead + rest, made)
                if rest or self.carry or not self.markdown
                else []
            )
            if _labels(made) == _labels(self.references):
                break
            # The definitions changed (one was made, or an open one stopped being one):
            # the reply is laid out again from its start, with the definitions it has now.
            self._restart(made)
        kept = self.done.shows
        end = (self._blank() if self.gap and kept and shown else []) + _labelled(
            shown, self.label, not kept
        )
        if count is not None and len(end) >= count:
            return end[len(end) - count :]
        out = self.done.last(None if count is None else count - len(end)) + end
        # Nothing shows yet: an empty line, behind the label as the whole's.
        return out or _labelled([[]], self.label, True)

    def _restart(self, references: References) -> None:
        fresh = _Stream(self.width, self.markdown, self.style, self.prefix, self.label)
        fresh.references = {k: dict(v) for k, v in references.items()}
        for field in attrs.fields(_Stream):
            setattr(self, field.name, getattr(fresh, field.name))

    def _blank(self) -> list[Line]:
        return _labelled([[]], self.label, False)

    def _lay_out(self, text: str, made: References) -> list[Line]:
        carry, self_first = self.carry, not self.done.shows and self.carry is None
        if self.markdown:
            # Every definition of the reply is known to each part, as to the whole.
            known = _Definitions({**self.references, **made})
            lines = _markdown_lines(text, self.width, carry, known)
            for label, definition in known.made.items():
                made.setdefault(label, definition)
            return lines
        indent: Line = [("", " " * width_of(self.prefix))]
        if carry is not None:
            return wrap_text([(self.style, text)], self.width, carry, indent, continued=True)
        first = [(self.style, self.prefix)] if self_first else indent
        return wrap_text([(self.style, text)], self.width, first, indent)

    def _keep(self, lines: list[Line] | list[_Later]) -> None:
        blank = self.gap and self.done.shows
        if lines and isinstance(lines[0], _Later):
            for block in lines:
                # A blank line between two blocks; the label on the first line shown.
                block.blank, block.first = blank, not self.done.shows
                self.done.add(block)
                blank = True
            return
        lines = cast(list[Line], lines)
        if blank and lines:
            self.done.add(self._blank())
        self.done.add(_labelled(lines, self.label, not self.done.shows))

    def _advance(self) -> None:
        """Keep the lines of every part of the text completed since the last call."""
        while True:
            tail = self.lead + self.rest
            cut = self._cut(tail) if self.markdown else _plain_cut(tail)
            if cut is None:
                break
            at, lead, gap, whole, ready = cut
            if ready is None:
                # Plain text is kept up to its last newline, which the next part starts after.
                kept = tail[:at] if self.markdown else tail[: at - 1]
                ready = self._lay_out(kept, self.made)
            self._keep(ready)
            self.exact = self.exact and whole and self.carry is None
            self.carry = None
            self.rest = self.rest[at - len(self.lead) :]
            self.lead, self.gap = lead, gap
        tail = self.rest
        if not self.lead and "\n" not in tail and len(tail) > OPEN_BLOCK:
            self._cut_long_line(tail)

    def _cut(self, tail: str) -> _Cut | None:
        """Where the completed part of `tail` ends: (offset, the lead after it, gap, whether
        it ends a block, its lines when they were laid out already)."""
        end = tail.rfind("\n") + 1
        if end <= len(self.lead):
            return None
        complete = tail[:end]
        known = _Definitions({**self.references, **self.made})
        tokens = parse(complete, known)
        starts = [0]
        for line in complete.split("\n")[:-1]:
            starts.append(starts[-1] + len(line) + 1)
        at = [i for i, t in enumerate(tokens) if t.level == 0 and t.nesting >= 0 and t.map]
        blocks = [tokens[i] for i in at]
        if not blocks:
            return None
        last = blocks[-1]
        assert last.map is not None
        first_line, end_line = last.map
        if len(blocks) >= 2:
            # The blocks before the last are closed: no line to come changes them. They are
            # laid out from the tokens read to find them (their definitions too).
            cut = _progress(starts[first_line], "", True, self.lead, whole=True)
            if cut is None or self.carry is not None:
                return cut
            for label, definition in known.made.items():
                if definition["map"][0] < first_line:
                    self.made.setdefault(label, definition)
            if not all(_shows(tokens, i) for i in at[:-1]):
                return (*cut[:4], _token_lines(tokens, at[-1], self.width))
            # Each block is laid out when first shown (on the screen, or read back to):
            # its text is parsed again then.
            known_now = {**self.references, **self.made}
            bounds = [0, *(starts[tokens[i].map[0]] for i in at[1:])]  # type: ignore[index]
            later = [
                _Later(complete[start:end], known_now, self.width, self.label)
                for start, end in itertools.pairwise(bounds)
            ]
            # The tokens of the newest blocks are kept till the next cut: the next redraw
            # most likely shows them (the older ones are parsed again if ever shown).
            for block in self.fresh:
                block.tokens = None
            for block, start, end in zip(later, at, at[1:], strict=False):
                block.tokens, block.span = tokens, (start, end)
            self.fresh = later
            return (*cut[:4], later)
        if len(tail) <= OPEN_BLOCK and not self.lead and self.carry is None:
            # The open block is laid out whole again at each piece.
            return None
        if last.type == "paragraph_open" and end_line - 1 > first_line:
            # Its last line stays open: the next one may underline it into a heading.
            return _progress(starts[end_line - 1], "", False, self.lead)
        if last.type in ("bullet_list_open", "ordered_list_open"):
            items = [t for t in tokens if t.type == "list_item_open" and t.level == 1]
            if len(items) >= 2 and items[-1].map is not None:
                return _progress(starts[items[-1].map[0]], "", False, self.lead)
            return None
        if last.type == "fence" and end_line - first_line > 2:
            lines = complete.split("\n")
            if not _closed(last, lines):
                # Its lines but the last are kept; the open part goes on after its fence
                # line, with a line of code at least (so no empty block shows).
                return _progress(starts[end_line - 1], lines[first_line] + "\n", False, self.lead)
        return None

    def _cut_long_line(self, tail: str) -> None:
        """Keep the full screen lines of a long line still being written (one paragraph)."""
        if self.markdown:
            tokens = parse(tail)
            if len(tokens) != 3 or tokens[0].type != "paragraph_open":
                return
        at = tail.rfind(" ", 0, len(tail) - 1)
        if at <= 0:
            return
        lines = self._lay_out(tail[:at], self.made)
        if not lines:
            return
        self._keep(lines[:-1])
        # Markdown goes on after the line: a later line may make a heading of it, say.
        self.exact = self.exact and not self.markdown
        self.carry = lines[-1]
        self.rest = self.rest[at + 1 :]
        self.gap = False


class _Definitions(dict[str, Any]):
    """The definitions a part of a reply is parsed with: the reply's (the first of a
    label wins, wherever it is), and in `made` those the part itself makes."""

    def __init__(self, known: References) -> None:
        super().__init__(known)
        self.made: References = {}

    def __contains__(self, label: object) -> bool:
        # markdown-it asks before it adds a definition: each of the part's is seen.
        return label in self.made

    def __setitem__(self, label: str, definition: Any) -> None:
        self.made.setdefault(label, definition)
        if not super().__contains__(label):
            super().__setitem__(label, definition)


def _labels(references: References) -> dict[str, tuple[object, object]]:
    """What of `references` shows: each label's address and title."""
    return {label: (ref.get("href"), ref.get("title")) for label, ref in references.items()}


#: Where a streaming reply's completed part ends: the offset, the lead after it, whether
#: a blank line follows it, whether it ends a block, and its lines when laid out already
#: (or to be laid out when first shown).
_Cut = tuple[int, str, bool, bool, "list[Line] | list[_Later] | None"]

#: Blocks that always show a line at least (a heading or a quote may show none).
_SHOWING = frozenset(
    {
        "paragraph_open",
        "fence",
        "code_block",
        "hr",
        "table_open",
        "bullet_list_open",
        "ordered_list_open",
    }
)


def _shows(tokens: Sequence[Token], index: int) -> bool:
    """True when the block opened at `index` surely shows a line."""
    kind = tokens[index].type
    if kind == "heading_open":
        return bool(tokens[index + 1].content.strip())
    if kind == "blockquote_open":
        return tokens[index + 1].type != "blockquote_close"
    return kind in _SHOWING


@attrs.define(eq=False)
class _Later:
    """A closed block of a streaming reply, laid out when first shown: its text and the
    reply's link definitions then; it shows a line at least."""

    text: str
    references: References
    width: int
    label: Line
    #: A blank line goes before it; the label goes on its first line.
    blank: bool = False
    first: bool = False
    #: The tokens it was read from, if still kept, and its own among them.
    tokens: list[Token] | None = None
    span: tuple[int, int] = (0, 0)

    def lay_out(self) -> list[Line]:
        """Its screen lines, the blank line before it included."""
        if self.tokens is not None:
            start, end = self.span
            body = _token_lines(self.tokens[start:end], end - start, self.width)
            self.tokens = None
        else:
            known = _Definitions(self.references)
            body = _markdown_lines(self.text, self.width, None, known)
        lines = _labelled(body, self.label, self.first)
        if self.blank and lines:
            lines[:0] = _labelled([[]], self.label, False)
        return lines


@attrs.define(eq=False)
class _Kept:
    """The kept lines of a streaming reply: laid out, or blocks laid out when first asked for."""

    _parts: list[list[Line] | _Later] = attrs.field(factory=list)
    #: Something kept shows a line at least.
    shows: bool = False

    def add(self, lines: list[Line] | _Later) -> None:
        """Keep `lines` after the others."""
        if isinstance(lines, _Later):
            self._parts.append(lines)
            self.shows = True
        elif lines:
            if self._parts and isinstance(self._parts[-1], list):
                self._parts[-1] += lines
            else:
                self._parts.append(list(lines))
            self.shows = True

    def last(self, count: int | None) -> list[Line]:
        """The last `count` lines kept (all when None), laying out only the blocks they need."""
        chunks: list[list[Line]] = []
        got = 0
        index = len(self._parts)
        while index > 0 and (count is None or got < count):
            index -= 1
            part = self._parts[index]
            if isinstance(part, _Later):
                part = self._parts[index] = part.lay_out()
            chunks.append(part)
            got += len(part)
        out = list(itertools.chain.from_iterable(reversed(chunks)))
        return out if count is None else out[max(0, len(out) - count) :]


def _progress(at: int, lead: str, gap: bool, old_lead: str, *, whole: bool = False) -> _Cut | None:
    """A cut at `at` when it keeps more than the old lead (else None: nothing to keep);
    `whole` when it ends a block."""
    return (at, lead, gap, whole, None) if at > len(old_lead) else None


def _closed(fence: Token, lines: list[str]) -> bool:
    """True when `fence` (a code block's token) has its closing fence among `lines`."""
    assert fence.map is not None
    start, end = fence.map
    if end - 1 <= start or end - 1 >= len(lines):
        return False
    closing = lines[end - 1].strip()
    marker = fence.markup
    return bool(marker) and closing.startswith(marker) and set(closing) == {marker[0]}


def _plain_cut(tail: str) -> _Cut | None:
    """Plain text is kept up to its last full line (each line is wrapped alone)."""
    end = tail.rfind("\n")
    return (end + 1, "", False, True, None) if end >= 0 else None


@mutable(eq=False)
class LineCache:
    """Screen lines of each entry, made again only when its text or the width changed.

    An entry still growing (the reply or reasoning streaming in) is laid out a piece
    at a time (see `_Stream`); once it stops, those lines are its lines, or, when
    parts of a block were kept apart (`_Stream.exact` is false), it is laid out
    whole, once.
    """

    _cache: dict[int, tuple[int, int, bool, list[Line]]] = attrs.field(factory=dict, init=False)
    _streams: dict[int, tuple[int, _Stream]] = attrs.field(factory=dict, init=False)
    _last: dict[int, tuple[tuple[int, int, bool, int], list[Line]]] = attrs.field(
        factory=dict, init=False
    )
    _oldest: int = attrs.field(default=0, init=False)

    def lines(self, entry: TranscriptEntry, width: int, *, growing: bool = False) -> list[Line]:
        """`entry_lines` of `entry`, cached by its serial; `growing` while it streams in."""
        growing = growing and entry.kind in (EntryKind.ASSISTANT, EntryKind.REASONING)
        key = (width, len(entry.parts), growing)
        hit = self._cache.get(entry.serial)
        if hit is not None and hit[:3] == key:
            return hit[3]
        stream = self._stream(entry, width, growing)
        lines = stream.lines(entry.parts) if stream is not None else entry_lines(entry, width)
        self._cache[entry.serial] = (*key, lines)
        return lines

    def last(
        self, entry: TranscriptEntry, width: int, count: int, *, growing: bool = False
    ) -> list[Line]:
        """The last `count` of `lines` (all when there are fewer): a reply that streamed in
        lays out only the blocks they show."""
        growing = growing and entry.kind in (EntryKind.ASSISTANT, EntryKind.REASONING)
        hit = self._cache.get(entry.serial)
        if hit is not None and hit[:3] == (width, len(entry.parts), growing):
            return hit[3][-count:]
        key = (width, len(entry.parts), growing, count)
        seen = self._last.get(entry.serial)
        if seen is not None and seen[0] == key:
            return seen[1]
        stream = self._stream(entry, width, growing)
        if stream is None:
            return self.lines(entry, width, growing=growing)[-count:]
        lines = stream.last(entry.parts, count)
        self._last[entry.serial] = (key, lines)
        return lines

    def _stream(self, entry: TranscriptEntry, width: int, growing: bool) -> _Stream | None:
        """The stream laying out `entry` (a new one when it grows); None once it must be laid
        out whole."""
        known = self._streams.get(entry.serial)
        if growing:
            if known is None or known[0] != width:
                known = self._streams[entry.serial] = (width, _Stream.of(entry, width))
            return known[1]
        if known is not None and known[0] == width and known[1].exact:
            # What streamed in was laid out as the whole would be: it is not done again.
            stream = known[1]
            if stream.seen != len(entry.parts):
                stream.last(entry.parts, 0)  # reads the parts, lays out no kept block
            if stream.exact:
                return stream
        self._streams.pop(entry.serial, None)
        return None

    def forget_before(self, serial: int) -> None:
        """Drop the lines of entries older than `serial` (they left the transcript)."""
        if serial <= self._oldest:
            return
        self._oldest = serial
        for old in [s for s in self._cache if s < serial]:
            del self._cache[old]
        for old in [s for s in self._streams if s < serial]:
            del self._streams[old]
        for old in [s for s in self._last if s < serial]:
            del self._last[old]

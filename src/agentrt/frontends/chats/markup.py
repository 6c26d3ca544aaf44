"""Model replies, written in Markdown, as Telegram's HTML (``parse_mode: "HTML"``).

Telegram shows a small HTML subset: ``b``, ``i``, ``s``, ``u``, ``code``,
``pre`` (with ``<code class="language-x">`` inside), ``a href``,
``blockquote``. Every ``<``, ``>`` and ``&`` that is not markup must be
escaped, or the message is refused. The reply is parsed with markdown-it-py
(CommonMark, strikethrough, tables; raw HTML in the reply stays text) and
written out in that subset: headings become bold lines, list items bullets,
tables a preformatted block of their source lines.

The text Telegram shows is never longer than the Markdown it came from (only
markup is dropped, and an escape counts as one character), so a reply cut to
Telegram's length limit before it is rendered still fits.
"""

from __future__ import annotations

import functools
import html
from typing import TYPE_CHECKING
from typing import NamedTuple

if TYPE_CHECKING:
    from markdown_it import MarkdownIt
    from markdown_it.token import Token

#: Inline tokens that open and close a Telegram tag.
_INLINE_TAGS = {
    "strong_open": "<b>",
    "strong_close": "</b>",
    "em_open": "<i>",
    "em_close": "</i>",
    "s_open": "<s>",
    "s_close": "</s>",
}


@functools.cache
def _parser() -> MarkdownIt:
    # Imported on first use: a bot that never formats a reply does not load it.
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": False, "breaks": True}).enable(
        ["strikethrough", "table"]
    )


def escape(text: str) -> str:
    """`text` safe as Telegram HTML text: ``&``, ``<`` and ``>`` escaped."""
    return html.escape(text, quote=False)


def telegram_html(markdown: str) -> str:
    """`markdown` as Telegram HTML; blocks are separated by one blank line."""
    tokens = _parser().parse(markdown)
    lines = markdown.splitlines()
    blocks: list[_Block] = []
    prefix: list[str] = []  # list markers and quote openers waiting for their first text
    counters: list[int | None] = []  # per open list: the next number, None for bullets
    quote_depth = 0
    i = 0
    while i < len(tokens):
        token = tokens[i]
        kind = token.type
        if kind == "heading_open":
            text = "<b>" + _inline(tokens[i + 1]) + "</b>"
            blocks.append(_Block(_lead(prefix) + text, bool(counters), token.map))
            i += 3
            continue
        if kind == "paragraph_open":
            text = _inline(tokens[i + 1])
            if quote_depth:
                text = f"<blockquote>{text}</blockquote>"
            blocks.append(_Block(_lead(prefix) + text, bool(counters), token.map))
            i += 3
            continue
        if kind in ("fence", "code_block"):
            code = escape(token.content.rstrip("\n"))
            language = token.info.strip().split(maxsplit=1)[0] if token.info.strip() else ""
            if language:
                body = f'<pre><code class="language-{escape(language)}">{code}</code></pre>'
            else:
                body = f"<pre>{code}</pre>"
            blocks.append(_Block(_lead(prefix) + body, bool(counters), token.map))
        elif kind == "table_open":
            start, end = token.map or (0, 0)
            source = "\n".join(lines[start:end])
            body = f"<pre>{escape(source)}</pre>"
            blocks.append(_Block(_lead(prefix) + body, bool(counters), token.map))
            while tokens[i].type != "table_close":
                i += 1
        elif kind == "hr":
            blocks.append(_Block(_lead(prefix) + "———", bool(counters), token.map))
        elif kind in ("bullet_list_open", "ordered_list_open"):
            start_at = token.attrGet("start")
            counters.append(
                None if kind == "bullet_list_open" else int(start_at) if start_at else 1
            )
        elif kind in ("bullet_list_close", "ordered_list_close"):
            counters.pop()
        elif kind == "list_item_open":
            number = counters[-1]
            indent = "  " * (len(counters) - 1)
            if number is None:
                prefix.append(f"{indent}• ")
            else:
                prefix.append(f"{indent}{number}. ")
                counters[-1] = number + 1
        elif kind == "list_item_close":
            if prefix:
                prefix.pop()
        elif kind == "blockquote_open":
            quote_depth += 1
        elif kind == "blockquote_close":
            quote_depth -= 1
        i += 1
    return _join(blocks)


def _lead(prefix: list[str]) -> str:
    """The list markers before a block: shown once, on the item's first block."""
    if not prefix:
        return ""
    lead = prefix[-1]
    prefix[-1] = " " * len(lead)
    return lead


class _Block(NamedTuple):
    """One block of the reply as Telegram HTML."""

    text: str
    #: Inside a list: the blocks of a list follow each other without a blank line.
    in_list: bool
    #: Its source lines (first, past the last), when the parser gave them.
    lines: list[int] | None


def _join(blocks: list[_Block]) -> str:
    """The blocks, a blank line between two only where the Markdown had one (or a list ended).

    Adding a blank line the source did not have would make the text longer
    than the Markdown (``1`` then ``- 1`` on the next line).
    """
    out = ""
    previous: _Block | None = None
    for block in blocks:
        if previous is None:
            out = block.text
        elif (block.in_list and previous.in_list) or _adjacent(previous, block):
            out += "\n" + block.text
        else:
            out += "\n\n" + block.text
        previous = block
    return out


def _adjacent(first: _Block, second: _Block) -> bool:
    """Whether `second` starts on the source line right after `first` ends."""
    return (
        first.lines is not None and second.lines is not None and second.lines[0] <= first.lines[1]
    )


def _inline(token: Token) -> str:
    out: list[str] = []
    for child in token.children or ():
        kind = child.type
        if kind == "text":
            out.append(escape(child.content))
        elif kind in ("softbreak", "hardbreak"):
            out.append("\n")
        elif kind == "code_inline":
            out.append(f"<code>{escape(child.content)}</code>")
        elif kind in _INLINE_TAGS:
            out.append(_INLINE_TAGS[kind])
        elif kind == "link_open":
            href = str(child.attrGet("href") or "")
            out.append(f'<a href="{html.escape(href, quote=True)}">')
        elif kind == "link_close":
            out.append("</a>")
        elif kind == "image":
            out.append(escape(child.content or str(child.attrGet("alt") or "")))
        else:
            out.append(escape(child.content))
    return "".join(out)

"""Text that reaches a terminal: control characters shown, never obeyed.

Model replies, tool output, question prompts and messages posted over HTTP
are not agentrt's to trust. Written to a terminal as they are, an OSC 0
(``ESC ] 0 ; ... BEL``) retitles the window, OSC 52 writes the clipboard,
``ESC [ 2 J`` clears the screen and a C1 CSI (U+009B) does the same in one
character. So every character a terminal may act on is turned into a visible
glyph before it is written, the ones prompt_toolkit draws (and so the ones
agenttui shows): ``^[`` for ESC, ``^G`` for BEL, ``^H`` for backspace (caret
notation for every C0 control), ``^?`` for DEL, ``<9b>`` for each C1
control (U+0080-U+009F). Not a list of sequences to catch: every control
character, whatever follows it.

Newline and tab are layout and stay. A carriage return could put text over
the start of its own line (a "safe" line overwritten by a forged one), so it
is shown as ``^M``, except where a newline follows it at once: ``\\r\\n``, a
line end written the Windows way, is a plain newline.

JSON written for a program (``--json``) keeps every value exact: `dumps`
escapes what `json.dumps(..., ensure_ascii=False)` would leave raw (DEL and
the C1 controls) as ``\\u007f`` / ``\\u0080``-``\\u009f``, on top of the
escapes JSON itself makes for U+0000-U+001F, so even a plain ``cat`` of the
output cannot drive a terminal, while `json.loads` gives the original text.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import re
import sys
from collections.abc import Iterator
from typing import Any
from typing import Final
from typing import TextIO
from typing import cast

#: Every character a terminal may act on, but newline and tab; and the lone surrogates
#: (a byte that was not UTF-8, kept by ``surrogateescape``, would be written as that byte).
_CONTROL: Final = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")
#: The ASCII characters a terminal shows as they are: those `_CONTROL` does not match.
_ASCII_SHOWN: Final = bytes(c for c in range(0x80) if not _CONTROL.match(chr(c)))


def _has_control(text: str) -> bool:
    """Whether `text` holds a character `visible` would change.

    ASCII text (Python knows it is without a scan) is checked by deleting
    every shown byte in one C loop: a megabyte listing takes 0.6 ms so, five
    times less than `_CONTROL`'s scan, which checks the rest.
    """
    if text.isascii():
        return bool(text.encode("ascii").translate(None, _ASCII_SHOWN))
    return _CONTROL.search(text) is not None


@functools.cache
def glyphs() -> dict[int, str]:
    """The glyph of each control character, as prompt_toolkit draws them; a byte that was not
    UTF-8 is shown as its value (``<9b>``), any other lone surrogate as its code point.

    Built on first use: its 2,111 entries cost half a millisecond, and most text has no
    control character to show.
    """
    return {
        **{code: "^" + chr(code + 0x40) for code in range(0x20) if chr(code) not in "\n\t"},
        0x7F: "^?",
        **{code: f"<{code:02x}>" for code in range(0x80, 0xA0)},
        **{code: f"<{code - 0xDC00:02x}>" for code in range(0xDC80, 0xDD00)},
        **{code: f"<{code:04x}>" for code in range(0xD800, 0xE000) if not 0xDC80 <= code < 0xDD00},
    }


def visible(text: str) -> str:
    """`text` with every control character but newline and tab shown as a glyph.

    ``\\r\\n`` becomes ``\\n``; a carriage return alone is ``^M``. Text with no
    control character is returned as it is (the common case costs one scan).
    """
    if not _has_control(text):
        return text
    return text.replace("\r\n", "\n").translate(glyphs())


#: What `json.dumps(ensure_ascii=False)` leaves raw that a terminal acts on (and the lone
#: surrogates, which a ``surrogateescape`` stream would write as raw bytes).
_RAW_IN_JSON: Final = re.compile("[\x7f-\x9f\ud800-\udfff]")


def dumps(value: Any, *, indent: int | None = None) -> str:
    """`value` as JSON text (non-ASCII kept readable) in which no control character is raw.

    The escapes are JSON's own: `json.loads` of the result equals `value`.
    """
    text = json.dumps(value, ensure_ascii=False, indent=indent)
    return _RAW_IN_JSON.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


class VisibleStream(io.TextIOBase):
    """A text stream that shows control characters (see `visible`) of what it is given.

    Set as `sys.stdout` and `sys.stderr` of a command, it is the one place
    where untrusted text is made safe, whichever line prints it. agentrt's own
    formatting (a progress line that returns to its start) goes through `own`.
    """

    def __init__(self, stream: TextIO) -> None:
        super().__init__()
        #: The stream written to.
        self.stream = stream

    def write(self, text: str) -> int:
        """Write `text` with its control characters shown; returns ``len(text)``."""
        self.stream.write(visible(text))
        return len(text)

    def flush(self) -> None:
        """Flush the stream written to."""
        self.stream.flush()

    def isatty(self) -> bool:
        """Whether the stream written to is a terminal."""
        return self.stream.isatty()

    def fileno(self) -> int:
        """The file descriptor of the stream written to."""
        return self.stream.fileno()

    def writable(self) -> bool:
        """Always: this stream is written to."""
        return True

    @property
    def encoding(self) -> str:  # type: ignore[override]
        """The encoding of the stream written to."""
        return self.stream.encoding


def showing(stream: TextIO) -> TextIO:
    """`stream` wrapped in a `VisibleStream` (once: a wrapped one is returned as it is)."""
    if isinstance(stream, VisibleStream):
        return stream
    return cast(TextIO, VisibleStream(stream))


def own(stream: TextIO) -> TextIO:
    """The stream under any `VisibleStream`: for agentrt's own control characters only."""
    while isinstance(stream, VisibleStream):
        stream = stream.stream
    return stream


@contextlib.contextmanager
def shown_output() -> Iterator[None]:
    """`sys.stdout` and `sys.stderr` show control characters instead of passing them on.

    The one place a command's plain-text output is made safe for a terminal:
    model and tool text, questions, listings, errors, whichever line prints
    them. JSON made by `dumps` holds no raw control character, so passes as
    it is.
    """
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = showing(out), showing(err)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = out, err

"""The unified diff a ``write_file`` or ``edit_file`` confirmation shows, bounded.

A person approves what they can read: the diff of the file's current content
(read in the sandbox, as ``read_file`` reads it) against the new one, made
before the question is asked and carried in it (`agentrt.vocab.request.Request.diff`).
It is cut at `DIFF_LINES` lines or `DIFF_BYTES` bytes, whichever comes first,
always at the end of a line, with a last line saying how many more there were.
Secret values in it are redacted with the rest of the question.
"""

from __future__ import annotations

from typing import Final

#: The most lines of diff a confirmation shows.
DIFF_LINES: Final = 200
#: The most bytes (UTF-8) of diff a confirmation shows.
DIFF_BYTES: Final = 16 * 1024
#: The file a new file's diff is against.
NO_FILE: Final = "/dev/null"


def _lines(data: bytes) -> list[str]:
    return data.decode("utf-8", "replace").splitlines(keepends=True)


def unified_diff(name: str, old: bytes | None, new: bytes) -> str:
    """The diff from `old` (None: no file yet) to `new` of the file shown as `name`, bounded.

    A binary side (a NUL byte) gives one line saying so, and content that does
    not change gives a line saying that.
    """
    if old == new:
        return f"(no change to {name}: the new content is the same)"
    import difflib  # loaded when a write is asked about, not by every run

    if b"\0" in new or (old is not None and b"\0" in old):
        before = "no file" if old is None else f"{len(old)} bytes"
        return f"Binary content of {name} differs ({before} -> {len(new)} bytes)"
    lines = difflib.unified_diff(
        [] if old is None else _lines(old),
        _lines(new),
        fromfile=NO_FILE if old is None else f"a/{name}",
        tofile=f"b/{name}",
    )
    shown: list[str] = []
    size = 0
    more = 0
    for line in lines:
        if not line.endswith("\n"):
            line += "\n\\ No newline at end of file\n"
        if more or len(shown) >= DIFF_LINES or size + len(line.encode()) > DIFF_BYTES:
            more += line.count("\n")
            continue
        shown.append(line)
        size += len(line.encode())
    if more:
        shown.append(f"... {more} more line{'s' if more != 1 else ''}\n")
    return "".join(shown).rstrip("\n")

"""How `agentrt pending list` shows a pending task: one line of text each.

A line reads ``SESSION STATUS (CAUSE) YYYY-MM-DD HH:MM:SS  WHAT``: the session
id padded to 20 characters, the status (``crashed`` for a running task whose
process is gone) and its cause padded to 28, the local time of the last change,
then what the task asks (``asks: ...``) or its input, shortened to 60
characters. A task that cannot be read says how to discard it instead.

An SQLite store keeps each task's line, its time left out (`template`), in the
task's row, so that listing thousands of tasks reads one column of each and
decodes nothing (see ``TaskStore.list_lines``); `lines` makes the same lines
from a listing's values, and both are built from `head` and `what`. A daemon
sends the lines with their times left out as well (`templates`), and the
client puts each time in (`filled`), in its own time zone.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from collections.abc import Iterable

from ..vocab.terminal import visible

#: What a text listing shows of one pending task, as plain values: (session id, status,
#: crashed, cause, updated at, its question's prompt, input). The status and the cause are
#: the values of `TaskStatus` and `Cause`; an unreadable task is ``(session id,
#: "unreadable", False, None, updated at or 0.0, None, "")``.
BriefTask = tuple[str, str, bool, str | None, float, str | None, str]

#: The status a listing shows for a stored task that cannot be read.
UNREADABLE = "unreadable"
#: Where a stored line's time goes (`template`); never part of a line's head.
TIME_MARK = "\x1f"
#: How many characters of what a task asks or was given a line shows.
WHAT_CHARS = 60

#: Formatted times by whole second: a listing's tasks often share one.
_STAMPS: dict[int, str] = {}


def head(session: str, status: str, cause: str | None, crashed: bool = False) -> str:
    """A line up to its time: the session id, and the status with its cause, padded."""
    return f"{session:<20}{_shown(status, cause, crashed)}"


def _shown(status: str, cause: str | None, crashed: bool) -> str:
    """The status part of a line's head, padded, between spaces."""
    shown = "crashed" if crashed else status
    if cause:
        shown = f"{shown} ({cause})"
    return f" {shown:<28} "


def what(prompt: str | None, text: str) -> str:
    """A line after its time: what the task asks, else its input, shortened."""
    shown = f"asks: {prompt}" if prompt is not None else text
    if len(shown) > WHAT_CHARS:
        shown = shown[: WHAT_CHARS - 3] + "..."
    return f"  {shown}"


def stamp(second: int) -> str:
    """The local time of `second` (seconds since the epoch) as a line shows it."""
    shown = _STAMPS.get(second)
    if shown is None:
        shown = _STAMPS[second] = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(second))
    return shown


def storable(text: str) -> bool:
    """Whether `text` is kept as it is by an SQLite text column and its string functions.

    Not so with a lone surrogate (no UTF-8 for it) or a NUL (SQLite's functions
    end a string at its first).
    """
    if "\x00" in text:
        return False
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def line_head(session: str, status: str, cause: str | None) -> str | None:
    """`head` as a stored line keeps it, or None when it cannot be kept.

    A head that holds `TIME_MARK` (in its session id) or cannot be stored as
    text has no stored line: such a task is listed from its record.
    """
    shown = head(session, status, cause)
    return shown if TIME_MARK not in shown and storable(shown) else None


def template(
    session: str, status: str, cause: str | None, prompt: str | None, text: str
) -> str | None:
    """A task's line with `TIME_MARK` where its time goes, as its row keeps it; or None.

    None when the line cannot be kept (see `line_head`, and `what` must be
    storable too).
    """
    start = line_head(session, status, cause)
    if start is None:
        return None
    rest = what(prompt, text)
    return start + TIME_MARK + rest if storable(rest) else None


def lines(tasks: Iterable[BriefTask]) -> list[str]:
    """One line per task, in one pass (a listing may hold thousands)."""
    return _lines(tasks, stamp)


def templates(tasks: Iterable[BriefTask]) -> list[str]:
    """`lines` with `TIME_MARK` where each time goes (made from its `updated_at`).

    No mark comes before a line's time: one in its head (a session id written
    by hand that holds one) is shown there as a terminal shows it (`visible`).
    """
    return _lines(tasks, lambda _: TIME_MARK, marked=True)


def filled(line: str, second: int) -> str:
    """A `templates` line with its time, `second` (since the epoch), put in at its first
    `TIME_MARK`."""
    return line.replace(TIME_MARK, stamp(second), 1)


def _lines(
    tasks: Iterable[BriefTask], shown_time: Callable[[int], str], *, marked: bool = False
) -> list[str]:
    heads: dict[tuple[bool, str, str | None], str] = {}  # a listing shows few of these
    out: list[str] = []
    add = out.append
    for session, status, crashed, cause, updated_at, question, text in tasks:
        age = shown_time(int(updated_at))
        if status == UNREADABLE:
            # Not shortened: the way out must stay readable.
            start = head(session, status, cause)
            rest = f"  cannot be read; discard it with: agentrt pending discard {session}"
        else:
            key = (crashed, status, cause)
            shown = heads.get(key)
            if shown is None:
                shown = heads[key] = _shown(status, cause, crashed)
            start = f"{session:<20}{shown}"
            rest = what(question, text)
        if marked and TIME_MARK in start:
            start = visible(start)
        add(f"{start}{age}{rest}")
    return out

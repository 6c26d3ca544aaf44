"""Files attached to a message with ``@path``: the path completed as it is typed, the file
read when the message is sent.

A word of the message that starts with ``@`` names a file, relative to the
window's folder (or absolute, or ``~/...``), when a file of that name exists or
the word reads as a path (a ``/`` or an extension): ``@alice`` and
``@dataclass`` stay text, and so does any ``@`` inside code. When the message is sent, each
named file's text is added to it, in a ``<file path="...">`` block the model
reads as part of the user's message; the transcript shows one line per file,
not its text. A file over `ATTACH_LIMIT`, one that is not UTF-8 text (a binary
file), a folder, a missing or unreadable file, or files together too large for
one frame to the daemon, are refused with a message saying which and why, and
nothing is sent.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from collections.abc import Iterable
from pathlib import Path
from typing import Final

from prompt_toolkit.completion import CompleteEvent
from prompt_toolkit.completion import Completer
from prompt_toolkit.completion import Completion
from prompt_toolkit.document import Document

from agentrt.protocol.codec import MAX_FRAME_SIZE
from agentrt.vocab.reprs import record

#: The most one attached file may hold.
ATTACH_LIMIT: Final = 256 * 1024
#: Room a `run` frame needs beside its text (its other fields), within `MAX_FRAME_SIZE`.
_FRAME_ROOM: Final = 8 * 1024
#: The most completions shown for one folder.
COMPLETIONS_SHOWN: Final = 200
#: A word that names a file: ``@`` at the start of a word, then the path.
_WORD: Final = re.compile(r"(?<!\S)@(\S+)")
#: What may end a sentence right after a path (``see @notes.txt.``): not part of the name.
_TRAILING: Final = ".,;:!?)]}'\""
#: Code in a message: a fenced block, or an inline span; an ``@`` in it names no file.
_CODE: Final = re.compile(r"```.*?(?:```|$)|`[^`\n]*`", re.DOTALL)
#: A file name's extension (``.txt``, ``.py``), which makes an ``@`` word read as a path.
_EXTENSION: Final = re.compile(r"\.[A-Za-z0-9]{1,8}$")


class AttachError(ValueError):
    """A file that cannot be attached; the message names it and says why."""


@record
class Attached:
    """A message with its files: what the model is sent, and each file's name and size."""

    text: str
    files: tuple[tuple[str, int], ...] = ()


def named_files(text: str) -> list[str]:
    """The ``@`` words of `text` outside its code (fenced blocks, `inline code`), each once."""
    prose = _CODE.sub(" ", text)
    return list(dict.fromkeys(match.group(1) for match in _WORD.finditer(prose)))


def _looks_like_a_path(name: str) -> bool:
    """Whether ``@name`` reads as a path (``src/app.py``, ``notes.txt``), not a handle or a
    decorator (``@alice``, ``@dataclass``)."""
    return "/" in name or _EXTENSION.search(name.rstrip(_TRAILING)) is not None


def attach(text: str, folder: str) -> Attached:
    """`text` with the text of each file it names added; `AttachError` if one cannot be.

    An ``@`` word names a file when there is one by that name, or when it
    reads as a path (then one that is missing is refused); any other (a
    handle, a decorator) is plain text, and so is every ``@`` inside code.
    """
    base = Path(folder)
    names = [name for name in named_files(text) if _exists(base, name) or _looks_like_a_path(name)]
    if not names:
        return Attached(text)
    blocks = [text]
    files = []
    for name in names:
        shown, content = _read(name, Path(folder))
        blocks.append(f'<file path="{shown}">\n{content}\n</file>')
        files.append((shown, len(content.encode("utf-8"))))
    whole = "\n\n".join(blocks)
    if len(json.dumps(whole)) > MAX_FRAME_SIZE - _FRAME_ROOM:
        raise AttachError(
            f"the attached files are together too large to send (more than "
            f"{(MAX_FRAME_SIZE - _FRAME_ROOM) // 1024} KiB as sent): attach fewer or smaller ones"
        )
    return Attached(whole, tuple(files))


def _exists(folder: Path, name: str) -> bool:
    stripped = name.rstrip(_TRAILING)
    return any((folder / os.path.expanduser(n)).exists() for n in (name, stripped) if n)


def _read(name: str, folder: Path) -> tuple[str, str]:
    """(the name as attached, the file's text) of ``@name``."""
    path = folder / os.path.expanduser(name)
    stripped = name.rstrip(_TRAILING)
    if not path.exists() and stripped and stripped != name:
        name, path = stripped, folder / os.path.expanduser(stripped)
    where = f"@{name}"
    try:
        if path.is_dir():
            raise AttachError(f"cannot attach {where}: it is a folder; name a file in it")
        with path.open("rb") as file:
            data = file.read(ATTACH_LIMIT + 1)
    except FileNotFoundError:
        raise AttachError(f"cannot attach {where}: there is no such file in {folder}") from None
    except OSError as exc:
        raise AttachError(f"cannot attach {where}: {exc.strerror or exc}") from None
    if len(data) > ATTACH_LIMIT:
        raise AttachError(
            f"cannot attach {where}: it is larger than {ATTACH_LIMIT // 1024} KiB; "
            "attach a smaller file, or a part of it"
        )
    try:
        if b"\0" in data:
            raise UnicodeDecodeError("utf-8", data, 0, 1, "a NUL byte")
        content = data.decode("utf-8")
    except UnicodeDecodeError:
        raise AttachError(
            f"cannot attach {where}: it is a binary file; only text files (UTF-8) can be attached"
        ) from None
    return name, content


def path_completions(folder: str, typed: str) -> Iterable[Completion]:
    """The entries of the folder `typed` is in whose names continue it (folders end in ``/``).

    Hidden entries only once their dot is typed; at most `COMPLETIONS_SHOWN`.
    """
    prefix = typed.rsplit("/", 1)[-1]
    head = typed[: len(typed) - len(prefix)]
    directory = Path(folder) / os.path.expanduser(head) if head else Path(folder)
    try:
        with os.scandir(directory) as entries:
            found = sorted(
                (entry.name, entry.is_dir())
                for entry in entries
                if entry.name.startswith(prefix)
                and (prefix.startswith(".") or not entry.name.startswith("."))
            )
    except OSError:
        return
    for name, is_dir in found[:COMPLETIONS_SHOWN]:
        end = "/" if is_dir else ""
        yield Completion(name[len(prefix) :] + end, 0, display=name + end)


class AttachCompleter(Completer):
    """Completes the path of the ``@`` word being typed, in the window's folder."""

    def __init__(self, folder: Callable[[], str]) -> None:
        self._folder = folder

    def get_completions(
        self, document: Document, complete_event: CompleteEvent
    ) -> Iterable[Completion]:
        """The completions of the word before the cursor, when it starts with ``@``."""
        word = document.get_word_before_cursor(WORD=True)
        if not word.startswith("@"):
            return
        yield from path_completions(self._folder() or os.getcwd(), word[1:])

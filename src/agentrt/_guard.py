"""The early, friendly checks of what a tool call names, and what its output may show.

What a tool may touch is enforced by the kernel (`agentrt._sandbox`): the
agent's own state is not there inside the sandbox, and restricted paths are
read-only. The checks here only read a call's text, to say *early* what the
sandbox would refuse and to ask for the system password when a command names
a restricted path plainly (that password then makes exactly the named roots
writable). They are heuristics with known limits (a path built at run time,
``cd`` into a folder then a relative name), and the sandbox holds without
them. Any stored secret value that still appears in a tool's output or the
model's text is replaced by ``[secret NAME]`` before it reaches the
transcript, an event, a log or the model.
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

import attrs

from ._keys import KEYS_DIR
from ._locations import HTTP_TOKEN_FILE
from ._reprs import fields_repr

#: Secret values shorter than this are not searched for (too likely to match by chance).
MIN_REDACTED_LENGTH = 4

#: Characters that separate the paths a shell command may mention.
_SHELL_SEPARATORS = re.compile(r"[\s=;|&<>()`'\",{}]+")
_GLOB_CHARS = re.compile(r"[*?\[]")


def resolve_path(raw: str, base: Path) -> Path:
    """`raw` as a tool means it: variables and ``~`` expanded, relative to `base`, resolved."""
    expanded = os.path.expanduser(os.path.expandvars(raw))
    return (base / expanded).resolve()


def inside(path: Path, folders: Iterable[Path]) -> Path | None:
    """The first of `folders` that `path` is, or lies inside; None if none."""
    for folder in folders:
        if path == folder or folder in path.parents:
            return folder
    return None


def mentioned_paths(command: str, base: Path) -> set[Path]:
    """The paths a shell command names, each resolved as `resolve_path` does.

    Every fragment between shell separators that looks like a path (it holds a
    ``/``, starts with ``~``, ``.`` or ``$``, or holds a glob character) counts;
    a fragment with glob characters also counts for every existing path it matches.
    """
    found: set[Path] = set()
    for fragment in _SHELL_SEPARATORS.split(command):
        if not fragment or not (
            "/" in fragment or fragment[0] in "~.$" or _GLOB_CHARS.search(fragment)
        ):
            continue
        try:
            found.add(resolve_path(fragment, base))
        except (OSError, RuntimeError, ValueError):
            continue
        if _GLOB_CHARS.search(fragment):
            pattern = os.path.expanduser(os.path.expandvars(fragment))
            for match in glob.glob(pattern if os.path.isabs(pattern) else str(base / pattern)):
                found.add(Path(match).resolve())
    return found


def command_touches(command: str, base: Path, folders: Iterable[Path]) -> Path | None:
    """The first of `folders` that `command` mentions, by path or by name; None if none.

    Conservative on purpose: the folder's own text anywhere in the command counts
    too, resolved or as given.
    """
    folders = tuple(folders)
    for folder in folders:
        if str(folder) in command:
            return folder
    for path in mentioned_paths(command, base):
        hit = inside(path, folders)
        if hit is not None:
            return hit
    return None


def touched_roots(command: str, base: Path, folders: Iterable[Path]) -> tuple[Path, ...]:
    """Every one of `folders` that `command` mentions (see `command_touches`), in their order."""
    folders = tuple(folders)
    paths = mentioned_paths(command, base)
    return tuple(
        folder
        for folder in folders
        if str(folder) in command or any(inside(p, (folder,)) for p in paths)
    )


@attrs.define(eq=False)
class Redactor:
    """Replaces stored secret values (and other named secret files) in text with ``[secret NAME]``.

    It reads the secrets folder again only when the folder or a named file changed,
    so calling it on every streamed piece of text costs a few `stat` calls.
    """

    __repr__ = fields_repr

    secrets_dir: Path
    #: Other files whose whole content is a secret (the HTTP token), by the name to show.
    files: Mapping[str, Path] = attrs.field(factory=dict)
    #: Other folders of one secret a file, each shown by its file's name (the key store).
    more_dirs: tuple[Path, ...] = ()
    _stamp: tuple[int, ...] = attrs.field(default=(), init=False)
    _values: list[tuple[str, str]] = attrs.field(factory=list, init=False)

    @classmethod
    def for_state_dir(cls, state_dir: Path) -> Redactor:
        """The secrets of a state dir: its secret store, its key store and its HTTP token."""
        return cls(
            state_dir / "secrets",
            {HTTP_TOKEN_FILE: state_dir / HTTP_TOKEN_FILE},
            (state_dir / KEYS_DIR,),
        )

    def values(self) -> list[tuple[str, str]]:
        """``(name, value)`` of every secret to hide, longest value first."""
        stamp = self._current_stamp()
        if stamp != self._stamp:
            self._values = sorted(self._load(), key=lambda nv: -len(nv[1]))
            self._stamp = stamp
        return self._values

    def redact(self, text: str) -> str:
        """`text` with every secret value replaced by ``[secret NAME]``."""
        if not text:
            return text
        for name, value in self.values():
            if value in text:
                text = text.replace(value, f"[secret {name}]")
        return text

    def _current_stamp(self) -> tuple[int, ...]:
        stamp: list[int] = []
        for path in (self.secrets_dir, *self.more_dirs, *self.files.values()):
            try:
                info = os.stat(path)
            except OSError:
                stamp.append(-1)
                continue
            stamp.extend((info.st_mtime_ns, info.st_size, info.st_ino))
        return tuple(stamp)

    def _load(self) -> list[tuple[str, str]]:
        found: list[tuple[str, str]] = []
        sources: list[tuple[str, Path]] = []
        for folder in (self.secrets_dir, *self.more_dirs):
            try:
                names = [n for n in os.listdir(folder) if not n.startswith(".")]
            except OSError:
                names = []
            sources.extend((name, folder / name) for name in names)
        sources.extend(self.files.items())
        for name, path in sources:
            try:
                value = path.read_text("utf-8", "surrogateescape")
            except OSError:
                continue
            for candidate in {value, value.strip()}:
                if len(candidate) >= MIN_REDACTED_LENGTH:
                    found.append((name, candidate))
        return found

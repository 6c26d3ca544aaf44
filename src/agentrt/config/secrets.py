"""Secrets kept outside every transcript: one file a secret, mode 0600, in a 0700 folder."""

from __future__ import annotations

import itertools
import os
import re
from pathlib import Path

import attrs

from ..vocab.reprs import mutable
from .statedir import fsync_dir
from .statedir import write_synced

#: A secret's name. A leading '.' is refused: the store writes its temporary files as
#: ``.NAME.tmp``, so a name with a leading '.' could be mistaken for (or overwrite) one,
#: and '.' and '..' are folders, not files.
_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}")


#: Unique numbers for `note_written`; `next` on it is atomic, so two threads never share one.
_WRITES = itertools.count(1)
_generation = 0


def note_written() -> None:
    """Tell this process's redactors that a stored secret changed (a secret, a key, the token).

    Every write of the stores in this process calls it once the new file is in
    place; `agentrt.agent.guard.Redactor` then reads the folders again at its next
    use, without asking the file system at every piece of text. Writes by other
    processes are found by the redactor's own check (at most `RECHECK_SECONDS` late).
    """
    global _generation
    _generation = next(_WRITES)


def write_generation() -> int:
    """A number that changes at every `note_written` of this process (0 before the first)."""
    return _generation


class SecretNameError(ValueError):
    """A secret name that cannot be stored."""


def is_secret_name(name: str) -> bool:
    """Whether `name` can name a stored secret.

    The one rule for secret names: the secret store accepts exactly these
    names, the key store's names are a subset of them, and the redactor
    (`agentrt.agent.guard.Redactor`) hides the value of every file so named, so a
    value the store accepted can never escape redaction by its name.
    """
    return _NAME.fullmatch(name) is not None


def check_secret_name(name: str) -> str:
    """Return `name` if it is a valid secret name; raise `SecretNameError` saying why not."""
    if not is_secret_name(name):
        raise SecretNameError(
            f"invalid secret name {name!r}: use 1-128 letters, digits, '_', '-' or '.', "
            "not starting with '.'"
        )
    return name


@mutable(eq=False)
class SecretStore:
    """Named secrets on disk. Values are never logged, and `repr` shows only the folder."""

    path: Path = attrs.field(converter=Path)

    def __attrs_post_init__(self) -> None:
        self.path.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.path, 0o700)

    def put(self, name: str, value: str) -> None:
        """Store `value` under `name`, atomically, readable by the owner only."""
        check_secret_name(name)
        tmp = self.path / f".{name}.tmp"
        write_synced(tmp, value.encode("utf-8"), os.O_TRUNC)
        os.replace(tmp, self.path / name)
        note_written()
        fsync_dir(self.path)  # the rename itself must survive a power cut

    def get(self, name: str) -> str | None:
        """The value stored under `name`, or None."""
        check_secret_name(name)
        try:
            return (self.path / name).read_text("utf-8")
        except FileNotFoundError:
            return None

    def delete(self, name: str) -> bool:
        """Remove a secret; True if it existed."""
        check_secret_name(name)
        try:
            (self.path / name).unlink()
        except FileNotFoundError:
            return False
        note_written()
        fsync_dir(self.path)
        return True

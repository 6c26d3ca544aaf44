"""The input history, kept per user across restarts in a 0600 file under the state folder."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

from prompt_toolkit.history import History

#: The history file's name in the state folder.
HISTORY_NAME = "tui_history"
#: The most messages kept; older ones are dropped when the file is next compacted.
HISTORY_LIMIT = 1000


def history_path(state_dir: Path) -> Path:
    """Where the window keeps its input history."""
    return state_dir / HISTORY_NAME


class FileHistory(History):
    """Sent messages, one JSON string per line (so a message may span lines), oldest first.

    The file and its folder are made private (0600 and 0700): messages can say
    anything. Several windows may append to it at once; each line is one write
    with ``O_APPEND``. When the file holds more than twice `limit` messages it is
    rewritten with the newest `limit` (through a temporary file, so a crash never
    leaves half of it). A file that cannot be written leaves the history in memory
    and `error` says why.
    """

    def __init__(self, path: Path, limit: int = HISTORY_LIMIT) -> None:
        super().__init__()
        self.path = path
        self.limit = limit
        #: Why the history is not saved, once writing failed.
        self.error: str | None = None

    def load_history_strings(self) -> Iterable[str]:
        """The kept messages, newest first (what `History` expects)."""
        try:
            raw = self.path.read_text("utf-8", errors="replace")
        except FileNotFoundError:
            return []
        except OSError as exc:
            self.error = f"cannot read {self.path}: {exc.strerror or exc}"
            return []
        entries: list[str] = []
        for line in raw.splitlines():
            try:
                value = json.loads(line)
            except ValueError:
                continue  # a line cut short by a crash
            if isinstance(value, str) and value:
                entries.append(value)
        if len(entries) > 2 * self.limit:
            entries = entries[-self.limit :]
            self._rewrite(entries)
        return list(reversed(entries[-self.limit :]))

    def store_string(self, string: str) -> None:
        """Append one message to the file."""
        line = json.dumps(string, ensure_ascii=False) + "\n"
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                # A file made by someone else's umask, or an older version, is narrowed too.
                os.fchmod(fd, 0o600)
                os.write(fd, line.encode("utf-8"))
            finally:
                os.close(fd)
        except OSError as exc:
            self.error = f"cannot write {self.path}: {exc.strerror or exc}"

    def _rewrite(self, entries: list[str]) -> None:
        temporary = self.path.with_name(self.path.name + ".tmp")
        try:
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as file:
                for entry in entries:
                    file.write(json.dumps(entry, ensure_ascii=False) + "\n")
            os.replace(temporary, self.path)
        except OSError as exc:
            self.error = f"cannot write {self.path}: {exc.strerror or exc}"

"""The input history file: private, newest first, multi-line messages, bounded."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from agenttui._history import FileHistory
from agenttui._history import history_path


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_messages_are_kept_in_a_private_file_and_read_back_newest_first(tmp_path: Path) -> None:
    path = history_path(tmp_path / "state")
    history = FileHistory(path)
    history.store_string("first")
    history.store_string("two\nlines")
    assert mode(path) == 0o600
    assert mode(path.parent) == 0o700
    assert list(FileHistory(path).load_history_strings()) == ["two\nlines", "first"]
    assert history.error is None


def test_a_file_with_wider_permissions_is_narrowed(tmp_path: Path) -> None:
    path = tmp_path / "tui_history"
    path.write_text(json.dumps("old") + "\n")
    os.chmod(path, 0o644)
    FileHistory(path).store_string("new")
    assert mode(path) == 0o600


def test_a_line_cut_short_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "tui_history"
    path.write_text(json.dumps("kept") + '\n"cut sho')
    assert list(FileHistory(path).load_history_strings()) == ["kept"]


def test_the_file_is_compacted_to_the_newest_messages(tmp_path: Path) -> None:
    path = tmp_path / "tui_history"
    history = FileHistory(path, limit=3)
    for n in range(7):
        history.store_string(f"m{n}")
    assert list(FileHistory(path, limit=3).load_history_strings()) == ["m6", "m5", "m4"]
    assert path.read_text().count("\n") == 3
    assert mode(path) == 0o600


def test_an_unwritable_place_says_why_and_keeps_working(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    history = FileHistory(blocker / "state" / "tui_history")
    history.store_string("hello")
    assert history.error is not None
    assert str(blocker) in history.error

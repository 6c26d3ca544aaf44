"""What survives a power cut: renames of secret, token and undone files are fsynced in their folder.

A rename is an entry in the folder, so only an fsync of the folder makes it
durable; fsyncing the file alone keeps its bytes but may lose its name.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import attrs
import pytest

from agentrt import SecretStore
from agentrt.agent.checkpoint import CallRecord
from agentrt.agent.checkpoint import Checkpoints
from agentrt.http import load_or_create_token


@attrs.define
class FsyncLog:
    """Every fsync: the path it was given, whether it is a folder, and the folder's names then."""

    calls: list[tuple[str, bool, frozenset[str]]] = attrs.field(factory=list)

    def folders(self) -> list[tuple[str, frozenset[str]]]:
        return [(path, names) for path, is_dir, names in self.calls if is_dir]


@pytest.fixture
def fsyncs(monkeypatch: pytest.MonkeyPatch) -> FsyncLog:
    log = FsyncLog()
    real = os.fsync

    def recording(fd: int) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        is_dir = stat.S_ISDIR(os.fstat(fd).st_mode)
        names = frozenset(os.listdir(path)) if is_dir else frozenset()
        log.calls.append((path, is_dir, names))
        real(fd)

    monkeypatch.setattr(os, "fsync", recording)
    return log


def test_storing_a_secret_fsyncs_its_folder_after_the_rename(
    tmp_path: Path, fsyncs: FsyncLog
) -> None:
    secrets = SecretStore(tmp_path / "secrets")
    secrets.put("api_key", "s3cret")
    folder = os.fspath(tmp_path / "secrets")
    # The folder is fsynced once the final name is in it and the temporary one is gone.
    assert (folder, frozenset({"api_key"})) in fsyncs.folders()
    assert secrets.get("api_key") == "s3cret"


def test_deleting_a_secret_fsyncs_its_folder(tmp_path: Path, fsyncs: FsyncLog) -> None:
    secrets = SecretStore(tmp_path / "secrets")
    secrets.put("api_key", "s3cret")
    fsyncs.calls.clear()
    assert secrets.delete("api_key")
    assert fsyncs.folders() == [(os.fspath(tmp_path / "secrets"), frozenset())]


def test_making_the_http_token_fsyncs_the_state_dir_after_linking_it(
    tmp_path: Path, fsyncs: FsyncLog
) -> None:
    state = tmp_path / "state"
    token = load_or_create_token(state)
    assert (os.fspath(state), frozenset({"http-token"})) in fsyncs.folders()
    assert (state / "http-token").read_text().strip() == token


def test_replacing_an_unusable_token_fsyncs_the_state_dir(tmp_path: Path, fsyncs: FsyncLog) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    (state / "http-token").write_text("short\n")
    load_or_create_token(state)
    assert (os.fspath(state), frozenset({"http-token"})) in fsyncs.folders()


def test_an_undo_syncs_each_file_then_each_folder_once_before_it_is_marked_done(
    tmp_path: Path, fsyncs: FsyncLog
) -> None:
    work = tmp_path / "work"
    (work / "sub").mkdir(parents=True)
    names = [work / f"f{n}.txt" for n in range(3)] + [work / "sub" / "g.txt"]
    for path in names:
        path.write_text("old\n")
    checkpoints = Checkpoints(tmp_path / "checkpoints")
    before = checkpoints.before(work, ())
    assert not isinstance(before, str)
    for path in names:
        path.write_text("new\n")
    (work / "made.txt").write_text("made by the run\n")
    changes = checkpoints.after(work, (), before)
    checkpoints.record(CallRecord("s", "t", "c1", "shell", 0.0, changes))
    fsyncs.calls.clear()
    result = checkpoints.undo("s", checkpoints.last_run("s"))
    assert result.done and not result.conflicts
    root = tmp_path / "checkpoints"
    seen = [
        (Path(path).name if not is_dir else path, names) for path, is_dir, names in fsyncs.calls
    ]
    # The journal first (synced, and its folder); then each file put back, synced under its
    # temporary name; then each of the two folders once, holding its final names (no
    # temporary file, the run's file gone); only then is the undo marked done and its
    # journal removed.
    journal, *rest = seen
    assert journal[0].startswith(".undo.json.")
    assert rest[0] == (str(root), frozenset({"undo.json", "objects", "log"}))
    assert sorted(name for name, _ in rest[1:5]) == [
        ".f0.txt.agentrt-undo",
        ".f1.txt.agentrt-undo",
        ".f2.txt.agentrt-undo",
        ".g.txt.agentrt-undo",
    ]
    assert rest[5:] == [
        (str(work), frozenset({"f0.txt", "f1.txt", "f2.txt", "sub"})),
        (str(work / "sub"), frozenset({"g.txt"})),
        ("s.jsonl", frozenset()),
        (str(root), frozenset({"objects", "log"})),
    ]
    assert all(p.read_text() == "old\n" for p in names)

"""No tool reaches the task store, wherever it is: its files, or its local server's sockets.

The state dir is covered in the sandbox; a store configured elsewhere (an
SQLite file in the working folder, a PostgreSQL server on this machine) is
covered too (`Store.private_paths`). Each check is a real shell call of a
real runtime, unasked (``full-auto``, so without the network) and with the
text guard off: the kernel is what refuses. Each is run once more with the
sandbox off, to show that the check sees an escape.
"""

from __future__ import annotations

import glob
import os
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import attrs
import pytest
import trio

from agentrt import Runtime
from agentrt import ScriptedModel
from agentrt import StoreError
from agentrt import TaskStore
from agentrt import open_runtime
from agentrt.agent.sandbox import Sandbox
from agentrt.store.postgres import USUAL_SOCKET_FOLDER
from agentrt.store.postgres import socket_folders
from agentrt.vocab.terms import Approval

pytestmark = pytest.mark.deadline(120)

CANARY = "canary-7f3a9d-in-the-store"


async def _quiet(event: object) -> None:
    await trio.lowlevel.checkpoint()


async def _shell(runtime: Runtime, session: str, command: str) -> str:
    """Run `command` as an unasked shell call; its result, as saved."""
    with trio.fail_after(60):
        await runtime.executor.run(session, f"sh {{ {command}; }}", owner="t", emit=_quiet)
    history = await runtime.store.load_history(session)
    return [m.content for m in history if m.role.value == "tool"][-1]


def _unasked(state: Path, workdir: Path, store: str | Path) -> AbstractAsyncContextManager[Runtime]:
    """A runtime whose calls run unasked (``full-auto``: without the network), on `store`."""
    model = ScriptedModel(word_delay=0, stream_delay=0)
    return open_runtime(
        state, model=model, workdir=workdir, approval=Approval.FULL_AUTO, store=store
    )


def _project(tmp_path: Path) -> tuple[Path, Path]:
    """A working folder with the task store in it: (the folder, the store's file)."""
    workdir = tmp_path / "project"
    workdir.mkdir()
    return workdir, workdir / "tasks.db"


def _unguarded(runtime: Runtime, *, sandbox: Sandbox | None = None) -> None:
    """The text guard off (and the sandbox as given): only the kernel stands in the way."""
    config = runtime.executor.config
    changes: dict[str, Any] = {"text_guard": False}
    if sandbox is not None:
        changes["sandbox"] = sandbox
    runtime.executor.config = attrs.evolve(config, **changes)


async def test_an_sqlite_store_in_the_working_folder_is_out_of_every_tools_reach(
    tmp_path: Path,
) -> None:
    workdir, store = _project(tmp_path)
    # Read it whole, its WAL too, by any name; then try to write it.
    command = (
        f"cat ./tasks.db* $(pwd)/tasks.db | grep -c {CANARY}; "
        "python3 -c \"import sqlite3; print('rows', sqlite3.connect('tasks.db')"
        ".execute('select count(*) from messages').fetchone())\"; "
        "echo x >> tasks.db; rm -f tasks.db tasks.db-wal; echo done"
    )
    async with _unasked(tmp_path / "state", workdir, store) as runtime:
        hidden = runtime.executor.config.hidden_paths
        assert store.resolve() in hidden and Path(f"{store.resolve()}-wal") in hidden
        await runtime.executor.run("cli-canary", CANARY, owner="t", emit=_quiet)
        _unguarded(runtime)
        inside = await _shell(runtime, "cli-inside", command)
        before = b"".join([await trio.Path(f"{store}{end}").read_bytes() for end in ("", "-wal")])
        _unguarded(runtime, sandbox=Sandbox.off())
        outside = await _shell(runtime, "cli-outside", "grep -c " + CANARY + " tasks.db*")
        # The store still works, with every message it had.
        history = await runtime.store.load_history("cli-canary")
    assert CANARY in "".join(m.content for m in history)
    assert CANARY.encode() in before
    lines = inside.splitlines()
    # Nothing of the store could be read, opened, written or removed, by any name.
    assert "0" in lines and CANARY not in inside.replace(f"grep -c {CANARY}", ""), inside
    assert inside.count("Permission denied") == 6  # 5 reads, the write
    assert "unable to open database file" in inside
    assert inside.count("Device or resource busy") == 2
    assert "done" in lines
    assert store.exists()
    # Without the sandbox, the same command finds the canary in the store's files.
    counts = [line.rsplit(":", 1) for line in outside.splitlines() if line.startswith("tasks.db")]
    assert sum(int(n) for _, n in counts) > 0, outside


async def test_a_local_postgresql_servers_sockets_are_out_of_every_tools_reach(
    tmp_path: Path, postgres_url: str
) -> None:
    async with _unasked(tmp_path / "state", tmp_path, postgres_url) as runtime:
        folders = runtime.store.private_paths
        found = (glob.glob(os.path.join(f, ".s.PGSQL.*")) for f in folders)
        sockets = [s for paths in found for s in paths if not s.endswith(".lock")]
        assert sockets, folders  # the server listens on a socket here, which the tool must miss
        hidden = runtime.executor.config.hidden_paths
        assert all(f.resolve() in hidden for f in folders)
        # Connect to the server's socket as a client would; list its folder.
        probe = (
            'python3 -c "import socket,sys\n'
            "for path in sys.argv[1:]:\n"
            "  try: socket.socket(socket.AF_UNIX).connect(path); print('connected', path)\n"
            "  except OSError as e: print('refused', type(e).__name__)\n"
            '" ' + " ".join(sockets) + "; ls -A " + " ".join(str(f) for f in folders)
        )
        _unguarded(runtime)
        inside = await _shell(runtime, "cli-pg-inside", probe)
        # The folders are covered even where a Unix socket may be made (the network kept).
        _unguarded(runtime, sandbox=attrs.evolve(runtime.executor.config.sandbox, network=True))
        kept = await _shell(runtime, "cli-pg-kept", probe)
        _unguarded(runtime, sandbox=Sandbox.off())
        outside = await _shell(runtime, "cli-pg-outside", probe)
    # Without the network no Unix socket can be made at all (tests/test_seccomp.py).
    assert inside.count("refused PermissionError") == len(sockets), inside
    assert kept.count("refused FileNotFoundError") == len(sockets), kept
    for seen in (inside, kept):
        assert "connected" not in seen
        assert ".s.PGSQL" not in seen
    assert outside.count("connected ") == len(sockets), outside


class _Conn:
    """What `socket_folders` reads of a connection: where it went, and one setting."""

    def __init__(self, host: str, hostaddr: str, setting: str | Exception) -> None:
        self.info = SimpleNamespace(host=host, hostaddr=hostaddr)
        self.setting = setting
        self.asked = 0

    def execute(self, sql: str) -> Any:
        assert sql == "SHOW unix_socket_directories"
        self.asked += 1
        if isinstance(self.setting, Exception):
            raise self.setting
        return SimpleNamespace(fetchone=lambda: (self.setting,))


def test_the_socket_folders_are_the_servers_own_when_it_runs_here() -> None:
    import psycopg.errors

    listed = '/run/postgresql, "/var/lib/pg sock", @abstract, relative'

    def folders(conn: _Conn) -> tuple[Path, ...]:
        return socket_folders(conn)  # type: ignore[arg-type]

    expected = (Path("/run/postgresql"), Path("/var/lib/pg sock"))
    assert folders(_Conn("127.0.0.1", "127.0.0.1", listed)) == expected
    assert folders(_Conn("localhost", "::1", listed)) == expected
    assert folders(_Conn("/run/postgresql", "", listed)) == expected
    # The folder it came through is among them, listed or not.
    assert folders(_Conn("/srv/proxy", "", listed)) == (*expected, Path("/srv/proxy"))
    remote = _Conn("db.example.net", "192.0.2.7", listed)
    assert folders(remote) == () and remote.asked == 0  # a server elsewhere has none here
    # A role that may not read the setting: the folder it came through, and the usual one.
    denied = psycopg.errors.InsufficientPrivilege("permission denied")
    assert folders(_Conn("/srv/pg", "", denied)) == (USUAL_SOCKET_FOLDER, Path("/srv/pg"))
    assert folders(_Conn("127.0.0.1", "127.0.0.1", denied)) == (USUAL_SOCKET_FOLDER,)


async def test_a_rollback_journal_left_beside_the_store_is_refused_not_played_back(
    tmp_path: Path,
) -> None:
    # A tool may still make a new file beside a store in its working folder: a rollback
    # journal there would be played back into the store at its next start.
    workdir, store = _project(tmp_path)
    journal = workdir / "tasks.db-journal"
    async with _unasked(tmp_path / "state", workdir, store) as runtime:
        await runtime.executor.run("cli-first", CANARY, owner="t", emit=_quiet)
        _unguarded(runtime)
        made = await _shell(runtime, "cli-plant", "printf planted > tasks.db-journal && echo made")
    assert "made" in made
    assert await trio.Path(journal).read_bytes() == b"planted"
    with pytest.raises(StoreError, match="never writes a rollback journal") as refused:
        await TaskStore.open(store)
    assert str(journal) in str(refused.value)
    assert await trio.Path(journal).read_bytes() == b"planted"  # left as it was, to be seen
    # Moved away (or empty, as SQLite may leave one), the store opens with all it had.
    await trio.Path(journal).write_bytes(b"")
    reopened = await TaskStore.open(store)
    try:
        history = await reopened.load_history("cli-first")
    finally:
        await reopened.aclose()
    assert CANARY in "".join(m.content for m in history)

"""The task store: atomic records, clear errors for bad files, survival of a killed process."""

from __future__ import annotations

import os
import signal
import sqlite3
import stat
import subprocess
import sys
import textwrap
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from agentrt import BadAnswerError
from agentrt import Cause
from agentrt import Message
from agentrt import NoPendingTaskError
from agentrt import Outcome
from agentrt import Runtime
from agentrt import ScriptedModel
from agentrt import StateDirError
from agentrt import StoreError
from agentrt import TaskRecord
from agentrt import TaskStatus
from agentrt import TaskStore
from agentrt import ToolResultEvent
from agentrt import UnreadableTask
from agentrt import open_runtime
from agentrt.config.statedir import prepare_state_dir
from agentrt.models.messages import ToolCall
from agentrt.store import Store
from agentrt.store import TaskExistsError
from agentrt.store import brief_of
from agentrt.store import sql
from agentrt.store import sqlite as sqlite_store
from agentrt.store.columns import FIELDS
from agentrt.store.ledger import stop_entries
from agentrt.store.sql import SqlStore
from agentrt.store.sqlite import SCHEMA_VERSION
from agentrt.store.sqlite import marker_path
from agentrt.store.writer import Done
from agentrt.vocab.stops import CallState
from agentrt.vocab.stops import StopKind

from .conftest import Recorder
from .conftest import fill_mixed_store
from .conftest import insert_unreadable
from .conftest import raw_sql


async def test_a_record_round_trips_and_is_deleted(store: Store) -> None:
    record = TaskRecord("cli-1", "hi", (Message.user("hi"),), cause=Cause.PAUSE)
    await store.save(record)
    assert await store.load("cli-1") == record
    assert [r.session_id for r in await store.list("cli-")] == ["cli-1"]
    assert await store.list("chat-") == []
    assert await store.delete("cli-1")
    assert await store.load("cli-1") is None


async def test_a_record_the_store_wrote_is_read_back_as_written_until_its_row_changes(
    store: Store,
) -> None:
    call = ToolCall("c1", "sleep", {"seconds": 5})
    record = TaskRecord(
        "cli-w",
        "go",
        (Message.user("go"), Message.assistant("", (call,))),
        attempts={"c1": 1},
        error="boom",
    )
    record = stop_entries(record, StopKind.PAUSE, 1.5, {"": {"c1": CallState.STOPPED}}, 3)
    saved = await store.save(record)
    stopped = store.stop_nowait(lambda: saved, TaskStatus.INTERRUPTED, cause=Cause.PAUSE)
    assert await stopped.wait()
    assert isinstance(store, SqlStore)

    def read(db: Any) -> tuple[TaskRecord, TaskRecord, TaskRecord | None]:
        loaded, _ = store._load(db, "cli-w")
        task, _, _ = store._task_and_session(db, "cli-w")
        assert task is not None and loaded is not None
        kept = store._written.get("cli-w", task.fields[1:])
        return loaded, store._record(task.fields, loaded.transcript), kept

    # What the store keeps of its own write is what its row decodes to, and is what a read
    # gives back, the very record (not decoded again).
    loaded, decoded, kept = await store._run(read)
    assert loaded == decoded
    assert kept is not None and loaded is kept
    assert loaded.interruptions and loaded.status is TaskStatus.INTERRUPTED
    # A row another process changed is decoded anew.
    raw_sql(store, "UPDATE tasks SET runs = 7 WHERE session_id = ?", ("cli-w",))
    loaded, decoded, now_kept = await store._run(read)
    assert loaded == decoded
    assert loaded.runs == 7 and now_kept is None and loaded is not kept


def test_the_records_kept_as_written_are_bounded_in_number_and_size() -> None:
    written = sql._Written(limit=3, largest=100)
    blank = (None,) * (len(FIELDS) - 1)
    records = [TaskRecord(f"cli-{n}", "x", ()) for n in range(5)]
    for n, record in enumerate(records):
        written.put(record, (f"input {n}", *blank))
    # The three written last are kept, each only for the columns it was written with.
    assert [written.get(f"cli-{n}", (f"input {n}", *blank)) for n in range(5)] == [
        None,
        None,
        *records[2:],
    ]
    assert written.get("cli-4", ("input 3", *blank)) is None
    # 100 characters of text columns are kept; 101 are not, and drop what was kept before.
    written.put(records[4], ("y" * 60, "z" * 40, *blank[1:]))
    assert written.get("cli-4", ("y" * 60, "z" * 40, *blank[1:])) is records[4]
    written.put(records[4], ("y" * 61, "z" * 40, *blank[1:]))
    assert written.get("cli-4", ("y" * 61, "z" * 40, *blank[1:])) is None
    assert written.get("cli-4", ("y" * 60, "z" * 40, *blank[1:])) is None


async def test_the_store_file_is_private(tmp_path: Path) -> None:
    store = await TaskStore.open(tmp_path / "t.db")
    assert os.stat(tmp_path / "t.db").st_mode & 0o777 == 0o600
    await store.aclose()


async def test_list_prefix_is_literal_not_a_pattern(store: Store) -> None:
    for sid in ("chat-a", "chatXb", "chat_c", "chat%d"):
        await store.save(TaskRecord(sid, "x", (Message.user("x"),)))
    assert [r.session_id for r in await store.list("chat_")] == ["chat_c"]
    assert [r.session_id for r in await store.list("chat%")] == ["chat%d"]


async def test_a_corrupt_store_file_gets_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "tasks.db"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(
        StoreError, match=r"is not a usable agentrt task store .* another --state-dir"
    ):
        await TaskStore.open(path)
    assert path.read_bytes().startswith(b"this is not a database")  # nothing overwritten


async def test_a_newer_schema_gets_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "tasks.db"
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.close()
    with pytest.raises(StoreError, match=f"schema version {SCHEMA_VERSION + 1}, newer than"):
        await TaskStore.open(path)


async def test_an_unreadable_record_names_its_session_and_the_fix(store: Store) -> None:
    await store.save(TaskRecord("cli-ok", "x", (Message.user("x"),)))
    insert_unreadable(store, "cli-bad")
    with pytest.raises(StoreError, match="agentrt pending discard cli-bad"):
        await store.load("cli-bad")
    # The good record is untouched and the bad one can still be discarded.
    assert await store.load("cli-ok") is not None
    assert await store.delete("cli-bad")


async def test_a_closed_store_says_so(store: Store) -> None:
    await store.aclose()
    with pytest.raises(StoreError, match="is closed"):
        await store.load("cli-1")


async def test_a_caller_cancelled_while_its_call_runs_waits_for_it_then_sees_the_cancel(
    store: Store,
) -> None:
    # Once queued, a call runs; its caller hears how it went, and only then the cancel (at its
    # next checkpoint): nobody is told a write failed that happened.
    assert isinstance(store, SqlStore)
    entered, release = threading.Event(), threading.Event()
    seen: list[str] = []

    def slow(db: Any) -> str:
        entered.set()
        release.wait()
        return "written"

    async def caller() -> None:
        with trio.CancelScope() as scope:
            outer.append(scope)
            seen.append(await store._run(slow))
            seen.append("no cancel seen")
            await trio.lowlevel.checkpoint()
            seen.append("past the checkpoint")
        seen.append(f"cancelled caught: {scope.cancelled_caught}")

    outer: list[trio.CancelScope] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(caller)
        await trio.to_thread.run_sync(entered.wait)
        outer[0].cancel()
        try:
            await trio.testing.wait_all_tasks_blocked()
            assert seen == []  # still waiting for its call, cancelled or not
        finally:
            release.set()
    assert seen == ["written", "no cancel seen", "cancelled caught: True"]


async def test_done_wakes_every_waiter_and_only_a_cancellable_wait_ends_at_a_cancel() -> None:
    done = Done()
    seen: list[str] = []
    scopes: list[trio.CancelScope] = []

    async def unstoppable() -> None:
        with trio.CancelScope() as scope:
            scopes.append(scope)
            await done.wait(cancellable=False)
            seen.append("unstoppable woken")
            await trio.lowlevel.checkpoint()
            seen.append("past the checkpoint")
        seen.append(f"then cancelled: {scope.cancelled_caught}")

    async def plain() -> None:
        await done.wait()
        seen.append("plain woken")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(unstoppable)
        nursery.start_soon(plain)
        with trio.CancelScope() as scope:
            scope.cancel()
            await done.wait()  # cancellable: the cancel ends it
        assert scope.cancelled_caught
        await trio.testing.wait_all_tasks_blocked()
        scopes[0].cancel()
        await trio.testing.wait_all_tasks_blocked()
        assert seen == []
        done.set()
    assert sorted(seen) == ["plain woken", "then cancelled: True", "unstoppable woken"]
    # Done already: a wait is a checkpoint, where only a cancellable one sees a cancel.
    with trio.CancelScope() as scope:
        scope.cancel()
        await done.wait(cancellable=False)
        seen.append("uncancellable wait returned")
    assert not scope.cancelled_caught and seen[-1] == "uncancellable wait returned"
    with trio.CancelScope() as scope:
        scope.cancel()
        await done.wait()
    assert scope.cancelled_caught


async def test_resuming_an_unknown_session_is_a_clear_error(any_runtime: Runtime) -> None:
    with pytest.raises(NoPendingTaskError, match="session cli-nope has no pending task"):
        await any_runtime.executor.resume("cli-nope", owner="o", emit=Recorder())
    assert not any_runtime.executor.is_running("cli-nope")


async def test_a_bad_answer_changes_nothing(any_runtime: Runtime) -> None:
    await any_runtime.executor.run("chat-b", "write f.txt x", owner="o", emit=Recorder())
    before = await any_runtime.store.load("chat-b")
    assert before is not None
    assert before.question is not None
    with pytest.raises(BadAnswerError, match="a confirmation takes one of: allow, allow_session"):
        await any_runtime.executor.resume("chat-b", answer="maybe", owner="o", emit=Recorder())
    assert await any_runtime.store.load("chat-b") == before


async def test_a_parked_confirmation_is_answered_by_resume(
    any_runtime: Runtime, workdir: Path
) -> None:
    runtime = any_runtime
    ended = await runtime.executor.run("chat-c", "write f.txt hello", owner="o", emit=Recorder())
    assert ended.outcome is Outcome.AWAITING_ANSWER  # nobody listens on chat-
    again = await runtime.executor.resume("chat-c", answer="allow", owner="o", emit=Recorder())
    assert again.outcome is Outcome.FINISHED
    assert (workdir / "f.txt").read_text() == "hello"


async def test_a_non_utf8_tool_result_is_stored_and_resumed(
    any_runtime: Runtime, workdir: Path
) -> None:
    runtime = any_runtime
    (workdir / "bin").write_bytes(b"\xff\xfe bad \xc3\x28 bytes")
    recorder = Recorder()
    ended = await runtime.executor.run("chat-u", "read bin; ask ok?", owner="o", emit=recorder)
    assert ended.outcome is Outcome.AWAITING_ANSWER
    record = await runtime.store.load("chat-u")
    assert record is not None
    result = next(m.content for m in record.transcript if m.name == "read_file")
    assert result == "\ufffd\ufffd bad \ufffd( bytes"
    assert recorder.of(ToolResultEvent)[0].ok
    finished = await runtime.executor.resume("chat-u", answer="y", owner="o", emit=Recorder())
    assert finished.outcome is Outcome.FINISHED


async def test_a_new_run_in_a_session_with_a_pending_task_is_refused(any_runtime: Runtime) -> None:
    await any_runtime.executor.run("chat-p", "ask first?", owner="o", emit=Recorder())
    from agentrt import PendingTaskExistsError

    with pytest.raises(PendingTaskExistsError, match="resume it or discard it first"):
        await any_runtime.executor.run("chat-p", "another", owner="o", emit=Recorder())
    record = await any_runtime.store.load("chat-p")
    assert record is not None
    assert record.status is TaskStatus.AWAITING_ANSWER


@pytest.mark.parametrize("bad", ["", "has space", "x" * 129, "tab\there"])
async def test_a_bad_session_id_is_refused_with_the_rule(runtime: Runtime, bad: str) -> None:
    from agentrt import BadSessionIdError

    with pytest.raises(BadSessionIdError, match="session id"):
        await runtime.executor.run(bad, "hello", owner="o", emit=Recorder())


async def test_finished_runs_keep_the_conversation_for_the_next_run(any_runtime: Runtime) -> None:
    await any_runtime.executor.run("cli-h", "hello", owner="o", emit=Recorder())
    await any_runtime.executor.run("cli-h", "again", owner="o", emit=Recorder())
    history = await any_runtime.store.load_history("cli-h")
    assert [m.content for m in history if m.role.value == "user"] == ["hello", "again"]


_WRITER = textwrap.dedent(
    """
    import sys, trio
    from agentrt import TaskStore, TaskRecord, Message

    async def main(path):
        store = await TaskStore.open(path)
        n = 0
        while True:
            n += 1
            # Each version carries its number everywhere, so a torn write would show.
            text = f"v{n} " + "x" * (n % 5000)
            record = TaskRecord("cli-crash", text, (Message.user(text),) * 3, runs=n)
            await store.save(record)
            if n == 20:
                print("ready", flush=True)

    trio.run(main, sys.argv[1])
    """
)


@pytest.mark.parametrize("seed", range(5))
async def test_a_process_killed_mid_write_leaves_an_old_or_new_record(
    tmp_path: Path, seed: int
) -> None:
    path = tmp_path / "tasks.db"
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-c", _WRITER, str(path)], stdout=subprocess.PIPE
    )
    try:
        assert proc.stdout is not None
        seen = b""
        with trio.fail_after(30):
            while b"\n" not in seen:
                chunk = await proc.stdout.receive_some()
                assert chunk, "the writer exited early"
                seen += chunk
        assert seen == b"ready\n"
        # Let it write for a seed-dependent while before the kill.
        for _ in range(seed * 20):
            await trio.lowlevel.checkpoint()
    finally:
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
    store = await TaskStore.open(path)
    record = await store.load("cli-crash")
    assert record is not None
    assert record.input.startswith(f"v{record.runs} ")
    assert all(m.content == record.input for m in record.transcript)
    await store.aclose()


async def test_text_with_a_lone_surrogate_is_stored_and_read_back(store: Store) -> None:
    odd = "model said \ud800 here, and é"
    record = TaskRecord("chat-s", odd, (Message.user(odd),), error=odd)
    await store.save(record)
    assert await store.load("chat-s") == record
    assert await store.mark("chat-s", TaskStatus.FAILED, error=odd)
    loaded = await store.load("chat-s")
    assert loaded is not None
    assert loaded.error == odd
    await store.finish("chat-s", [Message.user(odd)])
    assert await store.load_history("chat-s") == (Message.user(odd),)


# -- read-check-write under the write lock ---------------------------------------


async def test_update_holds_the_write_lock_while_its_change_runs(tmp_path: Path) -> None:
    store = await TaskStore.open(tmp_path / "tasks.db")
    await store.save(TaskRecord("cli-l", "x", (Message.user("x"),), status=TaskStatus.FAILED))
    other_writer: list[str] = []

    def change(record: TaskRecord) -> TaskRecord:
        # Another process trying to write while the change is decided must wait for it.
        other = sqlite3.connect(tmp_path / "tasks.db", timeout=0, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")
            other_writer.append("got the lock")
            other.execute("ROLLBACK")
        except sqlite3.OperationalError as exc:
            other_writer.append(str(exc))
        finally:
            other.close()
        return record.evolve(status=TaskStatus.RUNNING)

    assert await store.update("cli-l", change) is not None
    assert other_writer == ["database is locked"]
    await store.aclose()


class HeldSync:
    """Stands in for `sqlite_store._sync`: each sync is noted (`paths`), says it began
    (`entered`), waits for `gate` (10 s at most, so a test that waits for it fails in
    time), syncs for real, then appends ``"synced"`` to `happened`."""

    def __init__(self, happened: list[str] | None = None) -> None:
        self.paths: list[Path] = []
        self.entered = threading.Event()
        self.gate = threading.Event()
        self.happened = happened if happened is not None else []
        self._real = sqlite_store._sync

    def __call__(self, path: Path) -> None:
        self.paths.append(path)
        self.entered.set()
        self.gate.wait(10)
        self._real(path)
        self.happened.append("synced")

    async def began(self) -> None:
        """Wait (in a worker thread) until a sync has begun."""
        assert await trio.to_thread.run_sync(self.entered.wait, 10)


async def test_a_write_is_told_done_only_once_the_wal_is_on_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In WAL mode the store commits without a sync and fsyncs the WAL itself (what
    ``synchronous=FULL`` does inside a commit) before it tells the write it is done."""
    store = await TaskStore.open(tmp_path / "tasks.db")
    assert store.wal == tmp_path / "tasks.db-wal"
    held = HeldSync()
    monkeypatch.setattr(sqlite_store, "_sync", held)
    record = TaskRecord("cli-d", "x", (Message.user("x"),), status=TaskStatus.INTERRUPTED)
    told: list[str] = []
    async with trio.open_nursery() as nursery:

        async def create() -> None:
            await store.create(record)
            told.append("created")

        nursery.start_soon(create)
        await held.began()
        # Committed (another connection reads it), not told: its sync is under way.
        with sqlite3.connect(tmp_path / "tasks.db") as other:
            rows = other.execute("SELECT session_id FROM tasks").fetchall()
        assert (rows, told) == ([("cli-d",)], [])
        held.gate.set()
    assert told == ["created"]
    assert held.paths == [store.wal]
    level = await store._run(lambda db: db.execute("PRAGMA synchronous").fetchone()[0])
    assert level == 1  # NORMAL: SQLite does not sync in the commit, the store does after it
    await store.aclose()


def synced_levels(statements: Sequence[str]) -> list[tuple[int, list[str]]]:
    """Each transaction of `statements` (a trace of the store's connection) with the
    ``synchronous`` level it committed under (2: FULL, 1: NORMAL) and its statements."""
    level = 2
    out: list[tuple[int, list[str]]] = []
    current: list[str] = []
    for statement in statements:
        if statement.startswith("PRAGMA synchronous="):
            level = {"FULL": 2, "NORMAL": 1}[statement.split("=")[1]]
        elif statement == "COMMIT":
            out.append((level, current))
            current = []
        elif statement != "BEGIN IMMEDIATE":
            current.append(statement)
    return out


async def test_a_resumes_claim_commits_without_a_sync_and_every_other_write_with_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await TaskStore.open(tmp_path / "tasks.db")
    syncs: list[Path] = []
    real_sync = sqlite_store._sync

    def counted_sync(path: Path) -> None:
        syncs.append(path)
        real_sync(path)

    monkeypatch.setattr(sqlite_store, "_sync", counted_sync)
    record = TaskRecord("cli-s", "x", (Message.user("x"),), status=TaskStatus.INTERRUPTED)

    def claim(old: TaskRecord) -> TaskRecord:
        return old.evolve(status=TaskStatus.RUNNING, runs=old.runs + 1)

    # Each call awaited alone: a synced one is told after its sync, so the count is exact.
    after: list[int] = []
    await store.create(record)
    after.append(len(syncs))
    await store.update("cli-s", claim, synced=False)
    after.append(len(syncs))
    await store.save_fields(record.evolve(status=TaskStatus.RUNNING, attempts={"c1": 1}))
    after.append(len(syncs))
    await store.save(record.evolve(transcript=(*record.transcript, Message.assistant("a"))))
    after.append(len(syncs))
    await store.mark("cli-s", TaskStatus.INTERRUPTED, cause=Cause.PAUSE)
    after.append(len(syncs))
    await store.update("cli-s", claim)  # synced unless said otherwise
    after.append(len(syncs))
    await store.aclose()
    assert after == [1, 1, 2, 3, 4, 5]
    assert set(syncs) == {store.wal}


async def test_a_claim_queued_after_a_synced_write_does_not_wait_for_its_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pause's write is being synced when the resume's claim comes: the claim commits
    and is told while the sync still runs; the write is told once the sync is done."""
    store = await TaskStore.open(tmp_path / "tasks.db")
    record = TaskRecord("cli-s", "x", (Message.user("x"),), status=TaskStatus.INTERRUPTED)
    await store.create(record)
    happened: list[str] = []
    held = HeldSync(happened)  # a claim that waits for its sync waits 10 s, and fails below
    monkeypatch.setattr(sqlite_store, "_sync", held)
    with trio.fail_after(20):
        kept = store.save_fields_nowait(record.evolve(attempts={"c2": 1}), defer=False)
        await held.began()
        with trio.fail_after(5):
            claimed = await store.update(
                "cli-s", lambda old: old.evolve(runs=old.runs + 1), synced=False
            )
        happened.append("claim told")
        held.gate.set()
        assert await kept.wait()
        happened.append("write told")
    assert happened == ["claim told", "synced", "write told"]
    assert claimed is not None and claimed[0].attempts == {"c2": 1}
    await store.aclose()


async def test_writes_queued_while_the_wal_syncs_share_the_next_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await TaskStore.open(tmp_path / "tasks.db")
    records = [
        TaskRecord(f"cli-g{n}", "x", (Message.user("x"),), status=TaskStatus.INTERRUPTED)
        for n in range(6)
    ]
    for record in records:
        await store.create(record)
    held = HeldSync()
    handed: list[object] = []
    all_handed = threading.Event()
    hand = sqlite_store._Syncer.hand

    def counted(syncer: Any, calls: list[Any]) -> None:
        handed.extend(calls)
        hand(syncer, calls)
        if len(handed) == 6:
            all_handed.set()

    monkeypatch.setattr(sqlite_store, "_sync", held)
    monkeypatch.setattr(sqlite_store._Syncer, "hand", counted)
    with trio.fail_after(20):
        kept = [store.save_fields_nowait(records[0].evolve(runs=2), defer=False)]
        await held.began()
        kept += [store.save_fields_nowait(r.evolve(runs=2), defer=False) for r in records[1:]]
        # The writer commits the five while the first sync is held.
        assert await trio.to_thread.run_sync(all_handed.wait, 10)
        assert len(held.paths) == 1
        held.gate.set()
        assert [await k.wait() for k in kept] == [True] * 6
    assert len(held.paths) == 2  # the first write's, then one for the five committed meanwhile
    await store.aclose()


async def test_closing_the_store_syncs_and_tells_what_was_still_waiting(tmp_path: Path) -> None:
    store = await TaskStore.open(tmp_path / "tasks.db")
    record = TaskRecord("cli-c", "x", (Message.user("x"),), status=TaskStatus.INTERRUPTED)
    await store.create(record)
    kept = store.save_fields_nowait(record.evolve(attempts={"c9": 1}), defer=False)
    await store.aclose()
    assert await kept.wait()
    again = await TaskStore.open(tmp_path / "tasks.db")
    loaded = await again.load("cli-c")
    assert loaded is not None and loaded.attempts == {"c9": 1}
    await again.aclose()


async def test_a_claim_queued_with_a_synced_write_is_told_before_the_wal_is_synced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One transaction, committed without a sync; the claim is told at once, the synced
    write only once the WAL is fsynced (what ``synchronous=FULL`` does in a commit)."""
    store = await TaskStore.open(tmp_path / "tasks.db")
    assert store.wal == tmp_path / "tasks.db-wal"
    statements: list[str] = []
    store._db.set_trace_callback(statements.append)
    record = TaskRecord("cli-s", "x", (Message.user("x"),), status=TaskStatus.INTERRUPTED)
    await store.create(record)
    happened: list[str] = []
    held = HeldSync(happened)  # held until the claim is told
    monkeypatch.setattr(sqlite_store, "_sync", held)

    def claim(old: TaskRecord) -> TaskRecord:
        return old.evolve(status=TaskStatus.RUNNING, runs=old.runs + 1)

    with trio.fail_after(20):
        kept = store.save_fields_nowait(record.evolve(attempts={"c2": 1}))
        claimed = await store.update("cli-s", claim, synced=False)
        happened.append("claim told")
        held.gate.set()
        assert await kept.wait()
        happened.append("write told")
    assert happened == ["claim told", "synced", "write told"]
    assert held.paths == [store.wal]
    assert claimed is not None and claimed[0].attempts == {"c2": 1}
    assert [level for level, _ in synced_levels(statements)][-1] == 1

    def failing_sync(path: Path) -> None:
        raise OSError(5, "Input/output error")

    # A sync that fails: the claim stands (it never waited for one); the write is told
    # it failed, as a commit whose sync failed is.
    monkeypatch.setattr(sqlite_store, "_sync", failing_sync)
    kept = store.save_fields_nowait(record.evolve(attempts={"c3": 1}))
    assert await store.update("cli-s", claim, synced=False) is not None
    with pytest.raises(StoreError, match="Input/output error"):
        await kept.wait()
    store._db.set_trace_callback(None)
    await store.aclose()


async def test_a_store_not_in_wal_mode_syncs_a_claim_with_the_write_it_is_queued_with(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await TaskStore.open(tmp_path / "tasks.db")
    store.wal = None  # as on a file system where SQLite cannot keep a WAL
    synced_paths: list[Path] = []
    monkeypatch.setattr(sqlite_store, "_sync", synced_paths.append)
    statements: list[str] = []
    store._db.set_trace_callback(statements.append)
    record = TaskRecord("cli-s", "x", (Message.user("x"),), status=TaskStatus.INTERRUPTED)
    await store.create(record)
    store.save_fields_nowait(record.evolve(attempts={"c2": 1}))
    await store.update("cli-s", lambda old: old.evolve(runs=old.runs + 1), synced=False)
    store._db.set_trace_callback(None)
    await store.aclose()
    assert synced_paths == []
    assert [level for level, _ in synced_levels(statements)] == [2, 2]


async def test_a_resume_commits_its_claim_alone_without_a_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    statements: list[str] = []
    handed = sqlite_store._Syncer.hand

    def noted(syncer: Any, calls: Any) -> None:
        # In the writer thread, right after the commit whose calls wait for the sync.
        statements.append("-- synced")
        handed(syncer, calls)

    monkeypatch.setattr(sqlite_store._Syncer, "hand", noted)
    async with open_runtime(
        tmp_path / "state", model=ScriptedModel(word_delay=0, stream_delay=0), workdir=tmp_path
    ) as runtime:
        parked = await runtime.executor.run("chat-c", "ask which?", owner="o", emit=Recorder())
        assert parked.outcome is Outcome.AWAITING_ANSWER
        store = runtime.store
        assert isinstance(store, TaskStore)
        statements.clear()
        store._db.set_trace_callback(statements.append)
        ended = await runtime.executor.resume("chat-c", answer="blue", owner="o", emit=Recorder())
        store._db.set_trace_callback(None)
    assert ended.outcome is Outcome.FINISHED
    transactions: list[tuple[bool, list[str]]] = []
    for statement in statements:
        if statement == "BEGIN IMMEDIATE":
            transactions.append((False, []))
        elif statement == "-- synced":
            transactions[-1] = (True, transactions[-1][1])
        elif statement != "COMMIT" and transactions:
            transactions[-1][1].append(statement)
    writes = [
        (synced, body)
        for synced, body in transactions
        if any(s.startswith(("UPDATE", "INSERT", "DELETE")) for s in body)
    ]
    unsynced = [body for synced, body in writes if not synced]
    # One transaction unsynced, the claim (the task marked running); the run's own writes,
    # its finish included, synced.
    assert len(unsynced) == 1, writes
    assert any(
        s.startswith(("UPDATE tasks", "INSERT INTO tasks")) and "'running'" in s
        for s in unsynced[0]
    ), unsynced
    assert any("DELETE FROM tasks" in s for synced, body in writes if synced for s in body)


# -- files: private from birth ---------------------------------------------------


async def test_the_store_and_its_wal_files_are_private_from_birth(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        store = await TaskStore.open(tmp_path / "state" / "tasks.db")
        await store.save(TaskRecord("cli-m", "x", (Message.user("x"),)))
        modes = {
            name: stat.S_IMODE(os.stat(tmp_path / "state" / name).st_mode)
            for name in ("tasks.db", "tasks.db-wal", "tasks.db-shm")
        }
        await store.aclose()
    finally:
        os.umask(old)
    assert modes == {"tasks.db": 0o600, "tasks.db-wal": 0o600, "tasks.db-shm": 0o600}


async def test_a_state_dir_others_can_enter_is_tightened(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o755)
    os.chmod(state, 0o755)
    async with open_runtime(state, model=ScriptedModel(word_delay=0, stream_delay=0)):
        pass
    assert stat.S_IMODE(os.stat(state).st_mode) == 0o700


def test_a_state_dir_of_another_user_is_refused_and_left_alone(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o755)
    os.chmod(state, 0o755)
    other = os.getuid() + 1
    with pytest.raises(StateDirError, match=r"belongs to uid .* pass --state-dir"):
        prepare_state_dir(state, uid=other)
    assert stat.S_IMODE(os.stat(state).st_mode) == 0o755


# -- a lost store is reported, never silently replaced ----------------------------


async def _store_with_a_task(path: Path) -> None:
    store = await TaskStore.open(path)
    await store.save(TaskRecord("chat-keep", "x", (Message.user("x"),)))
    await store.aclose()


async def test_a_store_truncated_to_nothing_is_reported_not_replaced(tmp_path: Path) -> None:
    path = tmp_path / "tasks.db"
    await _store_with_a_task(path)
    path.write_bytes(b"")
    with pytest.raises(
        StoreError, match=r"is empty, but .*tasks.db.created says .* lost .* delete .*created"
    ):
        await TaskStore.open(path)
    assert path.read_bytes() == b""  # nothing written over it


async def test_a_deleted_store_is_reported_and_not_recreated(tmp_path: Path) -> None:
    path = tmp_path / "tasks.db"
    await _store_with_a_task(path)
    path.unlink()
    with pytest.raises(StoreError, match=r"is missing, but .* Restore tasks\.db from a backup"):
        await TaskStore.open(path)
    assert not path.exists()


async def test_deleting_the_marker_starts_over_with_an_empty_store(tmp_path: Path) -> None:
    path = tmp_path / "tasks.db"
    await _store_with_a_task(path)
    path.write_bytes(b"")
    marker_path(path).unlink()
    store = await TaskStore.open(path)
    assert await store.list() == []
    await store.aclose()
    assert marker_path(path).exists()


async def test_a_store_made_before_markers_existed_gets_one(tmp_path: Path) -> None:
    path = tmp_path / "tasks.db"
    await _store_with_a_task(path)
    marker_path(path).unlink()
    store = await TaskStore.open(path)
    assert await store.load("chat-keep") is not None
    await store.aclose()
    assert marker_path(path).exists()


# -- one unreadable record -------------------------------------------------------


async def test_an_unreadable_record_is_listed_as_such_and_can_be_discarded(
    any_runtime: Runtime,
) -> None:
    runtime = any_runtime
    await runtime.executor.run("chat-fine", "ask first?", owner="o", emit=Recorder())
    insert_unreadable(runtime.store, "chat-bad")
    listed = await runtime.store.list_stored()
    assert {t.session_id: t.status for t in listed} == {
        "chat-fine": TaskStatus.AWAITING_ANSWER,
        "chat-bad": "unreadable",
    }
    [bad] = [t for t in listed if isinstance(t, UnreadableTask)]
    assert "agentrt pending discard chat-bad" in bad.error
    assert await runtime.executor.discard("chat-bad")
    assert [t.session_id for t in await runtime.store.list_stored()] == ["chat-fine"]


async def test_the_brief_listing_reads_what_the_full_listing_does(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sql, "_BRIEF_CHUNK", 2)  # the odd tasks are read in several queries
    read_in_full: list[str] = []
    summary_rows = sql.SqlStore._summary_rows

    def spy(self: sql.SqlStore, db: Any, session_ids: Sequence[Any]) -> dict[Any, Any]:
        read_in_full.extend(session_ids)
        return summary_rows(self, db, session_ids)

    monkeypatch.setattr(sql.SqlStore, "_summary_rows", spy)
    await fill_mixed_store(store)
    paused = TaskStatus.INTERRUPTED
    odd_rows = {  # changed by hand: a question asking nothing, then unreadable ones
        "cli-emptyquestion": ("question", "{}"),
        "cli-nocall": ("question", '{"prompt": "who?"}'),
        "cli-noquestion": ("question", None),
        "cli-badjson": ("error", "{oops"),
        "cli-noerror": ("error", None),
        "cli-badinput": ("input", '"oops'),
    }
    for n, (session, (column, value)) in enumerate(odd_rows.items()):
        await store.save(TaskRecord(session, "x", (), status=paused, updated_at=9.0 - n))
        raw_sql(store, f"UPDATE tasks SET {column} = ? WHERE session_id = ?", (value, session))
    await store.save(TaskRecord("cli-surrogate", "a \ud800", (), status=paused, updated_at=2.0))
    typed = isinstance(store, TaskStore)  # only SQLite lets a column hold another type
    if typed:
        await store.save(TaskRecord("cli-blob", "", (), status=paused, updated_at=1.0))
        raw_sql(store, "UPDATE tasks SET input = ? WHERE session_id = 'cli-blob'", (b'"x"',))
    listed = await store.list_stored()
    statuses = {t.session_id: t.status for t in listed}
    unreadable = {"cli-bad", "cli-status", "cli-cause", *odd_rows}
    unreadable.remove("cli-emptyquestion")
    assert {s for s, status in statuses.items() if status == "unreadable"} == unreadable | (
        {"cli-typed"} if typed else set()
    )
    brief = await store.list_brief()
    assert brief == [brief_of(t) for t in listed]
    assert len(brief) == 20 if typed else 19
    odd = ["status", "cause", *(["typed"] if typed else []), "nocall", "noquestion"]
    odd += ["badjson", "noerror", "badinput", "bad"]
    assert read_in_full == [f"cli-{name}" for name in odd]
    assert [t[2] for t in brief[:4]] == [False, True, True, False]  # crashed
    assert await store.list_brief("cli-c") == [
        brief_of(t) for t in await store.list_stored("cli-c")
    ]
    assert await store.list_brief("cli_") == []
    for task in listed:
        assert await store.delete(task.session_id)
    assert await store.list_brief() == []


async def test_calls_made_together_share_batches_and_a_failing_one_spoils_nothing(
    store: Store,
) -> None:
    refused: list[str] = []

    async def create(session: str) -> None:
        try:
            await store.create(TaskRecord(session, "hi", (Message.user("hi"),)))
        except TaskExistsError:
            refused.append(session)

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            for n in range(100):
                nursery.start_soon(create, f"cli-{n}")
            nursery.start_soon(create, "cli-7")  # the same session twice, in one batch
    stats = store.statistics()
    assert refused == ["cli-7"]
    assert len(await store.list()) == 100
    # 101 calls, far fewer thread hops and commits.
    assert stats.calls == 101
    assert stats.batches < 20
    assert stats.waiting == 0


def test_kept_thinking_round_trips_and_a_message_without_it_is_written_as_before() -> None:
    from agentrt import ThinkingBlock
    from agentrt.models.messages import Role
    from agentrt.store.record import converter

    plain = converter.unstructure(Message.user("hi"))
    assert "thinking" not in plain  # rows written before thinking existed look the same
    assert converter.structure(plain, Message) == Message.user("hi")
    signed = Message(
        Role.ASSISTANT,
        "ok",
        thinking=(ThinkingBlock("why", "sig=="), ThinkingBlock("", None, "ENCRYPTED")),
    )
    assert converter.structure(converter.unstructure(signed), Message) == signed
    # A call with nothing redacted from its arguments is written without the field.
    from agentrt.models.messages import Redaction
    from agentrt.models.messages import ToolCall

    plain_call = ToolCall("c1", "sh", {"command": "ls"})
    sealed_call = ToolCall("c2", "sh", {"command": "[secret K]"}, Redaction.NAMED)
    written = converter.unstructure(Message.assistant("", (plain_call, sealed_call)))
    assert written["tool_calls"][0] == {"id": "c1", "name": "sh", "arguments": {"command": "ls"}}
    assert written["tool_calls"][1]["redaction"] == Redaction.NAMED.value
    assert converter.structure(written, Message).tool_calls == (plain_call, sealed_call)


def test_a_question_and_a_stop_at_their_defaults_are_written_as_before_those_fields() -> None:
    from agentrt.store.record import SavedQuestion
    from agentrt.store.record import converter
    from agentrt.vocab.questions import QuestionState
    from agentrt.vocab.questions import legacy_question_id
    from agentrt.vocab.stops import Interruption
    from agentrt.vocab.stops import StopKind

    asked = SavedQuestion("c1", "Name?", id="q1")
    assert converter.unstructure(asked) == {
        "call_id": "c1",
        "prompt": "Name?",
        "kind": "question",
        "id": "q1",
    }
    moved = SavedQuestion(
        "c1", "Name?", id="q1", task="t", origin="web", state=QuestionState.EXPIRED
    )
    written = converter.unstructure(moved)
    assert (written["task"], written["origin"], written["state"]) == ("t", "web", "expired")
    assert converter.structure(written, SavedQuestion) == moved
    # A question saved before questions had ids gets the same id every time it is read.
    old = converter.structure({"call_id": "c1", "prompt": "Name?"}, SavedQuestion)
    assert old.id == legacy_question_id("c1", "Name?")

    once = Interruption(StopKind.PAUSE, 100.0)
    assert "repeats" not in converter.unstructure(once)
    assert "first_at" not in converter.unstructure(once)
    folded = Interruption(StopKind.PAUSE, 300.0, repeats=2, first_at=100.0)
    kept = converter.unstructure(folded)
    assert (kept["repeats"], kept["first_at"]) == (2, 100.0)
    assert converter.structure(kept, Interruption) == folded

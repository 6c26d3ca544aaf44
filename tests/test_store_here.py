"""Small store calls run in the Trio thread while the writer thread is idle, and only then.

A stop's write, a status or a claim whose history is in memory, handed over
while the writer thread has nothing queued or running, runs in the thread that
hands it over (`Writer.run_here`, `TaskStore._run_here`). What must still hold:
nothing waits there for another connection's lock, nothing runs before a call
handed over earlier, and the WAL is still checkpointed.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest
import trio
import trio.testing

from agentrt import Cause
from agentrt import Message
from agentrt import StoreError
from agentrt import TaskRecord
from agentrt import TaskStatus
from agentrt import TaskStore
from agentrt.store import sqlite as sqlite_store

MAIN = threading.get_ident()


class Threads:
    """Which thread ran each statement of the store's connection (its trace callback)."""

    def __init__(self, store: TaskStore) -> None:
        self.seen: list[tuple[bool, str]] = []
        store._db.set_trace_callback(self.note)

    def note(self, statement: str) -> None:
        self.seen.append((threading.get_ident() == MAIN, statement))

    def of(self, fragment: str) -> list[bool]:
        """For each statement holding `fragment`: whether the Trio thread ran it."""
        return [here for here, statement in self.seen if fragment in statement]


async def interrupted(tmp_path: Path, session: str = "cli-h") -> tuple[TaskStore, TaskRecord]:
    store = await TaskStore.open(tmp_path / "tasks.db")
    record = TaskRecord(session, "x", (Message.user("x"),), status=TaskStatus.INTERRUPTED)
    await store.create(record)
    return store, record


def claim(old: TaskRecord) -> TaskRecord:
    return old.evolve(status=TaskStatus.RUNNING, runs=old.runs + 1)


async def test_a_status_and_a_claim_in_memory_run_in_the_trio_thread(tmp_path: Path) -> None:
    store, _ = await interrupted(tmp_path)
    threads = Threads(store)
    marked = store.mark_nowait("cli-h", TaskStatus.INTERRUPTED, cause=Cause.PAUSE)
    store._hand_over()  # what a wait does first: run here, then only the sync is waited for
    assert marked._call.succeeded and marked._call.result() is True
    assert await marked.wait()
    claimed = await store.update("cli-h", claim, synced=False)
    assert claimed is not None and claimed[0].status is TaskStatus.RUNNING
    assert threads.of("BEGIN IMMEDIATE") == [True, True]
    assert set(threads.of("UPDATE tasks")) == {True}
    await store.aclose()


async def test_a_claim_whose_history_is_not_in_memory_runs_in_the_writer_thread(
    tmp_path: Path,
) -> None:
    store, _ = await interrupted(tmp_path)
    await store.aclose()
    again = await TaskStore.open(tmp_path / "tasks.db")  # nothing in memory: decoded there
    threads = Threads(again)
    assert await again.update("cli-h", claim, synced=False) is not None
    assert await again.update("cli-h", claim, synced=False) is not None  # in memory now
    assert threads.of("BEGIN IMMEDIATE") == [False, True]
    await again.aclose()


async def test_another_connections_write_lock_sends_the_call_to_the_writer_thread(
    tmp_path: Path,
) -> None:
    """The Trio thread never waits for SQLite's lock: the loop runs on while the writer
    thread waits, and the call is done once the other connection lets go."""
    store, _ = await interrupted(tmp_path)
    threads = Threads(store)
    other = sqlite3.connect(tmp_path / "tasks.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    outcome: list[bool] = []
    with trio.fail_after(4):  # under the writer's 5 s busy timeout: a wait here fails it
        async with trio.open_nursery() as nursery:

            async def mark() -> None:
                marked = store.mark_nowait("cli-h", TaskStatus.INTERRUPTED, cause=Cause.PAUSE)
                outcome.append(await marked.wait())

            nursery.start_soon(mark)
            await trio.testing.wait_all_tasks_blocked()
            assert outcome == []  # waiting for the lock, in the writer thread
            other.execute("COMMIT")
    other.close()
    assert outcome == [True]
    # Tried here without waiting (no UPDATE ran), then begun and run in the writer thread.
    assert threads.of("BEGIN IMMEDIATE") == [True, False]
    assert set(threads.of("UPDATE tasks")) == {False}
    assert await store.update("cli-h", claim, synced=False) is not None
    assert threads.of("BEGIN IMMEDIATE")[-1] is True  # here again, the busy timeout back to 0
    await store.aclose()


async def test_a_small_call_never_runs_before_a_call_queued_earlier(tmp_path: Path) -> None:
    store, _ = await interrupted(tmp_path)
    release = threading.Event()
    ran: list[str] = []

    def slow(db: sqlite3.Connection) -> None:
        release.wait(10)
        ran.append("slow")

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(store._run, slow)
            await trio.testing.wait_all_tasks_blocked()
            marked = store.mark_nowait("cli-h", TaskStatus.INTERRUPTED, cause=Cause.PAUSE)
            store._hand_over()
            assert ran == []  # queued behind the slow call, not run here
            release.set()
            assert await marked.wait()
            ran.append("mark")
    assert ran == ["slow", "mark"]
    await store.aclose()


async def test_the_wal_is_checkpointed_though_every_write_could_run_here(tmp_path: Path) -> None:
    """A commit in the Trio thread never checkpoints; one batch in 16 goes to the writer
    thread, whose commit checkpoints a long WAL as SQLite's autocheckpoint does."""
    store, _ = await interrupted(tmp_path)
    threads = Threads(store)
    for n in range(40):
        marked = store.mark_nowait("cli-h", TaskStatus.INTERRUPTED, cause=Cause.PAUSE, error=str(n))
        assert await marked.wait()
    assert threads.of("BEGIN IMMEDIATE") == ([True] * 16 + [False]) * 2 + [True] * 6
    store._db.set_trace_callback(None)
    page = 4096 + 24  # a WAL frame: a page and its header
    wal = tmp_path / "tasks.db-wal"
    for n in range(3000):
        # A different error each time: a row whose bytes change, so each commit writes.
        marked = store.mark_nowait("cli-h", TaskStatus.INTERRUPTED, cause=Cause.PAUSE, error=str(n))
        assert await marked.wait()
    # Without checkpoints 3,000 commits of a page or more would make it 12 MB and more.
    assert wal.stat().st_size <= 32 + (sqlite_store._AUTOCHECKPOINT + 16 * 4) * page
    await store.aclose()


async def test_a_failure_outside_the_calls_fails_them_and_the_store_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, _ = await interrupted(tmp_path)
    real = TaskStore._set_level
    failures = [sqlite3.OperationalError("disk I/O error")]

    def failing(self: TaskStore, db: sqlite3.Connection, level: str) -> None:
        if failures:
            raise failures.pop()
        real(self, db, level)

    monkeypatch.setattr(TaskStore, "_set_level", failing)
    marked = store.mark_nowait("cli-h", TaskStatus.INTERRUPTED, cause=Cause.PAUSE)
    with pytest.raises(StoreError, match="failed: disk I/O error"):
        await marked.wait()
    claimed = await store.update("cli-h", claim, synced=False)
    assert claimed is not None and claimed[0].status is TaskStatus.RUNNING
    await store.aclose()


async def test_a_deferred_call_run_here_lets_the_tasks_already_woken_go_first(
    tmp_path: Path,
) -> None:
    """A stop's write is deferred behind the run's final event: the task woken to send that
    event runs before the write holds the loop, whichever order Trio runs a batch in
    (20 rounds: one checkpoint would let the write go first in half of them)."""
    store, _ = await interrupted(tmp_path)
    order: list[str] = []
    store._db.set_trace_callback(
        lambda statement: order.append("write") if statement.startswith("UPDATE") else None
    )
    for n in range(20):
        woken = trio.Event()
        async with trio.open_nursery() as nursery:

            async def sender(woken: trio.Event = woken) -> None:
                await woken.wait()
                order.append("sent")

            nursery.start_soon(sender)
            await trio.testing.wait_all_tasks_blocked()
            # Each time a different error, so each write changes the row.
            marked = store.mark_nowait(
                "cli-h", TaskStatus.INTERRUPTED, cause=Cause.PAUSE, error=str(n)
            )
            woken.set()
            assert await marked.wait()
        assert order[:2] == ["sent", "write"], n
        order.clear()
    store._db.set_trace_callback(None)
    await store.aclose()

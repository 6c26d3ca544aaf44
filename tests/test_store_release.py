"""A store call that is done is not kept alive by the threads that ran it.

A call's function closes over what its caller had at hand: a stop's write over
the run that stopped (and, through the run's events, the connection of the
window that started it). The writer thread, and on SQLite the thread that syncs
the WAL, went on holding the last batch they ran while they waited for the next
one, so the last run of a quiet daemon stayed in memory until something else was
written.
"""

from __future__ import annotations

import gc
import sqlite3
import weakref
from collections.abc import Callable
from pathlib import Path

from stress.holders import holder_chain

from agentrt import TaskStore


class Held:
    """What a store call's function holds."""


def writes(held: Held) -> Callable[[sqlite3.Connection], bool]:
    """A store call that writes a row (so that a synced one waits for the WAL's sync)
    and holds `held`."""

    def call(db: sqlite3.Connection) -> bool:
        db.execute("CREATE TABLE IF NOT EXISTS scratch(x)")
        db.execute("INSERT INTO scratch VALUES (?)", (id(held),))
        return True

    return call


def holders(alive: list[Held | None]) -> list[str]:
    """What keeps each object of `alive` that is still there (`stress.holders`)."""
    return [
        holder_chain(alive[i], ignore=(alive,)) for i in range(len(alive)) if alive[i] is not None
    ]


async def test_a_done_call_is_not_kept_by_the_writer_or_the_sync_thread(tmp_path: Path) -> None:
    store = await TaskStore.open(tmp_path / "tasks.db")
    try:
        kept: list[weakref.ref[Held]] = []
        for synced in (True, False):
            held = Held()
            kept.append(weakref.ref(held))

            # Queued for the writer thread (not a call that may run here), and told by the
            # sync thread when synced.
            done = store._submit(writes(held), synced=synced)
            assert await store._wait(done)
            del held, done
        gc.collect()
        alive = [ref() for ref in kept]
        assert alive == [None, None], holders(alive)
    finally:
        await store.aclose()


async def test_no_call_of_a_batch_of_several_is_kept_once_delivered(tmp_path: Path) -> None:
    """The same with a batch of several calls, each in a savepoint: one that must reach the
    disk is told by the sync thread, once it synced the WAL; the others at the commit."""
    store = await TaskStore.open(tmp_path / "tasks.db")
    try:
        held = [Held() for _ in range(3)]
        kept = [weakref.ref(h) for h in held]
        calls = [
            store._submit(writes(h), defer=True, synced=synced)
            for h, synced in zip(held, (False, True, False), strict=True)
        ]
        assert [await store._wait(call) for call in calls] == [True, True, True]
        del calls, held
        gc.collect()
        alive = [ref() for ref in kept]
        assert alive == [None, None, None], holders(alive)
    finally:
        await store.aclose()

"""The store's writer thread: every call of a store runs there, what is queued in one transaction.

SQLite (and psycopg) block, so a store runs its calls in one long-lived
thread. Whatever is queued when the thread comes round goes in one
transaction (group commit: one sync to disk for the lot), each call in a
savepoint of its own when there are several, so that a call that fails
changes nothing and the others still commit.

A backend may also run a batch in the thread that hands it over (the Trio
thread), when the writer thread has nothing queued or running and every call
of the batch is one of the small ones that may (`Call.here`): the two thread
hops such a call costs (waking the writer, then waking the Trio run back) were
the larger part of a pause -> resume cycle on SQLite. See `Writer.run_here`. On
PostgreSQL such a batch waits for the server in the event loop (`Writer.green`).
"""

from __future__ import annotations

import contextlib
import queue
import sqlite3
import threading
from collections.abc import Callable
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from typing import Generic
from typing import TypeVar

import attrs
import trio

from ..vocab.reprs import mutable
from .errors import StoreError
from .types import StoreStatistics

T = TypeVar("T")


@mutable(eq=False)
class Done:
    """That a store call is done: set once, in the Trio thread, and waited for there.

    As `trio.Event`, but a wait may also be one no cancel interrupts, which is
    what the caller of a queued call does (see `SqlStore._wait`) at every store
    call: with an event, that wait needs a shielded cancel scope around it,
    which made it about a third dearer.
    """

    _flag: bool = attrs.field(default=False, init=False)
    _waiters: list[trio.lowlevel.Task] = attrs.field(factory=list, init=False)

    def set(self) -> None:
        """Mark it done and wake every task waiting for it."""
        self._flag = True
        waiters, self._waiters = self._waiters, []
        for task in waiters:
            trio.lowlevel.reschedule(task)

    async def wait(self, *, cancellable: bool = True) -> None:
        """Wait until it is done (a checkpoint either way).

        Not `cancellable`, a cancel does not end the wait: it is raised at the
        caller's next checkpoint, as after a wait inside a shielded scope.
        """
        if self._flag:
            if cancellable:
                await trio.lowlevel.checkpoint()
            else:
                await trio.lowlevel.cancel_shielded_checkpoint()
            return
        task = trio.lowlevel.current_task()
        self._waiters.append(task)

        def abort(_: trio.lowlevel.RaiseCancelT) -> trio.lowlevel.Abort:
            if not cancellable:
                return trio.lowlevel.Abort.FAILED  # `set` wakes it
            self._waiters.remove(task)
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)


@mutable(eq=False)
class Call(Generic[T]):
    """One store call waiting for, or done by, the writer thread."""

    fn: Callable[[sqlite3.Connection], T]
    token: trio.lowlevel.TrioToken
    done: Done = attrs.field(factory=Done)
    #: True for a call that will never run (a store that stopped working): its
    #: caller may stop waiting when cancelled.
    abandonable: bool = False
    #: False for a call whose commit need not wait for the disk (a resume's claim, see
    #: `SqlStore.update`): a batch of such calls alone commits without a sync.
    synced: bool = True
    #: True once its caller has been woken (`_deliver`), or handed to whoever will wake it
    #: (`wake`): some calls of a batch are told before the others, once the disk has
    #: what they wrote (see `agentrt.store.sqlite.TaskStore._run_batch`).
    told: bool = False
    #: True for a call cheap enough to run in the event loop's thread, where the backend
    #: allows it (`Writer.run_here`): a few statements, no history to decode.
    here: bool = False
    _value: T | None = None
    _error: BaseException | None = None

    def run(self, db: sqlite3.Connection) -> None:
        """Run the call now, in this thread (its outcome is kept; `done` is left alone).

        A batch that could not begin may run its calls again: the last run's outcome counts.
        """
        self._error = None
        try:
            self._value = self.fn(db)
        except BaseException as exc:
            self._error = exc
            raise

    def fail(self, error: BaseException) -> None:
        self._value, self._error = None, error

    @property
    def succeeded(self) -> bool:
        """Whether its last run returned (rather than raised, or was failed)."""
        return self._error is None

    def result(self) -> T:
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]


class LastCallUndone(Exception):
    """Raised by a backend's ``COMMIT`` that committed a batch of several calls without the
    last one, whose write sent with the ``COMMIT`` failed (`error`): that call failed alone.

    See `agentrt.store.postgres.PgConnection.execute_unread`.
    """

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


#: The most calls one batch takes, so that a long queue is served in turns.
_BATCH_LIMIT = 64


@mutable(eq=False)
class Writer:
    """The thread that runs every store call, batching what is queued into one transaction.

    Started with the first call and stopped by `stop`. Results go back to the
    Trio run that queued each call (`TrioToken.run_sync_soon`), one wake-up
    per batch.
    """

    db: sqlite3.Connection
    location: str
    #: Runs one batch in one transaction (the backend's: see `run_batch`); what it returns
    #: (whether the transaction committed) is the backend's own business.
    run_batch: Callable[[sqlite3.Connection, list[Call[Any]]], object]
    #: Run (in a worker thread) once the thread has run its last batch, before the file
    #: is closed: what the backend must finish with the file still open.
    finish: Callable[[], None] | None = None
    #: Runs a batch in the thread that hands it over, in one transaction, as `run_batch`
    #: does; returns False, having done nothing, when it cannot do so at once (the file's
    #: write lock held by another connection), and the batch goes to the thread after all.
    #: Only for batches of `Call.here` calls handed over while the thread has nothing
    #: queued or running; None: every batch runs in the thread.
    run_here: Callable[[sqlite3.Connection, list[Call[Any]]], bool] | None = None
    #: True when `run_here` may wait on the network: it runs in a greenlet of the Trio
    #: thread, whose waits the event loop makes (`agentrt.store.green`), and its calls
    #: are done once it ends, which may be after `submit` returned. Its answer that it
    #: cannot run the batch (False) must come before its first wait.
    green: bool = False
    #: Calls handed over together are one item, so that they go in one batch.
    _queue: queue.SimpleQueue[list[Call[Any]] | None] = attrs.field(
        factory=queue.SimpleQueue, init=False
    )
    _thread: threading.Thread | None = attrs.field(default=None, init=False)
    _start_lock: threading.Lock = attrs.field(factory=threading.Lock, init=False)
    #: Held while a batch runs, in whichever thread: the connection is used by one at a time.
    _running: threading.Lock = attrs.field(factory=threading.Lock, init=False)
    #: Guards `_queued`, and a batch run here starting only while it is 0.
    _counting: threading.Lock = attrs.field(factory=threading.Lock, init=False)
    #: Calls handed to the thread and not yet run: a batch may run here only when there
    #: are none, so that it never runs before a call handed over earlier.
    _queued: int = attrs.field(default=0, init=False)
    _calls: int = attrs.field(default=0, init=False)
    _batches: int = attrs.field(default=0, init=False)
    #: Set once the batch run in a greenlet of the Trio thread ends (`green`).
    _green_done: trio.Event | None = attrs.field(default=None, init=False)

    def submit(self, *calls: Call[Any]) -> None:
        """Run `calls`, in their order, in one batch: here when `run_here` may, else queued
        for the thread. Run here, they are done when this returns (with `green`, once
        the batch ends)."""
        here = self.run_here is not None and calls and all(call.here for call in calls)
        if here and self._run_here(list(calls)):
            return
        if self._thread is None:
            with self._start_lock:
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._loop,
                        name=f"agentrt store {Path(self.location).name}",
                        daemon=True,
                    )
                    self._thread.start()
        with self._counting:
            self._queued += len(calls)
            self._queue.put(list(calls))

    @trio.lowlevel.enable_ki_protection
    def _run_here(self, batch: list[Call[Any]]) -> bool:
        """Run `batch` in this thread if the thread is idle and the backend can begin at once.

        Whether it ran (and its calls are done; with `green`, whether it runs, and they are
        done once it ends). Protected from Ctrl+C, as the thread is: a KeyboardInterrupt
        never lands between a batch's statements.
        """
        assert self.run_here is not None
        with self._counting:
            if self._queued or not self._running.acquire(blocking=False):
                return False
        if not self.green:
            return self._here(batch)
        from . import green  # (greenlet: for a backend that asks for it alone)

        started = green.start(lambda: self._here(batch))
        if started.ended:
            return bool(started.value)
        self._green_done = started.done
        return True

    def _here(self, batch: list[Call[Any]]) -> bool:
        """`_run_here`'s run of `batch`, `_running` held (and released here)."""
        assert self.run_here is not None
        try:
            if not self.run_here(self.db, batch):
                return False
            self._calls += len(batch)
            self._batches += 1
        except BaseException as exc:
            # Not a call's own error (those are kept in the call): the backend broke off.
            if self.db.in_transaction:
                with contextlib.suppress(Exception):
                    self.db.execute("ROLLBACK")
            error = StoreError(f"the task store {self.location} failed: {exc}")
            for call in batch:
                if not call.told:
                    call.fail(error)
        finally:
            self._running.release()
        _tell_here(batch)
        return True

    def statistics(self) -> StoreStatistics:
        return StoreStatistics(self._calls, self._batches, self._queue.qsize())

    async def stop(self) -> None:
        """Run what is queued, then end the thread and close the file."""
        if self._green_done is not None:
            with trio.CancelScope(shield=True):
                await self._green_done.wait()
        thread = self._thread
        if thread is not None:
            self._queue.put(None)
        # One worker thread for the three blocking steps, in order: each hop to a worker
        # thread and back costs the event loop a wake-up (~0.6 ms of `agentrt run`'s end).
        await trio.to_thread.run_sync(self._end, thread)

    def _end(self, thread: threading.Thread | None) -> None:
        """Wait for the writer thread to end, let the backend finish, close the file."""
        if thread is not None:
            thread.join()
        if self.finish is not None:
            self.finish()
        self.db.close()

    def _loop(self) -> None:
        for batch in batches(self._queue, _BATCH_LIMIT):
            with self._running:
                self.run_batch(self.db, batch)
                self._calls += len(batch)
                self._batches += 1
            with self._counting:
                self._queued -= len(batch)
            _deliver(batch)
            del batch  # (see `batches`)


def batches(
    waiting: queue.SimpleQueue[list[Call[Any]] | None], limit: float = float("inf")
) -> Iterator[list[Call[Any]]]:
    """The calls of `waiting` in batches, until a None is taken (a thread's loop).

    Each batch is what was queued when it was taken, up to about `limit` calls:
    the first item, waited for, and those already behind it. What came before
    the None is still given.
    """
    while True:
        batch = waiting.get()
        if batch is None:
            return
        stopping = False
        while len(batch) < limit:
            try:
                more = waiting.get_nowait()
            except queue.Empty:
                break
            if more is None:
                stopping = True
                break
            batch.extend(more)
            del more
        yield batch
        if stopping:
            return
        # Not held while the next one is waited for: a call's function holds what its
        # caller had (a stop's write, the run that stopped), and a quiet store would keep
        # its last batch alive until the next call.
        del batch


def synced(batch: list[Call[Any]]) -> bool:
    """Whether `batch` must commit synced to disk: unless every call in it may not be."""
    return any(call.synced for call in batch)


def _deliver(batch: list[Call[Any]]) -> None:
    """Wake the Trio runs waiting for the calls of `batch` not told yet: one wake-up per run."""
    waiting = [call for call in batch if not call.told]
    for call in waiting:
        call.told = True
    wake(waiting)


def _tell_here(batch: list[Call[Any]]) -> None:
    """`_deliver`, from the Trio thread of the run that handed `batch` over: its own calls
    are set done at once, those of another run (deferred there) woken in their thread."""
    own = trio.lowlevel.current_trio_token()
    waiting = [call for call in batch if not call.told]
    for call in waiting:
        call.told = True
    _set_all([call for call in waiting if call.token is own])
    wake([call for call in waiting if call.token is not own])


def wake(batch: list[Call[Any]]) -> None:
    """Wake the Trio runs waiting for the calls of `batch`, told or not: one wake-up per run."""
    by_token: dict[trio.lowlevel.TrioToken, list[Call[Any]]] = {}
    for call in batch:
        by_token.setdefault(call.token, []).append(call)
    for token, calls in by_token.items():
        with contextlib.suppress(trio.RunFinishedError):
            token.run_sync_soon(_set_all, calls)


def _set_all(calls: list[Call[Any]]) -> None:
    for call in calls:
        call.done.set()


def run_batch(
    db: sqlite3.Connection,
    batch: list[Call[Any]],
    location: str,
    forget: Callable[[], None],
    errors: tuple[type[Exception], ...] = (sqlite3.DatabaseError,),
    failed: Callable[[Exception], StoreError] | None = None,
    abort: tuple[type[Exception], ...] = (),
    *,
    begun: bool = False,
) -> bool:
    """Run a batch of calls in one transaction, each in its own savepoint (writer thread).

    A call that fails changes nothing (its savepoint is rolled back) and the
    others still commit. A call alone in its batch needs no savepoint: when it
    fails the whole transaction is rolled back, which is the same. `forget` is
    called whenever something is rolled back, so that what the store keeps in
    memory never holds what the file does not. An error of `abort` (raised
    when the transaction could not begin, nothing of it done) leaves the batch
    as it is, for the caller to run it again. Returns whether the transaction
    committed (False: nothing of the batch was written). `begun`: the caller has begun the
    transaction already (with ``BEGIN IMMEDIATE``).
    """

    def store_failed(exc: Exception) -> StoreError:
        return StoreError(f"the task store {location} failed: {exc}")

    failed = failed or store_failed
    if not begun:
        try:
            db.execute("BEGIN IMMEDIATE")
        except errors as exc:
            for call in batch:
                call.fail(failed(exc))
            return False
    if len(batch) == 1:
        return _run_alone(db, batch[0], forget, errors, failed, abort)
    ran: list[Call[Any]] = []
    for call in batch:
        db.execute("SAVEPOINT batch_call")
        try:
            call.run(db)
        except abort:
            forget()
            raise
        except errors as exc:
            db.execute("ROLLBACK TO batch_call")
            forget()
            call.fail(failed(exc))
        except Exception:  # the call's own error (a bad answer, a task that exists): kept
            db.execute("ROLLBACK TO batch_call")
            forget()
        else:
            ran.append(call)
        db.execute("RELEASE batch_call")
    return _commit(db, ran, forget, errors, failed)


def _run_alone(
    db: sqlite3.Connection,
    call: Call[Any],
    forget: Callable[[], None],
    errors: tuple[type[Exception], ...],
    failed: Callable[[Exception], StoreError],
    abort: tuple[type[Exception], ...],
) -> bool:
    """Run the one call of a batch in the transaction begun for it, no savepoint (two round
    trips fewer on PostgreSQL); a failure rolls the transaction back. Whether it committed."""
    try:
        call.run(db)
    except abort:
        forget()
        raise
    except Exception as exc:
        forget()
        if db.in_transaction:
            db.execute("ROLLBACK")
        if isinstance(exc, errors):
            call.fail(failed(exc))
        return False  # the call's own error (a bad answer, a task that exists) is kept
    return _commit(db, [call], forget, errors, failed)


def _commit(
    db: sqlite3.Connection,
    ran: list[Call[Any]],
    forget: Callable[[], None],
    errors: tuple[type[Exception], ...],
    failed: Callable[[Exception], StoreError],
) -> bool:
    try:
        db.execute("COMMIT")
    except LastCallUndone as undone:
        # The others committed; the last call's write did not, and its error is its own.
        forget()
        ran[-1].fail(failed(undone.error))
        return True
    except errors as exc:
        forget()
        if db.in_transaction:
            db.execute("ROLLBACK")
        for call in ran:
            call.fail(failed(exc))
        return False
    return True

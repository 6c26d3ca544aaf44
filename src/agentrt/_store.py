"""The task store: each session's pending task, persisted in an embedded SQLite file.

Every change is one transaction, so a process killed at any moment leaves
either the old record or the new one. A change that reads before it writes
(create, resume, discard) takes SQLite's write lock first (`BEGIN IMMEDIATE`),
so what it read cannot change under it, even from another process. A record's
fields are columns and its transcript one JSON column, so the bookkeeping of a
pause or a resume is a plain column update that leaves the transcript alone.
SQLite runs off the Trio thread (one connection, one worker thread at a time,
under a lock); the file uses WAL so a reader never waits for a writer.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar

import attrs
import cattrs
import trio

from ._cause import Cause
from ._messages import Message
from ._record import SavedQuestion, TaskRecord, TaskStatus, clamp_message, converter
from ._statedir import fsync_dir

SCHEMA_VERSION = 2

_SCHEMA = """
CREATE TABLE IF NOT EXISTS tasks (
    session_id TEXT PRIMARY KEY,
    status TEXT NOT NULL,
    cause TEXT,
    error TEXT,
    question TEXT,
    window_hash TEXT,
    task_hash TEXT,
    runs INTEGER NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    input TEXT NOT NULL,
    runner TEXT,
    attempts TEXT NOT NULL DEFAULT '{}',
    workdir TEXT,
    lost_words INTEGER NOT NULL DEFAULT 0,
    transcript TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS history (
    session_id TEXT PRIMARY KEY,
    updated_at REAL NOT NULL,
    transcript TEXT NOT NULL,
    window_hash TEXT
);
"""

T = TypeVar("T")


class StoreError(Exception):
    """The store file cannot be used (corrupt, newer schema, unreadable record)."""


class TaskExistsError(Exception):
    """A new task was started in a session that still has a pending task."""


@attrs.frozen
class UnreadableTask:
    """A stored pending task that cannot be decoded (bad JSON, a damaged field).

    Listings show it with status ``unreadable`` so that the other tasks stay
    usable, and it can be discarded like any task. `error` says what is wrong
    and how to discard it. The plain columns are kept when they can be read.
    """

    session_id: str
    error: str
    updated_at: float | None = None
    window_hash: str | None = None
    status: str = "unreadable"


#: What one stored pending task reads back as.
StoredTask = TaskRecord | UnreadableTask


@contextlib.contextmanager
def _write_transaction(db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One transaction holding SQLite's write lock from its first statement.

    `BEGIN IMMEDIATE` takes the lock before anything is read, so a
    read-check-write cannot interleave with another writer (another process
    on the same file included): the second one waits (``busy_timeout``) and
    then reads what the first one wrote.
    """
    if db.in_transaction:
        # Inside a batch (see `TaskStore._run`): the batch holds the write lock already, and
        # this call's changes stand or fall on their own in a savepoint.
        db.execute("SAVEPOINT call")
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK TO call")
            db.execute("RELEASE call")
            raise
        db.execute("RELEASE call")
        return
    db.execute("BEGIN IMMEDIATE")
    try:
        yield db
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def _dumps(value: Any) -> str:
    """JSON text for SQLite, UTF-8 where possible."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate (a model's or a chat's JSON may carry one) has no UTF-8 form;
        # escaped, it is plain ASCII and reads back as the same string.
        text = json.dumps(value, ensure_ascii=True, separators=(",", ":"))
    return text


#: The columns of `tasks` but the transcript, in the order `_fields` gives their values.
_FIELDS = (
    "status",
    "cause",
    "error",
    "question",
    "window_hash",
    "task_hash",
    "runs",
    "created_at",
    "updated_at",
    "input",
    "runner",
    "attempts",
    "workdir",
    "lost_words",
)
_SELECT = f"SELECT session_id, {', '.join(_FIELDS)}, transcript FROM tasks"


def _fields(record: TaskRecord) -> tuple[Any, ...]:
    """The column values of `record` but its transcript. Free text is stored as JSON."""
    question = converter.unstructure(record.question) if record.question else None
    return (
        record.status.value,
        record.cause.value if record.cause else None,
        _dumps(record.error),
        _dumps(question),
        record.window_hash,
        record.task_hash,
        record.runs,
        record.created_at,
        record.updated_at,
        _dumps(record.input),
        record.runner,
        _dumps(dict(record.attempts)),
        record.workdir,
        record.lost_words,
    )


def _upsert(db: sqlite3.Connection, record: TaskRecord) -> TaskRecord:
    """Write `record`, clamped to the snapshot limits, inside the caller's transaction."""
    record = attrs.evolve(record, transcript=tuple(clamp_message(m) for m in record.transcript))
    transcript = _dumps(converter.unstructure(record.transcript, tuple[Message, ...]))
    columns = (*_FIELDS, "transcript")
    db.execute(
        f"INSERT INTO tasks(session_id, {', '.join(columns)}) "
        f"VALUES ({', '.join('?' * (len(columns) + 1))}) ON CONFLICT(session_id) DO UPDATE SET "
        + ", ".join(f"{c} = excluded.{c}" for c in columns),
        (record.session_id, *_fields(record), transcript),
    )
    return record


def _update_fields(db: sqlite3.Connection, record: TaskRecord) -> bool:
    """Rewrite every column of a stored record but its transcript, in the caller's transaction.

    A plain column update: the transcript, by far the largest part, is not read or written.
    """
    cur = db.execute(
        f"UPDATE tasks SET {', '.join(f'{c} = ?' for c in _FIELDS)} WHERE session_id = ?",
        (*_fields(record), record.session_id),
    )
    return cur.rowcount > 0


@attrs.define(eq=False)
class TaskStore:
    """Persisted pending tasks, one per session. Open with `await TaskStore.open(path)`."""

    path: Path
    _db: sqlite3.Connection = attrs.field(repr=False)
    _closed: bool = attrs.field(default=False, init=False)
    #: Calls waiting for the next batch, oldest first.
    _queue: list[_Call[Any]] = attrs.field(factory=list, init=False, repr=False)
    #: True while a batch is in the worker thread.
    _busy: bool = attrs.field(default=False, init=False, repr=False)
    #: Set when a batch ends; replaced for the next one.
    _batch_done: trio.Event = attrs.field(factory=trio.Event, init=False, repr=False)
    _batches: int = attrs.field(default=0, init=False, repr=False)
    _calls: int = attrs.field(default=0, init=False, repr=False)

    @classmethod
    async def open(cls, path: Path | str) -> TaskStore:
        """Open (creating if needed) the store file at `path`.

        Raises `StoreError` when the file is not an agentrt store or was written
        by a newer agentrt.
        """
        path = Path(path)
        db = await trio.to_thread.run_sync(_connect, path)
        return cls(path, db)

    async def load(self, session_id: str) -> TaskRecord | None:
        """The pending task of `session_id`, or None."""
        row = await self._run(
            lambda db: db.execute(f"{_SELECT} WHERE session_id = ?", (session_id,)).fetchone()
        )
        return None if row is None else self._decode(row)

    async def save(self, record: TaskRecord) -> TaskRecord:
        """Write `record` (clamped to the snapshot limits) and return what was written."""

        def write(db: sqlite3.Connection) -> TaskRecord:
            with _write_transaction(db):
                return _upsert(db, record)

        return await self._run(write)

    async def create(self, record: TaskRecord) -> tuple[Message, ...]:
        """Write the first record of a new task and return the session's history, at once.

        Raises `TaskExistsError` (writing nothing) if the session has a pending task.
        """

        def write(db: sqlite3.Connection) -> tuple[Message, ...]:
            with _write_transaction(db):
                exists = db.execute(
                    "SELECT 1 FROM tasks WHERE session_id = ?", (record.session_id,)
                ).fetchone()
                if exists:
                    raise TaskExistsError(
                        f"session {record.session_id} has a pending task; resume it or "
                        "discard it first"
                    )
                _upsert(db, record)
                return self._history(db, record.session_id)

        return await self._run(write)

    async def update(
        self, session_id: str, change: Callable[[TaskRecord], TaskRecord]
    ) -> tuple[TaskRecord, tuple[Message, ...]] | None:
        """Load a task, apply `change`, save the result, and return it with the history.

        One transaction holding the write lock from the start, so `change` sees
        the latest record and no other process can write in between: if
        `change` raises, nothing is written and the error propagates. `change`
        runs in a worker thread and must not touch Trio. Returns None when the
        session has no pending task.
        """

        def write(db: sqlite3.Connection) -> tuple[TaskRecord, tuple[Message, ...]] | None:
            with _write_transaction(db):
                row = db.execute(f"{_SELECT} WHERE session_id = ?", (session_id,)).fetchone()
                if row is None:
                    return None
                old = self._decode(row)
                record = change(old)
                if record.transcript is old.transcript:
                    _update_fields(db, record)  # the transcript is unchanged: skip re-encoding it
                else:
                    record = _upsert(db, record)
                return record, self._history(db, session_id)

        return await self._run(write)

    async def save_fields(self, record: TaskRecord) -> bool:
        """Write every field of `record` but its transcript; False if it has no row.

        For changes that add no message (a saved question, a status): the
        transcript, the largest part, is neither encoded nor written.
        """

        def write(db: sqlite3.Connection) -> bool:
            with _write_transaction(db):
                return _update_fields(db, record)

        return await self._run(write)

    async def mark(
        self,
        session_id: str,
        status: TaskStatus,
        *,
        cause: Cause | None = None,
        error: str | None = None,
        lost_words: int = 0,
    ) -> bool:
        """Set a task's status, cause, error and lost words in place; False if it has no record."""
        now = time.time()

        def write(db: sqlite3.Connection) -> bool:
            with _write_transaction(db):
                cur = db.execute(
                    "UPDATE tasks SET status = ?, cause = ?, error = ?, updated_at = ?, "
                    "lost_words = ? WHERE session_id = ?",
                    (
                        status.value,
                        cause.value if cause else None,
                        _dumps(error),
                        now,
                        lost_words,
                        session_id,
                    ),
                )
            return cur.rowcount > 0

        return await self._run(write)

    async def delete(
        self, session_id: str, check: Callable[[str, str | None], None] | None = None
    ) -> bool:
        """Delete the pending task of `session_id`; True if there was one.

        `check`, when given, is called with the stored status and runner
        inside the same write transaction, before the delete; if it raises,
        nothing is deleted. It sees only those two columns, so a record whose
        other fields cannot be read can still be checked and deleted.
        """

        def delete(db: sqlite3.Connection) -> bool:
            with _write_transaction(db):
                if check is not None:
                    row = db.execute(
                        "SELECT status, runner FROM tasks WHERE session_id = ?", (session_id,)
                    ).fetchone()
                    if row is None:
                        return False
                    check(str(row[0]), row[1] if isinstance(row[1], str) else None)
                cur = db.execute("DELETE FROM tasks WHERE session_id = ?", (session_id,))
            return cur.rowcount > 0

        return await self._run(delete)

    async def lookup(self, session_id: str) -> StoredTask | None:
        """Like `load`, but a record that cannot be read is returned as an `UnreadableTask`."""
        row = await self._run(
            lambda db: db.execute(f"{_SELECT} WHERE session_id = ?", (session_id,)).fetchone()
        )
        return None if row is None else self._decode_or_unreadable(row)

    async def list_stored(self, prefix: str = "") -> list[StoredTask]:
        """Like `list`, but a record that cannot be read is listed as an `UnreadableTask`.

        One damaged record never hides the others, and it can still be discarded.
        """
        return [self._decode_or_unreadable(row) for row in await self._rows(prefix)]

    async def _rows(self, prefix: str) -> list[tuple[Any, ...]]:
        escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        return await self._run(
            lambda db: db.execute(
                f"{_SELECT} WHERE session_id LIKE ? ESCAPE '\\' ORDER BY updated_at DESC",
                (escaped + "%",),
            ).fetchall()
        )

    async def list(self, prefix: str = "") -> list[TaskRecord]:
        """Pending tasks whose session id starts with `prefix`, most recently updated first.

        A record that cannot be read raises `StoreError` naming its session;
        listings shown to a person use `list_stored`, which lists it instead.
        """
        return [self._decode(row) for row in await self._rows(prefix)]

    async def load_history(self, session_id: str) -> tuple[Message, ...]:
        """The finished conversation of a session (what earlier runs said), oldest first."""
        return await self._run(lambda db: self._history(db, session_id))

    def _history(self, db: sqlite3.Connection, session_id: str) -> tuple[Message, ...]:
        row = db.execute(
            "SELECT transcript FROM history WHERE session_id = ?", (session_id,)
        ).fetchone()
        if row is None:
            return ()
        try:
            return tuple(converter.structure(json.loads(row[0]), list[Message]))
        except Exception as exc:  # any malformed shape, whichever error cattrs raises for it
            raise StoreError(
                f"the history of session {session_id!r} in {self.path} is unreadable: {exc}"
            ) from None

    async def owner(self, session_id: str) -> str | None:
        """The window that owns `session_id` (its pending task's, else its history's), or None."""

        def read(db: sqlite3.Connection) -> str | None:
            for table in ("tasks", "history"):
                row = db.execute(
                    f"SELECT window_hash FROM {table} WHERE session_id = ?", (session_id,)
                ).fetchone()
                if row is not None:
                    return row[0] if isinstance(row[0], str) else None
            return None

        return await self._run(read)

    async def finish(
        self, session_id: str, transcript: Sequence[Message], window_hash: str | None = None
    ) -> None:
        """Record a finished run: save the conversation and delete the pending task, atomically.

        `window_hash` is the window the session belongs to (None outside a terminal).
        """
        text = _dumps(converter.unstructure([clamp_message(m) for m in transcript], list[Message]))

        def write(db: sqlite3.Connection) -> None:
            with _write_transaction(db):
                db.execute(
                    "INSERT INTO history(session_id, updated_at, transcript, window_hash) "
                    "VALUES (?, strftime('%s','now'), ?, ?) ON CONFLICT(session_id) DO UPDATE SET "
                    "updated_at = excluded.updated_at, transcript = excluded.transcript, "
                    "window_hash = excluded.window_hash",
                    (session_id, text, window_hash),
                )
                db.execute("DELETE FROM tasks WHERE session_id = ?", (session_id,))

        await self._run(write)

    async def aclose(self) -> None:
        """Close the file once the calls already queued are done. Later calls raise `StoreError`."""
        if self._closed:
            return
        self._closed = True
        while self._busy or self._queue:
            await self._batch_done.wait()
        await trio.to_thread.run_sync(self._db.close)

    def statistics(self) -> StoreStatistics:
        """How many calls and batches the store has run (a batch is one thread hop, one commit)."""
        return StoreStatistics(self._calls, self._batches, len(self._queue))

    def _decode_or_unreadable(self, row: tuple[Any, ...]) -> StoredTask:
        try:
            return self._decode(row)
        except StoreError as exc:
            updated, window = (
                row[1 + _FIELDS.index("updated_at")],
                row[1 + _FIELDS.index("window_hash")],
            )
            return UnreadableTask(
                session_id=str(row[0]),
                error=str(exc),
                updated_at=float(updated) if isinstance(updated, int | float) else None,
                window_hash=window if isinstance(window, str) else None,
            )

    def _decode(self, row: tuple[Any, ...]) -> TaskRecord:
        session_id = row[0]
        try:
            (
                status,
                cause,
                error,
                question,
                window,
                task,
                runs,
                created,
                updated,
                text,
                runner,
                attempts,
                workdir,
                lost_words,
            ) = row[1:-1]
            saved = json.loads(question)
            return TaskRecord(
                session_id=session_id,
                input=json.loads(text),
                transcript=converter.structure(json.loads(row[-1]), tuple[Message, ...]),
                status=TaskStatus(status),
                cause=Cause(cause) if cause is not None else None,
                error=json.loads(error),
                question=converter.structure(saved, SavedQuestion) if saved else None,
                window_hash=window,
                task_hash=task,
                created_at=float(created),
                updated_at=float(updated),
                runs=int(runs),
                runner=runner,
                attempts={str(k): int(v) for k, v in json.loads(attempts).items()},
                workdir=workdir,
                lost_words=int(lost_words),
            )
        except Exception as exc:  # any malformed shape, whichever error cattrs raises for it
            detail = (
                "; ".join(cattrs.transform_error(exc))
                if isinstance(exc, cattrs.BaseValidationError)
                else str(exc)
            )
            raise StoreError(
                f"the pending task of session {session_id!r} in {self.path} is unreadable "
                f"({detail}); discard it with: agentrt pending discard {session_id}"
            ) from None

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run `fn` in the worker thread, batched with the calls queued meanwhile.

        The calls that arrive while a batch runs go together in the next one: one
        thread hop and one transaction (so one sync to disk) for the whole batch,
        each call in a savepoint of its own, so a call that fails changes nothing
        and the others still commit. Whoever finds no batch running takes the
        queue to the thread; the others wait for their call's result.
        """
        if self._closed:
            raise StoreError(f"the task store {self.path} is closed")
        call: _Call[T] = _Call(fn)
        self._queue.append(call)
        try:
            while not call.done:
                if self._busy:
                    await self._batch_done.wait()
                    continue
                await self._run_batch()
        except BaseException:
            if call in self._queue:
                self._queue.remove(call)  # cancelled before it ran: it never will
            raise
        return call.result()

    async def _run_batch(self) -> None:
        batch, self._queue = self._queue[:_BATCH_LIMIT], self._queue[_BATCH_LIMIT:]
        self._busy = True
        try:
            await trio.to_thread.run_sync(_run_calls, self._db, batch, self.path)
        finally:
            self._busy = False
            self._batches += 1
            self._calls += len(batch)
            done, self._batch_done = self._batch_done, trio.Event()
            done.set()


#: The most calls one batch takes, so that a long queue is served in turns.
_BATCH_LIMIT = 64


@attrs.frozen
class StoreStatistics:
    """Calls and batches run so far, and calls waiting now."""

    calls: int
    batches: int
    waiting: int


@attrs.define(eq=False)
class _Call(Generic[T]):
    """One store call waiting for, or done by, a batch."""

    fn: Callable[[sqlite3.Connection], T]
    done: bool = False
    _value: T | None = None
    _error: BaseException | None = None

    def finish(self, value: T | None = None, error: BaseException | None = None) -> None:
        self._value, self._error, self.done = value, error, True

    def result(self) -> T:
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]


def _run_calls(db: sqlite3.Connection, batch: list[_Call[Any]], path: Path) -> None:
    """Run a batch of calls in one transaction, each in its own savepoint (worker thread)."""

    def failed(exc: sqlite3.DatabaseError) -> StoreError:
        return StoreError(f"the task store {path} failed: {exc}")

    try:
        db.execute("BEGIN IMMEDIATE")
    except sqlite3.DatabaseError as exc:
        for call in batch:
            call.finish(error=failed(exc))
        return
    ran: list[tuple[_Call[Any], Any]] = []
    for call in batch:
        db.execute("SAVEPOINT batch_call")
        try:
            value = call.fn(db)
        except sqlite3.DatabaseError as exc:
            db.execute("ROLLBACK TO batch_call")
            call.finish(error=failed(exc))
        except Exception as exc:  # the call's own error (a bad answer, a task that exists)
            db.execute("ROLLBACK TO batch_call")
            call.finish(error=exc)
        else:
            ran.append((call, value))
        db.execute("RELEASE batch_call")
    try:
        db.execute("COMMIT")
    except sqlite3.DatabaseError as exc:
        if db.in_transaction:
            db.execute("ROLLBACK")
        for call, _ in ran:
            call.finish(error=failed(exc))
        return
    for call, value in ran:
        call.finish(value)


def _migrate(db: sqlite3.Connection, version: int) -> None:
    """Bring a store of schema `version` (0: a new file) to `SCHEMA_VERSION`."""
    if version == 0:
        # Statement by statement: executescript would commit the caller's transaction.
        for statement in _SCHEMA.split(";"):
            if statement.strip():
                db.execute(statement)
        return
    if version < 2:
        # Version 1 had no attempt records (every call counts as never started) and did
        # not record which window a finished session belonged to.
        db.execute("ALTER TABLE tasks ADD COLUMN attempts TEXT NOT NULL DEFAULT '{}'")
        db.execute("ALTER TABLE history ADD COLUMN window_hash TEXT")
        db.execute("ALTER TABLE tasks ADD COLUMN workdir TEXT")
        db.execute("ALTER TABLE tasks ADD COLUMN lost_words INTEGER NOT NULL DEFAULT 0")


#: The files SQLite keeps beside the store in WAL mode (and a rollback journal, if one is left).
_SIDE_FILES = ("-wal", "-shm", "-journal")


def marker_path(path: Path) -> Path:
    """The file written beside the store when the store is first created.

    While it exists, a store file that is missing or empty means the store was
    lost (truncated or deleted), not that this is a first start.
    """
    return path.with_name(path.name + ".created")


def _store_lost(path: Path, marker: Path, what: str) -> StoreError:
    return StoreError(
        f"the task store {path} {what}, but {marker} says a store was created here before: "
        "its pending tasks and history are lost (the file was truncated or deleted). Restore "
        f"{path.name} from a backup; or, to start over with an empty store, delete {marker}"
    )


def _make_private(path: Path) -> None:
    """Create the store file mode 0600 (or tighten it) before SQLite opens it.

    SQLite creates the ``-wal`` and ``-shm`` files with the mode of the store
    file, so they are 0600 from birth too; side files left by a crash are
    tightened here as well.
    """
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.fchmod(fd, 0o600)
    finally:
        os.close(fd)
    for suffix in _SIDE_FILES:
        with contextlib.suppress(FileNotFoundError):
            os.chmod(path.with_name(path.name + suffix), 0o600, follow_symlinks=False)


def _write_marker(marker: Path) -> None:
    try:
        fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        return
    try:
        os.write(
            fd,
            (
                f"agentrt created its task store here at {time.strftime('%Y-%m-%d %H:%M:%S')}.\n"
                "While this file exists, a missing or empty task store is reported as lost\n"
                "instead of being silently replaced by an empty one.\n"
            ).encode("ascii"),
        )
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_dir(marker.parent)


def _connect(path: Path) -> sqlite3.Connection:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    marker = marker_path(path)
    # Looked at before the store: a process that creates the store writes the marker
    # only after its schema is committed, so seeing the marker means the schema exists.
    used_before = marker.exists()
    if used_before and not path.exists():
        raise _store_lost(path, marker, "is missing")
    try:
        _make_private(path)
    except OSError as exc:
        raise StoreError(
            f"cannot open the task store {path}: {exc.strerror or exc}; check that it is a "
            "file of yours, or use another --state-dir"
        ) from None
    try:
        db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open the task store {path}: {exc}") from None
    try:
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"the task store {path} has schema version {version}, newer than this agentrt "
                f"understands ({SCHEMA_VERSION}); upgrade agentrt or use another --state-dir"
            )
        if version == 0 and used_before:
            raise _store_lost(path, marker, "is empty")
        db.execute("PRAGMA journal_mode=WAL")
        # FULL: a commit is on disk (the WAL fsynced) before it returns, so what the
        # store says it kept survives a power cut too, not only a killed process.
        db.execute("PRAGMA synchronous=FULL")
        db.execute("PRAGMA busy_timeout=5000")
        if version < SCHEMA_VERSION:
            with _write_transaction(db):
                _migrate(db, version)
                db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        db.execute("SELECT count(*) FROM tasks").fetchone()
    except sqlite3.DatabaseError as exc:
        db.close()
        raise StoreError(
            f"{path} is not a usable agentrt task store ({exc}); move it aside or use "
            "another --state-dir"
        ) from None
    except StoreError:
        db.close()
        raise
    try:
        _write_marker(marker)
    except OSError as exc:
        db.close()
        raise StoreError(f"cannot write {marker}: {exc.strerror or exc}") from None
    return db

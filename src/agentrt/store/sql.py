"""The logic and the SQL both backends share: `SqlStore`, the base of `TaskStore` and `PgStore`.

Messages are append-only rows (session, seq, JSON), so committing a message is
one INSERT whatever the length of the conversation, and clamping touches only
the new row. A session's pending task is a row of fields plus a range of its
messages (`first_seq`, `message_count`); the messages before the range are the
session's finished history. Listings read summary columns and never decode a
transcript.

Every change is one transaction, so a process killed at any moment leaves
either the old state or the new one. A change that reads before it writes
(create, resume, discard) holds the store's write lock from its first
statement (`BEGIN IMMEDIATE`), so what it read cannot change under it, even
from another process. Every call runs in the store's writer thread
(`agentrt.store.writer`), batched with what is queued with it.

What the store wrote last is kept in memory, checked against a revision
number in the database (messages) or the columns it wrote (a task's record,
`_Written`): a resume, a commit or a new run in the same process does not
read back and decode what it has just written.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import json
import sqlite3
import time
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from typing import ClassVar
from typing import Final
from typing import Generic
from typing import TypeVar

import attrs
import trio

from ..core.cause import Cause
from ..core.process import process_token
from ..models.messages import Message
from ..models.messages import Role
from ..models.messages import StoredMessages
from ..present.listing import TIME_MARK
from ..present.listing import BriefTask
from ..present.listing import lines as listing_lines
from ..present.listing import templates
from ..vocab.reprs import mutable
from ..vocab.reprs import record
from ..vocab.terms import TaskStatus
from ..vocab.usage import RunTokens
from ..vocab.usage import TokenCount
from .columns import FIELDS
from .columns import Written
from .columns import decode_message
from .columns import dumps
from .columns import encode_message
from .columns import error_detail
from .columns import fields_of
from .columns import journal_fields
from .columns import json_text
from .columns import message_of
from .columns import message_values
from .columns import prompt_of
from .columns import task_fields
from .columns import title_of
from .errors import BadCursorError
from .errors import NoUserMessageError
from .errors import StoreError
from .errors import TaskExistsError
from .errors import TaskTakenError
from .record import TaskRecord
from .record import TaskSummary
from .record import clamp_message
from .record import runner_gone
from .types import ListedTask
from .types import Page
from .types import SessionInfo
from .types import StoredMessage
from .types import StoredTask
from .types import StoreStatistics
from .types import UnreadableTask
from .types import brief_of
from .writer import Call
from .writer import Writer
from .writer import run_batch

T = TypeVar("T")


#: The tokens of each run of a session with each model (the same text in SQLite and
#: PostgreSQL): one row a run and model, added to after each response.
TOKEN_USAGE = """CREATE TABLE IF NOT EXISTS token_usage (
    session_id TEXT NOT NULL,
    task_hash TEXT NOT NULL,
    model TEXT NOT NULL,
    rounds INTEGER NOT NULL DEFAULT 0,
    input_tokens BIGINT NOT NULL DEFAULT 0,
    output_tokens BIGINT NOT NULL DEFAULT 0,
    cached_tokens BIGINT NOT NULL DEFAULT 0,
    reasoning_tokens BIGINT NOT NULL DEFAULT 0,
    updated_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (session_id, task_hash, model)
)"""


@contextlib.contextmanager
def write_transaction(db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One transaction holding SQLite's write lock from its first statement.

    `BEGIN IMMEDIATE` takes the lock before anything is read, so a
    read-check-write cannot interleave with another writer (another process
    on the same file included): the second one waits (``busy_timeout``) and
    then reads what the first one wrote.
    """
    if db.in_transaction:
        # Inside a batch (see `Writer`): the batch holds the write lock already, and
        # this call's changes stand or fall on their own: an error leaves the call, and
        # the batch rolls back the call's savepoint (or, the call alone, the transaction).
        yield db
        return
    db.execute("BEGIN IMMEDIATE")
    try:
        yield db
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


@mutable(eq=False)
class _Memory:
    """The messages of recently used sessions as last written or read, by revision.

    A session's ``rev`` in the file changes with every change to its messages;
    an entry is used only while its revision is the file's, so a change made
    by another process is never missed. At most `limit` messages are kept (the
    sessions used longest ago go first; the one just used always stays): every
    object kept alive is one more for the garbage collector to walk. Used by
    whichever thread runs the batch (the writer's, or the Trio thread for a
    batch run there: `Writer.run_here`), one at a time; `holds` by any.

    The limit leaves room for a session of tens of thousands of messages beside
    the others in use: at 10,000, a session of that size was dropped as soon as
    any other was used, and its next run decoded every message again.
    """

    limit: int = 50_000
    _sessions: collections.OrderedDict[str, tuple[int, Sequence[Message]]] = attrs.field(
        factory=collections.OrderedDict
    )
    _size: int = 0

    def get(self, session_id: str, rev: int) -> Sequence[Message] | None:
        entry = self._sessions.get(session_id)
        if entry is None or entry[0] != rev:
            return None
        self._sessions.move_to_end(session_id)
        return entry[1]

    def put(self, session_id: str, rev: int, messages: Sequence[Message]) -> None:
        self.drop(session_id)
        self._sessions[session_id] = (rev, messages)
        self._size += len(messages)
        while self._size > self.limit and len(self._sessions) > 1:
            _, (_, gone) = self._sessions.popitem(last=False)
            self._size -= len(gone)

    def holds(self, session_id: str) -> bool:
        """Whether messages of `session_id` are kept (perhaps of an older revision).

        The one method another thread may call: a guess at whether reading the
        session will decode its messages, not a promise.
        """
        return session_id in self._sessions

    def drop(self, session_id: str) -> None:
        entry = self._sessions.pop(session_id, None)
        if entry is not None:
            self._size -= len(entry[1])

    def clear(self) -> None:
        self._sessions.clear()
        self._size = 0


@mutable(eq=False)
class _Written:
    """The records the store wrote last, by session, each with the field columns it wrote.

    A task's row read back with exactly those columns holds that record: it is
    used as it is (see `SqlStore._decoded`) rather than decoded again, so a
    resume does not decode what the stop before it has just written. A row
    changed since (by any process) holds other columns and is decoded. At most
    `limit` records are kept, the ones written longest ago going first, and only
    those whose text columns hold at most `largest` characters in all (a task
    keeps up to 8 MiB of arguments): what is kept stays under 16 Mi characters of
    columns, and the records made of them. Used by the writer thread only.
    """

    limit: int = 256
    largest: int = 64 * 1024
    _records: dict[str, Written] = attrs.field(factory=dict)

    def put(self, record: TaskRecord, columns: tuple[Any, ...]) -> None:
        session_id = record.session_id
        self._records.pop(session_id, None)
        fields = columns[: len(FIELDS)]
        if sum(len(c) for c in fields if isinstance(c, str)) > self.largest:
            return  # read back, it is decoded
        self._records[session_id] = (fields, record)
        if len(self._records) > self.limit:
            del self._records[next(iter(self._records))]

    def get(self, session_id: str, fields: tuple[Any, ...]) -> TaskRecord | None:
        """The record written with the field columns `fields` (the row's, as read), or None."""
        entry = self._records.get(session_id)
        return entry[1] if entry is not None and entry[0] == fields else None

    def last(self, session_id: str) -> Written | None:
        """The field columns last written of the task of `session_id`, and its record, if kept
        (for `fields_of`, which takes from them what it would encode again)."""
        return self._records.get(session_id)


@record
class _TaskRow:
    """A `tasks` row: its raw field columns and its range of messages."""

    fields: tuple[Any, ...]
    first_seq: int
    message_count: int


@record
class _SessionRow:
    rev: int
    next_seq: int


_TASK_SELECT = (
    f"SELECT session_id, {', '.join(FIELDS)}, first_seq, message_count FROM tasks "
    "WHERE session_id = ?"
)
#: A task's row and its session's revision, length and chosen model, in one statement
#: (`_task_and_session`).
_TASK_AND_SESSION_SELECT = (
    f"SELECT t.session_id, {', '.join(f't.{c}' for c in FIELDS)}, t.first_seq, "
    "t.message_count, s.rev, s.next_seq, s.model FROM tasks t LEFT JOIN sessions s "
    "ON s.session_id = t.session_id WHERE t.session_id = ?"
)
#: What `_TASK_AND_SESSION_SELECT` reads that an UPDATE of the task's fields does not write,
#: in its order, as that UPDATE returns it (see `SqlStore._READ_AHEAD`): the session's
#: columns as the LEFT JOIN gives them (None without a session row).
_TASK_AND_SESSION_RETURNING = " RETURNING first_seq, message_count, " + ", ".join(
    f"(SELECT s.{c} FROM sessions s WHERE s.session_id = tasks.session_id)"
    for c in ("rev", "next_seq", "model")
)
_MODEL_SELECT = "SELECT model FROM sessions WHERE session_id = ?"
_SUMMARY_COLUMNS = tuple(c for c in FIELDS if c not in ("attempts", "journal"))
_SUMMARY_SELECT = f"SELECT session_id, {', '.join(_SUMMARY_COLUMNS)}, message_count FROM tasks"


def _quoted(values: Iterable[TaskStatus | Cause]) -> str:
    return ", ".join(f"'{v.value}'" for v in values)


#: True for a `tasks` row that `_summary` reads without fail but for its input, error and
#: question, which `list_brief` reads itself.
PLAIN = (
    f"status IN ({_quoted(TaskStatus)}) AND (cause IS NULL OR cause IN ({_quoted(Cause)})) "
    "AND error IS NOT NULL AND question IS NOT NULL"
)


def brief_select(plain: str) -> str:
    """The query of `SqlStore.list_brief`: the input of a row `plain` holds for, else NULL.

    Few columns, the last three null but in the odd row (a question, an error, a
    task running): each column costs the driver calls of its own, for every row.
    The input is left as stored (JSON) for `json_text`.
    """
    return (
        f"SELECT session_id, status, cause, updated_at, CASE WHEN {plain} THEN input END, "
        "NULLIF(question, 'null'), NULLIF(error, 'null'), "
        "CASE WHEN status = 'running' THEN runner END FROM tasks"
    )


#: How many sessions one query of `SqlStore.list_brief` reads in full at most.
_BRIEF_CHUNK = 500
#: The place of a task `SqlStore.list_brief` reads in full, until it is read.
_NO_TASK: BriefTask = ("", "", False, None, 0.0, None, "")
#: A session's row and, when it has one, its pending task's summary columns.
_SESSION_SELECT = (
    "SELECT s.session_id, s.title, s.created_at, s.updated_at, s.next_seq, "
    "COALESCE(t.window_hash, s.window_hash), t.status, s.model, t.session_id, "
    f"{', '.join('t.' + c for c in _SUMMARY_COLUMNS)}, t.message_count "
    "FROM sessions s LEFT JOIN tasks t ON t.session_id = s.session_id"
)


#: A session listed: one with a message, or a pending task. A session whose model was chosen
#: before its first message has a row of its own (`SqlStore.set_session_model`), not listed.
_HAS_MESSAGES = "s.next_seq > 0 OR t.session_id IS NOT NULL"


def seconds_of(value: object) -> float | None:
    """A row's time as a number; None when it holds something else.

    SQLite keeps any type in any column: a damaged file's row may hold text or bytes
    where a time goes. Such a row is still listed (an unreadable task with no time, a
    session as of 0, 1970), so that it can be read and removed like any other.
    """
    return float(value) if isinstance(value, int | float) else None


def _like(prefix: str) -> str:
    escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped + "%"


def page_rows(
    db: sqlite3.Connection,
    select: str,
    table: str,
    prefix: str,
    after: tuple[Stamp, str] | None,
    limit: int | None,
    *,
    where: str = "",
) -> tuple[list[Any], Any]:
    """A page of `select`'s rows by session id prefix, most recent first, after a cursor.

    `table` is the alias prefix of the paged table's columns (``"s."`` or
    ``""``). Returns the page's rows and its last row when more follow (the
    next page's cursor comes from it), else None.
    """
    rows = db.execute(*page_query(select, table, prefix, after, limit, where=where)).fetchall()
    if limit is None or len(rows) <= limit:
        return rows, None
    rows = rows[:limit]
    return rows, rows[-1] if rows else None


def page_query(
    select: str,
    table: str,
    prefix: str,
    after: tuple[Stamp, str] | None,
    limit: int | None,
    *,
    where: str = "",
) -> tuple[str, list[Any]]:
    """The query of `page_rows` (one row more than `limit`) and its parameters.

    `where`, when given, is one more condition every row must meet. With no
    `prefix`, no pattern is matched: ``LIKE '%'`` holds for any session id but
    NULL, at the cost of a match per row.
    """
    args: list[Any] = []
    if prefix:
        sql = f"{select} WHERE {table}session_id LIKE ? ESCAPE '\\'"
        args.append(_like(prefix))
    else:
        sql = f"{select} WHERE {table}session_id IS NOT NULL"
    if where:
        sql += f" AND ({where})"
    if after is not None:
        # The bound on updated_at alone lets the index seek to the cursor (a page
        # deep in a long listing costs what the first does); the rest breaks ties.
        sql += f" AND {table}updated_at <= ? AND ({table}updated_at < ? OR {table}session_id > ?)"
        args += [after[0], after[0], after[1]]
    sql += f" ORDER BY {table}updated_at DESC, {table}session_id"
    if limit is not None:
        sql += " LIMIT ?"
        args.append(limit + 1)
    return sql, args


def upsert_sql(line: bool) -> str:
    """The statement `SqlStore._save` writes a task's row with (its line too, with `line`)."""
    columns = (*FIELDS, *(("line",) if line else ()), "first_seq", "message_count")
    return (
        f"INSERT INTO tasks(session_id, {', '.join(columns)}) "
        f"VALUES ({', '.join('?' * (len(columns) + 1))}) ON CONFLICT(session_id) DO UPDATE SET "
        + ", ".join(f"{c} = excluded.{c}" for c in columns)
    )


def update_sql(line: bool) -> str:
    """The statement `SqlStore._update_fields` rewrites a task's fields with."""
    columns = (*FIELDS, *(("line",) if line else ()))
    return f"UPDATE tasks SET {', '.join(f'{c} = ?' for c in columns)} WHERE session_id = ?"


def mark_sql(line: bool) -> str:
    """The statement of `SqlStore.mark`; with `line`, the line's head is replaced, its rest kept.

    A row without a line (or whose line has no time mark) is left without one.
    """
    sql = "UPDATE tasks SET status = ?, cause = ?, error = ?, updated_at = ?, lost_words = ?"
    if line:
        mark = f"instr(line, char({ord(TIME_MARK)}))"
        sql += f", line = CASE WHEN {mark} > 0 THEN ? || substr(line, {mark}) END"
    return sql + " WHERE session_id = ?"


#: A row's ``updated_at`` as the database holds it: a number, unless a damaged SQLite row
#: holds text or bytes there (SQLite keeps any type in any column).
Stamp = float | str | bytes
#: How a cursor marks a row's time that is not a number: text, or bytes (in hex after it).
_TEXT_STAMP: Final = "t"
_BYTES_STAMP: Final = "b"


def cursor_of(updated_at: Stamp, session_id: str) -> str:
    """The cursor of the page that follows the row (`updated_at`, `session_id`).

    A time that is not a number goes as its bytes in hex, marked, so that the
    next page goes on from that row in the database's own order (SQLite sorts
    text after every number, and bytes after every text).
    """
    if isinstance(updated_at, str):
        stamp = _TEXT_STAMP + updated_at.encode("utf-8", "surrogatepass").hex()
    elif isinstance(updated_at, bytes):
        stamp = _BYTES_STAMP + updated_at.hex()
    else:
        stamp = repr(float(updated_at))
    return f"{stamp}:{session_id}"


def parse_cursor(cursor: str, *, numbers_only: bool = False) -> tuple[Stamp, str]:
    """What `cursor_of` made the cursor of; `BadCursorError` for anything else.

    With `numbers_only` (a database whose times are numbers only), a time that is not
    a number is refused too.
    """
    stamp, sep, session_id = cursor.partition(":")
    try:
        if not sep:
            raise ValueError(cursor)
        value: Stamp
        if stamp.startswith(_TEXT_STAMP):
            value = bytes.fromhex(stamp[1:]).decode("utf-8", "surrogatepass")
        elif stamp.startswith(_BYTES_STAMP):
            value = bytes.fromhex(stamp[1:])
        else:
            value = float(stamp)
        if numbers_only and not isinstance(value, float):
            raise ValueError(cursor)
        return value, session_id
    except ValueError:
        raise BadCursorError(
            f"not a listing cursor: {cursor!r}; pass the `next` of a page"
        ) from None


@mutable(eq=False)
class SqlStore:
    """Sessions' messages and pending tasks in an SQL database; see `TaskStore` and `PgStore`.

    The logic of both backends: they share the SQL, each connection speaking
    the subset of `sqlite3.Connection` used here (``execute`` with ``?``
    parameters, ``executemany``, ``in_transaction``, ``BEGIN IMMEDIATE`` for a
    transaction holding the store's write lock).
    """

    #: The query of `list_brief`, for a database that keeps each column to its type.
    _BRIEF_SELECT: ClassVar[str] = brief_select(PLAIN)
    #: The statements that write a task's row (see `_columns`, `_marked_line`).
    _UPSERT: ClassVar[str] = upsert_sql(line=False)
    _UPDATE: ClassVar[str] = update_sql(line=False)
    _MARK: ClassVar[str] = mark_sql(line=False)
    #: What `_check_held` reads of a task: its runner first (see `_check_held_row`).
    _HELD_SELECT: ClassVar[str] = "SELECT runner FROM tasks WHERE session_id = ?"
    #: A query of the message bodies of a session that are not plainly JSON objects, run by
    #: the database in its own code: (seq, whether it is one JSON text) of each body that is
    #: not one, does not begin with ``{`` or holds a ``\\u`` escape. None where it has none
    #: (each body is then parsed here, as the history is read).
    _ODD_BODIES: ClassVar[str | None] = None
    #: `_check_held` as a condition of an UPDATE of the task (see `_update_held`).
    _HELD_WHERE: ClassVar[str] = " AND (runner IS NULL OR runner = ?)"
    #: Whether a stop's UPDATE of a task returns what `_task_and_session` reads of it besides
    #: the fields written, kept for that read later in the same transaction (`_read_ahead`):
    #: where a read is a round trip (PostgreSQL), not where it is a function call (SQLite).
    _READ_AHEAD: ClassVar[bool] = False
    #: Whether every row's ``updated_at`` is a number (a typed column): no cursor then
    #: carries text or bytes (`cursor_of`).
    _NUMBER_TIMES: ClassVar[bool] = False

    _db: sqlite3.Connection = attrs.field(repr=False)
    #: The token this process's runs are recorded with (`TaskRecord.runner`).
    runner: str = attrs.field(factory=process_token, kw_only=True)
    _closed: bool = attrs.field(default=False, init=False)
    _memory: _Memory = attrs.field(factory=_Memory, init=False, repr=False)
    _written: _Written = attrs.field(factory=_Written, init=False, repr=False)
    _writer: Writer = attrs.field(init=False, repr=False)
    #: Calls queued with `defer`, not yet handed to the writer thread (see `_submit`).
    _deferred: collections.deque[Call[Any]] = attrs.field(
        factory=collections.deque, init=False, repr=False
    )

    def __attrs_post_init__(self) -> None:
        self._writer = Writer(self._db, self.location, self._run_batch)

    @property
    def location(self) -> str:
        """Where the store lives, as its messages name it."""
        raise NotImplementedError

    @property
    def private_paths(self) -> tuple[Path, ...]:
        """What no tool process may reach (see `Store.private_paths`)."""
        raise NotImplementedError

    def _run_batch(self, db: sqlite3.Connection, batch: list[Call[Any]]) -> bool:
        """Run a batch of calls in one transaction (writer thread); see `run_batch`.

        Returns whether the transaction committed.
        """
        return run_batch(db, batch, self.location, self._memory.clear)

    def _columns(self, record: TaskRecord) -> tuple[Any, ...]:
        """The values `_UPSERT` and `_UPDATE` write of `record` (not its session's range).

        The JSON text of the values it shares with the record last written of its task
        is that write's (see `fields_of`).
        """
        return fields_of(record, self._written.last(record.session_id))

    def _marked_line(
        self, session_id: str, status: TaskStatus, cause: Cause | None
    ) -> tuple[Any, ...]:
        """The values `_MARK` takes for the line of a task marked `status` (none here)."""
        return ()

    # -- pending tasks --------------------------------------------------------

    async def load(self, session_id: str) -> TaskRecord | None:
        """The pending task of `session_id`, or None."""
        return await self._run(lambda db: self._load(db, session_id)[0])

    async def lookup(self, session_id: str) -> StoredTask | None:
        """Like `load`, but a record that cannot be read is returned as an `UnreadableTask`."""

        def read(db: sqlite3.Connection) -> StoredTask | None:
            try:
                return self._load(db, session_id)[0]
            except StoreError as exc:
                return self._unreadable(db, session_id, exc)

        return await self._run(read)

    async def save(self, record: TaskRecord) -> TaskRecord:
        """Write `record` (new messages clamped to the snapshot limits); return what was written.

        A transcript that extends the one stored (the usual commit: one message
        more) writes only the new messages; any other is written whole.
        """

        def write(db: sqlite3.Connection) -> TaskRecord:
            with self._write(db):
                self._check_record_held(db, record)
                return self._save(db, record)

        return await self._run(write)

    async def create(self, record: TaskRecord) -> Sequence[Message]:
        """Write the first record of a new task and return the session's history, at once.

        Raises `TaskExistsError` (writing nothing) if the session has a pending task.
        """

        def write(db: sqlite3.Connection) -> Sequence[Message]:
            with self._write(db):
                if self._task_row(db, record.session_id) is not None:
                    raise TaskExistsError(
                        f"session {record.session_id} has a pending task; resume it or "
                        "discard it first"
                    )
                session = self._session_row(db, record.session_id)
                history = self._messages(db, record.session_id, session, history=True)
                self._save(db, record, claim=True)
                return history

        return await self._run(write)

    async def replace_last_turn(
        self, session_id: str, make: Callable[[str], TaskRecord]
    ) -> tuple[TaskRecord, Sequence[Message]]:
        """Replace the session's last user message, and every message after it, by a new task.

        One transaction: the messages from the last one of the user's on are
        deleted, and the task `make` builds from that message's text is
        written in their place (its record and the session's history before
        it are returned); nothing else of the session changes. Raises
        `TaskExistsError` while the session has a pending task (running ones
        included) and `NoUserMessageError` when it has no message of the
        user's, writing nothing. `make` runs in the store's thread.
        """

        def write(db: sqlite3.Connection) -> tuple[TaskRecord, Sequence[Message]]:
            with self._write(db):
                if self._task_row(db, session_id) is not None:
                    raise TaskExistsError(
                        f"session {session_id} has a pending task; resume it or discard it first"
                    )
                row = db.execute(
                    "SELECT seq, body FROM messages WHERE session_id = ? AND role = ? "
                    "ORDER BY seq DESC LIMIT 1",
                    (session_id, Role.USER.value),
                ).fetchone()
                if row is None:
                    raise NoUserMessageError(f"session {session_id} has no message to replace")
                try:
                    last = decode_message(row[1])
                except Exception as exc:  # any malformed shape, whichever error it raises
                    raise StoreError(
                        f"message {row[0]} of session {session_id!r} in {self.location} is "
                        f"unreadable: {error_detail(exc)}"
                    ) from None
                record = make(last.content)
                self._truncate(db, session_id, int(row[0]))
                history = self._messages(
                    db, session_id, self._session_row(db, session_id), history=True
                )
                self._save(db, record, claim=True)
                return record, history

        return await self._run(write)

    async def update(
        self,
        session_id: str,
        change: Callable[[TaskRecord], TaskRecord],
        *,
        synced: bool = True,
        model: Callable[[str | None], object] | None = None,
    ) -> tuple[TaskRecord, Sequence[Message]] | None:
        """Load a task, apply `change`, save the result, and return it with the history.

        One transaction holding the write lock from the start, so `change` sees
        the latest record and no other process can write in between: if
        `change` raises, nothing is written and the error propagates. `change`
        runs in the store's thread and must not touch Trio. Returns None when
        the session has no pending task.

        `model`, when given, is called first, in the same transaction and thread,
        with the model chosen for the session (`session_model`), task or not; it
        may raise to write nothing. A resume checks the model it will run with
        and claims its task in one call: the choice is read with the task's row
        (one statement), and no other transaction can change it in between.

        With `synced` False (a resume's claim) the transaction commits without
        waiting for the disk: SQLite runs it with ``synchronous=NORMAL`` (in WAL
        mode, a commit with no fsync), PostgreSQL with ``synchronous_commit``
        off. It is visible at once, and durable with the first synced commit
        after it, of this process or another: the WAL is written in order, so
        syncing a later commit syncs this one too. Lost before that (a power
        cut; a PostgreSQL server crash) the task is as it was before the call.
        Batched with a synced call, it shares its transaction: on SQLite it is told
        once that commits, before the WAL is synced for the other call
        (`TaskStore._run_batch`); on PostgreSQL the transaction is synced.
        """

        def write(db: sqlite3.Connection) -> tuple[TaskRecord, Sequence[Message]] | None:
            with self._write(db):
                old, history = self._load(db, session_id, model)
                if old is None:
                    return None
                record = change(old)
                if record.transcript is old.transcript:
                    # No message added: the fields alone.
                    self._update_fields(db, record, claim=True)
                else:
                    record = self._save(db, record, claim=True)
                return record, history

        # Small enough for the event loop's thread when the history need not be decoded.
        here = self._memory.holds(session_id)
        return await self._wait(self._submit(write, synced=synced, here=here))

    async def save_fields(self, record: TaskRecord) -> bool:
        """Write every field of `record` but its transcript; False if it has no row.

        For changes that add no message (a saved question, a status).
        """
        return await self.save_fields_nowait(record, defer=False).wait()

    def save_fields_nowait(self, record: TaskRecord, *, defer: bool = True) -> Submitted[bool]:
        """Queue `save_fields` and return at once; await `Submitted.wait` for its outcome.

        Deferred (the default), it goes to the disk with the next call that is
        waited for, in the same transaction (see `_submit`).
        """

        def write(db: sqlite3.Connection) -> bool:
            columns = self._columns(record)
            with self._write(db):
                written = self._update_held(
                    db, self._UPDATE, columns, record.session_id, self._held_by(record)
                )
            if written:
                self._written.put(record, columns)
            return written

        return Submitted(self, self._submit(write, defer=defer, here=True))

    def mark_nowait(
        self,
        session_id: str,
        status: TaskStatus,
        *,
        cause: Cause | None = None,
        error: str | None = None,
        lost_words: int = 0,
        runner: str | None = None,
    ) -> Submitted[bool]:
        """Queue `mark` and return at once; await `Submitted.wait` for its outcome.

        Store calls run in the order they are queued, so a call queued after
        this one sees its change.
        """
        now = time.time()

        def write(db: sqlite3.Connection) -> bool:
            with self._write(db):
                values = (
                    status.value,
                    cause.value if cause else None,
                    dumps(error),
                    now,
                    lost_words,
                    *self._marked_line(session_id, status, cause),
                )
                return self._update_held(db, self._MARK, values, session_id, runner)

        return Submitted(self, self._submit(write, defer=True, here=True))

    def stop_nowait(
        self,
        stopped: Callable[[], TaskRecord],
        status: TaskStatus,
        *,
        cause: Cause,
        lost_words: int = 0,
        runner: str | None = None,
    ) -> Submitted[bool]:
        """Queue a stop's write: `stopped()`'s fields, then its status (see `Store.stop_nowait`).

        Deferred as `mark_nowait` is. The record is made here, in the writer's
        thread: a stop's ledger entry costs the run nothing before its final
        event, and a call queued after this one still sees it.
        """
        now = time.time()

        def write(db: sqlite3.Connection) -> bool:
            record = stopped()
            held = self._held_by(record)
            # The fields and the status in one UPDATE, conditioned on the runner (one
            # statement, a round trip on PostgreSQL, where four were: two checks, two writes).
            record = record.evolve(
                status=status, cause=cause, error=None, updated_at=now, lost_words=lost_words
            )
            columns = self._columns(record)
            with self._write(db):
                if held is not None and runner is not None and held != runner:
                    self._check_held(db, record.session_id, held)
                # A resume that comes right after the stop reads the task in the same
                # transaction (batched with it): what the UPDATE wrote and returns is that read.
                written = self._update_held(
                    db,
                    self._UPDATE,
                    columns,
                    record.session_id,
                    runner if runner is not None else held,
                    read_ahead=True,
                )
            if written:
                self._written.put(record, columns)
            return written

        return Submitted(self, self._submit(write, defer=True, here=True))

    async def mark(
        self,
        session_id: str,
        status: TaskStatus,
        *,
        cause: Cause | None = None,
        error: str | None = None,
        lost_words: int = 0,
        runner: str | None = None,
    ) -> bool:
        """Set a task's status, cause, error and lost words in place; False if it has no record.

        With `runner` (the run's own token), a task another runner holds now is
        left alone and `TaskTakenError` is raised.
        """
        return await self.mark_nowait(
            session_id, status, cause=cause, error=error, lost_words=lost_words, runner=runner
        ).wait()

    async def delete(
        self, session_id: str, check: Callable[[str, str | None], None] | None = None
    ) -> bool:
        """Delete the pending task of `session_id` and its messages; True if there was one.

        `check`, when given, is called with the stored status and runner
        inside the same write transaction, before the delete; if it raises,
        nothing is deleted. It sees only those two columns, so a record whose
        other fields cannot be read can still be checked and deleted. The
        session's history (its finished runs) stays.
        """

        def delete(db: sqlite3.Connection) -> bool:
            with self._write(db):
                row = db.execute(
                    "SELECT status, runner, first_seq FROM tasks WHERE session_id = ?",
                    (session_id,),
                ).fetchone()
                if row is None:
                    return False
                if check is not None:
                    check(str(row[0]), row[1] if isinstance(row[1], str) else None)
                db.execute("DELETE FROM tasks WHERE session_id = ?", (session_id,))
                self._truncate(db, session_id, int(row[2]))
            return True

        return await self._run(delete)

    async def finish(
        self,
        session_id: str,
        transcript: Sequence[Message] = (),
        window_hash: str | None = None,
        *,
        runner: str | None = None,
        check: Callable[[str, str | None], None] | None = None,
    ) -> None:
        """Record a finished run: its messages become history and the pending task goes.

        `transcript` is the whole conversation (history first); messages past
        those stored are added (a run's own were stored as it went). `window_hash`
        is the window the session belongs to (None outside a terminal). With
        `runner` (the run's own token), a task another runner holds now is left
        alone and `TaskTakenError` is raised. `check`, as `delete`'s, may refuse
        in the same transaction (a task thrown away keeps its conversation too).
        """

        def write(db: sqlite3.Connection) -> None:
            with self._write(db):
                if runner is not None:
                    self._check_held(db, session_id, runner)
                if check is not None:
                    row = db.execute(
                        "SELECT status, runner FROM tasks WHERE session_id = ?", (session_id,)
                    ).fetchone()
                    if row is not None:
                        check(str(row[0]), row[1] if isinstance(row[1], str) else None)
                session = self._session_row(db, session_id)
                stored = 0 if session is None else session.next_seq
                if len(transcript) > stored:
                    self._append(db, session_id, session, tuple(transcript[stored:]))
                db.execute("DELETE FROM tasks WHERE session_id = ?", (session_id,))
                db.execute(
                    "UPDATE sessions SET updated_at = ?, window_hash = ? WHERE session_id = ?",
                    (time.time(), window_hash, session_id),
                )

        await self._run(write)

    async def list_stored(self, prefix: str = "") -> list[ListedTask]:
        """Pending tasks whose session id starts with `prefix`, most recently updated first.

        Summaries (no transcript): listing never decodes a transcript. A
        record whose fields cannot be read is listed as an `UnreadableTask`,
        so one damaged record never hides the others and can be discarded.
        """
        page = await self.list_page(prefix)
        return list(page.items)

    async def list_page(
        self, prefix: str = "", *, limit: int | None = None, cursor: str | None = None
    ) -> Page[ListedTask]:
        """One page of `list_stored`: at most `limit` tasks after `cursor` (a page's `next`)."""
        after = self._after(cursor)

        def read(db: sqlite3.Connection) -> Page[ListedTask]:
            rows, last = page_rows(db, _SUMMARY_SELECT, "", prefix, after, limit)
            nxt = None if last is None else cursor_of(last[9], str(last[0]))
            return Page(tuple(self._summary(row) for row in rows), nxt)

        return await self._run(read)

    async def list_brief(self, prefix: str = "") -> list[BriefTask]:
        """What a text listing shows of `list_stored`'s tasks: `brief_of` each, read faster.

        A row whose columns read as they should (see `PLAIN`) is read from
        them as they are, its input, question and error decoded as
        `task_fields` decodes them, and a running task's runner asked once
        whether it is gone (crashed); any other row is decoded as
        `list_stored` decodes it, so an unreadable task is still listed as one.
        """

        def read(db: sqlite3.Connection) -> list[BriefTask]:
            # Each row is done with as it comes: thousands of them are never all kept.
            rows = db.execute(*page_query(self._BRIEF_SELECT, "", prefix, None, None))
            out: list[BriefTask] = []
            add = out.append
            others: list[tuple[int, Any]] = []
            gone: dict[str | None, bool] = {}  # by runner: a dead process's tasks share it
            for session_id, status, cause, updated, text, question, error, runner in rows:
                if text is not None:
                    try:
                        shown = json_text(text)
                        prompt = None
                        if question is not None or error is not None:
                            prompt = prompt_of(question, error)
                    except Exception:  # any malformed shape: read in full below, unreadable
                        text = None
                if text is None:
                    others.append((len(out), session_id))  # read in full below
                    add(_NO_TASK)
                    continue
                crashed = False
                if status == "running":
                    if runner not in gone:
                        gone[runner] = runner_gone(runner)
                    crashed = gone[runner]
                add((session_id, status, crashed, cause, updated, prompt, shown))
            if others:
                for index, brief in self._briefs_in_full(db, others):
                    out[index] = brief
                out = [task for task in out if task is not _NO_TASK]
            return out

        return await self._run(read)

    def _briefs_in_full(
        self, db: sqlite3.Connection, places: list[tuple[int, Any]]
    ) -> Iterator[tuple[int, BriefTask]]:
        """`brief_of` each task of `places` (a listing's place, a session id), read in full.

        A task that is gone by now is left out.
        """
        if not places:
            return
        full = self._summary_rows(db, [session_id for _, session_id in places])
        for index, session_id in places:
            row = full.get(session_id)
            if row is not None:
                yield index, brief_of(self._summary(row))

    async def list_lines(self, prefix: str = "") -> list[str]:
        """`list_brief`'s tasks as `agentrt pending list` shows them, a line each."""
        return listing_lines(await self.list_brief(prefix))

    async def line_page(
        self, prefix: str = "", *, limit: int | None = None, cursor: str | None = None
    ) -> Page[tuple[str, int]]:
        """One page of `list_lines`, each line with its time left out, and that time.

        A line holds `TIME_MARK` where its time goes (`agentrt.present.listing.templates`),
        beside the second of the task's last change: for a client that shows the time in
        its own time zone (`agentrt.present.listing.filled`).
        """
        page = await self.list_page(prefix, limit=limit, cursor=cursor)
        briefs = [brief_of(task) for task in page.items]
        seconds = [int(brief[4]) for brief in briefs]
        return Page(tuple(zip(templates(briefs), seconds, strict=True)), page.next)

    async def list(self, prefix: str = "") -> list[TaskRecord]:
        """Whole pending tasks whose session id starts with `prefix`, most recent first.

        Decodes every transcript: for tests and tools. A record that cannot be
        read raises `StoreError` naming its session.
        """

        def read(db: sqlite3.Connection) -> list[TaskRecord]:
            ids = db.execute(
                "SELECT session_id FROM tasks WHERE session_id LIKE ? ESCAPE '\\' "
                "ORDER BY updated_at DESC, session_id",
                (_like(prefix),),
            ).fetchall()
            out = []
            for (session_id,) in ids:
                record = self._load(db, str(session_id))[0]
                if record is not None:
                    out.append(record)
            return out

        return await self._run(read)

    # -- sessions and their messages ---------------------------------------------

    async def load_history(self, session_id: str) -> tuple[Message, ...]:
        """The finished conversation of a session (what earlier runs said), oldest first."""
        return await self._run(
            lambda db: tuple(
                self._messages(db, session_id, self._session_row(db, session_id), history=True)
            )
        )

    async def owner(self, session_id: str) -> str | None:
        """The window that owns `session_id` (its pending task's, else its session's), or None."""

        def read(db: sqlite3.Connection) -> str | None:
            for table in ("tasks", "sessions"):
                row = db.execute(
                    f"SELECT window_hash FROM {table} WHERE session_id = ?", (session_id,)
                ).fetchone()
                if row is not None:
                    return row[0] if isinstance(row[0], str) else None
            return None

        return await self._run(read)

    async def sessions(
        self, prefix: str = "", *, limit: int | None = None, cursor: str | None = None
    ) -> Page[SessionInfo]:
        """Sessions whose id starts with `prefix`, most recently active first, a page at a time."""
        after = self._after(cursor)

        def read(db: sqlite3.Connection) -> Page[SessionInfo]:
            rows, last = page_rows(
                db, _SESSION_SELECT, "s.", prefix, after, limit, where=_HAS_MESSAGES
            )
            items = tuple(self._session_info(r) for r in rows)
            # The row's time as the database holds it: a damaged file's may not be a number.
            nxt = None if last is None else cursor_of(last[3], str(last[0]))
            return Page(items, nxt)

        return await self._run(read)

    async def session(self, session_id: str) -> SessionInfo | None:
        """One session's `SessionInfo`, or None."""

        def read(db: sqlite3.Connection) -> SessionInfo | None:
            row = db.execute(f"{_SESSION_SELECT} WHERE s.session_id = ?", (session_id,)).fetchone()
            return None if row is None else self._session_info(row)

        return await self._run(read)

    async def session_model(self, session_id: str) -> str | None:
        """The model chosen for `session_id` (a spec such as ``openai:gpt-4o``), or None."""

        def read(db: sqlite3.Connection) -> str | None:
            return _model_of(db.execute(_MODEL_SELECT, (session_id,)).fetchone())

        return await self._run(read)

    async def set_session_model(
        self, session_id: str, model: str | None, *, window_hash: str | None = None
    ) -> None:
        """Choose `model` for `session_id` (None: the default again), kept with the session.

        A session with no message yet gets a row of its own, owned by
        `window_hash`, that listings leave out until its first message.
        """

        def write(db: sqlite3.Connection) -> None:
            with self._write(db):
                changed = db.execute(
                    "UPDATE sessions SET model = ? WHERE session_id = ?", (model, session_id)
                ).rowcount
                if changed or model is None:
                    return
                now = time.time()
                db.execute(
                    "INSERT INTO sessions(session_id, window_hash, title, created_at, "
                    "updated_at, next_seq, rev, model) VALUES (?, ?, '', ?, ?, 0, 1, ?)",
                    (session_id, window_hash, now, now, model),
                )

        await self._run(write)

    def _session_info(self, r: Sequence[Any]) -> SessionInfo:
        return SessionInfo(
            session_id=str(r[0]),
            title=str(r[1]),
            created_at=seconds_of(r[2]) or 0.0,
            updated_at=seconds_of(r[3]) or 0.0,
            messages=int(r[4]),
            window_hash=r[5] if isinstance(r[5], str) else None,
            status=r[6] if isinstance(r[6], str) else None,
            model=r[7] if isinstance(r[7], str) else None,
            # The task's summary columns, as `list_page` reads them.
            task=self._summary(tuple(r[8:])) if r[8] is not None else None,
        )

    async def add_usage(
        self, session_id: str, task_hash: str, model: str, count: TokenCount
    ) -> None:
        """Add `count` to the tokens of run `task_hash` of `session_id` with `model`."""

        def write(db: sqlite3.Connection) -> None:
            with self._write(db):
                db.execute(
                    "INSERT INTO token_usage(session_id, task_hash, model, rounds, input_tokens, "
                    "output_tokens, cached_tokens, reasoning_tokens, updated_at) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
                    "ON CONFLICT (session_id, task_hash, model) DO UPDATE SET "
                    "rounds = token_usage.rounds + excluded.rounds, "
                    "input_tokens = token_usage.input_tokens + excluded.input_tokens, "
                    "output_tokens = token_usage.output_tokens + excluded.output_tokens, "
                    "cached_tokens = token_usage.cached_tokens + excluded.cached_tokens, "
                    "reasoning_tokens = token_usage.reasoning_tokens + excluded.reasoning_tokens, "
                    "updated_at = excluded.updated_at",
                    (
                        session_id,
                        task_hash,
                        model,
                        count.rounds,
                        count.input_tokens,
                        count.output_tokens,
                        count.cached_tokens,
                        count.reasoning_tokens,
                        time.time(),
                    ),
                )

        await self._run(write)

    async def usage(self, session_id: str) -> tuple[RunTokens, ...]:
        """The tokens of each run of `session_id` (by model), oldest first (no cost)."""

        def read(db: sqlite3.Connection) -> tuple[RunTokens, ...]:
            rows = db.execute(
                "SELECT task_hash, model, rounds, input_tokens, output_tokens, cached_tokens, "
                "reasoning_tokens FROM token_usage WHERE session_id = ? "
                "ORDER BY updated_at, task_hash, model",
                (session_id,),
            ).fetchall()
            return tuple(
                RunTokens(str(r[0]), str(r[1]), TokenCount(*(int(v) for v in r[2:]))) for r in rows
            )

        return await self._run(read)

    async def messages(
        self, session_id: str, *, after: int = -1, limit: int = 100
    ) -> Page[StoredMessage]:
        """A page of a session's stored messages with `seq` > `after`, oldest first.

        The page's `next` is the `after` of the next page (as a string), None after the last.
        """

        def read(db: sqlite3.Connection) -> Page[StoredMessage]:
            rows = db.execute(
                "SELECT seq, created_at, body FROM messages WHERE session_id = ? AND seq > ? "
                "ORDER BY seq LIMIT ?",
                (session_id, after, limit + 1),
            ).fetchall()
            more = len(rows) > limit
            out = []
            for seq, created, body in rows[:limit]:
                try:
                    message = decode_message(body)
                except Exception as exc:  # any malformed shape, whichever error it raises
                    raise StoreError(
                        f"message {seq} of session {session_id!r} in {self.location} is "
                        f"unreadable: {error_detail(exc)}"
                    ) from None
                out.append(StoredMessage(int(seq), float(created), message))
            return Page(tuple(out), str(out[-1].seq) if more and out else None)

        return await self._run(read)

    async def forget(self, session_id: str) -> bool:
        """Delete a finished session and all its messages; True if there was one.

        Refused (`TaskExistsError`, deleting nothing) while the session has a
        pending task: its unfinished work goes only by discarding it (a
        user-cancel), which checks who runs it. The check and the delete are
        one transaction.
        """

        def write(db: sqlite3.Connection) -> bool:
            with self._write(db):
                if self._task_row(db, session_id) is not None:
                    raise TaskExistsError(
                        f"session {session_id} has a pending task; resume it or discard it "
                        f"first (agentrt pending discard {session_id})"
                    )
                n = db.execute("DELETE FROM messages WHERE session_id = ?", (session_id,)).rowcount
                n += db.execute("DELETE FROM sessions WHERE session_id = ?", (session_id,)).rowcount
                db.execute("DELETE FROM token_usage WHERE session_id = ?", (session_id,))
                self._memory.drop(session_id)
                return n > 0

        return await self._run(write)

    async def prune(self, older_than: float) -> int:
        """Delete the sessions with no pending task last active before `older_than`; how many."""

        def write(db: sqlite3.Connection) -> int:
            with self._write(db):
                ids = [
                    str(r[0])
                    for r in db.execute(
                        "SELECT session_id FROM sessions WHERE updated_at < ? AND session_id "
                        "NOT IN (SELECT session_id FROM tasks)",
                        (older_than,),
                    ).fetchall()
                ]
                for session_id in ids:
                    db.execute("DELETE FROM messages WHERE session_id = ?", (session_id,))
                    db.execute("DELETE FROM sessions WHERE session_id = ?", (session_id,))
                    db.execute("DELETE FROM token_usage WHERE session_id = ?", (session_id,))
                    self._memory.drop(session_id)
                return len(ids)

        return await self._run(write)

    # -- lifetime ----------------------------------------------------------------

    async def aclose(self) -> None:
        """Close the file once the calls already queued are done. Later calls raise `StoreError`."""
        if self._closed:
            return
        self._closed = True
        self._hand_over()
        await self._writer.stop()

    def statistics(self) -> StoreStatistics:
        """How many calls and batches the store has run (a batch is one transaction)."""
        return self._writer.statistics()

    # -- the calls, in the writer thread ------------------------------------------

    def _session_row(self, db: sqlite3.Connection, session_id: str) -> _SessionRow | None:
        row = db.execute(
            "SELECT rev, next_seq FROM sessions WHERE session_id = ?", (session_id,)
        ).fetchone()
        return None if row is None else _SessionRow(int(row[0]), int(row[1]))

    def _task_and_session(
        self, db: sqlite3.Connection, session_id: str
    ) -> tuple[_TaskRow | None, _SessionRow | None, str | None]:
        """`_task_row` and, when there is a task, `_session_row` and the model chosen for the
        session (`session_model`): one statement (a round trip on PostgreSQL). Without a
        task, the session is not read (None, None)."""
        row = db.execute(_TASK_AND_SESSION_SELECT, (session_id,)).fetchone()
        if row is None:
            return None, None, None
        fields = 1 + len(FIELDS)
        task = _TaskRow(tuple(row[:fields]), int(row[fields]), int(row[fields + 1]))
        rev, next_seq = row[fields + 2], row[fields + 3]
        session = None if rev is None else _SessionRow(int(rev), int(next_seq))
        return task, session, _model_of(row[fields + 4 :])

    def _task_row(self, db: sqlite3.Connection, session_id: str) -> _TaskRow | None:
        row = db.execute(_TASK_SELECT, (session_id,)).fetchone()
        if row is None:
            return None
        return _TaskRow(tuple(row[: 1 + len(FIELDS)]), int(row[-2]), int(row[-1]))

    def _all_messages(
        self, db: sqlite3.Connection, session_id: str, session: _SessionRow | None
    ) -> Sequence[Message]:
        """Every stored message of a session: from memory when still current, else read.

        Read, the bodies are checked to be JSON by the database (`_ODD_BODIES`) and kept
        as they are, or, where it cannot, parsed as one JSON array; each is made a message
        when first read (`StoredMessages`): a run that reads the end of a long history
        parses and makes only that end. A body that is not JSON is told now, as one that
        holds no message is when read.
        """
        if session is None:
            return ()
        cached = self._memory.get(session_id, session.rev)
        if cached is not None and len(cached) == session.next_seq:
            return cached
        messages: Sequence[Message] | None = None
        if self._ODD_BODIES is not None:
            messages = self._texts_checked(db, session_id, self._ODD_BODIES)
        if messages is None:
            rows = db.execute(
                "SELECT seq, body FROM messages WHERE session_id = ? ORDER BY seq", (session_id,)
            ).fetchall()
            values = message_values([body for _, body in rows])
            if values is None:  # which message, and whose, is told below
                messages = self._decode_each(db, session_id, rows)
            else:
                task = self._task_row(db, session_id)
                messages = StoredMessages(
                    values,
                    functools.partial(
                        self._message_of, session_id, task.first_seq if task else len(rows)
                    ),
                )
        self._memory.put(session_id, session.rev, messages)
        return messages

    def _texts_checked(
        self, db: sqlite3.Connection, session_id: str, odd_bodies: str
    ) -> StoredMessages | None:
        """A session's messages as their bodies, each one JSON text as the database itself
        checks (`_ODD_BODIES`, in its own code: none is parsed here); None when one is not
        (each is then decoded alone, to say which)."""
        try:
            odd = db.execute(odd_bodies, (session_id,)).fetchall()
        except sqlite3.OperationalError:  # an SQLite built without its JSON functions
            return None
        if not all(valid for _, valid in odd):
            return None
        rows = db.execute(
            "SELECT body FROM messages WHERE session_id = ? ORDER BY seq", (session_id,)
        ).fetchall()
        bodies = [body for (body,) in rows]
        task = self._task_row(db, session_id)
        first = task.first_seq if task else len(bodies)
        return StoredMessages(
            bodies,
            functools.partial(self._message_of_text, session_id, first),
            texts={int(seq) for seq, _ in odd},
        )

    def _message_of(self, session_id: str, first: int, seq: int, value: Any) -> Message:
        """The message of the stored JSON `value` of message `seq` of `session_id` (the
        pending task's from `first` on); raises `StoreError` saying whose is unreadable."""
        try:
            return message_of(value)
        except Exception as exc:  # any malformed shape, whichever error cattrs raises for it
            raise self._unreadable_message(session_id, first, seq, exc) from None

    def _message_of_text(self, session_id: str, first: int, seq: int, text: str) -> Message:
        """`_message_of` the body `text` of message `seq`: parsed here, the first time (a
        text the database took for JSON that this parser does not is unreadable too)."""
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise self._unreadable_message(session_id, first, seq, exc) from None
        return self._message_of(session_id, first, seq, value)

    def _unreadable_message(
        self, session_id: str, first: int, seq: int, exc: Exception
    ) -> StoreError:
        """The error of message `seq` of `session_id` (the pending task's from `first` on)."""
        if seq >= first:
            return self._task_unreadable(session_id, error_detail(exc))
        return StoreError(
            f"the history of session {session_id!r} in {self.location} is unreadable "
            f"(message {seq}: {error_detail(exc)})"
        )

    def _decode_each(
        self, db: sqlite3.Connection, session_id: str, rows: Sequence[Any]
    ) -> tuple[Message, ...]:
        """The messages of `rows` (seq, body), each decoded alone; the first that cannot be
        read raises, as the pending task's (unreadable) or the history's."""
        task = self._task_row(db, session_id)
        first = task.first_seq if task is not None else len(rows)
        out: list[Message] = []
        for seq, body in rows:
            try:
                out.append(decode_message(body))
            except Exception as exc:  # any malformed shape, whichever error cattrs raises for it
                if int(seq) >= first:
                    raise self._task_unreadable(session_id, error_detail(exc)) from None
                raise StoreError(
                    f"the history of session {session_id!r} in {self.location} is unreadable "
                    f"(message {seq}: {error_detail(exc)})"
                ) from None
        return tuple(out)

    def _messages(
        self,
        db: sqlite3.Connection,
        session_id: str,
        session: _SessionRow | None,
        *,
        history: bool,
    ) -> Sequence[Message]:
        """A session's history (the messages before its pending task), or all its messages."""
        messages = self._all_messages(db, session_id, session)
        if not history:
            return messages
        task = self._task_row(db, session_id)
        return messages if task is None else messages[: task.first_seq]

    def _load(
        self,
        db: sqlite3.Connection,
        session_id: str,
        model: Callable[[str | None], object] | None = None,
    ) -> tuple[TaskRecord | None, Sequence[Message]]:
        """The pending task of a session and its history (both empty when it has none).

        `model`, when given, is first called with the model chosen for the session
        (see `update`), read with the task; a session without a task has it read alone.
        """
        task, session, chosen = self._task_and_session(db, session_id)
        if model is not None:
            if task is None:
                chosen = _model_of(db.execute(_MODEL_SELECT, (session_id,)).fetchone())
            model(chosen)
        if task is None:
            return None, ()
        messages = self._all_messages(db, session_id, session)
        end = task.first_seq + task.message_count
        if len(messages) < end:
            raise self._task_unreadable(
                session_id, f"{end - len(messages)} of its messages are missing"
            )
        return (
            self._decoded(task.fields, tuple(messages[task.first_seq : end])),
            messages[: task.first_seq],
        )

    def _decoded(self, fields: tuple[Any, ...], transcript: tuple[Message, ...]) -> TaskRecord:
        """`_record`, or the record this store wrote with these very columns (`_Written`)."""
        written = self._written.get(str(fields[0]), fields[1:])
        if written is None:
            return self._record(fields, transcript)
        if len(written.transcript) == len(transcript) and all(
            a is b for a, b in zip(written.transcript, transcript, strict=True)
        ):
            return written
        return attrs.evolve(written, transcript=transcript)

    def _check_record_held(self, db: sqlite3.Connection, record: TaskRecord) -> None:
        """Refuse a running record's write when another runner holds its task now."""
        runner = self._held_by(record)
        if runner is not None:
            self._check_held(db, record.session_id, runner)

    def _held_by(self, record: TaskRecord) -> str | None:
        """The runner that must hold `record`'s task for a write of it (None: no check)."""
        return record.runner if record.status is TaskStatus.RUNNING else None

    def _update_held(
        self,
        db: sqlite3.Connection,
        sql: str,
        values: tuple[Any, ...],
        session_id: str,
        runner: str | None,
        *,
        read_ahead: bool = False,
    ) -> bool:
        """Run `sql` (an UPDATE of a task ending ``WHERE session_id = ?``) if `runner` holds it.

        The check is a condition of the UPDATE itself (`_HELD_WHERE`), one
        statement; only when no row changed is the task read to say why
        (`_check_held` raises for a task another holds). False: no task.
        With `read_ahead`, where the store keeps it (`_READ_AHEAD`), the UPDATE also
        returns what `_task_and_session` reads of the task besides the fields written,
        and the row that read gives is kept for it.
        """
        where, held = ("", ()) if runner is None else (self._HELD_WHERE, self._held_args(runner))
        ahead = read_ahead and self._READ_AHEAD
        returning = _TASK_AND_SESSION_RETURNING if ahead else ""
        cur = db.execute(sql + where + returning, (*values, session_id, *held))
        if cur.rowcount > 0:
            if ahead:
                # The row as `_TASK_AND_SESSION_SELECT` reads it: the fields just written, and
                # what the UPDATE returned of the rest.
                row = (session_id, *values[: len(FIELDS)], *cur.fetchone())
                self._read_ahead(db, _TASK_AND_SESSION_SELECT, (session_id,), row)
            return True
        if runner is not None:
            self._check_held(db, session_id, runner)
        return False

    def _read_ahead(
        self, db: sqlite3.Connection, sql: str, parameters: tuple[Any, ...], row: tuple[Any, ...]
    ) -> None:
        """Answer the next `sql` with `parameters` in this transaction with `row` (made with
        the `_READ_AHEAD` of an UPDATE): a store that does so overrides this (`PgStore`)."""

    def _held_args(self, runner: str) -> tuple[Any, ...]:
        """The parameters of `_HELD_WHERE` for a write of `runner`'s."""
        return (runner,)

    def _check_held(self, db: sqlite3.Connection, session_id: str, runner: str) -> None:
        """Raise `TaskTakenError` if the task of `session_id` is recorded with another runner.

        A run's own writes (its commits, its ending) carry its token: a task
        resumed elsewhere meanwhile is the other runner's, and a late write of
        the run that lost it must not undo that runner's work. A task with no
        row is not checked (what becomes of it is the caller's to say).
        """
        row = db.execute(self._HELD_SELECT, (session_id,)).fetchone()
        if row is not None and row[0] is not None and row[0] != runner:
            raise TaskTakenError(
                f"the pending task of session {session_id} was taken over by another runner "
                "(this one had lost its hold on it); this run's change was not saved"
            )
        if row is not None:
            self._check_held_row(session_id, tuple(row))

    def _check_held_row(self, session_id: str, row: tuple[Any, ...]) -> None:
        """Check the rest of `_HELD_SELECT`'s row of a task this runner holds (nothing here)."""

    def _save(
        self, db: sqlite3.Connection, record: TaskRecord, *, claim: bool = False
    ) -> TaskRecord:
        """Write `record` (see `save`) inside the caller's transaction; return it as written.

        `claim` says that the write makes the record's runner the task's (a new
        run, a resume): see `_claimed`.
        """
        session_id = record.session_id
        task, session, _ = self._task_and_session(db, session_id)
        if task is None:
            session = self._session_row(db, session_id)
        new = record.transcript
        if task is not None and session is not None:
            first, count = task.first_seq, task.message_count
            cached = self._memory.get(session_id, session.rev)
            if (
                cached is not None
                and len(cached) == first + count == session.next_seq
                and len(new) >= count
                and (count == 0 or new[count - 1] is cached[-1])
            ):
                added = self._append(db, session_id, session, new[count:])
                transcript = tuple(cached[first:]) + added
            else:
                # Not known to extend what is stored: the task's messages are written anew.
                self._truncate(db, session_id, first)
                session = self._session_row(db, session_id)
                transcript = self._append(db, session_id, session, new)
        else:
            if task is not None:  # a task row with no session row: a damaged file
                self._truncate(db, session_id, task.first_seq)
            first = session.next_seq if session is not None else 0
            transcript = self._append(db, session_id, session, new, title=record.input)
        record = attrs.evolve(record, transcript=transcript)
        columns = self._columns(record)
        db.execute(self._UPSERT, (session_id, *columns, first, len(transcript)))
        self._written.put(record, columns)
        if claim:
            self._claimed(db, record)
        return record

    def _claimed(self, db: sqlite3.Connection, record: TaskRecord) -> None:
        """A run took the task (inside the claiming transaction); a fleet's store starts its lease."""

    @contextlib.contextmanager
    def _write(self, db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
        """A write transaction (`write_transaction`) that a fleet's store fences first."""
        with write_transaction(db):
            self._fence(db)
            yield db

    def _fence(self, db: sqlite3.Connection) -> None:
        """Refuse every write of a member whose lease is not live (`agentrt.store.postgres`); none here."""

    def _append(
        self,
        db: sqlite3.Connection,
        session_id: str,
        session: _SessionRow | None,
        messages: Sequence[Message],
        *,
        title: str | None = None,
    ) -> tuple[Message, ...]:
        """Store `messages` (clamped) after the session's last; return them as stored."""
        now = time.time()
        start = 0 if session is None else session.next_seq
        added = tuple(clamp_message(m) for m in messages)
        if added:
            db.executemany(
                "INSERT INTO messages(session_id, seq, role, created_at, body) VALUES (?,?,?,?,?)",
                [(session_id, start + n, *_row_of(m, now)) for n, m in enumerate(added)],
            )
        end = start + len(added)
        if session is None:
            db.execute(
                "INSERT INTO sessions(session_id, title, created_at, updated_at, next_seq, rev) "
                "VALUES (?, ?, ?, ?, ?, 1)",
                (session_id, title_of(title or _first_user_text(added)), now, now, end),
            )
            self._memory.put(session_id, 1, added)
            return added
        rev = session.rev + 1
        db.execute(
            "UPDATE sessions SET next_seq = ?, rev = ?, updated_at = ? WHERE session_id = ?",
            (end, rev, now, session_id),
        )
        if start == 0 and added:
            # A session whose model was chosen before its first message: its title now.
            db.execute(
                "UPDATE sessions SET title = ? WHERE session_id = ?",
                (title_of(title or _first_user_text(added)), session_id),
            )
        cached = self._memory.get(session_id, session.rev)
        if cached is not None and len(cached) == start:
            both = cached + added if isinstance(cached, StoredMessages) else (*cached, *added)
            self._memory.put(session_id, rev, both)
        else:
            self._memory.drop(session_id)
        return added

    def _truncate(self, db: sqlite3.Connection, session_id: str, first: int) -> None:
        """Delete a session's messages from `first` on (a pending task's, when it goes)."""
        session = self._session_row(db, session_id)
        if session is None:
            return
        db.execute("DELETE FROM messages WHERE session_id = ? AND seq >= ?", (session_id, first))
        if first == 0:
            # A session left with no message goes, unless a model was chosen for it.
            gone = db.execute(
                "DELETE FROM sessions WHERE session_id = ? AND model IS NULL", (session_id,)
            ).rowcount
            if gone:
                self._memory.drop(session_id)
                return
        rev = session.rev + 1
        db.execute(
            "UPDATE sessions SET next_seq = ?, rev = ?"
            + (", title = ''" if first == 0 else "")
            + " WHERE session_id = ?",
            (first, rev, session_id),
        )
        cached = self._memory.get(session_id, session.rev)
        if cached is not None and len(cached) >= first:
            self._memory.put(session_id, rev, cached[:first])
        else:
            self._memory.drop(session_id)

    def _update_fields(
        self, db: sqlite3.Connection, record: TaskRecord, *, claim: bool = False
    ) -> bool:
        columns = self._columns(record)
        cur = db.execute(self._UPDATE, (*columns, record.session_id))
        if cur.rowcount <= 0:
            return False
        self._written.put(record, columns)
        if claim:
            self._claimed(db, record)
        return True

    def _unreadable(
        self, db: sqlite3.Connection, session_id: str, exc: StoreError
    ) -> UnreadableTask | None:
        row = db.execute(
            "SELECT updated_at, window_hash FROM tasks WHERE session_id = ?", (session_id,)
        ).fetchone()
        if row is None:
            return None
        updated, window = row
        return UnreadableTask(
            session_id=session_id,
            error=str(exc),
            updated_at=seconds_of(updated),
            window_hash=window if isinstance(window, str) else None,
        )

    def _task_unreadable(self, session_id: str, detail: str) -> StoreError:
        return StoreError(
            f"the pending task of session {session_id!r} in {self.location} is unreadable "
            f"({detail}); discard it with: agentrt pending discard {session_id}"
        )

    def _record(self, fields: tuple[Any, ...], transcript: tuple[Message, ...]) -> TaskRecord:
        session_id = str(fields[0])
        try:
            *columns, attempts = (*fields[1:12], fields[13], fields[14], fields[12])
            return TaskRecord(
                session_id=session_id,
                transcript=transcript,
                attempts={str(k): int(v) for k, v in json.loads(attempts).items()},
                **task_fields(*columns),
                **journal_fields(fields[15]),
            )
        except Exception as exc:  # any malformed shape, whichever error cattrs raises for it
            raise self._task_unreadable(session_id, error_detail(exc)) from None

    def _summary_rows(self, db: sqlite3.Connection, session_ids: Sequence[Any]) -> dict[Any, Any]:
        """The summary columns (`_SUMMARY_SELECT`) of the tasks of `session_ids`, by session id."""
        rows: dict[Any, Any] = {}
        for start in range(0, len(session_ids), _BRIEF_CHUNK):
            chunk = session_ids[start : start + _BRIEF_CHUNK]
            marks = ", ".join("?" * len(chunk))
            for row in db.execute(f"{_SUMMARY_SELECT} WHERE session_id IN ({marks})", chunk):
                rows[row[0]] = row
        return rows

    def _summary(self, row: tuple[Any, ...]) -> ListedTask:
        session_id = str(row[0])
        try:
            return TaskSummary(
                session_id=session_id, messages=int(row[-1]), **task_fields(*row[1:-1])
            )
        except Exception as exc:  # any malformed shape, whichever error cattrs raises for it
            updated, window = row[1 + _SUMMARY_COLUMNS.index("updated_at")], row[5]
            return UnreadableTask(
                session_id=session_id,
                error=str(self._task_unreadable(session_id, error_detail(exc))),
                updated_at=seconds_of(updated),
                window_hash=window if isinstance(window, str) else None,
            )

    def _after(self, cursor: str | None) -> tuple[Stamp, str] | None:
        """The row a listing's page goes on after: its `cursor` read (None: from the top)."""
        if cursor is None:
            return None
        return parse_cursor(cursor, numbers_only=self._NUMBER_TIMES)

    # -- queueing ------------------------------------------------------------------

    def _submit(
        self,
        fn: Callable[[sqlite3.Connection], T],
        *,
        defer: bool = False,
        synced: bool = True,
        here: bool = False,
    ) -> Call[T]:
        """Queue `fn` for the writer thread; calls run in the order queued.

        With `defer`, the call takes its place in the order now but the
        thread hears of it only when it is waited for or the next call is
        queued: the caller can tell the world something first (a run's final
        event) without paying for waking the thread. With `synced` False, its
        commit need not wait for the disk (see `update`). With `here`, it is
        small enough to run in this thread when the backend may (`Call.here`).
        """
        if self._closed:
            raise StoreError(f"the task store {self.location} is closed")
        call: Call[T] = Call(fn, trio.lowlevel.current_trio_token(), synced=synced, here=here)
        if defer:
            self._deferred.append(call)
            return call
        self._hand_over(call)
        return call

    def _hand_over(self, *calls: Call[Any]) -> None:
        """Give the writer thread the deferred calls, then `calls`, in their order.

        All at once, so that they go in one batch (one transaction, one sync to
        disk): handed over one by one, the thread could start a batch with the
        first ones before the last arrived.
        """
        if self._deferred:
            calls = (*self._deferred, *calls)
            self._deferred.clear()
        if calls:
            self._writer.submit(*calls)

    async def _wait(self, call: Call[T]) -> T:
        """The outcome of a queued call.

        Once queued, a call runs, and its caller waits for it even when
        cancelled (as for a worker thread: the cancel is seen at the caller's
        next checkpoint), so that nobody is told a write failed that happened.
        Only a call that can never run (`Call.abandonable`) is given up on.

        Deferred calls that may run in this thread (`Writer.run_here`) hold the loop
        while they run: the tasks already woken go first (the one that sends the final
        event a stop's write was deferred behind, say).
        """
        if self._deferred and self._writer.run_here is not None:
            # Twice: Trio runs a batch of ready tasks in either order, so after one
            # checkpoint this task may come back before one woken just before it ran.
            await trio.lowlevel.cancel_shielded_checkpoint()
            await trio.lowlevel.cancel_shielded_checkpoint()
        self._hand_over()
        await call.done.wait(cancellable=call.abandonable)
        return call.result()

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run `fn` in the writer thread (batched with what is queued with it); its result."""
        return await self._wait(self._submit(fn))


def _model_of(row: Sequence[Any] | None) -> str | None:
    """The chosen model a row's first column holds (`session_model`): None unless text."""
    return row[0] if row is not None and isinstance(row[0], str) else None


def _row_of(message: Message, now: float) -> tuple[str, float, str]:
    role, body = encode_message(message)
    return role, now, body


def _first_user_text(messages: Sequence[Message]) -> str:
    return next((m.content for m in messages if m.role is Role.USER), "")


@mutable(eq=False)
class Submitted(Generic[T]):
    """A store call queued by a ``*_nowait`` method; `wait` gives its outcome."""

    _store: SqlStore
    _call: Call[T]

    async def wait(self) -> T:
        return await self._store._wait(self._call)

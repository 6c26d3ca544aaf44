"""The task store: every session's messages and its pending task, in an embedded SQLite file.

Messages are append-only rows (session, seq, JSON), so committing a message is
one INSERT whatever the length of the conversation, and clamping touches only
the new row. A session's pending task is a row of fields plus a range of its
messages (`first_seq`, `message_count`); the messages before the range are the
session's finished history. Listings read summary columns and never decode a
transcript.

Every change is one transaction, so a process killed at any moment leaves
either the old state or the new one. A change that reads before it writes
(create, resume, discard) holds SQLite's write lock from its first statement
(`BEGIN IMMEDIATE`), so what it read cannot change under it, even from another
process. SQLite runs in one long-lived writer thread: whatever is queued when
it comes round goes in one transaction (group commit: one sync to disk for the
lot), each call in a savepoint of its own. The file uses WAL, so a reader in
another process never waits for a writer.

What the store wrote last is kept in memory, checked against a revision
number in the file: a resume, a commit or a new run in the same process does
not read back and decode what it has just written.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

import attrs
import cattrs
import trio

from ._cause import Cause
from ._listing import TIME_MARK, BriefTask, line_head, stamp, template
from ._listing import lines as listing_lines
from ._messages import Message, Role
from ._process import process_token
from ._record import (
    SavedQuestion,
    SubagentJournal,
    TaskRecord,
    TaskSummary,
    clamp_message,
    converter,
    runner_gone,
)
from ._reprs import fields_eq, fields_hash, fields_repr
from ._statedir import fsync_dir
from ._vocab import TaskStatus

SCHEMA_VERSION = 5

#: The columns of `tasks` that held a record's fields up to schema version 4.
_FIELDS_V4 = (
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
#: The columns of `tasks` that hold a record's fields, in the order `_fields` gives them.
_FIELDS = (*_FIELDS_V4, "journal")

_TASKS = """
CREATE TABLE tasks (
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
    journal TEXT NOT NULL DEFAULT '{}',
    first_seq INTEGER NOT NULL DEFAULT 0,
    message_count INTEGER NOT NULL DEFAULT 0,
    line TEXT
)"""

#: A task's listing line (`agentrt._listing.template`) is kept in its row by the store's
#: own writes, each of which writes the line anew. A change that leaves the line as it was
#: (one made by hand, or by a program that does not know it) drops it: a row with no line
#: is listed from its record, so a damaged task is still listed as unreadable.
_LINE_TRIGGER = """
CREATE TRIGGER tasks_line_dropped AFTER UPDATE ON tasks
WHEN NEW.line IS NOT NULL AND NEW.line IS OLD.line
BEGIN UPDATE tasks SET line = NULL WHERE rowid = NEW.rowid; END"""

_SCHEMA = (
    _TASKS,
    "CREATE INDEX tasks_by_time ON tasks(updated_at DESC, session_id)",
    _LINE_TRIGGER,
    """CREATE TABLE sessions (
    session_id TEXT PRIMARY KEY,
    window_hash TEXT,
    title TEXT NOT NULL DEFAULT '',
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    next_seq INTEGER NOT NULL DEFAULT 0,
    rev INTEGER NOT NULL DEFAULT 0
)""",
    "CREATE INDEX sessions_by_time ON sessions(updated_at DESC, session_id)",
    """CREATE TABLE messages (
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    role TEXT NOT NULL,
    created_at REAL NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID""",
)

#: How many characters of a session's first message its title keeps.
TITLE_CHARS = 80

T = TypeVar("T")


class StoreError(Exception):
    """The store file cannot be used (corrupt, newer schema, unreadable record)."""


class BadCursorError(ValueError):
    """A listing cursor that no page gave."""


class TaskExistsError(Exception):
    """A new task was started in a session that still has a pending task."""


class TaskTakenError(StoreError):
    """A run wrote to a task that another runner holds now (it took the task over).

    Happens only to a run that lost its hold on the task: in a fleet, a daemon
    cut off from the database for longer than its lease, whose tasks another
    daemon resumed meanwhile. The write changes nothing.
    """


class StaleLeaseError(TaskTakenError):
    """A fleet member wrote under a lease epoch that is no longer its live one (see `agentrt._pgstore`).

    The member's lease ran out (it stalled, or was cut off from the database),
    or it joined the fleet again since the run that wrote took its task. The
    database refused the write in the write's own transaction; it changed nothing.
    """


@attrs.frozen
class UnreadableTask:
    """A stored pending task that cannot be decoded (bad JSON, a damaged field).

    Listings show it with status ``unreadable`` so that the other tasks stay
    usable, and it can be discarded like any task. `error` says what is wrong
    and how to discard it. The plain columns are kept when they can be read.
    """

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    session_id: str
    error: str
    updated_at: float | None = None
    window_hash: str | None = None
    status: str = "unreadable"


#: What one stored pending task reads back as.
StoredTask = TaskRecord | UnreadableTask
#: What one pending task is listed as.
ListedTask = TaskSummary | UnreadableTask


def brief_of(task: ListedTask) -> BriefTask:
    """What a text listing shows of a task listed in full (`SqlStore.list_stored`)."""
    if isinstance(task, UnreadableTask):
        return (task.session_id, task.status, False, None, task.updated_at or 0.0, None, "")
    return (
        task.session_id,
        task.status.value,
        task.crashed,
        task.cause.value if task.cause is not None else None,
        task.updated_at,
        task.question.prompt if task.question is not None else None,
        task.input,
    )


@attrs.frozen
class SessionInfo:
    """One session as listed: its title (first message, shortened) and where it stands."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    session_id: str
    title: str
    created_at: float
    updated_at: float
    #: Messages stored: finished history and the pending task's transcript.
    messages: int
    window_hash: str | None = None
    #: The pending task's status, or None when the session has none (its runs finished).
    status: str | None = None
    #: The pending task as a listing shows it, or None when the session has none.
    task: ListedTask | None = None


@attrs.frozen
class StoredMessage:
    """One stored message and its place in its session (`seq` counts from 0)."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    seq: int
    created_at: float
    message: Message


@attrs.frozen
class Page(Generic[T]):
    """A page of a listing, and the cursor of the next page (None after the last)."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    items: tuple[T, ...]
    next: str | None = None


@contextlib.contextmanager
def _write_transaction(db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One transaction holding SQLite's write lock from its first statement.

    `BEGIN IMMEDIATE` takes the lock before anything is read, so a
    read-check-write cannot interleave with another writer (another process
    on the same file included): the second one waits (``busy_timeout``) and
    then reads what the first one wrote.
    """
    if db.in_transaction:
        # Inside a batch (see `_Writer`): the batch holds the write lock already, and
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


def _plain(text: str) -> str:
    """`text` as SQLite can hold it as plain UTF-8 (a lone surrogate becomes U+FFFD)."""
    return text.encode("utf-8", "replace").decode("utf-8")


def title_of(text: str) -> str:
    """A session's title: the first line of its first message, shortened."""
    line = _plain(text).strip().split("\n", 1)[0]
    return line if len(line) <= TITLE_CHARS else line[: TITLE_CHARS - 3] + "..."


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
        _journal_json(record),
    )


def _journal_json(record: TaskRecord) -> str:
    """The ``journal`` column: a record's kept full arguments and its subagents' journals.

    Both are usually empty, and the column then holds ``{}``.
    """
    journal: dict[str, Any] = {}
    if record.arguments:
        journal["arguments"] = dict(record.arguments)
    if record.subagents:
        journal["subagents"] = {
            key: converter.unstructure(sub, SubagentJournal)
            for key, sub in record.subagents.items()
        }
    return _dumps(journal)


def _journal_fields(text: str) -> dict[str, Any]:
    """The record fields the ``journal`` column holds (see `_journal_json`)."""
    if text == "{}":
        return {}
    data = json.loads(text)
    return {
        "arguments": {str(k): dict(v) for k, v in data.get("arguments", {}).items()},
        "subagents": {
            str(k): converter.structure(v, SubagentJournal)
            for k, v in data.get("subagents", {}).items()
        },
    }


_STATUSES = {s.value: s for s in TaskStatus}
_CAUSES = {c.value: c for c in Cause}


def _task_fields(
    status: str,
    cause: str | None,
    error: str,
    question: str,
    window: str | None,
    task: str | None,
    runs: int,
    created: float,
    updated: float,
    text: str,
    runner: str | None,
    workdir: str | None,
    lost_words: int,
) -> dict[str, Any]:
    """The fields a record and a listing's summary share, from their columns (`_SUMMARY_COLUMNS`).

    Listings decode thousands of these: the common values (a null, a plain
    string) are read without the JSON parser, and enums by a dict lookup.
    """
    saved = None if question == "null" else json.loads(question)
    return {
        "input": _json_text(text),
        "status": _STATUSES.get(status) or TaskStatus(status),
        "cause": None if cause is None else (_CAUSES.get(cause) or Cause(cause)),
        "error": None if error == "null" else json.loads(error),
        "question": converter.structure(saved, SavedQuestion) if saved else None,
        "window_hash": window,
        "task_hash": task,
        "created_at": float(created),
        "updated_at": float(updated),
        "runs": int(runs),
        "runner": runner,
        "workdir": workdir,
        "lost_words": int(lost_words),
    }


def _prompt(question: str | None, error: str | None) -> str | None:
    """The prompt of a saved question from its column (None for ``null``), or None.

    Raises, as `_task_fields` would, if the question or the error column (None for
    ``null``) cannot be read.
    """
    if error is not None:
        json.loads(error)
    saved = None if question is None else json.loads(question)
    return converter.structure(saved, SavedQuestion).prompt if saved else None


def _json_text(text: str) -> str:
    """A JSON string's value; one with no escapes is read without the JSON parser."""
    if len(text) >= 2 and text[0] == '"' and text[-1] == '"' and "\\" not in text:
        return text[1:-1]
    value = json.loads(text)
    if not isinstance(value, str):
        raise ValueError(f"not a string: {text[:40]!r}")
    return value


def _encode_message(message: Message) -> tuple[str, str]:
    """A (clamped) message's role and JSON body, as its row holds them."""
    return message.role.value, _dumps(converter.unstructure(message, Message))


def _decode_message(body: str) -> Message:
    return converter.structure(json.loads(body), Message)


def _error_detail(exc: Exception) -> str:
    if isinstance(exc, cattrs.BaseValidationError):
        return "; ".join(cattrs.transform_error(exc))
    return str(exc)


@attrs.define(eq=False)
class _Memory:
    """The messages of recently used sessions as last written or read, by revision.

    A session's ``rev`` in the file changes with every change to its messages;
    an entry is used only while its revision is the file's, so a change made
    by another process is never missed. At most `limit` messages are kept (the
    sessions used longest ago go first; the one just used always stays): every
    object kept alive is one more for the garbage collector to walk. Used by
    the writer thread only.
    """

    __repr__ = fields_repr

    limit: int = 10_000
    _sessions: collections.OrderedDict[str, tuple[int, tuple[Message, ...]]] = attrs.field(
        factory=collections.OrderedDict
    )
    _size: int = 0

    def get(self, session_id: str, rev: int) -> tuple[Message, ...] | None:
        entry = self._sessions.get(session_id)
        if entry is None or entry[0] != rev:
            return None
        self._sessions.move_to_end(session_id)
        return entry[1]

    def put(self, session_id: str, rev: int, messages: tuple[Message, ...]) -> None:
        self.drop(session_id)
        self._sessions[session_id] = (rev, messages)
        self._size += len(messages)
        while self._size > self.limit and len(self._sessions) > 1:
            _, (_, gone) = self._sessions.popitem(last=False)
            self._size -= len(gone)

    def drop(self, session_id: str) -> None:
        entry = self._sessions.pop(session_id, None)
        if entry is not None:
            self._size -= len(entry[1])

    def clear(self) -> None:
        self._sessions.clear()
        self._size = 0


@attrs.frozen
class _TaskRow:
    """A `tasks` row: its raw field columns and its range of messages."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    fields: tuple[Any, ...]
    first_seq: int
    message_count: int


@attrs.frozen
class _SessionRow:
    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash
    rev: int
    next_seq: int


_TASK_SELECT = (
    f"SELECT session_id, {', '.join(_FIELDS)}, first_seq, message_count FROM tasks "
    "WHERE session_id = ?"
)
_SUMMARY_COLUMNS = tuple(c for c in _FIELDS if c not in ("attempts", "journal"))
_SUMMARY_SELECT = f"SELECT session_id, {', '.join(_SUMMARY_COLUMNS)}, message_count FROM tasks"


def _quoted(values: Iterable[TaskStatus | Cause]) -> str:
    return ", ".join(f"'{v.value}'" for v in values)


#: True for a `tasks` row that `_summary` reads without fail but for its input, error and
#: question, which `list_brief` reads itself.
_PLAIN = (
    f"status IN ({_quoted(TaskStatus)}) AND (cause IS NULL OR cause IN ({_quoted(Cause)})) "
    "AND error IS NOT NULL AND question IS NOT NULL"
)


#: `_PLAIN` for SQLite, which keeps a value of any type in any column: in a plain row, the
#: session id must also be text and the numbers numbers `float` and `int` take, as
#: `_summary` reads them. A value equals itself cast to its column's type only when it is
#: one (and a comparison is cheaper than `typeof`).
_PLAIN_TYPED = (
    f"{_PLAIN} AND session_id = CAST(session_id AS TEXT) "
    "AND created_at = CAST(created_at AS REAL) AND updated_at = CAST(updated_at AS REAL) "
    "AND runs = CAST(runs AS INTEGER) AND lost_words = CAST(lost_words AS INTEGER) "
    "AND message_count = CAST(message_count AS INTEGER)"
)
#: The query of `TaskStore.list_lines`: a row's line (None if it has none, or is running),
#: the second of its last change, its session id.
_LINES_SELECT = (
    "SELECT CASE WHEN status <> 'running' THEN line END, CAST(updated_at AS INTEGER), "
    "session_id FROM tasks"
)


def _brief_select(plain: str) -> str:
    """The query of `SqlStore.list_brief`: the input of a row `plain` holds for, else NULL.

    Few columns, the last three null but in the odd row (a question, an error, a
    task running): each column costs the driver calls of its own, for every row.
    The input is left as stored (JSON) for `_json_text`.
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
    "COALESCE(t.window_hash, s.window_hash), t.status, t.session_id, "
    f"{', '.join('t.' + c for c in _SUMMARY_COLUMNS)}, t.message_count "
    "FROM sessions s LEFT JOIN tasks t ON t.session_id = s.session_id"
)


def _like(prefix: str) -> str:
    escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped + "%"


def _page_rows(
    db: sqlite3.Connection,
    select: str,
    table: str,
    prefix: str,
    after: tuple[float, str] | None,
    limit: int | None,
) -> tuple[list[Any], Any]:
    """A page of `select`'s rows by session id prefix, most recent first, after a cursor.

    `table` is the alias prefix of the paged table's columns (``"s."`` or
    ``""``). Returns the page's rows and its last row when more follow (the
    next page's cursor comes from it), else None.
    """
    rows = db.execute(*_page_query(select, table, prefix, after, limit)).fetchall()
    if limit is None or len(rows) <= limit:
        return rows, None
    rows = rows[:limit]
    return rows, rows[-1] if rows else None


def _page_query(
    select: str,
    table: str,
    prefix: str,
    after: tuple[float, str] | None,
    limit: int | None,
) -> tuple[str, list[Any]]:
    """The query of `_page_rows` (one row more than `limit`) and its parameters."""
    sql = f"{select} WHERE {table}session_id LIKE ? ESCAPE '\\'"
    args: list[Any] = [_like(prefix)]
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


def _upsert_sql(line: bool) -> str:
    """The statement `SqlStore._save` writes a task's row with (its line too, with `line`)."""
    columns = (*_FIELDS, *(("line",) if line else ()), "first_seq", "message_count")
    return (
        f"INSERT INTO tasks(session_id, {', '.join(columns)}) "
        f"VALUES ({', '.join('?' * (len(columns) + 1))}) ON CONFLICT(session_id) DO UPDATE SET "
        + ", ".join(f"{c} = excluded.{c}" for c in columns)
    )


def _update_sql(line: bool) -> str:
    """The statement `SqlStore._update_fields` rewrites a task's fields with."""
    columns = (*_FIELDS, *(("line",) if line else ()))
    return f"UPDATE tasks SET {', '.join(f'{c} = ?' for c in columns)} WHERE session_id = ?"


def _mark_sql(line: bool) -> str:
    """The statement of `SqlStore.mark`; with `line`, the line's head is replaced, its rest kept.

    A row without a line (or whose line has no time mark) is left without one.
    """
    sql = "UPDATE tasks SET status = ?, cause = ?, error = ?, updated_at = ?, lost_words = ?"
    if line:
        mark = f"instr(line, char({ord(TIME_MARK)}))"
        sql += f", line = CASE WHEN {mark} > 0 THEN ? || substr(line, {mark}) END"
    return sql + " WHERE session_id = ?"


def _line_of(record: TaskRecord) -> str | None:
    """The listing line `record`'s row keeps (`agentrt._listing.template`), or None."""
    question = record.question
    return template(
        record.session_id,
        record.status.value,
        record.cause.value if record.cause else None,
        question.prompt if question is not None else None,
        record.input,
    )


def _cursor(updated_at: float, session_id: str) -> str:
    return f"{updated_at!r}:{session_id}"


def _parse_cursor(cursor: str) -> tuple[float, str]:
    stamp, sep, session_id = cursor.partition(":")
    try:
        if not sep:
            raise ValueError(cursor)
        return float(stamp), session_id
    except ValueError:
        raise BadCursorError(
            f"not a listing cursor: {cursor!r}; pass the `next` of a page"
        ) from None


@attrs.define(eq=False)
class SqlStore:
    """Sessions' messages and pending tasks in an SQL database; see `TaskStore` and `PgStore`.

    The logic of both backends: they share the SQL, each connection speaking
    the subset of `sqlite3.Connection` used here (``execute`` with ``?``
    parameters, ``executemany``, ``in_transaction``, ``BEGIN IMMEDIATE`` for a
    transaction holding the store's write lock).
    """

    __repr__ = fields_repr

    #: The query of `list_brief`, for a database that keeps each column to its type.
    _BRIEF_SELECT: ClassVar[str] = _brief_select(_PLAIN)
    #: The statements that write a task's row (see `_columns`, `_marked_line`).
    _UPSERT: ClassVar[str] = _upsert_sql(line=False)
    _UPDATE: ClassVar[str] = _update_sql(line=False)
    _MARK: ClassVar[str] = _mark_sql(line=False)

    _db: sqlite3.Connection = attrs.field(repr=False)
    #: The token this process's runs are recorded with (`TaskRecord.runner`).
    runner: str = attrs.field(factory=process_token, kw_only=True)
    _closed: bool = attrs.field(default=False, init=False)
    _memory: _Memory = attrs.field(factory=_Memory, init=False, repr=False)
    _writer: _Writer = attrs.field(init=False, repr=False)
    #: Calls queued with `defer`, not yet handed to the writer thread (see `_submit`).
    _deferred: collections.deque[_Call[Any]] = attrs.field(
        factory=collections.deque, init=False, repr=False
    )

    def __attrs_post_init__(self) -> None:
        self._writer = _Writer(self._db, self.location, self._memory, self._run_batch)

    @property
    def location(self) -> str:
        """Where the store lives, as its messages name it."""
        raise NotImplementedError

    def _run_batch(self, db: sqlite3.Connection, batch: list[_Call[Any]]) -> None:
        """Run a batch of calls in one transaction (writer thread); see `_run_batch`."""
        _run_batch(db, batch, self.location, self._memory)

    def _columns(self, record: TaskRecord) -> tuple[Any, ...]:
        """The values `_UPSERT` and `_UPDATE` write of `record` (not its session's range)."""
        return _fields(record)

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

    async def create(self, record: TaskRecord) -> tuple[Message, ...]:
        """Write the first record of a new task and return the session's history, at once.

        Raises `TaskExistsError` (writing nothing) if the session has a pending task.
        """

        def write(db: sqlite3.Connection) -> tuple[Message, ...]:
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

    async def update(
        self, session_id: str, change: Callable[[TaskRecord], TaskRecord]
    ) -> tuple[TaskRecord, tuple[Message, ...]] | None:
        """Load a task, apply `change`, save the result, and return it with the history.

        One transaction holding the write lock from the start, so `change` sees
        the latest record and no other process can write in between: if
        `change` raises, nothing is written and the error propagates. `change`
        runs in the store's thread and must not touch Trio. Returns None when
        the session has no pending task.
        """

        def write(db: sqlite3.Connection) -> tuple[TaskRecord, tuple[Message, ...]] | None:
            with self._write(db):
                old, history = self._load(db, session_id)
                if old is None:
                    return None
                record = change(old)
                if record.transcript is old.transcript:
                    # No message added: the fields alone.
                    self._update_fields(db, record, claim=True)
                else:
                    record = self._save(db, record, claim=True)
                return record, history

        return await self._run(write)

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
            with self._write(db):
                self._check_record_held(db, record)
                return self._update_fields(db, record)

        return Submitted(self, self._submit(write, defer=defer))

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
                if runner is not None:
                    self._check_held(db, session_id, runner)
                cur = db.execute(
                    self._MARK,
                    (
                        status.value,
                        cause.value if cause else None,
                        _dumps(error),
                        now,
                        lost_words,
                        *self._marked_line(session_id, status, cause),
                        session_id,
                    ),
                )
            return cur.rowcount > 0

        return Submitted(self, self._submit(write, defer=True))

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
    ) -> None:
        """Record a finished run: its messages become history and the pending task goes.

        `transcript` is the whole conversation (history first); messages past
        those stored are added (a run's own were stored as it went). `window_hash`
        is the window the session belongs to (None outside a terminal). With
        `runner` (the run's own token), a task another runner holds now is left
        alone and `TaskTakenError` is raised.
        """

        def write(db: sqlite3.Connection) -> None:
            with self._write(db):
                if runner is not None:
                    self._check_held(db, session_id, runner)
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
        after = _parse_cursor(cursor) if cursor is not None else None

        def read(db: sqlite3.Connection) -> Page[ListedTask]:
            rows, last = _page_rows(db, _SUMMARY_SELECT, "", prefix, after, limit)
            nxt = None if last is None else _cursor(float(last[9]), str(last[0]))
            return Page(tuple(self._summary(row) for row in rows), nxt)

        return await self._run(read)

    async def list_brief(self, prefix: str = "") -> list[BriefTask]:
        """What a text listing shows of `list_stored`'s tasks: `brief_of` each, read faster.

        A row whose columns read as they should (see `_PLAIN`) is read from
        them as they are, its input, question and error decoded as
        `_task_fields` decodes them, and a running task's runner asked once
        whether it is gone (crashed); any other row is decoded as
        `list_stored` decodes it, so an unreadable task is still listed as one.
        """

        def read(db: sqlite3.Connection) -> list[BriefTask]:
            # Each row is done with as it comes: thousands of them are never all kept.
            rows = db.execute(*_page_query(self._BRIEF_SELECT, "", prefix, None, None))
            out: list[BriefTask] = []
            add = out.append
            others: list[tuple[int, Any]] = []
            gone: dict[str | None, bool] = {}  # by runner: a dead process's tasks share it
            for session_id, status, cause, updated, text, question, error, runner in rows:
                if text is not None:
                    try:
                        shown = _json_text(text)
                        prompt = None
                        if question is not None or error is not None:
                            prompt = _prompt(question, error)
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
            lambda db: self._messages(
                db, session_id, self._session_row(db, session_id), history=True
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
        after = _parse_cursor(cursor) if cursor is not None else None

        def read(db: sqlite3.Connection) -> Page[SessionInfo]:
            rows, last = _page_rows(db, _SESSION_SELECT, "s.", prefix, after, limit)
            items = tuple(self._session_info(r) for r in rows)
            nxt = None if last is None else _cursor(items[-1].updated_at, items[-1].session_id)
            return Page(items, nxt)

        return await self._run(read)

    async def session(self, session_id: str) -> SessionInfo | None:
        """One session's `SessionInfo`, or None."""

        def read(db: sqlite3.Connection) -> SessionInfo | None:
            row = db.execute(f"{_SESSION_SELECT} WHERE s.session_id = ?", (session_id,)).fetchone()
            return None if row is None else self._session_info(row)

        return await self._run(read)

    def _session_info(self, r: Sequence[Any]) -> SessionInfo:
        return SessionInfo(
            session_id=str(r[0]),
            title=str(r[1]),
            created_at=float(r[2]),
            updated_at=float(r[3]),
            messages=int(r[4]),
            window_hash=r[5] if isinstance(r[5], str) else None,
            status=r[6] if isinstance(r[6], str) else None,
            # The task's summary columns, as `list_page` reads them.
            task=self._summary(tuple(r[7:])) if r[7] is not None else None,
        )

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
                    message = _decode_message(body)
                except Exception as exc:  # any malformed shape, whichever error it raises
                    raise StoreError(
                        f"message {seq} of session {session_id!r} in {self.location} is "
                        f"unreadable: {_error_detail(exc)}"
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

    def _task_row(self, db: sqlite3.Connection, session_id: str) -> _TaskRow | None:
        row = db.execute(_TASK_SELECT, (session_id,)).fetchone()
        if row is None:
            return None
        return _TaskRow(tuple(row[: 1 + len(_FIELDS)]), int(row[-2]), int(row[-1]))

    def _all_messages(
        self, db: sqlite3.Connection, session_id: str, session: _SessionRow | None
    ) -> tuple[Message, ...]:
        """Every stored message of a session: from memory when still current, else decoded."""
        if session is None:
            return ()
        cached = self._memory.get(session_id, session.rev)
        if cached is not None and len(cached) == session.next_seq:
            return cached
        rows = db.execute(
            "SELECT seq, body FROM messages WHERE session_id = ? ORDER BY seq", (session_id,)
        ).fetchall()
        task = self._task_row(db, session_id)
        first = task.first_seq if task is not None else len(rows)
        out: list[Message] = []
        for seq, body in rows:
            try:
                out.append(_decode_message(body))
            except Exception as exc:  # any malformed shape, whichever error cattrs raises for it
                if int(seq) >= first:
                    raise self._task_unreadable(session_id, _error_detail(exc)) from None
                raise StoreError(
                    f"the history of session {session_id!r} in {self.location} is unreadable "
                    f"(message {seq}: {_error_detail(exc)})"
                ) from None
        messages = tuple(out)
        self._memory.put(session_id, session.rev, messages)
        return messages

    def _messages(
        self,
        db: sqlite3.Connection,
        session_id: str,
        session: _SessionRow | None,
        *,
        history: bool,
    ) -> tuple[Message, ...]:
        """A session's history (the messages before its pending task), or all its messages."""
        messages = self._all_messages(db, session_id, session)
        if not history:
            return messages
        task = self._task_row(db, session_id)
        return messages if task is None else messages[: task.first_seq]

    def _load(
        self, db: sqlite3.Connection, session_id: str
    ) -> tuple[TaskRecord | None, tuple[Message, ...]]:
        """The pending task of a session and its history (both empty when it has none)."""
        task = self._task_row(db, session_id)
        if task is None:
            return None, ()
        messages = self._all_messages(db, session_id, self._session_row(db, session_id))
        end = task.first_seq + task.message_count
        if len(messages) < end:
            raise self._task_unreadable(
                session_id, f"{end - len(messages)} of its messages are missing"
            )
        return (
            self._record(task.fields, messages[task.first_seq : end]),
            messages[: task.first_seq],
        )

    def _check_record_held(self, db: sqlite3.Connection, record: TaskRecord) -> None:
        """Refuse a running record's write when another runner holds its task now."""
        if record.status is TaskStatus.RUNNING and record.runner is not None:
            self._check_held(db, record.session_id, record.runner)

    def _check_held(self, db: sqlite3.Connection, session_id: str, runner: str) -> None:
        """Raise `TaskTakenError` if the task of `session_id` is recorded with another runner.

        A run's own writes (its commits, its ending) carry its token: a task
        resumed elsewhere meanwhile is the other runner's, and a late write of
        the run that lost it must not undo that runner's work. A task with no
        row is not checked (what becomes of it is the caller's to say).
        """
        row = db.execute("SELECT runner FROM tasks WHERE session_id = ?", (session_id,)).fetchone()
        if row is not None and row[0] is not None and row[0] != runner:
            raise TaskTakenError(
                f"the pending task of session {session_id} was taken over by another runner "
                "(this one had lost its hold on it); this run's change was not saved"
            )

    def _save(
        self, db: sqlite3.Connection, record: TaskRecord, *, claim: bool = False
    ) -> TaskRecord:
        """Write `record` (see `save`) inside the caller's transaction; return it as written.

        `claim` says that the write makes the record's runner the task's (a new
        run, a resume): see `_claimed`.
        """
        session_id = record.session_id
        session = self._session_row(db, session_id)
        task = self._task_row(db, session_id)
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
                transcript = cached[first:] + added
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
        db.execute(self._UPSERT, (session_id, *self._columns(record), first, len(transcript)))
        if claim:
            self._claimed(db, record)
        return record

    def _claimed(self, db: sqlite3.Connection, record: TaskRecord) -> None:
        """A run took the task (inside the claiming transaction); a fleet's store starts its lease."""

    @contextlib.contextmanager
    def _write(self, db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
        """A write transaction (`_write_transaction`) that a fleet's store fences first."""
        with _write_transaction(db):
            self._fence(db)
            yield db

    def _fence(self, db: sqlite3.Connection) -> None:
        """Refuse every write of a member whose lease is not live (`agentrt._pgstore`); none here."""

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
        cached = self._memory.get(session_id, session.rev)
        if cached is not None and len(cached) == start:
            self._memory.put(session_id, rev, cached + added)
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
            db.execute("DELETE FROM sessions WHERE session_id = ?", (session_id,))
            self._memory.drop(session_id)
            return
        rev = session.rev + 1
        db.execute(
            "UPDATE sessions SET next_seq = ?, rev = ? WHERE session_id = ?",
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
        cur = db.execute(self._UPDATE, (*self._columns(record), record.session_id))
        if claim and cur.rowcount > 0:
            self._claimed(db, record)
        return cur.rowcount > 0

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
            updated_at=float(updated) if isinstance(updated, int | float) else None,
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
                **_task_fields(*columns),
                **_journal_fields(fields[15]),
            )
        except Exception as exc:  # any malformed shape, whichever error cattrs raises for it
            raise self._task_unreadable(session_id, _error_detail(exc)) from None

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
                session_id=session_id, messages=int(row[-1]), **_task_fields(*row[1:-1])
            )
        except Exception as exc:  # any malformed shape, whichever error cattrs raises for it
            updated, window = row[1 + _SUMMARY_COLUMNS.index("updated_at")], row[5]
            return UnreadableTask(
                session_id=session_id,
                error=str(self._task_unreadable(session_id, _error_detail(exc))),
                updated_at=float(updated) if isinstance(updated, int | float) else None,
                window_hash=window if isinstance(window, str) else None,
            )

    # -- queueing ------------------------------------------------------------------

    def _submit(self, fn: Callable[[sqlite3.Connection], T], *, defer: bool = False) -> _Call[T]:
        """Queue `fn` for the writer thread; calls run in the order queued.

        With `defer`, the call takes its place in the order now but the
        thread hears of it only when it is waited for or the next call is
        queued: the caller can tell the world something first (a run's final
        event) without paying for waking the thread.
        """
        if self._closed:
            raise StoreError(f"the task store {self.location} is closed")
        call: _Call[T] = _Call(fn, trio.lowlevel.current_trio_token())
        if defer:
            self._deferred.append(call)
            return call
        self._hand_over()
        self._writer.submit(call)
        return call

    def _hand_over(self) -> None:
        """Give the writer thread the deferred calls, in their order."""
        while self._deferred:
            self._writer.submit(self._deferred.popleft())

    async def _wait(self, call: _Call[T]) -> T:
        """The outcome of a queued call.

        Once queued, a call runs, and its caller waits for it even when
        cancelled (as for a worker thread: the cancel is seen at the caller's
        next checkpoint), so that nobody is told a write failed that happened.
        Only a call that can never run (`_Call.abandonable`) is given up on.
        """
        self._hand_over()
        if call.abandonable:
            await call.event.wait()
        else:
            with trio.CancelScope(shield=True):
                await call.event.wait()
        return call.result()

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run `fn` in the writer thread (batched with what is queued with it); its result."""
        return await self._wait(self._submit(fn))


@attrs.define(eq=False)
class TaskStore(SqlStore):
    """Sessions' messages and pending tasks in an SQLite file. Open with `await TaskStore.open(path)`."""

    __repr__ = fields_repr

    #: The query of `list_brief` for a database that keeps any type in any column.
    _BRIEF_SELECT: ClassVar[str] = _brief_select(_PLAIN_TYPED)
    #: Each task's row keeps its listing line (see `_LINE_TRIGGER`).
    _UPSERT: ClassVar[str] = _upsert_sql(line=True)
    _UPDATE: ClassVar[str] = _update_sql(line=True)
    _MARK: ClassVar[str] = _mark_sql(line=True)

    path: Path = attrs.field(kw_only=True)

    def _columns(self, record: TaskRecord) -> tuple[Any, ...]:
        return (*_fields(record), _line_of(record))

    def _marked_line(
        self, session_id: str, status: TaskStatus, cause: Cause | None
    ) -> tuple[Any, ...]:
        return (line_head(session_id, status.value, cause.value if cause else None),)

    async def list_lines(self, prefix: str = "") -> list[str]:
        """`list_brief`'s tasks as `agentrt pending list` shows them, a line each.

        Read from the lines the rows keep, the time put in: a task with no
        line (one changed by hand, or written before lines were kept) or
        running (its process may be gone: crashed) is read in full, as
        `list_brief` reads it.
        """

        def read(db: sqlite3.Connection) -> list[str]:
            rows = db.execute(*_page_query(_LINES_SELECT, "", prefix, None, None))
            out: list[str | None] = []
            add = out.append
            others: list[tuple[int, Any]] = []
            for line, second, session_id in rows:
                if line is None:
                    others.append((len(out), session_id))
                    add(None)
                else:
                    add(line.replace(TIME_MARK, stamp(second), 1))
            for index, brief in self._briefs_in_full(db, others):
                out[index] = listing_lines([brief])[0]
            return [line for line in out if line is not None]

        return await self._run(read)

    @property
    def location(self) -> str:
        """Where the store lives, as its messages name it: the file."""
        return str(self.path)

    @classmethod
    async def open(cls, path: Path | str) -> TaskStore:
        """Open (creating if needed) the store file at `path`.

        Raises `StoreError` when the file is not an agentrt store or was written
        by a newer agentrt.
        """
        path = Path(path)
        db = await trio.to_thread.run_sync(_connect, path)
        return cls(db, path=path)


def _row_of(message: Message, now: float) -> tuple[str, float, str]:
    role, body = _encode_message(message)
    return role, now, body


def _first_user_text(messages: Sequence[Message]) -> str:
    return next((m.content for m in messages if m.role is Role.USER), "")


@attrs.define(eq=False)
class Submitted(Generic[T]):
    """A store call queued by a ``*_nowait`` method; `wait` gives its outcome."""

    __repr__ = fields_repr

    _store: SqlStore
    _call: _Call[T]

    async def wait(self) -> T:
        return await self._store._wait(self._call)


@attrs.frozen
class StoreStatistics:
    """Calls and batches run so far, and calls waiting now."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    calls: int
    batches: int
    waiting: int


@attrs.define(eq=False)
class _Call(Generic[T]):
    """One store call waiting for, or done by, the writer thread."""

    __repr__ = fields_repr

    fn: Callable[[sqlite3.Connection], T]
    token: trio.lowlevel.TrioToken
    event: trio.Event = attrs.field(factory=trio.Event)
    #: True for a call that will never run (a store that stopped working): its
    #: caller may stop waiting when cancelled.
    abandonable: bool = False
    _value: T | None = None
    _error: BaseException | None = None

    def run(self, db: sqlite3.Connection) -> None:
        """Run the call now, in this thread (its outcome is kept; `event` is left alone)."""
        try:
            self._value = self.fn(db)
        except BaseException as exc:
            self._error = exc
            raise

    def fail(self, error: BaseException) -> None:
        self._value, self._error = None, error

    def result(self) -> T:
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]


#: The most calls one batch takes, so that a long queue is served in turns.
_BATCH_LIMIT = 64


@attrs.define(eq=False)
class _Writer:
    """The thread that runs every store call, batching what is queued into one transaction.

    Started with the first call and stopped by `stop`. Results go back to the
    Trio run that queued each call (`TrioToken.run_sync_soon`), one wake-up
    per batch.
    """

    __repr__ = fields_repr

    db: sqlite3.Connection
    location: str
    memory: _Memory
    #: Runs one batch in one transaction (the backend's `_run_batch`).
    run_batch: Callable[[sqlite3.Connection, list[_Call[Any]]], None]
    _queue: queue.SimpleQueue[_Call[Any] | None] = attrs.field(
        factory=queue.SimpleQueue, init=False
    )
    _thread: threading.Thread | None = attrs.field(default=None, init=False)
    _start_lock: threading.Lock = attrs.field(factory=threading.Lock, init=False)
    _calls: int = attrs.field(default=0, init=False)
    _batches: int = attrs.field(default=0, init=False)

    def submit(self, call: _Call[Any]) -> None:
        if self._thread is None:
            with self._start_lock:
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._loop,
                        name=f"agentrt store {Path(self.location).name}",
                        daemon=True,
                    )
                    self._thread.start()
        self._queue.put(call)

    def statistics(self) -> StoreStatistics:
        return StoreStatistics(self._calls, self._batches, self._queue.qsize())

    async def stop(self) -> None:
        """Run what is queued, then end the thread and close the file."""
        thread = self._thread
        if thread is not None:
            self._queue.put(None)
            await trio.to_thread.run_sync(thread.join)
        await trio.to_thread.run_sync(self.db.close)

    def _loop(self) -> None:
        stopping = False
        while not stopping:
            first = self._queue.get()
            if first is None:
                return
            batch = [first]
            while len(batch) < _BATCH_LIMIT:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    stopping = True  # run what came before the stop, then end
                    break
                batch.append(more)
            self.run_batch(self.db, batch)
            self._calls += len(batch)
            self._batches += 1
            _deliver(batch)


def _deliver(batch: list[_Call[Any]]) -> None:
    """Wake the Trio runs waiting for `batch`: one wake-up per run."""
    by_token: dict[trio.lowlevel.TrioToken, list[_Call[Any]]] = {}
    for call in batch:
        by_token.setdefault(call.token, []).append(call)
    for token, calls in by_token.items():
        with contextlib.suppress(trio.RunFinishedError):
            token.run_sync_soon(_set_all, calls)


def _set_all(calls: list[_Call[Any]]) -> None:
    for call in calls:
        call.event.set()


def _run_batch(
    db: sqlite3.Connection,
    batch: list[_Call[Any]],
    location: str,
    memory: _Memory,
    errors: tuple[type[Exception], ...] = (sqlite3.DatabaseError,),
    failed: Callable[[Exception], StoreError] | None = None,
) -> None:
    """Run a batch of calls in one transaction, each in its own savepoint (writer thread).

    A call that fails changes nothing (its savepoint is rolled back) and the
    others still commit. What the store keeps in memory is forgotten whenever
    something is rolled back, so it never holds what the file does not.
    """

    def store_failed(exc: Exception) -> StoreError:
        return StoreError(f"the task store {location} failed: {exc}")

    failed = failed or store_failed
    try:
        db.execute("BEGIN IMMEDIATE")
    except errors as exc:
        for call in batch:
            call.fail(failed(exc))
        return
    ran: list[_Call[Any]] = []
    for call in batch:
        db.execute("SAVEPOINT batch_call")
        try:
            call.run(db)
        except errors as exc:
            db.execute("ROLLBACK TO batch_call")
            memory.clear()
            call.fail(failed(exc))
        except Exception:  # the call's own error (a bad answer, a task that exists): kept
            db.execute("ROLLBACK TO batch_call")
            memory.clear()
        else:
            ran.append(call)
        db.execute("RELEASE batch_call")
    try:
        db.execute("COMMIT")
    except errors as exc:
        memory.clear()
        if db.in_transaction:
            db.execute("ROLLBACK")
        for call in ran:
            call.fail(failed(exc))


def _migrate(db: sqlite3.Connection, version: int) -> None:
    """Bring a store of schema `version` (0: a new file) to `SCHEMA_VERSION`."""
    if version == 0:
        for statement in _SCHEMA:
            db.execute(statement)
        return
    if version < 2:
        # Version 1 had no attempt records (every call counts as never started) and did
        # not record which window a finished session belonged to.
        db.execute("ALTER TABLE tasks ADD COLUMN attempts TEXT NOT NULL DEFAULT '{}'")
        db.execute("ALTER TABLE history ADD COLUMN window_hash TEXT")
        db.execute("ALTER TABLE tasks ADD COLUMN workdir TEXT")
        db.execute("ALTER TABLE tasks ADD COLUMN lost_words INTEGER NOT NULL DEFAULT 0")
    if version < 3:
        _migrate_to_messages(db)  # its new tables keep lines already
    elif version < 4:
        db.execute("ALTER TABLE tasks ADD COLUMN line TEXT")
        db.execute(_LINE_TRIGGER)
    if version >= 3:  # (an older file got the column with its version-3 tables)
        # Version 5 keeps full arguments of calls not run yet and subagents' journals.
        db.execute("ALTER TABLE tasks ADD COLUMN journal TEXT NOT NULL DEFAULT '{}'")
    if version < 4:
        _fill_lines(db)


def _fill_lines(db: sqlite3.Connection) -> None:
    """Version 4: each task's listing line, kept in its row, for the tasks it can be read for.

    A task whose row is not plain (see `_PLAIN`) or whose input, question or error
    cannot be read keeps no line: it is listed from its record, as before.
    """
    lines = []
    for session_id, status, cause, text, question, error in db.execute(
        "SELECT session_id, status, cause, input, NULLIF(question, 'null'), "
        f"NULLIF(error, 'null') FROM tasks WHERE {_PLAIN_TYPED}"
    ).fetchall():
        try:
            line = template(session_id, status, cause, _prompt(question, error), _json_text(text))
        except Exception:  # any malformed value: the task keeps no line
            continue
        if line is not None:
            lines.append((line, session_id))
    db.executemany("UPDATE tasks SET line = ? WHERE session_id = ?", lines)


def _split(text: str) -> list[tuple[str, str]]:
    """A version-2 transcript (a JSON list) as (role, body) rows.

    One that is not a list of objects is kept as a single row holding the text
    as it was: it reads back as unreadable (and can be discarded), as before.
    """
    try:
        items = json.loads(text)
    except ValueError:
        items = None
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        return [("unknown", text)]
    return [(str(item.get("role", "unknown")), _dumps(item)) for item in items]


def _migrate_to_messages(db: sqlite3.Connection) -> None:
    """Version 3: transcripts become message rows; finished history joins them; sessions."""
    db.execute("ALTER TABLE tasks RENAME TO tasks_v2")
    for statement in _SCHEMA:
        db.execute(statement)
    sessions: dict[str, list[Any]] = {}  # id -> [window, title, created, updated, next_seq]

    def add(session_id: str, rows: list[tuple[str, str]], stamp: float) -> int:
        entry = sessions.setdefault(session_id, [None, "", stamp, stamp, 0])
        first = int(entry[4])
        db.executemany(
            "INSERT INTO messages(session_id, seq, role, created_at, body) VALUES (?,?,?,?,?)",
            [(session_id, first + n, role, stamp, body) for n, (role, body) in enumerate(rows)],
        )
        entry[4] = first + len(rows)
        entry[3] = max(float(entry[3]), stamp)
        if not entry[1]:
            entry[1] = _title_of_rows(rows)
        return first

    for session_id, updated, transcript, window in db.execute(
        "SELECT session_id, updated_at, transcript, window_hash FROM history"
    ).fetchall():
        add(str(session_id), _split(transcript), float(updated))
        sessions[str(session_id)][0] = window
    columns = ", ".join(_FIELDS_V4)
    for row in db.execute(f"SELECT session_id, {columns}, transcript FROM tasks_v2").fetchall():
        session_id, fields, transcript = str(row[0]), row[1:-1], row[-1]
        created = fields[_FIELDS_V4.index("created_at")]
        rows = _split(transcript)
        first = add(session_id, rows, float(created) if isinstance(created, int | float) else 0.0)
        if sessions[session_id][0] is None:
            sessions[session_id][0] = fields[_FIELDS_V4.index("window_hash")]
        db.execute(
            f"INSERT INTO tasks(session_id, {columns}, first_seq, message_count) "
            f"VALUES ({', '.join('?' * (len(_FIELDS_V4) + 3))})",
            (session_id, *fields, first, len(rows)),
        )
    db.executemany(
        "INSERT INTO sessions(session_id, window_hash, title, created_at, updated_at, next_seq, "
        "rev) VALUES (?,?,?,?,?,?,1)",
        [(sid, *entry) for sid, entry in sessions.items()],
    )
    db.execute("DROP TABLE tasks_v2")
    db.execute("DROP TABLE history")


def _title_of_rows(rows: list[tuple[str, str]]) -> str:
    for role, body in rows:
        if role == Role.USER.value:
            with contextlib.suppress(ValueError, AttributeError):
                return title_of(str(json.loads(body).get("content", "")))
    return ""


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

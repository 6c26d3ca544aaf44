"""The task store in an embedded SQLite file: `TaskStore`, its schema, its file and its migrations.

The SQL and the logic are `SqlStore`'s (`agentrt.store.sql`); this backend
adds what SQLite needs of them. A change that reads before it writes takes
SQLite's write lock with `BEGIN IMMEDIATE`, so another process on the same
file waits for it. The file uses WAL, so a reader in another process never
waits for a writer. A call is told it is done once what it wrote is on disk
(but a resume's claim, made durable by the next synced commit: see
`SqlStore.update`): the store commits to the WAL without a sync and a thread of
its own fsyncs the WAL before it tells the calls that waited for it, so the
next transaction need not wait for the disk (see `TaskStore._run_batch`).
Without a WAL every commit is synced by SQLite (``synchronous=FULL``). Each
task's row also keeps its listing line, so that `agentrt pending list` reads
one column per task.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Callable
from operator import itemgetter
from pathlib import Path
from typing import Any
from typing import ClassVar
from typing import Final
from typing import cast

import attrs
import trio

from ..config.statedir import fsync_dir
from ..core.cause import Cause
from ..models.messages import Role
from ..present.listing import TIME_MARK
from ..present.listing import line_head
from ..present.listing import lines as listing_lines
from ..present.listing import stamp
from ..present.listing import template
from ..present.listing import templates
from ..vocab.locations import StrPath
from ..vocab.reprs import mutable
from ..vocab.terms import TaskStatus
from .columns import FIELDS
from .columns import dumps
from .columns import json_text
from .columns import prompt_of
from .columns import title_of
from .errors import StoreError
from .record import TaskRecord
from .sql import PLAIN
from .sql import TOKEN_USAGE
from .sql import SqlStore
from .sql import brief_select
from .sql import cursor_of
from .sql import mark_sql
from .sql import page_query
from .sql import seconds_of
from .sql import update_sql
from .sql import upsert_sql
from .sql import write_transaction
from .types import Page
from .writer import Call
from .writer import batches
from .writer import run_batch
from .writer import wake

SCHEMA_VERSION = 8

#: The columns of `tasks` that held a record's fields up to schema version 4: all but
#: ``journal``, which version 5 added.
_FIELDS_V4 = FIELDS[: FIELDS.index("journal")]

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

#: A task's listing line (`agentrt.present.listing.template`) is kept in its row by the store's
#: own writes, each of which writes the line anew. A change that leaves the line as it was
#: (one made by hand, or by a program that does not know it) drops it: a row with no line
#: is listed from its record, so a damaged task is still listed as unreadable.
_LINE_TRIGGER = """
CREATE TRIGGER tasks_line_dropped AFTER UPDATE ON tasks
WHEN NEW.line IS NOT NULL AND NEW.line IS OLD.line
BEGIN UPDATE tasks SET line = NULL WHERE rowid = NEW.rowid; END"""

#: The tasks in a listing's order, each with what `agentrt pending list` reads of it (its
#: status and line: see `_LINES_SELECT`), so that a listing reads the index alone, without
#: looking each task's row up. Every store write sets ``updated_at``, so the entry is
#: written anew at each write whatever it holds.
_TASKS_BY_TIME = "CREATE INDEX tasks_by_time ON tasks(updated_at DESC, session_id, status, line)"

_SCHEMA = (
    _TASKS,
    _TASKS_BY_TIME,
    _LINE_TRIGGER,
    """CREATE TABLE sessions (
    session_id TEXT PRIMARY KEY,
    window_hash TEXT,
    title TEXT NOT NULL DEFAULT '',
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    next_seq INTEGER NOT NULL DEFAULT 0,
    rev INTEGER NOT NULL DEFAULT 0,
    model TEXT
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
    TOKEN_USAGE,
)

#: `PLAIN` for SQLite, which keeps a value of any type in any column: in a plain row, the
#: session id must also be text and the numbers numbers `float` and `int` take, as
#: `_summary` reads them. A value equals itself cast to its column's type only when it is
#: one (and a comparison is cheaper than `typeof`).
_PLAIN_TYPED = (
    f"{PLAIN} AND session_id = CAST(session_id AS TEXT) "
    "AND created_at = CAST(created_at AS REAL) AND updated_at = CAST(updated_at AS REAL) "
    "AND runs = CAST(runs AS INTEGER) AND lost_words = CAST(lost_words AS INTEGER) "
    "AND message_count = CAST(message_count AS INTEGER)"
)
#: The bodies of a session that are not plainly JSON objects (`SqlStore._ODD_BODIES`), by
#: SQLite's strict check: ``json_valid(body, 1)`` from 3.45 on, ``json_valid(body)`` from 3.38
#: (JSON built in) to 3.41. None from 3.42 to 3.44, whose JSON5 support came before the flag
#: that asks for strict JSON, nor before 3.38: each body is then parsed in Python.
_SQLITE = sqlite3.sqlite_version_info
_VALID = "json_valid(body, 1)" if _SQLITE >= (3, 45) else "json_valid(body)"
_ODD_BODIES = (
    None
    if _SQLITE < (3, 38) or (3, 42) <= _SQLITE < (3, 45)
    else f"SELECT seq, {_VALID} FROM messages WHERE session_id = ? "
    f"AND NOT ({_VALID} AND substr(body, 1, 1) = '{{' AND instr(body, '\\u') = 0)"
)
#: The query of `TaskStore.list_lines`: a row's line (None if it has none, or is running),
#: then the second of its last change, or, for a row without a line (read in full), its
#: session id. A column read costs a Python object and calls into SQLite, each under its
#: lock: most rows need no session id, and one with no line needs no second.
_LINES_SELECT = (
    "SELECT CASE WHEN status <> 'running' THEN line END, "
    "CASE WHEN status <> 'running' AND line IS NOT NULL THEN CAST(updated_at AS INTEGER) "
    "ELSE session_id END FROM tasks"
)
#: Whether a row's kept line is read as it is: not running, and its time a number (a row
#: whose time is no number is read in full). 1e999 is SQLite's infinity: every number
#: compares at most equal to it, a text or a blob greater, NULL not at all: in a listing of
#: 100,000 lines, this comparison costs 3 ms where ``typeof(updated_at) IN (...)`` cost 16.
_LINE_KEPT = "status <> 'running' AND updated_at <= 1e999"
#: The query of `TaskStore.line_page`, as `_LINES_SELECT`: a row's line, then the second of
#: its last change, or for a row without one its session id. Each row is the page's item as
#: it comes (a line and its second): nothing is made of a row in Python.
_LINE_PAGE_SELECT = (
    f"SELECT CASE WHEN {_LINE_KEPT} THEN line END, "
    f"CASE WHEN {_LINE_KEPT} AND line IS NOT NULL THEN CAST(updated_at AS INTEGER) "
    "ELSE session_id END FROM tasks"
)
#: What a page's cursor names of its last row, read by itself in the same transaction: read
#: with every row (two objects more a row, and a loop to take them out), they made reading
#: a page of 1,000 lines cost some 17 % more.
_PAGE_KEY_SELECT = "SELECT updated_at, session_id FROM tasks"
_FIRST: Final = itemgetter(0)

#: No second a row can hold: what `TaskStore.list_lines` compares its first row's with.
_NO_SECOND = object()


def _line_of(record: TaskRecord) -> str | None:
    """The listing line `record`'s row keeps (`agentrt.present.listing.template`), or None."""
    question = record.question
    return template(
        record.session_id,
        record.status.value,
        record.cause.value if record.cause else None,
        question.prompt if question is not None else None,
        record.input,
    )


@mutable(eq=False)
class TaskStore(SqlStore):
    """Sessions' messages and pending tasks in an SQLite file. Open with `await TaskStore.open(path)`."""

    #: The query of `list_brief` for a database that keeps any type in any column.
    _BRIEF_SELECT: ClassVar[str] = brief_select(_PLAIN_TYPED)
    #: Each task's row keeps its listing line (see `_LINE_TRIGGER`).
    _UPSERT: ClassVar[str] = upsert_sql(line=True)
    _UPDATE: ClassVar[str] = update_sql(line=True)
    _MARK: ClassVar[str] = mark_sql(line=True)
    _ODD_BODIES: ClassVar[str | None] = _ODD_BODIES

    path: Path = attrs.field(kw_only=True)
    #: The file's write-ahead log, as SQLite names it; None when the file is not in WAL
    #: mode (every batch with a synced call then commits with ``FULL``).
    wal: Path | None = attrs.field(default=None, kw_only=True)

    def _columns(self, record: TaskRecord) -> tuple[Any, ...]:
        return (*super()._columns(record), _line_of(record))

    #: Syncs the WAL for the calls committed without a sync, then tells them (WAL mode).
    _syncer: _Syncer | None = attrs.field(default=None, init=False, repr=False)
    #: The ``synchronous`` level the connection commits with now.
    _level: str = attrs.field(default="FULL", init=False, repr=False)
    #: Set by the syncer when a sync failed: the writer forgets what it keeps in memory.
    _forget_soon: bool = attrs.field(default=False, init=False, repr=False)
    #: Whether the connection is set for a batch run in the Trio thread (`_run_here`): no
    #: waiting for another connection's lock, no checkpoint at a commit.
    _set_here: bool = attrs.field(default=False, init=False, repr=False)
    #: Batches run in the Trio thread since the writer thread last ran one (`_run_here`).
    _here_runs: int = attrs.field(default=0, init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self._writer.finish = self._finish
        if self.wal is not None:
            self._writer.run_here = self._run_here

    def _run_here(self, db: sqlite3.Connection, batch: list[Call[Any]]) -> bool:
        """Run `batch` in the Trio thread, as `_run_batch` would in the writer's (WAL mode).

        For the small calls that may (`Call.here`: a stop's write, a status, a claim
        whose history is in memory), handed over while the writer thread is idle: they
        cost the event loop about what waking the thread and being woken back would
        (~100 us a cycle on a shared machine), without either hop. Nothing here waits:

        - The transaction begins with no busy timeout: while another connection holds
          the file's write lock, nothing is done (False) and the batch goes to the
          writer thread, which waits for the lock as every batch there does.
        - A commit here never checkpoints the WAL (a checkpoint syncs the file and may
          copy thousands of pages). SQLite checkpoints at the commit that finds the WAL
          long enough, so one batch in `_HERE_RUNS` goes to the writer thread whatever
          it is: a long WAL is checkpointed there, at most that many batches late.
        - The sync a synced call waits for is the syncer thread's, as ever (a commit
          here is ``synchronous=NORMAL``): only a claim, which needs none, is told at once.
        """
        wal = self.wal
        if wal is None or self._here_runs >= _HERE_RUNS:
            return False
        if not self._set_here:
            db.execute("PRAGMA busy_timeout=0")
            db.execute("PRAGMA wal_autocheckpoint=0")
            self._set_here = True
        self._set_level(db, "NORMAL")
        try:
            db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError:
            return False  # another connection writes: the writer thread waits for it
        self._here_runs += 1
        self._in_wal(db, batch, wal, begun=True)
        return True

    def _run_batch(self, db: sqlite3.Connection, batch: list[Call[Any]]) -> bool:
        """As `SqlStore._run_batch`; in WAL mode the disk is waited for beside the writer.

        Without a WAL every transaction commits with ``synchronous=FULL``: on disk
        before the commit returns. In WAL mode it commits with ``NORMAL`` (written
        to the WAL, not fsynced), its unsynced calls (a resume's claim) are told at
        once, and the synced ones are handed to the syncer thread, which fsyncs the
        WAL, as ``FULL`` would have done inside the commit, and only then tells
        them. Meanwhile the writer goes on with the next batch: a claim queued just
        after a pause's write does not wait for that write's sync. What a later
        batch writes is in the WAL after it, so the sync that tells a later synced
        call has every earlier commit on disk too; and one sync tells every call
        that waited for it (group commit). A transaction that wrote nothing (a
        read) is told at once.
        """
        if self.wal is None:
            self._forget_if_unsynced()
            self._set_level(db, "FULL")
            return super()._run_batch(db, batch)
        self._here_runs = 0
        if self._set_here:
            db.execute(f"PRAGMA busy_timeout={_BUSY_TIMEOUT_MS}")
            db.execute(f"PRAGMA wal_autocheckpoint={_AUTOCHECKPOINT}")
            self._set_here = False
        self._set_level(db, "NORMAL")
        return self._in_wal(db, batch, self.wal)

    def _forget_if_unsynced(self) -> None:
        """Forget what is kept in memory if a sync failed since the last batch (`_sync_failed`)."""
        if self._forget_soon:
            self._forget_soon = False
            self._memory.clear()

    def _in_wal(
        self, db: sqlite3.Connection, batch: list[Call[Any]], wal: Path, *, begun: bool = False
    ) -> bool:
        """Run `batch` in WAL mode (see `_run_batch`), in whichever thread; whether it committed."""
        self._forget_if_unsynced()
        changes = db.total_changes
        committed = run_batch(db, batch, self.location, self._memory.clear, begun=begun)
        # A transaction that changed nothing (reads) has nothing of its own to sync.
        if committed and db.total_changes != changes:
            waiting = [call for call in batch if call.synced and call.succeeded]
            if waiting:
                for call in waiting:
                    call.told = True  # by the syncer, once the WAL is on disk
                self._syncing(wal).hand(waiting)
        return committed

    def _set_level(self, db: sqlite3.Connection, level: str) -> None:
        if level != self._level:
            db.execute(f"PRAGMA synchronous={level}")
            self._level = level

    def _syncing(self, wal: Path) -> _Syncer:
        if self._syncer is None:
            self._syncer = _Syncer(wal, self.location, self._sync_failed)
        return self._syncer

    def _sync_failed(self) -> None:
        self._forget_soon = True

    def _finish(self) -> None:
        """Sync what is still waiting for it, while the WAL exists (closing the file ends it)."""
        if self._syncer is not None:
            self._syncer.stop()

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
            rows = db.execute(*page_query(_LINES_SELECT, "", prefix, None, None))
            out: list[str | None] = []
            add = out.append
            others: list[tuple[int, Any]] = []
            # Rows come by time: most share the second of the row before, and its time.
            last: object = _NO_SECOND
            shown = ""
            for line, second_or_session in rows:
                if line is None:
                    others.append((len(out), second_or_session))
                    add(None)
                else:
                    if second_or_session != last:
                        last, shown = second_or_session, stamp(second_or_session)
                    add(line.replace(TIME_MARK, shown, 1))
            if not others:
                return cast(list[str], out)
            for index, brief in self._briefs_in_full(db, others):
                out[index] = listing_lines([brief])[0]
            return [line for line in out if line is not None]

        return await self._run(read)

    async def line_page(
        self, prefix: str = "", *, limit: int | None = None, cursor: str | None = None
    ) -> Page[tuple[str, int]]:
        """One page of `list_lines`, each line with its time left out, and that time.

        Read from the lines the rows keep, as `list_lines` reads them: a line
        holds `TIME_MARK` where its time goes, beside the second of the task's
        last change (`agentrt.present.listing.filled` puts it in).
        """
        after = self._after(cursor)

        def read(db: sqlite3.Connection) -> Page[tuple[str, int]]:
            rows: list[Any] = db.execute(
                *page_query(_LINE_PAGE_SELECT, "", prefix, after, limit)
            ).fetchall()
            nxt = None
            if limit is not None and len(rows) > limit:
                del rows[limit:]
                if rows:
                    sql, args = page_query(_PAGE_KEY_SELECT, "", prefix, after, None)
                    key = db.execute(f"{sql} LIMIT 1 OFFSET ?", (*args, limit - 1)).fetchone()
                    nxt = cursor_of(key[0], str(key[1]))
            if None in map(_FIRST, rows):  # a row without its line (one in C, not a loop)
                others = [(index, row[1]) for index, row in enumerate(rows) if row[0] is None]
                for index, brief in self._briefs_in_full(db, others):
                    rows[index] = (templates([brief])[0], int(brief[4]))
                rows = [row for row in rows if row[0] is not None]  # a task gone by now
            return Page(tuple(rows), nxt)

        return await self._run(read)

    @property
    def location(self) -> str:
        """Where the store lives, as its messages name it: the file."""
        return str(self.path)

    @property
    def private_paths(self) -> tuple[Path, ...]:
        """The store's file, the files SQLite keeps beside it, and its creation marker."""
        path = self.path
        beside = (path.with_name(path.name + suffix) for suffix in _SIDE_FILES)
        return (path, *beside, marker_path(path))

    @classmethod
    async def open(cls, path: StrPath) -> TaskStore:
        """Open (creating if needed) the store file at `path`.

        Raises `StoreError` when the file is not an agentrt store or was written
        by a newer agentrt.
        """
        path = Path(path)
        db, wal = await trio.to_thread.run_sync(_connect, path)
        return cls(db, path=path, wal=wal)


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
    if 3 <= version < 5:  # (an older file got the column with its version-3 tables)
        # Version 5 keeps full arguments of calls not run yet and subagents' journals.
        db.execute("ALTER TABLE tasks ADD COLUMN journal TEXT NOT NULL DEFAULT '{}'")
    if 3 <= version < 6:  # (as for the journal)
        # Version 6 keeps the model chosen for a session.
        db.execute("ALTER TABLE sessions ADD COLUMN model TEXT")
    if version < 4:
        _fill_lines(db)
    if 3 <= version < 7:  # (an older file got the table with its version-3 tables)
        # Version 7 keeps the tokens of each run (`token_usage`).
        db.execute(TOKEN_USAGE)
    if 3 <= version < 8:  # (as for the token usage)
        # Version 8's index of tasks by time holds what a listing reads (made even where
        # the old one was dropped by hand).
        db.execute("DROP INDEX IF EXISTS tasks_by_time")
        db.execute(_TASKS_BY_TIME)


def _fill_lines(db: sqlite3.Connection) -> None:
    """Version 4: each task's listing line, kept in its row, for the tasks it can be read for.

    A task whose row is not plain (see `PLAIN`) or whose input, question or error
    cannot be read keeps no line: it is listed from its record, as before.
    """
    lines = []
    for session_id, status, cause, text, question, error in db.execute(
        "SELECT session_id, status, cause, input, NULLIF(question, 'null'), "
        f"NULLIF(error, 'null') FROM tasks WHERE {_PLAIN_TYPED}"
    ).fetchall():
        try:
            line = template(session_id, status, cause, prompt_of(question, error), json_text(text))
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
    return [(str(item.get("role", "unknown")), dumps(item)) for item in items]


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
        first = add(session_id, rows, seconds_of(created) or 0.0)
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


#: How long a connection of the store waits for another's lock, in milliseconds.
_BUSY_TIMEOUT_MS: Final = 5000
#: SQLite's own default: a commit that leaves the WAL this many pages long checkpoints it.
_AUTOCHECKPOINT: Final = 1000
#: At most this many batches in a row run in the Trio thread (`TaskStore._run_here`).
_HERE_RUNS: Final = 16

#: Syncs a file's data (and the size it needs) to disk, as SQLite syncs its WAL.
_datasync = getattr(os, "fdatasync", os.fsync)


@mutable(eq=False)
class _Syncer:
    """The thread that fsyncs a store's WAL for the calls committed without a sync.

    The writer thread hands it the synced calls of each batch it committed with
    ``synchronous=NORMAL`` (`TaskStore._run_batch`) and goes on; this thread
    fsyncs the WAL once for everything handed to it meanwhile, then wakes those
    calls, or fails them when the sync failed: committed, but not known to be on
    disk (and `failed` is called, so the writer forgets what it keeps in memory).
    """

    wal: Path
    location: str
    failed: Callable[[], None]
    _queue: queue.SimpleQueue[list[Call[Any]] | None] = attrs.field(
        factory=queue.SimpleQueue, init=False
    )
    _thread: threading.Thread | None = attrs.field(default=None, init=False)

    def hand(self, calls: list[Call[Any]]) -> None:
        """Sync, then tell `calls` (from the writer thread, which starts this one)."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._loop, name=f"agentrt store sync {self.wal.name}", daemon=True
            )
            self._thread.start()
        self._queue.put(calls)

    def stop(self) -> None:
        """Sync and tell what was handed, then end the thread (blocks: a worker thread's)."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()

    def _loop(self) -> None:
        for calls in batches(self._queue):
            try:
                _sync(self.wal)
            except OSError as exc:
                self.failed()
                _fail_all(calls, StoreError(f"the task store {self.location} failed: {exc}"))
            wake(calls)
            del calls  # not held while the next calls are waited for (see `batches`)


def _fail_all(calls: list[Call[Any]], error: StoreError) -> None:
    """Fail each of `calls` (a loop of its own: its variable, the last call, goes with it)."""
    for call in calls:
        call.fail(error)


def _sync(path: Path) -> None:
    """Flush `path` (the store's WAL) to disk: what ``synchronous=FULL`` does at a commit.

    Opened for each sync, so the file synced is always the one of that name now.
    SQLite takes no lock on its WAL file, so closing this descriptor drops none.
    """
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        _datasync(fd)
    finally:
        os.close(fd)


def _wal_of(db: sqlite3.Connection) -> Path | None:
    """The WAL file of the open store `db`, as SQLite names it; None if not in WAL mode."""
    if str(db.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
        return None
    for _, name, file in db.execute("PRAGMA database_list").fetchall():
        if name == "main" and file:
            return Path(f"{file}-wal")
    return None


#: How an SQLite file begins, and the byte of its header that is 2 in WAL mode (its read
#: version; see https://www.sqlite.org/fileformat.html).
_HEADER: Final = b"SQLite format 3\x00"
_READ_VERSION: Final = 18


def _refuse_planted_journal(path: Path) -> None:
    """Refuse to open a store in WAL mode that has a rollback journal beside it.

    The store keeps its changes in its write-ahead log and never writes a
    rollback journal, yet SQLite plays back one it finds at the start, before
    it reads the log: such a file was left by something else (a tool, where
    the store lies in its working folder) and would rewrite the store.
    """
    journal = path.with_name(path.name + "-journal")
    try:
        if journal.stat().st_size == 0:
            return  # nothing to play back
        with open(path, "rb") as file:
            header = file.read(_READ_VERSION + 1)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise StoreError(f"cannot open the task store {path}: {exc.strerror or exc}") from None
    if header.startswith(_HEADER) and header[_READ_VERSION:] == b"\x02":
        raise StoreError(
            f"{journal} lies beside the task store {path}, which keeps its changes in a "
            "write-ahead log and never writes a rollback journal: something else wrote it, "
            "and opening the store would apply it. Move it away (keep it, to see what wrote "
            "it) and start again"
        )


def _connect(path: Path) -> tuple[sqlite3.Connection, Path | None]:
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
    _refuse_planted_journal(path)
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
        # FULL: a commit is on disk before it returns, so what the store says it kept
        # survives a power cut too, not only a killed process. In WAL mode the store's
        # writer commits with NORMAL and syncs the WAL itself (`TaskStore._run_batch`).
        db.execute("PRAGMA synchronous=FULL")
        db.execute(f"PRAGMA busy_timeout={_BUSY_TIMEOUT_MS}")
        if version < SCHEMA_VERSION:
            with write_transaction(db):
                _migrate(db, version)
                db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        db.execute("SELECT count(*) FROM tasks").fetchone()
        wal = _wal_of(db)
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
    return db, wal

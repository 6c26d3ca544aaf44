"""The task store in PostgreSQL: one database shared by a fleet of daemons.

The same store as the embedded SQLite one (`agentrt._store.SqlStore` holds
the logic and the SQL of both): append-only messages, summary listings, paging
cursors, one writer thread that commits what is queued in one transaction. A
transaction takes the fleet's write lock first (a transaction-level advisory
lock), as SQLite's ``BEGIN IMMEDIATE`` takes the file's: a read-check-write
(create, resume, discard) cannot interleave with another daemon's.

Every process that opens the store is a member of the fleet: a row in
``daemons`` whose lease its heartbeat renews (`agentrt._fleet`). A task's
``runner`` names the member running it, so a task is leased for as long as
its runner's lease lives; a member whose lease expired has its running tasks
turned into interrupted ones (cause ``disconnect``) by whichever member
notices first.

Driver: psycopg 3, blocking, in the store's writer thread (and the fleet's
worker threads); its LISTEN connection is driven by Trio directly (see
`agentrt._fleet`).
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import socket
import sqlite3
from typing import Any, Final, cast

import attrs
import psycopg
import psycopg.conninfo
import trio

from ._process import process_token
from ._record import TaskRecord
from ._reprs import fields_repr
from ._store import SqlStore, StoreError, _Call, _run_batch

#: The version of the schema this agentrt writes (table ``agentrt_schema``).
SCHEMA_VERSION: Final = 1
#: Seconds a member's lease lasts from its last heartbeat.
DEFAULT_LEASE: Final = 10.0
#: The first key of every advisory lock agentrt takes ('agrt'); the second is the schema's.
LOCK_CLASS: Final = 0x61677274
#: The database's clock, as seconds since the epoch: every lease is on this one clock.
NOW: Final = "extract(epoch from clock_timestamp())"

_TABLES = (
    """CREATE TABLE tasks (
    session_id text COLLATE "C" PRIMARY KEY,
    status text NOT NULL,
    cause text,
    error text,
    question text,
    window_hash text,
    task_hash text,
    runs integer NOT NULL,
    created_at double precision NOT NULL,
    updated_at double precision NOT NULL,
    input text NOT NULL,
    runner text,
    attempts text NOT NULL DEFAULT '{}',
    workdir text,
    lost_words integer NOT NULL DEFAULT 0,
    first_seq integer NOT NULL DEFAULT 0,
    message_count integer NOT NULL DEFAULT 0
)""",
    "CREATE INDEX tasks_by_time ON tasks(updated_at DESC, session_id)",
    "CREATE INDEX tasks_running ON tasks(runner) WHERE status = 'running'",
    "CREATE INDEX tasks_by_hash ON tasks(task_hash) WHERE status = 'running'",
    """CREATE TABLE sessions (
    session_id text COLLATE "C" PRIMARY KEY,
    window_hash text,
    title text NOT NULL DEFAULT '',
    created_at double precision NOT NULL,
    updated_at double precision NOT NULL,
    next_seq integer NOT NULL DEFAULT 0,
    rev integer NOT NULL DEFAULT 0
)""",
    "CREATE INDEX sessions_by_time ON sessions(updated_at DESC, session_id)",
    """CREATE TABLE messages (
    session_id text COLLATE "C" NOT NULL,
    seq integer NOT NULL,
    role text NOT NULL,
    created_at double precision NOT NULL,
    body text NOT NULL,
    PRIMARY KEY (session_id, seq)
)""",
    """CREATE TABLE questions (
    id text PRIMARY KEY,
    member text NOT NULL,
    session_id text NOT NULL,
    task_hash text,
    agent_path text NOT NULL DEFAULT '',
    request text NOT NULL,
    posted_at double precision NOT NULL
)""",
    """CREATE TABLE daemons (
    id text PRIMARY KEY,
    host text NOT NULL,
    pid integer NOT NULL,
    started_at double precision NOT NULL,
    beat_at double precision NOT NULL,
    lease_until double precision NOT NULL,
    http text,
    listens text NOT NULL DEFAULT ''
)""",
)

#: The statements that bring the schema from version N - 1 to version N.
MIGRATIONS: Final[dict[int, tuple[str, ...]]] = {1: _TABLES}


def display_url(url: str) -> str:
    """`url` as messages show it: ``postgresql://USER@HOST:PORT/DB``, never the password."""
    try:
        parts = psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "postgresql://(an unreadable URL)"
    user = f"{parts['user']}@" if parts.get("user") else ""
    host = str(parts.get("host") or "localhost")
    port = f":{parts['port']}" if parts.get("port") else ""
    schema = _search_path(str(parts.get("options") or ""))
    shown = f"postgresql://{user}{host}{port}/{parts.get('dbname') or ''}"
    return f"{shown} (schema {schema})" if schema else shown


def _search_path(options: str) -> str | None:
    found = re.search(r"search_path\s*=\s*([^\s]+)", options)
    return found.group(1) if found else None


def _unreachable(location: str, exc: Exception) -> StoreError:
    detail = " ".join(str(exc).split()) or type(exc).__name__
    return StoreError(
        f"the PostgreSQL task store {location} cannot be reached ({detail}); runs fail until "
        "it answers again, and nothing it has stored is lost"
    )


def _failed(location: str, exc: Exception) -> StoreError:
    if isinstance(exc, psycopg.OperationalError):
        return _unreachable(location, exc)
    detail = " ".join(str(exc).split()) or type(exc).__name__
    return StoreError(f"the PostgreSQL task store {location} failed: {detail}")


def new_member_id() -> str:
    """A fleet member's id: ``fleet:HOST:PID:START:RANDOM`` (see `agentrt._process`)."""
    host = socket.gethostname().replace(":", "-") or "localhost"
    return f"fleet:{host}:{process_token()}:{secrets.token_hex(3)}"


_PARAMETER = re.compile(r"\?")


@attrs.define(eq=False)
class PgConnection:
    """A psycopg connection speaking what the store's SQL needs of `sqlite3.Connection`.

    ``?`` parameters become ``%s``; ``BEGIN IMMEDIATE`` opens a transaction and
    takes the fleet's write lock. A connection that broke (the server restarted,
    the network went) is opened again at the next transaction, so an outage
    fails the calls made during it and no later ones.
    """

    __repr__ = fields_repr

    conninfo: str
    lock_key: int
    _conn: psycopg.Connection[Any] | None = attrs.field(default=None, init=False)
    _sql: dict[str, str] = attrs.field(factory=dict, init=False)

    @property
    def in_transaction(self) -> bool:
        conn = self._conn
        return conn is not None and conn.info.transaction_status not in (
            psycopg.pq.TransactionStatus.IDLE,
            psycopg.pq.TransactionStatus.UNKNOWN,
        )

    def connection(self) -> psycopg.Connection[Any]:
        """The open connection, opened (again) if there is none or it broke."""
        conn = self._conn
        if conn is None or conn.closed or conn.broken:
            self.discard()
            conn = self._conn = connect(self.conninfo)
        return conn

    def execute(self, sql: str, parameters: Any = ()) -> psycopg.Cursor[Any]:
        if sql == "BEGIN IMMEDIATE":
            conn = self.connection()
            conn.execute("BEGIN")
            return conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", (LOCK_CLASS, self.lock_key))
        conn = self._conn if self._conn is not None else self.connection()
        if not parameters:  # no placeholders to fill: the text goes as it is
            return conn.execute(cast(Any, sql))
        return conn.execute(cast(Any, self._translate(sql)), parameters)

    def executemany(self, sql: str, rows: Any) -> None:
        conn = self._conn if self._conn is not None else self.connection()
        with conn.cursor() as cursor:
            cursor.executemany(cast(Any, self._translate(sql)), list(rows))

    def discard(self) -> None:
        """Drop the connection (broken, or the store closing); the next use opens another."""
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                conn.close()

    def close(self) -> None:
        self.discard()

    def _translate(self, sql: str) -> str:
        out = self._sql.get(sql)
        if out is None:
            out = self._sql[sql] = _PARAMETER.sub("%s", sql.replace("%", "%%"))
        return out


def connect(conninfo: str, *, timeout: float = 5.0) -> psycopg.Connection[Any]:
    """An autocommit connection (transactions are begun by hand, as with SQLite's)."""
    return psycopg.connect(conninfo, autocommit=True, connect_timeout=max(1, round(timeout)))


@attrs.define(eq=False)
class PgStore(SqlStore):
    """The task store in a PostgreSQL database. Open with `await PgStore.open(url)`."""

    __repr__ = fields_repr

    url: str = attrs.field(kw_only=True, repr=False)
    #: The NOTIFY channel of this database schema's fleet.
    channel: str = attrs.field(kw_only=True)
    #: Seconds a member's lease lasts from its last heartbeat.
    lease: float = attrs.field(kw_only=True, default=DEFAULT_LEASE)
    #: The second key of the fleet's write lock (the schema's).
    lock_key: int = attrs.field(kw_only=True)
    _display: str = attrs.field(kw_only=True)

    @property
    def location(self) -> str:
        """The database, as messages name it (no password)."""
        return self._display

    @classmethod
    async def open(
        cls, url: str, *, lease: float = DEFAULT_LEASE, http: str | None = None
    ) -> PgStore:
        """Connect to the database at `url`, create or migrate its schema, join the fleet.

        The schema is the first of the connection's ``search_path`` (pass
        ``?options=-csearch_path%3DNAME`` in the URL for another than
        ``public``). Raises `StoreError` saying what is wrong.
        """
        display = display_url(url)
        runner = new_member_id()

        def start() -> tuple[str, int]:
            try:
                conn = connect(url)
            except psycopg.Error as exc:
                raise _unreachable(display, exc) from None
            try:
                return _prepare(conn, display, runner, lease, http)
            except psycopg.Error as exc:
                raise _failed(display, exc) from None
            finally:
                conn.close()

        channel, key = await trio.to_thread.run_sync(start)
        db = PgConnection(url, key)
        return cls(
            cast(sqlite3.Connection, db),
            runner=runner,
            url=url,
            channel=channel,
            lease=lease,
            lock_key=key,
            display=display,
        )

    def _run_batch(self, db: sqlite3.Connection, batch: list[_Call[Any]]) -> None:
        location = self.location
        try:
            _run_batch(
                db,
                batch,
                location,
                self._memory,
                errors=(psycopg.Error,),
                failed=lambda exc: _failed(location, exc),
            )
        except psycopg.Error as exc:
            # The connection broke between statements: nothing of the batch committed.
            self._memory.clear()
            cast(PgConnection, db).discard()
            for call in batch:
                call.fail(_failed(location, exc))

    async def aclose(self) -> None:
        """Finish the queued calls, close, and leave the fleet (this member's row goes)."""
        if self._closed:
            return
        await super().aclose()

        def leave() -> None:
            with contextlib.suppress(psycopg.Error), connect(self.url) as conn:
                conn.execute("DELETE FROM daemons WHERE id = %s", (self.runner,))

        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(leave)

    def _claimed(self, db: sqlite3.Connection, record: TaskRecord) -> None:
        """Refuse to take a task while this member's own lease has lapsed.

        A member cut off from the database past its lease may have had its
        tasks taken over; until its heartbeat renews the lease, it takes none.
        """
        row = db.execute(
            f"SELECT lease_until > {NOW} FROM daemons WHERE id = ?", (self.runner,)
        ).fetchone()
        if row is None or not row[0]:
            raise StoreError(
                f"this agentrt process's lease in the fleet at {self.location} has lapsed "
                "(it was cut off from the database); it takes no task until it is renewed"
            )


def _prepare(
    conn: psycopg.Connection[Any], display: str, runner: str, lease: float, http: str | None
) -> tuple[str, int]:
    """Create or migrate the schema, register `runner`; the NOTIFY channel and the lock key."""
    schema = conn.execute("SELECT current_schema()").fetchone()
    if schema is None or schema[0] is None:
        path = conn.execute("SHOW search_path").fetchone()
        raise StoreError(
            f"the PostgreSQL task store {display} has no schema to use (search_path "
            f"{path[0] if path else '?'} names none that exists); create it "
            "(CREATE SCHEMA NAME) or name another in the URL"
        )
    name = str(schema[0])
    row = conn.execute("SELECT hashtext(%s)", (f"agentrt {name}",)).fetchone()
    assert row is not None
    key = int(row[0])
    with conn.transaction():
        # One member migrates; the others wait here and find it done.
        conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", (LOCK_CLASS, key))
        version = _version(conn)
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"the PostgreSQL task store {display} has schema version {version}, newer than "
                f"this agentrt understands ({SCHEMA_VERSION}); upgrade agentrt or use another "
                "database or schema"
            )
        if version == 0:
            conn.execute("CREATE TABLE agentrt_schema (version integer NOT NULL)")
            conn.execute("INSERT INTO agentrt_schema VALUES (0)")
        for step in range(version + 1, SCHEMA_VERSION + 1):
            for statement in MIGRATIONS[step]:
                conn.execute(cast(Any, statement))
            conn.execute("UPDATE agentrt_schema SET version = %s", (step,))
        conn.execute(
            f"INSERT INTO daemons(id, host, pid, started_at, beat_at, lease_until, http) "
            f"VALUES (%s, %s, %s, {NOW}, {NOW}, {NOW} + %s, %s)",
            (runner, socket.gethostname(), os.getpid(), lease, http),
        )
    channel = "agentrt_" + re.sub(r"[^a-z0-9_]", "_", name.lower())
    return channel[:63], key


def _version(conn: psycopg.Connection[Any]) -> int:
    exists = conn.execute("SELECT to_regclass('agentrt_schema')").fetchone()
    if exists is None or exists[0] is None:
        tasks = conn.execute("SELECT to_regclass('tasks')").fetchone()
        if tasks is not None and tasks[0] is not None:
            raise StoreError(
                "the database schema holds a table 'tasks' that is not agentrt's; name another "
                "schema in the URL (?options=-csearch_path%3DNAME)"
            )
        return 0
    row = conn.execute("SELECT version FROM agentrt_schema").fetchone()
    return int(row[0]) if row is not None else 0

"""The task store in PostgreSQL: one database shared by a fleet of daemons.

The same store as the embedded SQLite one (`agentrt.store.sql.SqlStore`
holds the logic and the SQL of both): append-only messages, summary listings, paging
cursors, one writer thread that commits what is queued in one transaction. A
transaction takes the fleet's write lock first (a transaction-level advisory
lock), as SQLite's ``BEGIN IMMEDIATE`` takes the file's: a read-check-write
(create, resume, discard) cannot interleave with another daemon's.

Every process that opens the store is a member of the fleet: a row in
``daemons`` whose lease its heartbeat renews (`agentrt.fleet.member`). A task's
``runner`` names the member running it, so a task is leased for as long as
its runner's lease lives; a member whose lease expired has its running tasks
turned into interrupted ones (cause ``disconnect``) by whichever member
notices first.

**Fencing.** A member's lease has an *epoch*, a number drawn from the
sequence ``lease_epochs`` when the member joins and again whenever it joins
once more after its lease ran out; epochs are never reused. Every write of
the store carries the epoch the member held when the write was queued, and
the write's own transaction first checks, under the write lock, that it is the
member's epoch in ``daemons`` and that the lease is live there; a task a run
takes records the epoch it was taken under (``tasks.epoch``), and a run's
later writes to it must carry that epoch. Any other write is refused by the
database (`StaleLeaseError`) and changes nothing: a member that stalled past
its lease, or was cut off from the database, cannot write over the work of
the member that took its tasks, even a moment after it wakes.

Driver: psycopg 3, blocking, in the store's writer thread (and the fleet's
worker threads), or, for the small calls made while that thread is idle, in a
greenlet of the Trio thread whose waits for the server are the event loop's
(`PgStore._run_here`, `agentrt.store.green`), through a pool (psycopg_pool); a batch that finds its
connection broken as its transaction begins goes once more on a new one, so
the first call after an outage reconnects instead of failing; the LISTEN connection is driven by Trio directly (see
`agentrt.fleet.member`). The store's statements go through libpq's pipeline
mode, what one round trip carries in one pipeline, each prepared on its
connection the first time it is sent (`PgConnection._run`): the server parses
and plans it once, and psycopg's own preparing is off, since it deallocates
every prepared statement of a connection at a rollback.
"""

from __future__ import annotations

import contextlib
import ipaddress
import math
import os
import re
import secrets
import socket
import sqlite3
import time
import weakref
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from typing import ClassVar
from typing import Final
from typing import TypeVar
from typing import cast

import attrs
import psycopg
import psycopg.conninfo
import psycopg.errors
import trio
from psycopg import pq
from psycopg.abc import Transformer
from psycopg.adapt import PyFormat
from psycopg_pool import ConnectionPool
from psycopg_pool import PoolClosed
from psycopg_pool import PoolTimeout

from ..core.process import process_token
from ..models.messages import Message
from ..vocab.reprs import mutable
from . import green
from .errors import StaleLeaseError
from .errors import StoreError
from .record import TaskRecord
from .sql import TOKEN_USAGE
from .sql import SqlStore
from .writer import Call
from .writer import LastCallUndone
from .writer import run_batch
from .writer import synced

#: The version of the schema this agentrt writes (table ``agentrt_schema``).
SCHEMA_VERSION: Final = 5
#: Seconds a member's lease lasts from its last heartbeat.
DEFAULT_LEASE: Final = 10.0
#: The first key of every advisory lock agentrt takes ('agrt'); the second is the schema's.
LOCK_CLASS: Final = 0x61677274
#: The database's clock, as seconds since the epoch: every lease is on this one clock.
NOW: Final = "extract(epoch from clock_timestamp())"
#: Seconds a store call waits for a working connection before it fails (the database is away).
CONNECT_WAIT: Final = 5.0
#: Seconds a batch that would run in the Trio thread waits for the pool's connection before
#: it goes to the writer thread instead (`PgConnection.take_now`): psycopg_pool's least wait.
_TAKE_NOW: Final = 0.001

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

#: Lease epochs (fencing tokens): a member's lease, and the tasks its runs took under it.
_EPOCHS = (
    "CREATE SEQUENCE lease_epochs",
    "ALTER TABLE daemons ADD COLUMN epoch bigint NOT NULL DEFAULT 0",
    "ALTER TABLE tasks ADD COLUMN epoch bigint",
)

#: The statements that bring the schema from version N - 1 to version N.
MIGRATIONS: Final[dict[int, tuple[str, ...]]] = {
    1: _TABLES,
    2: _EPOCHS,
    # Full arguments of calls not run yet, and subagents' journals (see `agentrt.store.sql`).
    3: ("ALTER TABLE tasks ADD COLUMN journal text NOT NULL DEFAULT '{}'",),
    # The model chosen for a session (`SqlStore.set_session_model`).
    4: ("ALTER TABLE sessions ADD COLUMN model text",),
    # The tokens of each run.
    5: (TOKEN_USAGE,),
}


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


def unreachable_error(location: str, exc: Exception) -> StoreError:
    detail = " ".join(str(exc).split()) or type(exc).__name__
    return StoreError(
        f"the PostgreSQL task store {location} cannot be reached ({detail}); runs fail until "
        "it answers again, and nothing it has stored is lost"
    )


def failed_error(location: str, exc: Exception) -> StoreError:
    if isinstance(exc, psycopg.OperationalError):
        return unreachable_error(location, exc)
    detail = " ".join(str(exc).split()) or type(exc).__name__
    return StoreError(f"the PostgreSQL task store {location} failed: {detail}")


def new_member_id() -> str:
    """A fleet member's id: ``fleet:HOST:PID:START:RANDOM`` (see `agentrt.core.process`)."""
    host = socket.gethostname().replace(":", "-") or "localhost"
    return f"fleet:{host}:{process_token()}:{secrets.token_hex(3)}"


class BrokenConnection(Exception):
    """The connection lent to a batch was found broken as its transaction began (nothing ran).

    It leaves `run_batch` (its `abort`), and the store runs the batch again on a
    new connection: the pool does not check a connection before lending it (a
    round trip more for every transaction), so a connection the server ended
    while idle is first noticed here.
    """


_PARAMETER = re.compile(r"\?")
T = TypeVar("T")
#: The most statements one connection keeps prepared; the ones past it go unnamed.
PREPARED_MAX: Final = 200
#: A statement as the store sends it: its text (``?`` parameters) and its parameters.
Statement = tuple[str, Any]


@mutable(eq=False)
class Rows:
    """A statement's result as the store reads it (of a `sqlite3.Cursor`): rows, `rowcount`."""

    result: pq.abc.PGresult = attrs.field(repr=False)
    conn: psycopg.Connection[Any] = attrs.field(repr=False)
    _next: int = attrs.field(default=0, init=False)
    #: What turns the values into Python's, as a cursor would: made at the first read
    #: (most results, a BEGIN's, a savepoint's, an UPDATE's, are never read).
    _loader: Transformer | None = attrs.field(default=None, init=False, repr=False)

    @property
    def rowcount(self) -> int:
        """The rows the statement changed, or returned."""
        count = self.result.command_tuples
        return -1 if count is None else count

    def fetchone(self) -> tuple[Any, ...] | None:
        if self._next >= self.result.ntuples:
            return None
        self._next += 1
        return self._loaded().load_row(self._next - 1, tuple)

    def fetchall(self) -> list[tuple[Any, ...]]:
        start, self._next = self._next, self.result.ntuples
        return cast("list[tuple[Any, ...]]", self._loaded().load_rows(start, self._next, tuple))

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        return iter(self.fetchall())

    def _loaded(self) -> Transformer:
        if self._loader is None:
            self._loader = psycopg.adapt.Transformer(self.conn)
            self._loader.set_pgresult(self.result)
        return self._loader


@mutable(eq=False)
class KnownRow:
    """A read's one row, known without a statement (`PgConnection.read_ahead`), read as `Rows`."""

    row: tuple[Any, ...] | None

    @property
    def rowcount(self) -> int:
        return 1

    def fetchone(self) -> tuple[Any, ...] | None:
        row, self.row = self.row, None
        return row

    def fetchall(self) -> list[tuple[Any, ...]]:
        row = self.fetchone()
        return [] if row is None else [row]

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        return iter(self.fetchall())


@mutable(eq=False)
class _Prepared:
    """The statements prepared on one connection (its session), by text and parameter types."""

    names: dict[tuple[bytes, tuple[int, ...]], bytes] = attrs.field(factory=dict)
    serial: int = 0


#: `PgConnection`'s lease outside a transaction: not read yet.
_UNREAD: Final = object()


def _pipeline_results(pg: pq.abc.PGconn, count: int) -> list[pq.abc.PGresult]:
    """The results of the `count` queries sent in pipeline mode, up to its sync (blocking, or
    waiting in the event loop in a batch run in the Trio thread: `agentrt.store.green`).

    One result each (the last, should a query give several): a query after a failed one
    has ``PIPELINE_ABORTED``.
    """
    fd = pg.socket
    while pg.flush():  # what did not fit in the socket's buffer
        green.wait_socket(fd, read=True, write=True)
        pg.consume_input()
    results: list[pq.abc.PGresult] = []
    last: pq.abc.PGresult | None = None
    while True:
        while pg.is_busy():
            green.wait_socket(fd)
            pg.consume_input()
        result = pg.get_result()
        if result is None:  # the end of one query's results
            if pg.status != pq.ConnStatus.OK:
                raise psycopg.OperationalError(
                    pg.get_error_message().strip() or "the connection to the server was lost"
                )
            if last is not None:
                results.append(last)
                last = None
            continue
        if result.status == pq.ExecStatus.PIPELINE_SYNC:
            break
        last = result
    if len(results) != count:
        raise psycopg.OperationalError(
            f"the server sent {len(results)} results for {count} queries in one pipeline"
        )
    return results


@mutable(eq=False)
class PgConnection:
    """A pooled psycopg connection speaking what the store's SQL needs of `sqlite3.Connection`.

    ``?`` parameters become ``%s``. ``BEGIN IMMEDIATE`` opens a transaction
    that takes the fleet's write lock and reads this member's lease; it goes
    to the server with the transaction's first statement, in its round trip, as
    savepoints go with the statement after them (see `_send`). Each batch of
    store calls borrows the pool's connection (`lent`); when it broke (the
    server restarted, the network went, the backend was terminated), the batch
    goes again on a new one, so an outage fails the calls made during it and
    no later ones.
    """

    pool: ConnectionPool[Any] = attrs.field(repr=False)
    lock_key: int
    #: The fleet member whose lease every transaction reads as it begins (see `check_lease`).
    runner: str = ""
    #: The lease epoch the store call being run carries (see `PgStore._submit`).
    epoch: int = 0
    _conn: psycopg.Connection[Any] | None = attrs.field(default=None, init=False)
    _sql: dict[str, str] = attrs.field(factory=dict, init=False)
    #: True from ``BEGIN IMMEDIATE`` until the transaction's first statement is sent.
    _owed_begin: bool = attrs.field(default=False, init=False)
    #: The member's lease as the open transaction read it under the write lock:
    #: (epoch, live), None for no row; `_UNREAD` when not read (yet).
    _lease: tuple[int, bool] | object | None = attrs.field(default=_UNREAD, init=False)
    #: Checks of the lease waiting for the round trip that reads it (`check_lease`).
    _checks: list[Callable[[tuple[int, bool] | None], None]] = attrs.field(factory=list, init=False)
    #: Statements whose outcome nobody reads (savepoints), sent with the next statement.
    _pending: list[Statement] = attrs.field(factory=list, init=False)
    _begin: list[Statement] = attrs.field(factory=list, init=False)
    #: Each statement's text as the server takes it (``$1`` parameters), and how many it has.
    _wire: dict[str, tuple[bytes, int]] = attrs.field(factory=dict, init=False)
    #: What each connection of the pool has prepared (a new connection, nothing).
    _prepared: weakref.WeakKeyDictionary[psycopg.Connection[Any], _Prepared] = attrs.field(
        factory=weakref.WeakKeyDictionary, init=False
    )
    #: False while a batch whose commit need not wait for the WAL flush runs (`lent`).
    _synced: bool = attrs.field(default=True, init=False)
    #: How many calls the batch being run has (`lent`), and how many of them have begun
    #: (one savepoint each, when they are several).
    _calls: int = attrs.field(default=1, init=False)
    _begun: int = attrs.field(default=0, init=False)
    #: True while a write whose outcome nobody reads waits in `_pending` (`execute_unread`).
    _unread: bool = attrs.field(default=False, init=False)
    #: A read answered without a statement, if it is the next one (`read_ahead`): its
    #: text, its parameters and its row.
    _ahead: tuple[str, tuple[Any, ...], tuple[Any, ...]] | None = attrs.field(
        default=None, init=False
    )

    @property
    def in_transaction(self) -> bool:
        conn = self._conn
        return self._owed_begin or (
            conn is not None
            and conn.info.transaction_status
            not in (psycopg.pq.TransactionStatus.IDLE, psycopg.pq.TransactionStatus.UNKNOWN)
        )

    def take_now(self) -> psycopg.Connection[Any] | None:
        """The pool's connection if it is there to take at once, else None (it is being
        made, or another holds it); give it to `lent`."""
        try:
            return cast("psycopg.Connection[Any]", self.pool.getconn(timeout=_TAKE_NOW))
        except PoolTimeout:
            return None

    @contextlib.contextmanager
    def lent(
        self, *, synced: bool = True, calls: int = 1, taken: psycopg.Connection[Any] | None = None
    ) -> Iterator[None]:
        """Borrow the pool's connection (made anew when it broke) for one batch of calls.

        With `synced` False, the batch's transaction commits without waiting for
        the server's WAL flush (``SET LOCAL synchronous_commit TO off``, sent with
        its first statement: see `SqlStore.update`). `calls`: how many calls
        the batch has; the last one's last write may go with the ``COMMIT``
        (`execute_unread`). `taken`: the connection, from `take_now`.

        In a batch run in the Trio thread, what may block (waiting for the pool to
        connect, rolling back what a failure left open before the connection goes
        back) goes to a worker thread (`green.blocking`).
        """
        conn = taken if taken is not None else green.blocking(self.pool.getconn)
        self._conn = conn
        self._synced = synced
        self._calls, self._begun = calls, 0
        try:
            yield
        finally:
            self._conn = None
            self._synced = True
            self._calls, self._begun = 1, 0
            self._reset()
            if not conn.closed and conn.info.transaction_status != pq.TransactionStatus.IDLE:
                # As the pool's own `connection()` does on a failure (the pool would roll
                # back in `putconn` itself, blocking).
                with contextlib.suppress(psycopg.Error):
                    green.blocking(conn.rollback)
            self.pool.putconn(conn)

    def connection(self) -> psycopg.Connection[Any]:
        """The connection lent for the batch being run."""
        if self._conn is None:
            raise psycopg.OperationalError("no connection is lent to the store")
        return self._conn

    def execute(self, sql: str, parameters: Any = ()) -> Rows:
        conn = self.connection()
        ahead = self._ahead
        if ahead is not None:
            if sql == ahead[0] and tuple(parameters) == ahead[1]:
                self._ahead = None
                return cast(Rows, KnownRow(ahead[2]))
            if not sql.startswith(("SAVEPOINT ", "RELEASE ")):
                self._ahead = None  # anything else may change what it read
        if sql == "BEGIN IMMEDIATE":
            self._reset()
            self._owed_begin = True
            return cast(Rows, None)
        if sql.startswith(("SAVEPOINT ", "RELEASE ")):
            # Nothing is read of these, and they cannot fail in a transaction that works:
            # they go to the server with the statement after them, in its round trip.
            if sql.startswith("SAVEPOINT "):
                self._begun += 1  # a batch's next call begins
            self._pending.append((sql, None))
            return cast(Rows, None)
        if sql in ("COMMIT", "ROLLBACK"):
            if self._owed_begin:  # nothing of the transaction reached the server
                self._reset()
                return cast(Rows, None)
            self._lease = _UNREAD
            if sql == "ROLLBACK":
                self._pending.clear()  # the savepoints go with the transaction
                self._unread = False
            elif self._unread and self._calls > 1:
                return self._commit_after_last(conn)
        return self._send(conn, sql, parameters)

    def _commit_after_last(self, conn: psycopg.Connection[Any]) -> Rows:
        """``COMMIT`` a batch of several calls with the last call's unread write before it.

        When that write fails, the transaction is left in error before its
        ``COMMIT``: the last call's savepoint is rolled back and the others commit,
        in one round trip more, and `LastCallUndone` says so. A ``COMMIT`` that
        fails itself (the transaction is over) fails the batch, as ever.
        """
        try:
            return self._send(conn, "COMMIT", ())
        except psycopg.Error as exc:
            if conn.broken or conn.info.transaction_status != psycopg.pq.TransactionStatus.INERROR:
                raise
            error = exc
        self._run(
            conn, [("ROLLBACK TO batch_call", None), ("RELEASE batch_call", None), ("COMMIT", None)]
        )
        raise LastCallUndone(error)

    def read_ahead(self, sql: str, parameters: tuple[Any, ...], row: tuple[Any, ...]) -> None:
        """Answer the next statement with `row` if it is `sql` with `parameters`.

        For a read whose answer a write of the same transaction gave (a stop's
        UPDATE of a task wrote its fields and returned the rest of what a
        resume's claim, batched after it, reads): one round trip less. Only the
        very next statement is answered, savepoints aside; any other statement,
        the transaction's end or a rollback to a savepoint forgets it. Nothing
        else writes between the two: every transaction of the store takes the
        fleet's write lock first.
        """
        self._ahead = (sql, parameters, row)

    def executemany(self, sql: str, rows: Any) -> None:
        conn = self.connection()
        self._ahead = None
        if self._owed_begin or self._pending:
            self._send(conn, "", ())
        query, values = cast(Any, self._translate(sql)), list(rows)

        def run() -> None:
            with conn.cursor() as cursor:
                cursor.executemany(query, values)

        green.blocking(run)

    def check_lease(self, check: Callable[[tuple[int, bool] | None], None]) -> None:
        """Call `check` with this member's lease, (epoch, live then) or None for no row.

        The lease is read once per transaction, right after its write lock and
        in the same round trip as the transaction's first statement: `check`
        runs as soon as that comes back, before the statement's result is
        used (an error it raises ends the call, whose changes are rolled back).
        The fleet's heartbeats renew leases, and take tasks from lapsed members,
        under the same lock, so the row cannot change before the transaction
        ends (one that stalls half a lease is ended by the server).
        """
        if self._owed_begin:
            self._checks.append(check)
            return
        if self._lease is _UNREAD:
            conn = self.connection()
            row = green.blocking(
                lambda: conn.execute(
                    f"SELECT epoch, lease_until > {NOW} FROM daemons WHERE id = %s", (self.runner,)
                ).fetchone()
            )
            self._lease = None if row is None else (int(row[0]), bool(row[1]))
        check(cast("tuple[int, bool] | None", self._lease))

    def execute_unread(self, sql: str, parameters: Any) -> None:
        """Run `sql` with the next statement sent, in its round trip: nobody reads its outcome.

        The last write of a batch's last call goes with the ``COMMIT``, one round
        trip for both. An error of it fails that call alone: the call alone in its
        batch, the ``COMMIT`` fails, with nothing written; the last of several,
        its savepoint is rolled back and the others commit (`LastCallUndone`).
        The write of any other call is sent by the end of its call's write
        (`settle`), so that an error of it is its call's.
        """
        conn = self.connection()
        self._ahead = None
        if self._owed_begin:  # (not after a read: the transaction begins with a statement)
            self._send(conn, sql, parameters)
            return
        self._pending.append((sql, parameters))
        self._unread = True

    def settle(self) -> None:
        """Send what the transaction owes (its beginning, a write nobody reads in a batch of
        several calls) if no statement took it yet."""
        if self._owed_begin or (self._unread and not self._last_call):
            self._send(self.connection(), "", ())

    @property
    def _last_call(self) -> bool:
        """Whether the call being run is its batch's last (one call alone is)."""
        return self._calls == 1 or self._begun == self._calls

    def _reset(self) -> None:
        self._ahead = None
        self._owed_begin = False
        self._unread = False
        self._lease = _UNREAD
        self._checks.clear()
        self._pending.clear()

    def _begin_statements(self) -> list[Statement]:
        """``BEGIN``, the write lock, and this member's lease (the third result).

        The lease is read by a statement of its own after the lock's, so that it
        reads the database as it is once the lock is held (each statement of a
        READ COMMITTED transaction sees what was committed before it started).
        """
        if not self._begin:
            self._begin = [
                ("BEGIN", None),
                (f"SELECT pg_advisory_xact_lock({LOCK_CLASS}, {self.lock_key})", None),
                (f"SELECT epoch, lease_until > {NOW} FROM daemons WHERE id = ?", (self.runner,)),
            ]
        if not self._synced:
            # LOCAL: for this transaction only, so the connection's next one is synced again.
            return [*self._begin, ("SET LOCAL synchronous_commit TO off", None)]
        return list(self._begin)

    def _send(self, conn: psycopg.Connection[Any], sql: str, parameters: Any) -> Rows:
        """`sql` after what is owed (the transaction's beginning, savepoints): one round trip.

        A statement that fails leaves the ones before it done (a savepoint set
        stays set), as when each went on its own, and the ones after it not run.
        """
        begin = self._owed_begin
        statements = self._begin_statements() if begin else []
        statements += self._pending
        if sql:
            statements.append((sql, parameters or None))
        self._pending.clear()
        self._owed_begin = self._unread = False
        try:
            results = self._run(conn, statements)
        except psycopg.OperationalError as exc:
            self._checks.clear()
            if begin and conn.broken:  # nothing was done: the batch may go again elsewhere
                raise BrokenConnection(str(exc)) from exc
            raise
        except BaseException:
            self._checks.clear()  # the call fails: its checks are moot
            raise
        if begin:
            row = results[2].fetchone()
            lease = None if row is None else (int(row[0]), bool(row[1]))
            self._lease = lease
            checks, self._checks = self._checks, []
            for check in checks:
                check(lease)
        return results[-1]

    def _run(self, conn: psycopg.Connection[Any], statements: list[Statement]) -> list[Rows]:
        """Send `statements` in one pipeline (one round trip); their results, in order.

        Each goes as a statement of its own in the extended protocol, prepared
        on the connection the first time it is sent (`PREPARED_MAX` at most), so
        that the server parses and plans it once. Parameters go as text, in the
        types their values have. The first error is raised once every result
        came back; the statements after it were not run.
        """
        pg = conn.pgconn
        prepared = self._prepared.get(conn)
        if prepared is None:
            prepared = self._prepared[conn] = _Prepared()
        dumper = psycopg.adapt.Transformer(conn)
        #: What went, in order: a prepare (the key and name it makes), or a statement (None).
        sent: list[tuple[tuple[bytes, tuple[int, ...]], bytes] | None] = []
        making = 0  # prepares in this pipeline
        pg.enter_pipeline_mode()
        try:
            for text, values in statements:
                query, count = self._wire_text(text)
                if count:
                    params = dumper.dump_sequence(values, [PyFormat.TEXT] * count)
                    types = tuple(dumper.types or ())
                else:
                    params, types = None, ()
                key = (query, types)
                name = prepared.names.get(key)
                if name is None and len(prepared.names) + making < PREPARED_MAX:
                    name = b"agentrt_%d" % prepared.serial
                    prepared.serial += 1
                    making += 1
                    pg.send_prepare(name, query, param_types=types or None)
                    sent.append((key, name))
                if name is None:
                    pg.send_query_params(query, params, param_types=types or None)
                else:
                    pg.send_query_prepared(name, params)
                sent.append(None)
            pg.pipeline_sync()
            results = _pipeline_results(pg, len(sent))
        finally:
            if pg.status == pq.ConnStatus.OK and pg.pipeline_status != pq.PipelineStatus.OFF:
                with contextlib.suppress(psycopg.Error):
                    pg.exit_pipeline_mode()
        error: pq.abc.PGresult | None = None
        rows: list[Rows] = []
        for made, result in zip(sent, results, strict=True):
            status = result.status
            if status == pq.ExecStatus.FATAL_ERROR and error is None:
                error = result
            if made is not None:  # a prepare: kept once the server made it
                if status == pq.ExecStatus.COMMAND_OK:
                    prepared.names[made[0]] = made[1]
            else:
                rows.append(Rows(result, conn))
        if error is not None:
            raise psycopg.errors.error_from_result(error, encoding=conn.info.encoding)
        return rows

    def _wire_text(self, sql: str) -> tuple[bytes, int]:
        """`sql` with its ``?`` parameters numbered as the server takes them, and their count."""
        found = self._wire.get(sql)
        if found is None:
            count = 0

            def number(_: re.Match[str]) -> str:
                nonlocal count
                count += 1
                return f"${count}"

            text = _PARAMETER.sub(number, sql)
            found = self._wire[sql] = (text.encode(), count)
        return found

    def _translate(self, sql: str) -> str:
        out = self._sql.get(sql)
        if out is None:
            out = self._sql[sql] = _PARAMETER.sub("%s", sql.replace("%", "%%"))
        return out

    def close(self) -> None:
        self.pool.close()


def connect(conninfo: str, *, timeout: float = 5.0) -> psycopg.Connection[Any]:
    """An autocommit connection (transactions are begun by hand, as with SQLite's)."""
    return psycopg.connect(conninfo, autocommit=True, connect_timeout=max(1, round(timeout)))


#: Where the PostgreSQL of Debian, Ubuntu and Fedora puts its sockets, when the server does
#: not say (a role that may not read ``unix_socket_directories``); the other usual place,
#: ``/tmp``, is a private one in the sandbox already.
USUAL_SOCKET_FOLDER: Final = Path("/var/run/postgresql")


def socket_folders(conn: psycopg.Connection[Any]) -> tuple[Path, ...]:
    """The folders of the Unix sockets of `conn`'s server when it runs on this machine, else ().

    A server reached through a Unix socket, or over TCP at a loopback address,
    runs here, and listens on sockets too (``unix_socket_directories``), which
    any process that sees their folder may connect to, network or not: with
    the trust or peer authentication a local server has by default, as the
    store's own user. The folders are asked of the server; one that may not
    say gives `USUAL_SOCKET_FOLDER` instead. The folder `conn` came through, if
    it came through one, is always among them.
    """
    info = conn.info
    through = [Path(info.host)] if info.host.startswith("/") else []
    if not through and not _loopback(info.hostaddr):
        return ()
    try:
        row = conn.execute("SHOW unix_socket_directories").fetchone()
    except psycopg.errors.InsufficientPrivilege:
        return tuple(dict.fromkeys([USUAL_SOCKET_FOLDER, *through]))
    listed = str(row[0]) if row is not None and row[0] is not None else ""
    # A comma-separated list; a name may be quoted, and one starting with @ is an abstract
    # socket (in the network namespace, which a call without the network does not share).
    folders = (entry.strip().strip('"') for entry in listed.split(","))
    return tuple(dict.fromkeys([*(Path(f) for f in folders if f.startswith("/")), *through]))


def _loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:  # none (a Unix socket) or not an address
        return False


def idle_limit(conn: psycopg.Connection[Any], lease: float) -> None:
    """Have the server end this connection's transaction when it waits on us for half a lease.

    A member stopped (or cut off) in the middle of a transaction would hold the
    fleet's write lock, and every other member's writes with it, for as long as
    it is stopped: the server rolls such a transaction back and closes the
    connection instead, so the member's lease can run out and its tasks be taken.
    """
    limit = max(500, round(lease * 500))
    conn.execute(f"SET idle_in_transaction_session_timeout = {limit}")


def open_pool(
    conninfo: str, name: str, lease: float, *, wait: float = CONNECT_WAIT
) -> ConnectionPool[Any]:
    """The store's pool: one autocommit connection.

    It is not checked before each lending (a round trip more for every
    transaction): a batch that finds it broken as it begins goes once more
    on a new one (`BrokenConnection`). A call waits up to `wait` for
    a working connection, then fails (the database is away). The pool gives
    up reconnecting in the background after as long, so that a call made
    once the database is back connects at once instead of waiting for a late
    retry; a call still waiting when it gives up starts a new attempt
    (`_serve_waiting`).
    """
    pool: ConnectionPool[Any] = ConnectionPool(
        conninfo,
        # Statements are prepared by the store itself (`PgConnection._run`): psycopg's own
        # preparing would deallocate every prepared statement at a rollback.
        kwargs={
            "autocommit": True,
            "connect_timeout": 2,
            "application_name": name[:63],
            "prepare_threshold": None,
        },
        min_size=1,
        max_size=1,
        open=False,
        name=name,
        timeout=wait,
        reconnect_timeout=wait,
        reconnect_failed=_serve_waiting,
        configure=lambda conn: idle_limit(conn, lease),
    )
    pool.open(wait=False)
    return pool


def _serve_waiting(pool: ConnectionPool[Any]) -> None:
    """When the pool gives up reconnecting, start a new attempt if a call waits for one.

    A call that asks for the connection while the pool's last attempt is under
    way waits for that attempt rather than starting its own; when it fails, the
    pool gives up and nobody tries again for the waiting call, which then fails
    once its wait runs out even if the database came back meanwhile (the first
    call after an outage, made just as the pool gave up). `ConnectionPool.check`
    starts an attempt when the pool has no connection.
    """
    if pool.get_stats().get("requests_waiting", 0):
        with contextlib.suppress(PoolClosed):
            pool.check()


@mutable(eq=False)
class PgStore(SqlStore):
    """The task store in a PostgreSQL database. Open with `await PgStore.open(url)`."""

    url: str = attrs.field(kw_only=True, repr=False)
    #: The NOTIFY channel of this database schema's fleet.
    channel: str = attrs.field(kw_only=True)
    #: Seconds a member's lease lasts from its last heartbeat.
    lease: float = attrs.field(kw_only=True, default=DEFAULT_LEASE)
    #: The second key of the fleet's write lock (the schema's).
    lock_key: int = attrs.field(kw_only=True)
    #: The epoch of this member's lease: what its writes carry (0: none, every write refused).
    epoch: int = attrs.field(kw_only=True, default=0)
    #: `time.monotonic()` from which this member takes its lease to be lost (its fleet
    #: service sets it at each renewal): writes queued from then on carry no epoch.
    fenced_at: float = attrs.field(kw_only=True, default=math.inf)
    #: Takes a lease anew (the fleet's heartbeat, once): called before a write that starts
    #: something (a new run, a resume, a discard) while this member's lease is lost.
    rejoin: Callable[[], Awaitable[None]] | None = attrs.field(
        kw_only=True, default=None, repr=False
    )
    _display: str = attrs.field(kw_only=True)
    #: The folders of the server's Unix sockets when it runs on this machine (`socket_folders`).
    _sockets: tuple[Path, ...] = attrs.field(kw_only=True, default=())

    #: What `_check_held` reads of a task: its runner and the epoch it was taken under.
    _HELD_SELECT: ClassVar[str] = "SELECT runner, epoch FROM tasks WHERE session_id = ?"
    _HELD_WHERE: ClassVar[str] = (
        " AND (runner IS NULL OR runner = ?) AND (epoch IS NULL OR epoch = ?)"
    )
    _NUMBER_TIMES: ClassVar[bool] = True  # double precision columns
    _READ_AHEAD: ClassVar[bool] = True
    #: `_UPDATE` of a claim: the fields and the lease epoch the task is taken under.
    _UPDATE_CLAIMED: ClassVar[str] = SqlStore._UPDATE.replace(" WHERE ", ", epoch = ? WHERE ", 1)

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

        def start() -> tuple[str, int, int, tuple[Path, ...]]:
            try:
                conn = connect(url)
            except psycopg.Error as exc:
                raise unreachable_error(display, exc) from None
            try:
                return (*_prepare(conn, display, runner, lease, http), socket_folders(conn))
            except psycopg.Error as exc:
                raise failed_error(display, exc) from None
            finally:
                conn.close()

        channel, key, epoch, sockets = await trio.to_thread.run_sync(start)
        db = PgConnection(open_pool(url, f"agentrt store {runner}", lease), key, runner)
        return cls(
            cast(sqlite3.Connection, db),
            runner=runner,
            url=url,
            channel=channel,
            lease=lease,
            lock_key=key,
            epoch=epoch,
            display=display,
            sockets=sockets,
        )

    @property
    def private_paths(self) -> tuple[Path, ...]:
        """The folders of the database server's Unix sockets, if it runs on this machine."""
        return self._sockets

    async def _live(self) -> None:
        """Take a new lease first if this member's is lost (a run under the old one stays refused)."""
        if time.monotonic() >= self.fenced_at and self.rejoin is not None:
            with contextlib.suppress(Exception):  # else the write says what is wrong
                await self.rejoin()

    async def create(self, record: TaskRecord) -> Sequence[Message]:
        await self._live()
        return await super().create(record)

    async def update(
        self,
        session_id: str,
        change: Callable[[TaskRecord], TaskRecord],
        *,
        synced: bool = True,
        model: Callable[[str | None], object] | None = None,
    ) -> tuple[TaskRecord, Sequence[Message]] | None:
        await self._live()
        return await super().update(session_id, change, synced=synced, model=model)

    async def delete(
        self, session_id: str, check: Callable[[str, str | None], None] | None = None
    ) -> bool:
        await self._live()
        return await super().delete(session_id, check)

    async def forget(self, session_id: str) -> bool:
        await self._live()
        return await super().forget(session_id)

    async def prune(self, older_than: float) -> int:
        await self._live()
        return await super().prune(older_than)

    def _submit(
        self,
        fn: Callable[[sqlite3.Connection], T],
        *,
        defer: bool = False,
        synced: bool = True,
        here: bool = False,
    ) -> Call[T]:
        """Queue `fn` carrying this member's lease epoch as it is now (see `_fence`)."""
        epoch = self.epoch if time.monotonic() < self.fenced_at else 0

        def carried(db: sqlite3.Connection) -> T:
            cast(PgConnection, db).epoch = epoch
            return fn(db)

        return super()._submit(carried, defer=defer, synced=synced, here=here)

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self._writer.run_here = self._run_here
        self._writer.green = True

    def _run_here(self, db: sqlite3.Connection, batch: list[Call[Any]]) -> bool:
        """Run `batch` in the Trio thread, its waits for the server the event loop's.

        For the small calls that may (`Call.here`: a stop's write, a status, a
        claim whose history is in memory), handed over while the writer thread is
        idle: a round trip's wait costs the event loop nothing, where the writer
        thread's cost two thread hops (see `agentrt.store.green`). The batch goes
        to the writer thread instead (False) when the pool's connection is not
        there to take at once (it is being made after an outage).
        """
        taken = cast(PgConnection, db).take_now()
        if taken is None:
            return False
        self._run_batch(db, batch, taken=taken)  # (whether it committed: the calls say)
        return True

    def _run_batch(
        self,
        db: sqlite3.Connection,
        batch: list[Call[Any]],
        *,
        taken: psycopg.Connection[Any] | None = None,
    ) -> bool:
        location, conn = self.location, cast(PgConnection, db)
        for attempt in (1, 2):
            try:
                with conn.lent(synced=synced(batch), calls=len(batch), taken=taken):
                    return run_batch(
                        db,
                        batch,
                        location,
                        self._memory.clear,
                        errors=(psycopg.Error,),
                        failed=lambda exc: failed_error(location, exc),
                        abort=(BrokenConnection,),
                    )
            except BrokenConnection as exc:
                # Ended while idle (a restart, an administrator): the pool drops it as it
                # comes back and lends a new one; the batch goes once more, nothing of it ran.
                if attempt == 2:
                    error: Exception = psycopg.OperationalError(str(exc))
                    break
                taken = None
            except psycopg.Error as exc:
                # No connection, or it broke between statements: nothing of the batch committed.
                error = exc
                break
        self._memory.clear()
        for call in batch:
            call.fail(failed_error(location, error))
        return False

    def _fence(self, db: sqlite3.Connection) -> None:
        """Refuse the write unless it carries this member's live lease epoch (in its transaction).

        Under the write lock, which the heartbeats that renew leases and
        interrupt the tasks of lapsed members take too: a write either sees a
        live lease or is refused, never one that runs out in between.
        """
        conn = cast(PgConnection, db)
        epoch = conn.epoch
        conn.check_lease(lambda row: self._check_lease(row, epoch))

    def _check_lease(self, row: tuple[int, bool] | None, epoch: int) -> None:
        if row is not None and row[1] and epoch != 0 and row[0] == epoch:
            return
        if row is None or not row[1]:
            why = (
                "its lease in the fleet has run out (it stalled, or was cut off from the database)"
            )
        else:
            why = "it joined the fleet again since, under a new lease epoch"
        raise StaleLeaseError(
            f"a write of this agentrt process to the task store {self.location} was refused: "
            f"{why}; it carried lease epoch {epoch or 'none'}, and changed nothing"
        )

    @contextlib.contextmanager
    def _write(self, db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
        """As `SqlStore._write`; the fence is checked by the end of the write at the latest."""
        with super()._write(db):
            yield db
            cast(PgConnection, db).settle()

    def _held_by(self, record: TaskRecord) -> str | None:
        """A run's write (any status) to a task another runner or epoch holds now is refused."""
        return record.runner

    def _held_args(self, runner: str) -> tuple[Any, ...]:
        return (runner, self._carried)

    def _read_ahead(
        self, db: sqlite3.Connection, sql: str, parameters: tuple[Any, ...], row: tuple[Any, ...]
    ) -> None:
        cast(PgConnection, db).read_ahead(sql, parameters, row)

    def _check_held_row(self, session_id: str, row: tuple[Any, ...]) -> None:
        """The task must be held under the epoch the write carries, too (read with its runner)."""
        epoch = self._carried
        if row[1] is not None and int(row[1]) != epoch:
            raise StaleLeaseError(
                f"the pending task of session {session_id} was taken under lease epoch {row[1]}, "
                f"and this write carried {epoch or 'none'} (this agentrt process joined the fleet "
                "again since, or another took the task); this run's change was not saved"
            )

    @property
    def _carried(self) -> int:
        """The lease epoch the store call being run carries (writer thread)."""
        return cast(PgConnection, self._db).epoch

    def _update_fields(
        self, db: sqlite3.Connection, record: TaskRecord, *, claim: bool = False
    ) -> bool:
        """As `SqlStore._update_fields`; a claim records its lease epoch in the same statement."""
        if not claim:
            return super()._update_fields(db, record)
        # A claim's task was read in its transaction, under the write lock: its row is
        # there, and the UPDATE goes with the COMMIT (one round trip less).
        cast(PgConnection, db).execute_unread(
            self._UPDATE_CLAIMED, (*self._columns(record), self._carried, record.session_id)
        )
        return True

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
        """Record the lease epoch the task is taken under (`_fence` checked it is live).

        A member cut off from the database past its lease may have had its
        tasks taken over; until its heartbeat renews the lease, `_fence`
        refuses it every write, a new run or a resume included.
        """
        db.execute(
            "UPDATE tasks SET epoch = ? WHERE session_id = ?",
            (cast(PgConnection, db).epoch, record.session_id),
        )


def _prepare(
    conn: psycopg.Connection[Any], display: str, runner: str, lease: float, http: str | None
) -> tuple[str, int, int]:
    """Create or migrate the schema, register `runner`; the channel, lock key and lease epoch."""
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
        row = conn.execute(
            f"INSERT INTO daemons(id, host, pid, started_at, beat_at, lease_until, http, epoch) "
            f"VALUES (%s, %s, %s, {NOW}, {NOW}, {NOW} + %s, %s, nextval('lease_epochs')) "
            "RETURNING epoch",
            (runner, socket.gethostname(), os.getpid(), lease, http),
        ).fetchone()
        assert row is not None
    channel = "agentrt_" + re.sub(r"[^a-z0-9_]", "_", name.lower())
    return channel[:63], key, int(row[0])


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

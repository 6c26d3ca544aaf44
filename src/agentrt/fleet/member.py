"""The fleet: daemons that share one PostgreSQL store, their leases, and what they tell each other.

Every process that opens a PostgreSQL store is a *member*: a row in
``daemons`` (see `agentrt.store.postgres`). `Fleet.run`, a Trio service each member
runs beside its executor, does three things:

* **Leases.** A heartbeat renews the member's lease every ``lease / 5``
  seconds (on the database's clock) and, in the same transaction, turns the
  running tasks of every member whose lease expired into interrupted tasks
  with cause ``disconnect``: any member may then list and resume them. A
  member on this machine whose process is gone expires at once.
* **Fencing.** A lease has an epoch, and every store write carries it; the
  database refuses a write whose epoch is not the member's live one
  (`agentrt.store.postgres`). A member that cannot renew its lease fences itself
  `FENCE_AT` of a lease after it sent its last renewal: its runs stop (cause
  ``disconnect``), its tools' process groups are killed and its writes carry
  no epoch. A member that cannot act (stopped) is fenced by its watchdog
  (`agentrt.fleet.fencewatch`), which kills the tool groups at `KILL_AT` of a
  lease. Either is a quarter lease or more before another member may take the
  tasks over. A lease that ran out is not renewed: the member joins again
  under a new epoch, and says in its log what was refused and killed.
* **Cancels.** A cancel for a task running on another member is sent to it
  (``NOTIFY``) and applied there with its cause, as if it had arrived there:
  `Fleet.cancel` returns once that member says it was done.
* **Questions.** A question no window waits for (a confirmation or a
  question of a ``chat-``, ``tg-`` or ``dc-`` run) is shared: recorded in
  ``questions`` and announced. Every other member posts it in its own
  registry under the same id, so its front-ends' listeners (the web page, a
  bot) can claim and answer it; the answer goes back to the member whose run
  asked, and the first answer wins. A run whose origin no local listener
  takes asks inline when another member's front-end does
  (`Registry.elsewhere`): a Telegram answer taken by whichever daemon polls
  Telegram reaches the run that asked.

Messages travel on one ``LISTEN``/``NOTIFY`` channel per database schema,
as JSON objects (``kind``, ``from``, ``to``...). The listening connection is
driven by Trio itself (`trio.lowlevel.wait_readable` on its socket); the
others are blocking psycopg connections used from worker threads.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from typing import Final

import attrs
import psycopg
import trio

from ..core.cause import Cause
from ..core.context import RequestContext
from ..core.errors import BadAnswerError
from ..core.errors import NotOwnerError
from ..core.errors import UnknownTaskError
from ..core.executor import Executor
from ..core.executor import TaskInfo
from ..core.pending import AlreadyAnsweredError
from ..core.pending import Answer
from ..core.pending import Entry
from ..core.pending import EntryGoneError
from ..core.pending import Registry
from ..core.pending import RegistryError
from ..core.process import process_token
from ..core.process import token_alive
from ..store.postgres import LOCK_CLASS
from ..store.postgres import NOW
from ..store.postgres import PgStore
from ..store.postgres import connect
from ..store.postgres import idle_limit
from ..store.record import converter
from ..vocab.reprs import mutable
from ..vocab.reprs import record
from ..vocab.request import Request

log = logging.getLogger("agentrt.fleet")

#: What a heartbeat's transaction found: the new lease epoch, how long the lease was
#: overdue, the prefixes other live members listen for, the tasks of lapsed members it
#: interrupted (session, runner), this member's own tasks it interrupted (no run of them
#: here), and the questions of lapsed members it removed.
_Beaten = tuple[int, float, set[str], list[tuple[str, str]], list[str], list[str]]

#: Seconds a member waits for another to say it applied a cancel or an answer.
REPLY_SECONDS: Final = 5.0
#: The largest message sent on the channel (PostgreSQL's limit is 8000 bytes).
MAX_NOTIFY: Final = 7900
#: Members whose lease ran out this many leases ago leave `agentrt fleet status`.
FORGET_AFTER_LEASES: Final = 30
#: The part of a lease, from the moment its last renewal was sent, after which a member
#: that could not renew it fences itself: stops its runs, kills its tools, writes nothing.
FENCE_AT: Final = 0.7
#: The part of a lease after which the watchdog kills the member's tool groups, in case
#: the member itself cannot (stopped). Another member may take its tasks only after the
#: whole lease, counted from when the database received that renewal: the rest (a quarter
#: lease) is the margin for the kill to land.
KILL_AT: Final = 0.75


class FleetError(Exception):
    """A message could not cross the fleet (too large, or nobody answered)."""


def _short(member: str) -> str:
    """The part of a member's id that tells it apart (its random suffix)."""
    return member.rsplit(":", 1)[-1]


@mutable(eq=False)
class Fleet:
    """One member's part in the fleet: heartbeat, reaper, cancels and questions across daemons."""

    store: PgStore
    executor: Executor
    registry: Registry
    #: The HTTP address this member serves, shown by `agentrt fleet status`.
    http: str | None = None
    _listen: psycopg.Connection[Any] | None = attrs.field(default=None, init=False)
    _beat_conn: psycopg.Connection[Any] | None = attrs.field(default=None, init=False)
    _send_conn: psycopg.Connection[Any] | None = attrs.field(default=None, init=False)
    _send_lock: trio.Lock = attrs.field(factory=trio.Lock, init=False)
    _beat_lock: trio.Lock = attrs.field(factory=trio.Lock, init=False)
    _nursery: trio.Nursery | None = attrs.field(default=None, init=False)
    _replies: dict[str, trio.MemorySendChannel[dict[str, Any]]] = attrs.field(
        factory=dict, init=False
    )
    #: Questions of other members posted here, by id: the scope of each one's mirror.
    _proxies: dict[str, trio.CancelScope] = attrs.field(factory=dict, init=False)
    #: The prefixes the other live members' front-ends listen to.
    _elsewhere: set[str] = attrs.field(factory=set, init=False)
    #: Whether this member fenced itself since its last renewal (its runs stopped).
    _fenced: bool = attrs.field(default=False, init=False)
    #: Set (and replaced) at each renewal: wakes the fence timer.
    _renewed: trio.Event = attrs.field(factory=trio.Event, init=False)
    #: The file the watchdog reads this member's kill deadline from.
    _deadline_file: Path | None = attrs.field(default=None, init=False)
    beats: int = attrs.field(default=0, init=False)
    #: How many times this member fenced itself (its lease could not be renewed in time).
    fences: int = attrs.field(default=0, init=False)

    @property
    def member(self) -> str:
        """This member's id (its runs' `TaskRecord.runner`)."""
        return self.store.runner

    @property
    def beat_seconds(self) -> float:
        """Seconds between heartbeats."""
        return self.store.lease / 5

    # -- the service -----------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[Fleet] = trio.TASK_STATUS_IGNORED) -> None:
        """Take part in the fleet until cancelled; report readiness through `task_status`."""
        self.registry.id_prefix = f"{_short(self.member)}-"
        self.registry.elsewhere = self._taken_elsewhere
        self.registry.observe(self._posted)
        self.store.rejoin = self.beat
        watchdog: trio.Process | None = None
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                watchdog = await self._start_watchdog()
                await self._connect_listener()
                await self.beat()
                nursery.start_soon(self._heartbeat)
                nursery.start_soon(self._fence_timer)
                nursery.start_soon(self._receive)
                await self._mirror_open_questions()
                task_status.started(self)
        finally:
            self.registry.elsewhere = None
            self.store.rejoin = None
            for conn in (self._listen, self._beat_conn, self._send_conn):
                if conn is not None:
                    conn.close()
            if watchdog is not None:
                with trio.CancelScope(shield=True):
                    await self._stop_watchdog(watchdog)

    # -- fencing -----------------------------------------------------------------

    async def _start_watchdog(self) -> trio.Process | None:
        """Start the process that kills this member's tools if it stalls (`agentrt.fleet.fencewatch`)."""
        ledger = self.executor.config.tool_ledger
        if ledger is None:
            return None
        ledger.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._deadline_file = ledger.folder / f"fence-{os.getpid()}"
        # The lease was taken as the store opened, a moment ago.
        self._write_deadline(time.monotonic() + self.store.lease * KILL_AT)
        script = Path(__file__).with_name("fencewatch.py")
        argv = [sys.executable, "-I", os.fspath(script), os.fspath(ledger.folder)]
        argv += [os.fspath(self._deadline_file), process_token()]
        # Its own session: a signal to this member's process group does not stop it too.
        return await trio.lowlevel.open_process(
            argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, start_new_session=True
        )

    async def _stop_watchdog(self, watchdog: trio.Process) -> None:
        if watchdog.stdin is not None:
            await watchdog.stdin.aclose()  # end of input: it ends
        with trio.move_on_after(REPLY_SECONDS):
            await watchdog.wait()
        if watchdog.returncode is None:
            watchdog.kill()
            await watchdog.wait()
        if self._deadline_file is not None:
            self._deadline_file.unlink(missing_ok=True)

    def _write_deadline(self, deadline: float) -> None:
        path = self._deadline_file
        if path is None:
            return
        tmp = path.with_name(path.name + ".tmp")
        try:
            tmp.write_text(f"{deadline!r}\n", encoding="ascii")
            os.replace(tmp, path)
        except OSError as exc:
            log.warning("could not write the fence deadline %s: %s", path, exc)

    def _renew(self, sent: float, epoch: int) -> None:
        """The lease was renewed (or taken anew) by a heartbeat sent at `sent` (monotonic)."""
        lease = self.store.lease
        # The watchdog's deadline first, then the epoch that lets writes through again.
        self._write_deadline(sent + lease * KILL_AT)
        self.store.epoch = epoch
        self.store.fenced_at = sent + lease * FENCE_AT
        self._fenced = False
        self._renewed.set()
        self._renewed = trio.Event()

    def _fence(self, why: str) -> None:
        """Stop everything this member does under its lease: runs, tools, writes."""
        self._fenced = True
        self.fences += 1
        self.store.fenced_at = -math.inf  # writes queued from now on carry no epoch
        stopped = self.executor.cancel_all(Cause.DISCONNECT)
        ledger = self.executor.config.tool_ledger
        killed = ledger.kill_runner() if ledger is not None else []
        log.error(
            "%s: this daemon fenced itself in the fleet: %d runs stopped (disconnect), tool "
            "process groups killed: %s; its writes under lease epoch %d are refused",
            why,
            stopped,
            " ".join(map(str, killed)) or "none",
            self.store.epoch,
        )

    async def _fence_timer(self) -> None:
        """Fence this member once `FENCE_AT` of its lease passed without a renewal."""
        while True:
            renewed = self._renewed
            left = self.store.fenced_at - time.monotonic()
            if left <= 0 and not self._fenced:
                self._fence(
                    f"the lease could not be renewed for {FENCE_AT:g} of a lease "
                    f"({self.store.lease * FENCE_AT:.2f}s; the database did not answer)"
                )
            with trio.move_on_after(left if left > 0 and not self._fenced else math.inf):
                await renewed.wait()

    # -- leases ------------------------------------------------------------------

    async def beat(self) -> None:
        """Renew this member's lease, expire the dead members' and interrupt their tasks, once."""
        async with self._beat_lock:  # one heartbeat at a time on its connection
            await self._beat()

    async def _beat(self) -> None:
        sent = time.monotonic()
        listens = " ".join(self.registry.general_prefixes())
        # A member that fenced itself does not renew the old lease: its stopped runs'
        # writes are to stay refused. It takes a new one.
        epoch = 0 if self._fenced else self.store.epoch
        with trio.move_on_after(self.store.lease / 2) as waited:
            result = await trio.to_thread.run_sync(
                self._beat_sync, listens, epoch, abandon_on_cancel=True
            )
        if waited.cancelled_caught:
            self._beat_conn = None  # the abandoned thread keeps it; the next beat opens another
            raise FleetError("the heartbeat got no answer from the database")
        new_epoch, overdue, elsewhere, reaped, orphaned, questions = result
        self.beats += 1
        self._elsewhere = elsewhere
        if new_epoch != self.store.epoch:
            if not self._fenced:
                # Woken from a stall: nothing of the runs under the old lease may go on.
                self._fence(f"the lease in the fleet ran out {overdue:.2f}s ago")
            when = (
                f"ran out {overdue:.2f}s before it could renew it"
                if overdue > 0
                else "was not renewed in time"
            )
            log.error(
                "this daemon's lease in the fleet %s (it stalled, or was cut off from the "
                "database): writes under lease epoch %d are refused by the database, its tools "
                "were killed; it joins again under epoch %d",
                when,
                self.store.epoch,
                new_epoch,
            )
        self._renew(sent, new_epoch)
        for session_id, runner in reaped:
            log.warning(
                "the lease of %s ran out: session %s is interrupted (disconnect)",
                runner,
                session_id,
            )
        for session_id in orphaned:
            log.warning(
                "session %s was held by this daemon, but no run of it is here (it ended while "
                "the database was away, or under a lease epoch since lost): it is interrupted "
                "(disconnect)",
                session_id,
            )
        if questions:
            await self.send({"kind": "closed", "ids": questions})

    def _beat_sync(self, listens: str, epoch: int) -> _Beaten:
        for attempt in (1, 2):
            conn = self._beat_conn
            if conn is None or conn.closed or conn.broken:
                conn = self._beat_conn = connect(self.store.url)
                idle_limit(conn, self.store.lease)
            try:
                return self._beat_transaction(conn, listens, epoch)
            except psycopg.OperationalError:
                # A connection that broke while idle (the database restarted): once more
                # on a new one; the transaction that failed changed nothing.
                self._beat_conn = None
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _beat_transaction(self, conn: psycopg.Connection[Any], listens: str, epoch: int) -> _Beaten:
        overdue = 0.0
        with conn.transaction():
            # The store's write lock: a task is interrupted between two transactions of a
            # resume, never in the middle of one, and a write sees a lease as it is.
            conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", self._lock())
            renewed = conn.execute(
                f"UPDATE daemons SET beat_at = {NOW}, lease_until = {NOW} + %s, listens = %s, "
                f"http = %s WHERE id = %s AND epoch = %s AND lease_until > {NOW} RETURNING epoch",
                (self.store.lease, listens, self.http, self.member, epoch),
            ).fetchone()
            if renewed is None:
                # The lease ran out (or this member fenced itself): a new one, under a new
                # epoch. Whatever ran here under the old one may be another's by now; the
                # database refuses the old epoch's writes from now on.
                late = conn.execute(
                    f"SELECT {NOW} - lease_until FROM daemons WHERE id = %s", (self.member,)
                ).fetchone()
                overdue = float(late[0]) if late is not None else math.inf
                renewed = conn.execute(
                    "INSERT INTO daemons(id, host, pid, started_at, beat_at, lease_until, http, "
                    f"listens, epoch) VALUES (%s, %s, %s, {NOW}, {NOW}, {NOW} + %s, %s, %s, "
                    "nextval('lease_epochs')) ON CONFLICT (id) DO UPDATE SET beat_at = "
                    "excluded.beat_at, lease_until = excluded.lease_until, http = excluded.http, "
                    "listens = excluded.listens, epoch = excluded.epoch RETURNING epoch",
                    (
                        self.member,
                        socket.gethostname(),
                        _pid_of(self.member),
                        self.store.lease,
                        self.http,
                        listens,
                    ),
                ).fetchone()
                assert renewed is not None
            new_epoch = int(renewed[0])
            this_host = socket.gethostname()
            others = conn.execute(
                f"SELECT id, host, lease_until > {NOW}, listens FROM daemons WHERE id <> %s",
                (self.member,),
            ).fetchall()
            elsewhere: set[str] = set()
            for member, host, live, prefixes in others:
                if live and host == this_host and not _process_alive(str(member)):
                    # Its process is gone: no need to wait for its lease to run out.
                    conn.execute(
                        f"UPDATE daemons SET lease_until = {NOW} - 1 WHERE id = %s", (member,)
                    )
                    continue
                if live:
                    elsewhere.update(p for p in str(prefixes).split(" ") if p)
            reaped = conn.execute(
                "UPDATE tasks SET status = 'interrupted', cause = 'disconnect', updated_at = %s "
                "WHERE status = 'running' AND runner IS NOT NULL AND NOT EXISTS (SELECT 1 FROM "
                f"daemons d WHERE d.id = tasks.runner AND d.lease_until > {NOW}) "
                "RETURNING session_id, runner",
                (time.time(),),
            ).fetchall()
            # And this member's own tasks that it runs no more: their run ended while the
            # database was away, and could not say so; or they were taken under an epoch
            # of this member's that is stale now. Which sessions run here is asked now,
            # under the write lock: a resume registers its run before its claim takes the
            # lock, so a task claimed before this point is seen running, where a list made
            # before the lock was taken would miss it (and interrupt a live run's task). A
            # run stopped with its task kept is still listed until its stop is written (its
            # final event goes out first): that write says why it stopped, not this one.
            running_here = trio.from_thread.run_sync(self.executor.held)
            orphaned = conn.execute(
                "UPDATE tasks SET status = 'interrupted', cause = 'disconnect', updated_at = %s "
                "WHERE status = 'running' AND runner = %s AND (NOT (session_id = ANY(%s)) OR "
                "epoch IS DISTINCT FROM %s) RETURNING session_id",
                (time.time(), self.member, running_here, new_epoch),
            ).fetchall()
            gone = conn.execute(
                "DELETE FROM questions q WHERE NOT EXISTS (SELECT 1 FROM daemons d WHERE "
                f"d.id = q.member AND d.lease_until > {NOW}) RETURNING id"
            ).fetchall()
            conn.execute(
                f"DELETE FROM daemons WHERE lease_until < {NOW} - %s",
                (self.store.lease * FORGET_AFTER_LEASES,),
            )
        return (
            new_epoch,
            overdue,
            elsewhere,
            [(str(s), str(r)) for s, r in reaped],
            [str(s) for (s,) in orphaned],
            [str(q) for (q,) in gone],
        )

    def _lock(self) -> tuple[int, int]:
        return LOCK_CLASS, self.store.lock_key

    async def _heartbeat(self) -> None:
        failing = False
        while True:
            await trio.sleep(self.beat_seconds)
            try:
                await self.beat()
            except (psycopg.Error, FleetError) as exc:
                self._beat_conn = None
                if not failing:  # said once per outage, not at every beat
                    log.warning("fleet heartbeat failed: %s", " ".join(str(exc).split()))
                failing = True
            else:
                if failing:
                    log.warning("fleet heartbeat: the database answers again")
                failing = False

    # -- messages ------------------------------------------------------------------

    async def send(self, message: dict[str, Any]) -> None:
        """Send `message` (with ``from`` set) to every member; raises `FleetError` if too large."""
        payload = json.dumps({**message, "from": self.member}, separators=(",", ":"))
        if len(payload.encode("utf-8")) > MAX_NOTIFY:
            raise FleetError(
                f"a message of {len(payload)} characters cannot cross the fleet (at most "
                f"{MAX_NOTIFY} bytes)"
            )
        async with self._send_lock:
            await trio.to_thread.run_sync(self._send_sync, payload)

    def _send_sync(self, payload: str) -> None:
        for attempt in (1, 2):
            conn = self._send_conn
            if conn is None or conn.closed or conn.broken:
                conn = self._send_conn = connect(self.store.url)
            try:
                conn.execute("SELECT pg_notify(%s, %s)", (self.store.channel, payload))
                return
            except psycopg.OperationalError:
                self._send_conn = None
                if attempt == 2:
                    raise

    async def request(
        self, to: str, message: dict[str, Any], seconds: float = REPLY_SECONDS
    ) -> dict[str, Any] | None:
        """Send `message` to member `to` and wait for its reply; None if none came in time."""
        ref = secrets.token_hex(8)
        send, receive = trio.open_memory_channel[dict[str, Any]](1)
        self._replies[ref] = send
        try:
            await self.send({**message, "to": to, "ref": ref})
            with trio.move_on_after(seconds):
                return await receive.receive()
            return None
        finally:
            del self._replies[ref]

    async def _reply(self, to: dict[str, Any], **fields: Any) -> None:
        try:
            await self.send({"kind": "reply", "to": to.get("from"), "ref": to.get("ref"), **fields})
        except (psycopg.Error, FleetError) as exc:
            log.warning("could not reply to %s: %s", to.get("from"), exc)

    async def _connect_listener(self) -> None:
        def open_listener() -> psycopg.Connection[Any]:
            conn = connect(self.store.url)
            conn.execute(f'LISTEN "{self.store.channel}"')
            conn.pgconn.nonblocking = 1
            return conn

        self._listen = await trio.to_thread.run_sync(open_listener)

    async def _receive(self) -> None:
        while True:
            conn = self._listen
            try:
                if conn is None:
                    raise psycopg.OperationalError("not connected")
                await trio.lowlevel.wait_readable(conn.pgconn.socket)
                conn.pgconn.consume_input()
            except (psycopg.Error, OSError) as exc:
                log.warning("fleet channel lost (%s); reconnecting", exc)
                if conn is not None:
                    conn.close()
                self._listen = None
                await trio.sleep(self.beat_seconds)
                try:
                    await self._connect_listener()
                    # What was said while this member was deaf: the open questions.
                    await self._mirror_open_questions()
                except psycopg.Error:
                    pass
                continue
            while True:
                note = conn.pgconn.notifies()
                if note is None:
                    break
                try:
                    message = json.loads(note.extra.decode("utf-8"))
                except ValueError:
                    continue
                if isinstance(message, dict) and message.get("from") != self.member:
                    self._dispatch(message)

    def _dispatch(self, message: dict[str, Any]) -> None:
        kind = message.get("kind")
        to = message.get("to")
        if to is not None and to != self.member:
            return
        assert self._nursery is not None
        if kind == "reply":
            channel = self._replies.get(str(message.get("ref")))
            if channel is not None:
                with contextlib.suppress(trio.WouldBlock):  # a second reply: the first counts
                    channel.send_nowait(message)
        elif kind == "cancel":
            self._nursery.start_soon(self._apply_cancel, message)
        elif kind == "answer":
            self._nursery.start_soon(self._apply_answer, message)
        elif kind == "question":
            self._nursery.start_soon(self._mirror_by_id, str(message.get("id")))
        elif kind == "closed":
            for question in message.get("ids") or ():
                scope = self._proxies.get(str(question))
                if scope is not None:
                    scope.cancel()

    # -- cancels -------------------------------------------------------------------

    async def cancel(self, task_hash: str, cause: Cause, kind: str | None) -> TaskInfo:
        """Cancel a task running on another member, for a front-end of `kind` here.

        Raises `UnknownTaskError` as a cancel on one daemon does when no member
        runs it, or when the task was not started by a front-end of that kind.
        """

        def find() -> tuple[str, str] | None:
            with connect(self.store.url) as conn:
                row = conn.execute(
                    "SELECT session_id, runner FROM tasks WHERE task_hash = %s AND "
                    "status = 'running'",
                    (task_hash,),
                ).fetchone()
            return None if row is None else (str(row[0]), str(row[1]))

        found = await trio.to_thread.run_sync(find)
        unknown = UnknownTaskError(f"no running task {task_hash!r}: unknown or already finished")
        if found is None or found[1] == self.member:
            raise unknown
        session_id, runner = found
        reply = await self.request(
            runner, {"kind": "cancel", "task_hash": task_hash, "cause": cause.value, "owner": kind}
        )
        if reply is None or not reply.get("ok"):
            raise unknown
        return TaskInfo(task_hash, session_id, owner=runner, window_hash=None)

    async def _apply_cancel(self, message: dict[str, Any]) -> None:
        try:
            cause = Cause.parse(str(message.get("cause")))
            owner = message.get("owner")
            info = self.executor.cancel_from(
                str(message.get("task_hash")), cause, owner if isinstance(owner, str) else None
            )
        except (UnknownTaskError, NotOwnerError, ValueError) as exc:
            await self._reply(message, ok=False, error=str(exc))
            return
        await self._reply(message, ok=True, session_id=info.session_id)

    # -- questions -------------------------------------------------------------------

    def _taken_elsewhere(self, origin: str) -> bool:
        return any(origin.startswith(prefix) for prefix in self._elsewhere)

    def _posted(self, entry: Entry) -> None:
        if entry.context.window_hash is not None or entry.id in self._proxies:
            return  # a window's question stays with its window; a mirror is not shared again
        if self._nursery is not None:
            self._nursery.start_soon(self._share, entry)

    async def _share(self, entry: Entry) -> None:
        ctx = entry.context
        request = json.dumps(converter.unstructure(entry.request, Request))

        def record() -> None:
            with connect(self.store.url) as conn:
                conn.execute(
                    "INSERT INTO questions(id, member, session_id, task_hash, agent_path, "
                    f"request, posted_at) VALUES (%s, %s, %s, %s, %s, %s, {NOW}) "
                    "ON CONFLICT (id) DO NOTHING",
                    (entry.id, self.member, ctx.session_id, ctx.task_hash, ctx.agent_path, request),
                )

        def forget() -> None:
            with connect(self.store.url) as conn:
                conn.execute("DELETE FROM questions WHERE id = %s", (entry.id,))

        try:
            if entry.done:
                return
            await trio.to_thread.run_sync(record)
            await self.send({"kind": "question", "id": entry.id})
            await entry.wait_done()
        except (psycopg.Error, FleetError) as exc:
            log.warning("question %s could not be shared with the fleet: %s", entry.id, exc)
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(REPLY_SECONDS):
                try:
                    await trio.to_thread.run_sync(forget)
                    await self.send({"kind": "closed", "ids": [entry.id]})
                except (psycopg.Error, FleetError):
                    pass  # the heartbeat of the members drops it once this one's lease ends

    async def _mirror_open_questions(self) -> None:
        def read() -> list[tuple[Any, ...]]:
            with connect(self.store.url) as conn:
                return conn.execute(
                    "SELECT id, member, session_id, task_hash, agent_path, request FROM questions "
                    "WHERE member <> %s ORDER BY posted_at",
                    (self.member,),
                ).fetchall()

        assert self._nursery is not None
        for row in await trio.to_thread.run_sync(read):
            if str(row[0]) not in self._proxies:
                self._start_mirror(row)

    async def _mirror_by_id(self, question: str) -> None:
        def read() -> tuple[Any, ...] | None:
            with connect(self.store.url) as conn:
                return conn.execute(
                    "SELECT id, member, session_id, task_hash, agent_path, request FROM questions "
                    "WHERE id = %s",
                    (question,),
                ).fetchone()

        try:
            row = await trio.to_thread.run_sync(read)
        except psycopg.Error as exc:
            log.warning("question %s of the fleet could not be read: %s", question, exc)
            return
        if row is not None and str(row[0]) not in self._proxies:
            self._start_mirror(row)

    def _start_mirror(self, row: tuple[Any, ...]) -> None:
        question, member, session_id, task_hash, agent_path, raw = row
        try:
            request = converter.structure(json.loads(raw), Request)
        except Exception as exc:  # a row of a newer or damaged agentrt: not ours to post
            log.warning("question %s of the fleet is unreadable: %s", question, exc)
            return
        ctx = RequestContext(str(session_id), None, task_hash, str(agent_path or ""))
        scope = trio.CancelScope()
        self._proxies[str(question)] = scope
        assert self._nursery is not None
        self._nursery.start_soon(self._mirror, str(question), str(member), request, ctx, scope)

    async def _mirror(
        self,
        question: str,
        member: str,
        request: Request,
        ctx: RequestContext,
        scope: trio.CancelScope,
    ) -> None:
        """Post another member's question here; send the answer one of our listeners gives."""
        try:
            with scope:
                try:
                    answer = await self.registry.ask(request, context=ctx, entry_id=question)
                except RegistryError:
                    return  # the listener that claimed it went away; the owner still asks
                reply = await self.request(
                    member,
                    {
                        "kind": "answer",
                        "id": question,
                        "value": answer.value,
                        "secret": answer.secret,
                    },
                )
                if reply is None or not reply.get("ok"):
                    log.warning(
                        "the answer to %s was not taken: %s",
                        question,
                        "no reply" if reply is None else reply.get("error"),
                    )
        except (psycopg.Error, FleetError) as exc:
            log.warning("the answer to %s could not be sent: %s", question, exc)
        finally:
            self._proxies.pop(question, None)

    async def _apply_answer(self, message: dict[str, Any]) -> None:
        entry = self.registry.find(str(message.get("id")))
        secret = message.get("secret")
        try:
            if entry is None:
                settled = self.registry.settled(str(message.get("id")))
                raise EntryGoneError(
                    settled.trace.refusal()
                    if settled is not None
                    else f"question {message.get('id')} is no longer waiting"
                )
            entry.answer(
                entry.check(
                    Answer(
                        str(message.get("value")),
                        secret=secret if isinstance(secret, str) else None,
                    )
                )
            )
        except (EntryGoneError, AlreadyAnsweredError, BadAnswerError) as exc:
            await self._reply(message, ok=False, error=str(exc))
            return
        await self._reply(message, ok=True)


def _pid_of(member: str) -> int:
    """The pid in a member's id (``fleet:HOST:PID:START:RANDOM``)."""
    parts = member.split(":")
    try:
        return int(parts[2])
    except (IndexError, ValueError):
        return 0


def _process_alive(member: str) -> bool:
    """Whether the process of a member on this machine still runs (its pid and start time)."""
    parts = member.split(":")
    if len(parts) < 5:
        return True
    return token_alive(f"{parts[2]}:{parts[3]}")


# -- what `agentrt fleet status` shows ----------------------------------------------------


@record
class Lease:
    """A running task and the member whose lease holds it."""

    session_id: str
    task_hash: str | None
    member: str


@record
class MemberStatus:
    """One member of the fleet as the database sees it now."""

    id: str
    host: str
    pid: int
    http: str | None
    #: Seconds since its last heartbeat, and until its lease runs out (negative: ran out).
    beat_age: float
    lease_left: float
    listens: tuple[str, ...]
    leases: tuple[Lease, ...]

    @property
    def live(self) -> bool:
        """Whether its lease still runs."""
        return self.lease_left > 0


@record
class FleetStatus:
    """Every member, its heartbeat and its leases; the tasks its end interrupted."""

    location: str
    schema_version: int
    members: tuple[MemberStatus, ...]
    #: Running tasks whose runner is in no member's row (left by one forgotten long ago).
    orphans: tuple[Lease, ...]
    #: Tasks interrupted with cause ``disconnect``: resumable by any member.
    disconnected: int

    def as_json(self) -> dict[str, Any]:
        """What ``agentrt fleet status --json`` prints."""
        return {
            "store": self.location,
            "schema_version": self.schema_version,
            "members": [
                {
                    "id": m.id,
                    "host": m.host,
                    "pid": m.pid,
                    "http": m.http,
                    "live": m.live,
                    "heartbeat_age": round(m.beat_age, 3),
                    "lease_left": round(m.lease_left, 3),
                    "listens": list(m.listens),
                    "leases": [
                        {"session_id": t.session_id, "task_hash": t.task_hash} for t in m.leases
                    ],
                }
                for m in self.members
            ],
            "orphans": [
                {"session_id": t.session_id, "task_hash": t.task_hash} for t in self.orphans
            ],
            "disconnected": self.disconnected,
        }


def read_status(url: str) -> FleetStatus:
    """The fleet of the database at `url`, read without joining it (blocking).

    Raises `StoreError` when the database cannot be reached or holds no agentrt store.
    """
    from ..store import StoreError
    from ..store.postgres import display_url
    from ..store.postgres import failed_error
    from ..store.postgres import unreachable_error

    location = display_url(url)
    try:
        conn = connect(url)
    except psycopg.Error as exc:
        raise unreachable_error(location, exc) from None
    try:
        with conn:
            exists = conn.execute("SELECT to_regclass('agentrt_schema')").fetchone()
            if exists is None or exists[0] is None:
                raise StoreError(f"{location} holds no agentrt task store (no daemon used it yet)")
            version_row = conn.execute("SELECT version FROM agentrt_schema").fetchone()
            rows = conn.execute(
                f"SELECT id, host, pid, http, {NOW} - beat_at, lease_until - {NOW}, listens "
                "FROM daemons ORDER BY started_at, id"
            ).fetchall()
            running = conn.execute(
                "SELECT session_id, task_hash, runner FROM tasks WHERE status = 'running' "
                "ORDER BY session_id"
            ).fetchall()
            disconnected = conn.execute(
                "SELECT count(*) FROM tasks WHERE status = 'interrupted' AND cause = 'disconnect'"
            ).fetchone()
    except psycopg.Error as exc:
        raise failed_error(location, exc) from None
    by_member: dict[str, list[Lease]] = {}
    for session_id, task_hash, runner in running:
        by_member.setdefault(str(runner), []).append(Lease(str(session_id), task_hash, str(runner)))
    members = tuple(
        MemberStatus(
            id=str(m),
            host=str(host),
            pid=int(pid),
            http=http,
            beat_age=float(age),
            lease_left=float(left),
            listens=tuple(p for p in str(listens or "").split(" ") if p),
            leases=tuple(by_member.pop(str(m), [])),
        )
        for m, host, pid, http, age, left, listens in rows
    )
    return FleetStatus(
        location=location,
        schema_version=int(version_row[0]) if version_row else 0,
        members=members,
        orphans=tuple(lease for leases in by_member.values() for lease in leases),
        disconnected=int(disconnected[0]) if disconnected else 0,
    )

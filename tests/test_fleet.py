"""The fleet in one process: two members on one PostgreSQL schema, as two daemons would be.

Each member is a whole runtime (its own store connection, executor, registry
and fleet service), so what crosses between them crosses the database:
leases, the reaper, cancels and questions on LISTEN/NOTIFY. The daemons as
real processes, killed with SIGKILL, are in ``test_fleet_daemons.py``.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import urllib.parse
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import psycopg
import pytest
import trio
import trio.testing

from agentrt import Cause
from agentrt import Message
from agentrt import NoPendingTaskError
from agentrt import Outcome
from agentrt import RunEnded
from agentrt import Runtime
from agentrt import ScriptedModel
from agentrt import SessionBusyError
from agentrt import StoreError
from agentrt import TaskRecord
from agentrt import TaskStatus
from agentrt import ToolCallEvent
from agentrt import UnknownTaskError
from agentrt import open_runtime
from agentrt.core.executor import TaskInfo
from agentrt.store.postgres import NOW
from agentrt.store.postgres import SCHEMA_VERSION

from .conftest import FakeVerifier
from .conftest import Recorder
from .fakes.tcp_proxy import TcpProxy

pytestmark = pytest.mark.deadline(60)


@asynccontextmanager
async def member(root: Path, url: str, workdir: Path) -> AsyncIterator[Runtime]:
    """One member of the fleet: a runtime on the shared schema, with a state dir of its own."""
    async with open_runtime(
        root,
        model=ScriptedModel(word_delay=0, stream_delay=0),
        workdir=workdir,
        restricted_paths=[root / "restricted"],
        verifier=FakeVerifier(),
        store=url,
    ) as rt:
        assert rt.fleet is not None
        yield rt


@asynccontextmanager
async def two_members(
    tmp_path: Path, url: str, workdir: Path
) -> AsyncIterator[tuple[Runtime, Runtime]]:
    async with (
        member(tmp_path / "a", url, workdir) as a,
        member(tmp_path / "b", url, workdir) as b,
    ):
        yield a, b


def _runs_of(workdir: Path, marker: str) -> int:
    try:
        return (workdir / "counter").read_text().split().count(marker)
    except FileNotFoundError:
        return 0


async def _resume(runtime: Runtime, session: str, results: list[str]) -> None:
    try:
        ended = await runtime.executor.resume(session, answer="allow", owner="o", emit=Recorder())
        results.append(ended.outcome.value)
    except SessionBusyError:
        results.append("busy")
    except NoPendingTaskError:
        results.append("gone")


async def test_two_members_resuming_one_task_at_once_run_it_once(
    tmp_path: Path, postgres_url: str, workdir: Path
) -> None:
    """100 trials: both members resume the same parked task at the same moment."""
    outcomes: dict[str, int] = {}
    async with two_members(tmp_path, postgres_url, workdir) as (a, b):
        for trial in range(100):
            session = f"chat-race{trial}"
            marker = f"m{trial}"
            parked = await a.executor.run(
                session, f"sh echo {marker} >> counter", owner="setup", emit=Recorder()
            )
            assert parked.outcome is Outcome.AWAITING_ANSWER  # nobody listens: saved
            results: list[str] = []
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_resume, a, session, results)
                nursery.start_soon(_resume, b, session, results)
            assert _runs_of(workdir, marker) == 1, (trial, results)
            assert results.count("finished") == 1, results
            key = "+".join(sorted(results))
            outcomes[key] = outcomes.get(key, 0) + 1
    assert sum(outcomes.values()) == 100
    assert set(outcomes) <= {"busy+finished", "finished+gone"}, outcomes
    # The loser found the task taken (not merely gone): the two really met at the store.
    assert outcomes.get("busy+finished", 0) > 0, outcomes


async def test_a_cancel_sent_to_another_member_stops_its_run_with_the_cause(
    tmp_path: Path, postgres_url: str, workdir: Path
) -> None:
    async with two_members(tmp_path, postgres_url, workdir) as (a, b), trio.open_nursery() as n:
        assert b.fleet is not None
        results: list[Outcome] = []
        ended = {"chat-paused": trio.Event(), "chat-dropped": trio.Event()}

        async def run_long(session: str, *, task_status: trio.TaskStatus[TaskInfo]) -> None:
            result = await a.executor.run(
                session, "sleep 60", owner="o", emit=Recorder(), task_status=task_status
            )
            results.append(result.outcome)
            ended[session].set()

        info = await n.start(partial(run_long, "chat-paused"))
        paused = await b.fleet.cancel(info.task_hash, Cause.PAUSE, kind=None)
        assert paused.session_id == "chat-paused"
        await ended["chat-paused"].wait()
        record = await b.store.load("chat-paused")
        assert record is not None
        assert (record.status, record.cause) == (TaskStatus.INTERRUPTED, Cause.PAUSE)
        # A front-end may stop only the runs a front-end of its kind started, as on one daemon.
        info = await n.start(partial(run_long, "chat-dropped"))
        with pytest.raises(UnknownTaskError, match="unknown or already finished"):
            await b.fleet.cancel(info.task_hash, Cause.USER_CANCEL, kind="http")
        await b.fleet.cancel(info.task_hash, Cause.USER_CANCEL, kind=None)
        await ended["chat-dropped"].wait()
        with pytest.raises(UnknownTaskError):
            await b.fleet.cancel("000000000000", Cause.PAUSE, kind=None)
    assert results == [Outcome.CANCELLED, Outcome.CANCELLED]
    async with member(tmp_path / "c", postgres_url, workdir) as c:
        assert await c.store.load("chat-dropped") is None  # a user-cancel deletes it


async def test_a_question_is_answered_through_the_member_whose_front_end_listens(
    tmp_path: Path, postgres_url: str, workdir: Path
) -> None:
    """A Telegram run on a asks; only b runs the bot (listens to tg-); b's answer reaches a."""
    async with two_members(tmp_path, postgres_url, workdir) as (a, b), trio.open_nursery() as n:
        assert a.fleet is not None and b.fleet is not None
        with b.registry.listen("tg-", name="telegram") as bot:
            await b.fleet.beat()  # says b listens to tg-
            await a.fleet.beat()  # hears it
            assert a.registry.has_listener("tg-")
            ended: list[Outcome] = []
            done = trio.Event()

            async def run() -> None:
                result = await a.executor.run(
                    "tg-42", "sh echo tg >> counter", owner="bot", emit=Recorder()
                )
                ended.append(result.outcome)
                done.set()

            n.start_soon(run)
            entry = await bot.claim()
            assert entry.context.session_id == "tg-42"
            asked = a.registry.find(entry.id)  # the id it has on a, too
            assert asked is not None and asked.request == entry.request
            entry.answer("allow")
        await done.wait()
    assert ended == [Outcome.FINISHED]
    assert _runs_of(workdir, "tg") == 1


async def test_the_tasks_of_a_member_whose_lease_ran_out_become_interrupted(
    tmp_path: Path, postgres_url: str, workdir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    dead = await trio.lowlevel.open_process([sys.executable, "-c", "pass"])
    await dead.wait()
    dead_pid = dead.pid
    here = socket.gethostname()
    gone_elsewhere = "fleet:otherhost:1:1:aaaaaa"
    gone_here = f"fleet:{here}:{dead_pid}:1:bbbbbb"
    async with member(tmp_path / "a", postgres_url, workdir) as a:
        assert a.fleet is not None
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO daemons(id, host, pid, started_at, beat_at, lease_until) VALUES "
                f"(%s, 'otherhost', 1, 0, 0, {NOW} - 1), (%s, %s, %s, 0, 0, {NOW} + 600)",
                (gone_elsewhere, gone_here, here, dead_pid),
            )
        call = Message.assistant("", ())
        # And one of this member's own, marked running with no run of it here.
        own = a.fleet.member
        for session, runner in (("chat-x", gone_elsewhere), ("chat-y", gone_here), ("chat-z", own)):
            await a.store.save(TaskRecord(session, "x", (Message.user("x"), call), runner=runner))
        with caplog.at_level("WARNING", logger="agentrt.fleet"):
            await a.fleet.beat()
        said = [r.getMessage() for r in caplog.records if r.name == "agentrt.fleet"]
        # The lease of one ran out; the process of the other is gone from this machine.
        assert any(f"the lease of {gone_elsewhere} ran out: session chat-x" in m for m in said)
        assert any(f"the lease of {gone_here} ran out: session chat-y" in m for m in said)
        # This member's lease did not run out: no warning names it; its task's says why.
        assert not any(own in m for m in said), said
        assert any(
            m.startswith("session chat-z was held by this daemon, but no run of it is here")
            for m in said
        ), said
        for session in ("chat-x", "chat-y", "chat-z"):
            record = await a.store.load(session)
            assert record is not None
            assert (record.status, record.cause) == (TaskStatus.INTERRUPTED, Cause.DISCONNECT)
            ended = await a.executor.resume(session, owner="o", emit=Recorder())
            assert ended.outcome is Outcome.FINISHED


async def test_a_task_resumed_while_a_heartbeat_waits_for_the_database_keeps_its_run(
    tmp_path: Path, postgres_url: str, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A heartbeat interrupts this member's own tasks that no run holds here any more; one
    resumed after the heartbeat began, but claimed before it reached the database, is
    running here and stays the run's (no other member may take it from a live run)."""
    async with member(tmp_path / "a", postgres_url, workdir) as a, trio.open_nursery() as runs:
        assert a.fleet is not None
        paused = trio.Event()

        async def first_run(*, task_status: trio.TaskStatus[TaskInfo]) -> None:
            run = partial(a.executor.run, "chat-live", "sleep 60", owner="o", emit=Recorder())
            await run(task_status=task_status)
            paused.set()

        started = await runs.start(first_run)
        a.executor.cancel(started.task_hash, Cause.PAUSE, owner="o")
        with trio.fail_after(10):
            await paused.wait()
        # Each heartbeat's database work waits at the gate until the resume has claimed.
        gate = threading.Event()
        beat_sync = type(a.fleet)._beat_sync

        def gated(self: Any, *args: Any) -> Any:
            assert gate.wait(10)
            return beat_sync(self, *args)

        monkeypatch.setattr(type(a.fleet), "_beat_sync", gated)
        beaten = trio.Event()

        async def beat() -> None:
            assert a.fleet is not None
            await a.fleet.beat()
            beaten.set()

        runs.start_soon(beat)
        await trio.testing.wait_all_tasks_blocked()
        resumed = await runs.start(
            partial(a.executor.resume, "chat-live", owner="o", emit=Recorder())
        )
        gate.set()
        with trio.fail_after(10):
            await beaten.wait()
        record = await a.store.load("chat-live")
        assert record is not None
        assert (record.status, record.cause) == (TaskStatus.RUNNING, None)
        a.executor.cancel(resumed.task_hash, Cause.PAUSE, owner="o")


async def test_a_heartbeat_between_a_pause_and_its_write_leaves_the_task_to_the_pause(
    tmp_path: Path, postgres_url: str, workdir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A pause's final event goes out before the write that marks its task paused: a heartbeat
    in between finds the row still running and no run of it here, and must not take it for
    a run that ended while the database was away (interrupted, disconnect, and a warning)."""
    async with member(tmp_path / "a", postgres_url, workdir) as a, trio.open_nursery() as runs:
        assert a.fleet is not None
        fleet = a.fleet
        seen: list[tuple[str, str | None] | None] = []
        ended: list[RunEnded] = []
        over = trio.Event()
        recorder = Recorder()

        async def beat_at_the_end(event: object) -> None:
            if isinstance(event, RunEnded):
                # The row as the heartbeat finds it (read aside: a store call would send the
                # pause's write, queued before it, first).
                with psycopg.connect(postgres_url, autocommit=True) as conn:
                    row = conn.execute(
                        "SELECT status, cause FROM tasks WHERE session_id = 'chat-p'"
                    ).fetchone()
                seen.append(row)
                await fleet.beat()

        recorder.hooks.append(beat_at_the_end)

        async def run(*, task_status: trio.TaskStatus[TaskInfo]) -> None:
            ended.append(
                await a.executor.run(
                    "chat-p", "sleep 60", owner="o", emit=recorder, task_status=task_status
                )
            )
            over.set()

        with caplog.at_level("WARNING", logger="agentrt.fleet"):
            started = await runs.start(run)
            a.executor.cancel(started.task_hash, Cause.PAUSE, owner="o")
            with trio.fail_after(10):
                await over.wait()  # its final event out, then its write made
            await fleet.beat()  # and one after it: the task stays paused
        record = await a.store.load("chat-p")
    assert seen == [("running", None)]
    assert [(e.outcome, e.cause, e.pending_kept) for e in ended] == [
        (Outcome.CANCELLED, Cause.PAUSE, True)
    ]
    assert [r.getMessage() for r in caplog.records if r.name == "agentrt.fleet"] == []
    assert record is not None
    assert (record.status, record.cause) == (TaskStatus.INTERRUPTED, Cause.PAUSE)


async def test_a_member_cut_off_past_its_lease_stops_its_runs_and_frees_their_tasks(
    tmp_path: Path, postgres_url: str, workdir: Path, nursery: trio.Nursery
) -> None:
    """Before another member may take its tasks over, a member that lost the database stops."""
    parts = urllib.parse.urlsplit(postgres_url)
    proxy = TcpProxy(parts.hostname or "127.0.0.1", parts.port or 5432)
    port = await nursery.start(proxy.serve)
    through = postgres_url.replace(f":{parts.port or 5432}/", f":{port}/", 1)
    async with (
        open_runtime(
            tmp_path / "cut",
            model=ScriptedModel(word_delay=0, stream_delay=0),
            workdir=workdir,
            store=through,
            lease=1.0,
        ) as cut,
        member(tmp_path / "b", postgres_url, workdir) as b,
        trio.open_nursery() as runs,
    ):
        assert cut.fleet is not None and b.fleet is not None
        done = trio.Event()
        ends: list[tuple[Outcome, Cause | None]] = []

        recorder = Recorder()

        def cut_once_sleeping(event: object) -> None:
            if isinstance(event, ToolCallEvent):  # committed; nothing is written while it sleeps
                proxy.cut()

        recorder.hooks.append(cut_once_sleeping)

        async def run() -> None:
            ended = await cut.executor.run("chat-cut", "sleep 60", owner="o", emit=recorder)
            ends.append((ended.outcome, ended.cause))
            done.set()

        runs.start_soon(run)
        with trio.fail_after(10):
            await done.wait()  # its lease ran out: the member stopped the run itself
        assert ends == [(Outcome.CANCELLED, Cause.DISCONNECT)]
        proxy.restore()
        # The run's end could not be written while the database was away; once the member
        # is back, its heartbeat frees the task it no longer runs, for any member to resume.
        with trio.fail_after(10):
            while True:
                await cut.fleet.beat()
                record = await b.store.load("chat-cut")
                assert record is not None
                if record.status is TaskStatus.INTERRUPTED:
                    break
        assert record.cause is Cause.DISCONNECT
        async with trio.open_nursery() as again:
            info = await again.start(
                partial(b.executor.resume, "chat-cut", owner="o", emit=Recorder())
            )
            assert info.session_id == "chat-cut"  # taken by b: it runs there now
            b.executor.cancel(info.task_hash, Cause.PAUSE)


async def test_fleet_status_lists_the_daemons_their_heartbeats_and_the_tasks_they_hold(
    tmp_path: Path, postgres_url: str, workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from agentrt.apps.cli import main

    async with member(tmp_path / "a", postgres_url, workdir) as a, trio.open_nursery() as n:
        assert a.fleet is not None
        info = await n.start(
            partial(a.executor.run, "chat-held", "sleep 60", owner="o", emit=Recorder())
        )
        status = await trio.to_thread.run_sync(main, ["fleet", "status", "--store", postgres_url])
        out = capsys.readouterr().out
        short = a.fleet.member.rsplit(":", 1)[-1]
        assert status == 0
        assert f"(schema version {SCHEMA_VERSION})" in out
        assert f"\n{short}  {socket.gethostname()}" in out
        assert f"chat-held  task {info.task_hash}  held by {short}" in out
        await trio.to_thread.run_sync(main, ["fleet", "status", "--json", "--store", postgres_url])
        data = json.loads(capsys.readouterr().out)
        [me] = data["members"]
        assert me["live"] and me["lease_left"] > 0
        assert me["leases"] == [{"session_id": "chat-held", "task_hash": info.task_hash}]
        a.executor.cancel(info.task_hash, Cause.PAUSE)
    assert await trio.to_thread.run_sync(main, ["fleet", "status"]) == 2
    assert "the store is not PostgreSQL, so there is no fleet" in capsys.readouterr().err


async def test_a_member_past_its_own_lease_takes_no_task_until_it_joins_again(
    tmp_path: Path, postgres_url: str, workdir: Path
) -> None:
    async with two_members(tmp_path, postgres_url, workdir) as (a, b):
        assert a.fleet is not None
        parked = await a.executor.run(
            "chat-lapse", "sh echo lapse >> counter", owner="o", emit=Recorder()
        )
        assert parked.outcome is Outcome.AWAITING_ANSWER
        before = await b.store.load("chat-lapse")
        # Its heartbeat held back, the member's lease runs out in the database.
        async with a.fleet._beat_lock:
            with psycopg.connect(postgres_url, autocommit=True) as conn:
                conn.execute(
                    f"UPDATE daemons SET lease_until = {NOW} - 1 WHERE id = %s", (a.fleet.member,)
                )
            with pytest.raises(StoreError, match="lease in the fleet has run out"):
                await a.executor.run("chat-new", "hello", owner="o", emit=Recorder())
            with pytest.raises(StoreError, match="lease in the fleet has run out"):
                await a.executor.resume("chat-lapse", answer="allow", owner="o", emit=Recorder())
        assert await b.store.load("chat-new") is None
        assert await b.store.load("chat-lapse") == before
        assert _runs_of(workdir, "lapse") == 0
        # Its next heartbeat joins again, under a new epoch: it takes tasks again.
        old = a.fleet.store.epoch
        await a.fleet.beat()
        assert a.fleet.store.epoch > old
        resumed = await a.executor.resume("chat-lapse", answer="allow", owner="o", emit=Recorder())
        assert resumed.outcome is Outcome.FINISHED
        assert _runs_of(workdir, "lapse") == 1

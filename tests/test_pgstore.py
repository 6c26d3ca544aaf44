"""The PostgreSQL store's own ground: its schema, its write lock, an outage, and who holds a task.

The behaviour both backends share is tested on both (the `store` and
`any_runtime` fixtures); these are what only a database server has.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import urllib.parse
from collections.abc import AsyncIterator
from collections.abc import Callable
from pathlib import Path
from typing import Any
from typing import cast

import psycopg
import pytest
import trio
from trio.testing import wait_all_tasks_blocked

from agentrt import Cause
from agentrt import Message
from agentrt import Outcome
from agentrt import StoreError
from agentrt import TaskRecord
from agentrt import TaskStatus
from agentrt import ToolCallEvent
from agentrt import ToolResultEvent
from agentrt.core.runtime import open_runtime
from agentrt.models.scripted import ScriptedModel
from agentrt.store import StaleLeaseError
from agentrt.store import Store
from agentrt.store import TaskTakenError
from agentrt.store.postgres import LOCK_CLASS
from agentrt.store.postgres import NOW
from agentrt.store.postgres import SCHEMA_VERSION
from agentrt.store.postgres import PgConnection
from agentrt.store.postgres import PgStore
from agentrt.store.postgres import display_url
from agentrt.store.postgres import open_pool
from agentrt.vocab.usage import TokenCount

from .conftest import Recorder
from .conftest import with_schema
from .fakes.tcp_proxy import TcpProxy


@contextlib.asynccontextmanager
async def opened(url: str, **options: Any) -> AsyncIterator[PgStore]:
    """`PgStore.open(url, **options)`, closed at the end of the block."""
    store = await PgStore.open(url, **options)
    try:
        yield store
    finally:
        await store.aclose()


async def proxied(postgres_url: str, nursery: trio.Nursery) -> tuple[TcpProxy, str]:
    """A proxy in front of the server, started in `nursery`, and the URL that goes through it."""
    parts = urllib.parse.urlsplit(postgres_url)
    proxy = TcpProxy(parts.hostname or "127.0.0.1", parts.port or 5432)
    port = await nursery.start(proxy.serve)
    return proxy, postgres_url.replace(f":{parts.port or 5432}/", f":{port}/", 1)


def end_store_connection(postgres_url: str, store: PgStore) -> None:
    """Have the server end the store's connection, as a restart or an administrator does."""
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        ended = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
            (f"agentrt store {store.runner}"[:63],),
        ).fetchall()
    assert ended == [(True,)]


def expire_lease(postgres_url: str, runner: str) -> None:
    """End `runner`'s lease in the fleet, as another member's heartbeat finds it."""
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"UPDATE daemons SET lease_until = {NOW} - 1 WHERE id = %s", (runner,))


async def test_the_schema_is_created_once_and_versioned(postgres_url: str) -> None:
    first, second = await PgStore.open(postgres_url), await PgStore.open(postgres_url)
    try:
        with psycopg.connect(postgres_url) as conn:
            versions = conn.execute("SELECT version FROM agentrt_schema").fetchall()
            members = conn.execute("SELECT id FROM daemons ORDER BY id").fetchall()
        assert versions == [(SCHEMA_VERSION,)] == [(5,)]
        assert sorted(m for (m,) in members) == sorted([first.runner, second.runner])
        await first.save(TaskRecord("chat-v", "x", (Message.user("x"),)))
        assert await second.load("chat-v") is not None
    finally:
        await first.aclose()
        await second.aclose()
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SELECT count(*) FROM daemons").fetchone() == (0,)


async def test_a_schema_of_version_4_keeps_its_models_and_gains_the_token_usage_table(
    postgres_url: str,
) -> None:
    from agentrt.store.postgres import MIGRATIONS

    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE agentrt_schema (version integer NOT NULL)")
        conn.execute("INSERT INTO agentrt_schema VALUES (4)")
        for version in range(1, 5):
            for statement in MIGRATIONS[version]:
                conn.execute(statement)
        conn.execute(
            "INSERT INTO sessions(session_id, created_at, updated_at, model) "
            "VALUES ('cli-old', 1, 2, 'openai:m1')"
        )
        assert conn.execute("SELECT to_regclass('token_usage')").fetchone() == (None,)
    async with opened(postgres_url) as store:
        assert await store.session_model("cli-old") == "openai:m1"
        await store.add_usage("cli-old", "abc", "openai:m1", TokenCount(1, 10, 2))
        assert [r.tokens for r in await store.usage("cli-old")] == [TokenCount(1, 10, 2)]
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SELECT version FROM agentrt_schema").fetchall() == [(5,)]


async def test_a_newer_schema_gets_a_clear_error(postgres_url: str) -> None:
    store = await PgStore.open(postgres_url)
    await store.aclose()
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("UPDATE agentrt_schema SET version = %s", (SCHEMA_VERSION + 1,))
    with pytest.raises(
        StoreError, match=rf"schema version {SCHEMA_VERSION + 1}, newer than this agentrt"
    ):
        await PgStore.open(postgres_url)


async def test_a_schema_that_is_not_agentrts_is_refused(postgres_url: str) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE tasks (id integer)")
    with pytest.raises(StoreError, match="a table 'tasks' that is not agentrt's"):
        await PgStore.open(postgres_url)


async def test_a_missing_schema_or_server_is_a_clear_error(postgres_base: str) -> None:
    with pytest.raises(StoreError, match=r"no schema to use .*\(CREATE SCHEMA NAME\)"):
        await PgStore.open(with_schema(postgres_base, "agentrt_no_such_schema"))
    with pytest.raises(StoreError, match=r"cannot be reached .* nothing it has stored is lost"):
        await PgStore.open("postgresql://postgres@127.0.0.1:1/test")


def test_the_password_never_shows() -> None:
    shown = display_url("postgresql://ada:s3cret@db.example:5432/agents")
    assert shown == "postgresql://ada@db.example:5432/agents"
    assert "s3cret" not in display_url("postgresql://db.example/agents?password=s3cret")


async def test_update_holds_the_fleet_write_lock_while_its_change_runs(
    postgres_url: str,
) -> None:
    async with opened(postgres_url) as store:
        await store.save(TaskRecord("cli-l", "x", (Message.user("x"),), status=TaskStatus.FAILED))
        others: list[bool] = []

        def change(record: TaskRecord) -> TaskRecord:
            # Another daemon's transaction may not take the lock while the change is decided.
            with psycopg.connect(postgres_url) as conn:
                row = conn.execute(
                    "SELECT pg_try_advisory_xact_lock(%s, %s)", (LOCK_CLASS, store.lock_key)
                ).fetchone()
                others.append(bool(row and row[0]))
            return record.evolve(status=TaskStatus.RUNNING)

        assert await store.update("cli-l", change) is not None
        assert others == [False]


async def test_only_a_resumes_claim_commits_without_waiting_for_the_wal_flush(
    postgres_url: str,
) -> None:
    async with opened(postgres_url) as store:
        connection = cast(PgConnection, store._db)

        def level(db: object) -> str:
            row = connection.connection().execute("SHOW synchronous_commit").fetchone()
            return str(row[0]) if row else "?"

        record = TaskRecord("chat-s", "x", (Message.user("x"),), status=TaskStatus.INTERRUPTED)
        await store.create(record)
        seen: list[str] = []

        def claim(old: TaskRecord) -> TaskRecord:
            seen.append(level(None))  # in the claim's transaction
            return old.evolve(status=TaskStatus.RUNNING, runs=old.runs + 1)

        await store.update("chat-s", claim, synced=False)
        seen.append(await store._run(level))  # the next transaction, on the same connection
        await store.update("chat-s", claim)
        # A claim queued with a synced write goes in its transaction, synced with it.
        store.save_fields_nowait(record.evolve(attempts={"c2": 1}))
        await store.update("chat-s", claim, synced=False)
        assert seen == ["off", "on", "on", "on"]


def record_queries(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What the store sends from now on, a text per round trip (the statements of one
    pipeline joined by ``; ``; any query psycopg sends itself), until `monkeypatch.undo()`."""
    sent: list[str] = []
    run = PgConnection._run
    execute = psycopg.Cursor.execute

    def piped(self: PgConnection, conn: Any, statements: list[tuple[str, Any]]) -> Any:
        sent.append("; ".join(text for text, _ in statements))
        return run(self, conn, statements)

    def counted(cursor: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        sent.append(str(query))
        return execute(cursor, query, *args, **kwargs)

    monkeypatch.setattr(PgConnection, "_run", piped)
    monkeypatch.setattr(psycopg.Cursor, "execute", counted)
    return sent


async def test_a_claim_takes_two_round_trips_and_a_bad_one_writes_nothing(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with opened(postgres_url) as store:
        record = TaskRecord("chat-u", "x", (Message.user("x"),), status=TaskStatus.INTERRUPTED)
        await store.create(record)
        await store.create(TaskRecord("chat-v", "y", (Message.user("y"),)))
        sent = record_queries(monkeypatch)
        claimed = await store.update(
            "chat-u", lambda r: r.evolve(status=TaskStatus.RUNNING), synced=False
        )
        monkeypatch.undo()
        # Its beginning with the read of the task, then its UPDATE with its COMMIT.
        assert len(sent) == 2 and sent[1].endswith("; COMMIT"), sent
        assert claimed is not None
        assert await store.load("chat-u") == claimed[0]
        # A claim the database refuses (a number past its column's range) fails, alone...
        too_big = 2**40
        with pytest.raises(StoreError, match="out of range"):
            await store.update("chat-u", lambda r: r.evolve(runs=too_big))
        # ... and queued after another call, which still commits: the claim's UPDATE went
        # with the COMMIT, and its savepoint is rolled back in one round trip more.
        other = store.save_fields_nowait(
            TaskRecord("chat-v", "y", (Message.user("y"),), attempts={"c1": 1})
        )
        sent = record_queries(monkeypatch)
        with pytest.raises(StoreError, match="out of range"):
            await store.update("chat-u", lambda r: r.evolve(runs=too_big))
        monkeypatch.undo()
        assert await other.wait()
        assert [q for q in sent if "COMMIT" in q] == sent[-2:], sent
        assert sent[-2].startswith("UPDATE tasks SET") and sent[-2].endswith(
            "; RELEASE batch_call; COMMIT"
        )
        assert sent[-1] == "ROLLBACK TO batch_call; RELEASE batch_call; COMMIT"
        assert await store.load("chat-u") == claimed[0]
        loaded = await store.load("chat-v")
        assert loaded is not None and loaded.attempts == {"c1": 1}


async def test_a_pause_and_the_resumes_claim_queued_together_take_two_round_trips(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stop is deferred, so a resume's claim right after it shares its transaction: the
    beginning with the stop's UPDATE, which returns the task as the claim reads it, then the
    claim's UPDATE with the COMMIT. The claim sees the session as a read would: its history
    and its chosen model."""
    async with opened(postgres_url) as store:
        first = TaskRecord("chat-p", "x", (Message.user("x"),))
        await store.create(first)
        await store.finish("chat-p", (Message.user("x"), Message.assistant("done")))
        await store.set_session_model("chat-p", "scripted:other")
        mine = TaskRecord("chat-p", "y", (Message.user("y"),), runner=store.runner)
        history = await store.create(mine)
        sent = record_queries(monkeypatch)
        stopped = store.stop_nowait(
            lambda: mine.evolve(attempts={"c1": 1}),
            TaskStatus.INTERRUPTED,
            cause=Cause.PAUSE,
            runner=store.runner,
        )
        statuses: list[TaskStatus] = []
        models: list[str | None] = []

        def claim(old: TaskRecord) -> TaskRecord:
            statuses.append(old.status)
            return old.evolve(status=TaskStatus.RUNNING, runs=old.runs + 1)

        claimed = await store.update("chat-p", claim, synced=False, model=models.append)
        monkeypatch.undo()
        assert await stopped.wait()
        assert statuses == [TaskStatus.INTERRUPTED]  # the claim saw the stop
        assert models == ["scripted:other"]
        assert len(sent) == 2, sent
        assert sent[0].startswith("BEGIN; SELECT pg_advisory_xact_lock(")
        assert " RETURNING " in sent[0]
        assert sent[1].endswith("; RELEASE batch_call; COMMIT")
        assert "SELECT" not in sent[1], sent
        assert claimed is not None
        assert list(claimed[1]) == list(history) == [Message.user("x"), Message.assistant("done")]
        loaded = await store.load("chat-p")
        assert loaded == claimed[0]
        assert (loaded.status, loaded.runs, loaded.attempts) == (TaskStatus.RUNNING, 2, {"c1": 1})


async def test_a_pause_and_its_claim_run_in_the_trio_thread_which_goes_on_while_they_wait(
    postgres_url: str, nursery: trio.Nursery
) -> None:
    """No writer thread: the batch runs in the event loop's thread, and while the server
    keeps it waiting (another member holds the fleet's write lock) the loop runs the rest,
    this test included, which lets the lock go."""
    async with opened(postgres_url) as store:
        mine = TaskRecord("chat-g", "x", (Message.user("x"),), runner=store.runner)
        await store.create(mine)
        loop = threading.get_ident()
        threads: list[int] = []
        claimed: list[object] = []

        def claim(old: TaskRecord) -> TaskRecord:
            threads.append(threading.get_ident())
            return old.evolve(status=TaskStatus.RUNNING, runs=old.runs + 1)

        async def pause_and_resume() -> None:
            stopped = store.stop_nowait(
                lambda: mine, TaskStatus.INTERRUPTED, cause=Cause.PAUSE, runner=store.runner
            )
            claimed.append(await store.update("chat-g", claim, synced=False))
            assert await stopped.wait()

        with psycopg.connect(postgres_url, autocommit=True) as other:
            other.execute("SELECT pg_advisory_lock(%s, %s)", (LOCK_CLASS, store.lock_key))
            done = trio.Event()

            async def run() -> None:
                await pause_and_resume()
                done.set()

            nursery.start_soon(run)
            await wait_all_tasks_blocked()
            assert not claimed and threads == []  # waiting for the lock, at the server
            other.execute("SELECT pg_advisory_unlock(%s, %s)", (LOCK_CLASS, store.lock_key))
            with trio.fail_after(10):
                await done.wait()
        assert threads == [loop]
        loaded = await store.load("chat-g")
        assert loaded is not None and (loaded.status, loaded.runs) == (TaskStatus.RUNNING, 2)


async def test_a_small_call_goes_to_the_writer_thread_while_the_pool_cannot_lend_at_once(
    postgres_url: str, nursery: trio.Nursery
) -> None:
    async with opened(postgres_url) as store:
        record = TaskRecord("chat-h", "x", (Message.user("x"),))
        await store.create(record)
        pool = cast(PgConnection, store._db).pool
        held = pool.getconn()  # as while the pool makes a new connection after an outage
        done = trio.Event()

        async def save() -> None:
            assert await store.save_fields(record.evolve(attempts={"c1": 1}))
            done.set()

        nursery.start_soon(save)
        await wait_all_tasks_blocked()
        assert store._writer._queued == 1 and not done.is_set()  # the thread waits for it
        pool.putconn(held)
        with trio.fail_after(10):
            await done.wait()
        loaded = await store.load("chat-h")
        assert loaded is not None and loaded.attempts == {"c1": 1}


async def test_a_pause_and_its_claim_go_again_on_a_new_connection_when_the_server_ended_it(
    postgres_url: str,
) -> None:
    async with opened(postgres_url, lease=3600) as store:
        mine = TaskRecord("chat-k", "x", (Message.user("x"),), runner=store.runner)
        await store.create(mine)
        end_store_connection(postgres_url, store)
        stopped = store.stop_nowait(
            lambda: mine, TaskStatus.INTERRUPTED, cause=Cause.PAUSE, runner=store.runner
        )
        threads: list[int] = []

        def claim(old: TaskRecord) -> TaskRecord:
            threads.append(threading.get_ident())
            return old.evolve(status=TaskStatus.RUNNING)

        claimed = await store.update("chat-k", claim, synced=False)
        assert await stopped.wait()
        assert claimed is not None and claimed[0].status is TaskStatus.RUNNING
        # The batch broke off before the claim ran, and went again in this thread: only
        # taking the new connection went to a worker thread.
        assert threads == [threading.get_ident()]


async def test_a_write_between_a_stop_and_the_claim_is_read_by_the_claim(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the stop's UPDATE returned answers the claim's read only when nothing but
    savepoints went between: a write of the task's fields queued after the stop, in the same
    transaction, is what the claim sees."""
    async with opened(postgres_url) as store:
        mine = TaskRecord("chat-q", "x", (Message.user("x"),), runner=store.runner)
        await store.create(mine)
        stopped = store.stop_nowait(
            lambda: mine.evolve(attempts={"c1": 1}),
            TaskStatus.INTERRUPTED,
            cause=Cause.PAUSE,
            runner=store.runner,
        )
        later = mine.evolve(
            attempts={"c1": 2}, status=TaskStatus.INTERRUPTED, cause=Cause.PAUSE, runner=None
        )
        saved = store.save_fields_nowait(later)
        seen: list[dict[str, int]] = []

        def claim(old: TaskRecord) -> TaskRecord:
            seen.append(dict(old.attempts))
            return old.evolve(status=TaskStatus.RUNNING)

        sent = record_queries(monkeypatch)
        claimed = await store.update("chat-q", claim, synced=False)
        monkeypatch.undo()
        assert await stopped.wait() and await saved.wait()
        assert seen == [{"c1": 2}]
        assert any(q.startswith("RELEASE batch_call; SAVEPOINT batch_call; SELECT") for q in sent)
        assert claimed is not None and claimed[0].attempts == {"c1": 2}


async def test_a_read_answered_ahead_answers_only_the_next_statement(postgres_url: str) -> None:
    """`PgConnection.read_ahead`: the very next statement, if it is the read (savepoints
    aside), gets the row kept; a read with other parameters, another statement, a rollback
    to a savepoint or the transaction's end forget it, and the read is sent."""
    async with opened(postgres_url) as store:
        await store.create(TaskRecord("chat-r", "x", (Message.user("x"),)))
        read = "SELECT status FROM tasks WHERE session_id = ?"
        kept = ("kept",)

        def steps(db: object) -> list[object]:
            conn = cast(PgConnection, db)
            out: list[object] = []
            conn.execute("BEGIN IMMEDIATE")
            conn.read_ahead(read, ("chat-r",), kept)
            conn.execute("SAVEPOINT batch_call")
            conn.execute("RELEASE batch_call")
            out.append(conn.execute(read, ("chat-r",)).fetchall())  # kept
            out.append(conn.execute(read, ("chat-r",)).fetchone())  # sent: answered once
            conn.read_ahead(read, ("chat-r",), kept)
            out.append(conn.execute(read, ("chat-s",)).fetchone())  # other parameters: sent
            out.append(conn.execute(read, ("chat-r",)).fetchone())  # and forgotten
            conn.read_ahead(read, ("chat-r",), kept)
            conn.execute("SELECT 1")
            out.append(conn.execute(read, ("chat-r",)).fetchone())  # another statement went
            conn.execute("SAVEPOINT batch_call")
            conn.read_ahead(read, ("chat-r",), kept)
            conn.execute("ROLLBACK TO batch_call")
            out.append(conn.execute(read, ("chat-r",)).fetchone())  # rolled back
            conn.read_ahead(read, ("chat-r",), kept)
            conn.execute("COMMIT")
            conn.execute("BEGIN IMMEDIATE")
            out.append(conn.execute(read, ("chat-r",)).fetchone())  # another transaction
            conn.execute("COMMIT")
            return out

        running = (TaskStatus.RUNNING.value,)
        sent = [running, None, running, running, running, running]
        assert await store._run(steps) == [[kept], *sent]


async def test_what_a_stops_update_gives_is_the_claims_read(postgres_url: str) -> None:
    """What a stop's UPDATE wrote and returned (`SqlStore._READ_AHEAD`) is, value for value,
    what `_task_and_session` reads of the task: with a session row and a chosen model, and
    without one."""
    async with opened(postgres_url) as store:
        await store.create(TaskRecord("chat-m", "x", (Message.user("x"),)))
        await store.finish("chat-m", (Message.user("x"), Message.assistant("a"), Message.user("b")))
        await store.set_session_model("chat-m", "scripted:other")
        await store.create(TaskRecord("chat-m", "y", (Message.user("y"),), runner=store.runner))
        await store.create(TaskRecord("chat-n", "x", (Message.user("x"),)))
        records = {s: await store.load(s) for s in ("chat-m", "chat-n")}

        def no_session(db: Any) -> None:
            db.execute("DELETE FROM sessions WHERE session_id = ?", ("chat-n",))

        await store._run(no_session)

        def both(db: Any, record: TaskRecord) -> tuple[Any, Any]:
            db.execute("BEGIN IMMEDIATE")
            stopped = record.evolve(status=TaskStatus.INTERRUPTED, cause=Cause.PAUSE, runs=7)
            columns = store._columns(stopped)
            assert store._update_held(
                db, store._UPDATE, columns, record.session_id, record.runner, read_ahead=True
            )
            ahead = store._task_and_session(db, record.session_id)
            db.execute("SELECT 1")  # (the read below is sent)
            read = store._task_and_session(db, record.session_id)
            db.execute("ROLLBACK")
            return ahead, read

        for session_id, model in (("chat-m", "scripted:other"), ("chat-n", None)):
            record = records[session_id]
            assert record is not None
            ahead, read = await store._run(functools.partial(both, record=record))
            assert ahead == read
            assert read[0] is not None and read[0].fields[7] == 7  # (runs)
            assert read[2] == model and (read[1] is None) is (model is None)
            if read[1] is not None:
                assert (read[0].first_seq, read[1].next_seq) == (3, 4)
                assert read[1].rev != read[1].next_seq  # (each column in its place)


def prepared_statements(store: PgStore) -> Callable[[object], list[str]]:
    """A store call (`PgStore._run`) reading what its connection has prepared, by name."""
    connection = cast(PgConnection, store._db)

    def read(db: object) -> list[str]:
        rows = connection.connection().execute("SELECT name FROM pg_prepared_statements")
        return sorted(str(name) for (name,) in rows.fetchall())

    return read


async def test_each_statement_is_prepared_once_and_a_rollback_keeps_them(
    postgres_url: str,
) -> None:
    async with opened(postgres_url) as store:
        prepared = prepared_statements(store)
        record = TaskRecord("chat-q", "x", (Message.user("x"),), status=TaskStatus.INTERRUPTED)
        await store.create(record)

        def claim(old: TaskRecord) -> TaskRecord:
            return old.evolve(status=TaskStatus.RUNNING, runs=old.runs + 1)

        await store.update("chat-q", claim)
        first = await store._run(prepared)
        assert first and all(name.startswith("agentrt_") for name in first)
        for _ in range(3):
            await store.update("chat-q", claim)
        assert await store._run(prepared) == first  # none prepared again
        # A call that fails is rolled back (and what the store kept in memory forgotten, so
        # the next claim reads the messages too): what was prepared stays, and still serves.
        with pytest.raises(StoreError, match="out of range"):
            await store.update("chat-q", lambda r: r.evolve(runs=2**40))
        await store.update("chat-q", claim)
        after = await store._run(prepared)
        assert set(first) <= set(after)
        claimed = await store.update("chat-q", claim)
        assert claimed is not None and claimed[0].runs == 7
        assert await store._run(prepared) == after


async def test_past_its_bound_of_prepared_statements_the_store_sends_them_unnamed(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("agentrt.store.postgres.PREPARED_MAX", 2)
    async with opened(postgres_url) as store:
        record = TaskRecord("chat-b", "x", (Message.user("x"),), status=TaskStatus.INTERRUPTED)
        await store.create(record)
        for runs in (2, 3):
            claimed = await store.update("chat-b", functools.partial(TaskRecord.evolve, runs=runs))
            assert claimed is not None and claimed[0].runs == runs
        assert len(await store._run(prepared_statements(store))) == 2
        loaded = await store.load("chat-b")
        assert loaded is not None and loaded.runs == 3


async def test_a_member_whose_claim_was_lost_is_refused_at_its_next_write_and_runs_no_tool(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resume's claim commits unsynced; a server crash may lose it. The task another member
    left paused is then still that member's in the row: this run's next write (the model's
    answer, before any tool runs) is refused, and nothing it meant to do happens."""
    workdir = tmp_path / "work"
    workdir.mkdir()
    async with open_runtime(
        tmp_path / "state",
        model=ScriptedModel(word_delay=0, stream_delay=0),
        workdir=workdir,
        store=postgres_url,
    ) as runtime:
        parked = await runtime.executor.run(
            "chat-x", "ask which?; write out.txt hi", owner="o", emit=Recorder()
        )
        assert parked.outcome is Outcome.AWAITING_ANSWER
        other = "fleet:other:1:1:abcdef"  # as if another member had run it and parked it
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute("UPDATE tasks SET runner = %s WHERE session_id = 'chat-x'", (other,))
            before = conn.execute(
                "SELECT runner, status, epoch, runs FROM tasks WHERE session_id = 'chat-x'"
            ).fetchone()
        claim = PgStore.update

        async def claim_then_lose_it(self: PgStore, *args: Any, **kwargs: Any) -> Any:
            claimed = await claim(self, *args, **kwargs)
            assert kwargs["synced"] is False
            # The server crashed before flushing the claim: its row is as it was.
            with psycopg.connect(postgres_url, autocommit=True) as conn:
                conn.execute(
                    "UPDATE tasks SET runner = %s, status = %s, epoch = %s, runs = %s "
                    "WHERE session_id = 'chat-x'",
                    before,
                )
            return claimed

        monkeypatch.setattr(PgStore, "update", claim_then_lose_it)
        recorder = Recorder()
        ended = await runtime.executor.resume("chat-x", answer="blue", owner="o", emit=recorder)
        assert ended.outcome is Outcome.FAILED
        assert ended.error is not None and "taken over by another runner" in ended.error
        # The model asked for the write; it never ran, nor was a result of it told.
        assert [e.name for e in recorder.of(ToolCallEvent)] == ["write_file"]
        assert not recorder.of(ToolResultEvent)
        assert not (workdir / "out.txt").exists()
        with psycopg.connect(postgres_url) as conn:
            after = conn.execute(
                "SELECT runner, status, epoch, runs FROM tasks WHERE session_id = 'chat-x'"
            ).fetchone()
        assert after == before


async def test_a_write_of_a_run_that_lost_its_task_changes_nothing(store: Store) -> None:
    """On either backend: the task is another runner's now; the late run's writes are refused."""
    mine = TaskRecord("chat-t", "x", (Message.user("x"),), runner="fleet:a:1:1:aaaaaa")
    await store.save(mine)
    # Another runner takes it over (a resume: the claim is `update`'s).
    taken = await store.update("chat-t", lambda r: r.evolve(runner="fleet:b:2:2:bbbbbb", runs=2))
    assert taken is not None
    theirs = taken[0]
    late = mine.evolve(transcript=(*mine.transcript, Message.assistant("late")))
    with pytest.raises(TaskTakenError, match="taken over by another runner"):
        await store.save(late)
    with pytest.raises(TaskTakenError):
        await store.save_fields(mine.evolve(attempts={"c1": 1}))
    with pytest.raises(TaskTakenError):
        await store.mark("chat-t", TaskStatus.INTERRUPTED, runner=mine.runner)
    with pytest.raises(TaskTakenError):
        await store.finish("chat-t", late.transcript, runner=mine.runner)
    with pytest.raises(TaskTakenError):
        await store.stop_nowait(
            lambda: late, TaskStatus.INTERRUPTED, cause=Cause.PAUSE, runner=mine.runner
        ).wait()
    assert await store.load("chat-t") == theirs


async def test_a_stop_is_written_in_two_round_trips(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with opened(postgres_url) as store:
        mine = TaskRecord("chat-w", "x", (Message.user("x"),), runner=store.runner)
        await store.create(mine)
        sent = record_queries(monkeypatch)
        stopped = mine.evolve(attempts={"c1": 1})
        kept = await store.stop_nowait(
            lambda: stopped, TaskStatus.INTERRUPTED, cause=Cause.PAUSE, runner=store.runner
        ).wait()
        monkeypatch.undo()
        # Its beginning with its one UPDATE (fields, status, cause; the runner its condition),
        # then its COMMIT.
        assert kept and len(sent) == 2, sent
        record = await store.load("chat-w")
        assert record is not None
        assert (record.status, record.cause, record.attempts) == (
            TaskStatus.INTERRUPTED,
            Cause.PAUSE,
            {"c1": 1},
        )


async def test_an_outage_fails_runs_clearly_and_loses_nothing(
    postgres_url: str, tmp_path: Path, nursery: trio.Nursery
) -> None:
    proxy, through = await proxied(postgres_url, nursery)
    workdir = tmp_path / "work"
    workdir.mkdir()
    (workdir / "a.txt").write_text("kept")
    async with open_runtime(
        tmp_path / "state",
        model=ScriptedModel(word_delay=0, stream_delay=0),
        workdir=workdir,
        store=through,
    ) as runtime:
        parked = await runtime.executor.run("chat-o", "ask which?", owner="o", emit=Recorder())
        assert parked.outcome is Outcome.AWAITING_ANSWER
        # The database goes away in the middle of a run: the run fails and says why.
        recorder = Recorder()

        def cut_at_the_tool_call(event: object) -> None:
            if isinstance(event, ToolCallEvent):
                proxy.cut()

        recorder.hooks.append(cut_at_the_tool_call)
        ended = await runtime.executor.run("chat-p", "read a.txt", owner="o", emit=recorder)
        assert ended.outcome is Outcome.FAILED
        assert ended.error is not None
        assert "cannot be reached" in ended.error and "nothing it has stored is lost" in ended.error
        with pytest.raises(StoreError, match=r"cannot be reached"):
            await runtime.executor.run("chat-q", "hello", owner="o", emit=Recorder())
        proxy.restore()
        # Nothing was lost: the parked task, and the failed one up to its last commit.
        record = await runtime.store.load("chat-o")
        assert record is not None and record.status is TaskStatus.AWAITING_ANSWER
        resumed = await runtime.executor.resume("chat-o", answer="blue", owner="o", emit=Recorder())
        assert resumed.outcome is Outcome.FINISHED, resumed
        again = await runtime.executor.resume("chat-p", owner="o", emit=Recorder())
        assert again.outcome is Outcome.FINISHED, again
        assert "kept" in (again.text or "")


async def test_a_call_that_waits_as_the_pool_gives_up_reconnecting_connects_once_the_database_is_back(
    postgres_url: str, nursery: trio.Nursery
) -> None:
    # The pool gives up reconnecting `wait` seconds after its first failed attempt; a call
    # that asks for the connection while the last attempt is under way waits for it.
    proxy, through = await proxied(postgres_url, nursery)
    proxy.hold()
    pool = open_pool(through, "agentrt test outage", lease=10, wait=0.5)
    try:
        await proxy.holding(1)
        proxy.fail_held()  # the first attempt fails: one more in 0.5 s, then the pool gives up
        got: list[object] = []

        def call() -> None:
            conn = pool.getconn(timeout=5)
            got.append(conn.execute("SELECT 1").fetchone())
            pool.putconn(conn)

        done = trio.Event()

        async def waiting_call() -> None:
            await trio.to_thread.run_sync(call)
            done.set()

        nursery.start_soon(waiting_call)  # asks now, and waits for that last attempt
        await proxy.holding(2)
        assert pool.get_stats().get("requests_waiting") == 1
        proxy.restore()  # the database is back as that attempt fails
        # The call is served by an attempt started for it, not failed after its 5 s.
        with trio.fail_after(3):
            await done.wait()
        assert got == [(1,)]
    finally:
        await trio.to_thread.run_sync(pool.close)


async def test_a_write_under_a_stale_or_lapsed_lease_epoch_is_refused_by_the_database(
    postgres_url: str,
) -> None:
    async with opened(postgres_url, lease=3600) as store:
        mine = TaskRecord("chat-e", "x", (Message.user("x"),), runner=store.runner)
        await store.create(mine)
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            row = conn.execute("SELECT epoch FROM tasks WHERE session_id = 'chat-e'").fetchone()
            assert row == (store.epoch,)  # taken under the member's epoch
            # The member joined again meanwhile (as after a stall): a new epoch in the database.
            conn.execute(
                "UPDATE daemons SET epoch = nextval('lease_epochs') WHERE id = %s", (store.runner,)
            )
        late = mine.evolve(transcript=(*mine.transcript, Message.assistant("late")))
        # The store still carries its old epoch: only the database can tell it is stale.
        with pytest.raises(StaleLeaseError, match="joined the fleet again since"):
            await store.save(late)
        with pytest.raises(StaleLeaseError):
            await store.mark("chat-e", TaskStatus.INTERRUPTED, runner=store.runner)
        with pytest.raises(StaleLeaseError):
            await store.create(TaskRecord("chat-f", "y", (Message.user("y"),)))
        # Under the new epoch, the task taken under the old one is still refused to its run.
        with psycopg.connect(postgres_url) as conn:
            row = conn.execute(
                "SELECT epoch FROM daemons WHERE id = %s", (store.runner,)
            ).fetchone()
        assert row is not None
        store.epoch = int(row[0])
        with pytest.raises(StaleLeaseError, match="was taken under lease epoch"):
            await store.save(late)
        await store.create(TaskRecord("chat-f", "y", (Message.user("y"),)))  # a new one: taken
        # A lease that ran out refuses every write, whatever epoch it carries.
        expire_lease(postgres_url, store.runner)
        with pytest.raises(StaleLeaseError, match="lease in the fleet has run out"):
            await store.delete("chat-f")
        record = await store.load("chat-e")
        assert record is not None
        assert (record.transcript, record.status) == (mine.transcript, mine.status)
        assert await store.load("chat-f") is not None


async def test_a_write_held_back_by_an_outage_is_refused_once_it_reaches_the_database(
    postgres_url: str, nursery: trio.Nursery
) -> None:
    """Cut off with a write on its way; meanwhile the lease runs out: the late write changes nothing."""
    proxy, through = await proxied(postgres_url, nursery)
    async with opened(through, lease=3600) as store:
        mine = TaskRecord("chat-h", "x", (Message.user("x"),), runner=store.runner)
        await store.create(mine)
        proxy.cut()
        late = mine.evolve(transcript=(*mine.transcript, Message.assistant("late")))
        outcome: list[BaseException | None] = []
        written = trio.Event()

        async def write() -> None:
            try:
                await store.save(late)
                outcome.append(None)
            except StoreError as exc:
                outcome.append(exc)
            written.set()

        nursery.start_soon(write)
        await wait_all_tasks_blocked()
        # Another member's heartbeat: this member's lease ran out, its task is interrupted.
        expire_lease(postgres_url, store.runner)
        proxy.restore()
        await written.wait()
        assert len(outcome) == 1 and isinstance(outcome[0], StaleLeaseError), outcome
        async with opened(postgres_url, lease=3600) as record:
            loaded = await record.load("chat-h")
            assert loaded is not None and loaded.transcript == mine.transcript


async def test_the_first_call_after_the_stores_connections_are_cut_succeeds(
    postgres_url: str, nursery: trio.Nursery
) -> None:
    proxy, through = await proxied(postgres_url, nursery)
    async with opened(through, lease=3600) as store:
        await store.save(TaskRecord("chat-r", "x", (Message.user("x"),), status=TaskStatus.FAILED))
        # The server ends the store's connection (a restart, an administrator): the first
        # call after it reconnects.
        end_store_connection(postgres_url, store)
        assert await store.load("chat-r") is not None
        # The database goes away: one clear error per call, nothing lost; then the first
        # call once it is back succeeds.
        proxy.cut()
        with pytest.raises(StoreError, match=r"cannot be reached .* nothing it has stored is lost"):
            await store.load("chat-r")
        proxy.restore()
        assert [t.session_id for t in await store.list_stored()] == ["chat-r"]

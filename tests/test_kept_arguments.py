"""The full arguments of calls not run yet are kept with the task, apart from the clamped snapshot.

A resumed call runs with its full arguments; past `ARGUMENTS_BOUND` a task,
the stop says which call will have to be issued again. The journal (kept
arguments, subagents) survives each backend and a migration from the
schema before it.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import trio

from agentrt import ALLOW_ONCE
from agentrt import Answer
from agentrt import Cause
from agentrt import Entry
from agentrt import Message
from agentrt import Outcome
from agentrt import RunEnded
from agentrt import Runtime
from agentrt import TaskRecord
from agentrt import TaskStore
from agentrt import ToolCall
from agentrt import ToolResultEvent
from agentrt.store import Store
from agentrt.store.columns import FIELDS
from agentrt.store.columns import fields_of
from agentrt.store.record import ARGUMENTS_BOUND
from agentrt.store.record import SavedQuestion
from agentrt.store.record import SubagentJournal
from agentrt.store.record import arguments_size
from agentrt.store.record import keep_arguments
from agentrt.vocab.clamp import ARGUMENT_LIMIT
from agentrt.vocab.questions import QuestionState
from agentrt.vocab.questions import QuestionTrace
from agentrt.vocab.stops import Interruption
from agentrt.vocab.stops import StopKind
from agentrt.vocab.terms import TaskStatus

from .conftest import Recorder

LIMIT = 20


def test_the_bound_is_8_mib_a_task() -> None:
    assert ARGUMENTS_BOUND == 8 * 1024 * 1024


def test_arguments_are_kept_exactly_while_they_fit() -> None:
    content = "x" * (ARGUMENT_LIMIT + 1)
    call = ToolCall("c1", "write_file", {"path": "a", "content": content})
    size = arguments_size({"c1": call.arguments})
    message = Message.assistant("", [call])
    assert keep_arguments({}, message, size) == {"c1": call.arguments}
    assert keep_arguments({}, message, size - 1) == {}
    # An argument the snapshot keeps whole needs no keeping.
    small = ToolCall("c2", "write_file", {"path": "a", "content": "x" * ARGUMENT_LIMIT})
    assert keep_arguments({}, Message.assistant("", [small]), ARGUMENTS_BOUND) == {}
    # The call's result ends the keeping.
    done = Message.tool_result(call, "wrote")
    assert keep_arguments({"c1": call.arguments}, done, 0) == {}


async def pause_at_confirmation(runtime: Runtime, session: str, text: str) -> Recorder:
    """Run `text` in a terminal session and pause it while its confirmation is open."""
    recorder = Recorder()
    async with trio.open_nursery() as nursery:

        async def pause_when_asked(*, task_status: trio.TaskStatus[None]) -> None:
            with runtime.registry.listen("cli-", name="test") as listener:
                task_status.started()
                await listener.claim()  # the person reads the confirmation, then pauses
                (info,) = runtime.executor.running()
                runtime.executor.cancel(info.task_hash, Cause.PAUSE)
                await trio.sleep_forever()

        await nursery.start(pause_when_asked)
        with trio.fail_after(LIMIT):
            ended = await runtime.executor.run(session, text, owner="t", emit=recorder)
        nursery.cancel_scope.cancel()
    assert ended.cause is Cause.PAUSE and ended.pending_kept
    recorder.events.append(ended)
    return recorder


def ended_of(recorder: Recorder) -> RunEnded:
    """The run's `RunEnded`, appended last."""
    ended = recorder.events[-1]
    assert isinstance(ended, RunEnded)
    return ended


async def resume_allowing(runtime: Runtime, session: str) -> Recorder:
    recorder = Recorder()
    async with trio.open_nursery() as nursery:

        async def allow(*, task_status: trio.TaskStatus[None]) -> None:
            with runtime.registry.listen("cli-", name="test") as listener:
                task_status.started()
                while True:
                    entry: Entry = await listener.claim()
                    entry.answer(Answer(ALLOW_ONCE))

        await nursery.start(allow)
        with trio.fail_after(LIMIT):
            ended = await runtime.executor.resume(session, owner="t", emit=recorder)
        nursery.cancel_scope.cancel()
    recorder.events.append(ended)
    return recorder


async def test_a_paused_call_with_a_long_argument_runs_whole_on_resume(
    runtime: Runtime, workdir: Path
) -> None:
    # write clamp.txt <10,000 bytes>; big 100000; sleep 1 -- Pause during the confirmation.
    content = "".join(chr(ord("a") + n % 26) for n in range(10_000))
    paused = await pause_at_confirmation(
        runtime, "cli-clamp", f"write clamp.txt {content}; big 100000; sleep 1"
    )
    assert ended_of(paused).error is None  # nothing will have to be issued again
    record = await runtime.store.load("cli-clamp")
    assert record is not None
    (write,) = [c for c in record.unanswered_calls() if c.name == "write_file"]
    assert "elided" in write.arguments["content"]  # the snapshot stays clamped
    assert record.arguments[write.id]["content"] == content
    resumed = await resume_allowing(runtime, "cli-clamp")
    ended = ended_of(resumed)
    assert ended.outcome is Outcome.FINISHED
    assert (workdir / "clamp.txt").read_text() == content
    results = {e.name: e for e in resumed.of(ToolResultEvent)}
    assert results["write_file"].ok
    assert await runtime.store.load("cli-clamp") is None


async def test_arguments_past_the_bound_are_not_kept_and_the_pause_says_which_call(
    runtime: Runtime, workdir: Path
) -> None:
    content = "q" * (ARGUMENTS_BOUND + 1)
    paused = await pause_at_confirmation(runtime, "cli-huge", f"write huge.txt {content}")
    record = await runtime.store.load("cli-huge")
    assert record is not None
    assert record.arguments == {}
    (write,) = record.unanswered_calls()
    note = ended_of(paused).error
    assert note == (
        f"the full arguments of write_file {write.id} were past the 8 MiB a task keeps; "
        "on resume the model will have to issue that call again"
    )
    resumed = await resume_allowing(runtime, "cli-huge")
    (result,) = resumed.of(ToolResultEvent)
    assert not result.ok
    assert "shortened when the task was saved" in result.preview
    assert not (workdir / "huge.txt").exists()


def journal_record(session_id: str) -> TaskRecord:
    call = ToolCall("c1", "write_file", {"path": "a", "content": "é" * 5000})
    inner = ToolCall("c1", "shell", {"command": "echo x >> log"})
    spawn = ToolCall("c2", "spawn", {"task": "sh echo x >> log"})
    return TaskRecord(
        session_id,
        "task",
        (Message.user("task"), Message.assistant("", [call, spawn])),
        attempts={"c1": 1},
        arguments={"c1": call.arguments},
        subagents={
            "c2": SubagentJournal(
                "sub1",
                (
                    Message.user("sh echo x >> log"),
                    Message.assistant("", [inner]),
                    Message.tool_result(inner, "done"),
                ),
                attempts={"c1": 1},
            ),
            "c2/c9": SubagentJournal("sub1/sub1", (Message.user("nested"),)),
        },
    )


async def test_each_store_keeps_the_journal_of_a_task(store: Store) -> None:
    record = journal_record("cli-journal")
    await store.create(record)
    loaded = await store.load("cli-journal")
    assert loaded is not None
    assert loaded.arguments == record.arguments
    assert loaded.subagents == record.subagents
    assert loaded.attempts == {"c1": 1}
    # A field write carries it too, in the same row.
    assert await store.save_fields(loaded.evolve(arguments={}, subagents={}))
    again = await store.load("cli-journal")
    assert again is not None and again.arguments == {} and again.subagents == {}


def test_a_record_takes_the_json_of_the_values_it_shares_with_the_one_written_before() -> None:
    record = journal_record("cli-shared").evolve(
        question=SavedQuestion("c1", "Which colour?"),
        interruptions=(Interruption(StopKind.PAUSE, 1.0),),
        questions=(QuestionTrace("q1", QuestionState.ANSWERED, 2.0),),
    )
    written = fields_of(record)
    assert fields_of(record, (written, record)) == written
    # What is taken is the earlier write's text itself: a stand-in for it shows through
    # wherever the value is the very same object, and nowhere else.
    stand_ins = tuple(f"<{name}>" for name in FIELDS)

    def shown(columns: tuple[object, ...]) -> set[str]:
        return {name for name, value in zip(FIELDS, columns, strict=True) if value == f"<{name}>"}

    shared = {"question", "input", "attempts", "journal"}
    claim = record.evolve(status=TaskStatus.RUNNING, runs=2, runner="token")
    assert shown(fields_of(claim, (stand_ins, record))) == shared
    # A value made again, even an equal one, is encoded anew: only its own column.
    for change, column in (
        ({"arguments": dict(record.arguments)}, "journal"),
        ({"subagents": dict(record.subagents)}, "journal"),
        ({"interruptions": tuple(reversed(record.interruptions))}, "journal"),
        ({"questions": record.questions}, None),  # given again: the same object
        ({"questions": (QuestionTrace("q1", QuestionState.ANSWERED, 2.0),)}, "journal"),
        ({"attempts": dict(record.attempts)}, "attempts"),
        ({"input": "task again"}, "input"),
        ({"question": SavedQuestion("c1", "Which colour?")}, "question"),
    ):
        changed = record.evolve(**change)
        assert shown(fields_of(changed, (stand_ins, record))) == shared - {column}, change
        assert fields_of(changed, (written, record)) == fields_of(changed)


async def test_writes_that_change_the_journal_after_one_that_did_not_read_back_each(
    store: Store,
) -> None:
    record = journal_record("cli-rewritten")
    await store.create(record)
    same = await store.load("cli-rewritten")
    assert same is not None
    assert await store.save_fields(same.evolve(runs=2))  # every journal value shared
    kept = await store.load("cli-rewritten")
    assert kept is not None and kept.arguments == record.arguments and kept.runs == 2
    assert await store.save_fields(kept.evolve(arguments={}, attempts={"c1": 3}))
    again = await store.load("cli-rewritten")
    assert again is not None
    assert (again.arguments, again.attempts) == ({}, {"c1": 3})
    assert again.subagents == record.subagents


async def test_a_version_4_store_gets_the_journal_column(tmp_path: Path) -> None:
    path = tmp_path / "tasks.db"
    store = await TaskStore.open(path)
    try:
        await store.create(TaskRecord("cli-old", "task", (Message.user("task"),)))
    finally:
        await store.aclose()
    db = sqlite3.connect(path)
    db.execute("ALTER TABLE tasks DROP COLUMN journal")
    db.execute("ALTER TABLE sessions DROP COLUMN model")
    db.execute("DROP TABLE token_usage")
    db.execute("PRAGMA user_version = 4")
    db.commit()
    db.close()
    store = await TaskStore.open(path)
    try:
        old = await store.load("cli-old")
        assert old is not None and old.arguments == {} and old.subagents == {}
        await store.save_fields(old.evolve(arguments={"c1": {"content": "x"}}))
        kept = await store.load("cli-old")
        assert kept is not None and kept.arguments == {"c1": {"content": "x"}}
    finally:
        await store.aclose()
    db = sqlite3.connect(path)
    (version,) = db.execute("PRAGMA user_version").fetchone()
    (journal,) = db.execute("SELECT journal FROM tasks").fetchone()
    db.close()
    assert version == 8
    assert json.loads(journal) == {"arguments": {"c1": {"content": "x"}}}


async def test_a_postgresql_schema_of_version_1_gets_the_journal_column(postgres_url: str) -> None:
    import psycopg

    from agentrt.store.postgres import MIGRATIONS
    from agentrt.store.postgres import SCHEMA_VERSION
    from agentrt.store.postgres import PgStore

    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE agentrt_schema (version integer NOT NULL)")
        conn.execute("INSERT INTO agentrt_schema VALUES (1)")
        for statement in MIGRATIONS[1]:
            conn.execute(statement)
        conn.execute(
            "INSERT INTO tasks(session_id, status, error, question, runs, created_at, "
            "updated_at, input) VALUES ('cli-old', 'interrupted', 'null', 'null', 1, 1, 2, "
            "'\"task\"')"
        )
    store = await PgStore.open(postgres_url, lease=3600)
    try:
        old = await store.load("cli-old")
        assert old is not None and old.subagents == {}
        await store.save_fields(old.evolve(subagents=journal_record("x").subagents))
        kept = await store.load("cli-old")
        assert kept is not None and kept.subagents == journal_record("x").subagents
    finally:
        await store.aclose()
    with psycopg.connect(postgres_url) as conn:
        row = conn.execute("SELECT version FROM agentrt_schema").fetchone()
    assert row == (SCHEMA_VERSION,) == (5,)


async def test_kept_arguments_hold_a_secret_as_its_label_and_the_resumed_call_gets_its_value(
    runtime: Runtime, workdir: Path
) -> None:
    value = "k3y-canary-value-of-the-kept-args-5d1e"
    runtime.secrets.put("deploy_key", value)
    content = value + "x" * 6_000  # over 4 KiB: kept beside the clamped snapshot
    with trio.fail_after(LIMIT):
        ended = await runtime.executor.run(
            "chat-kept-secret", f"write out.txt {content}", owner="t", emit=Recorder()
        )
    assert ended.outcome is Outcome.AWAITING_ANSWER
    record = await runtime.store.load("chat-kept-secret")
    assert record is not None
    (kept,) = record.arguments.values()
    assert kept["content"] == "[secret deploy_key]" + "x" * 6_000
    stored = b"".join(p.read_bytes() for p in sorted(runtime.state_dir.glob("tasks.db*")))
    assert value.encode() not in stored
    with trio.fail_after(LIMIT):
        final = await runtime.executor.resume(
            "chat-kept-secret", answer=ALLOW_ONCE, owner="t", emit=Recorder()
        )
    assert final.outcome is Outcome.FINISHED
    assert (workdir / "out.txt").read_text() == content

"""Subagents journal their calls in their parent's task: a committed inner call never runs again.

Each stop that keeps a task (pause, disconnect, shutdown, a crash) is tried on
a subagent that committed a side-effecting call and is stopped in a later
call; the resume must take up the subagent's journal, not run it from the start.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio
import trio.testing

from agentrt import ALLOW_ONCE
from agentrt import Cause
from agentrt import Entry
from agentrt import Outcome
from agentrt import RunEnded
from agentrt import Runtime
from agentrt import ToolCallEvent
from agentrt import ToolResultEvent
from agentrt import open_runtime
from agentrt.agent.loop import AgentRun
from agentrt.agent.tools.base import ToolError
from agentrt.apps.lab import CAUSES
from agentrt.apps.lab import Conversation
from agentrt.apps.lab import Lab
from agentrt.apps.lab import format_table
from agentrt.apps.lab import real_kills
from agentrt.core.context import RequestContext
from agentrt.core.context import bind_context
from agentrt.models.messages import Message
from agentrt.models.messages import ToolCall
from agentrt.models.scripted import ScriptedModel
from agentrt.store.record import TaskRecord
from agentrt.vocab.terms import Approval

from .conftest import FakeVerifier
from .conftest import Recorder
from .conftest import answer_all
from .conftest import runtime_in

LIMIT = 20


@pytest.fixture
async def auto_runtime(
    tmp_path: Path, workdir: Path, verifier: FakeVerifier
) -> AsyncIterator[Runtime]:
    """A runtime whose approval policy is full-auto (as ``agentrt run --approval full-auto``)."""
    async with runtime_in(tmp_path, workdir, verifier, approval=Approval.FULL_AUTO) as rt:
        yield rt


def inner_calls(recorder: Recorder, name: str) -> list[ToolCallEvent]:
    return [e for e in recorder.of(ToolCallEvent) if e.agent and e.name == name]


async def test_a_subagents_shell_runs_once_across_its_parked_question(
    auto_runtime: Runtime, workdir: Path
) -> None:
    # agentrt run --approval full-auto --session chat-sp1 'spawn {sh echo x >> log; ask Name?}'
    # then: agentrt pending answer chat-sp1 Ada
    with trio.fail_after(LIMIT):
        ended = await auto_runtime.executor.run(
            "chat-sp1", "spawn {sh echo x >> log; ask Name?}", owner="t", emit=Recorder()
        )
        assert ended.outcome is Outcome.AWAITING_ANSWER
        assert ended.question == "Name?"
        record = await auto_runtime.store.load("chat-sp1")
        assert record is not None
        (journal,) = record.subagents.values()
        assert journal.agent == "sub1"
        assert [m.name for m in journal.transcript if m.name] == ["shell"]
        resumed = Recorder()
        final = await auto_runtime.executor.resume(
            "chat-sp1", owner="t", emit=resumed, answer="Ada"
        )
    assert final.outcome is Outcome.FINISHED
    assert (workdir / "log").read_text() == "x\n"
    assert inner_calls(resumed, "shell") == []
    assert final.text is not None and "Ada" in final.text
    assert await auto_runtime.store.load("chat-sp1") is None


async def test_a_confirmed_inner_call_is_not_confirmed_again_on_resume(
    runtime: Runtime, workdir: Path, nursery: trio.Nursery
) -> None:
    # Under confirm: the shell inside the subagent is confirmed once, and never again.
    asked: list[Entry] = []
    await nursery.start(answer_all, runtime, "chat-", lambda e: ALLOW_ONCE, asked)
    with trio.fail_after(LIMIT):
        ended = await runtime.executor.run(
            "chat-sp2", "spawn {sh echo x >> log; ask Name?}", owner="t", emit=Recorder()
        )
        assert ended.outcome is Outcome.AWAITING_ANSWER
        resumed = Recorder()
        final = await runtime.executor.resume("chat-sp2", owner="t", emit=resumed, answer="Ada")
    assert final.outcome is Outcome.FINISHED
    assert [e.request.tool for e in asked] == ["shell"]
    assert (workdir / "log").read_text() == "x\n"
    assert inner_calls(resumed, "shell") == []


async def test_a_window_paused_at_a_subagents_question_keeps_its_allowed_write(
    runtime: Runtime, workdir: Path, nursery: trio.Nursery
) -> None:
    # The TUI: spawn {ask Who are you?; write sub.txt x}, allow the write, Pause at the
    # question, /pending: the write must not be confirmed (nor run) again.
    asked: list[Entry] = []
    question_open = trio.Event()

    def answer(entry: Entry) -> str | None:
        if entry.request.tool == "write_file":
            return ALLOW_ONCE
        question_open.set()
        return None  # the person pauses instead of answering

    async with trio.open_nursery() as inner:
        await inner.start(answer_all, runtime, "cli-", answer, asked)
        recorder = Recorder()
        written = trio.Event()
        recorder.hooks.append(
            lambda e: written.set() if isinstance(e, ToolResultEvent) and e.agent else None
        )

        async def pause_at_question() -> None:
            await question_open.wait()
            await written.wait()
            (info,) = runtime.executor.running()
            runtime.executor.cancel(info.task_hash, Cause.PAUSE)

        inner.start_soon(pause_at_question)
        with trio.fail_after(LIMIT):
            ended = await runtime.executor.run(
                "cli-sp3", "spawn {ask Who are you?; write sub.txt x}", owner="t", emit=recorder
            )
        inner.cancel_scope.cancel()
    assert ended.cause is Cause.PAUSE and ended.pending_kept
    assert (workdir / "sub.txt").read_text() == "x"
    record = await runtime.store.load("cli-sp3")
    assert record is not None
    assert record.question is not None and record.question.prompt == "Who are you?"
    (spawn,) = record.unanswered_calls()
    assert record.question.call_id == spawn.id
    (workdir / "sub.txt").write_text("changed by hand")
    asked.clear()
    await nursery.start(answer_all, runtime, "cli-", lambda e: "Ada", asked)
    resumed = Recorder()
    with trio.fail_after(LIMIT):
        final = await runtime.executor.resume("cli-sp3", owner="t", emit=resumed)
    assert final.outcome is Outcome.FINISHED
    assert [e.request.prompt for e in asked] == ["Who are you?"]
    assert inner_calls(resumed, "write_file") == []
    assert (workdir / "sub.txt").read_text() == "changed by hand"


@pytest.mark.parametrize("cause", [Cause.PAUSE, Cause.DISCONNECT, Cause.SHUTDOWN])
async def test_a_subagents_committed_call_never_runs_again_after(
    auto_runtime: Runtime, workdir: Path, cause: Cause
) -> None:
    runtime = auto_runtime
    recorder = Recorder()

    def stop_after_inner_shell(event: object) -> None:
        if isinstance(event, ToolResultEvent) and event.agent and event.name == "shell":
            if cause is Cause.SHUTDOWN:
                runtime.executor.cancel_all(Cause.SHUTDOWN)
            else:
                (info,) = runtime.executor.running()
                runtime.executor.cancel(info.task_hash, cause)

    recorder.hooks.append(stop_after_inner_shell)
    with trio.fail_after(LIMIT):
        # Nested too: the shell runs in a subagent of a subagent.
        ended = await runtime.executor.run(
            "chat-every", "spawn {spawn {sh echo x >> log; sleep 1}}", owner="t", emit=recorder
        )
    assert isinstance(ended, RunEnded)
    assert ended.cause is cause and ended.pending_kept
    record = await runtime.store.load("chat-every")
    assert record is not None
    assert sorted(j.agent for j in record.subagents.values()) == ["sub1", "sub1/sub1"]
    resumed = Recorder()
    with trio.fail_after(LIMIT):
        final = await runtime.executor.resume("chat-every", owner="t", emit=resumed)
    assert final.outcome is Outcome.FINISHED
    assert (workdir / "log").read_text() == "x\n"
    assert inner_calls(resumed, "shell") == []
    assert [e.agent for e in inner_calls(resumed, "sleep")] == ["sub1/sub1"]


async def test_a_subagents_committed_call_never_runs_again_after_a_crash(
    tmp_path: Path, workdir: Path, verifier: FakeVerifier
) -> None:
    # The process dies (its store is abandoned mid-run, nothing more reaches the file);
    # a new runtime on the same state dir resumes the task.
    state = tmp_path / "state"
    recorder = Recorder()

    def opened() -> contextlib.AbstractAsyncContextManager[Runtime]:
        return open_runtime(
            state,
            model=ScriptedModel(word_delay=0, stream_delay=0),
            workdir=workdir,
            verifier=verifier,
            approval=Approval.FULL_AUTO,
        )

    async with opened() as first:
        crashed = trio.CancelScope()

        def crash(event: object) -> None:
            if isinstance(event, ToolResultEvent) and event.agent and event.name == "shell":
                crashed.cancel()

        recorder.hooks.append(crash)
        with crashed, trio.fail_after(LIMIT):
            await first.executor.run(
                "chat-crash", "spawn {sh echo x >> log; sleep 1}", owner="t", emit=recorder
            )
    assert crashed.cancelled_caught
    async with opened() as second:
        resumed = Recorder()
        with trio.fail_after(LIMIT):
            final = await second.executor.resume("chat-crash", owner="t", emit=resumed)
    assert final.outcome is Outcome.FINISHED
    assert (workdir / "log").read_text() == "x\n"
    assert inner_calls(resumed, "shell") == []


@pytest.mark.deadline(120)  # the lab: every point of the run, with one cause
@pytest.mark.parametrize("cause", CAUSES)
def test_the_lab_finds_no_violation_inside_a_subagent_at_any_point_with_any_cause(
    cause: str,
) -> None:
    # Every event and store write of the run, with each of the six causes (one a test, so
    # that the test processes share them): the crash at the write of a subagent's attempt
    # leaves a started, uncommitted inner call, which must say it may already have run; no
    # committed inner call may run again.
    conversation = Conversation("spawn {write a.txt x; sh echo y >> log; ask Name?}; write b.txt z")
    report = Lab(conversation, causes=(cause,)).run()
    assert report.violations == [], format_table(report)
    assert report.causes == (cause,)
    assert len(report.points) == len(report.boundaries)
    inner = [b for b in report.boundaries if b.name == "store.save_fields" and "sub1" in b.label[2]]
    assert inner, "the subagent's attempts are store writes of their own"


def test_real_kills_of_a_daemon_running_a_subagent_rerun_no_committed_call() -> None:
    conversation = Conversation("spawn {sh echo y >> log; write a.txt x}")
    kills = real_kills(conversation, 3, seed=7)
    assert len(kills) == 3
    assert [v for k in kills for v in k.violations] == []


@pytest.mark.parametrize("password", [False, True], ids=["confirm", "password"])
async def test_a_subagent_stopped_as_its_window_goes_does_not_commit_nobody_connected(
    runtime: Runtime, password: bool
) -> None:
    # A window that goes away leaves the registry and stops its runs in the same moment. A
    # subagent that asks just then must stop with its run, not take "nobody is connected"
    # as its call's result (which it would commit).
    ask = Message.user("write a.txt")
    run = AgentRun(
        model=runtime.model,
        registry=runtime.registry,
        config=runtime.executor.config,
        emit=Recorder(),
        task_hash="t1",
        snapshot=TaskRecord("cli-gone", ask.content, (ask,)),
        store=None,
        live=[ask],
        agent="sub1",
    )
    call = ToolCall("call_1_0", "write_file", {"path": "a.txt", "content": "x"})
    confirm = run.confirm_restricted if password else run.confirm
    reached = False
    with bind_context(RequestContext("cli-gone", "W")):
        with trio.CancelScope() as stopping:
            stopping.cancel()  # the stop made as the window left
            await confirm(call, "write a.txt")
            reached = True
        assert stopping.cancelled_caught and not reached
        # With nobody connected and no stop under way, the subagent's call is told so.
        with pytest.raises(ToolError, match="nobody is connected"):
            await confirm(call, "write a.txt")

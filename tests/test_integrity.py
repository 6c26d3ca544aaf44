"""Integrity on ordinary paths: full values in live runs, no lost or silent re-runs, no lost questions.

Each test here pins a way the promise "stopping never costs work and never
repeats it" once broke outside the spec's own scenarios.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from agentrt import ALLOW_ONCE
from agentrt import ALLOW_SESSION
from agentrt import Cause
from agentrt import Entry
from agentrt import Message
from agentrt import Outcome
from agentrt import RequestKind
from agentrt import RunEnded
from agentrt import Runtime
from agentrt import TaskRecord
from agentrt import TaskStarted
from agentrt import TaskStatus
from agentrt import TaskStore
from agentrt import TextEvent
from agentrt import ToolCall
from agentrt import ToolCallEvent
from agentrt import ToolResultEvent
from agentrt import describe_resume
from agentrt.agent.loop import AgentRun
from agentrt.agent.tools import ToolRun
from agentrt.agent.tools.testing import Sleep
from agentrt.core.process import process_token
from agentrt.vocab.terms import Approval

from .conftest import Recorder
from .conftest import answer_all

LIMIT = 10


async def answering(
    nursery: trio.Nursery,
    runtime: Runtime,
    answer: Callable[[Entry], str | None],
    prefix: str = "cli-",
) -> list[Entry]:
    """Start `answer_all` for `prefix` in `nursery`; the list of what it is asked."""
    asked: list[Entry] = []
    await nursery.start(answer_all, runtime, prefix, answer, asked)
    return asked


# -- 1. live runs use full values; snapshots alone are clamped ---------------


async def test_live_write_writes_every_byte_and_the_confirmation_counts_them(
    runtime: Runtime, workdir: Path, nursery: trio.Nursery
) -> None:
    content = "x" * 6_000 + "0123456789"  # 6,010 bytes: over the 4 KiB argument limit
    asked = await answering(nursery, runtime, lambda e: ALLOW_ONCE)
    recorder = Recorder()
    with trio.fail_after(LIMIT):
        ended = await runtime.executor.run(
            "cli-big", f"write big.txt {content}", owner="t", emit=recorder
        )
    assert ended.outcome is Outcome.FINISHED
    written = (workdir / "big.txt").read_text()
    assert written == content
    assert "elided" not in written
    assert [e.request.prompt for e in asked] == [f"write 6010 bytes to {workdir / 'big.txt'}"]
    # What was shown is shortened; what ran was whole.
    (call,) = recorder.of(ToolCallEvent)
    assert "elided" in call.arguments["content"]
    assert len(call.arguments["content"].encode()) <= 4096


async def test_snapshot_is_clamped_while_the_live_run_keeps_full_values(
    runtime: Runtime, workdir: Path
) -> None:
    content = "y" * 10_000
    with trio.fail_after(LIMIT):
        ended = await runtime.executor.run(
            "chat-snap", f"write big.txt {content}; ask ok?", owner="t", emit=Recorder()
        )
    # No web page is serving: the confirmation and the question are saved with the task.
    assert ended.outcome is Outcome.AWAITING_ANSWER
    record = await runtime.store.load("chat-snap")
    assert record is not None
    assert record.question is not None
    assert record.question.prompt == f"write 10000 bytes to {workdir / 'big.txt'}"
    saved = next(c for c in record.unanswered_calls() if c.name == "write_file")
    assert "elided" in saved.arguments["content"]


async def test_a_resumed_call_whose_argument_was_elided_runs_with_its_full_value(
    runtime: Runtime, workdir: Path
) -> None:
    # The snapshot is clamped; the full arguments are kept beside it (and past their
    # bound the call is refused: see tests/test_kept_arguments.py).
    content = "z" * 10_000
    with trio.fail_after(LIMIT):
        await runtime.executor.run(
            "chat-elided", f"write big.txt {content}", owner="t", emit=Recorder()
        )
        recorder = Recorder()
        ended = await runtime.executor.resume(
            "chat-elided", owner="t", emit=recorder, answer=ALLOW_ONCE
        )
    assert ended.outcome is Outcome.FINISHED
    assert (workdir / "big.txt").read_text() == content
    (result,) = recorder.of(ToolResultEvent)
    assert result.ok


# -- 2. outgoing frames stay under the peer's cap ----------------------------


def test_a_frame_over_the_cap_is_shortened_to_fit() -> None:
    from agentrt.protocol.codec import MAX_FRAME_SIZE
    from agentrt.protocol.codec import FrameCodec
    from agentrt.protocol.codec import encode
    from agentrt.protocol.frames import ToolCallFrame

    frame = ToolCallFrame("t", "c", "write_file", {"path": "a", "content": "q" * 2_000_000})
    data = encode(frame)
    assert len(data) <= MAX_FRAME_SIZE + 1
    codec = FrameCodec.for_client()
    codec.feed(data)
    decoded = codec.next_frame()
    assert isinstance(decoded, ToolCallFrame)
    assert "elided" in decoded.arguments["content"]
    assert decoded.arguments["path"] == "a"


# -- 5. started, committed, and "may already have run" -------------------------


async def test_a_pause_right_after_a_tool_returned_still_commits_its_result(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs: list[str] = []

    async def sleep_then_pause(self: Sleep, run: ToolRun, call: ToolCall) -> str:
        runs.append(call.id)
        # The pause lands after the tool's work is done, before its result is committed.
        runtime.executor.cancel(run.task_hash, Cause.PAUSE)
        return "done"

    monkeypatch.setattr(Sleep, "run", sleep_then_pause)
    with trio.fail_after(LIMIT):
        ended = await runtime.executor.run("cli-p", "sleep 1", owner="t", emit=Recorder())
    assert ended.outcome is Outcome.CANCELLED
    assert ended.cause is Cause.PAUSE
    record = await runtime.store.load("cli-p")
    assert record is not None
    assert record.unanswered_calls() == []
    with trio.fail_after(LIMIT):
        again = await runtime.executor.resume("cli-p", owner="t", emit=Recorder())
    assert again.outcome is Outcome.FINISHED
    assert len(runs) == 1  # committed, so not run again


async def test_a_call_that_started_and_never_committed_says_it_may_already_have_run(
    runtime: Runtime, nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Allowed for the whole session: a call that may already have run is asked about anyway.
    asked = await answering(nursery, runtime, lambda e: ALLOW_SESSION)
    begin_effect = AgentRun.begin_effect

    async def begin_then_pause(run: AgentRun, call: ToolCall) -> None:
        await begin_effect(run, call)
        # The run stops after the call took effect and before its result was committed.
        runtime.executor.cancel(run.task_hash, Cause.PAUSE)

    monkeypatch.setattr(AgentRun, "begin_effect", begin_then_pause)
    with trio.fail_after(LIMIT):
        ended = await runtime.executor.run("cli-sh", "sh echo hi", owner="t", emit=Recorder())
    assert ended.cause is Cause.PAUSE
    record = await runtime.store.load("cli-sh")
    assert record is not None
    (call,) = record.unanswered_calls()
    assert record.attempts_of(call.id) == 1

    monkeypatch.setattr(AgentRun, "begin_effect", begin_effect)
    resumed = Recorder()
    with trio.fail_after(LIMIT):
        again = await runtime.executor.resume("cli-sh", owner="t", emit=resumed)
    assert again.outcome is Outcome.FINISHED
    assert [e.request.prompt for e in asked] == [
        "run: echo hi",
        "run: echo hi [may already have run (attempt 2)]",
    ]
    (shown,) = resumed.of(ToolCallEvent)
    assert shown.attempt == 2
    assert shown.may_have_run == "may already have run (attempt 2)"


async def test_attempts_survive_the_store(runtime: Runtime) -> None:
    record = TaskRecord("cli-a", "hi", (Message.user("hi"),), attempts={"c1": 2})
    await runtime.store.save(record)
    loaded = await runtime.store.load("cli-a")
    assert loaded is not None
    assert loaded.attempts == {"c1": 2}


# -- 6. questions are never lost from snapshots --------------------------------


async def test_pause_while_a_chat_question_is_parked_and_another_call_runs_keeps_the_question(
    runtime: Runtime,
) -> None:
    recorder = Recorder()

    def pause_on_sleep(event: Any) -> None:
        if isinstance(event, ToolCallEvent) and event.name == "sleep":
            runtime.executor.cancel(event.task_hash, Cause.PAUSE)

    recorder.hooks.append(pause_on_sleep)
    with trio.fail_after(LIMIT):
        ended = await runtime.executor.run(
            "chat-q", "ask Your name?; sleep 30", owner="t", emit=recorder
        )
    assert ended.cause is Cause.PAUSE
    record = await runtime.store.load("chat-q")
    assert record is not None
    assert record.question is not None
    assert record.question.prompt == "Your name?"
    with trio.fail_after(LIMIT):
        # The answer is accepted; the interrupted sleep then runs again.
        again = Recorder()
        again.hooks.append(pause_on_sleep)
        await runtime.executor.resume("chat-q", owner="t", emit=again, answer="Ada")
    record = await runtime.store.load("chat-q")
    assert record is not None
    answered = [m for m in record.transcript if m.role.value == "tool"]
    assert [m.content for m in answered] == ["Ada"]


@pytest.mark.parametrize(
    ("text", "kind"),
    [("write restricted/f x", RequestKind.PASSWORD), ("secret token", RequestKind.SECRET)],
)
async def test_password_and_secret_prompts_are_saved_with_the_task(
    runtime: Runtime, nursery: trio.Nursery, text: str, kind: RequestKind, tmp_path: Path
) -> None:
    asked: list[Entry] = []
    open_question = trio.Event()

    def leave_open(entry: Entry) -> None:
        open_question.set()

    await nursery.start(answer_all, runtime, "cli-", leave_open, asked)
    text = text.replace("restricted/", f"{tmp_path / 'restricted'}/")
    recorder = Recorder()
    async with trio.open_nursery() as inner:

        async def run() -> None:
            await runtime.executor.run("cli-pw", text, owner="t", emit=recorder)

        inner.start_soon(run)
        with trio.fail_after(LIMIT):
            await open_question.wait()
        (info,) = runtime.executor.running()
        runtime.executor.cancel(info.task_hash, Cause.PAUSE)
    record = await runtime.store.load("cli-pw")
    assert record is not None
    assert record.status is TaskStatus.INTERRUPTED
    assert record.question is not None
    assert record.question.kind is kind
    assert record.question.prompt == asked[0].request.prompt


async def test_a_subagents_question_in_a_chat_session_parks_like_its_parent(
    runtime: Runtime, nursery: trio.Nursery
) -> None:
    # A web page is serving chat- sessions, and still the question is not asked inline.
    asked = await answering(nursery, runtime, lambda e: ALLOW_ONCE, "chat-")
    with trio.fail_after(LIMIT):
        ended = await runtime.executor.run(
            "chat-sub", "spawn {ask Favourite colour?}", owner="t", emit=Recorder()
        )
    assert ended.outcome is Outcome.AWAITING_ANSWER
    assert ended.question == "Favourite colour?"
    assert asked == []
    with trio.fail_after(LIMIT):
        final = await runtime.executor.resume("chat-sub", owner="t", emit=Recorder(), answer="teal")
    assert final.outcome is Outcome.FINISHED
    assert final.text is not None
    assert "teal" in final.text


# -- 7. the first event is always TaskStarted ----------------------------------


@pytest.mark.parametrize("cause", [Cause.USER_CANCEL, Cause.PAUSE])
async def test_a_cancel_before_the_first_event_still_starts_with_task_started(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch, cause: Cause
) -> None:
    create = TaskStore.create

    async def cancel_while_creating(store: TaskStore, record: TaskRecord) -> Any:
        (info,) = runtime.executor.running()
        runtime.executor.cancel(info.task_hash, cause)
        return await create(store, record)

    monkeypatch.setattr(TaskStore, "create", cancel_while_creating)
    recorder = Recorder()
    with trio.fail_after(LIMIT):
        ended = await runtime.executor.run("cli-early", "stream 5", owner="t", emit=recorder)
    assert ended.cause is cause
    assert [type(e) for e in recorder.events] == [TaskStarted, RunEnded]
    assert (await runtime.store.load("cli-early") is None) is cause.deletes_pending


# -- 9. a live task is not "crashed" --------------------------------------------


def test_crashed_means_the_runner_is_gone_not_merely_running() -> None:
    live = TaskRecord("cli-l", "x", (), status=TaskStatus.RUNNING, runner=process_token())
    assert not live.crashed
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    dead = TaskRecord("cli-d", "x", (), status=TaskStatus.RUNNING, runner=f"{child.pid}:1")
    assert dead.crashed
    assert not TaskRecord("cli-i", "x", (), status=TaskStatus.INTERRUPTED).crashed
    assert TaskRecord("cli-n", "x", (), status=TaskStatus.RUNNING).crashed
    assert os.getpid() != child.pid


async def test_calls_of_one_round_that_start_together_all_keep_their_attempts(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Run unasked, so the three calls begin their effects at once (questions would be
    # posted one call after another, in the order the calls were issued).
    config = attrs.evolve(runtime.executor.config, approval=Approval.FULL_AUTO)
    monkeypatch.setattr(runtime.executor, "config", config)
    others_started = trio.Event()
    begin_effect = AgentRun.begin_effect
    save_fields = TaskStore.save_fields
    begun: list[str] = []

    async def begin_then_pause_after_all(run: AgentRun, call: ToolCall) -> None:
        await begin_effect(run, call)
        begun.append(call.id)
        if len(begun) == 3:
            runtime.executor.cancel(run.task_hash, Cause.PAUSE)

    async def slow_save_fields(store: TaskStore, record: TaskRecord) -> bool:
        # The first attempt's write is still on its way when the other calls start theirs.
        if record.attempts and not others_started.is_set():
            await trio.testing.wait_all_tasks_blocked()
            others_started.set()
        return await save_fields(store, record)

    monkeypatch.setattr(AgentRun, "begin_effect", begin_then_pause_after_all)
    monkeypatch.setattr(TaskStore, "save_fields", slow_save_fields)
    with trio.fail_after(LIMIT):
        await runtime.executor.run(
            "cli-three", "sh sleep 5; sh sleep 6; sh sleep 7", owner="t", emit=Recorder()
        )
    record = await runtime.store.load("cli-three")
    assert record is not None
    assert len(record.unanswered_calls()) == 3
    assert record.attempts == {c.id: 1 for c in record.unanswered_calls()}


async def test_a_resume_says_what_the_stop_cost(
    runtime: Runtime, nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch
) -> None:
    await answering(nursery, runtime, lambda e: ALLOW_ONCE)
    begin_effect = AgentRun.begin_effect

    # The three calls run side by side: the shell pauses once the other two have committed
    # (a result is reported only after it is committed).
    first = Recorder()
    committed = trio.Event()
    first.hooks.append(lambda e: committed.set() if len(first.of(ToolResultEvent)) == 2 else None)

    async def pause_when_the_shell_begins(run: AgentRun, call: ToolCall) -> None:
        await begin_effect(run, call)
        if call.name == "shell":
            await committed.wait()
            runtime.executor.cancel(run.task_hash, Cause.PAUSE)

    monkeypatch.setattr(AgentRun, "begin_effect", pause_when_the_shell_begins)
    with trio.fail_after(LIMIT):
        await runtime.executor.run(
            "cli-cost", "write a.txt hi; read a.txt; sh sleep 30", owner="t", emit=first
        )
    monkeypatch.setattr(AgentRun, "begin_effect", begin_effect)

    resumed = Recorder()

    def pause_at_once(event: Any) -> None:
        if isinstance(event, TaskStarted):
            runtime.executor.cancel(event.task_hash, Cause.PAUSE)

    resumed.hooks.append(pause_at_once)
    with trio.fail_after(LIMIT):
        await runtime.executor.resume("cli-cost", owner="t", emit=resumed)
    (started,) = resumed.of(TaskStarted)
    assert started.resumed
    # The write and the read were committed; the shell had begun and runs again.
    assert (started.kept_calls, started.rerun_calls) == (2, 1)


async def test_words_of_an_unsaved_reply_are_counted_for_the_resume(runtime: Runtime) -> None:
    recorder = Recorder()
    words: list[str] = []

    def pause_after_three_words(event: Any) -> None:
        if isinstance(event, TextEvent):
            words.append(event.text)
            if len(words) == 3:
                runtime.executor.cancel(event.task_hash, Cause.PAUSE)

    recorder.hooks.append(pause_after_three_words)
    with trio.fail_after(LIMIT):
        await runtime.executor.run("cli-words", "stream 50", owner="t", emit=recorder)
    record = await runtime.store.load("cli-words")
    assert record is not None
    assert record.lost_words == 3
    again = Recorder()
    with trio.fail_after(LIMIT):
        ended = await runtime.executor.resume("cli-words", owner="t", emit=again)
    assert ended.outcome is Outcome.FINISHED
    (started,) = again.of(TaskStarted)
    assert (
        describe_resume(started.kept_calls, started.rerun_calls, started.regenerated_words)
        == "resumed: 0 calls kept, 0 run again, 3 words regenerated"
    )

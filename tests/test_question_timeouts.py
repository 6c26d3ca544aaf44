"""Timeouts per kind of question, on Trio's mock clock: pause, deny, and late answers after.

The clock moves only when a test jumps it, once the question is out: the
task store works in threads meanwhile, and no other deadline can fire early.
Each test checks the edge exactly: a second before the timeout nothing has
happened; at it, the timeout's action is done.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import attrs
import pytest
import trio
import trio.testing

from agentrt import Cause
from agentrt import Entry
from agentrt import Listener
from agentrt import Outcome
from agentrt import QuestionExpiredError
from agentrt import QuestionState
from agentrt import RequestKind
from agentrt import RunEnded
from agentrt import Runtime
from agentrt import TaskStatus
from agentrt import Timeout
from agentrt import TimeoutAction
from agentrt import Timeouts
from agentrt import ToolResultEvent
from agentrt.core.desk import Desk
from agentrt.daemon import Daemon
from agentrt.protocol.client import Client
from agentrt.protocol.frames import AnswerFrame
from agentrt.protocol.frames import AskFrame
from agentrt.protocol.frames import AskWithdrawn
from agentrt.protocol.frames import EndedFrame
from agentrt.protocol.frames import ErrorCode
from agentrt.protocol.frames import ErrorFrame
from agentrt.protocol.frames import PendingAction
from agentrt.protocol.frames import PendingList
from agentrt.protocol.frames import PendingRequest
from agentrt.protocol.frames import Run
from agentrt.vocab.questions import trace_of

from .conftest import Recorder

#: The outcome, cause and pending_kept of a run that a pause timeout ended, its task kept.
PAUSED_AND_KEPT = (Outcome.CANCELLED, Cause.PAUSE, True)


def timing(runtime: Runtime, **timeouts: Timeout) -> None:
    """Let the runtime's questions wait as `timeouts` say (each kind by its name)."""
    executor = runtime.executor
    executor.config = attrs.evolve(executor.config, timeouts=Timeouts(**timeouts))


@attrs.define
class Asking:
    """A run of one terminal session, and its questions as a front-end claims them."""

    runtime: Runtime
    recorder: Recorder = attrs.field(factory=Recorder)
    ended: list[RunEnded] = attrs.field(factory=list)

    async def run(self, session: str, text: str) -> None:
        self.ended.append(
            await self.runtime.executor.run(session, text, owner="me", emit=self.recorder)
        )

    @asynccontextmanager
    async def question(self, session: str, text: str) -> AsyncIterator[tuple[Listener, Entry]]:
        """Run `text` in `session` and claim its first question; leaving waits for the run's
        end."""
        with self.runtime.registry.listen("cli-") as listener:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self.run, session, text)
                yield listener, await listener.claim()

    async def timed_out(
        self, clock: trio.testing.MockClock, session: str, text: str, seconds: float
    ) -> tuple[RunEnded, Entry, Listener]:
        """Run `text` in `session` until its first question times out, exactly at `seconds`;
        the run's end, the question, and the listener that claimed it."""
        async with self.question(session, text) as (listener, entry):
            await expire_exactly(clock, entry, seconds)
        [ended] = self.ended
        return ended, entry, listener


@pytest.fixture
def asking(runtime: Runtime) -> Asking:
    return Asking(runtime)


async def expire_exactly(clock: trio.testing.MockClock, entry: Entry, seconds: float) -> None:
    """Jump to a second before `seconds` (nothing happens), then to `seconds`."""
    clock.jump(seconds - 1)
    await trio.testing.wait_all_tasks_blocked()
    assert not entry.done
    clock.jump(1)


async def test_a_confirmation_that_times_out_with_pause_keeps_the_task_its_question_saved_and_expired(
    runtime: Runtime, asking: Asking, mock_clock: trio.testing.MockClock, workdir: Path
) -> None:
    timing(runtime, confirm=Timeout(1800.0, TimeoutAction.PAUSE))
    ended, entry, _ = await asking.timed_out(mock_clock, "cli-slow", "write a.txt hi", 1800)
    assert (ended.outcome, ended.cause, ended.pending_kept) == PAUSED_AND_KEPT
    assert entry.state.question_state is QuestionState.EXPIRED
    record = await runtime.store.load("cli-slow")
    assert record is not None and record.question is not None
    assert (record.status, record.cause) == (TaskStatus.INTERRUPTED, Cause.PAUSE)
    assert (record.question.id, record.question.kind) == (entry.id, RequestKind.CONFIRM)
    assert record.question.state is QuestionState.EXPIRED
    trace = trace_of(record.questions, entry.id)
    assert trace is not None and (trace.state, trace.waited) == (QuestionState.EXPIRED, 1800.0)
    assert not (workdir / "a.txt").exists()
    # A late answer is told why; the kept task still takes an answer given ahead, by its id.
    with pytest.raises(QuestionExpiredError, match=rf"^question {entry.id} expired after 30m$"):
        entry.answer("allow")
    resumed = await runtime.executor.resume(
        "cli-slow", owner="me", emit=Recorder(), answer="allow", question_id=entry.id
    )
    assert resumed.outcome is Outcome.FINISHED
    assert (workdir / "a.txt").read_text() == "hi"


async def test_a_confirmation_that_times_out_with_deny_is_denied_and_the_run_goes_on(
    runtime: Runtime, asking: Asking, mock_clock: trio.testing.MockClock, workdir: Path
) -> None:
    timing(runtime, confirm=Timeout(90.0, TimeoutAction.DENY))
    ended, entry, listener = await asking.timed_out(mock_clock, "cli-deny", "write a.txt hi", 90)
    assert ended.outcome is Outcome.FINISHED  # the model was told, and answered
    [result] = asking.recorder.of(ToolResultEvent)
    assert (result.name, result.preview) == (
        "write_file",
        "error: denied: nobody answered its confirmation within 1m30s",
    )
    assert not (workdir / "a.txt").exists()
    settled = runtime.registry.settled(entry.id)
    assert settled is not None
    assert settled.trace.refusal() == f"question {entry.id} expired after 1m30s"
    # A front-end that claimed it refuses a late answer with that reason.
    late = Desk(listener, lambda e: None, _closed).late(entry.id, lambda ctx: True)
    assert late is not None and str(late) == f"question {entry.id} expired after 1m30s"


async def _closed(entry: Entry, state: object, shown: None) -> None:
    await trio.lowlevel.checkpoint()


@pytest.mark.parametrize(
    ("kind", "text", "tool", "result"),
    [
        ("question", "ask Colour?", "ask_user", "nobody answered within 2h"),
        ("secret", "secret API_KEY", "store_secret", "error: nobody typed the secret within 2h"),
    ],
)
async def test_a_question_that_times_out_with_deny_gets_a_result_saying_nobody_answered(
    runtime: Runtime,
    asking: Asking,
    mock_clock: trio.testing.MockClock,
    kind: str,
    text: str,
    tool: str,
    result: str,
) -> None:
    timing(runtime, **{kind: Timeout(7200.0, TimeoutAction.DENY)})
    ended, entry, _ = await asking.timed_out(mock_clock, "cli-q", text, 7200)
    assert entry.request.kind is RequestKind(kind)
    assert ended.outcome is Outcome.FINISHED
    [shown] = asking.recorder.of(ToolResultEvent)
    assert (shown.name, shown.preview) == (tool, result)
    assert runtime.secrets.get("API_KEY") is None


async def test_only_the_kind_with_a_timeout_times_out(
    runtime: Runtime, asking: Asking, mock_clock: trio.testing.MockClock
) -> None:
    # Confirmations time out; a question waits for ever, however long.
    timing(runtime, confirm=Timeout(60.0, TimeoutAction.DENY))
    async with asking.question("cli-w", "ask Colour?") as (_, entry):
        mock_clock.jump(365 * 86400)
        await trio.testing.wait_all_tasks_blocked()
        assert not entry.done
        entry.answer("blue")
    [ended] = asking.ended
    assert ended.outcome is Outcome.FINISHED
    assert ended.text is not None and "You answered: blue" in ended.text


async def test_a_frame_answer_after_a_pause_timeout_gets_an_error_frame_saying_it_expired(
    runtime: Runtime, daemon: Daemon, mock_clock: trio.testing.MockClock, workdir: Path
) -> None:
    timing(runtime, confirm=Timeout(1800.0, TimeoutAction.PAUSE))
    async with await Client.connect(daemon.socket_path) as client:
        await client.send(Run(f"write {workdir / 'b.txt'} hi"))
        ask = await client.wait_for(AskFrame)
        mock_clock.jump(1800)
        reason = f"question {ask.id} expired after 30m"
        assert await client.wait_for(AskWithdrawn) == AskWithdrawn(ask.id, reason)
        ended = await client.wait_for(EndedFrame)
        assert (ended.outcome, ended.cause, ended.pending_kept) == PAUSED_AND_KEPT
        await client.send(AnswerFrame(ask.id, "allow"))
        assert await client.receive() == ErrorFrame(ErrorCode.INVALID, reason, "answer")
        # The connection goes on, and its kept task waits for the same question.
        await client.send(PendingRequest(PendingAction.LIST))
        listed = await client.receive()
        assert isinstance(listed, PendingList)
        assert [(t.status, t.question_id) for t in listed.tasks] == [("interrupted", ask.id)]
    assert not (workdir / "b.txt").exists()

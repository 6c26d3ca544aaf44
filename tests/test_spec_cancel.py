"""The spec's "Cancel and pause" section, one test (or more) per sentence."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from pathlib import Path

import pytest
import trio
import trio.lowlevel
import trio.testing

from agentrt import Cause
from agentrt import CauseScope
from agentrt import Event
from agentrt import ListenerGoneError
from agentrt import NotOwnerError
from agentrt import Outcome
from agentrt import RequestKind
from agentrt import RunEnded
from agentrt import Runtime
from agentrt import ScriptedModel
from agentrt import TaskRecord
from agentrt import TaskStarted
from agentrt import TaskStatus
from agentrt import TextEvent
from agentrt import ToolCallEvent
from agentrt import ToolResultEvent
from agentrt import UnknownTaskError
from agentrt import cause_of
from agentrt import open_runtime
from agentrt import stop_cause
from agentrt.models.messages import Message
from agentrt.models.messages import ModelResponse
from agentrt.models.messages import OnDelta
from agentrt.models.messages import Role
from agentrt.models.messages import TextDelta
from agentrt.models.messages import ToolSpec
from agentrt.store import Queued
from agentrt.vocab.events import describe_resume
from agentrt.vocab.stops import CallState
from agentrt.vocab.stops import StopKind
from agentrt.vocab.terms import SETTLE
from agentrt.vocab.terms import Settle

from .conftest import Recorder

# "Cancellation carries a cause since v1.0.10 (context.WithCancelCause)."


async def test_cancellation_carries_its_cause_into_the_cancelled_code() -> None:
    seen: list[Cause | None] = []
    with CauseScope() as scope:
        scope.cancel(Cause.PAUSE)
        try:
            await trio.sleep_forever()
        except trio.Cancelled as exc:
            seen.append(cause_of(exc))
            raise
    assert seen == [Cause.PAUSE]
    assert scope.cause is Cause.PAUSE and scope.cancelled_caught


async def _sleep_that_ran_out() -> None:
    """A pause whose time ran out before it began (a slow machine): Trio's `sleep_until`
    enters a scope past its deadline, which gives any `Cancelled` its own reason."""
    await trio.sleep_until(trio.current_time())


async def test_an_inner_deadline_hides_the_cause_from_the_cancelled_but_not_from_stop_cause() -> (
    None
):
    seen: list[Cause | None] = []
    with trio.CancelScope() as outer:
        outer.cancel(reason=Cause.PAUSE.reason)
        try:
            await _sleep_that_ran_out()
        except trio.Cancelled as exc:
            seen += [cause_of(exc), await stop_cause(exc)]
            raise
    assert seen == [None, Cause.PAUSE]
    assert outer.cancelled_caught


async def test_stop_cause_of_an_error_or_a_causeless_cancel_is_none() -> None:
    assert await stop_cause(ValueError("no cancel here")) is None
    seen: list[Cause | None] = []
    with trio.CancelScope() as outer:
        outer.cancel()
        try:
            await _sleep_that_ran_out()
        except trio.Cancelled as exc:
            seen.append(await stop_cause(exc))
            raise
    assert seen == [None]


class _SlowPauseModel:
    """Says one word, then pauses as the scripted model does between words, on a machine
    so slow that the pause's time ran out before it began."""

    name = "slow-pause"

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], on_delta: OnDelta
    ) -> ModelResponse:
        await on_delta(TextDelta("one"))
        await _sleep_that_ran_out()
        await trio.sleep_forever()


async def test_a_run_cancelled_from_outside_keeps_the_cause_an_inner_deadline_hid(
    tmp_path: Path,
) -> None:
    recorder = Recorder()
    async with open_runtime(tmp_path / "state", model=_SlowPauseModel(), workdir=tmp_path) as rt:
        with trio.CancelScope() as outer:

            async def cancel_outer(event: Event) -> None:
                if isinstance(event, TextEvent):
                    outer.cancel(reason=Cause.DISCONNECT.reason)

            recorder.hooks.append(cancel_outer)
            await rt.executor.run("cli-hidden", "hello", owner="t", emit=recorder)
            pytest.fail("the run returned instead of letting Cancelled propagate")
        assert outer.cancelled_caught
        ended = recorder.of(RunEnded)
        assert [(e.outcome, e.cause, e.pending_kept) for e in ended] == [
            (Outcome.CANCELLED, Cause.DISCONNECT, True)
        ]
        record = await rt.store.load("cli-hidden")
        assert record is not None
        assert (record.status, record.cause) == (TaskStatus.INTERRUPTED, Cause.DISCONNECT)


async def test_the_first_cause_wins() -> None:
    with CauseScope() as scope:
        scope.cancel(Cause.PAUSE)
        scope.cancel(Cause.USER_CANCEL)
        await trio.lowlevel.checkpoint()
    assert scope.cause is Cause.PAUSE


async def test_a_cancelled_is_never_swallowed_by_a_run(runtime: Runtime) -> None:
    with trio.CancelScope() as outer:
        recorder = Recorder()

        async def cancel_outer(event: Event) -> None:
            if isinstance(event, ToolCallEvent):
                outer.cancel()

        recorder.hooks.append(cancel_outer)
        await runtime.executor.run("cli-o", "sleep 100", owner="t", emit=recorder)
        pytest.fail("the run returned instead of letting Cancelled propagate")
    assert outer.cancelled_caught
    record = await runtime.store.load("cli-o")
    assert record is not None and record.cause is Cause.SHUTDOWN  # kept, as a shutdown


def test_cause_parse_names_the_choices() -> None:
    assert Cause.parse("pause") is Cause.PAUSE
    with pytest.raises(
        ValueError, match="expected one of: user_cancel, pause, disconnect, shutdown"
    ):
        Cause.parse("stop")


async def run_and_cancel_on(
    runtime: Runtime, session: str, text: str, cause: Cause, when: type[Event] = ToolCallEvent
) -> tuple[RunEnded, Recorder]:
    """Run `text`; cancel it with `cause` as soon as an event of type `when` is emitted."""
    recorder = Recorder()
    fired: list[bool] = []

    def hook(event: Event) -> None:
        if isinstance(event, when) and not fired:
            fired.append(True)
            runtime.executor.cancel(event.task_hash, cause, owner="owner")

    recorder.hooks.append(hook)
    ended = await runtime.executor.run(session, text, owner="owner", emit=recorder)
    return ended, recorder


# -- what the store does with every ending: the spec's sentences, the code's table, the doc ---


def _spec_settle(outcome: Outcome, cause: Cause | None) -> Settle:
    """What the spec says the store does when a run ends `outcome` for `cause`."""
    if outcome is Outcome.CANCELLED:
        # "Only a cancel that names runtime.ErrUserCanceled [...] deletes the pending task.
        #  Any other cancel, including the popup's Pause, tears down the run but leaves the
        #  pending record in place."
        return Settle.DELETE if cause is Cause.USER_CANCEL else Settle.KEEP_INTERRUPTED
    if outcome is Outcome.AWAITING_ANSWER:
        # "a pending snapshot is written [...], the run ends, and the answer resumes it"
        return Settle.KEEP_QUESTION
    if outcome is Outcome.FAILED:
        # "An ask_user reply that fails for a reason other than user cancellation no longer
        #  discards the pending task either."
        return Settle.KEEP_FAILED
    return Settle.FINISH  # the conversation is history; nothing is left to resume


_ENDINGS = [
    (outcome, cause)
    for outcome in Outcome
    for cause in (None, *Cause)
    # A cancelled run always has a cause (at worst a shutdown); no other run has one.
    if (outcome is Outcome.CANCELLED) == (cause is not None)
]


@pytest.mark.parametrize(("outcome", "cause"), _ENDINGS)
def test_every_ending_settles_as_the_spec_says(outcome: Outcome, cause: Cause | None) -> None:
    assert SETTLE[(outcome, cause)] is _spec_settle(outcome, cause)
    if cause is not None:
        assert cause.deletes_pending is (SETTLE[(outcome, cause)] is Settle.DELETE)


def test_the_table_has_every_ending_and_nothing_else() -> None:
    assert sorted(SETTLE, key=repr) == sorted(_ENDINGS, key=repr)


def test_the_table_is_the_one_docs_cancellation_shows() -> None:
    text = (Path(__file__).parents[1] / "docs" / "cancellation.md").read_text()
    section = text.split("## What the store does", 1)[1].split("\n## ", 1)[0]
    rows = [
        [cell.strip(" `") for cell in line.strip("|").split("|")]
        for line in section.splitlines()
        if line.startswith("| `")
    ]
    documented = {
        (Outcome(outcome), None if cause == "none" else Cause(cause)): Settle(
            store.split("`")[0].split(":")[0]
        )
        for outcome, cause, store in rows
    }
    assert documented == SETTLE


async def test_a_discard_while_a_paused_run_unwinds_ends_it_as_a_user_cancel(
    runtime: Runtime,
) -> None:
    ended: list[RunEnded] = []
    async with trio.open_nursery() as nursery:
        started = trio.Event()
        hashes: list[str] = []

        async def emit(event: Event) -> None:
            if isinstance(event, ToolCallEvent):
                hashes.append(event.task_hash)
                started.set()

        async def run() -> None:
            ended.append(await runtime.executor.run("cli-pd", "sleep 100", owner="o", emit=emit))

        nursery.start_soon(run)
        await started.wait()
        # The pause is the first cause; the discard deletes the task before the run unwinds.
        runtime.executor.cancel(hashes[0], Cause.PAUSE, owner="o")
        assert await runtime.executor.discard("cli-pd")
    assert (ended[0].outcome, ended[0].cause, ended[0].pending_kept) == (
        Outcome.CANCELLED,
        Cause.USER_CANCEL,
        False,
    )
    assert await runtime.store.load("cli-pd") is None


# "Only a cancel that names runtime.ErrUserCanceled — Ctrl+C in the TUI, or Yes in the Esc
#  popup — deletes the pending task."


async def test_user_cancel_deletes_the_pending_task(runtime: Runtime) -> None:
    ended, _ = await run_and_cancel_on(runtime, "cli-u", "big 5; sleep 100", Cause.USER_CANCEL)
    assert ended.outcome is Outcome.CANCELLED and ended.cause is Cause.USER_CANCEL
    assert not ended.pending_kept
    assert await runtime.store.load("cli-u") is None


# "Any other cancel, including the popup's Pause, tears down the run but leaves the pending
#  record in place, so /pending or GET /v1/session/:id/task can resume it."


class Human:
    """A terminal that allows every confirmation and answers questions once told to."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.answering = False
        self.questions: list[str] = []

    async def serve(self) -> None:
        with self.runtime.registry.listen("cli-") as listener:
            while True:
                entry = await listener.claim()
                if entry.request.choices:
                    entry.answer("allow_session")
                    continue
                self.questions.append(entry.request.prompt)
                if self.answering:
                    entry.answer("yes")


@pytest.mark.parametrize("cause", [Cause.PAUSE, Cause.DISCONNECT, Cause.SHUTDOWN])
async def test_any_other_cancel_keeps_the_pending_task_and_resume_continues_it(
    runtime: Runtime, workdir: Path, cause: Cause
) -> None:
    (workdir / "in.txt").write_text("data")
    human = Human(runtime)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(human.serve)
        # The question stays unanswered, so the run is certainly inside its round when
        # the read's result arrives and the cancel lands.
        ended, _ = await run_and_cancel_on(
            runtime, "cli-k", "read in.txt; ask Go on?", cause, when=ToolResultEvent
        )
        assert ended.outcome is Outcome.CANCELLED and ended.cause is cause and ended.pending_kept
        record = await runtime.store.load("cli-k")
        assert record is not None
        assert record.status is TaskStatus.INTERRUPTED and record.cause is cause
        assert [c.name for c in record.unanswered_calls()] == ["ask_user"]

        human.answering = True
        resumed = Recorder()
        again = await runtime.executor.resume("cli-k", owner="owner", emit=resumed)
        nursery.cancel_scope.cancel()
    assert again.outcome is Outcome.FINISHED
    assert [e.name for e in resumed.of(ToolCallEvent)] == ["ask_user"]
    assert human.questions == ["Go on?", "Go on?"]  # asked again inline, in the resumed run
    assert "read_file: data" in (again.text or "")
    assert await runtime.store.load("cli-k") is None


async def test_resuming_never_runs_a_committed_tool_call_twice(
    runtime: Runtime, workdir: Path
) -> None:
    human = Human(runtime)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(human.serve)
        ended, _ = await run_and_cancel_on(
            runtime,
            "cli-once",
            "sh echo ran >> count.txt; ask Done?",
            Cause.PAUSE,
            when=ToolResultEvent,
        )
        assert ended.pending_kept
        # Pause the resumed run as soon as it starts, then resume and finish it.
        again, _ = await _resume_and_cancel_on_start(runtime, "cli-once", Cause.PAUSE)
        assert again.pending_kept
        human.answering = True
        final = await runtime.executor.resume("cli-once", owner="owner", emit=Recorder())
        nursery.cancel_scope.cancel()
    assert final.outcome is Outcome.FINISHED
    assert (workdir / "count.txt").read_text() == "ran\n"


async def _resume_and_cancel_on_start(
    runtime: Runtime, session: str, cause: Cause
) -> tuple[RunEnded, Recorder]:
    recorder = Recorder()

    def hook(event: Event) -> None:
        if isinstance(event, TaskStarted):
            runtime.executor.cancel(event.task_hash, cause, owner="owner")

    recorder.hooks.append(hook)
    return await runtime.executor.resume(session, owner="owner", emit=recorder), recorder


async def test_discard_of_a_stored_task_is_a_user_cancel(runtime: Runtime) -> None:
    await run_and_cancel_on(runtime, "cli-d", "sleep 100", Cause.PAUSE)
    assert await runtime.store.load("cli-d") is not None
    assert await runtime.executor.discard("cli-d")
    assert await runtime.store.load("cli-d") is None
    assert not await runtime.executor.discard("cli-d")


# "A TUI run is bound to its socket connection: closing the TUI cancels the run without
#  runtime.ErrUserCanceled, so its pending task is kept."


async def test_closing_the_owner_cancels_its_runs_as_a_disconnect_and_keeps_them(
    runtime: Runtime,
) -> None:
    ended: list[RunEnded] = []
    async with trio.open_nursery() as nursery:
        started = trio.Event()

        async def emit(event: Event) -> None:
            if isinstance(event, ToolCallEvent):
                started.set()

        async def run() -> None:
            ended.append(
                await runtime.executor.run("cli-x", "sleep 100", owner="window-1", emit=emit)
            )

        nursery.start_soon(run)
        await started.wait()
        assert runtime.executor.cancel_owner("window-2", Cause.DISCONNECT) == 0
        assert runtime.executor.cancel_owner("window-1", Cause.DISCONNECT) == 1
    assert ended[0].cause is Cause.DISCONNECT and ended[0].pending_kept
    record = await runtime.store.load("cli-x")
    assert record is not None and record.cause is Cause.DISCONNECT


# "The TUI's Ctrl+C and popup choices travel as a cancel frame (with pause for Pause), which
#  the daemon applies through exec.Cancel(taskHash, cause) only for tasks that connection
#  started."


async def test_cancel_applies_only_to_the_owner_that_started_the_task(runtime: Runtime) -> None:
    recorder = Recorder()
    errors: list[Exception] = []

    def intruder(event: Event) -> None:
        if isinstance(event, ToolCallEvent):
            try:
                runtime.executor.cancel(event.task_hash, Cause.USER_CANCEL, owner="someone-else")
            except NotOwnerError as exc:
                errors.append(exc)
            runtime.executor.cancel(event.task_hash, Cause.PAUSE, owner="me")

    recorder.hooks.append(intruder)
    ended = await runtime.executor.run("cli-own", "sleep 100", owner="me", emit=recorder)
    assert [str(e) for e in errors] == [f"task {ended.task_hash!r} was not started by this client"]
    assert ended.cause is Cause.PAUSE and ended.pending_kept


async def test_cancel_of_an_unknown_or_finished_task_is_reported_clearly(runtime: Runtime) -> None:
    with pytest.raises(
        UnknownTaskError, match="no running task 'nope': unknown or already finished"
    ):
        runtime.executor.cancel("nope", Cause.PAUSE)
    ended = await runtime.executor.run("cli-f", "hello", owner="me", emit=Recorder())
    with pytest.raises(UnknownTaskError, match="unknown or already finished"):
        runtime.executor.cancel(ended.task_hash, Cause.PAUSE, owner="me")


# "exec.Run generates the task hash and registers the cancel function before it emits the
#  first event, so a cancel works from the first event onward"


async def test_a_cancel_works_from_the_first_event_onward(runtime: Runtime) -> None:
    ended, recorder = await run_and_cancel_on(
        runtime, "cli-first", "stream 100", Cause.USER_CANCEL, when=TaskStarted
    )
    first = recorder.events[0]
    assert isinstance(first, TaskStarted) and first.task_hash == ended.task_hash
    assert ended.outcome is Outcome.CANCELLED and ended.cause is Cause.USER_CANCEL
    assert recorder.of(TextEvent) == []  # nothing streamed after the cancel


async def test_every_run_ends_with_exactly_one_final_event(runtime: Runtime) -> None:
    for session, text, cause in [
        ("cli-e1", "hello", None),
        ("cli-e2", "sleep 100", Cause.PAUSE),
        ("chat-e3", "ask why?", None),
    ]:
        if cause is None:
            recorder = Recorder()
            await runtime.executor.run(session, text, owner="owner", emit=recorder)
        else:
            _, recorder = await run_and_cancel_on(runtime, session, text, cause)
        finals = recorder.of(RunEnded)
        assert len(finals) == 1 and recorder.events[-1] is finals[0]


async def test_pause_of_a_stream_keeps_what_was_committed(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    runtime.executor.model = ScriptedModel(word_delay=0.01, stream_delay=0.5)
    async with trio.open_nursery() as nursery:
        ended: list[RunEnded] = []
        got_text = trio.Event()

        async def emit(event: Event) -> None:
            if isinstance(event, TextEvent):
                got_text.set()

        async def run() -> None:
            ended.append(await runtime.executor.run("cli-s", "stream 50", owner="me", emit=emit))

        nursery.start_soon(run)
        await got_text.wait()
        [task] = runtime.executor.running()
        runtime.executor.cancel(task.task_hash, Cause.PAUSE, owner="me")
    record = await runtime.store.load("cli-s")
    assert record is not None and record.cause is Cause.PAUSE
    assert [m.role for m in record.transcript] == [Role.USER]  # the reply was never committed
    assert ended[0].pending_kept


# "An ask_user reply that fails for a reason other than user cancellation no longer discards
#  the pending task either."


async def test_an_ask_user_reply_that_fails_keeps_the_pending_task(runtime: Runtime) -> None:
    async with trio.open_nursery() as nursery:
        ended: list[RunEnded] = []

        async def run() -> None:
            ended.append(
                await runtime.executor.run(
                    "cli-q", "big 3; ask Favourite?", owner="me", emit=Recorder()
                )
            )

        nursery.start_soon(run)
        with runtime.registry.listen("cli-") as listener:
            entry = await listener.claim()
            entry.fail(ListenerGoneError("the window closed before answering"))
    assert ended[0].outcome is Outcome.FAILED and ended[0].pending_kept
    assert ended[0].error == "ListenerGoneError: the window closed before answering"
    record = await runtime.store.load("cli-q")
    assert record is not None and record.status is TaskStatus.FAILED
    assert [c.name for c in record.unanswered_calls()] == ["ask_user"]


async def test_a_session_is_free_to_resume_when_its_final_event_arrives(runtime: Runtime) -> None:
    busy_at_end: list[bool] = []
    recorder = Recorder()

    def on_end(event: Event) -> None:
        if isinstance(event, RunEnded):
            busy_at_end.append(runtime.executor.is_running("chat-free"))

    recorder.hooks.append(on_end)
    parked = await runtime.executor.run("chat-free", "ask Go?", owner="owner", emit=recorder)
    assert parked.outcome is Outcome.AWAITING_ANSWER
    again = await runtime.executor.resume("chat-free", answer="yes", owner="owner", emit=recorder)
    assert again.outcome is Outcome.FINISHED
    assert busy_at_end == [False, False]


async def test_answering_one_inline_question_keeps_the_other_saved_with_the_task(
    runtime: Runtime,
) -> None:
    ended: list[RunEnded] = []
    written = trio.Event()
    recorder = Recorder()

    def on_result(event: Event) -> None:
        if isinstance(event, ToolResultEvent) and event.name == "write_file":
            written.set()  # emitted after the result was committed

    recorder.hooks.append(on_result)
    async with trio.open_nursery() as nursery:

        async def run() -> None:
            ended.append(
                await runtime.executor.run(
                    "cli-two", "write a.txt x; ask Q?", owner="o", emit=recorder
                )
            )

        nursery.start_soon(run)
        with runtime.registry.listen("cli-") as listener:
            first, second = await listener.claim(), await listener.claim()
            confirm = first if first.request.kind is RequestKind.CONFIRM else second
            confirm.answer("allow")
            await written.wait()
            # The window goes away while the question is still open.
            runtime.executor.cancel_owner("o", Cause.DISCONNECT)
    record = await runtime.store.load("cli-two")
    assert record is not None
    assert [c.name for c in record.unanswered_calls()] == ["ask_user"]
    assert record.question is not None
    assert (record.question.prompt, record.question.kind) == ("Q?", RequestKind.QUESTION)
    assert ended[0].pending_kept
    again = await runtime.executor.resume("cli-two", answer="yes", owner="o", emit=Recorder())
    assert again.outcome is Outcome.FINISHED


async def test_a_shutdown_arriving_while_a_pause_is_being_saved_still_keeps_the_pause(
    runtime: Runtime,
) -> None:
    outer = trio.CancelScope()
    real = runtime.store

    class ShutdownDuringSave:
        """The store, except that the process starts shutting down as a pause is saved."""

        def __getattr__(self, name: str) -> object:
            return getattr(real, name)

        def stop_nowait(self, *args: object, **kwargs: object) -> Queued[bool]:
            outer.cancel()
            return real.stop_nowait(*args, **kwargs)  # type: ignore[arg-type]

    runtime.executor.store = ShutdownDuringSave()  # type: ignore[assignment]
    with outer:
        await run_and_cancel_on(runtime, "cli-late", "sleep 100", Cause.PAUSE)
    assert outer.cancelled_caught  # the shutdown's Cancelled was not swallowed
    record = await real.load("cli-late")
    assert record is not None
    assert (record.status, record.cause) == (TaskStatus.INTERRUPTED, Cause.PAUSE)


async def test_the_resume_line_counts_a_stopped_call_that_runs_again(
    runtime: Runtime, autojump_clock: trio.testing.MockClock
) -> None:
    # `sleep` records no start (it has no effect); stopped while it ran, it runs a second
    # time on resume, and the resume's first line says so: 1 run again, not 0.
    async with trio.open_nursery() as nursery:
        sleeping = trio.Event()

        async def emit(event: Event) -> None:
            if isinstance(event, ToolCallEvent) and event.name == "sleep":
                sleeping.set()

        nursery.start_soon(
            lambda: runtime.executor.run("cli-s", "sleep 30; big 100000", owner="me", emit=emit)
        )
        await sleeping.wait()
        await trio.testing.wait_all_tasks_blocked()
        [task] = runtime.executor.running()
        runtime.executor.cancel(task.task_hash, Cause.PAUSE, owner="me")
    recorder = Recorder()
    ended = await runtime.executor.resume("cli-s", owner="me", emit=recorder)
    assert ended.outcome is Outcome.FINISHED
    [started] = recorder.of(TaskStarted)
    assert (started.kept_calls, started.rerun_calls) == (1, 1)  # big's result was saved
    assert describe_resume(started.kept_calls, started.rerun_calls, started.regenerated_words) == (
        "resumed: 1 call kept, 1 run again, 0 words regenerated"
    )
    assert [e.name for e in recorder.of(ToolCallEvent)] == ["sleep"]


async def test_a_task_paused_in_the_same_call_again_and_again_keeps_one_entry(
    runtime: Runtime, nursery: trio.Nursery
) -> None:
    """Each pause of a long call, resumed into the same call, is the same stop again: the
    record keeps one entry that counts them, not one a pause (it would grow without end)."""
    session, owner = "cli-folded", object()
    executor = runtime.executor
    for n in range(4):
        sleeping = trio.Event()

        async def emit(event: Event, sleeping: trio.Event = sleeping) -> None:
            if isinstance(event, ToolCallEvent) and event.name == "sleep":
                sleeping.set()

        if n == 0:
            info = await nursery.start(
                partial(executor.run, session, "sleep 60", owner=owner, emit=emit)
            )
        else:
            info = await nursery.start(partial(executor.resume, session, owner=owner, emit=emit))
        with trio.fail_after(30):
            await sleeping.wait()
            executor.cancel(info.task_hash, Cause.PAUSE, owner=owner)
            while executor.is_running(session):
                await trio.testing.wait_all_tasks_blocked()
    record = await runtime.store.load(session)
    assert isinstance(record, TaskRecord)
    [entry] = record.interruptions
    assert (entry.stop, entry.repeats) == (StopKind.PAUSE, 3)
    assert entry.first_at is not None and entry.first_at <= entry.at
    assert [(c.name, c.state) for c in entry.calls] == [("sleep", CallState.STOPPED)]

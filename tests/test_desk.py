"""The desk every front-end takes its questions through, and the one table of refusals."""

from __future__ import annotations

import attrs
import pytest
import trio
import trio.lowlevel
import trio.testing

from agentrt.core.context import RequestContext
from agentrt.core.desk import REFUSED
from agentrt.core.desk import Desk
from agentrt.core.desk import Refusal
from agentrt.core.desk import refusal
from agentrt.core.errors import BadAnswerError
from agentrt.core.errors import LateAnswerError
from agentrt.core.errors import NotOwnerError
from agentrt.core.errors import SessionBusyError
from agentrt.core.errors import UnknownTaskError
from agentrt.core.pending import AlreadyAnsweredError
from agentrt.core.pending import Answer
from agentrt.core.pending import Entry
from agentrt.core.pending import EntryGoneError
from agentrt.core.pending import EntryState
from agentrt.core.pending import ListenerGoneError
from agentrt.core.pending import QuestionExpiredError
from agentrt.core.pending import Registry
from agentrt.store import BadCursorError
from agentrt.store import StoreError
from agentrt.vocab.request import Request


@attrs.define
class Front:
    """A front-end's side of a desk: what it forwarded, delivered and was told is over."""

    forwarded: list[str] = attrs.field(factory=list)
    delivered: list[str] = attrs.field(factory=list)
    closed: list[tuple[str, EntryState, str]] = attrs.field(factory=list)

    def forward(self, entry: Entry) -> str:
        self.forwarded.append(entry.request.prompt)
        return f"shown {entry.request.prompt}"

    async def deliver(self, entry: Entry, shown: str) -> None:
        await trio.lowlevel.checkpoint()
        self.delivered.append(shown)

    async def close(self, entry: Entry, state: EntryState, shown: str) -> None:
        self.closed.append((entry.request.prompt, state, shown))


def open_desk(
    registry: Registry, front: Front, prefix: str = "cli-", window: str | None = None
) -> Desk[str]:
    return Desk.open(
        registry,
        prefix,
        name="test desk",
        window=window,
        forward=front.forward,
        closed=front.close,
        deliver=front.deliver,
    )


async def ask(registry: Registry, prompt: str, ctx: RequestContext, out: list[object]) -> None:
    try:
        out.append(await registry.ask(Request.question(prompt), context=ctx))
    except ListenerGoneError as exc:
        out.append(exc)


async def test_claims_forwards_in_order_and_answers_through_check() -> None:
    registry = Registry()
    front = Front()
    desk = open_desk(registry, front)
    answers: list[object] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(desk.serve)
        for n in range(3):
            nursery.start_soon(ask, registry, f"q{n}", RequestContext(f"cli-{n}"), answers)
            await trio.testing.wait_all_tasks_blocked()
        assert front.forwarded == ["q0", "q1", "q2"]
        assert sorted(front.delivered) == ["shown q0", "shown q1", "shown q2"]
        assert [e.request.prompt for e in desk.entries()] == ["q0", "q1", "q2"]
        first = desk.find(desk.entries()[0].id)
        assert first is not None
        # A masked value sent along with a plain question is dropped by the one check.
        desk.answer(first, Answer("yes", secret="not asked for"))
        await trio.testing.wait_all_tasks_blocked()
        assert answers == [Answer("yes")]
        assert front.closed == [("q0", EntryState.ANSWERED, "shown q0")]
        assert desk.find(first.id) is None
        desk.close()
    # Closing fails the questions still claimed; each is closed once.
    assert len(answers) == 3
    assert all(isinstance(a, ListenerGoneError) for a in answers[1:])
    assert sorted(front.closed[1:]) == [
        ("q1", EntryState.FAILED, "shown q1"),
        ("q2", EntryState.FAILED, "shown q2"),
    ]


async def test_an_answer_that_does_not_fit_is_refused_and_the_question_stays_open() -> None:
    registry = Registry()
    front = Front()
    desk = open_desk(registry, front)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(desk.serve)
        ctx = RequestContext("cli-a")
        entry = registry.post(Request.confirm("write_file", "write x?"), ctx)
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(BadAnswerError, match="takes one of"):
            desk.answer(entry, Answer("maybe"))
        assert not entry.done
        desk.answer(entry, Answer("deny"))
        with pytest.raises(AlreadyAnsweredError):
            desk.answer(entry, Answer("deny"))
        desk.close()


async def test_a_withdrawn_question_is_closed_once_and_close_done_tells_it_first() -> None:
    registry = Registry()
    front = Front()
    desk = open_desk(registry, front)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(desk.serve)
        entry = registry.post(Request.question("still there?"), RequestContext("cli-a"))
        await trio.testing.wait_all_tasks_blocked()
        registry.withdraw(entry)
        # In the withdrawing turn, before the watching task woke: a front-end that says
        # so before its run's next event asks for it now.
        await desk.close_done()
        assert front.closed == [("still there?", EntryState.WITHDRAWN, "shown still there?")]
        await trio.testing.wait_all_tasks_blocked()
        assert len(front.closed) == 1
        with pytest.raises(EntryGoneError):
            desk.answer(entry, Answer("yes"))
        desk.close()


async def test_a_window_desk_takes_only_its_windows_questions() -> None:
    registry = Registry()
    mine, other = Front(), Front()
    desk = open_desk(registry, mine, window="w1")
    catch_all = open_desk(registry, other, prefix="")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(desk.serve)
        nursery.start_soon(catch_all.serve)
        registry.post(Request.question("for w1"), RequestContext("cli-a", "w1"))
        registry.post(Request.question("for w2"), RequestContext("cli-b", "w2"))
        await trio.testing.wait_all_tasks_blocked()
        assert mine.forwarded == ["for w1"]
        assert other.forwarded == ["for w2"]
        desk.close()
        catch_all.close()


async def test_serve_returns_once_closed_with_nothing_claimed() -> None:
    registry = Registry()
    desk = open_desk(registry, Front())
    with trio.fail_after(1):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(desk.serve)
            await trio.testing.wait_all_tasks_blocked()
            desk.close()
    assert registry.statistics().listeners == 0


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (UnknownTaskError("gone"), Refusal("unknown_task", 404, "not_found", "gone")),
        (NotOwnerError("theirs"), Refusal("not_owner", 403, "not_found", "theirs")),
        (SessionBusyError("busy"), Refusal("session_busy", 409, "state", "busy")),
        (BadAnswerError("no fit"), Refusal("bad_answer", 409, "invalid", "no fit")),
        (BadCursorError("bad"), Refusal("bad_query", 400, "invalid", "bad")),
        (
            StoreError("disk full"),
            Refusal("store_error", 500, "failed", "the task store failed: disk full"),
        ),
        (AlreadyAnsweredError("twice"), Refusal("late_answer", 409, "invalid", "twice")),
        (EntryGoneError("stopped"), Refusal("late_answer", 409, "invalid", "stopped")),
        (QuestionExpiredError("late"), Refusal("late_answer", 409, "invalid", "late")),
        (LateAnswerError("other"), Refusal("late_answer", 409, "invalid", "other")),
    ],
)
def test_one_table_refuses_for_every_front_end(error: Exception, expected: Refusal) -> None:
    assert isinstance(error, REFUSED)
    assert refusal(error) == expected


def test_a_subclass_is_refused_as_its_base() -> None:
    class LockedStoreError(StoreError):
        pass

    assert refusal(LockedStoreError("locked")).code == "store_error"


def test_what_is_no_refusal_is_not_looked_up() -> None:
    with pytest.raises(TypeError, match="not a refusal"):
        refusal(KeyError("x"))

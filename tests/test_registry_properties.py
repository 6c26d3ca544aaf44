"""Properties of the pending registry under arbitrary sequences of its operations.

A state machine posts, claims, answers, fails and withdraws entries and opens
and closes listeners through the registry's synchronous API, and checks every
step against a plain model of who may claim what; async tests then check the
same promises with real producers blocked in `Registry.ask`.
"""

from __future__ import annotations

import enum

import attrs
import pytest
import trio
import trio.testing
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine
from hypothesis.stateful import initialize
from hypothesis.stateful import invariant
from hypothesis.stateful import precondition
from hypothesis.stateful import rule

from agentrt import AlreadyAnsweredError
from agentrt import Answer
from agentrt import ClosedListenerError
from agentrt import Entry
from agentrt import EntryGoneError
from agentrt import EntryState
from agentrt import Listener
from agentrt import ListenerGoneError
from agentrt import Registry
from agentrt import Request
from agentrt import RequestContext
from agentrt import bind_context

PREFIXES = ("", "cli-", "chat-", "tg-", "dc-")
SESSION_PREFIXES = ("cli-", "chat-", "tg-", "dc-", "other-")
WINDOWS = (None, "w1", "w2")


class Accept(enum.Enum):
    """An `accept` filter a claim may pass."""

    ANY = "any"
    URGENT = "urgent"


@attrs.define(eq=False)
class ModelListener:
    listener: Listener
    prefix: str
    window: str | None
    open: bool = True

    def accepts(self, ctx: RequestContext) -> bool:
        if not ctx.session_id.startswith(self.prefix):
            return False
        return self.window is None or ctx.window_hash == self.window

    def targeted(self, ctx: RequestContext, listeners: list[ModelListener]) -> bool:
        """Whether an entry is this listener's to claim: it accepts it, and no open
        listener that matches on windows accepts it unless this one does."""
        if not self.accepts(ctx):
            return False
        if self.window is not None:
            return True
        return not any(m.open and m.window is not None and m.accepts(ctx) for m in listeners)


@attrs.define(eq=False)
class ModelEntry:
    entry: Entry
    urgent: bool
    state: EntryState = EntryState.WAITING
    claimed_by: ModelListener | None = None


class RegistryMachine(RuleBasedStateMachine):
    """The registry against a model: a list of entries in age order and their states."""

    def __init__(self) -> None:
        super().__init__()
        self.registry = Registry()
        self.listeners: list[ModelListener] = []
        self.entries: list[ModelEntry] = []

    @initialize()
    def start_empty(self) -> None:
        stats = self.registry.statistics()
        assert (stats.waiting, stats.claimed, stats.listeners) == (0, 0, 0)

    # -- listeners ------------------------------------------------------------

    @rule(prefix=st.sampled_from(PREFIXES), window=st.sampled_from(WINDOWS))
    def open_listener(self, prefix: str, window: str | None) -> None:
        match = None if window is None else (lambda ctx, w=window: ctx.window_hash == w)
        listener = self.registry.listen(prefix, match, name=f"{prefix}{window}")
        self.listeners.append(ModelListener(listener, prefix, window))

    @precondition(lambda self: self.listeners)
    @rule(index=st.integers(min_value=0))
    def close_listener(self, index: int) -> None:
        model = self.listeners[index % len(self.listeners)]
        model.listener.close()
        if model.open:
            for item in self.entries:
                if item.claimed_by is model and item.state is EntryState.CLAIMED:
                    item.state = EntryState.FAILED
        model.open = False

    # -- producers ------------------------------------------------------------

    @rule(
        prefix=st.sampled_from(SESSION_PREFIXES),
        window=st.sampled_from(WINDOWS),
        urgent=st.booleans(),
    )
    def post(self, prefix: str, window: str | None, urgent: bool) -> None:
        n = len(self.entries)
        ctx = RequestContext(f"{prefix}{n}", window_hash=window)
        request = Request.question(f"{'urgent' if urgent else 'later'} {n}")
        self.entries.append(ModelEntry(self.registry.post(request, ctx), urgent))

    @precondition(lambda self: self.entries)
    @rule(index=st.integers(min_value=0))
    def withdraw(self, index: int) -> None:
        item = self.entries[index % len(self.entries)]
        self.registry.withdraw(item.entry)
        if item.state in (EntryState.WAITING, EntryState.CLAIMED):
            item.state = EntryState.WITHDRAWN

    # -- listeners' side ------------------------------------------------------

    @precondition(lambda self: self.listeners)
    @rule(index=st.integers(min_value=0), mode=st.sampled_from(Accept))
    def claim(self, index: int, mode: Accept) -> None:
        model = self.listeners[index % len(self.listeners)]
        accept = None if mode is Accept.ANY else (lambda e: e.request.prompt.startswith("urgent"))
        if not model.open:
            with pytest.raises(ClosedListenerError, match="open a new one"):
                model.listener.claim_nowait(accept)
            return
        expected = next(
            (
                item
                for item in self.entries
                if item.state is EntryState.WAITING
                and model.targeted(item.entry.context, self.listeners)
                and (mode is Accept.ANY or item.urgent)
            ),
            None,
        )
        got = model.listener.claim_nowait(accept)
        if expected is None:
            assert got is None
            return
        assert got is expected.entry, "a claim must take the oldest matching entry"
        assert got.state is EntryState.CLAIMED
        assert got.claimed_by is model.listener
        expected.state = EntryState.CLAIMED
        expected.claimed_by = model

    @precondition(lambda self: self.entries)
    @rule(index=st.integers(min_value=0), fail=st.booleans())
    def settle(self, index: int, fail: bool) -> None:
        item = self.entries[index % len(self.entries)]
        before = item.entry.state

        def act() -> None:
            if fail:
                item.entry.fail(RuntimeError("failed by the listener"))
            else:
                item.entry.answer(Answer("yes"))

        if item.state in (EntryState.ANSWERED, EntryState.FAILED):
            with pytest.raises(AlreadyAnsweredError, match=r"answered already|was withdrawn"):
                act()
            assert item.entry.state is before
        elif item.state is EntryState.WITHDRAWN:
            with pytest.raises(EntryGoneError, match="was withdrawn"):
                act()
            assert item.entry.state is before
        else:
            act()
            item.state = EntryState.FAILED if fail else EntryState.ANSWERED

    # -- what must always hold ----------------------------------------------------

    @invariant()
    def states_agree(self) -> None:
        for item in self.entries:
            assert item.entry.state is item.state
            assert item.entry.done is (item.state not in (EntryState.WAITING, EntryState.CLAIMED))

    @invariant()
    def statistics_agree(self) -> None:
        stats = self.registry.statistics()
        assert stats.waiting == sum(1 for i in self.entries if i.state is EntryState.WAITING)
        assert stats.claimed == sum(1 for i in self.entries if i.state is EntryState.CLAIMED)
        assert stats.listeners == sum(1 for m in self.listeners if m.open)

    @invariant()
    def each_listener_sees_exactly_its_entries(self) -> None:
        for model in self.listeners:
            stats = model.listener.statistics()
            if not model.open:
                assert (stats.candidates, stats.claimed) == (0, 0)
                continue
            assert stats.candidates == sum(
                1
                for i in self.entries
                if i.state is EntryState.WAITING and model.targeted(i.entry.context, self.listeners)
            )
            assert stats.claimed == sum(
                1 for i in self.entries if i.state is EntryState.CLAIMED and i.claimed_by is model
            )

    def teardown(self) -> None:
        # Every producer gives up: nothing may stay behind.
        for item in self.entries:
            self.registry.withdraw(item.entry)
        stats = self.registry.statistics()
        assert (stats.waiting, stats.claimed) == (0, 0)
        for model in self.listeners:
            if model.open:
                assert model.listener.statistics().candidates == 0
                assert model.listener.statistics().claimed == 0
            model.listener.close()
        assert self.registry.statistics().listeners == 0


RegistryMachine.TestCase.settings = settings(
    max_examples=200, stateful_step_count=40, deadline=None
)
TestRegistryStateMachine = RegistryMachine.TestCase


# -- with real producers --------------------------------------------------------


async def test_many_cancelled_producers_leave_the_registry_empty() -> None:
    registry = Registry()
    cli = registry.listen("cli-", lambda ctx: ctx.window_hash == "w1")
    chat = registry.listen("chat-")
    prefixes = ("cli-", "chat-", "tg-", "dc-")

    async def producer(n: int) -> None:
        ctx = RequestContext(f"{prefixes[n % 4]}{n}", window_hash="w1" if n % 3 else "w2")
        await registry.ask(Request.question(f"question {n}"), context=ctx)
        raise AssertionError("nobody answers, so ask must not return")

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            for n in range(400):
                nursery.start_soon(producer, n)
            await trio.testing.wait_all_tasks_blocked()
            assert registry.statistics().waiting == 400
            held = [cli.claim_nowait() for _ in range(20)] + [
                chat.claim_nowait() for _ in range(20)
            ]
            assert registry.statistics().claimed == 40
            nursery.cancel_scope.cancel()
    stats = registry.statistics()
    assert (stats.waiting, stats.claimed) == (0, 0)
    assert cli.statistics().candidates == chat.statistics().candidates == 0
    for entry in held:
        assert entry is not None
        with pytest.raises(EntryGoneError, match="its run was stopped"):
            entry.answer("too late")


async def test_claim_takes_waiting_entries_oldest_first() -> None:
    registry = Registry()
    got: list[str] = []
    with registry.listen("chat-") as listener:

        async def answer_all() -> None:
            for _ in range(3):
                entry = await listener.claim()
                got.append(entry.request.prompt)
                entry.answer(entry.request.prompt.upper())

        async def ask(prompt: str) -> None:
            with bind_context(RequestContext("chat-1")):
                answer = await registry.ask(Request.question(prompt))
            assert answer.value == prompt.upper()

        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                for prompt in ("first", "second", "third"):
                    nursery.start_soon(ask, prompt)
                    await trio.testing.wait_all_tasks_blocked()
                assert listener.statistics().candidates == 3
                nursery.start_soon(answer_all)
    assert got == ["first", "second", "third"]
    assert registry.statistics().waiting == registry.statistics().claimed == 0


async def test_an_answer_reaches_the_producer_once_and_a_second_is_refused() -> None:
    registry = Registry()
    with registry.listen("") as listener:
        async with trio.open_nursery() as nursery:
            answers: list[Answer] = []

            async def ask() -> None:
                ctx = RequestContext("tg-1")
                answers.append(await registry.ask(Request.question("ok?"), context=ctx))

            nursery.start_soon(ask)
            with trio.fail_after(10):
                entry = await listener.claim()
                entry.answer(Answer("yes"))
                with pytest.raises(AlreadyAnsweredError, match="answered already at"):
                    entry.answer(Answer("no"))
                with pytest.raises(AlreadyAnsweredError, match="answered already at"):
                    entry.fail(RuntimeError("late"))
    assert answers == [Answer("yes")]


async def test_closing_a_listener_fails_the_questions_it_claimed() -> None:
    registry = Registry()
    listener = registry.listen("dc-")
    errors: list[BaseException] = []

    async def ask(n: int) -> None:
        try:
            await registry.ask(Request.question(f"q{n}"), context=RequestContext(f"dc-{n}"))
        except ListenerGoneError as exc:
            errors.append(exc)

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            for n in range(3):
                nursery.start_soon(ask, n)
            await trio.testing.wait_all_tasks_blocked()
            claimed = [listener.claim_nowait(), listener.claim_nowait()]
            listener.close()
            # The unclaimed third question still waits for some other listener.
            await trio.testing.wait_all_tasks_blocked()
            assert len(errors) == 2
            assert registry.statistics().waiting == 1
            with registry.listen("dc-") as second:
                last = second.claim_nowait()
                assert last is not None
                last.answer("fine")
    assert all("before answering" in str(e) for e in errors)
    for entry in claimed:
        assert entry is not None
        assert entry.state is EntryState.FAILED
    assert registry.statistics().claimed == 0


def test_a_question_goes_to_its_window_ahead_of_a_catch_all_listener() -> None:
    registry = Registry()
    web = registry.listen("chat-", name="web")
    window = registry.listen("", lambda ctx: ctx.window_hash == "w1", name="command")
    entry = registry.post(Request.question("Name?"), RequestContext("chat-1", window_hash="w1"))
    assert web.claim_nowait() is None
    assert window.claim_nowait() is entry
    # A question of a run no window started still goes to the catch-all listener.
    other = registry.post(Request.question("Age?"), RequestContext("chat-2"))
    assert window.claim_nowait() is None
    assert web.claim_nowait() is other


def test_when_its_window_goes_the_catch_all_listener_may_take_the_question() -> None:
    registry = Registry()
    web = registry.listen("chat-", name="web")
    window = registry.listen("", lambda ctx: ctx.window_hash == "w1", name="command")
    older = registry.post(Request.question("first"), RequestContext("chat-0"))
    entry = registry.post(Request.question("Name?"), RequestContext("chat-1", window_hash="w1"))
    newer = registry.post(Request.question("last"), RequestContext("chat-2"))
    window.close()
    assert [web.claim_nowait(), web.claim_nowait(), web.claim_nowait()] == [older, entry, newer]

"""The pending registry: producers ask, listeners claim by prefix, nobody blocks anybody.

This is the spec's `pending.go`. A producer (a tool-call confirmation, the
`ask_user` tool, the `store_secret` tool) calls `Registry.ask` and blocks on a
one-slot reply. Each front-end opens a `Listener` for its prefix (``"chat-"``,
``"tg-"``, ``"dc-"``; ``""`` matches everything), optionally narrowed by a match
function over the request's context (each daemon connection accepts only the
windows it started), and claims the oldest matching entry. A request that a
listener accepts through its match function goes to such listeners only: a
run's questions return to the window that started it even when a catch-all
listener of the same prefix is open.

There is no global "someone is answering" flag: every listener has its own
queue of candidate entries, filled when an entry is asked (one match test per
listener, not per claim), so a claim costs the same with ten thousand entries
waiting as with one, and listeners for different front-ends never wait on each
other.
"""

from __future__ import annotations

import enum
import itertools
import logging
import time
from collections import OrderedDict
from collections.abc import Callable

import attrs
import trio

from ..vocab.questions import QuestionState
from ..vocab.questions import QuestionTrace
from ..vocab.questions import withdrawn_because
from ..vocab.reprs import mutable
from ..vocab.reprs import record
from ..vocab.request import Request
from ..vocab.terms import ALLOW_ONCE as ALLOW_ONCE
from ..vocab.terms import ALLOW_SESSION as ALLOW_SESSION
from ..vocab.terms import CONFIRM_CHOICES as CONFIRM_CHOICES
from ..vocab.terms import DENY as DENY
from ..vocab.terms import RequestKind as RequestKind
from .cause import cause_of
from .context import RequestContext
from .context import current_context
from .errors import BadAnswerError

log = logging.getLogger("agentrt.pending")

Match = Callable[[RequestContext], bool]


@record
class Answer:
    """A human's reply. `secret` holds masked input and never appears in a repr."""

    value: str
    secret: str | None = attrs.field(default=None, repr=False)


class RegistryError(Exception):
    """Base class of the registry's errors."""


class ClosedListenerError(RegistryError):
    """Raised when a closed listener is used."""


class ListenerGoneError(RegistryError):
    """The listener that claimed a question closed before answering it.

    A producer sees this from `Registry.ask`; it is not a user-cancel, so the
    run's pending task is kept.
    """


class NoAnswerComingError(RegistryError):
    """Nobody is left who could answer the question (the `agentrt` command's stdin closed).

    The producer goes on as if nobody had been connected when it asked: the
    run saves the question with its task and stops there (see
    `AgentRun.ask_inline`); the round's other calls finish first.
    """


class EntryGoneError(RegistryError):
    """An answer arrived for a question that no longer waits (its run was stopped).

    The message says why (`QuestionTrace.refusal`): ``question q-... was
    withdrawn: its run was paused``.
    """


class QuestionExpiredError(EntryGoneError):
    """The question's timeout fired before anyone answered it.

    `Registry.ask` raises it to the producer (which does what the timeout's
    action says); a late answer gets it too, saying ``question q-... expired
    after 30m``.
    """


class AlreadyAnsweredError(RegistryError):
    """A question was answered or failed twice; the message says when it was answered."""


class NoRequestContextError(RegistryError):
    """`ask` was called outside a run and without an explicit context."""


class EntryState(enum.Enum):
    """Where an entry is in its life."""

    WAITING = "waiting"
    CLAIMED = "claimed"
    ANSWERED = "answered"
    FAILED = "failed"
    WITHDRAWN = "withdrawn"
    #: Its timeout fired before anyone answered (see `Registry.ask`).
    EXPIRED = "expired"

    @property
    def question_state(self) -> QuestionState:
        """The state of the question as every front-end tells it (`QuestionState`)."""
        return _QUESTION_STATES[self]


_QUESTION_STATES: dict[EntryState, QuestionState] = {
    EntryState.WAITING: QuestionState.WAITING,
    EntryState.CLAIMED: QuestionState.WAITING,
    EntryState.ANSWERED: QuestionState.ANSWERED,
    # A failed question is one nobody will answer here: its asker goes on without it.
    EntryState.FAILED: QuestionState.WITHDRAWN,
    EntryState.WITHDRAWN: QuestionState.WITHDRAWN,
    EntryState.EXPIRED: QuestionState.EXPIRED,
}


@mutable(eq=False)
class Entry:
    """One question in the registry: a request, its context, and a one-slot reply."""

    id: str
    request: Request
    context: RequestContext
    _registry: Registry = attrs.field(repr=False)
    _seq: int = attrs.field(repr=False)
    state: EntryState = attrs.field(default=EntryState.WAITING)
    claimed_by: Listener | None = attrs.field(default=None, repr=False)
    _answer: Answer | None = attrs.field(default=None, init=False, repr=False)
    _error: BaseException | None = attrs.field(default=None, init=False, repr=False)
    _done: trio.Event = attrs.field(factory=trio.Event, init=False, repr=False)
    _offered: list[Listener] = attrs.field(factory=list, init=False, repr=False)
    _on_resumed: Callable[[], object] | None = attrs.field(default=None, init=False, repr=False)
    _done_callbacks: list[Callable[[Entry], object]] = attrs.field(
        factory=list, init=False, repr=False
    )
    #: When it was settled, and why it was withdrawn or how long it waited to expire.
    _settled_at: float | None = attrs.field(default=None, init=False, repr=False)
    _reason: str | None = attrs.field(default=None, init=False, repr=False)
    _waited: float | None = attrs.field(default=None, init=False, repr=False)

    @property
    def done(self) -> bool:
        """True once the entry was answered, failed, withdrawn or expired."""
        return self._done.is_set()

    @property
    def task(self) -> str | None:
        """The task hash of the run that asked (its owner run)."""
        return self.context.task_hash

    @property
    def origin(self) -> str:
        """The front-end the question belongs to: its session's origin (``chat-``...)."""
        return self.context.origin

    @property
    def trace(self) -> QuestionTrace:
        """The question's state as a late answer is told it (`QuestionTrace`)."""
        state = self.state.question_state
        at = self._settled_at if self._settled_at is not None else time.time()
        return QuestionTrace(self.id, state, at, reason=self._reason, waited=self._waited)

    def check(self, answer: Answer) -> Answer:
        """`answer` if it fits this question; else `BadAnswerError` saying what fits.

        The one rule set of every front-end (the daemon, HTTP, the bots): a value
        among the request's `choices` when there are any; a secret or a password
        in `Answer.secret` unless the value declines (``deny``); and no masked
        value carried along where none was asked for.
        """
        request, name = self.request, f"question {self.id!r}"
        if request.choices and answer.value not in request.choices:
            raise BadAnswerError(f"{name} takes one of: {', '.join(request.choices)}")
        if request.masked and answer.value != DENY and answer.secret is None:
            if request.kind is RequestKind.PASSWORD:
                raise BadAnswerError(f"{name} needs the system password in 'secret'")
            raise BadAnswerError(
                f"{name} asks for a secret: send it in 'secret', or value {DENY!r} to decline"
            )
        if not request.masked and answer.secret is not None:
            return Answer(answer.value)
        return answer

    def answer(
        self, answer: Answer | str, *, on_resumed: Callable[[], object] | None = None
    ) -> None:
        """Deliver the reply to the waiting producer.

        `on_resumed`, when given, is called once the producer has resumed with
        the answer (its `Registry.ask` returns it), before it does anything
        else: a front-end acknowledges the answer then, so that its sender
        knows the run goes on with it. Raises `EntryGoneError` if the producer
        was cancelled meanwhile and `AlreadyAnsweredError` if it was already
        answered.
        """
        if isinstance(answer, str):
            answer = Answer(answer)
        self._check_open()
        self._on_resumed = on_resumed
        self._answer = answer
        self._finish(EntryState.ANSWERED)

    def fail(self, error: BaseException) -> None:
        """Make the producer's `ask` raise `error` instead of returning an answer."""
        self._check_open()
        self._error = error
        self._reason = str(error) or type(error).__name__
        self._finish(EntryState.FAILED)

    def add_done_callback(self, callback: Callable[[Entry], object]) -> None:
        """Call `callback` with this entry once it is answered, failed or withdrawn.

        It is called in the turn that settles the entry (at once if it is
        settled already), after the producer was woken: a front-end learns
        that a question it forwarded is over without a task waiting for it.
        It must be quick and must not wait; an exception it raises is logged.
        """
        if self.done:
            self._call(callback)
        else:
            self._done_callbacks.append(callback)

    def _call(self, callback: Callable[[Entry], object]) -> None:
        try:
            callback(self)
        except Exception:
            log.exception("a callback of question %s failed", self.id)

    def _set_done(self) -> None:
        self._done.set()
        callbacks, self._done_callbacks = self._done_callbacks, []
        for callback in callbacks:
            self._call(callback)

    async def wait_done(self) -> EntryState:
        """Wait until the entry is answered, failed or withdrawn; return that state."""
        await self._done.wait()
        return self.state

    def _check_open(self) -> None:
        if self.state is EntryState.EXPIRED:
            raise QuestionExpiredError(self.trace.refusal())
        if self.state is EntryState.WITHDRAWN:
            raise EntryGoneError(self.trace.refusal())
        if self.state in (EntryState.ANSWERED, EntryState.FAILED):
            raise AlreadyAnsweredError(self.trace.refusal())

    def _finish(self, state: EntryState) -> None:
        self._registry._settle(self, state)
        self._set_done()


@record
class SettledQuestion:
    """A question the registry no longer holds: how it ended, and whose it was.

    A late answer naming it is told why (`QuestionTrace.refusal`) when the one
    answering may see its session (`context`); else it is unknown to them.
    """

    trace: QuestionTrace
    context: RequestContext


#: How many settled questions a registry remembers, to tell a late answer why.
SETTLED_KEPT = 1024


@record
class RegistryStatistics:
    """A snapshot of the registry's queues."""

    waiting: int
    claimed: int
    listeners: int


@record
class ListenerStatistics:
    """A snapshot of one listener's queue."""

    candidates: int
    claimed: int
    tasks_waiting: int


@mutable(eq=False)
class Listener:
    """A front-end's claim on the questions whose session id starts with `prefix`.

    Use it as a context manager (or call `close`): leaving it unregisters it and
    fails, with `ListenerGoneError`, every question it claimed but did not answer.
    """

    _registry: Registry = attrs.field(repr=False)
    prefix: str
    match: Match | None = attrs.field(default=None, repr=False)
    name: str = ""
    #: The one window whose requests this listener takes (an indexed match), if any.
    window: str | None = None
    closed: bool = attrs.field(default=False, init=False)
    _candidates: OrderedDict[int, Entry] = attrs.field(factory=OrderedDict, init=False, repr=False)
    _claimed: dict[int, Entry] = attrs.field(factory=dict, init=False, repr=False)
    _lot: trio.lowlevel.ParkingLot = attrs.field(
        factory=trio.lowlevel.ParkingLot, init=False, repr=False
    )

    @property
    def registry(self) -> Registry:
        """The registry this listener claims from."""
        return self._registry

    @property
    def narrow(self) -> bool:
        """Whether it takes only some requests of its prefix (a window, or a match function)."""
        return self.window is not None or self.match is not None

    def accepts(self, ctx: RequestContext) -> bool:
        """Whether a request with this context is this listener's to claim."""
        if not ctx.session_id.startswith(self.prefix):
            return False
        if self.window is not None and ctx.window_hash != self.window:
            return False
        return self.match is None or self.match(ctx)

    def claim_nowait(self, accept: Callable[[Entry], bool] | None = None) -> Entry | None:
        """Claim the oldest waiting entry for this listener (the spec's `PickNextMatch`).

        `accept` narrows the choice further; entries it rejects stay waiting.
        Returns None when there is nothing to claim.
        """
        self._check_open()
        for seq, entry in self._candidates.items():
            if accept is None or accept(entry):
                del self._candidates[seq]
                self._registry._claim(entry, self)
                return entry
        return None

    async def claim(self, accept: Callable[[Entry], bool] | None = None) -> Entry:
        """Wait for, then claim, the oldest matching entry (the awaitable `PickNextMatch`)."""
        await trio.lowlevel.checkpoint_if_cancelled()
        while True:
            entry = self.claim_nowait(accept)
            if entry is not None:
                await trio.lowlevel.cancel_shielded_checkpoint()
                return entry
            await self._lot.park()
            self._check_open()

    def statistics(self) -> ListenerStatistics:
        """Candidates waiting for this listener, entries it holds, tasks parked in `claim`."""
        return ListenerStatistics(
            candidates=len(self._candidates),
            claimed=len(self._claimed),
            tasks_waiting=self._lot.statistics().tasks_waiting,
        )

    def close(self, reason: str = "the listener closed") -> None:
        """Unregister; fail each claimed but unanswered question with `ListenerGoneError`."""
        if self.closed:
            return
        self.closed = True
        self._registry._remove_listener(self)
        for entry in list(self._claimed.values()):
            if not entry.done:
                entry.fail(ListenerGoneError(f"{reason} before answering: {entry.request.prompt}"))
        self._claimed.clear()
        self._candidates.clear()
        self._lot.unpark_all()

    def __enter__(self) -> Listener:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self.closed:
            raise ClosedListenerError(
                f"listener {self.name or self.prefix!r} is closed; open a new one with "
                "Registry.listen()"
            )


@mutable(eq=False)
class Registry:
    """The prefix-routed confirm/ask registry shared by all runs and front-ends of a process.

    A registry is an ordinary object: two can live in one process, and there is
    no module-level state.
    """

    _waiting: OrderedDict[int, Entry] = attrs.field(factory=OrderedDict, init=False)
    #: The same entries, by the window of the run that asked (indexes `_waiting`).
    _waiting_by_window: dict[str, OrderedDict[int, Entry]] = attrs.field(factory=dict, init=False)
    _claimed_count: int = attrs.field(default=0, init=False)
    #: Every listener, in the order they were opened.
    _listeners: dict[Listener, None] = attrs.field(factory=dict, init=False)
    #: Listeners bound to one window, by window; the others (a few front-ends) in `_general`.
    _by_window: dict[str, list[Listener]] = attrs.field(factory=dict, init=False)
    _general: list[Listener] = attrs.field(factory=list, init=False)
    _seq: itertools.count[int] = attrs.field(factory=itertools.count, init=False)
    #: Starts every entry id this registry makes (a fleet member's own, so ids are unique
    #: across the fleet; see `agentrt.fleet.member`).
    id_prefix: str = attrs.field(default="", kw_only=True)
    #: Told of every entry posted (the fleet shares those no window waits for).
    _observers: list[Callable[[Entry], None]] = attrs.field(factory=list, init=False)
    #: Whether a listener elsewhere (another daemon of the fleet) takes an origin.
    elsewhere: Callable[[str], bool] | None = attrs.field(default=None, kw_only=True)
    #: The last `SETTLED_KEPT` questions settled, by id (see `settled`).
    _settled: OrderedDict[str, SettledQuestion] = attrs.field(factory=OrderedDict, init=False)

    def listen(
        self,
        prefix: str = "",
        match: Match | None = None,
        *,
        name: str = "",
        window: str | None = None,
    ) -> Listener:
        """Register a listener (the spec's `RegisterListener` / `RegisterListenerMatch`).

        `prefix` selects session ids (``""`` matches every one); `match`, when
        given, must also accept the request's context. `window` narrows it to the
        requests of runs started for that window, like a match function but
        indexed: with a thousand windows connected, posting a question or asking
        `has_listener` looks at the window's own listeners and the few others,
        never at all of them. Entries already waiting are offered to the new
        listener at once.
        """
        listener = Listener(self, prefix, match, name, window)
        self._listeners[listener] = None
        if window is None:
            self._general.append(listener)
        else:
            self._by_window.setdefault(window, []).append(listener)
        self._offer_existing(listener)
        return listener

    def has_listener(self, origin: str, ctx: RequestContext | None = None) -> bool:
        """Whether some listener would take a request of this origin (the spec's `HasListener`).

        With `ctx`, a listener that has a match function counts only when it
        accepts `ctx`, so a run whose window is disconnected finds no listener.
        """
        if ctx is not None:
            if any(listener.accepts(ctx) for listener in self._candidates_for(ctx)):
                return True
        elif any(
            not listener.narrow and origin.startswith(listener.prefix) for listener in self._general
        ):
            return True
        # A request no window waits for may be answered through another daemon of the fleet.
        window = ctx.window_hash if ctx is not None else None
        return window is None and self.elsewhere is not None and self.elsewhere(origin)

    async def ask(
        self,
        request: Request,
        *,
        context: RequestContext | None = None,
        entry_id: str | None = None,
        expires_after: float | None = None,
    ) -> Answer:
        """Post `request` and wait for the answer (the spec's `Ask`).

        The request is routed by `context`, by default the current task's
        request context. If the caller is cancelled, the entry is withdrawn
        before `Cancelled` propagates, so no human is asked a stale question;
        a late answer is told why (the cause the cancel carried: ``its run was
        paused``). Raises `ListenerGoneError` (or whatever a listener failed
        it with) when no answer will come. With `expires_after`, a question
        still unanswered after that many seconds expires: it is settled as
        `EntryState.EXPIRED` and `QuestionExpiredError` is raised (not a
        cancel: the question itself ran out of time, not its run).
        """
        ctx = context if context is not None else current_context()
        if ctx is None:
            raise NoRequestContextError(
                "ask() needs a request context: call it inside a run, or pass context=..."
            )
        entry = self.post(request, ctx, entry_id=entry_id)
        try:
            if expires_after is None:
                await entry._done.wait()
            else:
                with trio.move_on_after(expires_after):
                    await entry._done.wait()
        except BaseException as exc:
            self._withdraw(entry, withdrawn_because(cause_of(exc)))
            raise
        if not entry.done:
            assert expires_after is not None
            self._expire(entry, expires_after)
            raise QuestionExpiredError(entry.trace.refusal())
        if entry._error is not None:
            raise entry._error
        assert entry._answer is not None
        if entry._on_resumed is not None:
            entry._on_resumed()
        return entry._answer

    def post(self, request: Request, ctx: RequestContext, *, entry_id: str | None = None) -> Entry:
        """Add an entry without waiting for it (for callers that wait themselves).

        The caller owns the entry: it must `withdraw` it if it stops waiting.
        `entry_id` gives the entry an id of the caller's (a question another
        daemon of the fleet asked keeps its id here).
        """
        seq = next(self._seq)
        entry = Entry(entry_id or f"{self.id_prefix}q{seq}", request, ctx, self, seq)
        self._waiting[seq] = entry
        if ctx.window_hash is not None:
            self._waiting_by_window.setdefault(ctx.window_hash, OrderedDict())[seq] = entry
        for listener in self._targets(ctx):
            self._add_candidate(listener, entry)
            listener._lot.unpark()
        for observer in self._observers:
            observer(entry)
        return entry

    def observe(self, observer: Callable[[Entry], None]) -> None:
        """Call `observer` with every entry posted from now on, right after it is posted."""
        self._observers.append(observer)

    def find(self, entry_id: str) -> Entry | None:
        """The open entry (waiting or claimed) with this id, or None."""
        return next((e for e in self._all_open() if e.id == entry_id and not e.done), None)

    def remember(self, trace: QuestionTrace, context: RequestContext) -> None:
        """Remember how a question of `context` ended elsewhere (a saved one answered on
        resume), as if settled here: a late live answer to it is told so (`settled`)."""
        self._settled[trace.id] = SettledQuestion(trace, context)
        self._settled.move_to_end(trace.id)
        while len(self._settled) > SETTLED_KEPT:
            self._settled.popitem(last=False)

    def settled(self, entry_id: str) -> SettledQuestion | None:
        """How the question `entry_id` ended, if it was settled here lately (else None).

        The registry remembers its last `SETTLED_KEPT` settled questions, so a
        late answer can be told why it is refused.
        """
        return self._settled.get(entry_id)

    def general_prefixes(self) -> list[str]:
        """The prefixes of the listeners bound to no window or match: the front-ends'."""
        return sorted({lsn.prefix for lsn in self._general if not lsn.narrow})

    def withdraw(
        self, entry: Entry, reason: str = "the call that asked no longer needs it"
    ) -> None:
        """Remove an entry whose producer stopped waiting; a listener's later answer fails.

        `reason` is what that late answer is told: ``question q-... was withdrawn: REASON``.
        """
        self._withdraw(entry, reason)

    def waiting_for(self, session_id: str) -> list[Entry]:
        """The unanswered entries (waiting or claimed) of one session, oldest first."""
        return [e for e in self._all_open() if e.context.session_id == session_id and not e.done]

    def statistics(self) -> RegistryStatistics:
        """Entries waiting to be claimed, entries claimed and unanswered, listeners."""
        return RegistryStatistics(
            waiting=len(self._waiting),
            claimed=self._claimed_count,
            listeners=len(self._listeners),
        )

    # -- internals -------------------------------------------------------

    def _all_open(self) -> list[Entry]:
        claimed = [e for listener in self._listeners for e in listener._claimed.values()]
        return sorted([*self._waiting.values(), *claimed], key=lambda e: e._seq)

    def _candidates_for(self, ctx: RequestContext) -> list[Listener]:
        """The listeners that could accept `ctx`: its window's, and those bound to no window."""
        if ctx.window_hash is None:
            return self._general
        return [*self._by_window.get(ctx.window_hash, ()), *self._general]

    def _drop_waiting(self, entry: Entry) -> None:
        del self._waiting[entry._seq]
        window = entry.context.window_hash
        if window is not None:
            of_window = self._waiting_by_window[window]
            del of_window[entry._seq]
            if not of_window:
                del self._waiting_by_window[window]

    def _targets(self, ctx: RequestContext) -> list[Listener]:
        """The listeners a request is offered to.

        Those that accept it; but when some of them accept it through a match
        function (the connection of the window that started the run), only
        those: a run's questions go back to its window even when a catch-all
        listener of the same prefix is open.
        """
        accepting = [listener for listener in self._candidates_for(ctx) if listener.accepts(ctx)]
        return [lsn for lsn in accepting if lsn.narrow] or accepting

    def _add_candidate(self, listener: Listener, entry: Entry) -> None:
        candidates = listener._candidates
        late = bool(candidates) and next(reversed(candidates)) > entry._seq
        candidates[entry._seq] = entry
        if late:  # keep them oldest first: claims take the oldest
            listener._candidates = OrderedDict(sorted(candidates.items()))
        entry._offered.append(listener)

    def _offer_existing(self, listener: Listener) -> None:
        waiting = (
            self._waiting
            if listener.window is None
            else self._waiting_by_window.get(listener.window, OrderedDict())
        )
        for entry in list(waiting.values()):
            if not listener.accepts(entry.context):
                continue
            narrowed = any(o.narrow for o in entry._offered)
            if not listener.narrow and narrowed:
                continue  # it waits for the window that started its run
            if listener.narrow and not narrowed:
                self._unoffer(entry)  # from now on it is this window's alone
            self._add_candidate(listener, entry)
        if listener._candidates:
            listener._lot.unpark_all()

    def _unoffer(self, entry: Entry) -> None:
        for listener in entry._offered:
            listener._candidates.pop(entry._seq, None)
        entry._offered.clear()

    def _claim(self, entry: Entry, listener: Listener) -> None:
        self._drop_waiting(entry)
        self._unoffer(entry)
        entry.state = EntryState.CLAIMED
        entry.claimed_by = listener
        listener._claimed[entry._seq] = entry
        self._claimed_count += 1

    def _settle(self, entry: Entry, state: EntryState) -> None:
        if entry.state is EntryState.WAITING:
            self._drop_waiting(entry)
            self._unoffer(entry)
        elif entry.state is EntryState.CLAIMED:
            assert entry.claimed_by is not None
            entry.claimed_by._claimed.pop(entry._seq, None)
            self._claimed_count -= 1
        entry.state = state
        entry._settled_at = time.time()
        self.remember(entry.trace, entry.context)

    def _withdraw(self, entry: Entry, reason: str) -> None:
        if entry.done:
            return
        entry._reason = reason
        self._settle(entry, EntryState.WITHDRAWN)
        entry._set_done()

    def _expire(self, entry: Entry, waited: float) -> None:
        entry._waited = waited
        self._settle(entry, EntryState.EXPIRED)
        entry._set_done()

    def _remove_listener(self, listener: Listener) -> None:
        del self._listeners[listener]
        if listener.window is None:
            self._general.remove(listener)
        else:
            same = self._by_window[listener.window]
            same.remove(listener)
            if not same:
                del self._by_window[listener.window]
        for entry in listener._candidates.values():
            entry._offered.remove(listener)
            if listener.narrow and not entry._offered:
                # Its window is gone: the catch-all listeners of its prefix may take it.
                for other in self._targets(entry.context):
                    self._add_candidate(other, entry)
                    other._lot.unpark()

"""The desk: how a front-end takes the registry's questions, and how it refuses a request.

Every front-end (a daemon connection, the HTTP server, a chat bot) does the
same with the questions of its origin: it listens on the registry with its
prefix (and its window), claims each question as it is asked, forwards it to
its people, watches it until it is answered, withdrawn or failed, and answers
it with what they reply once the reply fits. A `Desk` does all of that; the
front-end gives it what is its own: how a question is shown (`forward`, and,
when showing may wait on a slow service, `deliver`) and what is said once it
is over (`closed`).

Everything a desk starts lives in the nursery of `Desk.serve`, which the
front-end runs in its own: one task claims, one task per open question
watches it. `serve` returns once the listener is closed and every question it
claimed is over (closing fails those not answered).

`refusal` is the one table from what the runtime refuses a request for (an
executor's error, a task store that failed, a question that no longer waits)
to what each front-end answers: the HTTP status and code, the daemon's
``error`` frame code, and the message.
"""

from __future__ import annotations

from collections.abc import Awaitable
from collections.abc import Callable
from typing import Final
from typing import Generic
from typing import TypeVar

import attrs
import trio

from ..store import BadCursorError
from ..store import StoreError
from ..vocab.reprs import mutable
from ..vocab.reprs import record
from .context import RequestContext
from .errors import ExecutorError
from .errors import LateAnswerError
from .pending import AlreadyAnsweredError
from .pending import Answer
from .pending import ClosedListenerError
from .pending import Entry
from .pending import EntryGoneError
from .pending import EntryState
from .pending import Listener
from .pending import Registry

T = TypeVar("T")


@mutable(eq=False)
class Desk(Generic[T]):
    """One front-end's claim on its questions; make it with `Desk.open`.

    `forward` shows a question just claimed, in the claiming turn and in the
    order the questions were asked; it must not wait. What it returns is
    kept with the question and handed to `deliver` and `closed`. `deliver`,
    when given, is the part of showing that may wait (a chat service's send,
    retried): it runs in the question's own task and returns once the question
    is shown or over. `closed` is told the question's end state once it is
    over, in the question's task, or earlier through `close_done`.
    """

    listener: Listener
    forward: Callable[[Entry], T] = attrs.field(repr=False)
    closed: Callable[[Entry, EntryState, T], Awaitable[None]] = attrs.field(repr=False)
    deliver: Callable[[Entry, T], Awaitable[None]] | None = attrs.field(default=None, repr=False)
    #: The questions forwarded and not yet closed, by id, with what `forward` returned.
    _open: dict[str, tuple[Entry, T]] = attrs.field(factory=dict, init=False, repr=False)

    @classmethod
    def open(
        cls,
        registry: Registry,
        prefix: str,
        *,
        name: str,
        window: str | None = None,
        forward: Callable[[Entry], T],
        closed: Callable[[Entry, EntryState, T], Awaitable[None]],
        deliver: Callable[[Entry, T], Awaitable[None]] | None = None,
    ) -> Desk[T]:
        """Listen on `registry` for the questions of `prefix` (and of `window`, if given)."""
        listener = registry.listen(prefix, name=name, window=window)
        return cls(listener, forward, closed, deliver)

    def close(self, reason: str = "the listener closed") -> None:
        """Stop claiming; every claimed question not answered fails (`Listener.close`)."""
        self.listener.close(reason)

    async def serve(self) -> None:
        """Claim, forward and watch every question until the desk is closed and they are over."""
        async with trio.open_nursery() as nursery:
            while True:
                try:
                    entry = await self.listener.claim()
                except ClosedListenerError:
                    return
                shown = self.forward(entry)
                self._open[entry.id] = (entry, shown)
                nursery.start_soon(self._watch, entry, shown)

    async def _watch(self, entry: Entry, shown: T) -> None:
        if self.deliver is not None:
            await self.deliver(entry, shown)
        state = await entry.wait_done()
        if self._open.pop(entry.id, None) is not None:
            await self.closed(entry, state, shown)

    async def close_done(self) -> None:
        """Tell `closed` now of every forwarded question that is over.

        Its watching task wakes a turn or more after the question settles; a
        front-end that must say a question is over before what follows (a
        run's next event) calls this first.
        """
        over = [(entry, shown) for entry, shown in self._open.values() if entry.done]
        for entry, shown in over:
            if self._open.pop(entry.id, None) is not None:
                await self.closed(entry, entry.state, shown)

    def find(self, entry_id: str) -> Entry | None:
        """The forwarded question with this id, until `closed` was told it is over."""
        found = self._open.get(entry_id)
        return None if found is None else found[0]

    def entries(self) -> list[Entry]:
        """The questions forwarded and not yet closed, in the order they were claimed."""
        return [entry for entry, _ in self._open.values()]

    def late(
        self, entry_id: str, may_see: Callable[[RequestContext], bool]
    ) -> LateAnswerError | None:
        """Why an answer naming `entry_id`, which this desk no longer holds, is refused.

        A question settled lately (`Registry.settled`) whose context `may_see`
        accepts (the access policy of the one answering) is refused with why it
        no longer waits (``question q-... was answered already at 12:03``);
        None for any other id, so that an unknown question and one of another
        window or chat get the same answer.
        """
        settled = self.listener.registry.settled(entry_id)
        if settled is None or not may_see(settled.context):
            return None
        return LateAnswerError(settled.trace.refusal())

    @staticmethod
    def answer(
        entry: Entry, answer: Answer, *, on_resumed: Callable[[], object] | None = None
    ) -> None:
        """Answer `entry` with `answer` if it fits (`Request.check`).

        Raises `BadAnswerError` for an answer that does not fit, `EntryGoneError`
        when the run that asked stopped meanwhile, `AlreadyAnsweredError` when it
        was answered already; `on_resumed` is as in `Entry.answer`.
        """
        entry.answer(entry.check(answer), on_resumed=on_resumed)


# --------------------------------------------------------------------------- refusals


@record
class Refusal:
    """How every front-end refuses a request: its HTTP status and code, its frame code, why."""

    #: The ``code`` of an HTTP API error.
    code: str
    http_status: int
    #: The ``code`` of the daemon's ``error`` frame (a value of `agentrt.frames.ErrorCode`).
    frame_code: str
    message: str


#: What a front-end refuses a request for, with the rest of its refusal. An executor's
#: error carries its own codes (`agentrt.core.errors`). A question answered twice, withdrawn
#: or expired is refused as every late answer is (`LateAnswerError`: 409 ``late_answer``),
#: the message saying why.
_TABLE: Final[dict[type[Exception], tuple[str, int, str, Callable[[Exception], str]]]] = {
    BadCursorError: ("bad_query", 400, "invalid", str),
    StoreError: ("store_error", 500, "failed", lambda exc: f"the task store failed: {exc}"),
    AlreadyAnsweredError: (LateAnswerError.code, 409, LateAnswerError.frame_code, str),
    EntryGoneError: (LateAnswerError.code, 409, LateAnswerError.frame_code, str),
}

#: Every error `refusal` answers for: catch these, and refuse with `refusal`.
REFUSED: Final[tuple[type[Exception], ...]] = (ExecutorError, *_TABLE)


def refusal(exc: Exception) -> Refusal:
    """How to refuse the request that failed with `exc`, one of `REFUSED`."""
    if isinstance(exc, ExecutorError):
        return Refusal(exc.code, exc.http_status, exc.frame_code, str(exc))
    for kind in type(exc).__mro__:
        if kind in _TABLE:
            code, status, frame_code, message = _TABLE[kind]
            return Refusal(code, status, frame_code, message(exc))
    raise TypeError(f"{type(exc).__name__} is not a refusal; see REFUSED")

"""Cancellation that carries *why*.

A Trio cancel scope says only that work was cancelled. The runtime needs to know
why, because the reason decides what is kept: only a user-cancel throws the
pending task away. `CauseScope` wraps a `trio.CancelScope`, records the first
cause it is cancelled with, and passes the cause on as Trio's cancel reason so
that code deep inside (which only sees `trio.Cancelled`) can read it back with
`cause_of`.
"""

from __future__ import annotations

from types import TracebackType

import attrs
import trio

from ..vocab.reprs import mutable
from ..vocab.terms import CAUSE_REASON_PREFIX as _REASON_PREFIX
from ..vocab.terms import Cause as Cause


def cause_of(exc: BaseException) -> Cause | None:
    """The cause carried by a `trio.Cancelled` (or None when it was cancelled without one).

    Works on exception groups too: the first `Cancelled` with a cause wins.
    """
    if isinstance(exc, trio.Cancelled):
        reason = exc.reason
        if reason is not None and reason.startswith(_REASON_PREFIX):
            try:
                return Cause(reason[len(_REASON_PREFIX) :])
            except ValueError:
                return None
        return None
    if isinstance(exc, BaseExceptionGroup):
        for sub in exc.exceptions:
            found = cause_of(sub)
            if found is not None:
                return found
    return None


async def stop_cause(exc: BaseException) -> Cause | None:
    """The cause of the cancel `exc` belongs to, as seen where it is caught.

    A `Cancelled` carries the reason of the innermost cancelled scope it rose
    through, and a scope entered past its deadline (``trio.sleep(0)``, a
    timeout that ran out on a slow machine) gives its own, causeless reason
    even when a scope around it was cancelled with a cause first. So when `exc`
    says no cause (`cause_of`), a checkpoint here asks the caller's own level,
    where no such inner scope stands in the way. Call it in the ``except``
    that caught `exc`, before anything else is awaited, and raise `exc` on.
    """
    found = cause_of(exc)
    if found is not None or not _holds_cancelled(exc):
        return found
    try:
        await trio.lowlevel.checkpoint_if_cancelled()
    except trio.Cancelled as here:
        return cause_of(here)
    return None


def _holds_cancelled(exc: BaseException) -> bool:
    if isinstance(exc, BaseExceptionGroup):
        return any(_holds_cancelled(sub) for sub in exc.exceptions)
    return isinstance(exc, trio.Cancelled)


@mutable(eq=False)
class CauseScope:
    """A `trio.CancelScope` that remembers the first cause it was cancelled with.

    Use it like a cancel scope::

        with CauseScope() as scope:
            ...
        if scope.cause is Cause.PAUSE:
            ...

    `cancel` may be called from any task, before or after the scope is entered.
    The first cause wins: a later `cancel` with another cause changes nothing, so
    a shutdown that follows a user's Pause still reports the Pause.
    """

    _scope: trio.CancelScope = attrs.field(factory=trio.CancelScope, init=False)
    _cause: Cause | None = attrs.field(default=None, init=False)

    @property
    def cause(self) -> Cause | None:
        """The first cause this scope was cancelled with, or None."""
        return self._cause

    @property
    def cancel_called(self) -> bool:
        """True once `cancel` has been called."""
        return self._scope.cancel_called

    @property
    def cancelled_caught(self) -> bool:
        """True when the scope swallowed the `Cancelled` it raised (as Trio's scope)."""
        return self._scope.cancelled_caught

    def cancel(self, cause: Cause) -> None:
        """Cancel the scope; the first cause given is the one that sticks."""
        if self._cause is None:
            self._cause = cause
        self._scope.cancel(reason=self._cause.reason)

    def __enter__(self) -> CauseScope:
        self._scope.__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        return self._scope.__exit__(exc_type, exc, tb)

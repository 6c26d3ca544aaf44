"""The request context: which session, window and task a piece of work belongs to.

The spec's Go code threads a `ctx` through every call. Here the cancellation half
of that is the caller's Trio cancel scope, and the routing half is a
`contextvars` value. Trio copies context variables into every task it spawns,
so an in-process subagent started from a run's nursery routes its questions
exactly as its parent does.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

from ..vocab.reprs import record
from ..vocab.terms import ORIGINS as ORIGINS
from ..vocab.terms import origin_of as origin_of


@record
class RequestContext:
    """Where a run's questions must go: its session, the window that started it, its task."""

    session_id: str
    window_hash: str | None = None
    task_hash: str | None = None
    #: Path of subagent names from the top-level run down ("" for the main agent).
    agent_path: str = ""

    @property
    def origin(self) -> str:
        """The session's origin prefix (see `origin_of`)."""
        return origin_of(self.session_id)


_current: contextvars.ContextVar[RequestContext | None] = contextvars.ContextVar(
    "agentrt_request_context", default=None
)


def current_context() -> RequestContext | None:
    """The request context of the running task, or None outside any run."""
    return _current.get()


@contextlib.contextmanager
def bind_context(ctx: RequestContext) -> Iterator[RequestContext]:
    """Make `ctx` the current request context for this task and the tasks it spawns."""
    token = _current.set(ctx)
    try:
        yield ctx
    finally:
        _current.reset(token)

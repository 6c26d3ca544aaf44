"""A daemon connection's lifecycle as one explicit table (no I/O here).

::

    AWAIT_HELLO --hello--> READY --request--> READY
         |                   |
         +------close--------+-----close----> CLOSED

Every other step is illegal and raises `IllegalStepError` naming the step and
the state. Once CLOSED, every step but ``close`` fails fast.
"""

from __future__ import annotations

import enum
from typing import Final

from ...vocab.reprs import mutable


class ConnectionState(enum.Enum):
    """Where a connection is in its life."""

    AWAIT_HELLO = "await_hello"
    READY = "ready"
    CLOSED = "closed"


class Step(enum.Enum):
    """What can happen to a connection."""

    #: The client's ``hello`` frame was accepted.
    HELLO = "hello"
    #: Any other client frame (``run``, ``answer``, ``cancel``, ``pending``).
    REQUEST = "request"
    #: The connection ends (peer left, refused hello, daemon shutting down).
    CLOSE = "close"


TRANSITIONS: Final[dict[tuple[ConnectionState, Step], ConnectionState]] = {
    (ConnectionState.AWAIT_HELLO, Step.HELLO): ConnectionState.READY,
    (ConnectionState.AWAIT_HELLO, Step.CLOSE): ConnectionState.CLOSED,
    (ConnectionState.READY, Step.REQUEST): ConnectionState.READY,
    (ConnectionState.READY, Step.CLOSE): ConnectionState.CLOSED,
    (ConnectionState.CLOSED, Step.CLOSE): ConnectionState.CLOSED,
}

_HINTS: Final[dict[tuple[ConnectionState, Step], str]] = {
    (ConnectionState.AWAIT_HELLO, Step.REQUEST): "send a hello frame first",
    (
        ConnectionState.READY,
        Step.HELLO,
    ): "a connection says hello once; open a new connection for another window",
    (ConnectionState.CLOSED, Step.HELLO): "the connection is closed; open a new one",
    (ConnectionState.CLOSED, Step.REQUEST): "the connection is closed; open a new one",
}


class IllegalStepError(Exception):
    """A step the lifecycle table does not allow in the current state."""

    def __init__(self, step: Step, state: ConnectionState, what: str | None = None) -> None:
        hint = _HINTS.get((state, step), "")
        name = what or step.value
        super().__init__(
            f"{name} is not allowed in state {state.name}" + (f": {hint}" if hint else "")
        )
        self.step = step
        self.state = state


@mutable
class Lifecycle:
    """The state of one connection, moved only through `step`."""

    state: ConnectionState = ConnectionState.AWAIT_HELLO

    def step(self, step: Step, what: str | None = None) -> ConnectionState:
        """Apply `step` and return the new state; `what` names the frame in the error."""
        new = TRANSITIONS.get((self.state, step))
        if new is None:
            raise IllegalStepError(step, self.state, what)
        self.state = new
        return new

    def allows(self, step: Step) -> bool:
        """Whether `step` would be legal now."""
        return (self.state, step) in TRANSITIONS

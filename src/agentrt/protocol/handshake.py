"""The frames a connection begins with, and the refusal: what every client loads at import.

A connection opens with a `Hello` answered by a `Welcome` (or an `ErrorFrame`),
and a line that is not a valid frame becomes a `FrameError`. These few are
defined here, apart from the other frames (`agentrt.protocol.frames`, which
re-exports them), so that importing a client or the codec builds only them: the
rest of the frames are loaded when the first frame is encoded or decoded.
"""

from __future__ import annotations

import enum
from typing import ClassVar
from typing import Final

from ..vocab.reprs import record

#: The protocol version spoken by this module; a `Hello` with another version is refused.
PROTOCOL_VERSION: Final = 1


class Scope(enum.Enum):
    """What a connection speaks for (`Hello.scope`)."""

    #: A terminal window: its own ``cli-`` sessions, and those of windows that are gone.
    WINDOW = "window"
    #: The owner's `agentrt` command: every session of every origin, as in the store.
    ALL = "all"


@record
class Hello:
    """First frame of a client: the protocol version and the window it speaks for.

    `window` is a hash the client makes up once per window (terminal); runs
    started over this connection are bound to it, and their questions come
    back only to it. `scope` ``all`` is for the `agentrt` command: it may run,
    list, show, resume and discard sessions of every origin.
    """

    TYPE: ClassVar[str] = "hello"
    version: int
    window: str
    scope: Scope = Scope.WINDOW


@record
class Welcome:
    """The daemon's reply to `Hello`: its protocol version, its own version, the window."""

    TYPE: ClassVar[str] = "hello"
    version: int
    daemon_version: str
    window: str


class ErrorCode(enum.Enum):
    """Why the daemon (or a client's codec) refused something."""

    #: The line is not JSON, not a JSON object, not UTF-8, or has an integer over 4300 digits.
    MALFORMED = "malformed"
    #: The line is longer than the frame size cap; it was skipped.
    TOO_LARGE = "too_large"
    #: The ``type`` field is missing or names no frame of this direction.
    UNKNOWN_TYPE = "unknown_type"
    #: A field is missing, unknown, or of the wrong type.
    INVALID = "invalid"
    #: The stream ended in the middle of a line.
    TRUNCATED = "truncated"
    #: The frame is valid but not allowed now (``run`` before ``hello``; a session that
    #: is running or still has a pending task): HTTP's 409.
    STATE = "state"
    #: The peer speaks another protocol version; the connection is closed.
    VERSION = "version"
    #: The named task, question or session does not exist or is not this connection's.
    NOT_FOUND = "not_found"
    #: The peer is another user (the connection is closed), or a window asked to stop
    #: the daemon.
    FORBIDDEN = "forbidden"
    #: The request was understood but could not be carried out.
    FAILED = "failed"


@record
class ErrorFrame:
    """Something the client sent was refused; `ref` is that frame's type when known."""

    TYPE: ClassVar[str] = "error"
    code: ErrorCode
    message: str
    ref: str | None = None


class FrameError(ValueError):
    """A JSON object that is not a valid frame; `code` says how, the message says where."""

    def __init__(self, code: ErrorCode, message: str, ref: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.ref = ref

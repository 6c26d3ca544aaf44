"""The words every layer shares: causes, outcomes, settling, request kinds, task statuses,
choices, approval, origins.

This module is the bottom layer (see ``docs/architecture.md``): it imports
nothing from agentrt, so the protocol (`agentrt.frames`), the runtime and the
front-ends can all speak of a pause, a parked run or a confirmation without
loading one another.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Final
from typing import TypeVar

#: Prefix of Trio cancel reasons that carry a `Cause` (see `agentrt.core.cause`).
CAUSE_REASON_PREFIX: Final = "agentrt:"


class Cause(enum.Enum):
    """Why a run was stopped."""

    #: Ctrl+C in the terminal, **Yes** in the stop popup, `pending discard`: drop the task.
    USER_CANCEL = "user_cancel"
    #: **Pause** in the stop popup, a `cancel` frame with cause ``pause``: keep the task.
    PAUSE = "pause"
    #: The window or connection that owned the run went away: keep the task.
    DISCONNECT = "disconnect"
    #: The daemon or process is shutting down: keep the task.
    SHUTDOWN = "shutdown"

    @property
    def deletes_pending(self) -> bool:
        """True only for `USER_CANCEL`: every other cause keeps the pending task (`SETTLE`)."""
        return SETTLE[(Outcome.CANCELLED, self)] is Settle.DELETE

    @property
    def reason(self) -> str:
        """The string handed to `trio.CancelScope.cancel(reason=...)`."""
        return CAUSE_REASON_PREFIX + self.value

    @classmethod
    def parse(cls, text: str) -> Cause:
        """Read a cause from its wire name (``"pause"``); raises ValueError naming the choices."""
        try:
            return cls(text)
        except ValueError:
            choices = ", ".join(c.value for c in cls)
            raise ValueError(f"unknown cause {text!r}; expected one of: {choices}") from None


class Outcome(enum.Enum):
    """How a run ended."""

    #: The model gave its final answer; the pending task is deleted.
    FINISHED = "finished"
    #: Stopped with a cause (see `RunEnded.cause`); kept unless the cause is a user-cancel.
    CANCELLED = "cancelled"
    #: Parked on a saved question (`ask_user` from a non-terminal origin, or no listener).
    AWAITING_ANSWER = "awaiting_answer"
    #: An error ended it; the pending task is kept so it can be resumed.
    FAILED = "failed"


class Settle(enum.Enum):
    """What the store does with a session's pending task when a run ends (`SETTLE`)."""

    #: The conversation is kept as history; the pending task is deleted.
    FINISH = "finish"
    #: The pending task is deleted (thrown away).
    DELETE = "delete"
    #: The pending task is kept, status ``interrupted``, with the cause: to resume.
    KEEP_INTERRUPTED = "keep_interrupted"
    #: The pending task is kept as the run left it: it saved its question already.
    KEEP_QUESTION = "keep_question"
    #: The pending task is kept, status ``failed``, with the error: to resume.
    KEEP_FAILED = "keep_failed"


#: Every ending a run can have, (how it ended, why it was stopped), and what the store does
#: with its pending task: the one table the executor consults (docs/cancellation.md shows it).
SETTLE: Final[Mapping[tuple[Outcome, Cause | None], Settle]] = {
    (Outcome.FINISHED, None): Settle.FINISH,
    (Outcome.CANCELLED, Cause.USER_CANCEL): Settle.DELETE,
    (Outcome.CANCELLED, Cause.PAUSE): Settle.KEEP_INTERRUPTED,
    (Outcome.CANCELLED, Cause.DISCONNECT): Settle.KEEP_INTERRUPTED,
    (Outcome.CANCELLED, Cause.SHUTDOWN): Settle.KEEP_INTERRUPTED,
    (Outcome.AWAITING_ANSWER, None): Settle.KEEP_QUESTION,
    (Outcome.FAILED, None): Settle.KEEP_FAILED,
}


class RequestKind(enum.Enum):
    """What a request asks of the human."""

    #: Allow a tool call: answer with one of `Request.choices` (allow once / for session / deny).
    CONFIRM = "confirm"
    #: A free-text question from the `ask_user` tool.
    QUESTION = "question"
    #: A value for `store_secret`: masked input, answered in `Answer.secret`.
    SECRET = "secret"
    #: A restricted-path confirmation: choices plus the system password in `Answer.secret`.
    PASSWORD = "password"


class TaskStatus(enum.Enum):
    """Where a session's pending task stands."""

    #: A run is working on it (or was, when the process died: see `TaskRecord.crashed`).
    RUNNING = "running"
    #: Stopped by pause, disconnect or shutdown; resumable.
    INTERRUPTED = "interrupted"
    #: Parked on a saved question; resumed by an answer.
    AWAITING_ANSWER = "awaiting_answer"
    #: Ended by an error; resumable.
    FAILED = "failed"


#: Choices of a tool-call confirmation.
ALLOW_ONCE: Final = "allow"
ALLOW_SESSION: Final = "allow_session"
DENY: Final = "deny"
CONFIRM_CHOICES: tuple[str, ...] = (ALLOW_ONCE, ALLOW_SESSION, DENY)


E = TypeVar("E", bound=enum.Enum)


def _parse(cls: type[E], text: str, what: str) -> E:
    """The member of `cls` named `text`; ValueError naming `what` and the choices."""
    try:
        return cls(text)
    except ValueError:
        choices = ", ".join(str(m.value) for m in cls)
        raise ValueError(f"unknown {what} {text!r}; expected one of: {choices}") from None


class Approval(enum.Enum):
    """Which side-effecting tool calls run without a confirmation (Codex CLI's approval modes).

    A restricted path (the system password), a call that may already have run,
    and agentrt's own configuration are asked about under every policy.
    """

    #: Every file write and every shell command is confirmed first (the default).
    ASK = "ask"
    #: File writes inside the working folder run at once; shell commands are confirmed.
    AUTO_EDIT = "auto-edit"
    #: File writes and shell commands run at once.
    FULL_AUTO = "full-auto"

    @classmethod
    def parse(cls, text: str) -> Approval:
        """Read a policy from its name (``"auto-edit"``); raises ValueError naming the choices."""
        return _parse(cls, text, "approval policy")


class SandboxMode(enum.Enum):
    """How tool processes are confined (see `agentrt.agent.sandbox`); Codex CLI's sandbox levels.

    Every approval policy runs tools in the workspace-write sandbox; ``full-auto``
    never means full access. Only ``off`` runs them unconfined.
    """

    #: The file system read-only but the working folder and a private /tmp; agentrt's own
    #: files hidden; restricted paths read-only (the default).
    WORKSPACE_WRITE = "workspace-write"
    #: No sandbox: tools run with the user's full access (dangerous; never for chat origins).
    OFF = "off"

    @classmethod
    def parse(cls, text: str) -> SandboxMode:
        """Read a mode from its name (``"off"``); raises ValueError naming the choices."""
        return _parse(cls, text, "sandbox mode")


# -- origins: the prefix of a session id says which front-end it belongs to ------

#: A terminal window (agenttui, the `agentrt` command).
TERMINAL: Final = "cli-"
#: The web page and the HTTP API.
WEB: Final = "chat-"
#: A Telegram chat.
TELEGRAM: Final = "tg-"
#: A Discord channel.
DISCORD: Final = "dc-"

#: The origins the runtime recognises, by session-id prefix.
ORIGINS: tuple[str, ...] = (TERMINAL, WEB, TELEGRAM, DISCORD)


def origin_of(session_id: str) -> str:
    """The origin prefix of a session id (``"cli-"``, ``"chat-"``, ``"tg-"``, ``"dc-"``) or ``""``.

    ``""`` means unknown: such a session is matched only by a listener with an
    empty prefix.
    """
    for origin in ORIGINS:
        if session_id.startswith(origin):
            return origin
    return ""

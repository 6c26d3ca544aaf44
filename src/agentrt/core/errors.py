"""What a request to the runtime can be refused for, and how each front-end says so.

Each error carries its own wire names, so every front-end answers a refusal
alike: `code` is the error's code in the HTTP API's ``{"error": {"code"}}``,
`http_status` its HTTP status, and `frame_code` the code of the daemon's
``error`` frame (a value of `agentrt.frames.ErrorCode`). The daemon keeps to its
protocol's fewer, coarser codes: another owner's task is ``not_found`` there,
so a window cannot probe for other windows' tasks.
"""

from __future__ import annotations

from typing import ClassVar


class ExecutorError(Exception):
    """Base class of the executor's errors."""

    #: The error's ``code`` in an HTTP API error.
    code: ClassVar[str] = "failed"
    #: The HTTP status it is answered with.
    http_status: ClassVar[int] = 500
    #: The ``code`` of the daemon's ``error`` frame.
    frame_code: ClassVar[str] = "failed"


class UnknownTaskError(ExecutorError):
    """No running task has this hash (it never existed or has finished)."""

    code, http_status, frame_code = "unknown_task", 404, "not_found"


class NotOwnerError(ExecutorError):
    """The task belongs to another owner (connection, window, chat)."""

    code, http_status, frame_code = "not_owner", 403, "not_found"


class SessionBusyError(ExecutorError):
    """A run of this session is already going on."""

    code, http_status, frame_code = "session_busy", 409, "state"


class NoPendingTaskError(ExecutorError):
    """The session has no pending task to resume."""

    code, http_status, frame_code = "no_pending_task", 404, "not_found"


class UnknownSessionError(ExecutorError):
    """No session has this id (or none the asker may see: the answer is the same)."""

    code, http_status, frame_code = "unknown_session", 404, "not_found"


class PendingTaskExistsError(ExecutorError):
    """A new run, or removing the session, was asked for while it still has a pending task."""

    code, http_status, frame_code = "pending_task_exists", 409, "state"


class BadSessionIdError(ExecutorError, ValueError):
    """A session id that cannot be used."""

    code, http_status, frame_code = "bad_session_id", 400, "invalid"


class BadAnswerError(ExecutorError, ValueError):
    """An answer that does not fit its question (live or saved), or no question to answer.

    A conflict with the state over HTTP (409), not a malformed request: which
    answers fit depends on the question open now.
    """

    code, http_status, frame_code = "bad_answer", 409, "invalid"


class LateAnswerError(BadAnswerError):
    """An answer naming a question that no longer waits for one, or not the one that waits.

    The message says why (`agentrt.vocab.questions.late_answer`): the question
    was answered already, withdrawn or expired, or the task waits for another.
    The answer is never applied to another question.
    """

    code = "late_answer"


class NoSuchTurnError(ExecutorError, ValueError):
    """A `/rewind` to a turn the session does not have.

    A conflict with the state over HTTP (409), as `BadAnswerError`: which turns
    there are depends on the session's conversation now.
    """

    code, http_status, frame_code = "no_such_turn", 409, "invalid"


class BadWorkdirError(ExecutorError, ValueError):
    """A working directory that cannot be used."""

    code, http_status, frame_code = "bad_workdir", 400, "invalid"


class ModelNotConfiguredError(ExecutorError):
    """The model cannot be asked as configured (no API key for a hosted API).

    Raised before a run creates its task, so a configuration error leaves no
    failed pending task behind; the message says what to set.
    """

    # Not allowed now, as a busy session is not: it works once a key is stored.
    code, http_status, frame_code = "model_not_configured", 503, "state"


class NothingToReplaceError(ExecutorError):
    """A regenerate or an edit of a session that has no message of the user's yet."""

    code, http_status, frame_code = "nothing_to_replace", 409, "state"


class UnknownModelError(ExecutorError, ValueError):
    """A model that is not among the configured ones (``model`` and the ``models`` list)."""

    code, http_status, frame_code = "unknown_model", 404, "not_found"


def check_model_ready(model: object) -> None:
    """Raise `ModelNotConfiguredError` if `model` says it cannot be asked now.

    A model may offer ``check_ready()`` (the providers' models built from a
    configuration do); one that offers none is always ready.
    """
    check = getattr(model, "check_ready", None)
    if check is not None:
        check()

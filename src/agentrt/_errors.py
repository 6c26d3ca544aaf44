"""What a request to the runtime can be refused for.

A leaf of the runtime: the executor raises these, and so does the task record
when an answer does not fit its saved question (`agentrt._record.apply_answer`).
"""

from __future__ import annotations


class ExecutorError(Exception):
    """Base class of the executor's errors."""


class UnknownTaskError(ExecutorError):
    """No running task has this hash (it never existed or has finished)."""


class NotOwnerError(ExecutorError):
    """The task belongs to another owner (connection, window, chat)."""


class SessionBusyError(ExecutorError):
    """A run of this session is already going on."""


class NoPendingTaskError(ExecutorError):
    """The session has no pending task to resume."""


class PendingTaskExistsError(ExecutorError):
    """A new run was asked for in a session that still has a pending task."""


class BadSessionIdError(ExecutorError, ValueError):
    """A session id that cannot be used."""


class BadAnswerError(ExecutorError, ValueError):
    """An answer that does not fit the saved question."""


class BadWorkdirError(ExecutorError, ValueError):
    """A working directory that cannot be used."""

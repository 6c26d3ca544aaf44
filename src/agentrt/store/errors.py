"""The errors of the store, whichever backend holds it."""

from __future__ import annotations


class StoreError(Exception):
    """The store file cannot be used (corrupt, newer schema, unreadable record)."""


class BadCursorError(ValueError):
    """A listing cursor that no page gave."""


class TaskExistsError(Exception):
    """A new task was started in a session that still has a pending task."""


class NoUserMessageError(LookupError):
    """A session has no message of the user's to replace (`Store.replace_last_turn`)."""


class TaskTakenError(StoreError):
    """A run wrote to a task that another runner holds now (it took the task over).

    Happens only to a run that lost its hold on the task: in a fleet, a daemon
    cut off from the database for longer than its lease, whose tasks another
    daemon resumed meanwhile. The write changes nothing.
    """


class StaleLeaseError(TaskTakenError):
    """A fleet member wrote under a lease epoch that is no longer its live one (see `agentrt.store.postgres`).

    The member's lease ran out (it stalled, or was cut off from the database),
    or it joined the fleet again since the run that wrote took its task. The
    database refused the write in the write's own transaction; it changed nothing.
    """

"""What the store's calls give back, whichever backend holds it: listings, pages, statistics."""

from __future__ import annotations

from typing import Generic
from typing import TypeVar

from ..models.messages import Message
from ..present.listing import BriefTask
from ..vocab.reprs import record
from .record import TaskRecord
from .record import TaskSummary

T = TypeVar("T")


@record
class UnreadableTask:
    """A stored pending task that cannot be decoded (bad JSON, a damaged field).

    Listings show it with status ``unreadable`` so that the other tasks stay
    usable, and it can be discarded like any task. `error` says what is wrong
    and how to discard it. The plain columns are kept when they can be read.
    """

    session_id: str
    error: str
    updated_at: float | None = None
    window_hash: str | None = None
    status: str = "unreadable"


#: What one stored pending task reads back as.
StoredTask = TaskRecord | UnreadableTask
#: What one pending task is listed as.
ListedTask = TaskSummary | UnreadableTask


def brief_of(task: ListedTask) -> BriefTask:
    """What a text listing shows of a task listed in full (`Store.list_stored`)."""
    if isinstance(task, UnreadableTask):
        return (task.session_id, task.status, False, None, task.updated_at or 0.0, None, "")
    return (
        task.session_id,
        task.status.value,
        task.crashed,
        task.cause.value if task.cause is not None else None,
        task.updated_at,
        task.question.prompt if task.question is not None else None,
        task.input,
    )


@record
class SessionInfo:
    """One session as listed: its title (first message, shortened) and where it stands."""

    session_id: str
    title: str
    created_at: float
    updated_at: float
    #: Messages stored: finished history and the pending task's transcript.
    messages: int
    window_hash: str | None = None
    #: The pending task's status, or None when the session has none (its runs finished).
    status: str | None = None
    #: The pending task as a listing shows it, or None when the session has none.
    task: ListedTask | None = None
    #: The model chosen for the session (a spec), or None for the configured default.
    model: str | None = None


@record
class StoredMessage:
    """One stored message and its place in its session (`seq` counts from 0)."""

    seq: int
    created_at: float
    message: Message


@record
class Page(Generic[T]):
    """A page of a listing, and the cursor of the next page (None after the last)."""

    items: tuple[T, ...]
    next: str | None = None


@record
class StoreStatistics:
    """Calls and batches run so far, and calls waiting now."""

    calls: int
    batches: int
    waiting: int

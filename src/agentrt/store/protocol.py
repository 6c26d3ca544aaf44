"""The store interface, and `open_store`, which picks its backend from where the store lives.

The executor, the agent loop, the daemon, the HTTP API, the bots and the
`agentrt` command depend on `Store`, never on a backend. Two backends provide
it with the same meaning (the same tests run against both):

* `agentrt.store.sqlite.TaskStore`: an embedded SQLite file in the state dir,
  the default for one person on one machine;
* `agentrt.store.postgres.PgStore`: a PostgreSQL database shared by a fleet of
  daemons (see ``docs/fleet.md``).

Every method but `statistics` and `aclose` is one transaction: durable
before it returns, and either wholly done or not at all.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence
from pathlib import Path
from typing import Final
from typing import Protocol
from typing import TypeVar

from ..core.cause import Cause
from ..models.messages import Message
from ..present.listing import BriefTask
from ..vocab.locations import StrPath
from ..vocab.terms import TaskStatus
from ..vocab.usage import RunTokens
from ..vocab.usage import TokenCount
from .record import TaskRecord
from .types import ListedTask
from .types import Page
from .types import SessionInfo
from .types import StoredMessage
from .types import StoredTask
from .types import StoreStatistics

T_co = TypeVar("T_co", covariant=True)

#: The schemes of a store location that name a PostgreSQL database.
POSTGRES_SCHEMES: Final = ("postgresql://", "postgres://")


def is_postgres(location: StrPath) -> bool:
    """Whether `location` names a PostgreSQL database (a ``postgresql://`` URL)."""
    return isinstance(location, str) and location.startswith(POSTGRES_SCHEMES)


class Queued(Protocol[T_co]):
    """A store call queued by a ``*_nowait`` method; `wait` gives its outcome."""

    async def wait(self) -> T_co:
        """Wait for the call to be done (durably) and return its result, or raise its error."""
        ...


class Store(Protocol):
    """Sessions' messages and pending tasks, whatever holds them.

    Messages are append-only; a session's pending task is a row of fields plus
    the range of its messages after its history. Listings read summary
    columns only and come a page at a time. A call, once made, runs: a caller
    cancelled while waiting still waits for it (see `agentrt.store.sql`).
    """

    @property
    def location(self) -> str:
        """Where the store lives, for messages: a file, or a database URL without its password."""
        ...

    @property
    def runner(self) -> str:
        """The token this process's runs are recorded with (`TaskRecord.runner`)."""
        ...

    @property
    def private_paths(self) -> tuple[Path, ...]:
        """What no tool process may reach, so that no tool reads or rewrites the store.

        The store's own files (an SQLite file and the files beside it), or the
        folders of the Unix sockets of its PostgreSQL server when that server runs
        on this machine: a tool without the network reaches no TCP port, but a
        socket in a folder it can see is open to it (`agentrt.agent.sandbox`
        covers each of these).
        """
        ...

    # -- pending tasks --------------------------------------------------------

    async def load(self, session_id: str) -> TaskRecord | None:
        """The pending task of `session_id`, or None."""
        ...

    async def lookup(self, session_id: str) -> StoredTask | None:
        """Like `load`, but a record that cannot be read is returned as an `UnreadableTask`."""
        ...

    async def save(self, record: TaskRecord) -> TaskRecord:
        """Write `record` (new messages clamped); return it as written."""
        ...

    async def create(self, record: TaskRecord) -> Sequence[Message]:
        """Write the first record of a new task; return the session's history.

        Raises `TaskExistsError` (writing nothing) if the session has a pending task.
        """
        ...

    async def replace_last_turn(
        self, session_id: str, make: Callable[[str], TaskRecord]
    ) -> tuple[TaskRecord, Sequence[Message]]:
        """Replace the last user message and all after it by the task `make` builds from its
        text, in one transaction; return the record and the history before it.

        Raises `TaskExistsError` while the session has a pending task and
        `NoUserMessageError` when it has no user message, writing nothing.
        """
        ...

    async def update(
        self,
        session_id: str,
        change: Callable[[TaskRecord], TaskRecord],
        *,
        synced: bool = True,
        model: Callable[[str | None], object] | None = None,
    ) -> tuple[TaskRecord, Sequence[Message]] | None:
        """Load a task, apply `change` and save it, in one transaction; None if there is none.

        `change` runs in the store's thread, sees the latest record, and may raise
        to write nothing. With `synced` False the commit does not wait for the
        disk; it becomes durable with the next synced commit (see `SqlStore.update`).
        `model`, when given, is called first in the same transaction and thread with
        the model chosen for the session (`session_model`), and may raise to write nothing.
        """
        ...

    async def save_fields(self, record: TaskRecord) -> bool:
        """Write every field of `record` but its transcript; False if it has no row."""
        ...

    def save_fields_nowait(self, record: TaskRecord, *, defer: bool = True) -> Queued[bool]:
        """Queue `save_fields` and return at once."""
        ...

    def mark_nowait(
        self,
        session_id: str,
        status: TaskStatus,
        *,
        cause: Cause | None = None,
        error: str | None = None,
        lost_words: int = 0,
        runner: str | None = None,
    ) -> Queued[bool]:
        """Queue `mark` and return at once."""
        ...

    def stop_nowait(
        self,
        stopped: Callable[[], TaskRecord],
        status: TaskStatus,
        *,
        cause: Cause,
        lost_words: int = 0,
        runner: str | None = None,
    ) -> Queued[bool]:
        """Queue a stop's write and return at once: the fields of the record `stopped` makes
        (its ledger's new entry), then `mark` of `status`, in one call.

        `stopped` is called in the store's thread, after the calls queued before
        it: it must read nothing that changes after this call (copy what does).
        """
        ...

    async def mark(
        self,
        session_id: str,
        status: TaskStatus,
        *,
        cause: Cause | None = None,
        error: str | None = None,
        lost_words: int = 0,
        runner: str | None = None,
    ) -> bool:
        """Set a task's status, cause, error and lost words; False if it has no record."""
        ...

    async def delete(
        self, session_id: str, check: Callable[[str, str | None], None] | None = None
    ) -> bool:
        """Delete a pending task and its messages (`check` may refuse); True if there was one."""
        ...

    async def finish(
        self,
        session_id: str,
        transcript: Sequence[Message] = (),
        window_hash: str | None = None,
        *,
        runner: str | None = None,
        check: Callable[[str, str | None], None] | None = None,
    ) -> None:
        """Record a finished run: its messages become history and the pending task goes."""
        ...

    async def list_stored(self, prefix: str = "") -> list[ListedTask]:
        """Pending tasks (summaries) whose session id starts with `prefix`, newest first."""
        ...

    async def list_page(
        self, prefix: str = "", *, limit: int | None = None, cursor: str | None = None
    ) -> Page[ListedTask]:
        """One page of `list_stored`: at most `limit` tasks after `cursor` (a page's `next`)."""
        ...

    async def list_brief(self, prefix: str = "") -> list[BriefTask]:
        """What a text listing shows of `list_stored`'s tasks (`agentrt.store.types.brief_of`)."""
        ...

    async def list_lines(self, prefix: str = "") -> list[str]:
        """`list_brief`'s tasks as `agentrt pending list` shows them (`agentrt.present.listing`)."""
        ...

    async def line_page(
        self, prefix: str = "", *, limit: int | None = None, cursor: str | None = None
    ) -> Page[tuple[str, int]]:
        """One page of `list_lines`, each line with its time left out (`TIME_MARK`), and
        that time's second (`agentrt.present.listing.templates`)."""
        ...

    async def list(self, prefix: str = "") -> list[TaskRecord]:
        """Whole pending tasks (transcripts decoded), newest first: for tests and tools."""
        ...

    # -- sessions and their messages -----------------------------------------

    async def load_history(self, session_id: str) -> tuple[Message, ...]:
        """The finished conversation of a session, oldest first."""
        ...

    async def add_usage(
        self, session_id: str, task_hash: str, model: str, count: TokenCount
    ) -> None:
        """Add `count` to the tokens of run `task_hash` of `session_id` with `model`."""
        ...

    async def usage(self, session_id: str) -> tuple[RunTokens, ...]:
        """The tokens of each run of `session_id` (by model), oldest first (no cost)."""
        ...

    async def owner(self, session_id: str) -> str | None:
        """The window that owns `session_id`, or None."""
        ...

    async def sessions(
        self, prefix: str = "", *, limit: int | None = None, cursor: str | None = None
    ) -> Page[SessionInfo]:
        """Sessions whose id starts with `prefix`, most recently active first, a page at a time."""
        ...

    async def session(self, session_id: str) -> SessionInfo | None:
        """One session's `SessionInfo`, or None."""
        ...

    async def messages(
        self, session_id: str, *, after: int = -1, limit: int = 100
    ) -> Page[StoredMessage]:
        """A page of a session's stored messages with `seq` > `after`, oldest first."""
        ...

    async def session_model(self, session_id: str) -> str | None:
        """The model chosen for `session_id`, or None (the default model)."""
        ...

    async def set_session_model(
        self, session_id: str, model: str | None, *, window_hash: str | None = None
    ) -> None:
        """Keep `model` as the one `session_id` runs with (None: the default again)."""
        ...

    async def forget(self, session_id: str) -> bool:
        """Delete a session: its messages, its history and its pending task."""
        ...

    async def prune(self, older_than: float) -> int:
        """Delete the sessions with no pending task last active before `older_than`."""
        ...

    # -- lifetime ----------------------------------------------------------------

    async def aclose(self) -> None:
        """Close once the calls already queued are done; later calls raise `StoreError`."""
        ...

    def statistics(self) -> StoreStatistics:
        """How many calls and batches the store has run."""
        ...


async def open_store(
    location: StrPath, *, lease: float | None = None, http: str | None = None
) -> Store:
    """Open the store at `location`: a ``postgresql://`` URL, else an SQLite file path.

    A PostgreSQL store makes this process a member of the fleet sharing it,
    whose lease lasts `lease` seconds, serving HTTP at `http` (see
    `agentrt.store.postgres`). Raises `StoreError` saying what is wrong and what to do.
    """
    if is_postgres(location):
        from .postgres import DEFAULT_LEASE
        from .postgres import PgStore

        return await PgStore.open(
            str(location), lease=lease if lease is not None else DEFAULT_LEASE, http=http
        )
    from .sqlite import TaskStore

    return await TaskStore.open(location)

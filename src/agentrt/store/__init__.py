"""The task store: every session's messages and its pending task.

The rest of agentrt uses the names here: the `Store` interface and
`open_store`, which picks a backend from where the store lives, the types its
calls give back and its errors; a record's own types and helpers are in
`agentrt.store.record`. None of these loads sqlite3 or a database driver.
The modules of the package:

* `protocol`: the `Store` interface and `open_store`;
* `record`: a session's pending task (`TaskRecord`) and its (de)serialisation;
* `types`, `errors`: what store calls give back and raise;
* `sql`: `SqlStore`, the logic and the SQL both backends share;
* `columns`: a record as the columns of its row, a message as its row's body;
* `writer`: the thread every store call runs in, what is queued in one transaction;
* `sqlite`: `TaskStore`, the SQLite backend, its file and its migrations;
* `postgres`: `PgStore`, the PostgreSQL backend a fleet of daemons shares.
"""

from __future__ import annotations

from .errors import BadCursorError
from .errors import NoUserMessageError
from .errors import StaleLeaseError
from .errors import StoreError
from .errors import TaskExistsError
from .errors import TaskTakenError
from .protocol import Queued
from .protocol import Store
from .protocol import is_postgres
from .protocol import open_store
from .types import ListedTask
from .types import Page
from .types import SessionInfo
from .types import StoredMessage
from .types import StoredTask
from .types import StoreStatistics
from .types import UnreadableTask
from .types import brief_of

__all__ = [
    "BadCursorError",
    "ListedTask",
    "NoUserMessageError",
    "Page",
    "Queued",
    "SessionInfo",
    "StaleLeaseError",
    "Store",
    "StoreError",
    "StoreStatistics",
    "StoredMessage",
    "StoredTask",
    "TaskExistsError",
    "TaskTakenError",
    "UnreadableTask",
    "brief_of",
    "is_postgres",
    "open_store",
]

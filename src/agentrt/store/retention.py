"""Retention: finished sessions are deleted a configured number of days after their last message.

The daemon runs one `Retention` for its whole life (``retention_days`` in the
configuration): it prunes once when it starts and then every `PRUNE_EVERY`
seconds. A session with a pending task is never pruned, whatever its age: the
store leaves out every session that has one, in the same transaction as the
delete. With no retention configured nothing is ever deleted.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Final

import attrs
import trio

from ..vocab.reprs import mutable
from ..vocab.reprs import record
from . import Store
from . import StoreError

log = logging.getLogger("agentrt.retention")

#: Seconds in a day.
DAY: Final = 86400.0
#: Seconds between two prunes of a running daemon.
PRUNE_EVERY: Final = 3600.0


@record
class RetentionStatistics:
    """Prunes done so far and the sessions they deleted."""

    passes: int
    pruned: int


@mutable(eq=False)
class Retention:
    """Deletes the finished sessions of `store` last active more than `days` days ago.

    Start it with ``await nursery.start(retention.run)``: it has pruned once when
    that returns. `clock` is the wall clock the store's timestamps are read
    against (seconds since the epoch); the wait between prunes is Trio's.
    """

    store: Store
    days: float
    every: float = PRUNE_EVERY
    clock: Callable[[], float] = time.time
    _passes: int = attrs.field(default=0, init=False)
    _pruned: int = attrs.field(default=0, init=False)
    _changed: trio.Event = attrs.field(factory=trio.Event, init=False)

    def __attrs_post_init__(self) -> None:
        if not self.days > 0:
            raise ValueError(f"retention must be a positive number of days, not {self.days!r}")
        if not self.every > 0:
            raise ValueError(f"the prune interval must be positive, not {self.every!r}")

    async def prune_now(self) -> int:
        """Delete the finished sessions older than the retention; how many went."""
        cutoff = self.clock() - self.days * DAY
        try:
            pruned = await self.store.prune(cutoff)
        except BaseException:
            self._done(0)
            raise
        self._done(pruned)
        if pruned:
            log.info(
                "deleted %d finished session(s) older than %g days (retention_days)",
                pruned,
                self.days,
            )
        return pruned

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Prune now, report started, then prune every `every` seconds until cancelled.

        A prune the store fails is logged and tried again next time: the
        daemon goes on serving.
        """
        await self._prune_logged()
        task_status.started()
        while True:
            await trio.sleep(self.every)
            await self._prune_logged()

    async def _prune_logged(self) -> None:
        try:
            await self.prune_now()
        except StoreError as exc:
            log.error("pruning old sessions failed (tried again in %g s): %s", self.every, exc)

    def _done(self, pruned: int) -> None:
        self._passes += 1
        self._pruned += pruned
        self._changed.set()
        self._changed = trio.Event()

    async def wait_passes(self, passes: int) -> None:
        """Wait until at least `passes` prunes have been done (or tried)."""
        while self._passes < passes:
            await self._changed.wait()

    def statistics(self) -> RetentionStatistics:
        """How many prunes were done and how many sessions they deleted."""
        return RetentionStatistics(self._passes, self._pruned)

"""What the fake services share: serving an ASGI app on an ephemeral loopback port, and waking
whoever waits for the fake's state to change."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from typing import cast

import attrs
import trio
from hypercorn.config import Config
from hypercorn.trio import serve
from starlette.applications import Starlette


async def serve_app(app: Starlette, nursery: trio.Nursery) -> int:
    """Serve `app` with Hypercorn on 127.0.0.1 in `nursery`, quietly; the port it listens on."""
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    config.errorlog = None
    binds = await nursery.start(
        lambda task_status: serve(cast(Any, app), config, task_status=task_status)
    )
    return int(binds[0].rsplit(":", 1)[1])


@attrs.define(eq=False)
class Changes:
    """A fake's changes: `notify` after each one wakes everyone in `wait`."""

    _changed: trio.Event = attrs.field(factory=trio.Event)

    def notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def wait(self) -> None:
        """Wait for the next change."""
        await self._changed.wait()

    async def wait_for(self, predicate: Callable[[], Any]) -> Any:
        """Wait until `predicate()` is truthy (checked after every change); return its value."""
        while True:
            value = predicate()
            if value:
                return value
            await self.wait()

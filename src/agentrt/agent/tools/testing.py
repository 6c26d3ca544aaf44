"""Tools for trying the runtime out: a long wait to cancel, a large result to clamp.

The scripted model's ``sleep SECONDS`` and ``big N`` call them. They are
offered only to the models that play scripts, never to a real model.
"""

from __future__ import annotations

from typing import ClassVar

import trio

from ...models.messages import ToolCall
from ...vocab.reprs import record
from .base import Tool
from .base import ToolError
from .base import ToolRun

#: The largest result `big` makes, in bytes.
BIG_LIMIT = 64 * 1024 * 1024


@record
class Sleep(Tool):
    """``sleep``: a long-running tool, to cancel or pause."""

    NAME: ClassVar = "sleep"
    DESCRIPTION: ClassVar = "Wait for a number of seconds."
    TESTING: ClassVar = True

    seconds: float

    async def run(self, agent: ToolRun, call: ToolCall) -> str:
        if not 0 <= self.seconds <= 86400:
            raise ToolError("sleep takes 0 to 86400 seconds")
        agent.asks_nothing()
        await trio.sleep(self.seconds)
        return f"slept {self.seconds:g}s"


@record
class Big(Tool):
    """``big``: a result of `size` bytes (over 32 KiB, the saved snapshot is clamped)."""

    NAME: ClassVar = "big"
    DESCRIPTION: ClassVar = "Produce a result of the given size in bytes (for testing)."
    TESTING: ClassVar = True

    size: int

    async def run(self, agent: ToolRun, call: ToolCall) -> str:
        if not 0 <= self.size <= BIG_LIMIT:
            raise ToolError(f"big takes 0 to {BIG_LIMIT} bytes")
        await trio.lowlevel.checkpoint()
        pattern = "0123456789abcdef"
        return (pattern * (self.size // len(pattern) + 1))[: self.size]

"""The `spawn` tool: a task run by an in-process subagent."""

from __future__ import annotations

from typing import ClassVar

from ...models.messages import ToolCall
from ...vocab.reprs import record
from .base import Tool
from .base import ToolRun


@record
class Spawn(Tool):
    """``spawn``: the subagent shares the registry and the request context of its parent."""

    NAME: ClassVar = "spawn"
    DESCRIPTION: ClassVar = "Run a task in a subagent and return its final answer."

    task: str

    async def run(self, agent: ToolRun, call: ToolCall) -> str:
        # The spawn itself has no effect: its subagent journals each of its calls in the
        # task's record, and a spawn run again on resume takes up that journal.
        return await agent.spawn(self.task, call)

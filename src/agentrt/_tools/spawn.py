"""The `spawn` tool: a task run by an in-process subagent."""

from __future__ import annotations

from typing import ClassVar

import attrs

from .._messages import ToolCall
from .._reprs import fields_eq, fields_hash, fields_repr
from ._base import Tool, ToolRun


@attrs.frozen
class Spawn(Tool):
    """``spawn``: the subagent shares the registry and the request context of its parent."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    NAME: ClassVar = "spawn"
    DESCRIPTION: ClassVar = "Run a task in a subagent and return its final answer."

    task: str

    async def run(self, agent: ToolRun, call: ToolCall) -> str:
        # What a subagent does is not committed call by call: a spawn that started and
        # never returned may have had effects.
        await agent.begin_effect(call)
        return await agent.spawn(self.task)

"""The `shell` tool: a command in the working directory, after a confirmation."""

from __future__ import annotations

from typing import ClassVar

import attrs
import trio

from .._clamp import clamp
from .._messages import ToolCall
from .._policy import Command
from .._reprs import fields_eq, fields_hash, fields_repr
from .._toolproc import run_tool
from ._base import DENIED, PROMPT_LIMIT, Tool, ToolError, ToolRun, confirmed, via_sudo


@attrs.frozen
class Shell(Tool):
    """``shell``: its output and exit status; through sudo when it names a restricted path."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    NAME: ClassVar = "shell"
    DESCRIPTION: ClassVar = (
        "Run a shell command in the working directory; returns its output and exit status."
    )

    command: str

    async def run(self, agent: ToolRun, call: ToolCall) -> str:
        command = self.command
        agent.check_command(command)
        shown = clamp(command, PROMPT_LIMIT)
        if agent.mentions_restricted(command):
            prompt = f"run (restricted): {shown}"
            result = await via_sudo(agent, call, prompt, ["sh", "-c", command])
            if result is None:
                return DENIED
            output, code = result.output, result.returncode
        else:
            if not await confirmed(agent, call, f"run: {shown}", Command(command)):
                return DENIED
            timeout = agent.config.shell_timeout
            with trio.move_on_after(timeout) as waited:
                # In a process group of its own that dies with the call and with its runner.
                proc = await run_tool(
                    ["sh", "-c", command],
                    cwd=agent.config.workdir,
                    ledger=agent.config.tool_ledger,
                )
            if waited.cancelled_caught:
                raise ToolError(f"the command ran longer than {timeout:g}s: {shown}")
            output, code = proc.output, proc.returncode
        text = output.decode("utf-8", "replace")
        return f"{text}[exit status {code}]"

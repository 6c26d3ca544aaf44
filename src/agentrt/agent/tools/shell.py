"""The `shell` tool: a command in the working directory, in the sandbox, after a confirmation."""

from __future__ import annotations

from typing import ClassVar

import trio

from ...core.policy import Command
from ...models.messages import ToolCall
from ...vocab.clamp import clamp
from ...vocab.reprs import record
from ..sandbox import refusal_note
from ..toolproc import run_tool
from .base import DENIED
from .base import PROMPT_LIMIT
from .base import Tool
from .base import ToolError
from .base import ToolRun
from .base import check_confinable
from .base import confine
from .base import confirmed
from .base import via_sudo


@record
class Shell(Tool):
    """``shell``: its output and exit status; through sudo when it names a restricted path.

    The command runs in the sandbox (`agentrt.agent.sandbox`) whatever it says: the
    text is read only to ask early for the system password when it names a
    restricted path, and to refuse at once one that names agentrt's own state.
    """

    NAME: ClassVar = "shell"
    DESCRIPTION: ClassVar = (
        "Run a shell command in the working directory; returns its output and exit status. "
        "It runs in a sandbox: only the working directory and a private /tmp are writable."
    )
    RECORDS_START: ClassVar = True

    command: str

    async def run(self, agent: ToolRun, call: ToolCall) -> str:
        command = self.command
        config = agent.config
        check_confinable(agent)
        if config.text_guard:
            agent.check_command(command)
        shown = clamp(command, PROMPT_LIMIT)
        roots = agent.restricted_roots(command)
        if roots:
            prompt = f"run (restricted): {shown}"
            argv = confine(
                agent, ["sh", "-c", command], network=True, writable=roots, privileged=True
            )
            result = await via_sudo(agent, call, prompt, argv)
            if result is None:
                return DENIED
            output, code = result.output, result.returncode
        else:
            consent = await confirmed(agent, call, f"run: {shown}", Command(command))
            if consent is None:
                return DENIED
            argv = confine(agent, ["sh", "-c", command], network=consent.network(agent))
            timeout = config.shell_timeout
            with trio.move_on_after(timeout) as waited:
                # In a process group of its own that dies with the call and with its runner.
                proc = await run_tool(
                    argv, cwd=config.workdir, ledger=config.tool_ledger, env=config.tool_env
                )
            if waited.cancelled_caught:
                raise ToolError(f"the command ran longer than {timeout:g}s: {shown}")
            output, code = proc.output, proc.returncode
        text = output.decode("utf-8", "replace")
        note = None
        if config.sandbox.enforced:
            note = refusal_note(text, workdir=config.workdir, restricted=config.restricted_paths)
        return f"{text}[exit status {code}]" + (f"\n{note}" if note else "")

"""The `shell` tool: a command in the working directory, in the sandbox, after a confirmation."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import ClassVar
from typing import Final

import trio

from ...core.policy import Command
from ...models.messages import ToolCall
from ...vocab.clamp import clamp
from ...vocab.reprs import record
from ..checkpoint import Change
from ..checkpoint import Snapshot
from ..sandbox import refusal_note
from ..toolproc import run_tool
from .base import DENIED
from .base import PROMPT_LIMIT
from .base import Tool
from .base import ToolError
from .base import ToolRun
from .base import call_record
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
    RECORDS_START: ClassVar = True
    DESCRIPTION: ClassVar = (
        "Run a shell command in the working directory; returns its output and exit status. "
        "It runs in a sandbox: only the working directory and a private /tmp are writable."
    )

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
            # Through sudo its changes are not walked: an undo names the call and leaves its
            # files alone, and the question says so before it runs.
            unkept = _SUDO_UNKEPT if config.checkpoints is not None else None
            prompt = f"run (restricted): {shown}" + (
                f" (cannot be undone: {unkept})" if unkept else ""
            )
            argv = confine(
                agent, ["sh", "-c", command], network=True, writable=roots, privileged=True
            )
            result = await via_sudo(agent, call, prompt, argv)
            if result is None:
                return DENIED
            if unkept is not None:
                await _record(agent, call, unkept)
            output, code = result.output, result.returncode
        else:
            before = await _keep_before(agent)
            why = before if isinstance(before, str) else None
            prompt = f"run: {shown}" + (f" (cannot be undone: {why})" if why else "")
            consent = await confirmed(agent, call, prompt, Command(command))
            if consent is None:
                return DENIED
            if consent.asked and before is not None:
                before = await _keep_before(agent)  # what the person changed meanwhile too
            argv = confine(agent, ["sh", "-c", command], network=consent.network(agent))
            timeout = config.shell_timeout
            async with _checkpointed(agent, call, before):
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


#: Why a restricted command cannot be undone (said in its question, kept with its call).
_SUDO_UNKEPT: Final = "it runs through sudo, and its changes are not checkpointed"


async def _keep_before(agent: ToolRun) -> Snapshot | str | None:
    """The working folder before the command, its changed files kept; or why it cannot be
    undone (said in its confirmation); None without checkpoints."""
    config = agent.config
    checkpoints = config.checkpoints
    if checkpoints is None:
        return None
    agent.asks_nothing()  # the walk may take long; the question comes after it
    quiet = checkpoints.before_nowait(config.workdir, config.hidden_paths)
    if quiet is not None:
        await trio.lowlevel.checkpoint()
        return quiet
    return await trio.to_thread.run_sync(checkpoints.before, config.workdir, config.hidden_paths)


@asynccontextmanager
async def _checkpointed(
    agent: ToolRun, call: ToolCall, before: Snapshot | str | None
) -> AsyncIterator[None]:
    """Record what the command changed since `before`, however it ends.

    A timeout, a cancel or an error records it too, so a stopped run's changes
    can be undone (`agentrt.agent.checkpoint`).
    """
    if agent.config.checkpoints is None or before is None:
        yield
        return
    try:
        yield
    finally:
        with trio.CancelScope(shield=True):
            await _record(agent, call, before)


async def _record(agent: ToolRun, call: ToolCall, before: Snapshot | str) -> None:
    """Record what the command changed since `before` (or why it cannot be undone)."""
    config = agent.config
    checkpoints = config.checkpoints
    assert checkpoints is not None
    workdir, skip = config.workdir, config.hidden_paths

    def walk_and_record(changes: tuple[Change, ...] | None) -> None:
        # The walk and the record in one trip to a thread (or none: see `after_nowait`).
        why = None
        if isinstance(before, str):
            changes, why = (), before
        elif changes is None:
            changes = checkpoints.after(workdir, skip, before)
        if changes or why:
            checkpoints.record(call_record(agent, call, changes, why))

    if isinstance(before, Snapshot):
        changes = checkpoints.after_nowait(workdir, skip, before)
        if changes is not None:
            walk_and_record(changes)
            await trio.lowlevel.checkpoint()
            return
    await trio.to_thread.run_sync(walk_and_record, None)

"""Tools on files: `read_file` and `write_file`, in the sandbox, through sudo for a restricted path.

A write replaces the file atomically (`agentrt.agent.atomic`): a kill at any moment
leaves the old content or the new. With the sandbox in force both tools run
their work in a sandboxed helper process, so the kernel, not the spelling of
the path, keeps them out of agentrt's own files and off restricted paths.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import ClassVar
from typing import Final

import trio

from ...core.policy import Edit
from ...models.messages import ToolCall
from ...vocab.reprs import record
from .. import atomic as _atomic
from ..atomic import ERROR_PREFIX
from ..atomic import EXIT_OS_ERROR
from ..atomic import write_atomic
from ..guard import inside
from ..sandbox import refusal_note
from ..toolproc import ToolOutput
from ..toolproc import run_tool
from .base import DENIED
from .base import Tool
from .base import ToolError
from .base import ToolRun
from .base import check_confinable
from .base import confine
from .base import confirmed
from .base import sudo_output
from .base import via_sudo

#: The script the write helper runs (standard library only; see `agentrt.agent.atomic`).
_WRITER: Final = str(Path(_atomic.__file__).resolve())


def _writer(path: Path) -> list[str]:
    return [sys.executable, "-I", "-S", _WRITER, str(path)]


def _write_failure(agent: ToolRun, path: Path, result: ToolOutput) -> ToolError:
    """The error of a write helper that failed, in the words a direct write would give."""
    said = result.output.decode("utf-8", "replace").strip()
    reason = said
    if result.returncode == EXIT_OS_ERROR and said.startswith(ERROR_PREFIX):
        reason = said.split(":", 3)[2]
    message = f"cannot write {path}: {reason or f'exit status {result.returncode}'}"
    config = agent.config
    note = refusal_note(
        f"{path}: {reason}", workdir=config.workdir, restricted=config.restricted_paths
    )
    return ToolError(f"{message} {note}" if note else message)


@record
class WriteFile(Tool):
    """``write_file``: after a confirmation (with the system password on a restricted path)."""

    NAME: ClassVar = "write_file"
    DESCRIPTION: ClassVar = (
        "Write text to a file (relative paths are inside the working directory)."
    )
    RECORDS_START: ClassVar = True

    path: str
    content: str

    async def run(self, agent: ToolRun, call: ToolCall) -> str:
        config = agent.config
        check_confinable(agent)
        path = agent.resolve(self.path)
        data = self.content.encode("utf-8", "surrogatepass")
        root = inside(path, config.restricted_paths) if config.text_guard else None
        if root is not None:
            prompt = f"write {len(data)} bytes to {path} (restricted)"
            argv = confine(agent, _writer(path), network=False, writable=(root,), privileged=True)
            result = await via_sudo(agent, call, prompt, argv, stdin=data)
            if result is None:
                return DENIED
            if result.returncode != 0:
                raise _write_failure(agent, path, ToolOutput(result.returncode, result.output))
            return f"wrote {len(data)} bytes to {path} (via sudo)"
        if config.text_guard and config.sandbox.enforced and not inside(path, (config.workdir,)):
            # The sandbox would refuse it anyway; say why before asking anyone.
            raise ToolError(
                f"refused: {path} is outside the working folder ({config.workdir}); the "
                "sandbox lets tools write only there and in a private /tmp"
            )
        if await confirmed(agent, call, f"write {len(data)} bytes to {path}", Edit(path)) is None:
            return DENIED
        if config.sandbox.enforced:
            argv = confine(agent, _writer(path), network=False)
            done = await run_tool(
                argv, cwd=config.workdir, stdin=data, ledger=config.tool_ledger, env=config.tool_env
            )
            if done.returncode != 0:
                raise _write_failure(agent, path, done)
            return f"wrote {len(data)} bytes to {path}"
        try:
            await trio.to_thread.run_sync(write_atomic, str(path), data)
        except OSError as exc:
            raise ToolError(f"cannot write {path}: {exc.strerror or exc}") from None
        return f"wrote {len(data)} bytes to {path}"


@record
class ReadFile(Tool):
    """``read_file``: no confirmation, except the system password on a restricted path."""

    NAME: ClassVar = "read_file"
    DESCRIPTION: ClassVar = "Read a text file."

    path: str

    async def run(self, agent: ToolRun, call: ToolCall) -> str:
        config = agent.config
        check_confinable(agent)
        path = agent.resolve(self.path)
        if config.text_guard and agent.is_restricted(path):
            prompt = f"read {path} (restricted)"
            argv = confine(agent, ["cat", "--", str(path)], network=False, privileged=True)
            result = await via_sudo(agent, call, prompt, argv, effect=False)
            if result is None:
                return DENIED
            return sudo_output(result, f"cat {path}").decode("utf-8", "replace")
        agent.asks_nothing()  # a read may take long (a slow disk, a pipe)
        if config.sandbox.enforced:
            argv = confine(agent, ["cat", "--", str(path)], network=False)
            out = await run_tool(
                argv, cwd=config.workdir, ledger=config.tool_ledger, env=config.tool_env
            )
            if out.returncode != 0:
                said = out.output.decode("utf-8", "replace").strip()
                reason = said.rpartition(": ")[2] or f"exit status {out.returncode}"
                raise ToolError(f"cannot read {path}: {reason}")
            data = out.output
        else:
            try:
                data = await trio.to_thread.run_sync(path.read_bytes)
            except OSError as exc:
                raise ToolError(f"cannot read {path}: {exc.strerror or exc}") from None
        # A non-UTF-8 file is shown with replacement characters rather than failing the run.
        return data.decode("utf-8", "replace")

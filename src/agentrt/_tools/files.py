"""Tools on files: `read_file` and `write_file`, through sudo for a restricted path."""

from __future__ import annotations

from typing import ClassVar

import attrs
import trio

from .._messages import ToolCall
from .._policy import Edit
from .._reprs import fields_eq, fields_hash, fields_repr
from ._base import DENIED, Tool, ToolError, ToolRun, confirmed, sudo_output, via_sudo


@attrs.frozen
class WriteFile(Tool):
    """``write_file``: after a confirmation (with the system password on a restricted path)."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    NAME: ClassVar = "write_file"
    DESCRIPTION: ClassVar = (
        "Write text to a file (relative paths are inside the working directory)."
    )

    path: str
    content: str

    async def run(self, agent: ToolRun, call: ToolCall) -> str:
        path = agent.resolve(self.path)
        data = self.content.encode("utf-8", "surrogatepass")
        if agent.is_restricted(path):
            prompt = f"write {len(data)} bytes to {path} (restricted)"
            result = await via_sudo(agent, call, prompt, ["tee", str(path)], stdin=data)
            if result is None:
                return DENIED
            sudo_output(result, f"tee {path}")
            return f"wrote {len(data)} bytes to {path} (via sudo)"
        if not await confirmed(agent, call, f"write {len(data)} bytes to {path}", Edit(path)):
            return DENIED

        def write() -> None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)

        try:
            await trio.to_thread.run_sync(write)
        except OSError as exc:
            raise ToolError(f"cannot write {path}: {exc.strerror or exc}") from None
        return f"wrote {len(data)} bytes to {path}"


@attrs.frozen
class ReadFile(Tool):
    """``read_file``: no confirmation, except the system password on a restricted path."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    NAME: ClassVar = "read_file"
    DESCRIPTION: ClassVar = "Read a text file."

    path: str

    async def run(self, agent: ToolRun, call: ToolCall) -> str:
        path = agent.resolve(self.path)
        if agent.is_restricted(path):
            prompt = f"read {path} (restricted)"
            result = await via_sudo(agent, call, prompt, ["cat", str(path)], effect=False)
            if result is None:
                return DENIED
            return sudo_output(result, f"cat {path}").decode("utf-8", "replace")
        try:
            data = await trio.to_thread.run_sync(path.read_bytes)
        except OSError as exc:
            raise ToolError(f"cannot read {path}: {exc.strerror or exc}") from None
        # A non-UTF-8 file is shown with replacement characters rather than failing the run.
        return data.decode("utf-8", "replace")

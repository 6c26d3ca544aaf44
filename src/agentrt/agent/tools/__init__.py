"""The tools a run offers its model, each declared once (see `agentrt.agent.tools.base`).

====================  ======================================================
tool                  what it does
====================  ======================================================
``ask_user``          asks the human (inline from a terminal, else parks)
``write_file``        writes a file, after a confirmation showing the diff (unless the
                      approval policy lets it run: ``auto-edit`` in the working folder,
                      ``full-auto``)
``edit_file``         replaces an exact piece of a file's text, confirmed as ``write_file``
``read_file``         reads a file, or a range of its lines (bounded)
``list_dir``          lists a folder, less what ``.gitignore`` ignores (bounded)
``glob``              finds files by a gitignore-style pattern (bounded)
``grep``              searches file contents with ripgrep, or Python without it (bounded)
``shell``             runs a shell command, after a confirmation (unless ``full-auto``)
``store_secret``      asks for a secret in a masked field and stores it
``spawn``             runs a task in an in-process subagent
``sleep``, ``big``    for trying the runtime out; offered to script players only
====================  ======================================================

A path under a restricted folder needs the system password instead of a plain
confirmation (`via_sudo`), and no tool reaches the agent's own state. The tools
that only read (``read_file``, ``list_dir``, ``glob``, ``grep``) are never
confirmed, under any approval policy.
"""

from __future__ import annotations

import functools
from typing import Final

from ...models.messages import ToolSpec
from ...models.scripted import ReplayModel
from ...models.scripted import ScriptedModel
from .base import QuestionParked as QuestionParked
from .base import Tool as Tool
from .base import ToolDenied as ToolDenied
from .base import ToolError as ToolError
from .base import ToolRefused as ToolRefused
from .base import ToolRun as ToolRun
from .files import EditFile
from .files import ReadFile
from .files import WriteFile
from .human import AskUser
from .human import StoreSecret
from .search import Glob
from .search import Grep
from .search import ListDir
from .shell import Shell
from .spawn import Spawn
from .testing import Big
from .testing import Sleep

#: Every tool, by name, in the order the model is offered them.
TOOLS: Final[dict[str, type[Tool]]] = {
    tool.NAME: tool
    for tool in (
        AskUser,
        WriteFile,
        EditFile,
        ReadFile,
        ListDir,
        Glob,
        Grep,
        Shell,
        StoreSecret,
        Sleep,
        Big,
        Spawn,
    )
}


def offered_to(model: object) -> tuple[ToolSpec, ...]:
    """The tools `model` is offered: the testing ones only to a model that plays scripts.

    A call is run whoever made it (`find`): a task started with the scripted
    model and resumed with another still runs its saved ``sleep`` call.
    """
    return _offered(isinstance(model, ScriptedModel | ReplayModel))


@functools.cache
def _offered(plays_scripts: bool) -> tuple[ToolSpec, ...]:
    """`offered_to`'s answer, made once for each kind of model (every run asks it)."""
    return tuple(tool.spec() for tool in TOOLS.values() if plays_scripts or not tool.TESTING)


def find(name: str) -> type[Tool]:
    """The tool called `name`, or `ToolError` listing the tools."""
    tool = TOOLS.get(name)
    if tool is None:
        raise ToolError(f"unknown tool {name!r}; the tools are: {', '.join(TOOLS)}")
    return tool


def records_start(name: str) -> bool:
    """Whether the tool called `name` records its start before it takes effect (`RECORDS_START`).

    False for a name no tool has: what such a call did cannot be known.
    """
    tool = TOOLS.get(name)
    return tool is not None and tool.RECORDS_START

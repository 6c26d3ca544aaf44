"""How runs behave: the configuration the agent loop and its tools share."""

from __future__ import annotations

import os
from collections.abc import Iterable
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from ..config.prices import Prices
from ..config.secrets import SecretStore
from ..vocab.clamp import PREVIEW_BYTES
from ..vocab.locations import StrPath
from ..vocab.questions import Timeouts
from ..vocab.reprs import record
from ..vocab.terms import Approval
from .checkpoint import Checkpoints
from .compaction import ContextLimits
from .guard import Redactor
from .sandbox import Sandbox
from .sandbox import tool_environment
from .sudo import SudoVerifier
from .sudo import Verifier
from .toolproc import ToolLedger

if TYPE_CHECKING:
    from .mcp import McpClients


def _paths(paths: Iterable[StrPath]) -> tuple[Path, ...]:
    """Paths given as `str` or `os.PathLike`, as `Path`s."""
    return tuple(Path(p) for p in paths)


@record
class AgentConfig:
    """How runs behave: where tools work, which paths are restricted, what runs unasked, limits."""

    workdir: Path = attrs.field(converter=Path)
    secrets: SecretStore
    restricted_paths: tuple[Path, ...] = attrs.field(default=(), converter=_paths)
    verifier: Verifier = attrs.field(factory=SudoVerifier)
    max_rounds: int = 32
    #: Bytes of a tool result shown in a `ToolResultEvent` preview.
    preview_bytes: int = PREVIEW_BYTES
    shell_timeout: float = 300.0
    #: The agent's own state (state dir, socket folder): no tool may read or write inside.
    protected_paths: tuple[Path, ...] = attrs.field(default=(), converter=_paths)
    #: Hides stored secret values in tool output and model text (default: the secret store's).
    redactor: Redactor = attrs.field(
        default=attrs.Factory(lambda self: Redactor(self.secrets.path), takes_self=True)
    )
    #: Where running tool process groups are recorded, so a restart can reap orphans.
    tool_ledger: ToolLedger | None = None
    #: Where what each call changes is kept, so a run's file changes can be undone
    #: (`agentrt.agent.checkpoint`); None keeps nothing.
    checkpoints: Checkpoints | None = None
    #: Which file writes and shell commands run without a confirmation.
    approval: Approval = Approval.ASK
    #: agentrt's own configuration: a write or command touching it is confirmed under
    #: every approval policy (it could change the policy itself).
    guarded_paths: tuple[Path, ...] = ()
    #: How tool processes are confined (`agentrt.agent.sandbox`); found on this machine by default.
    sandbox: Sandbox = attrs.field(factory=Sandbox.detect)
    #: The environment tool processes get: the runner's less every credential.
    tool_env: Mapping[str, str] = attrs.field(factory=lambda: tool_environment(os.environ))
    #: The early, friendly checks that read a command's text and a path's spelling (a
    #: restricted path asks for the password, agentrt's own files are refused before
    #: anything runs). They are conveniences: the sandbox holds without them.
    text_guard: bool = True
    #: How long each kind of question waits for its person, and what happens then.
    timeouts: Timeouts = Timeouts()
    #: The configuration's words for the model (``instructions``), in every run's system prompt.
    instructions: str = ""
    #: A file whose text follows `instructions` there (``instructions_file``), read at each run.
    instructions_file: Path | None = None
    #: The MCP servers whose tools every model is offered (`agentrt.agent.mcp`), if any.
    mcp: McpClients | None = None
    #: Each model's context window, and the share of it a request may fill before the
    #: conversation is compacted (`agentrt.agent.compaction`).
    context: ContextLimits = ContextLimits()
    #: What each model's tokens cost (``[prices]`` over the defaults).
    prices: Prices = Prices()

    @property
    def hidden_paths(self) -> tuple[Path, ...]:
        """What no tool process may see: agentrt's state, socket and configuration."""
        return (*self.protected_paths, *self.guarded_paths)

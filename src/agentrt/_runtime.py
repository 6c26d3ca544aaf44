"""Everything a process needs to run agents, opened and closed together."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import attrs

from ._config import AgentConfig
from ._executor import Executor
from ._guard import Redactor
from ._locations import HTTP_TOKEN_FILE as HTTP_TOKEN_FILE
from ._locations import default_socket_path
from ._locations import default_state_dir as default_state_dir
from ._messages import Model
from ._pending import Registry
from ._policy import AccessPolicy
from ._scripted import ReplayModel, ScriptedModel
from ._secrets import SecretStore
from ._statedir import prepare_state_dir
from ._store import TaskStore
from ._sudo import SudoVerifier, Verifier
from ._toolproc import ToolLedger

#: Paths that need the system password by default.
DEFAULT_RESTRICTED = ("/etc", "/usr", "/boot")


def default_restricted() -> tuple[Path, ...]:
    """`$AGENTRT_RESTRICTED` (colon-separated) or `DEFAULT_RESTRICTED`."""
    raw = os.environ.get("AGENTRT_RESTRICTED")
    paths = raw.split(":") if raw is not None else DEFAULT_RESTRICTED
    return tuple(Path(p).resolve() for p in paths if p)


def _protected(state_dir: Path, extra: Sequence[Path]) -> tuple[Path, ...]:
    """The agent's own folders, resolved: no tool may read or write inside them."""
    socket = default_socket_path()
    # The default socket lives in a folder of its own; a socket placed by hand (AGENTRT_SOCKET)
    # may sit among the user's files, so only the socket itself is off-limits then.
    dedicated = "AGENTRT_SOCKET" not in os.environ
    folders = [state_dir, socket.parent if dedicated else socket, *extra]
    return tuple(dict.fromkeys(Path(f).resolve() for f in folders))


def make_model(
    spec: str, *, base_url: str | None = None, secrets: SecretStore | None = None
) -> Model:
    """A model from its spec: ``scripted``, ``replay:PATH``, ``openai:NAME``, ``anthropic:NAME``
    or ``azure:DEPLOYMENT``.

    Raises ValueError with the accepted forms for anything else.
    """
    check_model_spec(spec)
    if spec == "scripted":
        return ScriptedModel()
    if spec.startswith("replay:"):
        return ReplayModel.from_file(spec.removeprefix("replay:"))
    if spec.startswith(("openai:", "anthropic:", "azure:")):
        from .providers import make_model as make_provider_model

        return make_provider_model(spec, base_url=base_url, secrets=secrets)
    raise AssertionError(spec)  # pragma: no cover  (check_model_spec let it through)


def check_model_spec(spec: str) -> str:
    """Return `spec` if it has one of the model forms; raise ValueError naming them if not."""
    if spec == "scripted" or spec.startswith(("replay:", "openai:", "anthropic:", "azure:")):
        return spec
    raise ValueError(
        f"unknown model {spec!r}; use 'scripted', 'replay:PATH', 'openai:NAME', 'anthropic:NAME'"
        " or 'azure:DEPLOYMENT'"
    )


@attrs.frozen
class Runtime:
    """The registry, store, secrets and executor of one process."""

    state_dir: Path
    registry: Registry
    store: TaskStore
    secrets: SecretStore
    executor: Executor
    model: Model
    #: Who may act on which session, for every front-end (see `agentrt._policy`).
    policy: AccessPolicy = attrs.field(factory=AccessPolicy)


@asynccontextmanager
async def open_runtime(
    state_dir: Path | None = None,
    model_spec: str = "scripted",
    *,
    model: Model | None = None,
    workdir: Path | None = None,
    restricted_paths: Sequence[Path] | None = None,
    verifier: Verifier | None = None,
    base_url: str | None = None,
    protected_paths: Sequence[Path] = (),
) -> AsyncIterator[Runtime]:
    """Open the task store and secrets under `state_dir` and build an executor.

    `model` overrides `model_spec`. The store is closed on exit. Tools may
    never read or write the state directory, the default daemon socket's
    folder, or any of `protected_paths`. A state dir that others may enter is
    tightened to 0700; one of another user is refused (`StateDirError`). Tool
    process groups that a runner which has died left running are killed first.
    """
    state_dir = Path(state_dir) if state_dir is not None else default_state_dir()
    prepare_state_dir(state_dir)
    secrets = SecretStore(state_dir / "secrets")
    if model is None:
        model = make_model(model_spec, base_url=base_url, secrets=secrets)
    # Tool processes a dead runner left behind must not go on to finish a call the resume
    # will run again.
    ledger = ToolLedger(state_dir / "tools")
    ledger.reap()
    store = await TaskStore.open(state_dir / "tasks.db")
    try:
        config = AgentConfig(
            workdir=(workdir or Path.cwd()).resolve(),
            secrets=secrets,
            restricted_paths=tuple(restricted_paths)
            if restricted_paths is not None
            else default_restricted(),
            verifier=verifier or SudoVerifier(ledger=ledger),
            protected_paths=_protected(state_dir, protected_paths),
            redactor=Redactor.for_state_dir(state_dir),
            tool_ledger=ledger,
        )
        registry = Registry()
        executor = Executor(registry=registry, store=store, model=model, config=config)
        yield Runtime(state_dir, registry, store, secrets, executor, model)
    finally:
        await store.aclose()

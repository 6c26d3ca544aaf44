"""Everything a process needs to run agents, opened and closed together."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import AsyncIterator
from collections.abc import Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import attrs
import trio

from ..agent.checkpoint import Checkpoints
from ..agent.compaction import ContextLimits
from ..agent.config import AgentConfig
from ..agent.guard import Redactor
from ..agent.prompt import PromptSettings
from ..agent.prompt import SystemPrompt
from ..agent.prompt import build_prompt
from ..agent.sandbox import Sandbox
from ..agent.sandbox import holds_home
from ..agent.sandbox import tool_environment
from ..agent.sudo import SudoVerifier
from ..agent.sudo import Verifier
from ..agent.toolproc import ToolLedger
from ..agent.tools import offered_to
from ..config.keystore import KeyStore
from ..config.prices import Prices
from ..config.secrets import SecretStore
from ..config.settings import DEFAULT_RESTRICTED as DEFAULT_RESTRICTED
from ..config.settings import Settings
from ..config.settings import check_base_url
from ..config.settings import check_model_spec as check_model_spec
from ..config.settings import find_api_key
from ..config.settings import model_options
from ..config.statedir import prepare_state_dir
from ..models.catalog import ModelCatalog
from ..models.messages import Model
from ..models.scripted import ReplayModel
from ..models.scripted import ScriptedModel
from ..store import Store
from ..store import is_postgres
from ..store import open_store
from ..vocab.locations import HTTP_TOKEN_FILE as HTTP_TOKEN_FILE
from ..vocab.locations import StrPath
from ..vocab.locations import default_socket_path
from ..vocab.locations import default_state_dir as default_state_dir
from ..vocab.questions import Timeouts
from ..vocab.reprs import record
from ..vocab.terms import Approval
from .executor import Executor
from .pending import Registry
from .policy import AccessPolicy

if TYPE_CHECKING:
    from ..agent.mcp import McpClients
    from ..fleet.member import Fleet
    from ..models.options import ModelOptions


class SandboxMissingError(ValueError):
    """``full-auto`` was asked for where no sandbox can be had."""


#: Whether this process has said that no sandbox could be had (it says so once).
_told_missing = False


def _tell_missing(sandbox: Sandbox) -> None:
    global _told_missing
    if _told_missing:
        return
    _told_missing = True
    print(
        f"agentrt: warning: no sandbox for tools: {sandbox.why}; every command and file write "
        "is confirmed, and full-auto is refused (see docs/security.md)",
        file=sys.stderr,
    )


#: Whether this process has said that a working folder holds the home folder (it says so once).
_told_home = False


def _tell_home(folder: Path) -> None:
    """Say, once, that tools may make new startup files when `folder` holds the home folder."""
    global _told_home
    if _told_home or not holds_home(folder):
        return
    _told_home = True
    print(
        f"agentrt: warning: the working folder {folder} holds your home folder: tools may "
        "change what is in it; the startup files there (~/.bashrc, ~/.profile, ~/.gitconfig, "
        "~/.ssh...) are read-only to them, but one that does not exist yet (~/.bash_profile, "
        "say) can be made; start agentrt in a project's folder (see docs/security.md)",
        file=sys.stderr,
    )


def check_sandbox(sandbox: Sandbox, approval: Approval) -> None:
    """Refuse `approval` ``full-auto`` without a sandbox (`SandboxMissingError`)."""
    if sandbox.missing and approval is Approval.FULL_AUTO:
        raise SandboxMissingError(
            f"--approval full-auto needs the sandbox, and there is none: {sandbox.why}; "
            "install bubblewrap, or use --approval ask or auto-edit (or, knowing that tools "
            "then run with your full access, --sandbox off)"
        )


def _secret_values(settings: Settings | None, state_dir: Path) -> tuple[list[str], list[str]]:
    """The variables (by name) and values a tool's environment must never hold."""
    names: list[str] = []
    values: list[str] = []
    if settings is not None:
        for provider in settings.providers.values():
            names.append(provider.api_key_env.value)
            values.append(provider.api_key.value or "")
        for bot in settings.bots.values():
            names.append(bot.token_env.value)
            values.append(bot.token.value or "")
    keys = KeyStore.for_state_dir(state_dir)
    with contextlib.suppress(OSError, ValueError):
        values += [keys.get(name) or "" for name in keys.names()]
    return names, values


def _tool_env(settings: Settings | None, state_dir: Path) -> dict[str, str]:
    names, values = _secret_values(settings, state_dir)
    return tool_environment(os.environ, names=names, values=values)


def default_restricted() -> tuple[Path, ...]:
    """`$AGENTRT_RESTRICTED` (colon-separated) or `DEFAULT_RESTRICTED`."""
    raw = os.environ.get("AGENTRT_RESTRICTED")
    paths = raw.split(":") if raw is not None else DEFAULT_RESTRICTED
    return tuple(Path(p).expanduser().resolve() for p in paths if p)


def _protected(state_dir: Path, extra: Sequence[Path]) -> tuple[Path, ...]:
    """The agent's own folders, resolved: no tool may read or write inside them."""
    socket = default_socket_path()
    # The default socket lives in a folder of its own; a socket placed by hand (AGENTRT_SOCKET)
    # may sit among the user's files, so only the socket itself is off-limits then.
    dedicated = "AGENTRT_SOCKET" not in os.environ
    folders = [state_dir, socket.parent if dedicated else socket, *extra]
    return tuple(dict.fromkeys(Path(f).resolve() for f in folders))


def make_model(
    spec: str,
    *,
    base_url: str | None = None,
    secrets: SecretStore | None = None,
    options: ModelOptions | None = None,
) -> Model:
    """A model from its spec: ``scripted``, ``replay:PATH``, ``openai:NAME``, ``anthropic:NAME``
    or ``azure:DEPLOYMENT``.

    An ``openai:`` or ``anthropic:`` model is a `agentrt.providers.ConfiguredModel`
    built with `options`: its key is read at each request from the variable
    ``options.api_key_env`` names (default ``OPENAI_API_KEY`` /
    ``ANTHROPIC_API_KEY``), else the key store and secret store beside
    `secrets`. Its base URL is `base_url`, else ``options.base_url``, else
    ``OPENAI_BASE_URL`` / ``ANTHROPIC_BASE_URL``, else the hosted API's.

    Raises ValueError with the accepted forms for an unknown spec, and for a
    base URL that is not an http(s) URL.
    """
    check_model_spec(spec)
    if spec == "scripted":
        return ScriptedModel()
    if spec.startswith("replay:"):
        return ReplayModel.from_file(spec.removeprefix("replay:"))
    if spec.startswith("azure:"):
        # An Azure deployment: its endpoint is the base URL, and it is required.
        from ..models.providers import make_model as make_provider_model

        return make_provider_model(
            spec, base_url=base_url or (options.base_url if options else None), secrets=secrets
        )
    from ..models.options import ModelOptions as Options
    from ..models.providers import ConfiguredModel

    provider, _, name = spec.partition(":")
    options = options or Options()
    url = base_url or options.base_url
    url = url or os.environ.get(f"{provider.upper()}_BASE_URL", "").strip() or None
    if url is not None:
        check_base_url(url)
    options = attrs.evolve(options, base_url=url)
    state_dir = secrets.path.parent if secrets is not None else None
    variable = options.api_key_env or f"{provider.upper()}_API_KEY"

    def find_key() -> str | None:
        if state_dir is None:
            return os.environ.get(variable, "").strip() or None
        return find_api_key(provider, variable, state_dir).value

    return ConfiguredModel(provider, name.strip(), options, find_key)


def _restricted_of(settings: Settings) -> list[Path]:
    return [p.resolve() for p in settings.restricted_paths.value]


def run_prompt(settings: Settings, *, workdir: Path | str | None = None) -> SystemPrompt:
    """The system prompt a run would send now with `settings`, its tools working in `workdir`
    (default: the current folder): what ``agentrt config show --prompt`` prints.

    The model, the sandbox and the run's configuration are made as `open_runtime`
    makes them from `settings`; no store is opened and nothing is written. Raises
    what a run would (`SandboxMissingError` for ``full-auto`` without a sandbox, a
    ValueError for a model that cannot be built).
    """
    sandbox = Sandbox.detect(settings.sandbox.value, network=settings.sandbox_network.value)
    approval = settings.approval.value
    check_sandbox(sandbox, approval)
    model = make_model(settings.check_model(), options=model_options(settings))
    folder = Path(workdir) if workdir is not None else Path.cwd()
    config = PromptSettings(
        workdir=folder.resolve(),
        approval=approval,
        sandbox=sandbox,
        restricted_paths=tuple(_restricted_of(settings)),
        instructions=settings.instructions.value or "",
        instructions_file=settings.instructions_file.value,
        hidden_paths=(
            *_protected(settings.state_dir.value, []),
            *(p.resolve() for p in settings.guarded_paths),
        ),
    )
    return build_prompt(config, offered_to(model))


@record
class Runtime:
    """The registry, store, secrets and executor of one process."""

    state_dir: Path
    registry: Registry
    store: Store
    secrets: SecretStore
    executor: Executor
    model: Model
    #: Who may act on which session, for every front-end (see `agentrt.core.policy`).
    policy: AccessPolicy = attrs.field(factory=AccessPolicy)
    #: This process's part in a fleet of daemons, when the store is PostgreSQL.
    fleet: Fleet | None = None


def _store_in(state_dir: Path, store: StrPath | None) -> StrPath:
    """Where the task store is: `store` (a PostgreSQL URL or a file), else the state dir's file."""
    return store if store is not None else state_dir / "tasks.db"


@asynccontextmanager
async def open_settings_store(settings: Settings) -> AsyncIterator[Store]:
    """The task store `settings` name, opened alone, as `open_runtime` opens it.

    For a command that only reads the store (a listing, a task shown): none of the
    rest of a runtime (no sandbox probed, no MCP server started, no tool process
    reaped, no interrupted undo finished, no model made).
    """
    state_dir = Path(settings.state_dir.value)
    prepare_state_dir(state_dir)
    store = await open_store(_store_in(state_dir, settings.store.value), lease=settings.lease.value)
    try:
        yield store
    finally:
        await store.aclose()


@asynccontextmanager
async def open_runtime(
    state_dir: StrPath | None = None,
    model_spec: str = "scripted",
    *,
    model: Model | None = None,
    models: Sequence[str] | None = None,
    workdir: StrPath | None = None,
    restricted_paths: Sequence[StrPath] | None = None,
    verifier: Verifier | None = None,
    base_url: str | None = None,
    protected_paths: Sequence[StrPath] = (),
    settings: Settings | None = None,
    approval: Approval | None = None,
    store: StrPath | None = None,
    http: str | None = None,
    lease: float | None = None,
    sandbox: Sandbox | None = None,
    timeouts: Timeouts | None = None,
    instructions: str | None = None,
    instructions_file: StrPath | None = None,
    context: ContextLimits | None = None,
) -> AsyncIterator[Runtime]:
    """Open the task store and secrets under `state_dir` and build an executor.

    The store is `store` (a ``postgresql://`` URL, or an SQLite file), else
    the settings', else ``tasks.db`` in the state dir. On PostgreSQL the
    process joins the fleet of daemons sharing it (`agentrt.fleet.member`) for as
    long as the runtime is open, with a lease of `lease` seconds (else the
    settings', else 10); `http` is the address it serves, for ``agentrt fleet
    status``.

    `model` overrides `model_spec`. `models` (else the settings' ``models`` list)
    names the other models a session may be switched to, each made when first
    used (`agentrt.models.catalog`). With `settings`
    (`agentrt.config.settings.load_settings`), the state dir, model, provider
    options, restricted paths and approval policy come from them, unless given
    here. The store is closed on exit. Tools may
    never read or write the state directory, the default daemon socket's
    folder, the store's own files or its local server's sockets
    (`Store.private_paths`), or any of `protected_paths`. A state dir that others may enter is
    tightened to 0700; one of another user is refused (`StateDirError`). Tool
    process groups that a runner which has died left running are killed first.

    Tool processes run in `sandbox` (else the settings' mode, found on this
    machine; see `agentrt.agent.sandbox`), with an environment that holds no
    credential. Where no sandbox can be had this says so once on standard
    error, and ``full-auto`` is refused (`SandboxMissingError`).

    Questions wait for their person as `timeouts` says (else the settings'
    ``[timeouts]``, else for ever). The conversation is compacted as `context`
    says (else the settings' ``compact_at`` and ``[context_windows]``, else the
    known families' windows and 85 %).

    Every model request starts with the run's system prompt (`agentrt.agent.prompt`),
    which ends with `instructions` and the text of `instructions_file` (else the
    settings' ``instructions`` and ``instructions_file``).

    Every path may be given as a `str` or any `os.PathLike` (a `Path`, say).
    """
    options: ModelOptions | None = None
    guarded: tuple[Path, ...] = ()
    if sandbox is None:
        sandbox = (
            Sandbox.detect(settings.sandbox.value, network=settings.sandbox_network.value)
            if settings is not None
            else Sandbox.detect()
        )
    if settings is not None:
        state_dir = state_dir if state_dir is not None else settings.state_dir.value
        model_spec = settings.model.value
        options = model_options(settings)
        if models is None:
            models = settings.models.value
        if restricted_paths is None:
            restricted_paths = _restricted_of(settings)
        approval = approval if approval is not None else settings.approval.value
        guarded = tuple(p.resolve() for p in settings.guarded_paths)
        if store is None and settings.store.value is not None:
            store = settings.store.value
        if lease is None:
            lease = settings.lease.value
        if timeouts is None:
            timeouts = settings.timeouts
        if instructions is None:
            instructions = settings.instructions.value
        if instructions_file is None:
            instructions_file = settings.instructions_file.value
    state_dir = Path(state_dir) if state_dir is not None else default_state_dir()
    folder = Path(workdir) if workdir is not None else Path.cwd()
    check_sandbox(sandbox, approval if approval is not None else Approval.ASK)
    if sandbox.missing:
        _tell_missing(sandbox)
    elif sandbox.enforced:
        _tell_home(folder)
    prepare_state_dir(state_dir)
    secrets = SecretStore(state_dir / "secrets")
    default = model.name if model is not None else model_spec
    if model is None:
        model = make_model(model_spec, base_url=base_url, secrets=secrets, options=options)

    def make_other(spec: str) -> Model:
        # The command line's base URL is the default model's alone.
        other = model_options(settings, spec) if settings is not None else None
        return make_model(spec, secrets=secrets, options=other)

    for spec in models or ():
        check_model_spec(spec)
    catalog = ModelCatalog.of(model, default, tuple(models or ()), make_other)
    # Tool processes a dead runner left behind must not go on to finish a call the resume
    # will run again.
    ledger = ToolLedger(state_dir / "tools")
    ledger.reap()
    redactor = Redactor.for_state_dir(state_dir)
    checkpoints = Checkpoints(state_dir / "checkpoints", holds_secret=redactor.holds_secret)
    # An undo a kill interrupted is finished before anything else touches the files.
    checkpoints.recover()
    store = _store_in(state_dir, store)
    opened = await open_store(store, lease=lease, http=http)
    try:
        config = AgentConfig(
            workdir=folder.resolve(),
            secrets=secrets,
            restricted_paths=tuple(Path(p) for p in restricted_paths)
            if restricted_paths is not None
            else default_restricted(),
            verifier=verifier or SudoVerifier(ledger=ledger),
            # The store's own files, or its local server's sockets, when they lie elsewhere.
            protected_paths=_protected(
                state_dir, [*(Path(p) for p in protected_paths), *opened.private_paths]
            ),
            redactor=redactor,
            tool_ledger=ledger,
            checkpoints=checkpoints,
            approval=approval if approval is not None else Approval.ASK,
            guarded_paths=guarded,
            sandbox=sandbox,
            tool_env=_tool_env(settings, state_dir),
            timeouts=timeouts if timeouts is not None else Timeouts(),
            instructions=instructions or "",
            instructions_file=Path(instructions_file) if instructions_file is not None else None,
            context=context if context is not None else _context(settings),
            prices=Prices(settings.prices.value) if settings is not None else Prices(),
        )
        if settings is not None and settings.mcp_servers:
            config = attrs.evolve(config, mcp=_mcp_clients(settings, config, state_dir))
        registry = Registry()
        executor = Executor(
            registry=registry, store=opened, model=model, config=config, catalog=catalog
        )
        runtime = Runtime(state_dir, registry, opened, secrets, executor, model)
        if config.mcp is not None:
            # The servers start with the runtime and stop with it (a nursery of their own).
            stopped: BaseException | None = None
            async with trio.open_nursery() as servers:
                await servers.start(config.mcp.run)
                try:
                    if not is_postgres(store):
                        yield runtime
                        return
                    async with _fleet(opened, executor, registry, http) as fleet:
                        yield attrs.evolve(runtime, fleet=fleet)
                except BaseException as exc:
                    stopped = exc  # raised again as it came, not in the nursery's group
                finally:
                    servers.cancel_scope.cancel()
            if stopped is not None:
                raise stopped
            return
        if not is_postgres(store):
            yield runtime
            return
        async with _fleet(opened, executor, registry, http) as fleet:
            yield attrs.evolve(runtime, fleet=fleet)
    finally:
        checkpoints.close()
        await opened.aclose()


def _mcp_clients(settings: Settings, config: AgentConfig, state_dir: Path) -> McpClients:
    """The MCP servers of `settings`, confined as tool processes are (not started yet)."""
    from ..agent.mcp import McpClients

    keys = KeyStore.for_state_dir(state_dir)
    return McpClients(
        settings.mcp_servers,
        state_dir / "mcp",
        config.workdir,
        sandbox=config.sandbox,
        hidden=config.hidden_paths,
        restricted=config.restricted_paths,
        lookup=lambda name: keys.lookup(name)[1] or None,
    )


@asynccontextmanager
async def _fleet(
    opened: Store, executor: Executor, registry: Registry, http: str | None
) -> AsyncIterator[Fleet]:
    """This process in the fleet of the PostgreSQL store `opened`, while the block runs."""
    from ..fleet.member import Fleet
    from ..store.postgres import PgStore

    assert isinstance(opened, PgStore)
    failure: BaseException | None = None
    async with trio.open_nursery() as nursery:
        fleet = Fleet(opened, executor, registry, http=http)
        await nursery.start(fleet.run)
        try:
            yield fleet
        except BaseException as exc:
            # Raised again as it came, not wrapped in the fleet's nursery's group.
            failure = exc
        nursery.cancel_scope.cancel()
    if failure is not None:
        raise failure


def _context(settings: Settings | None) -> ContextLimits:
    """The context limits the settings give (the defaults without settings)."""
    if settings is None:
        return ContextLimits()
    return ContextLimits(settings.context_windows.value, settings.compact_at.value)

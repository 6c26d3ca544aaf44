"""Tools from MCP servers: each server kept running, its tools offered as ``NAME__tool``.

`McpClients` runs one task per configured server (`agentrt.config.mcp`) on the
official ``mcp`` SDK, which is built on anyio and so runs on Trio. A server is
*starting* until it has answered ``initialize`` and listed its tools, then
*ready*; one that fails to start, crashes, writes something that is not MCP,
or closes its connection is *failed*, with why, and is started again after a
backoff (1 s, doubling up to 60 s; reset once it has stayed up a minute). A
stdio server runs inside the sandbox (`agentrt.agent.sandbox`) unless its
entry says ``sandbox = false``; its standard error goes to its log,
``STATE_DIR/mcp/NAME.log``.

A call (`McpClients.call`) is one ``tools/call`` request. When its run is
cancelled or paused, the SDK sends ``notifications/cancelled`` with the
request's id as the awaiting scope is cancelled. A server's
``elicitation/create`` is handed to the call in flight on that server (the
oldest, when several are), which asks its run's person through the pending
registry, in the run's own task, as ``ask_user`` and ``store_secret`` do.

The ``mcp`` package is imported only here and only when a server is started:
it is the ``agentrt[mcp]`` extra.
"""

from __future__ import annotations

import contextlib
import contextvars
import enum
import json
import logging
import os
import re
import shutil
import time
from collections.abc import AsyncIterator
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any
from typing import Final

import attrs
import trio

from ..config.mcp import McpServerConfig
from ..config.mcp import resolve_references
from ..models.messages import ToolSpec
from ..vocab.reprs import mutable
from ..vocab.reprs import record
from .sandbox import Sandbox

if TYPE_CHECKING:
    import mcp
    import mcp_types

log = logging.getLogger("agentrt.mcp")

#: Between a tool's server and its own name in the name the model calls it by.
SEPARATOR: Final = "__"
#: The longest tool name the providers take (OpenAI's limit; Anthropic's is higher).
NAME_LIMIT: Final = 64
_NOT_IN_NAMES: Final = re.compile(r"[^A-Za-z0-9_-]")
#: The first wait before a failed server is started again; it doubles up to `BACKOFF_MAX`.
BACKOFF_FIRST: Final = 1.0
BACKOFF_MAX: Final = 60.0
#: A server up this long has its backoff start again from `BACKOFF_FIRST`.
BACKOFF_RESET: Final = 60.0
#: Longest text of why a server failed, as `agentrt mcp list` shows it.
WHY_LIMIT: Final = 500
#: How long a call that ends waits for the questions of its elicitations to be withdrawn.
ASKING_GONE_SECONDS: Final = 10.0
#: Name of the file, in the MCP folder of the state dir, that holds the servers' states.
STATUS_FILE: Final = "status.json"


class ServerState(enum.Enum):
    """Where a server stands."""

    STARTING = "starting"
    READY = "ready"
    FAILED = "failed"


class McpCallError(Exception):
    """A call could not be made, or its server broke during it (the message says which)."""


@record
class ServerStatus:
    """What `agentrt mcp list` shows of one server."""

    name: str
    transport: str
    state: ServerState
    why: str = ""
    tools: tuple[str, ...] = ()
    #: How many times it was started again after a failure.
    restarts: int = 0
    sandboxed: bool = False

    def as_json(self) -> dict[str, Any]:
        """The status as JSON."""
        return {
            "name": self.name,
            "transport": self.transport,
            "state": self.state.value,
            "why": self.why,
            "tools": list(self.tools),
            "restarts": self.restarts,
            "sandboxed": self.sandboxed,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ServerStatus:
        """The status `as_json` gave."""
        return cls(
            str(data["name"]),
            str(data["transport"]),
            ServerState(data["state"]),
            str(data.get("why", "")),
            tuple(str(t) for t in data.get("tools", ())),
            int(data.get("restarts", 0)),
            bool(data.get("sandboxed", False)),
        )


@record
class Elicitation:
    """A server's ``elicitation/create``, for the call in flight to ask its person."""

    server: str
    message: str
    schema: Mapping[str, Any]


#: What the person said: ``("accept", content)``, ``("decline", None)`` or ``("cancel", None)``.
ElicitReply = tuple[str, dict[str, Any] | None]
#: How a call asks its person an `Elicitation` (given by the agent loop, runs in the run's task).
Asker = Callable[[Elicitation], Awaitable[ElicitReply]]
#: How a call reports progress: ``(progress, total, message)``.
ProgressFn = Callable[[float, float | None, str | None], Awaitable[None]]


@mutable(eq=False)
class _InFlight:
    """One call in flight on a server: how to stop it, and how its elicitations are asked."""

    #: The call's own context: its elicitations are asked in a task that runs in it.
    context: contextvars.Context
    ask: Asker
    #: The call's scope: cancelled when its server breaks.
    scope: trio.CancelScope
    #: The scopes of the tasks asking its elicitations: cancelled when the call ends.
    asking: list[trio.CancelScope] = attrs.field(factory=list)
    #: Set by each of those tasks as it ends.
    asked: list[trio.Event] = attrs.field(factory=list)
    #: What asking raised (a refusal): raised by the call once it is over.
    refused: Exception | None = None


@mutable(eq=False)
class McpServer:
    """One configured server and its connection while it has one."""

    config: McpServerConfig
    state: ServerState = ServerState.STARTING
    why: str = ""
    tools: dict[str, mcp_types.Tool] = attrs.field(factory=dict)
    restarts: int = 0
    sandboxed: bool = False
    session: mcp.ClientSession | None = None
    #: Set when the current connection ends (crash, garbage, closed): calls on it fail.
    gone: trio.Event = attrs.field(factory=trio.Event)
    inflight: list[_InFlight] = attrs.field(factory=list)
    #: The server's own name of each tool, by the name the model calls it by.
    names: dict[str, str] = attrs.field(factory=dict)

    def status(self) -> ServerStatus:
        """What `agentrt mcp list` shows of it."""
        return ServerStatus(
            self.config.name,
            self.config.transport,
            self.state,
            self.why,
            tuple(self.tools),
            self.restarts,
            self.sandboxed,
        )


@mutable(eq=False)
class McpClients:
    """Every configured MCP server, kept running while `run` runs (see the module's docstring)."""

    configs: Mapping[str, McpServerConfig]
    #: Where servers' logs and the status file go (``STATE_DIR/mcp``).
    folder: Path
    #: The working directory: a stdio server's default ``cwd``, writable in its sandbox.
    workdir: Path
    sandbox: Sandbox = attrs.field(factory=Sandbox.off)
    #: What no server process may see (agentrt's own state and configuration).
    hidden: tuple[Path, ...] = ()
    restricted: tuple[Path, ...] = ()
    #: How ``${NAME}`` in a header or env value is looked up (the key store, the environment).
    lookup: Callable[[str], str | None] = attrs.field(default=os.environ.get, repr=False)
    servers: dict[str, McpServer] = attrs.field(init=False)
    #: Set whenever a server's state changes (then replaced).
    _changed: trio.Event = attrs.field(factory=trio.Event, init=False)
    #: Why no server can start here at all (the SDK is missing), once `run` has looked.
    _missing: str | None = attrs.field(default=None, init=False)
    #: Where the tasks asking elicitations run (the servers' nursery, while `run` runs).
    _nursery: trio.Nursery | None = attrs.field(default=None, init=False)

    def __attrs_post_init__(self) -> None:
        self.servers = {name: McpServer(config) for name, config in self.configs.items()}

    # -- what the agent loop asks --------------------------------------------

    def specs(self) -> tuple[ToolSpec, ...]:
        """The tools of every ready server, as the model is offered them (``NAME__tool``)."""
        specs: list[ToolSpec] = []
        for name, server in self.servers.items():
            if server.state is not ServerState.READY:
                continue
            for tool in server.tools.values():
                schema = dict(tool.input_schema or {"type": "object"})
                schema.setdefault("type", "object")
                schema.setdefault("properties", {})
                specs.append(
                    ToolSpec(
                        exposed_name(name, tool.name),
                        tool.description or f"{tool.name} (from MCP server {name})",
                        schema,
                    )
                )
        return tuple(specs)

    def owns(self, name: str) -> bool:
        """Whether `name` names a tool of a configured server (``NAME__tool``)."""
        server, sep, _ = name.partition(SEPARATOR)
        return bool(sep) and server in self.servers

    def config_of(self, name: str) -> tuple[McpServerConfig, str]:
        """The server config and the server's own tool name of the tool called `name`."""
        server, _, tool = name.partition(SEPARATOR)
        found = self.servers[server]
        return found.config, found.names.get(name, tool)

    def statuses(self) -> list[ServerStatus]:
        """Each server's status, in the order configured."""
        return [server.status() for server in self.servers.values()]

    async def wait_changed(self) -> None:
        """Return once any server's state has changed."""
        await self._changed.wait()

    async def wait_settled(self) -> None:
        """Return once no server is starting (each is ready or has failed at least once)."""
        while any(s.state is ServerState.STARTING for s in self.servers.values()):
            await self._changed.wait()

    async def call(
        self,
        name: str,
        arguments: dict[str, Any],
        *,
        ask: Asker,
        progress: ProgressFn | None = None,
    ) -> str:
        """Call the tool `name` (``NAME__tool``) with `arguments`; the text of its result.

        Raises `McpCallError` when the server is not ready, breaks during the
        call, answers with an error, or takes longer than its ``timeout``.
        The server's elicitations during the call are asked through `ask`.
        """
        import mcp

        server_name, _, tool = name.partition(SEPARATOR)
        server = self.servers[server_name]
        tool = server.names.get(name, tool)
        # A server starting, or failed and about to start again, is waited for a while; so is
        # one whose connection broke (`gone`) and is not yet marked failed, as it is at once
        # after a call that broke with it.
        with trio.move_on_after(server.config.startup_timeout):
            while not _ready(server) and self._missing is None:
                await self._changed.wait()
        session = server.session
        if not _ready(server) or session is None:
            why = f": {server.why}" if server.why else ""
            state = "broken" if server.state is ServerState.READY else server.state.value
            raise McpCallError(
                f"MCP server {server_name!r} is not ready ({state}{why}); the call was not made"
            )
        if tool not in server.tools:
            raise McpCallError(
                f"MCP server {server_name!r} has no tool {tool!r}; its tools are: "
                f"{', '.join(server.tools) or 'none'}"
            )
        gone = server.gone
        entry = _InFlight(contextvars.copy_context(), ask, trio.CancelScope())
        server.inflight.append(entry)
        result: mcp_types.CallToolResult | None = None
        failed: str | None = None
        report = progress

        async def progressed(progress: float, total: float | None, message: str | None) -> None:
            if report is not None:
                await report(progress, total, message)

        # No task of its own: a server that breaks cancels `entry.scope`, and an elicitation
        # is asked in a task started in this call's context (see `_elicitation_callback`).
        try:
            with entry.scope:
                try:
                    with trio.fail_after(server.config.timeout):
                        result = await session.call_tool(
                            tool, arguments, progress_callback=progressed if report else None
                        )
                except trio.TooSlowError:
                    failed = (
                        f"MCP server {server_name!r} did not answer within "
                        f"{server.config.timeout:g}s (its timeout); the call was cancelled"
                    )
                except mcp.MCPError as exc:
                    if not gone.is_set():
                        failed = f"MCP server {server_name!r} refused the call: {exc}"
        except trio.Cancelled as exc:
            for scope in entry.asking:
                scope.cancel(reason=exc.reason)  # the run's stop, with its cause
            raise
        finally:
            server.inflight.remove(entry)
            for scope in entry.asking:
                scope.cancel()
            # What a withdrawn question writes reaches the store before the call (and so the
            # run) has ended, as it does for a question asked in the run's own task.
            with trio.CancelScope(shield=True), trio.move_on_after(ASKING_GONE_SECONDS):
                for asked in entry.asked:
                    await asked.wait()
        if entry.refused is not None:
            raise entry.refused
        if failed is not None:
            raise McpCallError(failed)
        if result is None:
            raise McpCallError(
                f"MCP server {server_name!r} broke during the call "
                f"({server.why or 'its connection closed'}); it may have run in part, and the "
                "server is being started again"
            )
        text = result_text(result)
        if result.is_error:
            raise McpCallError(text or f"{name} failed (the server gave no reason)")
        return text

    # -- keeping the servers running -------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Start every server and keep each running until cancelled.

        Reports started at once: servers come up (or fail) in the background,
        and `agentrt mcp list` shows where each stands.
        """
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._write_status()
        missing = self._missing = sdk_missing()
        if missing is not None:
            # Said of every server, and nothing else stops: the rest of agentrt goes on.
            for server in self.servers.values():
                self._set(server, ServerState.FAILED, missing)
            log.warning("MCP servers not started: %s", missing)
            task_status.started()
            await trio.sleep_forever()
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            for server in self.servers.values():
                nursery.start_soon(self._keep, server)
            task_status.started()

    async def _keep(self, server: McpServer) -> None:
        backoff = BACKOFF_FIRST
        while True:
            began = trio.current_time()
            self._set(server, ServerState.STARTING, "")
            why = await self._serve_once(server)
            if trio.current_time() - began >= BACKOFF_RESET:
                backoff = BACKOFF_FIRST
            self._set(server, ServerState.FAILED, why)
            log.warning(
                "MCP server %s failed: %s; starting again in %gs", server.config.name, why, backoff
            )
            await trio.sleep(backoff)
            server.restarts += 1
            backoff = min(backoff * 2, BACKOFF_MAX)

    async def _serve_once(self, server: McpServer) -> str:
        """Connect, initialize, list the tools, then wait until the connection ends; why it did."""
        import mcp

        config = server.config
        server.gone = trio.Event()
        why = "its connection closed"

        def broke(reason: str) -> None:
            nonlocal why
            if not server.gone.is_set():
                why = reason
                server.why = reason
                server.gone.set()
                for call in server.inflight:
                    call.scope.cancel()

        log_path = self.folder / f"{config.name}.log"
        log_file = log_path.open("a", encoding="utf-8")
        start = log_file.tell()

        def last_words() -> str:
            """The last line the server wrote to its log if it died starting, else nothing."""
            if server.state is ServerState.READY:
                return ""
            try:
                with log_path.open("rb") as f:
                    f.seek(start)
                    lines = f.read().decode("utf-8", "replace").strip().splitlines()
            except OSError:
                return ""
            return f": {lines[-1].strip()}" if lines else ""

        try:
            async with self._connect(server, log_file, broke, last_words) as (read, write):
                failed = await self._session(server, read, write)
                if failed is not None:
                    return failed
        except mcp.MCPError as exc:
            broke(_short(str(exc)))
        except OSError as exc:
            broke(f"cannot start it: {exc.strerror or exc}")
        except Exception as exc:
            broke(_short(_reason(exc)))
        finally:
            server.session = None
            server.gone.set()
            log_file.close()
        return server.why if server.why else why

    async def _session(self, server: McpServer, read: Any, write: Any) -> str | None:
        """Initialize, list the tools, then serve until the connection ends; why it failed to start."""
        import mcp

        config = server.config
        async with mcp.ClientSession(
            read, write, elicitation_callback=self._elicitation_callback(server)
        ) as session:
            try:
                with trio.fail_after(config.startup_timeout):
                    await session.initialize()
                    listed = await session.list_tools()
            except trio.TooSlowError:
                what = (
                    "answer initialize" if session.initialize_result is None else "list its tools"
                )
                return f"it did not {what} within {config.startup_timeout:g}s"
            server.tools = {tool.name: tool for tool in listed.tools}
            server.names = {exposed_name(config.name, t): t for t in server.tools}
            server.session = session
            self._set(server, ServerState.READY, "")
            log.info("MCP server %s ready: %d tools", config.name, len(server.tools))
            await server.gone.wait()
        return None

    @contextlib.asynccontextmanager
    async def _connect(
        self,
        server: McpServer,
        log_file: Any,
        broke: Callable[[str], None],
        exited: Callable[[], str] = lambda: "",
    ) -> AsyncIterator[tuple[Any, Any]]:
        """The server's read and write streams; the read one watched for its end and garbage."""
        import anyio

        config = server.config
        if config.command is not None:
            from mcp.client.stdio import StdioServerParameters
            from mcp.client.stdio import stdio_client

            argv = [config.command, *config.args]
            server.sandboxed = config.sandbox and self.sandbox.enforced
            if config.sandbox:
                argv = self.sandbox.wrap(
                    argv,
                    workdir=self.workdir,
                    hidden=self.hidden,
                    restricted=self.restricted,
                    network=config.network,
                    programs=_programs(config.command, config.args),
                )
            env = {k: resolve_references(v, self.lookup) for k, v in config.env.items()}
            params = StdioServerParameters(
                command=argv[0], args=argv[1:], env=env, cwd=config.cwd or self.workdir
            )
            transport = stdio_client(params, errlog=log_file)
        else:
            from mcp.client.streamable_http import streamable_http_client

            assert config.url is not None
            headers = {k: resolve_references(v, self.lookup) for k, v in config.headers.items()}
            transport = _http_transport(streamable_http_client, config.url, headers)
        async with transport as streams:
            read, write = streams[0], streams[1]
            mine_send, mine_receive = anyio.create_memory_object_stream[Any](0)

            async def pump() -> None:
                # Closing `read` on the way out frees the transport's reader, blocked on it.
                async with read, mine_send:
                    async for item in read:
                        if isinstance(item, Exception):
                            broke(f"it wrote something that is not MCP: {_offending(item)}")
                            return
                        await mine_send.send(item)
                broke(f"its connection closed (the server exited){exited()}")

            async with trio.open_nursery() as nursery:
                nursery.start_soon(pump)
                try:
                    yield mine_receive, write
                finally:
                    nursery.cancel_scope.cancel()

    def _elicitation_callback(self, server: McpServer) -> Any:
        import mcp_types

        async def elicit(context: Any, params: Any) -> Any:
            if not server.inflight:
                return mcp_types.ErrorData(
                    code=mcp_types.INVALID_REQUEST,
                    message="no tool call is in flight to ask for",
                )
            schema = getattr(params, "requested_schema", None)
            if schema is None:
                return mcp_types.ErrorData(
                    code=mcp_types.INVALID_REQUEST,
                    message="only form elicitations are supported",
                )
            entry = server.inflight[0]
            elicitation = Elicitation(server.config.name, params.message, schema)
            send, receive = trio.open_memory_channel[ElicitReply](1)

            done = trio.Event()
            entry.asked.append(done)
            # Made here, entered by the task: a call that ends before the task starts still
            # cancels it.
            scope = trio.CancelScope()
            entry.asking.append(scope)

            async def asking() -> None:
                try:
                    async with send:
                        with scope:
                            try:
                                reply = await entry.ask(elicitation)
                            except Exception as exc:
                                # Raised by the call once it is over; the server hears cancel.
                                entry.refused = exc
                                entry.scope.cancel()
                                reply = ("cancel", None)
                            await send.send(reply)
                finally:
                    done.set()

            # Started in the call's context: the question is the call's run's, routed as
            # its questions are.
            assert self._nursery is not None
            entry.context.run(self._nursery.start_soon, asking)
            async with receive:
                try:
                    action, content = await receive.receive()
                except trio.EndOfChannel:
                    action, content = "cancel", None
            return mcp_types.ElicitResult(action=action, content=content)  # type: ignore[arg-type]

        return elicit

    def _set(self, server: McpServer, state: ServerState, why: str) -> None:
        server.state = state
        server.why = _short(why) if why else ""
        if state is not ServerState.READY:
            server.tools = {}
        self._write_status()
        self._changed.set()
        self._changed = trio.Event()

    def _write_status(self) -> None:
        """The servers' states, for `agentrt mcp list` (written whole, then renamed)."""
        data = {
            "pid": os.getpid(),
            "at": time.time(),
            "servers": [s.as_json() for s in self.statuses()],
        }
        path = self.folder / STATUS_FILE
        temporary = path.with_suffix(".tmp")
        try:
            temporary.write_text(json.dumps(data), "utf-8")
            temporary.replace(path)
        except OSError as exc:
            log.warning("cannot write %s: %s", path, exc)


def sdk_missing() -> str | None:
    """Why the MCP SDK cannot be used here (it is not installed), or None."""
    import importlib.util

    if importlib.util.find_spec("mcp") is None:
        return "the MCP SDK is not installed: pip install 'agentrt[mcp]'"
    return None


def exposed_name(server: str, tool: str) -> str:
    """``SERVER__tool`` as models take a tool's name: letters, digits, ``_`` and ``-``, 64 at most.

    Any other character of the server's name for its tool becomes ``_``.
    """
    return f"{server}{SEPARATOR}{_NOT_IN_NAMES.sub('_', tool)}"[:NAME_LIMIT]


def _http_transport(client: Any, url: str, headers: dict[str, str]) -> Any:
    """The streamable-HTTP transport to `url`, with `headers` on every request."""
    import httpx2  # the HTTP client the SDK's transport takes (a dependency of ``mcp``)

    timeout = httpx2.Timeout(30.0, read=None)  # a call may stream for long
    return client(url, http_client=httpx2.AsyncClient(headers=headers, timeout=timeout))


def result_text(result: mcp_types.CallToolResult) -> str:
    """What the model reads of a tool's result: its text, a line for anything else."""
    parts: list[str] = []
    for block in result.content:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)  # type: ignore[union-attr]
        elif kind == "resource":
            resource = block.resource  # type: ignore[union-attr]
            text = getattr(resource, "text", None)
            parts.append(text if text is not None else f"[resource {resource.uri}]")
        elif kind == "resource_link":
            parts.append(f"[resource {block.uri}]")  # type: ignore[union-attr]
        else:
            mime = getattr(block, "mime_type", "")
            parts.append(f"[{kind} {mime}]".replace(" ]", "]"))
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts)


def _offending(exc: Exception) -> str:
    """What a server wrote that is not MCP, as the SDK's parse error holds it (else the error)."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        with contextlib.suppress(Exception):
            found = errors()[0].get("input")
            if isinstance(found, str):
                return repr(found if len(found) <= 80 else found[:77] + "...")
    return _short(_reason(exc))


def _ready(server: McpServer) -> bool:
    """Whether a call can go to `server` now: ready, and its connection not known broken."""
    return server.state is ServerState.READY and not server.gone.is_set()


def _reason(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_reason(e) for e in exc.exceptions)
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= WHY_LIMIT else text[: WHY_LIMIT - 3] + "..."


def read_status(folder: Path) -> tuple[int, list[ServerStatus]] | None:
    """The daemon's pid and its servers' states as it last wrote them, or None."""
    try:
        data = json.loads((folder / STATUS_FILE).read_text("utf-8"))
        return int(data["pid"]), [ServerStatus.from_json(s) for s in data["servers"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _programs(command: str, args: Sequence[str]) -> tuple[Path, ...]:
    """The files a stdio server's configured command line runs from: the command, and each
    argument naming a file (its script). Under the private /tmp they are bound in again."""
    found = shutil.which(command)
    named = [Path(found)] if found is not None else []
    named += [Path(arg) for arg in args if os.path.isabs(arg) and os.path.isfile(arg)]
    # A server installed in a virtualenv (`pip install mcp-server-git`) runs from all of it.
    return tuple(
        p.parent.parent if (p.parent.parent / "pyvenv.cfg").is_file() else p for p in named
    )

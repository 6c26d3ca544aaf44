"""``agentrt daemon``: `serve` a runtime on a socket, and the command that runs it."""

from __future__ import annotations

import argparse
import contextlib
import errno
import faulthandler
import gc
import io
import signal
import sys
from collections.abc import Callable
from collections.abc import Sequence
from functools import partial
from pathlib import Path

import trio

from ..config.options import MODEL_OPTIONS
from ..config.options import RETENTION_DAYS
from ..config.options import SOCKET
from ..config.options import STATE_DIR
from ..config.options import STORE
from ..config.options import WORKDIR
from ..config.options import shared_options
from ..config.settings import Settings
from ..config.settings import bot_environ
from ..config.settings import load_settings
from ..config.settings import parse_host_port
from ..config.statedir import DaemonLock
from ..config.statedir import StateDirError
from ..config.statedir import prepare_state_dir
from ..core.errors import ModelNotConfiguredError
from ..core.errors import check_model_ready
from ..core.runtime import Runtime
from ..core.runtime import open_runtime
from ..frontends.terminal.logs import configure_logging
from ..frontends.terminal.paths import DaemonAlreadyRunningError
from ..frontends.terminal.paths import SocketPathError
from ..frontends.terminal.paths import default_socket_path
from ..frontends.terminal.server import Daemon
from ..store import StoreError
from ..store.retention import Retention
from ..vocab.locations import StrPath
from ..vocab.reprs import record
from .entry import collect_from_now_on


async def serve(
    socket_path: StrPath,
    runtime: Runtime,
    *,
    handle_signals: bool = False,
    http: str | None = None,
    http_error: str | None = None,
    task_status: trio.TaskStatus[Daemon] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve `runtime` on `socket_path` until cancelled or shut down.

    Reports the `Daemon` through `task_status` once the socket accepts
    connections. With `handle_signals`, SIGTERM and SIGINT shut it down
    gracefully (a second signal stops it at once); this needs the main thread,
    and once the daemon stops, those signals are only logged until the program
    sets handlers of its own.
    `http` (the HTTP API's address) or `http_error` (why it is not served) is
    what a ``daemon status`` request is told of the process's HTTP API.
    """
    daemon = Daemon(
        runtime,
        Path(socket_path),
        handle_signals=handle_signals,
        http=http,
        http_error=http_error,
    )
    await daemon.serve(task_status=task_status)


@record
class _Http:
    """How starting the HTTP API went: its address, or why it is not served."""

    address: str | None
    error: str | None = None


async def _start_http(
    nursery: trio.Nursery, runtime: Runtime, http: tuple[str, int], state_dir: Path
) -> _Http:
    """Serve the HTTP API in `nursery`; a port that cannot be bound is reported, not fatal.

    The windows on the socket do not need the HTTP API: a daemon whose port is
    taken (by another daemon, on another socket) says so in one line and goes
    on serving its socket, and `agentrt daemon status` shows why.
    """
    from ..http import load_or_create_token
    from ..http import serve_http

    host, port = http
    shown = f"[{host}]" if ":" in host else host
    token = load_or_create_token(state_dir)
    try:
        bound = await nursery.start(partial(serve_http, runtime, host, port, token=token))
    except OSError as exc:
        what = "is in use" if exc.errno == errno.EADDRINUSE else "cannot be listened on"
        return _Http(None, f"{shown}:{port} {what} ({exc.strerror or exc})")
    if runtime.fleet is not None:
        runtime.fleet.http = f"{shown}:{bound}"  # for `agentrt fleet status`
    return _Http(f"http://{shown}:{bound}/")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agentrt daemon",
        parents=[shared_options(SOCKET, STATE_DIR, STORE, *MODEL_OPTIONS, WORKDIR, RETENTION_DAYS)],
        description=(
            "Run agents for terminal windows (agenttui) over a Unix socket, and, when asked, "
            "for the web page and the Telegram and Discord bots, all with one model. "
            "Questions and confirmations of a run go back to the window that started it; "
            "closing a window or stopping the daemon keeps unfinished tasks for a later "
            "resume (/pending in agenttui)."
        ),
        epilog=(
            "'agentrt daemon status' says whether a daemon holds the state dir and how it "
            "is; 'agentrt daemon stop' (or SIGTERM, or Ctrl+C) stops it gracefully: runs "
            "end with cause 'shutdown' and their pending tasks are kept. Settings come from "
            "the flags, the environment and the configuration file, in that order: "
            "'agentrt config show' prints them. SIGUSR1 writes where each of its threads "
            "stands (their Python stacks) to its standard error and changes nothing: what "
            "a daemon that does not answer is waiting on."
        ),
    )
    parser.add_argument(
        "--http",
        metavar="HOST:PORT",
        type=_host_port,
        default=None,
        help="also serve the HTTP API and the web chat there, e.g. 127.0.0.1:8765 "
        "(keep it on loopback; 'agentrt token' prints the token it needs; "
        "config file: [http] listen)",
    )
    parser.add_argument(
        "--telegram",
        action="store_true",
        default=None,
        help="also run the Telegram bot (env AGENTRT_TELEGRAM_TOKEN or 'agentrt keys set "
        "AGENTRT_TELEGRAM_TOKEN', AGENTRT_TELEGRAM_ALLOW; config file: [telegram])",
    )
    parser.add_argument(
        "--discord",
        action="store_true",
        default=None,
        help="also run the Discord bot (env AGENTRT_DISCORD_TOKEN or 'agentrt keys set "
        "AGENTRT_DISCORD_TOKEN', AGENTRT_DISCORD_ALLOW; config file: [discord])",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log every connection")
    return parser


def _host_port(text: str) -> tuple[str, int]:
    try:
        return parse_host_port(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the daemon in the foreground (or `status` / `stop` it); return the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] in (["status"], ["stop"]):
        from .daemonctl import main as control

        return control(argv)
    args = _parser().parse_args(argv)
    try:
        settings = load_settings(args)
        settings.check_model()
    except ValueError as exc:
        print(f"agentrt daemon: {exc}", file=sys.stderr)
        return 2
    socket_path: Path = args.socket or default_socket_path()
    state_dir = settings.state_dir.value
    configure_logging(state_dir, verbose=args.verbose)
    _dump_stacks_on_sigusr1()
    # One daemon per state dir, whatever its socket: taken before the store is opened,
    # held until the process ends (the kernel drops it if the daemon dies).
    lock = DaemonLock(state_dir)
    # Until the socket is served, nearly everything made (modules, the runtime, the
    # front-ends) is kept for good: the collector's passes over it would free nothing.
    gc.disable()
    try:
        prepare_state_dir(state_dir)
        lock.acquire(socket_path, settings.model.value, settings.approval.value.value)
        status = trio.run(
            # What the start made lives as long as the daemon. With the collector on, it
            # ran a full collection over some 57,000 objects (~30 ms) before its socket
            # answered; each later full collection walked them again.
            partial(_amain, on_ready=collect_from_now_on),
            socket_path,
            settings,
            args.workdir,
            lock,
        )
    except (
        DaemonAlreadyRunningError,
        SocketPathError,
        StateDirError,
        StoreError,
        ValueError,
    ) as exc:
        print(f"agentrt daemon: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    finally:
        gc.enable()
        lock.release()
    return status


def _dump_stacks_on_sigusr1() -> None:
    """``kill -USR1 PID`` writes every thread's Python stack to stderr; the daemon goes on.

    From the interpreter's own signal handler (`faulthandler`), so it answers
    even while the Trio thread is stuck in a call that never returns. Only
    file names, lines and function names are written: no values, no secrets.
    Without a standard error to write to (closed, or not a file), there is none.
    """
    with contextlib.suppress(AttributeError, RuntimeError, ValueError, io.UnsupportedOperation):
        faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)


async def _amain(
    socket_path: Path,
    settings: Settings,
    workdir: Path | None,
    lock: DaemonLock | None = None,
    on_ready: Callable[[], None] | None = None,
) -> int:
    state_dir = settings.state_dir.value
    http = settings.http.value
    telegram = settings.bots["telegram"].enabled.value
    discord = settings.bots["discord"].enabled.value
    async with (
        open_runtime(
            settings=settings,
            workdir=workdir,
            protected_paths=[socket_path, socket_path.with_name(socket_path.name + ".lock")],
        ) as runtime,
        trio.open_nursery() as nursery,
    ):
        try:
            check_model_ready(runtime.model)
        except ModelNotConfiguredError as exc:
            # Not fatal: a key stored later ('agentrt keys set') is used without a restart.
            print(
                f"agentrt daemon: warning: {exc}; runs are refused until then",
                file=sys.stderr,
                flush=True,
            )

        days = settings.retention_days.value
        if days is not None:
            # The first prune is done before the socket accepts anyone.
            await nursery.start(Retention(runtime.store, days).run)

        # The HTTP API is bound first, so the first window to connect can be told how it went.
        served = await _start_http(nursery, runtime, http, state_dir) if http is not None else None

        async def daemon_then_stop(task_status: trio.TaskStatus[Daemon]) -> None:
            await serve(
                socket_path,
                runtime,
                handle_signals=True,
                http=served.address if served is not None else None,
                http_error=served.error if served is not None else None,
                task_status=task_status,
            )
            nursery.cancel_scope.cancel()  # the daemon stopped: the HTTP server goes with it

        await nursery.start(daemon_then_stop)
        if lock is not None:
            lock.mark_ready()  # from now on `agentrt` commands come here
        print(f"agentrt daemon: listening on {socket_path}", file=sys.stderr, flush=True)
        if on_ready is not None:
            on_ready()
        if runtime.fleet is not None:
            print(
                f"agentrt daemon: in the fleet of {runtime.store.location} as "
                f"{runtime.fleet.member}",
                file=sys.stderr,
                flush=True,
            )
        if served is not None and served.error is not None:
            print(
                f"agentrt daemon: HTTP API not started: {served.error}; the socket is served",
                file=sys.stderr,
                flush=True,
            )
        elif served is not None:
            print(
                f"agentrt daemon: HTTP API and web chat on {served.address} "
                "('agentrt token' prints the token)",
                file=sys.stderr,
                flush=True,
            )
        if telegram or discord:
            from ..bots import ConfigError
            from ..bots import run_bots

            try:
                await nursery.start(
                    partial(
                        run_bots,
                        runtime.executor,
                        telegram=telegram,
                        discord=discord,
                        environ=bot_environ(settings),
                    )
                )
            except ConfigError as exc:
                print(f"agentrt daemon: {exc}", file=sys.stderr, flush=True)
                nursery.cancel_scope.cancel()
                return 1
            names = " and ".join(
                n for n, on in (("Telegram", telegram), ("Discord", discord)) if on
            )
            print(f"agentrt daemon: {names} bot listening", file=sys.stderr, flush=True)
    return 0

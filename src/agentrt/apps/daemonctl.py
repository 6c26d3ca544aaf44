"""``agentrt daemon status`` and ``agentrt daemon stop``: ask the running daemon how it is, or
to shut down.

Both find the daemon that holds the state dir (its record in ``daemon.lock``),
or the one answering on ``--socket``, and talk to it over its socket with a
``daemon`` frame: only its own user can connect there (the socket's folder is
0700 and every peer's uid is checked). A stop is the graceful shutdown SIGTERM
asks for: runs in flight end with cause ``shutdown`` and their tasks are kept.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from typing import Final

import trio

from ..config.options import CONFIG
from ..config.options import SOCKET
from ..config.options import STATE_DIR
from ..config.options import shared_options
from ..config.settings import load_settings
from ..config.statedir import DaemonInfo
from ..config.statedir import read_daemon_info
from ..core.process import pid_alive
from ..core.process import token_alive
from ..protocol.client import Client
from ..protocol.client import ClientError
from ..protocol.client import DaemonNotRunningError
from ..protocol.client import default_socket_path
from ..protocol.client import is_socket_answering
from ..protocol.frames import DaemonAction
from ..protocol.frames import DaemonRequest
from ..protocol.frames import DaemonStatus
from ..protocol.frames import ErrorFrame
from ..protocol.frames import Scope
from ..protocol.frames import to_wire
from ..vocab.reprs import record

#: Exit statuses: the daemon runs (status) or was stopped (stop).
EXIT_OK: Final = 0
#: The daemon holds the state dir but does not answer, or would not stop.
EXIT_FAILED: Final = 1
#: A usage error, or a configuration that cannot be read.
EXIT_USAGE: Final = 2
#: No daemon runs (as an init script's ``status`` says it).
EXIT_NOT_RUNNING: Final = 3
#: How long `stop` waits for the daemon to exit by default: its shutdown gives runs 10 s to
#: save their tasks.
STOP_TIMEOUT: Final = 15.0
#: How long `stop` waits after the SIGTERM it falls back to.
AFTER_SIGTERM: Final = 5.0
#: How long a request to the daemon may take before it counts as not answering.
ANSWER_TIMEOUT: Final = 5.0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agentrt daemon",
        description="Ask the daemon that holds the state dir (or answers on --socket) how it "
        "is, or stop it.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    common = shared_options(SOCKET, STATE_DIR, CONFIG)
    status = commands.add_parser(
        "status",
        parents=[common],
        help="whether a daemon runs, and its pid, socket, HTTP address, model, policy, uptime",
        description="Whether a daemon holds the state dir (or answers on --socket): its pid, "
        "socket, HTTP API (or why it is not served), model, approval policy, uptime, "
        "connections and runs in flight.",
        epilog="Exit status: 0 a daemon runs and answers; 1 a daemon holds the state dir but "
        "does not answer on its socket; 2 a usage error; 3 no daemon runs.",
    )
    status.add_argument("--json", action="store_true", help="print one JSON object")
    stop = commands.add_parser(
        "stop",
        parents=[common],
        help="stop the daemon gracefully: runs end with cause 'shutdown', their tasks kept",
        description="Ask the daemon that holds the state dir (or answers on --socket) to shut "
        "down as SIGTERM does: it stops accepting, runs in flight end with cause 'shutdown' "
        "and their pending tasks are kept ('agentrt pending list' shows them). Waits for the "
        "process to exit; if it has not after --timeout seconds, sends it SIGTERM (which "
        "stops it at once) and says whether it is still running.",
        epilog="Exit status: 0 the daemon stopped; 1 it is still running; 2 a usage error; "
        "3 no daemon was running.",
    )
    stop.add_argument(
        "--timeout",
        type=_seconds,
        default=STOP_TIMEOUT,
        metavar="SECONDS",
        help=f"how long to wait for the daemon to exit (default {STOP_TIMEOUT:g})",
    )
    stop.add_argument("--json", action="store_true", help="print one JSON object")
    return parser


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 < value <= 3600:
        raise argparse.ArgumentTypeError("give a number of seconds above 0 and at most 3600")
    return value


def main(argv: Sequence[str]) -> int:
    """``agentrt daemon status|stop ...``; the exit status."""
    args = _parser().parse_args(list(argv))
    try:
        found = _find(args)
    except ValueError as exc:
        print(f"agentrt daemon {args.command}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.command == "status":
        return trio.run(_status, found, args.json)
    return trio.run(_stop, found, args.timeout, args.json)


@record
class _Found:
    """Where to look for the daemon, and what its record says."""

    #: The socket to ask on; None when no daemon holds the state dir.
    socket: Path | None
    #: The daemon's record in the state dir's lock, if it is alive.
    info: DaemonInfo | None
    state_dir: Path | None
    #: A daemon answering on the default socket, when none holds the state dir.
    elsewhere: Path | None = None


def _find(args: argparse.Namespace) -> _Found:
    if args.socket is not None:
        return _Found(Path(args.socket), None, None)
    state_dir = load_settings(args).state_dir.value
    info = read_daemon_info(state_dir)
    if info is not None and info.alive():
        return _Found(Path(info.socket), info, state_dir)
    default = default_socket_path()
    elsewhere = default if is_socket_answering(default) else None
    return _Found(None, None, state_dir, elsewhere)


def _not_running(found: _Found) -> str:
    if found.state_dir is None:
        return f"no daemon answers on {found.socket}"
    said = f"no daemon holds the state dir {found.state_dir}"
    if found.elsewhere is not None:
        said += (
            f" (a daemon with another state dir answers on {found.elsewhere}: "
            f"pass --socket {found.elsewhere})"
        )
    return said


async def _ask(socket: Path, action: DaemonAction) -> DaemonStatus:
    """Send a ``daemon`` request; its answer. Raises `ClientError` when there is none."""
    with trio.fail_after(ANSWER_TIMEOUT):
        async with await Client.connect(socket, scope=Scope.ALL) as client:
            await client.send(DaemonRequest(action))
            while True:
                frame = await client.receive()
                if isinstance(frame, DaemonStatus):
                    return frame
                if isinstance(frame, ErrorFrame):
                    raise ClientError(frame.message)


def _wire(status: DaemonStatus) -> dict[str, Any]:
    data = dict(to_wire(status))
    del data["type"]
    return data


async def _status(found: _Found, as_json: bool) -> int:
    if found.socket is None:
        _say(as_json, {"running": False, "state_dir": str(found.state_dir)}, _not_running(found))
        return EXIT_NOT_RUNNING
    try:
        status = await _ask(found.socket, DaemonAction.STATUS)
    except DaemonNotRunningError:
        if found.info is None:
            _say(as_json, {"running": False, "socket": str(found.socket)}, _not_running(found))
            return EXIT_NOT_RUNNING
        return _unanswered(found, found.info, as_json, "does not answer on its socket")
    except (ClientError, trio.TooSlowError) as exc:
        if found.info is None:
            print(f"agentrt daemon status: the daemon on {found.socket}: {exc}", file=sys.stderr)
            return EXIT_FAILED
        return _unanswered(found, found.info, as_json, f"does not answer ({exc or 'no reply'})")
    if as_json:
        print(json.dumps({"running": True, "state_dir": _dir(found), **_wire(status)}))
    else:
        print(_status_text(status, found))
    return EXIT_OK


def _dir(found: _Found) -> str | None:
    return str(found.state_dir) if found.state_dir is not None else None


def _unanswered(found: _Found, info: DaemonInfo, as_json: bool, why: str) -> int:
    words = (
        f"daemon {info.pid} holds the state dir {found.state_dir} but {why}: it may be "
        f"starting or stopping (socket {info.socket})"
    )
    data = {
        "running": True,
        "answering": False,
        "pid": info.pid,
        "socket": info.socket,
        "model": info.model,
        "approval": info.approval,
        "state_dir": _dir(found),
    }
    _say(as_json, data, words, stream=sys.stderr)
    return EXIT_FAILED


def _say(as_json: bool, data: dict[str, Any], words: str, *, stream: Any = None) -> None:
    if as_json:
        print(json.dumps(data))
    else:
        print(words, file=stream or sys.stdout)


def _status_text(status: DaemonStatus, found: _Found) -> str:
    if status.http is not None:
        http = status.http
    elif status.http_error is not None:
        http = f"not started: {status.http_error}"
    else:
        http = "off"
    holds = f" holds the state dir {found.state_dir}" if found.state_dir is not None else ""
    rows = [
        ("socket", status.socket),
        ("HTTP API", http),
        ("model", status.model),
        ("approval", status.approval),
        ("up", _duration(status.uptime)),
        ("connections", f"{status.connections} (this one included)"),
        ("runs", f"{status.runs} in flight"),
        ("version", status.daemon_version),
    ]
    head = f"daemon {status.pid}{holds}" + (" (stopping)" if status.stopping else "")
    return "\n".join([head, *(f"  {name:<12} {value}" for name, value in rows)])


def _duration(seconds: float) -> str:
    whole = int(seconds)
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [(days, "d"), (hours, "h"), (minutes, "m"), (secs, "s")]
    shown = [f"{n}{unit}" for n, unit in parts if n] or ["0s"]
    return " ".join(shown[:2])


def _runs(count: int) -> str:
    if count == 0:
        return "no run was in flight"
    if count == 1:
        return "1 run stopped (cause shutdown), its task kept: 'agentrt pending list' shows it"
    return (
        f"{count} runs stopped (cause shutdown), their tasks kept: "
        "'agentrt pending list' shows them"
    )


async def _stop(found: _Found, limit: float, as_json: bool) -> int:
    if found.socket is None:
        _say(as_json, {"stopped": False, "running": False}, _not_running(found))
        return EXIT_NOT_RUNNING
    status: DaemonStatus | None = None
    try:
        status = await _ask(found.socket, DaemonAction.STOP)
    except DaemonNotRunningError:
        if found.info is None:
            _say(as_json, {"stopped": False, "running": False}, _not_running(found))
            return EXIT_NOT_RUNNING
    except (ClientError, trio.TooSlowError):
        pass  # it does not answer: a signal then
    if status is not None:
        pid, token = status.pid, found.info.token if found.info is not None else None
    elif found.info is not None:
        pid, token = found.info.pid, found.info.token
    else:
        print(f"agentrt daemon stop: the daemon on {found.socket} did not answer", file=sys.stderr)
        return EXIT_FAILED
    how = "socket"
    if status is None:
        how = "sigterm"
        _signal(pid, token)
    gone = await _wait_gone(pid, token, limit)
    if not gone and how == "socket":
        # A second stop signal ends it at once, without waiting for its runs.
        how = "socket+sigterm"
        _signal(pid, token)
        gone = await _wait_gone(pid, token, AFTER_SIGTERM)
    runs = status.runs if status is not None else None
    data = {"stopped": gone, "pid": pid, "runs": runs, "how": how}
    if gone:
        said = f"stopped daemon {pid}"
        if runs is not None:
            said += f"; {_runs(runs)}"
        else:
            said += (
                " with SIGTERM (it did not answer on its socket); runs in flight kept their tasks"
            )
        _say(as_json, data, said)
        return EXIT_OK
    waited = limit + (AFTER_SIGTERM if how != "sigterm" else 0)
    _say(
        as_json,
        data,
        f"daemon {pid} is still running after {waited:g} s and a SIGTERM; "
        f"'kill -KILL {pid}' ends it at once (its runs' tasks are kept, marked crashed)",
        stream=sys.stderr,
    )
    return EXIT_FAILED


def _signal(pid: int, token: str | None) -> None:
    """SIGTERM the daemon, unless its pid now belongs to another process."""
    if token is not None and not token_alive(token):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)


async def _wait_gone(pid: int, token: str | None, limit: float) -> bool:
    """Wait up to `limit` seconds for process `pid` to exit; whether it did."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        if token is not None and not token_alive(token):
            return True  # the pid was reused: ours is gone
        with trio.move_on_after(limit):
            # A pidfd becomes readable when its process exits.
            await trio.lowlevel.wait_readable(fd)
            return True
    finally:
        os.close(fd)
    return not _alive(pid, token)


def _alive(pid: int, token: str | None) -> bool:
    return token_alive(token) if token is not None else pid_alive(pid)

"""Finding the daemon, and starting one in the background when none answers."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from collections.abc import Sequence
from pathlib import Path

import trio

from agentrt.protocol.client import default_state_dir
from agentrt.protocol.client import is_socket_answering
from agentrt.vocab.reprs import record

#: How long a daemon we started may take to answer on its socket.
START_TIMEOUT = 20.0
#: True when something accepts connections on a Unix socket (the daemon's own probe).
is_answering = is_socket_answering
#: The daemon's log, in its state folder.
LOG_NAME = "daemon.log"


class DaemonStartError(Exception):
    """The daemon could not be started; the message says why and where its log is."""


@record(eq=False)
class Started:
    """A daemon this process started (it outlives this window) and its log."""

    process: subprocess.Popen[bytes]
    log: Path


def daemon_command(
    socket_path: Path,
    state_dir: Path | None,
    model: str | None,
    base_url: str | None = None,
    options: Sequence[str] = (),
) -> list[str]:
    """The command line of a background daemon for `socket_path`; `options` are more flags."""
    command = [sys.executable, "-m", "agentrt.daemon", "--socket", os.fspath(socket_path)]
    if state_dir is not None:
        command += ["--state-dir", os.fspath(state_dir)]
    if model is not None:
        command += ["--model", model]
    if base_url is not None:
        command += ["--base-url", base_url]
    return command + list(options)


def spawn_daemon(
    socket_path: Path,
    state_dir: Path | None,
    model: str | None,
    base_url: str | None = None,
    options: Sequence[str] = (),
) -> Started:
    """Start a daemon for `socket_path` in the background; it may not answer yet.

    It runs detached (its own session, no terminal) and logs to ``daemon.log``
    in its state folder.
    """
    folder = state_dir if state_dir is not None else default_state_dir()
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        log = open(folder / LOG_NAME, "ab")  # noqa: SIM115 - handed to the child, closed below
    except OSError as exc:
        raise DaemonStartError(f"cannot write the daemon's log in {folder}: {exc}") from None
    with log:
        process = subprocess.Popen(
            daemon_command(socket_path, state_dir, model, base_url, options),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    return Started(process, folder / LOG_NAME)


def _not_started(
    started: Started, socket_path: Path, timeout: float, deadline: float
) -> DaemonStartError | None:
    """Why a daemon that does not answer yet never will, or None while it still may."""
    status = started.process.poll()
    if status is not None:
        return DaemonStartError(
            f"the daemon exited with status {status} before answering on {socket_path}; "
            f"see {started.log}{tail(started.log)}"
        )
    if time.monotonic() > deadline:
        # A daemon that may yet bind the socket later would surprise the next window.
        started.process.terminate()
        started.process.wait()
        return DaemonStartError(
            f"the daemon did not answer on {socket_path} within {timeout:g} s; "
            f"see {started.log}{tail(started.log)}"
        )
    return None


def ensure_daemon(
    socket_path: Path,
    *,
    state_dir: Path | None = None,
    model: str | None = None,
    timeout: float = START_TIMEOUT,
    sleep: Callable[[float], None] = time.sleep,
) -> Started | None:
    """Make sure a daemon answers on `socket_path`, starting one if none does.

    Returns None when one was already answering, else the `Started` daemon.
    The new daemon runs detached (its own session, no terminal) and logs to
    ``daemon.log`` in its state folder. Raises `DaemonStartError` when it exits
    or does not answer within `timeout` seconds (a daemon that does not answer
    in time is stopped).
    """
    if is_answering(socket_path):
        return None
    started = spawn_daemon(socket_path, state_dir, model)
    deadline = time.monotonic() + timeout
    # Waiting on another process to bind a socket: there is nothing to wait on but the socket.
    while not is_answering(socket_path):
        error = _not_started(started, socket_path, timeout, deadline)
        if error is not None:
            raise error
        sleep(0.05)
    return started


async def start_daemon(
    socket_path: Path,
    *,
    state_dir: Path | None = None,
    model: str | None = None,
    base_url: str | None = None,
    options: Sequence[str] = (),
    give_up_after: float = START_TIMEOUT,
) -> Started:
    """Start a daemon and wait, without blocking Trio, until it answers on `socket_path`.

    `options` are more of the daemon's flags. Raises `DaemonStartError` like
    `ensure_daemon`; a daemon that has not answered after `give_up_after` seconds
    is stopped.
    """
    started = spawn_daemon(socket_path, state_dir, model, base_url, options)
    deadline = time.monotonic() + give_up_after
    while not is_answering(socket_path):
        error = _not_started(started, socket_path, give_up_after, deadline)
        if error is not None:
            raise error
        await trio.sleep(0.05)
    return started


async def wait_exit(process: subprocess.Popen[bytes], seconds: float) -> int | None:
    """Wait up to `seconds` for `process` (a child) to exit; its status, or None if it lives."""
    if process.poll() is not None:
        return process.returncode
    try:
        fd = os.pidfd_open(process.pid)
    except ProcessLookupError:
        return process.poll()
    try:
        with trio.move_on_after(seconds):
            # A pidfd becomes readable when its process exits.
            await trio.lowlevel.wait_readable(fd)
    finally:
        os.close(fd)
    return process.poll()


def tail(path: Path, lines: int = 5) -> str:
    """The last `lines` lines of the log at `path`, indented on lines of their own."""
    try:
        text = path.read_text(errors="replace").strip().splitlines()[-lines:]
    except OSError:
        return ""
    return ("\n  " + "\n  ".join(text)) if text else ""

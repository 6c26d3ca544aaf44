"""Finding the daemon, and starting one in the background when none answers."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import attrs

from agentrt import default_state_dir
from agentrt.daemon._paths import is_socket_answering

#: How long a daemon we started may take to answer on its socket.
START_TIMEOUT = 20.0
#: The daemon's log, in its state folder.
#: True when something accepts connections on a Unix socket (the daemon's own probe).
is_answering = is_socket_answering

LOG_NAME = "daemon.log"


class DaemonStartError(Exception):
    """The daemon could not be started; the message says why and where its log is."""


@attrs.frozen(eq=False)
class Started:
    """A daemon this process started (it outlives this window) and its log."""

    process: subprocess.Popen[bytes]
    log: Path


def daemon_command(socket_path: Path, state_dir: Path | None, model: str | None) -> list[str]:
    """The command line of a background daemon for `socket_path`."""
    command = [sys.executable, "-m", "agentrt.daemon", "--socket", os.fspath(socket_path)]
    if state_dir is not None:
        command += ["--state-dir", os.fspath(state_dir)]
    if model is not None:
        command += ["--model", model]
    return command


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
    folder = state_dir if state_dir is not None else default_state_dir()
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        log = open(folder / LOG_NAME, "ab")  # noqa: SIM115 - handed to the child, closed below
    except OSError as exc:
        raise DaemonStartError(f"cannot write the daemon's log in {folder}: {exc}") from None
    with log:
        process = subprocess.Popen(
            daemon_command(socket_path, state_dir, model),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    logfile = folder / LOG_NAME
    deadline = time.monotonic() + timeout
    # Waiting on another process to bind a socket: there is nothing to wait on but the socket.
    while not is_answering(socket_path):
        status = process.poll()
        if status is not None:
            raise DaemonStartError(
                f"the daemon exited with status {status} before answering on {socket_path}; "
                f"see {logfile}{_tail(logfile)}"
            )
        if time.monotonic() > deadline:
            # A daemon that may yet bind the socket later would surprise the next window.
            process.terminate()
            process.wait()
            raise DaemonStartError(
                f"the daemon did not answer on {socket_path} within {timeout:g} s; "
                f"see {logfile}{_tail(logfile)}"
            )
        sleep(0.05)
    return Started(process, logfile)


def _tail(path: Path, lines: int = 5) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()[-lines:]
    except OSError:
        return ""
    return ("\n  " + "\n  ".join(text)) if text else ""

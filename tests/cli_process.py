"""The headless `agentrt` command as a real process: its environment, a daemon holding a state
folder, and one run of the command."""

from __future__ import annotations

import contextlib
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

AGENTRT = [sys.executable, "-m", "agentrt"]


def env_for(state: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["AGENTRT_STATE_DIR"] = str(state)
    env.pop("AGENTRT_MODEL", None)
    env.pop("AGENTRT_SOCKET", None)
    return env


@contextlib.contextmanager
def running_daemon(state: Path, workdir: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A daemon process holding `state`, with its own socket and its own working folder."""
    workdir.mkdir(exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="agc-"))  # short: a socket path has a length limit
    process = subprocess.Popen(
        [
            *AGENTRT,
            "daemon",
            "--socket",
            str(folder / "d.sock"),
            "--state-dir",
            str(state),
            "--workdir",
            str(workdir),
        ],
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env_for(state),
    )
    try:
        assert process.stderr is not None
        seen = b""
        deadline = time.monotonic() + 30
        with selectors.DefaultSelector() as selector:
            selector.register(process.stderr, selectors.EVENT_READ)
            while b"listening on" not in seen:
                left = deadline - time.monotonic()
                assert left > 0, f"the daemon did not start: {seen!r}"
                if selector.select(left):
                    chunk = os.read(process.stderr.fileno(), 4096)
                    assert chunk, f"the daemon exited: {seen!r}"
                    seen += chunk
        yield process
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(folder, ignore_errors=True)


def run(
    args: list[str], state: Path, cwd: Path, stdin: str = "", program: Sequence[str] = AGENTRT
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*program, *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env_for(state),
        cwd=cwd,
        timeout=60,
        check=False,
    )

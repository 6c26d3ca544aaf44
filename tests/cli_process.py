"""The headless `agentrt` command as a real process: its environment, a daemon holding a state
folder, and one run of the command."""

from __future__ import annotations

import contextlib
import os
import re
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from collections.abc import Sequence
from pathlib import Path

import trio

AGENTRT = [sys.executable, "-m", "agentrt"]
#: The daemon's own module, run as a program.
DAEMON = [sys.executable, "-m", "agentrt.daemon"]


def run_python(code: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``python -c CODE ARGS...`` of this interpreter in `cwd`, with no ``AGENTRT_`` variable
    set, its output captured: a program that drives an entry point as its script would."""
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={k: v for k, v in os.environ.items() if not k.startswith("AGENTRT_")},
        cwd=cwd,
    )


def env_for(state: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["AGENTRT_STATE_DIR"] = str(state)
    env.pop("AGENTRT_MODEL", None)
    env.pop("AGENTRT_SOCKET", None)
    return env


def daemon_command(
    socket_path: Path,
    state: Path | None,
    workdir: Path,
    *flags: str,
    program: Sequence[str] = (*AGENTRT, "daemon"),
) -> list[str]:
    """The command line of a daemon on `socket_path` holding `state` (else the environment's
    state dir), its tools in `workdir`; `program` is ``agentrt daemon`` or `DAEMON`."""
    holding = ["--state-dir", str(state)] if state is not None else []
    return [*program, "--socket", str(socket_path), *holding, "--workdir", str(workdir), *flags]


async def read_past(stream: trio.abc.ReceiveStream, marker: bytes) -> bytes:
    """Read `stream` until it has said `marker`; all it said."""
    seen = b""
    while marker not in seen:
        chunk = await stream.receive_some(4096)
        if not chunk:
            raise AssertionError(f"the daemon exited before saying {marker!r}: {seen!r}")
        seen += chunk
    return seen


@contextlib.contextmanager
def running_daemon(
    state: Path,
    workdir: Path,
    *flags: str,
    until: bytes = b"listening on",
    said: bytearray | None = None,
) -> Iterator[subprocess.Popen[bytes]]:
    """A daemon process holding `state`, with its own socket and its own working folder, and
    `flags` on its command line, once its stderr has said `until`; what it said by then is
    added to `said`."""
    workdir.mkdir(exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="agc-"))  # short: a socket path has a length limit
    process = subprocess.Popen(
        daemon_command(folder / "d.sock", state, workdir, *flags),
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env_for(state),
    )
    seen = bytearray() if said is None else said
    try:
        assert process.stderr is not None
        deadline = time.monotonic() + 30
        with selectors.DefaultSelector() as selector:
            selector.register(process.stderr, selectors.EVENT_READ)
            while until not in seen:
                left = deadline - time.monotonic()
                assert left > 0, f"the daemon did not say {until!r}: {bytes(seen)!r}"
                if selector.select(left):
                    chunk = os.read(process.stderr.fileno(), 4096)
                    assert chunk, f"the daemon exited: {bytes(seen)!r}"
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
    return run_in(args, env_for(state), cwd, stdin, program)


def run_in(
    args: list[str],
    env: dict[str, str],
    cwd: Path | None,
    stdin: str = "",
    program: Sequence[str] = AGENTRT,
) -> subprocess.CompletedProcess[str]:
    """Run the command with `args` in the environment `env` to its end (at most a minute),
    `stdin` its input, its output captured as text."""
    return subprocess.run(
        [*program, *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=60,
        check=False,
    )


async def read_match(
    stream: trio.abc.ReceiveStream, pattern: str, seen: bytearray, seconds: float = 30
) -> str:
    """Read `stream` into `seen` until `pattern` matches what it said; its first group."""
    with trio.fail_after(seconds):
        while True:
            found = re.search(pattern, seen.decode(errors="replace"))
            if found:
                return found.group(1)
            chunk = await stream.receive_some()
            assert chunk, f"the daemon exited; it said: {seen.decode()}"
            seen += chunk

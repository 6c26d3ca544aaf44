"""Other processes the benchmarks drive: daemons, the raw echo server, commands in a terminal."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import attrs
import trio

from agentrt.protocol.client import is_socket_answering

from ._workload import fill_store

#: Bound on any single wait for another process; a stuck wait fails the benchmark, not the run.
STEP_TIMEOUT = 60.0
#: The raw JSON-line server the two-process figures are measured against.
ECHO_SERVER = Path(__file__).with_name("echo_server.py")


def script(name: str) -> Path:
    """A console script of the virtualenv running the benchmarks (``agentrt``, ``agenttui``)."""
    return Path(sys.executable).with_name(name)


def isolated_env(root: Path) -> dict[str, str]:
    """This environment, with agentrt's state, socket and runtime folders under `root`.

    No benchmark may touch the user's own daemon or store.
    """
    env = dict(os.environ)
    for name in ("AGENTRT_MODEL", "AGENTRT_RESTRICTED"):
        env.pop(name, None)
    env.update(
        AGENTRT_STATE_DIR=os.fspath(root / "state"),
        AGENTRT_SOCKET=os.fspath(root / "daemon.sock"),
        XDG_RUNTIME_DIR=os.fspath(root / "run"),
        XDG_STATE_HOME=os.fspath(root / "xdg-state"),
    )
    return env


async def ensure_store(state_dir: Path, count: int) -> Path:
    """`state_dir` holding a store of `count` paused ``cli-`` tasks, written once and reused."""
    done = trio.Path(state_dir / f".filled-{count}")
    if not await done.exists():
        await trio.Path(state_dir).mkdir(mode=0o700, parents=True, exist_ok=True)
        await fill_store(state_dir / "tasks.db", count)
        await done.touch()
    return state_dir


def peak_rss_mib(pid: int) -> float | None:
    """The peak resident memory of process `pid` in MiB (Linux), or None."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    match = re.search(r"^VmHWM:\s+(\d+) kB", status, re.MULTILINE)
    return int(match.group(1)) / 1024 if match else None


@attrs.define(eq=False)
class DaemonProcess:
    """``python -m agentrt.daemon`` as a child process; its stderr goes to `log_path`."""

    socket_path: Path
    state_dir: Path
    workdir: Path
    log_path: Path
    env: dict[str, str] | None = None
    process: trio.Process | None = attrs.field(default=None, init=False)

    async def start(self, nursery: trio.Nursery) -> None:
        """Start the daemon and wait until it says it is listening."""
        await trio.Path(self.workdir).mkdir(parents=True, exist_ok=True)
        self.process = process = await trio.lowlevel.open_process(
            [
                sys.executable,
                "-m",
                "agentrt.daemon",
                "--socket",
                os.fspath(self.socket_path),
                "--state-dir",
                os.fspath(self.state_dir),
                "--workdir",
                os.fspath(self.workdir),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=self.env,
            start_new_session=True,
        )
        ready = trio.Event()
        seen = bytearray()

        async def pump() -> None:
            assert process.stderr is not None
            with open(self.log_path, "ab") as log:  # noqa: ASYNC230 - small appends
                while chunk := await process.stderr.receive_some(65536):
                    log.write(chunk)
                    log.flush()
                    if not ready.is_set():
                        seen.extend(chunk)
                        if b"listening on" in seen and seen.endswith(b"\n"):
                            ready.set()
            ready.set()

        nursery.start_soon(pump)
        with trio.fail_after(STEP_TIMEOUT):
            await ready.wait()
        if b"listening on" not in seen:
            raise RuntimeError(f"the daemon did not start: {seen.decode(errors='replace')[-2000:]}")

    async def stop(self) -> None:
        """SIGTERM (a graceful stop), then SIGKILL if it does not exit in time."""
        process = self.process
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        with trio.move_on_after(STEP_TIMEOUT):
            await process.wait()
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        await process.wait()

    def peak_rss_mib(self) -> float | None:
        """The daemon's peak resident memory so far, in MiB."""
        return None if self.process is None else peak_rss_mib(self.process.pid)


@attrs.define(eq=False)
class EchoServer:
    """The raw JSON-line server (``echo_server.py``) as a child process."""

    socket_path: Path
    process: trio.Process | None = attrs.field(default=None, init=False)

    async def start(self) -> None:
        """Start it and wait until it says ``ready``."""
        self.process = process = await trio.lowlevel.open_process(
            [sys.executable, os.fspath(ECHO_SERVER), os.fspath(self.socket_path)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
        )
        assert process.stdout is not None
        with trio.fail_after(STEP_TIMEOUT):
            said = b""
            while b"ready" not in said:
                chunk = await process.stdout.receive_some(1024)
                if not chunk:
                    raise RuntimeError("the echo server exited before it was ready")
                said += chunk

    async def stop(self) -> None:
        """Terminate it."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            await self.process.wait()


@attrs.define(eq=False)
class LineClient:
    """A raw Trio JSON-line client: send one object, read one line back, decode it."""

    stream: trio.SocketStream
    _buffer: bytearray = attrs.field(factory=bytearray, init=False)

    @classmethod
    async def connect(cls, path: Path) -> LineClient:
        """Connect to the Unix socket `path`."""
        return cls(await trio.open_unix_socket(os.fspath(path)))

    async def round_trip(self, message: dict[str, object]) -> object:
        """Send `message` as one line; return the decoded line that comes back."""
        await self.stream.send_all(json.dumps(message, separators=(",", ":")).encode() + b"\n")
        while (newline := self._buffer.find(b"\n")) < 0:
            data = await self.stream.receive_some(65536)
            if not data:
                raise EOFError("the echo server closed the connection")
            self._buffer += data
        line = bytes(self._buffer[:newline])
        del self._buffer[: newline + 1]
        return json.loads(line)

    async def aclose(self) -> None:
        """Close the connection."""
        await self.stream.aclose()


# -- commands, timed from the outside -----------------------------------------------


def start_daemon(
    root: Path, env: dict[str, str], name: str
) -> tuple[subprocess.Popen[bytes], Path, Path]:
    """A daemon on `root`/`name`.sock holding `root`/`name`-state, its output in
    `root`/`name`-daemon.log, once it answers; the process, its socket and its state folder."""
    socket_path, state, log_path = (
        root / f"{name}{end}" for end in (".sock", "-state", "-daemon.log")
    )
    with open(log_path, "ab") as log:
        daemon = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "agentrt.daemon",
                "--socket",
                os.fspath(socket_path),
                "--state-dir",
                os.fspath(state),
                "--workdir",
                os.fspath(root),
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env=env,
            start_new_session=True,
        )
    deadline = time.monotonic() + STEP_TIMEOUT
    while not is_socket_answering(socket_path):
        if daemon.poll() is not None or time.monotonic() > deadline:
            stop_daemon(daemon)
            raise RuntimeError(f"the daemon did not start; see {log_path}")
        time.sleep(0.05)
    return daemon, socket_path, state


def stop_daemon(daemon: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL if it has not ended after `STEP_TIMEOUT`."""
    daemon.send_signal(signal.SIGTERM)
    try:
        daemon.wait(timeout=STEP_TIMEOUT)
    except subprocess.TimeoutExpired:
        daemon.kill()
        daemon.wait()


def timed_run(command: list[str], env: dict[str, str], cwd: Path) -> tuple[float, str]:
    """Run `command` to its end; return (wall seconds, its standard output).

    Raises `RuntimeError` with its standard error when it fails.
    """
    start = time.perf_counter()
    done = subprocess.run(
        command,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        env=env,
        cwd=cwd,
        timeout=STEP_TIMEOUT,
        check=False,
    )
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(command)} exited with {done.returncode}: "
            f"{done.stderr.decode(errors='replace')[-1000:]}"
        )
    return elapsed, done.stdout.decode(errors="replace")


_ESCAPE = re.compile(
    rb"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)|[()][0-9A-Za-z]|[=>78])"
)
#: A terminal's answer to "where is the cursor?" (a full-screen app may ask before drawing).
_CURSOR_QUERY = b"\x1b[6n"


def screen_text(output: bytes) -> str:
    """What a terminal shows of `output`, roughly: its text with escape sequences removed."""
    return _ESCAPE.sub(b"", output).decode("utf-8", errors="replace")


def time_to_screen(
    command: list[str],
    env: dict[str, str],
    cwd: Path,
    marker: re.Pattern[str] | None,
    *,
    later: re.Pattern[str] | None = None,
    later_timeout: float = 5.0,
    size: tuple[int, int] = (40, 120),
) -> tuple[float, float | None]:
    """Seconds from starting `command` in a fresh terminal (a pty) until `marker` shows.

    With `marker` None, the seconds until the command exits (a baseline run
    the same way). Once `marker` shows, waits up to `later_timeout` more for
    `later` and returns its time too (None if it never showed). The terminal
    answers cursor-position queries as a real one would. The command is
    terminated at the end.
    """
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", size[0], size[1], 0, 0))
    env = {**env, "TERM": "xterm-256color", "COLUMNS": str(size[1]), "LINES": str(size[0])}
    start = time.perf_counter()
    process = subprocess.Popen(
        command,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=env,
        cwd=cwd,
        start_new_session=True,
        close_fds=True,
    )
    os.close(slave)
    output = bytearray()
    first: float | None = None
    try:
        deadline = start + STEP_TIMEOUT
        while True:
            now = time.perf_counter()
            if first is not None and (later is None or now > first + start + later_timeout):
                return first, None
            if now > deadline:
                raise RuntimeError(
                    f"{' '.join(command)}: nothing matching {marker and marker.pattern!r} after "
                    f"{STEP_TIMEOUT:g} s; the screen showed: {screen_text(bytes(output))[-500:]!r}"
                )
            ready, _, _ = select.select([master], [], [], 0.1)
            if not ready:
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError as exc:  # EIO: the command exited and closed the terminal
                if exc.errno != errno.EIO:
                    raise
                chunk = b""
            if not chunk:
                code = process.wait(timeout=STEP_TIMEOUT)
                if marker is None and code == 0:
                    return time.perf_counter() - start, None
                if first is not None:
                    return first, None
                raise RuntimeError(
                    f"{' '.join(command)} exited with {code}: {screen_text(bytes(output))[-500:]!r}"
                )
            output += chunk
            if _CURSOR_QUERY in chunk:
                os.write(master, b"\x1b[1;1R")
            shown = screen_text(bytes(output))
            if first is None and marker is not None and marker.search(shown):
                first = time.perf_counter() - start
            if first is not None and later is not None and later.search(shown):
                return first, time.perf_counter() - start
    finally:
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        os.close(master)

"""What every suite shares: its result row, a daemon process, frame helpers, seeds."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import AsyncIterator
from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Sequence
from contextlib import asynccontextmanager
from contextlib import contextmanager
from pathlib import Path

import attrs
import trio

from agentrt.agent.sudo import PrivilegedResult
from agentrt.core.runtime import Runtime
from agentrt.core.runtime import open_runtime
from agentrt.daemon import Daemon
from agentrt.frontends.terminal.connection import RunCounter
from agentrt.models.scripted import ScriptedModel
from agentrt.protocol.client import Client
from agentrt.protocol.frames import DaemonFrame
from agentrt.protocol.frames import EndedFrame

#: Bound on any single wait of a suite; a stuck wait is a failure, not a hang.
STEP_TIMEOUT = 30.0
#: The folder holding the ``stress`` package.
_PROJECT_ROOT = os.fspath(Path(__file__).resolve().parent.parent)


@attrs.define
class SuiteResult:
    """One row of the table: what was tried, what went wrong, and how to replay it."""

    suite: str
    #: What the count counts ("kills survived"), and what a failure is ("pending tasks lost").
    done_label: str
    bad_label: str
    done: int = 0
    bad: int = 0
    seed: int | None = None
    seconds: float = 0.0
    #: One line per failure, each naming what to replay.
    failures: list[str] = attrs.field(factory=list)
    #: What else is worth printing under the table (what the suite covered).
    notes: list[str] = attrs.field(factory=list)
    #: Shown after the failure count in the table (a split of what was counted).
    detail: str = ""
    #: Tracebacks of what broke the suite itself, printed in full after the table.
    tracebacks: list[str] = attrs.field(factory=list)

    def fail(self, message: str) -> None:
        """Count one failure and keep its description."""
        self.bad += 1
        if len(self.failures) < 50:
            self.failures.append(message)

    @property
    def ok(self) -> bool:
        """True when nothing was lost, leaked, crashed or found."""
        return self.bad == 0

    def crashed(self, exc: BaseException, replay: str) -> None:
        """Count a failure of the suite itself, naming its real cause (not its group)."""
        self.fail(f"the suite itself failed: {describe_failure(exc)} ({replay})")
        self.tracebacks.append(format_failure(exc))


def failure_leaves(exc: BaseException) -> list[BaseException]:
    """What really went wrong inside `exc`: the exceptions in its (nested) groups.

    Cancellations are left out when anything else is there: they are what a
    failure does to its siblings, not a cause.
    """
    if isinstance(exc, BaseExceptionGroup):
        leaves = [leaf for sub in exc.exceptions for leaf in failure_leaves(sub)]
        real = [leaf for leaf in leaves if not isinstance(leaf, trio.Cancelled)]
        return real or leaves
    return [exc]


def describe_failure(exc: BaseException) -> str:
    """One line per real cause: ``TooSlowError (after Cancelled: ...) at load.py:155``."""
    parts = []
    for leaf in failure_leaves(exc):
        text = " ".join(str(leaf).split())[:500]
        frames = traceback.extract_tb(leaf.__traceback__)
        ours = [f for f in frames if _is_ours(f.filename)] or frames
        at = f" at {Path(ours[-1].filename).name}:{ours[-1].lineno}" if ours else ""
        parts.append(f"{type(leaf).__name__}{': ' + text if text else ''}{at}")
    return " + ".join(parts)


def _is_ours(filename: str) -> bool:
    """A frame of this project (not of a library or the standard library)."""
    return "site-packages" not in filename and not filename.startswith(sys.base_prefix)


def format_failure(exc: BaseException) -> str:
    """The full traceback of each real cause of `exc`, one after the other."""
    leaves = failure_leaves(exc)
    return "\n".join(
        f"-- cause {n} of {len(leaves)}:\n" + "".join(traceback.format_exception(leaf)).rstrip()
        for n, leaf in enumerate(leaves, 1)
    )


@contextmanager
def short_tempdir(prefix: str) -> Iterator[Path]:
    """A fresh folder under /tmp: a Unix socket path must stay under 108 bytes."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def python() -> str:
    """The interpreter running this suite (the project's virtualenv)."""
    return sys.executable


@attrs.define(eq=False)
class DaemonProcess:
    """``python -m agentrt.daemon`` as a child process in its own process group.

    `kill` sends SIGKILL to that group. The shell commands of its tools run in
    groups of their own, which die with the daemon by themselves (see
    `agentrt.agent.toolproc`). Everything the daemon writes to stderr is appended
    to `log_path`.
    """

    socket_path: Path
    state_dir: Path
    workdir: Path
    log_path: Path
    extra_args: tuple[str, ...] = ()
    env: dict[str, str] | None = None
    #: The module run with ``python -m`` (the crash suite's faulty daemon wraps the real one).
    module: str = "agentrt.daemon"
    process: trio.Process | None = attrs.field(default=None, init=False)
    starts: int = attrs.field(default=0, init=False)

    def command(self) -> list[str]:
        """The daemon's command line."""
        return [
            python(),
            "-m",
            self.module,
            "--socket",
            os.fspath(self.socket_path),
            "--state-dir",
            os.fspath(self.state_dir),
            "--workdir",
            os.fspath(self.workdir),
            *self.extra_args,
        ]

    async def start(
        self,
        nursery: trio.Nursery,
        *,
        ready: bytes = b"listening on",
        extra_env: dict[str, str] | None = None,
    ) -> str:
        """Start the daemon; return its stderr up to the line that says it is `ready`.

        The daemon prints ``listening on PATH`` once its socket accepts
        connections (``HTTP API ... on URL`` once the HTTP server does).
        `extra_env` is added to the environment of this start only.
        """
        assert not self.alive, "the daemon is already running"
        env = dict(os.environ if self.env is None else self.env)
        env.update(extra_env or {})
        # The stress package itself must be importable for a wrapping module.
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_PROJECT_ROOT, env.get("PYTHONPATH")) if p)
        process = await trio.lowlevel.open_process(
            self.command(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,
        )
        self.process = process
        self.starts += 1
        seen = trio.Event()
        text = bytearray()

        async def pump() -> None:
            assert process.stderr is not None
            try:
                with open(self.log_path, "ab") as log:  # noqa: ASYNC230 - small appends
                    while True:
                        chunk = await process.stderr.receive_some(65536)
                        if not chunk:
                            seen.set()
                            return
                        log.write(chunk)
                        log.flush()
                        if not seen.is_set():
                            text.extend(chunk)
                            if ready in text and text.endswith(b"\n"):
                                seen.set()
            except trio.Cancelled:
                # The suite is going away (it failed) with the daemon still running: a
                # daemon in a session of its own would outlive it.
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                raise

        nursery.start_soon(pump)
        with trio.fail_after(STEP_TIMEOUT):
            await seen.wait()
        if ready not in text:
            await process.wait()
            raise RuntimeError(
                f"the daemon exited with {process.returncode}:\n{self.log_text()[-4000:]}"
            )
        return text.decode("utf-8", "replace")

    async def kill(self) -> None:
        """SIGKILL the daemon's process group and reap the daemon."""
        assert self.process is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        with trio.fail_after(STEP_TIMEOUT):
            await self.process.wait()

    async def kill_unreaped(self) -> None:
        """SIGKILL the daemon's process group and wait until the daemon is dead, without
        reaping it: a zombie, as under a parent that does not wait for it, until `reap`."""
        assert self.process is not None
        pid = self.process.pid
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        with trio.fail_after(STEP_TIMEOUT):
            await trio.to_thread.run_sync(
                lambda: os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT), abandon_on_cancel=True
            )

    async def reap(self) -> None:
        """Reap the daemon (after `kill_unreaped`)."""
        assert self.process is not None
        with trio.fail_after(STEP_TIMEOUT):
            await self.process.wait()

    def stacks(self, within: float = 5.0) -> str:
        """Every thread's stack of the running daemon (its SIGUSR1), as its stderr gave them.

        Blocking, for a suite's worker thread: the log is written by the Trio thread
        (`start`'s pump). What the daemon wrote since the signal, once it has written its
        entry's frame or `within` seconds have passed; "" without a live daemon.
        """
        if self.process is None or self.process.returncode is not None:
            return ""
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.process.pid, signal.SIGUSR1)
        deadline = time.monotonic() + within
        said = b""
        while time.monotonic() < deadline:
            with open(self.log_path, "rb") as log:
                log.seek(offset)
                now = log.read()
            if now == said and b"(most recent call first)" in said:
                break  # written, and nothing more came for a while
            said = now
            time.sleep(0.1)  # the daemon writes, another thread copies: nothing to wait on
        return said.decode("utf-8", "replace")

    async def kill_alone(self) -> None:
        """SIGKILL the daemon process only (not its group) and reap it."""
        assert self.process is not None
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.process.pid, signal.SIGKILL)
        with trio.fail_after(STEP_TIMEOUT):
            await self.process.wait()

    async def wait_exit(self, seconds: float) -> bool:
        """Wait up to `seconds` for the daemon to exit by itself; True if it did."""
        assert self.process is not None
        with trio.move_on_after(seconds):
            await self.process.wait()
        return not self.alive

    async def terminate(self) -> None:
        """SIGTERM the daemon and wait for it to exit (a graceful stop)."""
        if not self.alive:
            return
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        with trio.move_on_after(STEP_TIMEOUT):
            await self.process.wait()
            return
        await self.kill()

    @property
    def alive(self) -> bool:
        """Whether the daemon process is still running."""
        return self.process is not None and self.process.poll() is None

    def log_text(self) -> str:
        """Everything the daemon wrote to stderr so far."""
        try:
            return self.log_path.read_text("utf-8", "replace")
        except FileNotFoundError:
            return ""


async def poll_until(ready: Callable[[], bool], seconds: float, every: float = 0.05) -> bool:
    """Check `ready` every `every` seconds until it holds (True) or `seconds` pass (False).

    For the state of real processes and files, which offer no event to wait on.
    """
    with trio.move_on_after(seconds):
        while True:
            if ready():
                return True
            await trio.sleep(every)
    return ready()


async def collect_until(
    client: Client, done: Callable[[DaemonFrame], bool], into: list[DaemonFrame] | None = None
) -> list[DaemonFrame]:
    """Receive frames until `done` says so; return them (the last one included)."""
    frames = into if into is not None else []
    while True:
        frame = await client.receive()
        frames.append(frame)
        if done(frame):
            return frames


def is_ended(frame: DaemonFrame) -> bool:
    """The last frame of a run."""
    return isinstance(frame, EndedFrame)


def http_base(said: str) -> str:
    """The ``http://HOST:PORT`` the daemon said its HTTP API listens on."""
    found = re.search(r"web chat on (http://[^/\s]+)", said)
    if found is None:
        raise RuntimeError(f"the daemon did not say where its HTTP API listens: {said!r}")
    return found.group(1)


def format_table(results: Sequence[SuiteResult]) -> str:
    """The table `python -m stress` prints."""
    rows = [
        (
            r.suite,
            f"{r.done} {r.done_label}",
            f"{r.bad} {r.bad_label}" + (f"; {r.detail}" if r.detail else ""),
            f"{r.seconds:.0f}s",
        )
        for r in results
    ]
    header = ("suite", "done", "failures", "time")
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(4)]
    lines = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(header)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    for row in rows:
        lines.append("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip())
    return "\n".join(lines)


@attrs.define
class StandInVerifier:
    """Stands in for sudo in-process: one known password, never cached, runs nothing."""

    password: str = "sesame"
    tried: int = 0

    async def cached(self) -> bool:
        await trio.lowlevel.checkpoint()
        return False

    async def verify(self, password: str) -> bool:
        await trio.lowlevel.checkpoint()
        self.tried += 1
        return password == self.password

    async def run(self, argv: Sequence[str], stdin: bytes | None = None) -> PrivilegedResult:
        await trio.lowlevel.checkpoint()
        return PrivilegedResult(0, b"")


@attrs.define(eq=False)
class TrackedDaemon(Daemon):
    """The daemon, counting connections being served so a suite can wait until none is."""

    handling: RunCounter = attrs.field(factory=RunCounter, init=False)

    async def _handle(self, stream: trio.SocketStream) -> None:
        self.handling.enter()
        try:
            await super()._handle(stream)
        finally:
            self.handling.exit()


@asynccontextmanager
async def inprocess_daemon(
    root: Path, *, model: ScriptedModel | None = None, verifier: StandInVerifier | None = None
) -> AsyncIterator[tuple[Runtime, TrackedDaemon, trio.Nursery]]:
    """A runtime and a daemon serving it on a socket under `root`, in this process."""
    workdir = root / "work"
    workdir.mkdir(exist_ok=True)
    async with (
        open_runtime(
            root / "state",
            model=model or ScriptedModel(word_delay=0.001, stream_delay=0.002),
            workdir=workdir,
            restricted_paths=[root / "restricted"],
            verifier=verifier or StandInVerifier(),
        ) as runtime,
        trio.open_nursery() as nursery,
    ):
        daemon = TrackedDaemon(runtime, root / "s" / "d.sock")
        await nursery.start(daemon.serve)
        try:
            yield runtime, daemon, nursery
        finally:
            await daemon.shutdown(grace=STEP_TIMEOUT)
            nursery.cancel_scope.cancel()

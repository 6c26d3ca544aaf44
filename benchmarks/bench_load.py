"""A cancel on a busy daemon: one daemon process streaming 100 runs at once, this process its client.

=======================  ==============================================  =======
benchmark                subject vs baseline                             target
=======================  ==============================================  =======
``cancel_under_load``    p99 of a ``cancel`` (pause) frame sent -> the   <= 3x
                         run's ``ended`` frame read, with 100 other
                         runs streaming text on the daemon, vs the same
                         p99 with none
=======================  ==============================================  =======

The daemon's model is a replay (``replay:PATH``) of one long turn, a word
every 20 ms: 100 runs make 5,000 text frames a second on the daemon's one
loop. The 100 streaming windows are raw sockets of a process of their own
(this module run as a script), which read and drop what they are sent the
way agenttui reads a stream: what came since the last read, at most every
1/30 s. This process reads only the measured window, as a person's terminal
would beside 100 others. The samples alternate in phases,
ABBA: the load process is started for a subject phase and stopped (its
windows closed) for a baseline phase.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import trio

from agentrt.core.cause import Cause
from agentrt.protocol.client import Client
from agentrt.protocol.client import new_window_hash
from agentrt.protocol.codec import encode
from agentrt.protocol.frames import PROTOCOL_VERSION
from agentrt.protocol.frames import Ack
from agentrt.protocol.frames import Cancel
from agentrt.protocol.frames import DaemonAction
from agentrt.protocol.frames import DaemonRequest
from agentrt.protocol.frames import DaemonStatus
from agentrt.protocol.frames import EndedFrame
from agentrt.protocol.frames import Hello
from agentrt.protocol.frames import PendingAction
from agentrt.protocol.frames import PendingRequest
from agentrt.protocol.frames import Run
from agentrt.protocol.frames import TaskFrame
from agentrt.protocol.frames import TextFrame

from ._harness import Result
from ._harness import format_time
from ._processes import DaemonProcess
from ._processes import isolated_env
from .bench_processes import _until

#: Runs streaming beside the measured one, and the pace of their words.
LOAD_RUNS = 100
WORD_DELAY = 0.02
#: Words in the replayed turn: longer than any phase lasts (20,000 words = 400 s).
WORDS = 20_000
#: How often a streaming window reads, at most: as agenttui does when redraws are cheap.
READ_EVERY = 1 / 30
#: Text frames the measured run sends before its cancel: it is streaming when stopped.
TEXT_BEFORE_CANCEL = 2


def _p99(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=100, method="inclusive")[98]


class _Load:
    """`LOAD_RUNS` windows, each a raw socket that starts one streaming run and drops what
    it reads."""

    def __init__(self, socket_path: Path, workdir: Path) -> None:
        self.socket_path = socket_path
        self.workdir = workdir
        #: Frames the windows read.
        self.received = 0
        self._scope: trio.CancelScope | None = None

    async def _window(self, streaming: trio.Semaphore | None) -> None:
        stream = await trio.open_unix_socket(os.fspath(self.socket_path))
        async with stream:
            hello = Hello(PROTOCOL_VERSION, new_window_hash())
            await stream.send_all(encode(hello) + encode(Run("go", cwd=os.fspath(self.workdir))))
            got = 0
            while data := await stream.receive_some(65536):
                self.received += data.count(b"\n")  # a frame a line
                got += len(data)
                if streaming is not None and got > 2048:  # the run's text flows
                    streaming.release()
                    streaming = None
                # As agenttui reads a stream: what came since its last redraw, in one read,
                # at most every 1/30 s (see "Transcript" in docs/tui.md).
                await trio.sleep(READ_EVERY)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Start the windows; report once every run streams; run until cancelled."""
        streaming = trio.Semaphore(0)
        with trio.CancelScope() as self._scope:
            async with trio.open_nursery() as nursery:
                for _ in range(LOAD_RUNS):
                    nursery.start_soon(self._window, streaming)
                for _ in range(LOAD_RUNS):
                    await streaming.acquire()
                task_status.started()

    def stop(self) -> None:
        """Close every window: the daemon stops their runs as disconnects."""
        assert self._scope is not None
        self._scope.cancel()


class _LoadProcess:
    """`_Load` in a child process: started, it streams; stopped, it says how many frames a
    second it read meanwhile."""

    def __init__(self, socket_path: Path, workdir: Path) -> None:
        self.socket_path = socket_path
        self.workdir = workdir
        self.frames_per_second = 0
        self._process: trio.Process | None = None
        self._out: trio.abc.ReceiveStream | None = None

    async def start(self) -> None:
        """Start the process; return once its every run streams."""
        self._process = process = await trio.lowlevel.open_process(
            [
                sys.executable,
                "-m",
                "benchmarks.bench_load",
                os.fspath(self.socket_path),
                os.fspath(self.workdir),
            ],
            cwd=Path(__file__).parent.parent,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert process.stdout is not None
        self._out = process.stdout
        with trio.fail_after(60):
            if await self._line() != "streaming":
                raise RuntimeError("the load process did not start its runs")

    async def _line(self) -> str:
        assert self._out is not None
        data = b""
        while not data.endswith(b"\n"):
            chunk = await self._out.receive_some(4096)
            if not chunk:
                break
            data += chunk
        return data.decode().strip()

    async def stop(self) -> None:
        """Close its windows (its stdin closed); read how many frames a second they read."""
        assert self._process is not None and self._process.stdin is not None
        await self._process.stdin.aclose()
        with trio.fail_after(60):
            self.frames_per_second = int(await self._line() or 0)
            await self._process.wait()


async def _serve_load(socket_path: Path, workdir: Path) -> None:
    """The load process: stream until stdin closes, then print the frames read a second."""
    load = _Load(socket_path, workdir)
    async with trio.open_nursery() as nursery:
        await nursery.start(load.run)
        print("streaming", flush=True)
        before, at = load.received, time.perf_counter()
        stdin = trio.lowlevel.FdStream(os.dup(0))
        while await stdin.receive_some(4096):
            pass
        rate = (load.received - before) / (time.perf_counter() - at)
        load.stop()
    print(round(rate), flush=True)


async def _runs_in_flight(client: Client) -> int:
    await client.send(DaemonRequest(DaemonAction.STATUS))
    status = await _until(client, DaemonStatus)
    return status.runs


async def _wait_runs(client: Client, most: int) -> None:
    """Wait until at most `most` runs are in flight on the daemon (a closed load saved).

    The runs are another process's: there is no event to wait on, so the daemon is
    asked every 50 ms, for at most a minute.
    """
    for _ in range(1200):
        if await _runs_in_flight(client) <= most:
            return
        await trio.sleep(0.05)
    raise RuntimeError(f"the daemon still runs more than {most} runs after a minute")


async def _cancel_sample(client: Client, workdir: Path, problems: list[str]) -> float:
    """Start a streaming run; time a pause from its ``cancel`` frame to its ``ended`` frame."""
    with trio.fail_after(60):
        await client.send(Run("go", cwd=os.fspath(workdir)))
        task = await _until(client, TaskFrame)
        for _ in range(TEXT_BEFORE_CANCEL):
            await _until(client, TextFrame, lambda f: f.task_hash == task.task_hash)
        start = time.perf_counter()
        await client.send(Cancel(task.task_hash, Cause.PAUSE))
        ended = await _until(client, EndedFrame, lambda f: f.task_hash == task.task_hash)
        elapsed = time.perf_counter() - start
        if ended.cause is not Cause.PAUSE or not ended.pending_kept:
            problems.append(f"a pause ended with {ended!r}")
        await client.send(PendingRequest(PendingAction.DISCARD, task.session_id))
        await _until(client, Ack, lambda f: f.session == task.session_id)
    return elapsed


async def bench_cancel_under_load(root: Path, rounds: int = 400, phases: int = 4) -> Result:
    """The p99 of a pause with `LOAD_RUNS` runs streaming on the daemon vs with none."""
    env = isolated_env(root)
    replay = root / "long-turn.json"
    replay.write_text(
        json.dumps({"turns": [{"text": " ".join(["w"] * WORDS), "delay": WORD_DELAY}]})
    )
    env["AGENTRT_MODEL"] = f"replay:{replay}"
    workdir = root / "work"
    daemon = DaemonProcess(root / "load.sock", root / "load", workdir, root / "load.log", env)
    problems: list[str] = []
    loaded: list[float] = []
    idle: list[float] = []
    per_phase = max(2, rounds // phases)
    frames_per_second: list[float] = []
    async with trio.open_nursery() as nursery:
        await daemon.start(nursery)
        try:
            async with await Client.connect(daemon.socket_path) as client:
                for _ in range(5):  # warm-up, not counted
                    await _cancel_sample(client, workdir, problems)
                for phase in range(phases):
                    subject = phase % 4 in (0, 3)
                    if subject:
                        load = _LoadProcess(daemon.socket_path, workdir)
                        await load.start()
                    for _ in range(per_phase):
                        sample = await _cancel_sample(client, workdir, problems)
                        (loaded if subject else idle).append(sample)
                    if subject:
                        await load.stop()
                        frames_per_second.append(load.frames_per_second)
                        await _wait_runs(client, 0)
        finally:
            await daemon.stop()
    return Result(
        "cancel_under_load",
        _p99(loaded),
        _p99(idle),
        "ratio",
        3.0,
        len(loaded),
        tuple(problems[:3]),
        (
            f"p99 of {len(loaded)} pauses with {LOAD_RUNS} runs streaming a word every "
            f"{WORD_DELAY * 1000:g} ms on the daemon vs {len(idle)} with none, in {phases} "
            "phases (ABBA)",
            f"medians: {format_time(statistics.median(loaded))} loaded, "
            f"{format_time(statistics.median(idle))} idle; the load read about "
            f"{statistics.median(frames_per_second):,.0f} frames a second",
        ),
    )


async def run_all(root: Path, *, rounds: int | None = None) -> list[Result]:
    """The load benchmark, in one Trio run."""
    counts = {} if rounds is None else {"rounds": rounds}
    return [await bench_cancel_under_load(root, **counts)]


if __name__ == "__main__":
    trio.run(_serve_load, Path(sys.argv[1]), Path(sys.argv[2]))

"""Two processes: a real daemon process, and this process as its client.

The baseline of the round trips is a raw Trio JSON-line round trip between two
processes: this process and ``echo_server.py``, a server that decodes each line
and sends it back encoded. Both servers run side by side, and the samples
alternate between them in ABBA order.

=======================  ==============================================  =======
benchmark                subject vs baseline                             target
=======================  ==============================================  =======
``cancel_2p``            a ``cancel`` (pause) frame sent -> the run's    <= 2x
                         ``ended`` frame read, vs a raw round trip
``ask_2p``               an ``ask`` frame read -> ``answer`` sent ->     <= 1.5x
                         its ``ack`` read, sent once the producer
                         resumed with it, vs a raw round trip
``pending_list_10k``     ``pending list`` over the socket with 10,000    <= 12x
                         pending tasks vs with 1,000
``answer_idle_1000``     the ``ask_2p`` figure with 1,000 idle windows   <= 1.3x
                         connected vs with none (two daemons)
=======================  ==============================================  =======
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from collections.abc import Callable
from collections.abc import Sequence
from pathlib import Path
from typing import TypeVar

import attrs
import trio

from agentrt.core.cause import Cause
from agentrt.protocol.client import BrokenDaemonConnectionError
from agentrt.protocol.client import Client
from agentrt.protocol.client import new_window_hash
from agentrt.protocol.frames import LIST_PAGE_MAX
from agentrt.protocol.frames import Ack
from agentrt.protocol.frames import AnswerFrame
from agentrt.protocol.frames import AskFrame
from agentrt.protocol.frames import Cancel
from agentrt.protocol.frames import DaemonFrame
from agentrt.protocol.frames import EndedFrame
from agentrt.protocol.frames import ErrorFrame
from agentrt.protocol.frames import PendingAction
from agentrt.protocol.frames import PendingList
from agentrt.protocol.frames import PendingRequest
from agentrt.protocol.frames import Run
from agentrt.protocol.frames import TaskFrame
from agentrt.protocol.frames import ToolCallFrame
from agentrt.protocol.frames import ToolResultFrame

from ._harness import Result
from ._harness import format_time
from ._harness import interleave
from ._harness import interleave_samples
from ._processes import DaemonProcess
from ._processes import EchoServer
from ._processes import LineClient
from ._processes import ensure_store
from ._processes import isolated_env

_F = TypeVar("_F", bound=DaemonFrame)

#: How long a sample lets the daemon settle (into a tool call, or waiting for an answer)
#: before the timed part. The in-process benchmarks wait for all tasks to block; across
#: processes there is no such signal, so this is a short pause outside the timed part.
#: The raw round trip they are compared with waits as long before its own timed part, so
#: that both are measured from the same idle machine (see `_echo_sample`).
SETTLE = 0.005


class UnexpectedFrameError(Exception):
    """The daemon answered with an error frame where the benchmark expected another."""


async def _until(
    client: Client,
    kind: type[_F],
    match: Callable[[_F], bool] = lambda frame: True,
    *,
    tolerate: Sequence[str] = (),
) -> _F:
    """Frames until one of `kind` that `match` accepts; an error frame raises (unless about
    a frame type in `tolerate`)."""
    while True:
        frame = await client.receive()
        if isinstance(frame, kind) and match(frame):
            return frame
        if isinstance(frame, ErrorFrame) and frame.ref not in tolerate:
            raise UnexpectedFrameError(f"{frame.code.value}: {frame.message} (about {frame.ref})")


@attrs.define(eq=False)
class _Window:
    """One daemon connection used by the benchmarks, and what its samples found wrong."""

    client: Client
    workdir: Path
    socket_path: Path
    problems: list[str] = attrs.field(factory=list)
    #: From each ask sample's answer sent to its call's ``tool_result`` read.
    tool_results: list[float] = attrs.field(factory=list)

    async def cancel_sample(self) -> float:
        """Start ``sleep 1000``; time a pause from the ``cancel`` frame to the ``ended`` frame."""
        with trio.fail_after(30):
            await self.client.send(Run("sleep 1000", cwd=os.fspath(self.workdir)))
            task = await _until(self.client, TaskFrame)
            await _until(self.client, ToolCallFrame, lambda f: f.name == "sleep")
            await trio.sleep(SETTLE)
            start = time.perf_counter()
            await self.client.send(Cancel(task.task_hash, Cause.PAUSE))
            ended = await _until(self.client, EndedFrame)
            elapsed = time.perf_counter() - start
            if ended.cause is not Cause.PAUSE or not ended.pending_kept:
                self.problems.append(f"a pause ended with {ended!r}")
            await self.client.send(PendingRequest(PendingAction.DISCARD, task.session_id))
            await _until(self.client, Ack, lambda f: f.session == task.session_id)
        return elapsed

    async def ask_sample(self) -> float:
        """Start ``ask``; time ``answer`` sent -> its ``ack`` read (the producer resumed).

        The answer goes out once the ``ask`` frame was read and the daemon has
        settled, as a person's answer would. The daemon acknowledges an answer
        once the run that asked has resumed with it; the time on to that
        call's ``tool_result`` frame (its result committed, then sent) is kept
        in `tool_results`.
        """
        with trio.fail_after(30):
            await self.client.send(Run("ask Which colour?", cwd=os.fspath(self.workdir)))
            task = await _until(self.client, TaskFrame)
            ask = await _until(self.client, AskFrame)
            await trio.sleep(SETTLE)  # a person answers later, when the daemon is idle
            start = time.perf_counter()
            await self.client.send(AnswerFrame(ask.id, "blue"))
            ack = await _until(self.client, Ack, lambda f: f.ref == "answer")
            elapsed = time.perf_counter() - start
            result = await _until(self.client, ToolResultFrame)
            self.tool_results.append(time.perf_counter() - start)
            if ack.task != task.task_hash:
                self.problems.append(f"the answer was acknowledged as {ack!r}")
            if result.name != "ask_user" or "blue" not in result.preview:
                self.problems.append(f"the answer came back as {result!r}")
            # The model's closing summary is not measured: stop it (the task is discarded).
            await self.client.send(Cancel(task.task_hash))
            await _until(self.client, EndedFrame, tolerate=("cancel",))
        return elapsed


async def _echo_sample(line: LineClient, message: dict[str, object]) -> float:
    """One raw round trip, after the same idle pause as a daemon sample's (`SETTLE`).

    Without the pause, the echo server was sometimes still awake from the
    sample before and sometimes not: its round trip took either about 130 µs
    or about 300 µs on a 2-core machine, and the median fell between the two.
    """
    await trio.sleep(SETTLE)
    start = time.perf_counter()
    reply = await line.round_trip(message)
    elapsed = time.perf_counter() - start
    assert reply == message
    return elapsed


async def bench_cancel_two_processes(window: _Window, line: LineClient, rounds: int = 80) -> Result:
    """A pause over the socket, ``cancel`` sent to ``ended`` read, vs a raw round trip."""
    window.problems.clear()
    message: dict[str, object] = {"type": "cancel", "task": "0123456789ab", "pause": True}
    subject_median, baseline_median = await interleave(
        window.cancel_sample, lambda: _echo_sample(line, message), rounds
    )
    return Result(
        "cancel_2p",
        subject_median,
        baseline_median,
        "ratio",
        2.0,
        rounds,
        tuple(window.problems[:3]),
        (
            "a daemon process; this process sends cancel (pause) to a run in its sleep tool and "
            "reads ack, then ended",
            "baseline: this process and echo_server.py, one JSON line each way",
        ),
    )


async def bench_ask_two_processes(window: _Window, line: LineClient, rounds: int = 80) -> Result:
    """An ``ask_user`` question answered over the socket, vs a raw round trip."""
    window.problems.clear()
    window.tool_results.clear()
    message: dict[str, object] = {"type": "answer", "ask": "q1", "value": "blue", "secret": None}
    subject_median, baseline_median = await interleave(
        window.ask_sample, lambda: _echo_sample(line, message), rounds
    )
    return Result(
        "ask_2p",
        subject_median,
        baseline_median,
        "ratio",
        1.5,
        rounds,
        tuple(window.problems[:3]),
        (
            "from the answer sent (once the ask frame was read) to its ack read: the daemon "
            "acknowledges an answer once the run that asked has resumed with it",
            f"on to the tool_result frame of that call (its result committed, 1 synced "
            f"store write, and sent): median {format_time(statistics.median(window.tool_results))}",
        ),
    )


async def bench_idle_windows(
    first: _Window, second: _Window, idle: int, rounds: int = 120, phases: int = 4
) -> Result:
    """The ``ask_2p`` sample with `idle` idle windows on the daemon vs with none.

    Two daemon processes alike, `first`'s and `second`'s. Two daemons differ
    by themselves (by up to a fifth here: hash seeds, memory layout, which core
    they run on), so the idle windows move between them: on the first for one
    phase, on the second for the next, and so on. The subject's samples are
    those taken on whichever daemon holds the idle windows.
    """
    first.problems.clear()
    second.problems.clear()
    crowded_times: list[float] = []
    plain_times: list[float] = []
    for phase in range(phases):
        crowded, plain = (first, second) if phase % 2 == 0 else (second, first)
        async with contextlib.AsyncExitStack() as stack:
            await _connect_idle(crowded.socket_path, idle, stack)
            subject, baseline = await interleave_samples(
                crowded.ask_sample, plain.ask_sample, max(1, rounds // phases)
            )
            crowded_times += subject
            plain_times += baseline
    return Result(
        f"answer_idle_{idle}",
        statistics.median(crowded_times),
        statistics.median(plain_times),
        "ratio",
        1.3,
        len(crowded_times),
        tuple((first.problems + second.problems)[:3]),
        (
            f"two daemon processes alike; {idle} idle windows (connections that said hello) "
            f"move between them in {phases} phases; samples alternate between the daemons",
        ),
    )


async def _connect_idle(path: Path, count: int, stack: contextlib.AsyncExitStack) -> None:
    """Connect `count` windows that say hello and then do nothing."""

    async def one() -> None:
        client = await Client.connect(path, window=new_window_hash())
        await stack.enter_async_context(client)

    for first in range(0, count, 50):
        async with trio.open_nursery() as nursery:
            for _ in range(min(50, count - first)):
                nursery.start_soon(one)


# -- pending list over the socket ----------------------------------------------------


async def _list_pending(path: Path) -> tuple[float, int]:
    """Time one whole ``pending list`` on a fresh connection, every page; (seconds, tasks).

    One request asks for every page (``all_pages``), as `agentrt pending list`
    does. Raises `BrokenDaemonConnectionError` or `UnexpectedFrameError` when
    the daemon cannot answer.
    """
    with trio.fail_after(60):
        async with await Client.connect(path, window=new_window_hash()) as client:
            listed = 0
            start = time.perf_counter()
            await client.send(
                PendingRequest(PendingAction.LIST, limit=LIST_PAGE_MAX, all_pages=True)
            )
            while True:
                page = await _until(client, PendingList)
                listed += len(page.tasks)
                if page.next is None:
                    break
            elapsed = time.perf_counter() - start
    return elapsed, listed


async def bench_daemon_pending_list(
    large_daemon: DaemonProcess,
    small_daemon: DaemonProcess,
    large: int,
    small: int,
    rounds: int = 10,
) -> Result:
    """``pending list`` over the real socket with `large` tasks vs `small`."""
    name = f"pending_list_{large // 1000}k" if large >= 1000 else f"pending_list_{large}"
    problems: list[str] = []
    counts: dict[int, set[int]] = {large: set(), small: set()}

    async def sample(daemon: DaemonProcess, population: int) -> float:
        elapsed, listed = await _list_pending(daemon.socket_path)
        counts[population].add(listed)
        return elapsed

    def rss() -> str:
        sizes = [d.peak_rss_mib() for d in (large_daemon, small_daemon)]
        shown = [f"{s:.0f} MiB" if s is not None else "unknown" for s in sizes]
        return f"daemon peak RSS: {shown[0]} with {large} tasks, {shown[1]} with {small}"

    try:
        await sample(large_daemon, large)
    except (BrokenDaemonConnectionError, UnexpectedFrameError) as exc:
        reason = str(exc)
        baseline = [await sample(small_daemon, small) for _ in range(rounds)]
        return Result.failed(
            name,
            reason.split(";")[0].split(": ")[-1],
            sorted(baseline)[len(baseline) // 2],
            12.0,
            rounds,
            (f"the listing at {large} tasks failed: {reason}", rss()),
        )
    subject_median, baseline_median = await interleave(
        lambda: sample(large_daemon, large), lambda: sample(small_daemon, small), rounds
    )
    for population, seen in counts.items():
        if seen != {population}:
            problems.append(
                f"listed {sorted(seen)} of {population} tasks (a paged reply: follow its pages "
                "in _list_pending)"
            )
    return Result(
        name,
        subject_median,
        baseline_median,
        "ratio",
        12.0,
        rounds,
        tuple(problems),
        (f"a fresh connection per listing, from pending list sent to the reply read; {rss()}",),
    )


# -- running them all ------------------------------------------------------------


async def run_all(
    root: Path,
    *,
    idle: int = 1000,
    tasks: Sequence[int] = (10_000, 1_000),
    stores: Path | None = None,
    rounds: int | None = None,
) -> list[Result]:
    """Every two-process benchmark, with its daemons and the echo server, in one Trio run.

    The pending-list stores are made under `stores` (default: `root`), or reused from there.
    `rounds`, when given, replaces every benchmark's own number of rounds.
    """
    counts = {} if rounds is None else {"rounds": rounds}
    stores = stores or root / "stores"
    env = isolated_env(root)
    large, small = tasks
    results: list[Result] = []

    def daemon(name: str, state: Path | None = None) -> DaemonProcess:
        return DaemonProcess(
            root / f"{name}.sock",
            state or root / name,
            root / "work",
            root / f"{name}.log",
            env,
        )

    plain, other = daemon("plain"), daemon("other")
    echo = EchoServer(root / "echo.sock")
    async with trio.open_nursery() as nursery:
        try:
            await echo.start()
            await plain.start(nursery)
            await other.start(nursery)
            line = await LineClient.connect(echo.socket_path)
            async with contextlib.AsyncExitStack() as stack:
                one = await stack.enter_async_context(await Client.connect(plain.socket_path))
                two = await stack.enter_async_context(await Client.connect(other.socket_path))
                window = _Window(one, root / "work", plain.socket_path)
                results.append(await bench_cancel_two_processes(window, line, **counts))
                results.append(await bench_ask_two_processes(window, line, **counts))
                other_window = _Window(two, root / "work", other.socket_path)
                results.append(await bench_idle_windows(window, other_window, idle, **counts))
            await line.aclose()
        finally:
            await echo.stop()
            await plain.stop()
            await other.stop()
        big = daemon("list-large", await ensure_store(stores / str(large), large))
        little = daemon("list-small", await ensure_store(stores / str(small), small))
        try:
            await big.start(nursery)
            await little.start(nursery)
            results.append(await bench_daemon_pending_list(big, little, large, small, **counts))
        finally:
            await big.stop()
            await little.stop()
    return results

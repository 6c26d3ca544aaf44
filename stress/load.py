"""Load: many concurrent sessions in cancel, pause, disconnect and resume storms, then a leak count.

The daemon runs in this process, so its registry, executor, file descriptors
and memory can be read. Each session has its own connection and, until the
storm ends, picks one action after another: a run that finishes (a
confirmation answered on the way), a run cancelled mid-stream, a question
paused and resumed, a run that sleeps, a window that vanishes mid-run and a
new one that resumes the task. Every request is accounted for: it ends with
exactly one ``ended`` frame, or it left a pending task that the next action
resumes. Afterwards the registry holds nothing, the executor runs nothing,
no task is left ``running``, no connection, entry or run object is alive,
and the process's file descriptors and memory are back near where they
started.
"""

from __future__ import annotations

import gc
import os
import random
import time
from pathlib import Path

import attrs
import trio

from agentrt._agent import AgentRun
from agentrt._pending import Entry
from agentrt._record import TaskStatus
from agentrt.client import Client
from agentrt.daemon import Connection
from agentrt.frames import (
    AnswerFrame,
    AskFrame,
    Cancel,
    DaemonFrame,
    EndedFrame,
    ErrorFrame,
    PendingAction,
    PendingRequest,
    Run,
    TaskFrame,
    TextFrame,
)

from ._common import STEP_TIMEOUT, SuiteResult, inprocess_daemon, short_tempdir

#: Memory the process may keep after the storm (allocator caches, SQLite pages).
MEMORY_TOLERANCE = 128 * 1024 * 1024
FD_TOLERANCE = 8
ACTIONS = ("finish", "cancel", "pause_resume", "sleep", "vanish")
#: Connections being opened at once. The daemon listens with a backlog of 128; past it a
#: non-blocking Unix connect fails with EAGAIN, which trio reports as a connection whose
#: first write fails (ENOTCONN). That is a connect storm, not the session load measured here.
CONNECTING = 64


@attrs.define
class _Tally:
    requests: int = 0
    ended: int = 0
    refused: int = 0
    by_action: dict[str, int] = attrs.field(factory=dict)
    connecting: trio.CapacityLimiter = attrs.field(factory=lambda: trio.CapacityLimiter(CONNECTING))


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _alive(kinds: tuple[type, ...]) -> dict[str, int]:
    gc.collect()
    counts: dict[str, int] = {}
    for obj in gc.get_objects():
        if isinstance(obj, kinds):
            counts[type(obj).__name__] = counts.get(type(obj).__name__, 0) + 1
    return counts


async def run_load(sessions: int, seconds: float, seed: int) -> SuiteResult:
    """`sessions` concurrent sessions storm for `seconds`; count leaks and lost runs."""
    result = SuiteResult("load", "sessions", "leaks or runs unaccounted", seed=seed)
    started = time.monotonic()
    rng = random.Random(seed)
    tally = _Tally()
    replay = f"(replay: python -m stress --only load --seed {seed})"
    with short_tempdir("stl-") as root:
        async with inprocess_daemon(root) as (runtime, daemon, _):
            # Warm up first, so the baseline includes what stays allocated by design.
            await _storm(
                daemon.socket_path, min(sessions, 20), 1.0, random.Random(seed + 1), _Tally(), "w"
            )
            gc.collect()
            fds, rss = _fds(), _rss()
            await _storm(daemon.socket_path, sessions, seconds, rng, tally, "s")
            with trio.fail_after(STEP_TIMEOUT):
                await daemon.handling.wait_idle()
            stats = runtime.registry.statistics()
            if stats.waiting or stats.claimed or stats.listeners:
                result.fail(f"the registry still holds {stats} {replay}")
            if runtime.executor.running():
                result.fail(f"{len(runtime.executor.running())} runs still registered {replay}")
            for record in await runtime.store.list(prefix="cli-s"):
                if record.status is TaskStatus.RUNNING:
                    result.fail(f"{record.session_id} left 'running' {replay}")
            unaccounted = tally.requests - tally.ended - tally.refused
            if unaccounted:
                result.fail(f"{unaccounted} of {tally.requests} runs never ended {replay}")
            if tally.refused:
                result.fail(f"{tally.refused} requests were refused {replay}")
            alive = _alive((Connection, Client, Entry, AgentRun))
            if alive:
                result.fail(f"objects still alive after the storm: {alive} {replay}")
            gc.collect()
            fd_delta, rss_delta = _fds() - fds, _rss() - rss
            if fd_delta > FD_TOLERANCE:
                result.fail(f"{fd_delta} file descriptors more than before the storm {replay}")
            if rss_delta > MEMORY_TOLERANCE:
                result.fail(f"memory grew by {rss_delta >> 20} MiB over the storm {replay}")
            result.done = sessions
            result.notes = [
                f"{tally.requests} runs, {tally.ended} ended; actions {tally.by_action}; "
                f"fds {fd_delta:+d}, memory {rss_delta / 2**20:+.0f} MiB"
            ]
    result.seconds = time.monotonic() - started
    return result


async def _storm(
    path: Path, sessions: int, seconds: float, rng: random.Random, tally: _Tally, prefix: str
) -> None:
    deadline = trio.current_time() + seconds
    async with trio.open_nursery() as nursery:
        for n in range(sessions):
            seed = rng.getrandbits(32)
            nursery.start_soon(
                _session, path, f"cli-{prefix}{n}", deadline, random.Random(seed), tally
            )


async def _session(
    path: Path, session: str, deadline: float, rng: random.Random, tally: _Tally
) -> None:
    pending = False
    while trio.current_time() < deadline or pending:
        action = "resume" if pending else rng.choice(ACTIONS)
        tally.by_action[action] = tally.by_action.get(action, 0) + 1
        with trio.fail_after(STEP_TIMEOUT * 2):
            pending = await _act(path, session, action, rng, tally)


async def _act(path: Path, session: str, action: str, rng: random.Random, tally: _Tally) -> bool:
    """Do one action; True when it left a pending task for the next one to resume."""
    async with tally.connecting:
        client = await Client.connect(path)
    async with client:
        if action == "resume":
            await client.send(PendingRequest(PendingAction.RESUME, session=session))
        else:
            text = {
                "finish": "stream 3; sh echo load",
                "cancel": "stream 400",
                "pause_resume": "ask pause me?",
                "sleep": "sleep 0.05; stream 2",
                "vanish": "stream 400",
            }[action]
            await client.send(Run(text, session=session))
        tally.requests += 1
        task = ""
        paused = False
        while True:
            frame: DaemonFrame = await client.receive()
            if isinstance(frame, TaskFrame):
                task = frame.task
            elif isinstance(frame, ErrorFrame):
                tally.refused += 1
                return False
            elif isinstance(frame, TextFrame) and action in ("cancel", "vanish"):
                if rng.random() < 0.3:
                    if action == "vanish":
                        tally.ended += 1  # accounted for by the pending task it leaves
                        return True
                    await client.send(Cancel(task))
                    action = "cancelling"
            elif isinstance(frame, AskFrame):
                if action == "pause_resume" and not paused:
                    paused = True
                    await client.send(Cancel(task, pause=True))
                else:
                    await client.send(AnswerFrame(frame.id, "allow" if frame.choices else "ok"))
            elif isinstance(frame, EndedFrame):
                tally.ended += 1
                if paused:
                    tally.requests += 1
                    await client.send(PendingRequest(PendingAction.RESUME, session=session))
                    paused = False
                    action = "resumed"
                    continue
                return frame.pending_kept

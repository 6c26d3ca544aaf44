"""Load: many concurrent sessions in cancel, pause, disconnect and resume storms, then a leak count.

The daemon runs in this process, so its registry, executor, file descriptors
and memory can be read. Each session, until the storm ends, picks one action
after another, each in a new window (connection): a run that finishes (a
confirmation answered on the way), a run cancelled mid-stream, a question
paused and resumed, a run that sleeps, a window that vanishes mid-run and a
new one that resumes the task. Every request is accounted for: it ends with
exactly one ``ended`` frame, or it left a pending task that the next action
resumes. No run may end ``failed``. A request that hears nothing for two
minutes is stuck and stops the storm; a slow one is not (the latency from
request to ``ended`` is reported). Afterwards the registry holds nothing, the
executor runs nothing, no task is left ``running``, no connection, entry or
run object is alive, and the process's file descriptors and memory are back
near where they started.
"""

from __future__ import annotations

import gc
import os
import random
import time
from pathlib import Path

import attrs
import trio

from agentrt.agent.loop import AgentRun
from agentrt.core.pending import Entry
from agentrt.daemon import Connection
from agentrt.protocol.client import Client
from agentrt.protocol.frames import AnswerFrame
from agentrt.protocol.frames import AskFrame
from agentrt.protocol.frames import Cancel
from agentrt.protocol.frames import DaemonFrame
from agentrt.protocol.frames import EndedFrame
from agentrt.protocol.frames import ErrorCode
from agentrt.protocol.frames import ErrorFrame
from agentrt.protocol.frames import PendingAction
from agentrt.protocol.frames import PendingRequest
from agentrt.protocol.frames import Run
from agentrt.protocol.frames import TaskFrame
from agentrt.protocol.frames import TextFrame
from agentrt.vocab.events import Outcome
from agentrt.vocab.terms import Cause
from agentrt.vocab.terms import TaskStatus

from ._common import STEP_TIMEOUT
from ._common import SuiteResult
from ._common import describe_failure
from ._common import inprocess_daemon
from ._common import short_tempdir
from .holders import holder_chain

#: Memory the process may keep after the storm (allocator caches, SQLite pages).
MEMORY_TOLERANCE = 128 * 1024 * 1024
FD_TOLERANCE = 8
ACTIONS = ("finish", "cancel", "pause_resume", "sleep", "vanish")
#: Connections being opened at once. The daemon listens with a backlog of 128; past it a
#: non-blocking Unix connect fails with EAGAIN, which trio reports as a connection whose
#: first write fails (ENOTCONN). That is a connect storm, not the session load measured here.
CONNECTING = 64


#: A request that receives no frame for this long is stuck (the storm is slow, not silent:
#: under a loaded machine a request can wait tens of seconds for the store, never this long).
SILENCE_LIMIT = STEP_TIMEOUT * 4
#: How long a new window may be refused a session whose last window has just closed.
RETRY_LIMIT = STEP_TIMEOUT * 2


@attrs.define
class _Request:
    """One request in flight: what it is, when it started, when it last heard anything."""

    session: str
    action: str
    started: float
    heard: float
    last: str = "nothing"


@attrs.define
class _Tally:
    requests: int = 0
    ended: int = 0
    refused: int = 0
    by_action: dict[str, int] = attrs.field(factory=dict)
    connecting: trio.CapacityLimiter = attrs.field(factory=lambda: trio.CapacityLimiter(CONNECTING))
    #: Seconds from a request to its ``ended`` frame, with the request, slowest kept apart.
    latencies: list[float] = attrs.field(factory=list)
    slowest: tuple[float, str] = (0.0, "")
    #: Requests refused (and sent again) while the last window of their session was closing.
    retries: int = 0
    #: Cancels that reached the daemon after their run had ended on its own.
    late_cancels: int = 0
    #: Runs that ended ``failed``: never expected in the storm.
    failed_runs: list[str] = attrs.field(factory=list)
    #: Requests in flight, by session.
    inflight: dict[str, _Request] = attrs.field(factory=dict)
    #: What went wrong in a session (its real cause), and requests found stuck.
    problems: list[str] = attrs.field(factory=list)

    def heard(self, session: str, what: str) -> None:
        request = self.inflight.get(session)
        if request is not None:
            request.heard = trio.current_time()
            request.last = what

    def latency_note(self) -> str:
        if not self.latencies:
            return "no run ended"
        ordered = sorted(self.latencies)
        p50 = ordered[len(ordered) // 2]
        p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
        worst, which = self.slowest
        return f"request to ended: p50 {p50:.1f}s, p99 {p99:.1f}s, max {worst:.1f}s ({which})"


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _alive(kinds: tuple[type, ...]) -> tuple[dict[str, int], list[str]]:
    """How many objects of each of `kinds` are alive, and what holds the first of each kind
    (`holder_chain`): the cause of a leak, not only its size."""
    gc.collect()
    found = [obj for obj in gc.get_objects() if isinstance(obj, kinds)]
    counts: dict[str, int] = {}
    chains: list[str] = []
    # By index: a loop variable would hold the object too, and be named as its holder.
    for index in range(len(found)):
        name = type(found[index]).__name__
        if name not in counts:
            chains.append(holder_chain(found[index], ignore=(found,)))
        counts[name] = counts.get(name, 0) + 1
    return counts, chains


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
            warm = _Tally()
            await _storm(
                daemon.socket_path, min(sessions, 20), 1.0, random.Random(seed + 1), warm, "w"
            )
            for problem in warm.problems:
                result.fail(f"warm-up: {problem} {replay}")
            gc.collect()
            fds, rss = _fds(), _rss()
            await _storm(daemon.socket_path, sessions, seconds, rng, tally, "s")
            with trio.move_on_after(STEP_TIMEOUT) as idle:
                await daemon.handling.wait_idle()
            if idle.cancelled_caught:
                result.fail(
                    f"{daemon.handling.count} connections still served {STEP_TIMEOUT:g}s after "
                    f"the storm {replay}"
                )
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
            for problem in tally.problems:
                result.fail(f"{problem} {replay}")
            if tally.failed_runs:
                result.fail(
                    f"{len(tally.failed_runs)} runs ended 'failed', e.g. "
                    f"{'; '.join(tally.failed_runs[:3])} {replay}"
                )
            alive, holders = _alive((Connection, Client, Entry, AgentRun))
            if alive:
                result.fail(
                    f"objects still alive after the storm: {alive}; held as "
                    f"{'; '.join(holders)} {replay}"
                )
            gc.collect()
            fd_delta, rss_delta = _fds() - fds, _rss() - rss
            if fd_delta > FD_TOLERANCE:
                result.fail(f"{fd_delta} file descriptors more than before the storm {replay}")
            if rss_delta > MEMORY_TOLERANCE:
                result.fail(f"memory grew by {rss_delta >> 20} MiB over the storm {replay}")
            result.done = sessions
            result.notes = [
                f"{tally.requests} runs, {tally.ended} ended; actions {tally.by_action}; "
                f"fds {fd_delta:+d}, memory {rss_delta / 2**20:+.0f} MiB",
                f"{tally.latency_note()}; {tally.retries} requests sent again while the last "
                f"window of their session was closing; {tally.late_cancels} cancels came "
                "after their run had ended",
            ]
    result.seconds = time.monotonic() - started
    return result


async def _storm(
    path: Path, sessions: int, seconds: float, rng: random.Random, tally: _Tally, prefix: str
) -> None:
    deadline = trio.current_time() + seconds
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_watch, tally, nursery.cancel_scope)
        async with trio.open_nursery() as storm:
            for n in range(sessions):
                seed = rng.getrandbits(32)
                storm.start_soon(
                    _session, path, f"cli-{prefix}{n}", deadline, random.Random(seed), tally
                )
        nursery.cancel_scope.cancel()


async def _watch(tally: _Tally, storm: trio.CancelScope) -> None:
    """Stop the storm when a request has heard nothing for `SILENCE_LIMIT`: it is stuck."""
    while True:
        await trio.sleep(1.0)  # a periodic check, not a wait for something
        now = trio.current_time()
        stuck = [r for r in tally.inflight.values() if now - r.heard > SILENCE_LIMIT]
        if stuck:
            for r in stuck[:5]:
                tally.problems.append(
                    f"{r.session}: a {r.action!r} request heard nothing for "
                    f"{now - r.heard:.0f}s (started {now - r.started:.0f}s ago; last frame: "
                    f"{r.last}); {len(tally.inflight)} requests were in flight"
                )
            storm.cancel()
            return


async def _session(
    path: Path, session: str, deadline: float, rng: random.Random, tally: _Tally
) -> None:
    pending = False
    refused_since: float | None = None
    action = ""
    try:
        while trio.current_time() < deadline or pending or refused_since is not None:
            if refused_since is None:
                action = "resume" if pending else rng.choice(ACTIONS)
                tally.by_action[action] = tally.by_action.get(action, 0) + 1
            outcome = await _act(path, session, action, rng, tally)
            if outcome == "retry":
                # Every action uses a new window, and the daemon may not have seen the last
                # one close yet (or finished stopping its run): the session still belongs to
                # it. Try again shortly; a client cannot wait on the daemon's state.
                now = trio.current_time()
                refused_since = now if refused_since is None else refused_since
                if now - refused_since > RETRY_LIMIT:
                    tally.problems.append(
                        f"{session}: {action} in a new window refused for "
                        f"{now - refused_since:.0f}s after the last window closed"
                    )
                    return
                tally.retries += 1
                await trio.sleep(0.05)
                continue
            refused_since = None
            pending = outcome == "pending"
    except Exception as exc:  # one session's failure is counted, with its real cause
        tally.problems.append(f"{session}: {describe_failure(exc)}")
    finally:
        tally.inflight.pop(session, None)


async def _act(path: Path, session: str, action: str, rng: random.Random, tally: _Tally) -> str:
    """Do one action in a new window: "pending" when it left a pending task for the next one
    to resume, "retry" when it must be tried again, else "done"."""
    async with tally.connecting:
        client = await Client.connect(path)
    started = trio.current_time()
    tally.inflight[session] = _Request(session, action, started, started)
    try:
        async with client:
            return await _converse(client, session, action, rng, tally, started)
    finally:
        tally.inflight.pop(session, None)


async def _converse(
    client: Client, session: str, action: str, rng: random.Random, tally: _Tally, started: float
) -> str:
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
        tally.heard(session, frame.TYPE)
        if isinstance(frame, TaskFrame):
            task = frame.task_hash
        elif isinstance(frame, ErrorFrame):
            if frame.ref == "cancel" and frame.code is ErrorCode.NOT_FOUND:
                # The run ended on its own before the cancel arrived: its ended frame
                # is on the way.
                tally.late_cancels += 1
                continue
            if frame.code is ErrorCode.NOT_FOUND and frame.ref in ("run", "pending"):
                # The session still belongs to the window of the last action (see _session).
                tally.requests -= 1
                return "retry"
            tally.refused += 1
            tally.problems.append(f"{session}: {action} refused: {frame.message}")
            return "done"
        elif isinstance(frame, TextFrame) and action in ("cancel", "vanish"):
            if rng.random() < 0.3:
                if action == "vanish":
                    tally.ended += 1  # accounted for by the pending task it leaves
                    return "pending"
                await client.send(Cancel(task))
                action = "cancelling"
        elif isinstance(frame, AskFrame):
            if action == "pause_resume" and not paused:
                paused = True
                await client.send(Cancel(task, Cause.PAUSE))
            else:
                await client.send(AnswerFrame(frame.id, "allow" if frame.choices else "ok"))
        elif isinstance(frame, EndedFrame):
            tally.ended += 1
            took = trio.current_time() - started
            tally.latencies.append(took)
            if took > tally.slowest[0]:
                tally.slowest = (took, f"{session} {action}")
            if frame.outcome is Outcome.FAILED:
                tally.failed_runs.append(f"{session} {action}: {frame.error}")
            if paused:
                tally.requests += 1
                await client.send(PendingRequest(PendingAction.RESUME, session=session))
                paused = False
                action = "resumed"
                started = trio.current_time()
                continue
            return "pending" if frame.pending_kept else "done"

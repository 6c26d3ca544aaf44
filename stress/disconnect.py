"""Disconnects: many connections that vanish at random moments, then a count of what leaked.

The daemon runs in this process so its registry and executor can be read
directly. Each connection picks a moment to vanish: before the first event,
mid-stream, mid-question (a question, a confirmation, a secret, a password),
between a cancel (or pause) and its acknowledgement, in the middle of a
resume, in the middle of a frame, or right after hello. Afterwards:

* the registry holds no question and no listener, the executor no task, and
  the daemon serves no connection;
* every session whose run was seen starting, and which was not cancelled,
  still has its pending task, interrupted with cause ``disconnect`` (or
  ``pause`` when it was paused and not resumed since), a question waiting
  when it vanished is saved with the task, and no task is left ``running``.
"""

from __future__ import annotations

import random
import time

import attrs
import trio

from agentrt.core.cause import Cause
from agentrt.protocol.client import BrokenDaemonConnectionError
from agentrt.protocol.client import Client
from agentrt.protocol.client import ClosedClientError
from agentrt.protocol.codec import encode
from agentrt.protocol.frames import AskFrame
from agentrt.protocol.frames import Cancel
from agentrt.protocol.frames import DaemonFrame
from agentrt.protocol.frames import EndedFrame
from agentrt.protocol.frames import ErrorFrame
from agentrt.protocol.frames import PendingAction
from agentrt.protocol.frames import PendingRequest
from agentrt.protocol.frames import Run
from agentrt.protocol.frames import TaskFrame
from agentrt.protocol.frames import TextFrame
from agentrt.vocab.terms import TaskStatus

from ._common import STEP_TIMEOUT
from ._common import SuiteResult
from ._common import inprocess_daemon
from ._common import short_tempdir

SCENARIOS = (
    "before_first_event",
    "mid_stream",
    "mid_question",
    "cancel_then_vanish",
    "mid_resume",
    "mid_frame",
    "after_hello",
)

_QUESTIONS = (
    ("ask favourite colour?", True),
    ("sh echo hi", True),
    ("secret TOKEN", False),
    ("write ../restricted/f text", False),
)


@attrs.define
class _Track:
    session: str
    #: A connection saw a run of it start, and nobody cancelled it since.
    must_keep: bool = False
    user_cancelled: bool = False
    paused: bool = False
    #: A question was waiting (and is saved with the task) when its window vanished.
    question_saved: bool = False
    finished: bool = False
    touched_by: list[str] = attrs.field(factory=list)


async def run_disconnect(connections: int, seed: int, *, concurrency: int = 32) -> SuiteResult:
    """Open `connections` connections that vanish at random moments; count what leaked."""
    result = SuiteResult("disconnect", "disconnects", "leaked entries or lost tasks", seed=seed)
    started = time.monotonic()
    rng = random.Random(seed)
    tracks: dict[str, _Track] = {}
    limiter = trio.CapacityLimiter(concurrency)
    replay = f"(replay: python -m stress --only disconnect --seed {seed})"

    with short_tempdir("std-") as root:
        async with inprocess_daemon(root) as (runtime, daemon, _):

            async def one(n: int, scenario: str, delay_frames: int) -> None:
                async with limiter:
                    with trio.move_on_after(STEP_TIMEOUT) as stuck:
                        await _vanish(daemon.socket_path, n, scenario, delay_frames, rng, tracks)
                    if stuck.cancelled_caught:
                        result.fail(f"connection {n} ({scenario}) got no answer in time {replay}")
                    result.done += 1

            plan = [(n, rng.choice(SCENARIOS), rng.randint(0, 4)) for n in range(connections)]
            async with trio.open_nursery() as nursery:
                for n, scenario, frames in plan:
                    nursery.start_soon(one, n, scenario, frames)
                    if n % concurrency == 0:
                        await trio.lowlevel.checkpoint()

            with trio.fail_after(STEP_TIMEOUT):
                await daemon.handling.wait_idle()
            stats = runtime.registry.statistics()
            leaked = stats.waiting + stats.claimed + stats.listeners
            if leaked:
                result.fail(f"the registry still holds {stats} {replay}")
            for info in runtime.executor.running():
                result.fail(
                    f"the executor still runs {info.task_hash} of {info.session_id} {replay}"
                )
            if daemon.connections:
                result.fail(f"{daemon.connections} connections still served {replay}")
            for track in tracks.values():
                await _check_track(runtime, track, result, replay)
            kept = await runtime.store.list(prefix="cli-dc")
            causes: dict[str, int] = {}
            for record in kept:
                key = record.cause.value if record.cause else record.status.value
                causes[key] = causes.get(key, 0) + 1
            scenarios: dict[str, int] = {}
            for _, scenario, _ in plan:
                scenarios[scenario] = scenarios.get(scenario, 0) + 1
            result.notes.append(
                f"{len(kept)} pending tasks kept {causes}, "
                f"{sum(t.question_saved for t in tracks.values())} with their question; "
                f"scenarios {scenarios}"
            )
    result.seconds = time.monotonic() - started
    return result


async def _check_track(runtime: object, track: _Track, result: SuiteResult, replay: str) -> None:
    from agentrt.core.runtime import Runtime

    assert isinstance(runtime, Runtime)
    record = await runtime.store.load(track.session)
    history = await runtime.store.load_history(track.session)
    where = f"{track.session} ({', '.join(track.touched_by)})"
    if record is None:
        if track.must_keep and not history:
            result.fail(f"{where}: pending task lost {replay}")
        return
    if record.status is TaskStatus.RUNNING:
        result.fail(f"{where}: task left 'running' after every connection closed {replay}")
        return
    if record.status is not TaskStatus.INTERRUPTED:
        result.fail(f"{where}: task kept as {record.status.value}, not interrupted {replay}")
    allowed = {Cause.DISCONNECT, Cause.PAUSE} if track.paused else {Cause.DISCONNECT}
    if record.cause not in allowed:
        result.fail(f"{where}: kept with cause {record.cause}, expected disconnect {replay}")
    if track.question_saved and record.question is None:
        result.fail(f"{where}: the question waiting when the window vanished was not kept {replay}")


async def _vanish(
    socket_path: object,
    n: int,
    scenario: str,
    wait_frames: int,
    rng: random.Random,
    tracks: dict[str, _Track],
) -> None:
    from pathlib import Path

    assert isinstance(socket_path, Path)
    if scenario == "mid_resume":
        candidates = [t for t in tracks.values() if t.must_keep]
        if not candidates:
            scenario = "mid_stream"
    if scenario == "mid_resume":
        track = rng.choice(candidates)
    else:
        track = _Track(f"cli-dc{n}")
        tracks[track.session] = track
    track.touched_by.append(scenario)
    if scenario == "after_hello":
        client = await Client.connect(socket_path)
        await client.aclose()
        return
    client = await Client.connect(socket_path)
    try:
        if scenario == "mid_frame":
            line = encode(Run("stream 50", session=track.session))
            await client.send_raw(line[: rng.randint(1, len(line) - 1)])
            return
        if scenario == "mid_resume":
            await client.send(PendingRequest(PendingAction.RESUME, session=track.session))
            await _read_some(client, track, wait_frames)
            return
        text, saves_question = "stream 500", False
        if scenario == "mid_question":
            text, saves_question = rng.choice(_QUESTIONS)
        await client.send(Run(text, session=track.session))
        if scenario == "before_first_event":
            return
        if scenario == "mid_stream":
            await _read_some(client, track, wait_frames + 1, kinds=(TextFrame,))
        elif scenario == "mid_question":
            frame = await _read_some(client, track, 1, kinds=(AskFrame,))
            if isinstance(frame, AskFrame) and saves_question:
                track.question_saved = True
        elif scenario == "cancel_then_vanish":
            frame = await _read_some(client, track, 1, kinds=(TaskFrame,))
            if isinstance(frame, TaskFrame):
                cause = Cause.PAUSE if rng.random() < 0.5 else Cause.USER_CANCEL
                await client.send(Cancel(frame.task_hash, cause))
                if cause is Cause.PAUSE:
                    track.paused = True
                else:
                    track.user_cancelled = True
                    track.must_keep = False
    except (BrokenDaemonConnectionError, ClosedClientError):
        pass
    finally:
        await client.aclose()


async def _read_some(
    client: Client,
    track: _Track,
    count: int,
    kinds: tuple[type[DaemonFrame], ...] = (),
) -> DaemonFrame | None:
    """Read until `count` frames of `kinds` (any frame when empty) arrived, or the run ended."""
    seen = 0
    while True:
        frame = await client.receive()
        if isinstance(frame, TaskFrame):
            track.must_keep = True
            track.question_saved = False
            if not kinds and count == 0:
                return frame
        if isinstance(frame, AskFrame) and not kinds:
            # A resumed run waits on its question: nothing more comes until it is answered.
            track.question_saved = frame.kind.value in ("confirm", "question")
            return frame
        if isinstance(frame, EndedFrame):
            if frame.outcome.value == "finished":
                track.finished = True
                track.must_keep = False
            return frame
        if isinstance(frame, ErrorFrame):
            return frame
        if not kinds or isinstance(frame, kinds):
            seen += 1
            if seen >= count:
                return frame

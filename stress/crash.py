"""Crash safety: SIGKILL the real daemon at random points and check nothing is lost or redone.

A seeded schedule starts runs (and resumes of runs killed earlier) from a real
client, answers their confirmations and questions, and kills the daemon's
process group either a random time after the run starts or right after a
random frame arrives (a `task`, a streamed `text`, a `tool_call` whose shell
command is running, an `ask` waiting for its answer). Every kill is followed
by a restart and an audit:

* every session whose run the client saw start, and which did not finish,
  still has its pending task, the store loads it, and the restarted daemon
  lists it;
* every shell call appends its marker to a counter file; a call whose result
  is committed never runs again, so when the session finishes each marker was
  written exactly once more than the count seen at the last kill that found
  the call uncommitted.

Every unfinished session is resumed to completion at the end (and now and
then in between, so resumes get killed too).
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import attrs
import trio

from agentrt._messages import Message, Role
from agentrt._store import StoreError, TaskStore
from agentrt.client import BrokenDaemonConnectionError, Client, ClosedClientError
from agentrt.frames import (
    AnswerFrame,
    AskFrame,
    DaemonFrame,
    EndedFrame,
    ErrorFrame,
    PendingAction,
    PendingList,
    PendingRequest,
    Run,
    TaskFrame,
)

from ._common import STEP_TIMEOUT, DaemonProcess, SuiteResult, short_tempdir

_COUNTER = "counter"
#: What a kill interrupted, named by the last frame the client saw before it.
_STAGES = {
    "TaskFrame": "run or resume starting",
    "TextFrame": "streaming",
    "ToolCallFrame": "tool running",
    "ToolResultFrame": "snapshot being written",
    "UsageFrame": "model round done",
    "EndedFrame": "run just ended",
}


@attrs.define
class _Session:
    session: str
    script: str
    markers: tuple[str, ...]
    #: The client saw a run of this session start: its pending task must survive a kill.
    started: bool = False
    has_record: bool = False
    finished: bool = False
    audited: bool = False
    #: Per marker: its count at the last kill that found its call uncommitted.
    uncommitted_count: dict[str, int] = attrs.field(factory=dict)
    kills: int = 0


def _script(rng: random.Random, index: int) -> tuple[str, tuple[str, ...]]:
    parts: list[str] = []
    markers: list[str] = []
    if rng.random() < 0.5:
        parts.append(f"stream {rng.randint(1, 6)}")
    for j in range(rng.randint(1, 3)):
        marker = f"m{index}x{j}"
        markers.append(marker)
        if rng.random() < 0.3:
            parts.append(f"sh sleep 0.{rng.randint(1, 3)} && echo {marker} >> {_COUNTER}")
        else:
            parts.append(f"sh echo {marker} >> {_COUNTER}")
    if rng.random() < 0.3:
        parts.append(f"big {rng.choice([1000, 100_000])}")
    if rng.random() < 0.3:
        parts.append("ask favourite colour?")
    if rng.random() < 0.2:
        parts.append("sleep 0.2")
    rng.shuffle(parts)
    return "; ".join(parts), tuple(markers)


def _committed_markers(transcript: tuple[Message, ...], markers: tuple[str, ...]) -> set[str]:
    """The markers whose shell call has a committed result in `transcript`."""
    done = {m.tool_call_id for m in transcript if m.role is Role.TOOL}
    out: set[str] = set()
    for message in transcript:
        for call in message.tool_calls:
            command = call.arguments.get("command")
            if call.name == "shell" and isinstance(command, str) and call.id in done:
                out.update(m for m in markers if f"echo {m} " in command)
    return out


def _counts(workdir: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    try:
        text = (workdir / _COUNTER).read_text()
    except FileNotFoundError:
        return counts
    for line in text.split():
        counts[line] = counts.get(line, 0) + 1
    return counts


@attrs.define(eq=False)
class _Harness:
    rng: random.Random
    seed: int
    daemon: DaemonProcess
    result: SuiteResult
    nursery: trio.Nursery
    sessions: list[_Session] = attrs.field(factory=list)
    #: A running estimate of how long a run takes, to spread time-based kills over it.
    run_seconds: float = 1.5
    #: Kills by what the client had last seen.
    stages: dict[str, int] = attrs.field(factory=dict)
    resume_kills: int = 0

    @property
    def workdir(self) -> Path:
        return self.daemon.workdir

    def fail(self, message: str) -> None:
        self.result.fail(f"{message} (replay: python -m stress --only crash --seed {self.seed})")

    async def one_run(self, state: _Session, *, kill: bool) -> bool:
        """Start or resume `state`'s run; kill the daemon at a random point. True if killed."""
        killed = False
        mode = self.rng.choice(("time", "frame"))
        delay = self.rng.uniform(0, self.run_seconds * 1.2)
        kill_at_frame = self.rng.randint(1, 12)
        frames: list[DaemonFrame] = []
        ended: list[DaemonFrame] = []
        started_at = time.monotonic()
        resuming = state.has_record

        async def do_kill() -> None:
            nonlocal killed
            if killed or ended:
                return
            killed = True
            last = frames[-1] if frames else None
            stage = _STAGES.get(type(last).__name__, type(last).__name__) if last else "starting"
            if isinstance(last, AskFrame):
                stage = f"{last.kind.value} waiting"
            self.stages[stage] = self.stages.get(stage, 0) + 1
            self.resume_kills += resuming
            with trio.CancelScope(shield=True):  # the daemon must be dead before we go on
                await self.daemon.kill()

        client = await Client.connect(self.daemon.socket_path)
        try:
            async with trio.open_nursery() as nursery:

                async def drive() -> None:
                    try:
                        while True:
                            frame = await client.receive()
                            frames.append(frame)
                            if isinstance(frame, TaskFrame):
                                state.started = True
                            if kill and mode == "frame" and len(frames) == kill_at_frame:
                                await do_kill()
                                return
                            if isinstance(frame, AskFrame):
                                await client.send(AnswerFrame(frame.id, self.answer(frame)))
                            elif isinstance(frame, EndedFrame | ErrorFrame):
                                ended.append(frame)
                                return
                    except (BrokenDaemonConnectionError, ClosedClientError):
                        return
                    finally:
                        nursery.cancel_scope.cancel()

                async def timer() -> None:
                    await trio.sleep(delay)  # a random moment is the point, not a wait
                    await do_kill()

                nursery.start_soon(drive)
                if kill and mode == "time":
                    nursery.start_soon(timer)
                if state.has_record:
                    await client.send(PendingRequest(PendingAction.RESUME, session=state.session))
                else:
                    await client.send(Run(state.script, session=state.session))
        finally:
            await client.aclose()
        if ended and not killed:
            self.note_end(state, ended[0], time.monotonic() - started_at)
        return killed

    def answer(self, ask: AskFrame) -> str:
        if ask.choices:
            return self.rng.choice(["allow", "allow", "allow_session"])
        return "blue"

    def note_end(self, state: _Session, frame: DaemonFrame, seconds: float) -> None:
        if isinstance(frame, ErrorFrame):
            self.fail(f"{state.session}: the daemon refused the run: {frame.message}")
            return
        assert isinstance(frame, EndedFrame)
        state.has_record = frame.pending_kept
        if frame.outcome.value == "finished":
            state.finished = True
            self.run_seconds = 0.8 * self.run_seconds + 0.2 * seconds
        else:
            self.fail(
                f"{state.session}: run ended {frame.outcome.value} "
                f"({frame.cause or frame.error}) with nobody stopping it"
            )

    async def audit(self, *, after_kill: bool) -> None:
        """Compare the store and the counter file with what the client saw."""
        counts = _counts(self.workdir)
        store = await TaskStore.open(self.daemon.state_dir / "tasks.db")
        try:
            for state in self.sessions:
                if state.audited:
                    continue
                try:
                    record = await store.load(state.session)
                    history = await store.load_history(state.session)
                except StoreError as exc:
                    self.fail(f"{state.session}: the pending task does not load: {exc}")
                    continue
                if record is None and history:
                    state.finished = True  # finished just before a kill ate its `ended` frame
                if state.finished:
                    state.audited = True
                    if record is not None:
                        self.fail(f"{state.session}: finished, yet its pending task is still there")
                    committed = _committed_markers(history, state.markers)
                    for marker in state.markers:
                        want = state.uncommitted_count.get(marker, 0) + 1
                        got = counts.get(marker, 0)
                        if marker not in committed:
                            self.fail(f"{state.session}: call {marker} finished uncommitted")
                        elif got != want:
                            self.fail(
                                f"{state.session}: call {marker} ran {got} times, expected "
                                f"{want} ({state.kills} kills)"
                            )
                    continue
                state.has_record = record is not None
                if record is None:
                    if state.started:
                        self.fail(f"{state.session}: pending task lost after a kill")
                    continue
                if after_kill:
                    committed = _committed_markers(record.transcript, state.markers)
                    for marker in state.markers:
                        if marker not in committed:
                            state.uncommitted_count[marker] = counts.get(marker, 0)
        finally:
            await store.aclose()

    async def check_listed(self) -> None:
        """The restarted daemon lists (so loads) every pending task we expect."""
        expected = {s.session for s in self.sessions if s.has_record and not s.finished}
        async with await Client.connect(self.daemon.socket_path) as client:
            await client.send(PendingRequest(PendingAction.LIST))
            with trio.fail_after(STEP_TIMEOUT):
                reply = await client.receive()
        if not isinstance(reply, PendingList):
            self.fail(f"pending list after a restart failed: {reply}")
            return
        listed = {t.session for t in reply.tasks}
        for missing in sorted(expected - listed):
            self.fail(f"{missing}: pending task not listed by the restarted daemon")

    async def drain(self) -> None:
        """Resume every unfinished session to completion, without kills."""
        for state in self.sessions:
            if state.finished:
                continue
            with trio.fail_after(STEP_TIMEOUT * 2):
                await self.one_run(state, kill=False)
            if not state.finished:
                self.fail(f"{state.session}: did not finish when resumed without kills")
        await self.audit(after_kill=False)


async def run_crash(kills: int, seed: int, *, max_open: int = 4) -> SuiteResult:
    """Kill the daemon `kills` times under a schedule drawn from `seed`."""
    result = SuiteResult("crash", "kills survived", "pending tasks lost or calls redone", seed=seed)
    started = time.monotonic()
    rng = random.Random(seed)
    with short_tempdir("stc-") as root:
        workdir = root / "work"
        workdir.mkdir()
        restricted = root / "restricted"
        daemon = DaemonProcess(
            root / "s" / "d.sock",
            root / "state",
            workdir,
            root / "daemon.log",
            env={**__import__("os").environ, "AGENTRT_RESTRICTED": str(restricted)},
        )
        async with trio.open_nursery() as nursery:
            harness = _Harness(rng, seed, daemon, result, nursery)
            await daemon.start(nursery)
            index = 0
            attempts = 0
            while result.done < kills and attempts < kills * 4:
                attempts += 1
                open_sessions = [s for s in harness.sessions if not s.finished]
                if open_sessions and (len(open_sessions) >= max_open or rng.random() < 0.5):
                    state = rng.choice(open_sessions)
                else:
                    script, markers = _script(rng, index)
                    state = _Session(f"cli-crash{seed % 10000}-{index}", script, markers)
                    index += 1
                    harness.sessions.append(state)
                with trio.fail_after(STEP_TIMEOUT * 2):
                    killed = await harness.one_run(state, kill=True)
                if killed:
                    state.kills += 1
                    await daemon.start(nursery)
                    result.done += 1
                    await harness.audit(after_kill=True)
                    await harness.check_listed()
                else:
                    await harness.audit(after_kill=False)
                if result.done and result.done % 25 == 0 and killed:
                    await harness.drain()
            await harness.drain()
            await daemon.terminate()
            result.notes.append(
                f"{len(harness.sessions)} sessions, {harness.resume_kills} kills during a resume; "
                f"kills by stage {dict(sorted(harness.stages.items()))}"
            )
    result.seconds = time.monotonic() - started
    return result

"""Crash safety: SIGKILL the real daemon at random points and check nothing is lost or redone.

A seeded schedule starts runs (and resumes of runs killed earlier) from a real
client, answers their confirmations and questions, and kills the daemon in one
of three ways:

* **all**: the daemon and every tool process at once, as a power loss would,
  a random time after the run starts or right after a random frame arrives (a
  `task`, a streamed `text`, a `tool_call` whose shell command is running, an
  `ask` waiting for its answer);
* **daemon**: the daemon process alone, at the same kind of moment. Its tools'
  shell commands are orphaned: they must die with it, by themselves, before
  the daemon is restarted;
* **save**: the daemon kills itself inside a write to its task store, right
  after the Nth write statement ran (inside the open transaction) or a random
  few milliseconds after it began (in the statement, in the commit, just
  after), see `stress._faulty_daemon`.

Every kill is followed by a restart and an audit:

* ``PRAGMA integrity_check`` of the task store says ``ok``;
* every session whose run the client saw start, and which did not finish,
  still has its pending task, the store loads it, and the restarted daemon
  lists it;
* every shell call appends its marker to a counter file. At each kill the
  audit notes how many times each call not yet committed has run. When the
  session finishes, a call has run once for its committed result plus the
  runs a kill left uncommitted (reported: after a crash, a call that ran but
  whose result was not saved runs again); any run beyond those is a committed
  call run again (or an orphan that finished after its daemon died), and a
  failure;
* a call that a kill left started and uncommitted must say so when it runs
  again: its ``tool_call`` frame has attempt 2 or more;
* every file a ``write`` call targets holds, after each kill, either its old
  content or the whole new one (a half-written file is a failure).

Some conversations run their calls inside subagents (``spawn {...}``, nested
too): a subagent journals its calls in its parent's task, so everything above
holds for them as well. The table's notes count each of these per kind of kill.

Two counts of calls run again are told apart. The headline's "N that had run
uncommitted before a kill" counts runs whose effect (the marker) happened
before a kill that left the call uncommitted, and happened again after it. The
per-kind column ``begun again`` counts the calls a kill left started and
uncommitted (the attempt in the record, no result) that were issued again on
resume, whether or not the kill came before their effect (so it is usually the
larger: a kill often comes after a call is recorded as started and before its
command has run).

Every unfinished session is resumed to completion at the end (and now and
then in between, so resumes get killed too).
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import sqlite3
import time
from collections.abc import Iterable
from collections.abc import Mapping
from pathlib import Path

import attrs
import trio

from agentrt.models.messages import Message
from agentrt.models.messages import Role
from agentrt.protocol.client import BrokenDaemonConnectionError
from agentrt.protocol.client import Client
from agentrt.protocol.client import ClientError
from agentrt.protocol.client import ClosedClientError
from agentrt.protocol.frames import AnswerFrame
from agentrt.protocol.frames import AskFrame
from agentrt.protocol.frames import DaemonFrame
from agentrt.protocol.frames import EndedFrame
from agentrt.protocol.frames import ErrorFrame
from agentrt.protocol.frames import PendingAction
from agentrt.protocol.frames import PendingList
from agentrt.protocol.frames import PendingRequest
from agentrt.protocol.frames import Run
from agentrt.protocol.frames import TaskFrame
from agentrt.protocol.frames import ToolCallFrame
from agentrt.store import StoreError
from agentrt.store.record import SubagentJournal
from agentrt.store.record import TaskRecord
from agentrt.store.sqlite import TaskStore

from ._common import STEP_TIMEOUT
from ._common import DaemonProcess
from ._common import SuiteResult
from ._common import poll_until
from ._common import short_tempdir

_COUNTER = "counter"
#: How the daemon is killed, and how often.
_KILL_KINDS = ("all", "daemon", "save")
_KILL_WEIGHTS = (0.45, 0.3, 0.25)
#: How long the processes of a daemon killed alone may take to go away.
_ORPHAN_SECONDS = 10.0
#: A shell call that runs later than this after its daemon died was an orphan at work.
_ORPHAN_GRACE = 0.25
#: What the notes count per kind of kill (see `_Harness.by_kind`).
_PER_KIND = (
    "kills",
    "committed re-run",
    "begun again",
    "shown as attempt>=2",
    "half-written",
)
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
    #: Files its write calls target: name -> (old content, new content).
    files: dict[str, tuple[bytes, bytes]] = attrs.field(factory=dict)
    #: Markers of the calls the last kill left started and uncommitted.
    started_uncommitted: set[str] = attrs.field(factory=set)
    #: How the daemon was last killed while running this session.
    last_kind: str = ""


#: How many bytes a write call writes (large enough that a kill may land inside it).
_WRITE_BYTES = 256 * 1024


def _script(
    rng: random.Random, index: int
) -> tuple[str, tuple[str, ...], dict[str, tuple[bytes, bytes]]]:
    """A conversation, the markers of its shell calls, and the files it writes (old, new)."""
    parts: list[str] = []
    markers: list[str] = []
    files: dict[str, tuple[bytes, bytes]] = {}
    if rng.random() < 0.5:
        parts.append(f"stream {rng.randint(1, 6)}")
    for j in range(rng.randint(1, 3)):
        marker = f"m{index}x{j}"
        markers.append(marker)
        # Each run of a call appends its marker and the time it ran.
        echo = f"echo {marker} $(date +%s.%N) >> {_COUNTER}"
        if rng.random() < 0.3:
            parts.append(f"sh sleep 0.{rng.randint(3, 9)} && {echo}")
        else:
            parts.append(f"sh {echo}")
    if rng.random() < 0.3:
        parts.append(f"big {rng.choice([1000, 100_000])}")
    if rng.random() < 0.3:
        parts.append("ask favourite colour?")
    if rng.random() < 0.2:
        parts.append("sleep 0.2")
    if rng.random() < 0.35:
        name = f"f{index}.txt"
        new = (f"new{index}-" * (_WRITE_BYTES // 8))[:_WRITE_BYTES]
        files[name] = (f"old content of {name}\n".encode(), new.encode())
        parts.append(f"write {name} {new}")
    rng.shuffle(parts)
    if len(parts) > 1 and rng.random() < 0.4:
        # A subagent runs some of the calls; now and then one of its own does too.
        cut = rng.randint(1, len(parts) - 1)
        inner = parts[cut:]
        if len(inner) > 1 and rng.random() < 0.3:
            inner = [*inner[:1], "spawn {" + "; ".join(inner[1:]) + "}"]
        parts = [*parts[:cut], "spawn {" + "; ".join(inner) + "}"]
    return "; ".join(parts), tuple(markers), files


def _committed_markers(
    transcript: tuple[Message, ...],
    markers: tuple[str, ...],
    subagents: Iterable[SubagentJournal] = (),
) -> set[str]:
    """The markers whose shell call has a committed result in `transcript` or a journal.

    A spawn's committed result stands for every call inside it: its subagent
    committed them all before it returned (and its journal went with it).
    """
    return _markers_of(transcript, markers, committed=True, journals=subagents)


def _started_markers(record: TaskRecord, markers: tuple[str, ...]) -> set[str]:
    """The markers whose shell call `record` says was started and has no committed result."""
    found = _markers_of(record.transcript, markers, attempts=record.attempts)
    for journal in record.subagents.values():
        found |= _markers_of(journal.transcript, markers, attempts=journal.attempts)
    return found - _committed_markers(record.transcript, markers, record.subagents.values())


def _markers_of(
    transcript: tuple[Message, ...],
    markers: tuple[str, ...],
    *,
    committed: bool = False,
    attempts: Mapping[str, int] | None = None,
    journals: Iterable[SubagentJournal] = (),
) -> set[str]:
    done = {m.tool_call_id for m in transcript if m.role is Role.TOOL}
    out: set[str] = set()
    for message in transcript:
        for call in message.tool_calls:
            if committed and call.id not in done:
                continue
            if attempts is not None and (call.id in done or attempts.get(call.id, 0) == 0):
                continue
            text = call.arguments.get("command" if call.name == "shell" else "task")
            if call.name in ("shell", "spawn") and isinstance(text, str):
                out.update(m for m in markers if f"echo {m} " in text)
    for journal in journals:
        out |= _markers_of(journal.transcript, markers, committed=committed)
    return out


def _runs(workdir: Path) -> list[tuple[str, float]]:
    """Every run of a shell call so far: (marker, when it ran)."""
    try:
        text = (workdir / _COUNTER).read_text()
    except FileNotFoundError:
        return []
    runs = []
    for line in text.splitlines():
        marker, _, when = line.partition(" ")
        try:
            runs.append((marker, float(when)))
        except ValueError:
            runs.append((marker, 0.0))
    return runs


def _counts(workdir: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for marker, _ in _runs(workdir):
        counts[marker] = counts.get(marker, 0) + 1
    return counts


def tool_processes(workdir: Path) -> list[int]:
    """Running processes (not zombies) whose working directory is `workdir`: the tools'."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{name}/cwd") != os.fspath(workdir):
                continue
            with open(f"/proc/{name}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[-1].split()[0]
        except OSError:
            continue
        if state not in (b"Z", b"X"):
            found.append(int(name))
    return found


def _kill_pids(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def integrity_check(db_path: Path) -> str:
    """``PRAGMA integrity_check`` of the store, read-only: ``"ok"`` or what is wrong."""
    db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=30)
    try:
        rows = db.execute("PRAGMA integrity_check").fetchall()
    finally:
        db.close()
    return "; ".join(str(row[0]) for row in rows)


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
    #: Kills by how the daemon was killed.
    kinds: dict[str, int] = attrs.field(factory=dict)
    resume_kills: int = 0
    #: How the next kill happens; "save" means the running daemon is armed to kill itself.
    next_kind: str = "all"
    integrity_checks: int = 0
    orphan_checks: int = 0
    #: When the last kill happened (wall clock, to compare with the counter's times).
    killed_at: float = 0.0
    #: Runs of a call that a kill left uncommitted (so it ran again) and runs beyond the
    #: committed one (a committed call run again, or an orphan finishing late): must be 0.
    uncommitted_reruns: int = 0
    committed_reruns: int = 0
    #: Per kind of kill: committed calls run again (must be 0), calls a kill left started
    #: and uncommitted that were begun again on resume (whether or not they had got as far
    #: as their effect before the kill), those of them shown as attempt 2 or more (must be
    #: all), and files left neither old nor new (must be 0).
    by_kind: dict[str, dict[str, int]] = attrs.field(factory=dict)

    def count(self, kind: str, what: str, n: int = 1) -> None:
        row = self.by_kind.setdefault(kind, dict.fromkeys(_PER_KIND, 0))
        row[what] += n

    @property
    def workdir(self) -> Path:
        return self.daemon.workdir

    def fail(self, message: str) -> None:
        self.result.fail(f"{message} (replay: python -m stress --only crash --seed {self.seed})")

    async def one_run(self, state: _Session, *, kill: bool) -> bool:
        """Start or resume `state`'s run; with `kill`, the daemon dies in it. True if killed.

        How it dies is `next_kind`: killed from here at a random moment ("all",
        "daemon"), or by itself inside a store write ("save"; a run that ends
        first leaves the daemon armed for the next one).
        """
        kind = self.next_kind if kill else None
        killed = False
        mode = self.rng.choice(("time", "frame"))
        delay = self.rng.uniform(0, self.run_seconds * 1.2)
        kill_at_frame = self.rng.randint(1, 12)
        frames: list[DaemonFrame] = []
        ended: list[DaemonFrame] = []
        started_at = time.monotonic()
        resuming = state.has_record

        def note_kill(stage: str) -> None:
            nonlocal killed
            killed = True
            self.killed_at = time.time()
            assert kind is not None
            self.stages[stage] = self.stages.get(stage, 0) + 1
            self.kinds[kind] = self.kinds.get(kind, 0) + 1
            self.count(kind, "kills")
            state.last_kind = kind
            self.resume_kills += resuming

        def last_stage() -> str:
            last = frames[-1] if frames else None
            if isinstance(last, AskFrame):
                return f"{last.kind.value} waiting"
            return _STAGES.get(type(last).__name__, type(last).__name__) if last else "starting"

        async def do_kill() -> None:
            if killed or ended:
                return
            note_kill(last_stage())
            with trio.CancelScope(shield=True):  # the daemon must be dead before we go on
                if kind == "all":
                    await self.daemon.kill()
                    _kill_pids(tool_processes(self.workdir))  # power loss: tools die too
                else:
                    await self.daemon.kill_alone()

        try:
            client = await Client.connect(self.daemon.socket_path)
        except (ClientError, OSError) as exc:
            if kind == "save" and await self.daemon.wait_exit(STEP_TIMEOUT):
                note_kill("inside a store save (connecting)")
                return True
            self.fail(
                f"{state.session}: the daemon did not take a connection ({exc}); its log ends: "
                f"{self.daemon.log_text()[-1500:]}"
            )
            if self.daemon.alive:
                await self.daemon.kill()
            return False
        try:
            async with trio.open_nursery() as nursery:

                async def drive() -> None:
                    try:
                        while True:
                            frame = await client.receive()
                            frames.append(frame)
                            if isinstance(frame, TaskFrame):
                                state.started = True
                            if isinstance(frame, ToolCallFrame):
                                self.note_call(state, frame)
                            at_frame = kind in ("all", "daemon") and mode == "frame"
                            if at_frame and len(frames) == kill_at_frame:
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
                if kind in ("all", "daemon") and mode == "time":
                    nursery.start_soon(timer)
                if state.has_record:
                    await client.send(PendingRequest(PendingAction.RESUME, session=state.session))
                else:
                    await client.send(Run(state.script, session=state.session))
        finally:
            await client.aclose()
        if not killed and not ended:
            # The connection broke with nobody killing the daemon from here.
            if not await self.daemon.wait_exit(STEP_TIMEOUT):
                self.fail(f"{state.session}: the daemon closed the connection mid-run")
            elif kind == "save":
                note_kill(f"inside a store save ({last_stage()})")
            else:
                self.fail(
                    f"{state.session}: the daemon died by itself: {self.daemon.log_text()[-1500:]}"
                )
        if ended and not killed:
            self.note_end(state, ended[0], time.monotonic() - started_at)
        return killed

    def note_call(self, state: _Session, frame: ToolCallFrame) -> None:
        """A shell call the last kill left started and uncommitted must say it may have run."""
        command = frame.arguments.get("command")
        if frame.name != "shell" or not isinstance(command, str):
            return
        for marker in [m for m in state.started_uncommitted if f"echo {m} " in command]:
            state.started_uncommitted.discard(marker)
            self.count(state.last_kind, "begun again")
            if frame.attempt >= 2:
                self.count(state.last_kind, "shown as attempt>=2")
            else:
                where = f" in {frame.agent}" if frame.agent else ""
                self.fail(
                    f"{state.session}: call {marker}{where} started before a kill "
                    f"({state.last_kind}) and ran again as attempt {frame.attempt}, not "
                    "saying it may already have run"
                )

    def check_files(self) -> None:
        """Every file a write call targets holds its old content or the whole new one."""
        for state in self.sessions:
            for name, (old, new) in state.files.items():
                try:
                    data = (self.workdir / name).read_bytes()
                except FileNotFoundError:
                    data = b""
                if data not in (old, new):
                    kind = state.last_kind or "none"
                    self.count(kind, "half-written")
                    self.fail(
                        f"{state.session}: {name} is half-written after a kill ({kind}): "
                        f"{len(data)} bytes, neither its old {len(old)} nor its new {len(new)}"
                    )
                    (self.workdir / name).write_bytes(old)  # counted once, not at every kill

    async def after_kill(self) -> None:
        """Check no tool outlived the daemon, restart it (armed for the next kill), audit."""
        self.orphan_checks += 1
        await poll_until(lambda: not tool_processes(self.workdir), _ORPHAN_SECONDS)
        left = tool_processes(self.workdir)
        if left:
            self.fail(
                f"{len(left)} tool processes still ran {_ORPHAN_SECONDS:g}s after their "
                f"daemon died: {left}"
            )
            _kill_pids(left)
        late = [
            f"{marker} {when - self.killed_at:+.2f}s"
            for marker, when in _runs(self.workdir)
            if when > self.killed_at + _ORPHAN_GRACE
        ]
        if late:
            self.fail(
                f"{len(late)} shell calls ran after their daemon died (orphans at work): "
                f"{', '.join(late[:5])}"
            )
        self.check_files()
        await self.start()
        self.integrity_checks += 1
        verdict = await trio.to_thread.run_sync(integrity_check, self.daemon.state_dir / "tasks.db")
        if verdict != "ok":
            self.fail(f"the task store is damaged after a kill: {verdict}")
        await self.audit(after_kill=True)
        await self.check_listed()

    async def start(self, *, armed: bool = True) -> None:
        """(Re)start the daemon and choose how the next kill happens."""
        self.next_kind = self.rng.choices(_KILL_KINDS, _KILL_WEIGHTS)[0] if armed else "all"
        env = {}
        if self.next_kind == "save":
            at = self.rng.randint(1, 8)
            moment = self.rng.choice(("in_transaction", "timer"))
            env["STRESS_KILL_AT_WRITE"] = f"{at}:{moment}"
        await self.daemon.start(self.nursery, extra_env=env)

    async def disarm(self) -> None:
        """Restart a daemon armed to kill itself in a save as a plain one (to drain)."""
        if self.next_kind == "save":
            await self.daemon.terminate()
            await self.start(armed=False)

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
                    if state.started_uncommitted:
                        self.fail(
                            f"{state.session}: calls started before a kill never ran again "
                            f"nor were reported: {sorted(state.started_uncommitted)}"
                        )
                    for marker in state.markers:
                        left_uncommitted = state.uncommitted_count.get(marker, 0)
                        got = counts.get(marker, 0)
                        if marker not in committed:
                            self.fail(f"{state.session}: call {marker} finished uncommitted")
                        elif got < left_uncommitted + 1:
                            self.fail(
                                f"{state.session}: call {marker} has a committed result but "
                                f"ran {got} times, {left_uncommitted} of them before a kill"
                            )
                        else:
                            self.uncommitted_reruns += left_uncommitted
                            beyond = got - left_uncommitted - 1
                            if beyond:
                                self.committed_reruns += beyond
                                self.count(state.last_kind or "none", "committed re-run", beyond)
                                self.fail(
                                    f"{state.session}: call {marker} ran {got} times: once "
                                    f"committed, {left_uncommitted} left uncommitted by a kill, "
                                    f"and {beyond} more ({state.kills} kills)"
                                )
                    continue
                state.has_record = record is not None
                if record is None:
                    if state.started:
                        self.fail(f"{state.session}: pending task lost after a kill")
                    continue
                if after_kill:
                    committed = _committed_markers(
                        record.transcript, state.markers, record.subagents.values()
                    )
                    for marker in state.markers:
                        if marker not in committed:
                            state.uncommitted_count[marker] = counts.get(marker, 0)
                    state.started_uncommitted = _started_markers(record, state.markers)
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
        await self.disarm()
        for state in self.sessions:
            if state.finished:
                continue
            with trio.fail_after(STEP_TIMEOUT * 2):
                await self.one_run(state, kill=False)
            if not state.finished:
                self.fail(f"{state.session}: did not finish when resumed without kills")
        await self.audit(after_kill=False)


def per_kind_table(by_kind: dict[str, dict[str, int]]) -> list[str]:
    """The per-kind counts as table lines: a row per kind of kill, a column per count."""
    header = ["kill", *_PER_KIND]
    rows = [header] + [
        [kind, *(str(by_kind[kind][what]) for what in _PER_KIND)] for kind in sorted(by_kind)
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    return [
        "  ".join(
            c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in rows
    ]


async def run_crash(kills: int, seed: int, *, max_open: int = 4) -> SuiteResult:
    """Kill the daemon `kills` times under a schedule drawn from `seed`."""
    result = SuiteResult(
        "crash", "kills survived", "pending tasks lost or committed calls re-run", seed=seed
    )
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
            env={**os.environ, "AGENTRT_RESTRICTED": str(restricted)},
            module="stress._faulty_daemon",
        )
        async with trio.open_nursery() as nursery:
            harness = _Harness(rng, seed, daemon, result, nursery)
            try:
                await harness.start()
                index = 0
                attempts = 0
                while result.done < kills and attempts < kills * 4:
                    attempts += 1
                    open_sessions = [s for s in harness.sessions if not s.finished]
                    if open_sessions and (len(open_sessions) >= max_open or rng.random() < 0.5):
                        state = rng.choice(open_sessions)
                    else:
                        script, markers, files = _script(rng, index)
                        state = _Session(f"cli-crash{seed % 10000}-{index}", script, markers)
                        state.files = files
                        for name, (old, _new) in files.items():
                            (workdir / name).write_bytes(old)
                        index += 1
                        harness.sessions.append(state)
                    with trio.fail_after(STEP_TIMEOUT * 2):
                        killed = await harness.one_run(state, kill=True)
                    if killed:
                        state.kills += 1
                        result.done += 1
                        await harness.after_kill()
                    else:
                        if not daemon.alive:
                            await harness.start()
                        await harness.audit(after_kill=False)
                    if result.done and result.done % 25 == 0 and killed:
                        await harness.drain()
                await harness.drain()
            except Exception as exc:
                result.crashed(exc, f"replay: python -m stress --only crash --seed {seed}")
                result.tracebacks.append(f"the daemon's log ends:\n{daemon.log_text()[-3000:]}")
            finally:
                with trio.CancelScope(shield=True):
                    await daemon.terminate()
                    _kill_pids(tool_processes(workdir))
            result.detail = (
                f"calls re-run: {harness.committed_reruns} committed, "
                f"{harness.uncommitted_reruns} that had run uncommitted before a kill"
            )
            result.notes.append(
                f"{len(harness.sessions)} sessions, {harness.resume_kills} kills during a resume; "
                f"kills by kind {dict(sorted(harness.kinds.items()))}; "
                f"by stage {dict(sorted(harness.stages.items()))}"
            )
            result.notes.append(
                f"{harness.integrity_checks} integrity checks of the store after a restart, "
                f"{harness.orphan_checks} checks that no tool outlived its daemon; calls re-run "
                f"after a kill left them uncommitted: {harness.uncommitted_reruns}, committed "
                f"calls re-run: {harness.committed_reruns}"
            )
            subagents = sum(1 for s in harness.sessions if "spawn {" in s.script)
            writes = sum(len(s.files) for s in harness.sessions)
            result.notes.append(
                f"{subagents} of {len(harness.sessions)} conversations ran calls in subagents; "
                f"{writes} write calls of {_WRITE_BYTES // 1024} KiB checked for half-written "
                "files after every kill"
            )
            result.notes.extend(per_kind_table(harness.by_kind))
    result.seconds = time.monotonic() - started
    return result

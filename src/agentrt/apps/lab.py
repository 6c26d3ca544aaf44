"""`agentrt lab`: interrupt a run at every point, with every cause, and show what each costs.

The lab runs a conversation once, uninterrupted, in a throwaway state dir and
working dir, on the scripted (or replay) model under Trio's `MockClock`. It
records every *boundary* of that run: each event the run emits and each write
to the task store. Then, for every boundary and every way of stopping a run
(user-cancel, user-cancel + undo, pause, disconnect, shutdown, crash), it runs the
conversation again, interrupts it right after that boundary, and does what a
person would: it resumes a kept task (answering again where asked), checks that
a user-cancel left nothing, or (user-cancel + undo) puts back the files the
stopped run changed and checks that the working folder is as before the run. At every point it checks the invariants below, and it
measures what the interruption cost.

Invariants (`Violation.rule`):

``first-event``      every run's first event is `TaskStarted`
``kept``             a user-cancel leaves no task; any other cause keeps one while the run
                     had not finished, with its question when one was open
``committed-rerun``  no call whose result was committed (or reported) runs again
``unflagged-rerun``  a call that started and never committed says "may already have run"
``same-end``         a resumed run ends as the baseline did: same final answer, same files
                     (a file that differs only because a flagged call ran again is a cost)
``secret``           no stored secret value appears in an event or in the store's files
``resume``           a kept task resumes and finishes
``undo``             after a user-cancel + undo (the stop popup's Undo), the working folder
                     is exactly as before the run: the undo of the stopped task's changes
                     finds no conflict and leaves nothing behind
``ledger``           what the model is told of the stop is true: on resume, each scope's
                     first prompt (the task's, a subagent's) carries one note after the
                     round's tool results, never a system message, naming every call of
                     the interrupted round with a state the run bears out (done only if
                     committed, not started only if its effect never began, stopped only
                     if it was running and nobody died, may have run only after a crash),
                     and "shortened" only beside a shortened value; after a user-cancel the
                     session's history ends with that note

A crash is simulated in-process: at the boundary the store stops accepting
writes (as if the process had died), and the run is abandoned; a new runtime
then opens the same state dir, as a restarted daemon would. `real_kills` adds
a sample of real SIGKILLs of a real daemon process.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import random
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Mapping
from collections.abc import Sequence
from contextlib import asynccontextmanager
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from typing import TypeVar

import attrs
import trio
import trio.testing

from ..agent.checkpoint import UndoResult
from ..agent.compaction import ContextLimits
from ..config.mcp import McpServerConfig
from ..config.settings import read_config_file
from ..core.cause import Cause
from ..core.context import current_context
from ..core.executor import ExecutorError
from ..core.pending import ALLOW_ONCE
from ..core.pending import Answer
from ..core.pending import Entry
from ..core.pending import RequestKind
from ..core.runtime import open_runtime
from ..models.messages import Message
from ..models.messages import Model
from ..models.messages import Role
from ..models.messages import TextDelta
from ..models.scripted import ReplayModel
from ..models.scripted import ScriptedModel
from ..store import StoreError
from ..store.ledger import has_elisions
from ..store.record import TaskRecord
from ..store.record import unanswered_calls
from ..store.sql import Submitted
from ..store.sqlite import TaskStore
from ..store.writer import Call
from ..vocab.events import Event
from ..vocab.events import RunEnded
from ..vocab.events import TaskStarted
from ..vocab.events import TextEvent
from ..vocab.events import ToolCallEvent
from ..vocab.events import ToolResultEvent
from ..vocab.reprs import mutable
from ..vocab.reprs import record
from ..vocab.stops import CallState
from ..vocab.terminal import own
from ..vocab.terminal import shown_output
from ..vocab.terminal import visible
from ..vocab.terms import TERMINAL

T = TypeVar("T")

#: The ways of stopping a run, in the table's column order.
CAUSES: tuple[str, ...] = (
    "user_cancel",
    "user_cancel_undo",
    "pause",
    "disconnect",
    "shutdown",
    "crash",
)
#: The causes that throw the task away (the second then puts back the files the run changed,
#: as "discard the task and undo its file changes" does).
DISCARDING: frozenset[str] = frozenset({"user_cancel", "user_cancel_undo"})
#: Real seconds every task must have waited before the mock clock jumps to the next deadline.
#: Not 0: a run waiting on a tool's process would then spin the event loop, polling, until
#: the process ended (a tenth of a millisecond per turn, most of the lab's time).
AUTOJUMP_SECONDS = 0.001
#: The heatmap's colour for a user-cancel: discarded, neither cheap nor dear.
DISCARDED_COLOUR = "#d9d9d9"
_CAUSE_OF = {
    "user_cancel": Cause.USER_CANCEL,
    "user_cancel_undo": Cause.USER_CANCEL,
    "pause": Cause.PAUSE,
    "disconnect": Cause.DISCONNECT,
    "shutdown": Cause.SHUTDOWN,
}
SESSION = f"{TERMINAL}lab"
#: How many times a point is run to meet its boundary, when the run took another path. A
#: round's tools work in threads and processes, so on a busy machine the path a boundary is
#: on can come up in fewer than one run in three; a try costs one run up to the boundary.
PATH_TRIES = 20
#: How many times the baseline is run, at most, until two runs in a row have the same
#: boundaries (`Lab._common_baseline`).
BASELINE_TRIES = 5
#: The value a `store_secret` is given in the lab; it must never show up anywhere.
SECRET_VALUE = "lab-canary-3f9d2c7a1b"


# -- what a point records ----------------------------------------------------------


@record
class Boundary:
    """One point of the baseline run: an event it emitted or a store write it made."""

    index: int
    kind: str  # "event" or "store"
    name: str  # "TextEvent", "ToolCallEvent shell", "store.save", ...
    #: Stable identity of the boundary across runs: (kind, name, key, occurrence).
    label: tuple[str, str, str, int]


@record
class Violation:
    """An invariant that did not hold at one point, with the command that replays it."""

    boundary: int
    cause: str
    rule: str
    detail: str
    replay: str


@record
class Cost:
    """What one interruption cost, against the baseline."""

    calls_rerun: int
    chars_regenerated: int
    questions_again: int
    seconds_lost: float


@record
class Point:
    """The outcome of interrupting at one boundary with one cause."""

    boundary: int
    cause: str
    kept: bool
    cost: Cost | None
    violations: tuple[Violation, ...] = ()


@record
class LabReport:
    """The baseline's boundaries, and every point of the sweep."""

    conversation: str
    boundaries: tuple[Boundary, ...]
    points: tuple[Point, ...]
    causes: tuple[str, ...] = CAUSES
    real_kills: tuple[Point, ...] = ()

    @property
    def violations(self) -> list[Violation]:
        """Every violation found, in order."""
        return [v for p in (*self.points, *self.real_kills) for v in p.violations]

    def point(self, boundary: int, cause: str) -> Point | None:
        """The point at `boundary` with `cause`, if it was run."""
        for point in self.points:
            if point.boundary == boundary and point.cause == cause:
                return point
        return None


# -- running one conversation, instrumented ------------------------------------------


@mutable(eq=False)
class _LabStore(TaskStore):
    """The task store with a hook after every write, running SQLite inline.

    Inline, a write takes no worker thread, so the mock clock never jumps while
    one is in flight. After `die` every call waits forever, as if the process
    had been killed: nothing more reaches the file.
    """

    on_write: Callable[[str, str], None] | None = None
    #: Each question posted in the run, by id: its prompt. A write that only records a
    #: question's state is named by the prompt, which every run of the conversation asks
    #: alike (its id is new in each).
    prompts: dict[str, str] = attrs.field(factory=dict)
    dead: bool = False
    #: The record as last written, to name what a field update changed.
    _last: TaskRecord | None = None

    def die(self) -> None:
        """From now on, nothing reaches the file."""
        self.dead = True

    def _submit(
        self,
        fn: Callable[[sqlite3.Connection], T],
        *,
        defer: bool = False,
        synced: bool = True,
        here: bool = False,
    ) -> Call[T]:
        # (The lab's file is never synced and every call runs here: `synced` and `here`
        # change nothing.)
        call: Call[T] = Call(fn, trio.lowlevel.current_trio_token())
        if self.dead:
            call.abandonable = True
            return call  # never run, never done: as if the process had been killed
        try:
            call.run(self._db)
        except sqlite3.DatabaseError as exc:
            self._memory.clear()
            call.fail(StoreError(f"the task store {self.path} failed: {exc}"))
        except Exception:  # the call's own error, kept for its caller
            self._memory.clear()
        call.done.set()
        return call

    def _wrote(self, method: str, detail: str = "") -> None:
        if self.on_write is not None and not self.dead:
            self.on_write(method, detail)

    async def save(self, record: TaskRecord) -> TaskRecord:
        saved = await super().save(record)
        self._last = record
        last = record.transcript[-1] if record.transcript else None
        detail = ""
        if last is not None:
            detail = f"{last.role.value} {last.tool_call_id or last.name or ''}".strip()
        self._wrote("save", detail)
        return saved

    def save_fields_nowait(self, record: TaskRecord, *, defer: bool = True) -> Submitted[bool]:
        submitted = super().save_fields_nowait(record, defer=defer)
        self._wrote("save_fields", _changed(self._last, record, self.prompts))
        self._last = record
        return submitted

    async def create(self, record: TaskRecord) -> Any:
        history = await super().create(record)
        self._last = record
        self._wrote("create")
        return history

    async def update(
        self, session_id: str, change: Any, *, synced: bool = True, model: Any = None
    ) -> Any:
        result = await super().update(session_id, change, synced=synced, model=model)
        self._wrote("update")
        return result

    def mark_nowait(self, session_id: str, status: Any, **kwargs: Any) -> Submitted[bool]:
        submitted = super().mark_nowait(session_id, status, **kwargs)
        self._wrote("mark", status.value)
        return submitted

    def stop_nowait(self, stopped: Any, status: Any, **kwargs: Any) -> Submitted[bool]:
        submitted = super().stop_nowait(stopped, status, **kwargs)
        self._wrote("stop", status.value)
        return submitted

    async def delete(self, session_id: str, check: Any = None) -> bool:
        done = await super().delete(session_id, check)
        self._wrote("delete")
        return done

    async def finish(
        self, session_id: str, transcript: Any = (), window_hash: Any = None, **kwargs: Any
    ) -> None:
        await super().finish(session_id, transcript, window_hash, **kwargs)
        self._wrote("finish")


def call_key(agent: str, call_id: str) -> str:
    """A call's identity across a task and its subagents: ``call_1_0``, ``sub1:call_1_0``.

    A subagent's call ids may repeat its parent's; its path tells them apart.
    """
    return f"{agent}:{call_id}" if agent else call_id


def committed_calls(record: TaskRecord) -> set[str]:
    """The calls (`call_key`) whose results `record` holds, its subagents' included."""
    done = {m.tool_call_id or "" for m in record.transcript if m.role is Role.TOOL}
    for journal in record.subagents.values():
        done |= {
            call_key(journal.agent, m.tool_call_id or "")
            for m in journal.transcript
            if m.role is Role.TOOL
        }
    return done


def started_calls(record: TaskRecord) -> set[str]:
    """The calls (`call_key`) `record` says were started, its subagents' included."""
    began = {cid for cid, n in record.attempts.items() if n > 0}
    for journal in record.subagents.values():
        began |= {call_key(journal.agent, cid) for cid, n in journal.attempts.items() if n > 0}
    return began


def _changed(
    before: TaskRecord | None, after: TaskRecord, prompts: Mapping[str, str] | None = None
) -> str:
    """What a field update changed, named stably: ``question ask_user``, ``attempts call_1_2``.

    A subagent's attempts are named by `call_key` (``attempts sub1:call_1_0``).
    Questions are named by their prompts (from `prompts`, by id, for a
    question's recorded state), not by the order they came in: the calls of a
    round run side by side, and the order of their questions differs from run
    to run, so an ordinal of "the second question cleared" would name another
    write in another run.
    """
    if before is None:
        return ""
    parts: list[str] = []
    if before.question != after.question:
        shown, gone = after.question, before.question
        if shown is not None:
            # By its prompt too: a subagent's questions are all saved as its spawn's.
            parts.append(f"question {shown.call_id} {shown.prompt}")
        elif gone is not None:
            # By its call alone: which of a call's questions is the last one answered (and
            # so cleared rather than replaced) depends on the order they came in.
            parts.append(f"question cleared {gone.call_id}")
    old, now = started_calls(before), started_calls(after)
    new = sorted(k for k in now if k not in old or _attempt(after, k) != _attempt(before, k))
    if new:
        parts.append("attempts " + ",".join(new))
    for key in sorted(after.subagents):
        journal = after.subagents[key]
        was = before.subagents.get(key)
        if was is None or len(was.transcript) != len(journal.transcript):
            last = journal.transcript[-1] if journal.transcript else None
            what = f"{last.role.value} {last.tool_call_id or ''}".strip() if last else ""
            parts.append(f"journal {journal.agent} {what}".strip())
    if before.status != after.status:
        parts.append(f"status {after.status.value}")
    if not parts:
        # Only a question's state: an answer may be recorded alone, or with the next
        # question of the round, whichever comes first; alone, it is named by its prompt.
        states = {trace.id: trace.state for trace in before.questions}
        named = prompts or {}
        for trace in after.questions:
            if states.get(trace.id) is not trace.state:
                prompt = named.get(trace.id)
                parts.append(
                    " ".join(["questions", *([prompt] if prompt else []), trace.state.value])
                )
    return "; ".join(parts)


def _attempt(record: TaskRecord, key: str) -> int:
    agent, _, call_id = key.rpartition(":")
    if not agent:
        return record.attempts_of(call_id)
    for journal in record.subagents.values():
        if journal.agent == agent:
            return journal.attempts.get(call_id, 0)
    return 0


def _event_name(event: Event) -> tuple[str, str]:
    """A boundary's name and key for an event."""
    kind = type(event).__name__
    if isinstance(event, ToolCallEvent | ToolResultEvent):
        return f"{kind} {event.name}", call_key(event.agent, event.call_id)
    if isinstance(event, RunEnded):
        return f"{kind} {event.outcome.value}", ""
    return kind, ""


@mutable(eq=False)
class _Trace:
    """Everything one run did, as the lab sees it."""

    events: list[Event] = attrs.field(factory=list)
    boundaries: list[tuple[str, str, str, int]] = attrs.field(factory=list)
    asked: list[str] = attrs.field(factory=list)
    open_questions: set[str] = attrs.field(factory=set)
    started_at: float = 0.0
    ended_at: float = 0.0
    #: Characters of text the model produced.
    generated: int = 0
    #: When the simulated process died (nothing after it counts).
    crashed_at: float | None = None
    #: What the model was sent, call by call, with the agent that sent it ("" the task's own).
    prompts: list[tuple[str, tuple[Message, ...]]] = attrs.field(factory=list)
    #: What the undo after a "user-cancel + undo" did.
    undone: UndoResult | None = None

    @property
    def duration(self) -> float:
        end = self.ended_at if self.crashed_at is None else min(self.ended_at, self.crashed_at)
        return end - self.started_at

    _seen: Counter[tuple[str, str, str]] = attrs.field(factory=Counter)

    def mark(self, kind: str, name: str, key: str) -> tuple[str, str, str, int]:
        self._seen[(kind, name, key)] += 1
        label = (kind, name, key, self._seen[(kind, name, key)])
        self.boundaries.append(label)
        return label

    @property
    def text(self) -> str:
        return "".join(e.text for e in self.events if isinstance(e, TextEvent) and not e.agent)

    @property
    def ended(self) -> RunEnded | None:
        last = self.events[-1] if self.events else None
        return last if isinstance(last, RunEnded) else None

    def calls(self) -> list[ToolCallEvent]:
        return [e for e in self.events if isinstance(e, ToolCallEvent)]

    def reported(self) -> set[str]:
        """The calls (`call_key`) whose results the run reported."""
        return {call_key(e.agent, e.call_id) for e in self.events if isinstance(e, ToolResultEvent)}

    def began(self) -> set[str]:
        """Calls whose effect began: their attempt was written to the store."""
        ids: set[str] = set()
        for _kind, _name, key, _n in self.boundaries:
            for part in key.split("; "):
                if part.startswith("attempts "):
                    ids.update(part.removeprefix("attempts ").split(","))
        return ids


@mutable(eq=False)
class _CountingModel:
    """A model whose streamed output is counted (what a resume makes it say again)."""

    inner: Model
    trace: _Trace

    @property
    def name(self) -> str:
        return self.inner.name

    async def complete(self, messages: Any, tools: Any, on_delta: Any) -> Any:
        async def counted(delta: Any) -> None:
            if isinstance(delta, TextDelta):
                self.trace.generated += len(delta.text)
            await on_delta(delta)

        ctx = current_context()
        self.trace.prompts.append((ctx.agent_path if ctx else "", tuple(messages)))

        return await self.inner.complete(messages, tools, counted)


@record
class Conversation:
    """What to run: a model and the answers a person gives."""

    text: str
    model_spec: str = "scripted"
    #: Answers to questions, by prompt; questions not named take `default_answer`.
    answers: dict[str, str] = attrs.field(factory=dict)
    default_answer: str = "yes"
    #: MCP servers the runs use (each run starts them anew, as a process starting does).
    mcp_servers: dict[str, McpServerConfig] = attrs.field(factory=dict)
    #: The model's context window in tokens: a small one makes the conversation compact
    #: (docs/conversations.md), so that the lab stops it during its compactions too.
    context_window: int | None = None
    #: Messages of an earlier conversation in the session before the run (a question and
    #: its answer, over and over): with a small `context_window`, what a compaction covers.
    earlier: int = 0

    def history(self) -> list[Message]:
        """The `earlier` messages the session holds before the run."""
        return [
            Message.user(f"earlier question {n}: what about topic {n}?")
            if n % 2 == 0
            else Message.assistant(f"earlier answer {n}: topic {n} is covered.")
            for n in range(self.earlier)
        ]

    def model(self) -> Model:
        if self.model_spec == "scripted":
            return ScriptedModel()
        return ReplayModel.from_file(self.model_spec.removeprefix("replay:"))

    def answer(self, entry: Entry) -> Answer:
        """What the person answers to a question of the registry."""
        return self.answer_to(entry.request.kind, entry.request.prompt)

    def answer_to(self, kind: RequestKind, prompt: str) -> Answer:
        """What the person answers to a question of `kind` saying `prompt`."""
        if kind is RequestKind.CONFIRM:
            # A confirmation is allowed once unless an answer names its prompt (allow,
            # allow_session or deny).
            return Answer(self.answers.get(prompt, ALLOW_ONCE))
        if kind is RequestKind.SECRET:
            return Answer("", secret=SECRET_VALUE)
        if kind is RequestKind.PASSWORD:
            return Answer("deny")
        return Answer(self.answers.get(prompt, self.default_answer))


@mutable(eq=False)
class _Interrupt:
    """Where and how to stop a run; `fired` once it did."""

    label: tuple[str, str, str, int]
    cause: str
    fired: bool = False
    question_open: bool = False
    #: How many events the run had emitted when it was interrupted.
    events_before: int = 0


@asynccontextmanager
async def _lab_runtime(root: Path, conversation: Conversation, trace: _Trace) -> Any:
    async with open_runtime(
        root / "state",
        model=_CountingModel(conversation.model(), trace),
        workdir=root / "work",
        restricted_paths=(),
        context=ContextLimits(
            {conversation.model().name: conversation.context_window}
            if conversation.context_window is not None
            else {}
        ),
    ) as runtime:
        history = conversation.history()
        if history and await runtime.store.session(SESSION) is None:
            # The earlier conversation is there before the run, not one of its boundaries.
            await runtime.store.create(TaskRecord(SESSION, history[0].content, tuple(history)))
            await runtime.store.finish(SESSION, history)
        # The lab's store: inline SQLite with a write hook, on the same file.
        await runtime.store.aclose()
        store = await _LabStore.open(root / "state" / "tasks.db")
        # The lab's crashes are of a process, not of the machine: what a commit wrote is in
        # the file once it returns, and no fsync is waited for (the scratch store goes anyway).
        store._db.execute("PRAGMA synchronous=OFF")
        config = attrs.evolve(runtime.executor.config, shell_timeout=math.inf)
        try:
            async with _mcp_servers(conversation, config) as mcp:
                config = attrs.evolve(config, mcp=mcp)
                executor = attrs.evolve(runtime.executor, store=store, config=config)
                yield attrs.evolve(runtime, store=store, executor=executor)
        finally:
            await store.aclose()


@asynccontextmanager
async def _mcp_servers(conversation: Conversation, config: Any) -> Any:
    """The conversation's MCP servers, started and ready (None when it has none).

    On the mock clock a wait for a real process would jump to its deadline at
    once: the servers' timeouts are lifted, as the shell's is.
    """
    if not conversation.mcp_servers:
        yield None
        return
    from ..agent.mcp import McpClients
    from ..agent.mcp import ServerState

    servers = {
        name: attrs.evolve(server, timeout=math.inf, startup_timeout=math.inf)
        for name, server in conversation.mcp_servers.items()
    }
    clients = McpClients(
        servers,
        config.workdir.parent / "state" / "mcp",
        config.workdir,
        sandbox=config.sandbox,
        hidden=config.hidden_paths,
    )
    failure: BaseException | None = None
    async with trio.open_nursery() as nursery:
        await nursery.start(clients.run)
        await clients.wait_settled()
        failed = [s for s in clients.statuses() if s.state is not ServerState.READY]
        if failed:
            nursery.cancel_scope.cancel()
            raise LabError(f"MCP server {failed[0].name} did not start: {failed[0].why}")
        try:
            yield clients
        except BaseException as exc:
            failure = exc  # raised again as it came, not in the nursery's group
        nursery.cancel_scope.cancel()
    if failure is not None:
        raise failure


async def _drive(
    root: Path,
    conversation: Conversation,
    trace: _Trace,
    *,
    resume: bool,
    interrupt: _Interrupt | None = None,
) -> None:
    """One run (or resume) of the conversation, recording `trace`; interrupted if asked."""
    async with _lab_runtime(root, conversation, trace) as runtime:
        store = runtime.store
        assert isinstance(store, _LabStore)
        executor = runtime.executor
        outer = trio.CancelScope()
        listener_scope = trio.CancelScope()

        def stop() -> None:
            assert interrupt is not None
            interrupt.fired = True
            interrupt.question_open = bool(trace.open_questions)
            interrupt.events_before = len(trace.events)
            if interrupt.cause == "crash":
                trace.crashed_at = trio.current_time()
                store.die()
                listener_scope.cancel()
                outer.cancel()
                return
            if interrupt.cause == "disconnect":
                listener_scope.cancel()
            if interrupt.cause == "shutdown":
                executor.cancel_all(Cause.SHUTDOWN)
                return
            for info in executor.running():
                executor.cancel(info.task_hash, _CAUSE_OF[interrupt.cause])

        def boundary(kind: str, name: str, key: str) -> None:
            label = trace.mark(kind, name, key)
            if interrupt is not None and not interrupt.fired and label == interrupt.label:
                stop()

        store.on_write = lambda method, detail: boundary("store", f"store.{method}", detail)
        runtime.registry.observe(
            lambda entry: store.prompts.setdefault(entry.id, entry.request.prompt)
        )

        async def emit(event: Event) -> None:
            if interrupt is not None and interrupt.fired and interrupt.cause == "crash":
                return  # the process is dead: nobody hears anything more
            trace.events.append(event)
            name, key = _event_name(event)
            boundary("event", name, key)
            await trio.lowlevel.checkpoint()

        async def answer_questions(task_status: trio.TaskStatus[None]) -> None:
            with listener_scope, runtime.registry.listen("", name="lab") as listener:
                task_status.started()
                while True:
                    entry = await listener.claim()
                    trace.asked.append(entry.request.prompt)
                    trace.open_questions.add(entry.id)
                    # The person takes a moment: the answer comes at the next checkpoint.
                    await trio.lowlevel.checkpoint()
                    trace.open_questions.discard(entry.id)
                    if not entry.done:
                        entry.answer(conversation.answer(entry))

        trace.started_at = trio.current_time()
        async with trio.open_nursery() as nursery:
            await nursery.start(answer_questions)
            with outer:
                try:
                    if resume:
                        await executor.resume(SESSION, owner="lab", emit=emit)
                    else:
                        await executor.run(SESSION, conversation.text, owner="lab", emit=emit)
                except ExecutorError:
                    pass
            nursery.cancel_scope.cancel()
        trace.ended_at = trio.current_time()
        if interrupt is not None and interrupt.fired and interrupt.cause == "user_cancel_undo":
            started = [e for e in trace.events if isinstance(e, TaskStarted)]
            if started:
                # What a window's Undo sends once the run it stopped has ended.
                trace.undone = await executor.undo(SESSION, task=started[0].task_hash)


# -- the sweep ---------------------------------------------------------------------


@contextmanager
def _quiet_runtime_logs() -> Iterator[None]:
    """Simulated crashes make the runtime log failed saves; the lab reports them itself."""
    logger = logging.getLogger("agentrt")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


@contextmanager
def _scratch(keep: Path | None) -> Iterator[Path]:
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        yield keep
        return
    folder = Path(tempfile.mkdtemp(prefix="agentrt-lab-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _reset(root: Path) -> None:
    for name in ("state", "work"):
        shutil.rmtree(root / name, ignore_errors=True)
    (root / "state").mkdir(mode=0o700, parents=True)
    (root / "work").mkdir(parents=True)


def _files(root: Path) -> dict[str, bytes]:
    work = root / "work"
    return {
        str(p.relative_to(work)): p.read_bytes() for p in sorted(work.rglob("*")) if p.is_file()
    }


def _state_text(root: Path) -> bytes:
    state = root / "state"
    data = b""
    for path in sorted(state.glob("tasks.db*")):
        data += path.read_bytes()
    return data


def _load_history(root: Path) -> tuple[Message, ...]:
    """The session's history as the store has it now."""

    async def read() -> tuple[Message, ...]:
        store = await TaskStore.open(root / "state" / "tasks.db")
        try:
            return await store.load_history(SESSION)
        finally:
            await store.aclose()

    result: tuple[Message, ...] = trio.run(read)
    return result


def _load(root: Path) -> TaskRecord | None:
    """The pending task as the store has it now (read without the lab's hooks)."""

    async def read() -> TaskRecord | None:
        store = await TaskStore.open(root / "state" / "tasks.db")
        try:
            return await store.load(SESSION)
        finally:
            await store.aclose()

    return trio.run(read)


@mutable
class Lab:
    """Runs the sweep for one conversation. `replay_prefix` starts each violation's command."""

    conversation: Conversation
    causes: tuple[str, ...] = CAUSES
    replay_prefix: str = "agentrt lab"
    on_progress: Callable[[int, int], None] | None = None
    #: Only this boundary (a violation's replay); None for every one.
    only: int | None = None

    def _trio_run(self, fn: Callable[..., Any], *args: Any) -> Any:
        clock = trio.testing.MockClock(autojump_threshold=AUTOJUMP_SECONDS)
        return trio.run(fn, *args, clock=clock)

    def baseline(self, root: Path) -> tuple[_Trace, dict[str, bytes]]:
        """Run the conversation once, uninterrupted."""
        _reset(root)
        trace = _Trace()
        self._trio_run(partial_drive(root, self.conversation, trace, resume=False))
        return trace, _files(root)

    def _common_baseline(self, root: Path) -> tuple[_Trace, dict[str, bytes]]:
        """A baseline whose boundaries the next run had too: the path most runs take.

        The calls of a round run side by side, and a rare order of theirs can make a
        write that most runs do not (two changes recorded apart, not together). A
        point on such a boundary would seldom meet it again; so the baseline is run
        until two runs in a row have the same boundaries (one in a few hundred is two
        rare ones), at most `BASELINE_TRIES` times, and the last run is taken.
        """
        base = self.baseline(root)
        for _ in range(BASELINE_TRIES - 1):
            again = self.baseline(root)
            if set(again[0].boundaries) == set(base[0].boundaries):
                return again
            base = again
        return base

    def run(self, keep: Path | None = None) -> LabReport:
        """The baseline, then every boundary with every cause."""
        with _scratch(keep) as root, _quiet_runtime_logs():
            base, base_files = self._common_baseline(root)
            ended = base.ended
            if ended is None or ended.outcome.value != "finished":
                raise LabError(
                    "the conversation does not finish when run without interruption "
                    f"({ended.outcome.value if ended else 'no final event'}); the lab needs one "
                    "that does: give answers with --answer"
                )
            boundaries = tuple(
                Boundary(i, kind, name, label)
                for i, label in enumerate(base.boundaries)
                for kind, name in [label[:2]]
            )
            finished_at = max(
                (b.index for b in boundaries if b.name == "store.finish"), default=len(boundaries)
            )
            points: list[Point] = []
            chosen = [b for b in boundaries if self.only is None or b.index == self.only]
            if not chosen:
                raise LabError(f"there is no boundary {self.only}: the run has {len(boundaries)}")
            total = len(chosen) * len(self.causes)
            for boundary in chosen:
                for cause in self.causes:
                    points.append(self._point(root, base, base_files, boundary, cause, finished_at))
                    if self.on_progress is not None:
                        self.on_progress(len(points), total)
            return LabReport(self.conversation.text, boundaries, tuple(points), self.causes)

    def _point(
        self,
        root: Path,
        base: _Trace,
        base_files: dict[str, bytes],
        boundary: Boundary,
        cause: str,
        finished_at: int,
    ) -> Point:
        _reset(root)
        replay = self._replay_command(boundary.index, cause)
        violations: list[Violation] = []

        def fail(rule: str, detail: str) -> None:
            violations.append(Violation(boundary.index, cause, rule, detail, replay))

        for _ in range(PATH_TRIES):
            _reset(root)
            first = _Trace()
            interrupt = _Interrupt(boundary.label, cause)
            self._trio_run(
                partial_drive(root, self.conversation, first, resume=False, interrupt=interrupt)
            )
            if interrupt.fired:
                break
            # A tool working in a thread or a process takes real time, so calls of one round
            # may finish in another order than in the baseline (a question then shows up
            # after another one was answered, not beside it); try the path again.
        if not interrupt.fired:
            fail("boundary", f"boundary {boundary.label} never came in the interrupted run")
        _check_first_event(first, fail)
        record = _load(root)
        finished = boundary.index >= finished_at
        ended_first = first.ended
        if not finished and ended_first is not None and ended_first.outcome.value == "finished":
            # The stop came after the final answer was committed: too late to stop anything,
            # provided the run did no more work after it.
            later = first.events[interrupt.events_before :]
            worked = [e for e in later if isinstance(e, TextEvent | ToolCallEvent)]
            if worked:
                fail("kept", f"the run went on working after {cause} and finished")
            finished = True
        second: _Trace | None = None
        if cause in DISCARDING:
            if record is not None:
                fail("kept", "a user-cancel left the pending task behind")
        elif not finished and record is None:
            fail("kept", f"{cause} did not keep the pending task")
        if cause == "user_cancel_undo":
            _check_undone(root, first, fail)
        if record is not None and interrupt.question_open and record.question is None:
            fail("kept", f"{cause} kept the task without the question that was open")
        if record is not None and cause not in DISCARDING:
            committed = committed_calls(record)
            started = started_calls(record) - committed
            second = _Trace()
            self._trio_run(partial_drive(root, self.conversation, second, resume=True))
            _check_first_event(second, fail)
            ended = second.ended
            if ended is None or ended.outcome.value != "finished":
                outcome = ended.outcome.value if ended else "no final event"
                fail("resume", f"the resumed task did not finish ({outcome})")
            done = committed | first.reported()
            reran = [c for c in second.calls() if call_key(c.agent, c.call_id) in done]
            for call in reran:
                fail(
                    "committed-rerun",
                    f"{call.name} {call_key(call.agent, call.call_id)} ran again after commit",
                )
            flagged = set()
            for call in second.calls():
                if call_key(call.agent, call.call_id) in started:
                    if call.may_have_run is None:
                        fail(
                            "unflagged-rerun",
                            f"{call.name} {call.call_id} started before and ran again "
                            "without saying it may already have run",
                        )
                    else:
                        flagged.add(call_key(call.agent, call.call_id))
            if ended is not None and base.ended is not None and ended.text != base.ended.text:
                fail("same-end", f"final answer {ended.text!r} differs from the baseline's")
            files = _files(root)
            if files != base_files and not flagged:
                fail("same-end", _describe_files(files, base_files, started, second))
            _check_ledger(record, first, second, cause, fail)
        if cause in DISCARDING and record is None and not finished:
            history = _load_history(root)
            undone = first.undone
            if cause == "user_cancel_undo" and undone is not None and undone.done:
                # The undo's own note comes after the stop's: the model is told both.
                if not history or history[-1].role is not Role.NOTE:
                    fail("undo", "the model was not told that the run's files were put back")
                history = history[:-1]
            _check_thrown_away(history, fail)
        for trace in (first, second):
            if trace is not None and SECRET_VALUE in repr(trace.events):
                fail("secret", "a stored secret value appeared in an event")
        if SECRET_VALUE.encode() in _state_text(root):
            fail("secret", "a stored secret value appeared in the task store's files")
        cost = _cost(base, first, second) if cause not in DISCARDING else None
        return Point(boundary.index, cause, record is not None, cost, tuple(violations))

    def _replay_command(self, boundary: int, cause: str) -> str:
        parts = [self.replay_prefix, _quote(self.conversation.text)]
        if self.conversation.model_spec != "scripted":
            parts += ["--replay", _quote(self.conversation.model_spec.removeprefix("replay:"))]
        for prompt, answer in self.conversation.answers.items():
            parts += ["--answer", _quote(f"{prompt}={answer}")]
        parts += ["--at", str(boundary), "--cause", cause]
        return " ".join(parts)


class LabError(Exception):
    """The lab cannot run this conversation; the message says why."""


def partial_drive(
    root: Path,
    conversation: Conversation,
    trace: _Trace,
    *,
    resume: bool,
    interrupt: _Interrupt | None = None,
) -> Callable[[], Any]:
    """`_drive` with its arguments bound, for `trio.run`."""

    async def go() -> None:
        await _drive(root, conversation, trace, resume=resume, interrupt=interrupt)

    return go


def _describe_files(
    files: dict[str, bytes], base: dict[str, bytes], started: set[str], resumed: _Trace
) -> str:
    names = sorted(k for k in {*files, *base} if files.get(k) != base.get(k))
    shown = "; ".join(f"{k}: {files.get(k)!r} (baseline {base.get(k)!r})" for k in names)
    calls = ", ".join(f"{c.name} {c.call_id} attempt {c.attempt}" for c in resumed.calls())
    return (
        f"files differ from the baseline's: {shown}; calls started and not committed: "
        f"{sorted(started) or 'none'}; calls of the resume: {calls or 'none'}"
    )


#: A call as a ledger note names it: ``[AGENT's ]NAME call ID: STATE``.
_LEDGER_CALL = re.compile(
    r"(?:(\S+)'s )?(\w+) call (\S+): ("
    + "|".join(re.escape(s.words.split(" (")[0]) for s in CallState)
    + ")"
)
_STATES = {s.words.split(" (")[0]: s for s in CallState}


def _told(prompt: Sequence[Message]) -> tuple[list[str], dict[str, CallState]]:
    """The notes of a prompt, and the state each names for a call (by `call_key`)."""
    notes = [m.content for m in prompt if m.role is Role.NOTE]
    states: dict[str, CallState] = {}
    for note in notes:
        for agent, _name, call_id, words in _LEDGER_CALL.findall(note):
            states[call_key(agent, call_id)] = _STATES[words]
    return notes, states


def _check_ledger(
    record: TaskRecord, first: _Trace, second: _Trace, cause: str, fail: Callable[[str, str], None]
) -> None:
    """The `ledger` invariant for a kept task that was resumed (see the module's docstring)."""
    committed = committed_calls(record)
    began = first.began()
    called = {call_key(c.agent, c.call_id) for c in first.calls()}
    scopes = [("", record.transcript)]
    scopes += [(j.agent, j.transcript) for j in record.subagents.values()]
    for agent, transcript in scopes:
        prompt = next((p for a, p in second.prompts if a == agent), None)
        if prompt is None:
            continue  # this scope's model was not asked again (its round was its last)
        who = f"{agent}'s" if agent else "the task's"
        seen_text = False
        for message in prompt:
            if message.role is Role.SYSTEM and seen_text:
                fail("ledger", f"{who} prompt has a system message inside the conversation")
            seen_text = seen_text or message.role is not Role.SYSTEM
        notes, states = _told(prompt)
        unanswered = [call_key(agent, c.id) for c in unanswered_calls(transcript)]
        if unanswered and not notes:
            fail("ledger", f"{who} first prompt after the resume has no note of the stop")
        if notes:
            last_note = max(i for i, m in enumerate(prompt) if m.role is Role.NOTE)
            if any(m.role is Role.TOOL for m in prompt[last_note:]):
                fail("ledger", f"{who} note comes before a tool result it speaks of")
            shortened = has_elisions(prompt)
            if any("shortened" in n for n in notes) and not shortened:
                fail("ledger", f"{who} note says values were shortened; none was")
        for key in unanswered:
            if key not in states:
                fail("ledger", f"{who} note does not name interrupted call {key}")
        for key, state in states.items():
            if not key.startswith(f"{agent}:" if agent else "") or (not agent and ":" in key):
                continue
            done = key in committed
            if state in (CallState.DONE, CallState.DENIED, CallState.REFUSED) and not done:
                fail("ledger", f"{key} is told {state.value}, and its result was not committed")
            if state not in (CallState.DONE, CallState.DENIED, CallState.REFUSED) and done:
                fail("ledger", f"{key} is told {state.value}, and its result was committed")
            if state is CallState.NOT_STARTED and key in began:
                fail("ledger", f"{key} is told not started, and its effect had begun")
            if state is CallState.STOPPED and (cause == "crash" or key not in called):
                fail("ledger", f"{key} is told stopped while running after a {cause}")
            if state is CallState.MAY_HAVE_RUN and cause != "crash":
                fail("ledger", f"{key} is told it may have run after a {cause}, seen by the run")


def _check_undone(root: Path, trace: _Trace, fail: Callable[[str, str], None]) -> None:
    """After a user-cancel + undo: the working folder is exactly as before the run (empty)."""
    undone = trace.undone
    if undone is None:
        fail("undo", "the run stopped to be undone was not undone (no task started?)")
        return
    if undone.conflicts:
        fail("undo", f"the undo found files changed since the run: {', '.join(undone.conflicts)}")
    left = sorted(str(p.relative_to(root / "work")) for p in (root / "work").rglob("*"))
    if left:
        fail("undo", f"after the undo the working folder still holds {', '.join(left[:5])}")


def _check_thrown_away(history: tuple[Message, ...], fail: Callable[[str, str], None]) -> None:
    """After a user-cancel: the session keeps a result for each call of the stopped round, and
    ends with the note saying the task was stopped by the user."""
    if not history or history[-1].role is not Role.NOTE:
        fail("ledger", "after a user-cancel the session's history does not end with its note")
        return
    if "stopped by the user" not in history[-1].content:
        fail("ledger", "the note of a user-cancel does not say the user stopped it")
    if unanswered_calls(history):
        fail("ledger", "after a user-cancel a call of the stopped round has no result")
    if any("rejected" in m.content for m in history if m.role is Role.TOOL):
        fail("ledger", "a call the user stopped is said to have been rejected")


def _check_first_event(trace: _Trace, fail: Callable[[str, str], None]) -> None:
    if trace.events and not isinstance(trace.events[0], TaskStarted):
        fail("first-event", f"the first event was {type(trace.events[0]).__name__}")


def _cost(base: _Trace, first: _Trace, second: _Trace | None) -> Cost:
    runs = [first] if second is None else [first, second]
    # A call "ran" in the interrupted run if it reported a result or began its effect; it
    # "ran again" if the resume called it once more.
    worked = first.reported() | first.began()
    again = {call_key(c.agent, c.call_id) for c in second.calls()} if second is not None else set()
    rerun = len(worked & again)
    chars = sum(run.generated for run in runs) - base.generated
    asked = sum(len(run.asked) for run in runs) - len(base.asked)
    seconds = sum(run.duration for run in runs) - base.duration
    return Cost(rerun, max(chars, 0), max(asked, 0), round(max(seconds, 0.0), 3))


def _quote(text: str) -> str:
    import shlex

    return shlex.quote(text)


# -- real SIGKILLs of a real daemon ---------------------------------------------------


def real_kills(
    conversation: Conversation, count: int, *, seed: int, replay_prefix: str = "agentrt lab"
) -> tuple[Point, ...]:
    """Kill a real daemon process with SIGKILL at `count` random events, restart, resume, check."""
    if count <= 0:
        return ()
    rng = random.Random(seed)
    lab = Lab(conversation, replay_prefix=replay_prefix)
    points: list[Point] = []
    with _scratch(None) as root:
        base, base_files = lab.baseline(root)
        events = len(base.events)
        for _ in range(count):
            at = rng.randrange(1, max(events - 1, 2))
            points.append(_real_kill(root, conversation, base, base_files, at, replay_prefix))
    return tuple(points)


def _real_kill(
    root: Path,
    conversation: Conversation,
    base: _Trace,
    base_files: dict[str, bytes],
    at: int,
    replay_prefix: str,
) -> Point:
    from ..protocol.client import Client
    from ..protocol.frames import AnswerFrame
    from ..protocol.frames import AskFrame
    from ..protocol.frames import DaemonFrame
    from ..protocol.frames import EndedFrame
    from ..protocol.frames import ErrorFrame
    from ..protocol.frames import PendingAction
    from ..protocol.frames import PendingRequest
    from ..protocol.frames import Run
    from ..protocol.frames import ToolCallFrame

    _reset(root)
    sock = Path(tempfile.mkdtemp(prefix="agl-")) / "d.sock"
    replay = f"{replay_prefix} {_quote(conversation.text)} --real-kill-at {at}"
    violations: list[Violation] = []

    def fail(rule: str, detail: str) -> None:
        violations.append(Violation(at, "sigkill", rule, detail, replay))

    def start() -> subprocess.Popen[bytes]:
        env = {**os.environ, "AGENTRT_STATE_DIR": str(root / "state")}
        args = [sys.executable, "-m", "agentrt", "daemon", "--socket", str(sock)]
        args += ["--workdir", str(root / "work"), "--model", conversation.model_spec]
        return subprocess.Popen(args, env=env, stderr=subprocess.DEVNULL)

    async def wait_socket(proc: subprocess.Popen[bytes]) -> None:
        for _ in range(1500):  # 30 s
            if sock.exists():
                return
            if proc.poll() is not None:
                raise LabError(f"the daemon exited with status {proc.returncode}")
            await trio.sleep(0.02)
        raise LabError(f"the daemon did not open {sock} within 30 s")

    async def converse(client: Any, stop_after: int | None) -> list[DaemonFrame]:
        frames: list[DaemonFrame] = []
        while True:
            frame = await client.receive()
            frames.append(frame)
            if isinstance(frame, AskFrame):
                reply = conversation.answer_to(frame.kind, frame.prompt)
                await client.send(AnswerFrame(frame.id, reply.value, reply.secret))
            if stop_after is not None and len(frames) >= stop_after:
                return frames
            if isinstance(frame, EndedFrame | ErrorFrame):
                return frames

    async def main() -> tuple[list[DaemonFrame], list[DaemonFrame], TaskRecord | None]:
        proc = start()
        try:
            await wait_socket(proc)
            async with await Client.connect(sock) as client:
                await client.send(Run(conversation.text, session=SESSION, cwd=str(root / "work")))
                first = await converse(client, at)
                proc.send_signal(signal.SIGKILL)
                await trio.to_thread.run_sync(proc.wait)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        store = await TaskStore.open(root / "state" / "tasks.db")
        try:
            record = await store.load(SESSION)
        finally:
            await store.aclose()
        second: list[DaemonFrame] = []
        if record is not None:
            sock.unlink(missing_ok=True)
            proc = start()
            try:
                await wait_socket(proc)
                async with await Client.connect(sock) as client:
                    await client.send(PendingRequest(PendingAction.RESUME, SESSION))
                    second = await converse(client, None)
            finally:
                proc.send_signal(signal.SIGTERM)
                await trio.to_thread.run_sync(proc.wait)
        return first, second, record

    first, second, record = trio.run(main)
    shutil.rmtree(sock.parent, ignore_errors=True)
    finished = any(isinstance(f, EndedFrame) for f in first)
    if record is None and not finished:
        fail("kept", "the task was lost when the daemon was killed")
    if record is not None:
        committed = committed_calls(record)
        started = started_calls(record) - committed
        for frame in second:
            if isinstance(frame, ToolCallFrame):
                key = call_key(frame.agent, frame.call_id)
                if key in committed:
                    fail("committed-rerun", f"{frame.name} {key} ran again")
                if key in started and frame.attempt < 2:
                    fail("unflagged-rerun", f"{frame.name} {key} was not flagged")
        ended = next((f for f in second if isinstance(f, EndedFrame)), None)
        if ended is None or ended.outcome.value != "finished":
            fail("resume", "the task did not finish after the restart")
        elif base.ended is not None and ended.text != base.ended.text:
            fail("same-end", "the final answer differs from the baseline's")
        if _files(root) != base_files and not started:
            fail("same-end", "the files differ from the baseline's")
    return Point(at, "sigkill", record is not None, None, tuple(violations))


# -- showing the report --------------------------------------------------------------


def _cell(point: Point | None) -> str:
    if point is None:
        return ""
    if point.violations:
        return "VIOLATION"
    if point.cause in DISCARDING:
        return "deleted" if not point.kept else "kept"
    cost = point.cost
    if cost is None or not point.kept:
        return "-"
    return f"{cost.calls_rerun}c {cost.chars_regenerated}ch {cost.questions_again}q"


def format_table(report: LabReport) -> str:
    """The sweep as a table: a row per boundary, a column per cause."""
    header = ["#", "boundary", *report.causes]
    rows = [header]
    for b in report.boundaries:
        # Shown before the widths are measured: a boundary's key is the conversation's text.
        name = visible(b.name + (f" {b.label[2]}" if b.label[2] else ""))
        rows.append([str(b.index), name, *(_cell(report.point(b.index, c)) for c in report.causes)])
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    checked = len(report.points) + len(report.real_kills)
    lines.append("")
    lines.append(
        "cells: calls run again (c), characters of model output regenerated (ch), "
        "questions asked again (q); '-' nothing kept because the run had finished"
    )
    lines.append(
        f"{checked} points checked ({len(report.boundaries)} boundaries x "
        f"{len(report.causes)} causes"
        + (f" + {len(report.real_kills)} real SIGKILLs" if report.real_kills else "")
        + f"); {len(report.violations)} invariant violations"
    )
    for kill in report.real_kills:
        state = "task kept, resumed" if kill.kept else "nothing to keep (the run had finished)"
        verdict = "VIOLATION" if kill.violations else "ok"
        lines.append(f"real SIGKILL of the daemon after event {kill.boundary}: {state}: {verdict}")
    for v in report.violations:
        lines.append(visible(f"VIOLATION at {v.boundary} ({v.cause}): {v.rule}: {v.detail}"))
        lines.append(visible(f"  replay: {v.replay}"))
    return "\n".join(lines)


def report_json(report: LabReport) -> dict[str, Any]:
    """The report as plain JSON data."""
    return {
        "conversation": report.conversation,
        "causes": list(report.causes),
        "boundaries": [
            {"index": b.index, "kind": b.kind, "name": b.name, "key": b.label[2]}
            for b in report.boundaries
        ],
        "points": [attrs.asdict(p) for p in report.points],
        "real_kills": [attrs.asdict(p) for p in report.real_kills],
        "points_checked": len(report.points) + len(report.real_kills),
        "violations": [attrs.asdict(v) for v in report.violations],
    }


def write_heatmap(report: LabReport, path: Path) -> None:
    """A PNG heatmap of each interruption's cost (needs matplotlib: ``pip install agentrt[lab]``)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise LabError(
            "the heatmap needs matplotlib: pip install 'agentrt[lab]' (or pip install matplotlib)"
        ) from None
    metrics: list[tuple[str, Callable[[Cost], float]]] = [
        ("calls run again", lambda c: float(c.calls_rerun)),
        ("characters regenerated", lambda c: float(c.chars_regenerated)),
        ("questions asked again", lambda c: float(c.questions_again)),
        ("mock seconds lost", lambda c: float(c.seconds_lost)),
    ]
    rows = len(report.boundaries)
    fig, axes = plt.subplots(
        1, len(metrics), figsize=(4 * len(metrics), max(4.0, 0.22 * rows + 1.5)), sharey=True
    )
    labels = [f"{b.index} {b.name}" for b in report.boundaries]
    # A user-cancel throws the task away: it costs nothing to redo because nothing is kept,
    # which is not cheap. Its cells get their own colour, not the scale's zero.
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad=DISCARDED_COLOUR)
    for ax, (title, value) in zip(axes, metrics, strict=True):
        grid = [
            [
                math.nan
                if c in DISCARDING
                else (value(p.cost) if (p := report.point(b.index, c)) and p.cost else 0.0)
                for c in report.causes
            ]
            for b in report.boundaries
        ]
        image = ax.imshow(grid, aspect="auto", cmap=cmap)
        ax.set_title(title)
        ax.set_xticks(range(len(report.causes)), report.causes, rotation=45, ha="right")
        fig.colorbar(image, ax=ax, shrink=0.6)
        for v in report.violations:
            if v.cause in report.causes:
                ax.text(
                    report.causes.index(v.cause),
                    v.boundary,
                    "X",
                    ha="center",
                    va="center",
                    color="red",
                    fontweight="bold",
                )
    axes[0].set_yticks(range(rows), labels, fontsize=7)
    if "user_cancel" in report.causes:
        from matplotlib.patches import Patch

        fig.legend(
            handles=[
                Patch(color=DISCARDED_COLOUR, label="discarded (user-cancel: task thrown away)")
            ],
            loc="lower center",
        )
    fig.suptitle(f"agentrt lab: {report.conversation}")
    # Room at the foot for the legend, under the causes' names.
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


# -- the command -------------------------------------------------------------------


def replay_answers(path: Path) -> dict[str, str]:
    """The canned answers a replay file carries: its optional ``"answers": {PROMPT: ANSWER}``."""
    try:
        data = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError) as exc:
        raise LabError(f"cannot read replay file {path}: {exc}") from None
    answers = data.get("answers", {}) if isinstance(data, dict) else {}
    if not isinstance(answers, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in answers.items()
    ):
        raise LabError(f"replay file {path}: 'answers' must map each prompt to its answer")
    return dict(answers)


def build_parser() -> argparse.ArgumentParser:
    """The `agentrt lab` argument parser."""
    parser = argparse.ArgumentParser(
        prog="agentrt lab",
        description="Run a conversation once, then interrupt it at every event and store "
        "write with every cause (user-cancel, pause, disconnect, shutdown, crash), resume "
        "what was kept, check the invariants and print what each interruption cost. "
        "Runs on a mock clock in a throwaway folder: it takes seconds, not the run's duration.",
        epilog="Exit status: 0 no violations, 1 violations found, 2 usage error.",
    )
    parser.add_argument(
        "text",
        help="the conversation, for the scripted model: e.g. "
        "'write a.txt hi; ask Name?; sh echo x >> log; stream 20'",
    )
    parser.add_argument(
        "--replay", metavar="FILE", help="play a recorded conversation (replay format) instead"
    )
    parser.add_argument(
        "--answer",
        action="append",
        default=[],
        metavar="PROMPT=ANSWER",
        help="the answer to a question or confirmation, by its prompt (repeatable; a replay "
        'file may carry them too, as "answers": {PROMPT: ANSWER}); other questions are '
        "answered 'yes', other confirmations are allowed once",
    )
    parser.add_argument(
        "--cause",
        action="append",
        choices=CAUSES,
        help="only these causes (repeatable; default: all)",
    )
    parser.add_argument("--at", type=int, help="only this boundary (from a violation's replay)")
    parser.add_argument(
        "--earlier",
        type=int,
        default=0,
        metavar="N",
        help="start the session with N messages of an earlier conversation (with a small "
        "--context-window, what a compaction summarises)",
    )
    parser.add_argument(
        "--context-window",
        type=int,
        metavar="TOKENS",
        help="the model's context window: a small one makes the conversation compact, and "
        "every compaction is interrupted too",
    )
    parser.add_argument(
        "--real-kills",
        type=int,
        default=0,
        metavar="N",
        help="also SIGKILL a real daemon process at N random events (default 0)",
    )
    parser.add_argument("--seed", type=int, default=None, help="seed for --real-kills")
    parser.add_argument("--heatmap", type=Path, metavar="PNG", help="write a heatmap of the cost")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="a configuration file whose [mcp.servers] the runs use (see docs/mcp.md); each "
        "run starts them anew",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run `agentrt lab`; return the exit status."""
    # Control characters in the conversation or a replay file are shown, never obeyed.
    with shown_output():
        return _main(argv)


def _main(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    answers: dict[str, str] = {}
    for item in args.answer:
        prompt, sep, answer = item.rpartition("=")
        if not sep:
            print(f"agentrt lab: --answer takes PROMPT=ANSWER, not {item!r}", file=sys.stderr)
            return 2
        answers[prompt] = answer
    spec = f"replay:{args.replay}" if args.replay else "scripted"
    if args.replay:
        try:
            answers = {**replay_answers(Path(args.replay)), **answers}
        except LabError as exc:
            print(f"agentrt lab: {exc}", file=sys.stderr)
            return 2
    servers: dict[str, McpServerConfig] = {}
    if args.config is not None:
        try:
            servers = dict(read_config_file(args.config).values.get("mcp.servers") or {})
        except ValueError as exc:
            print(f"agentrt lab: {exc}", file=sys.stderr)
            return 2
    conversation = Conversation(
        args.text,
        spec,
        answers,
        mcp_servers=servers,
        context_window=args.context_window,
        earlier=args.earlier,
    )
    causes = tuple(args.cause) if args.cause else CAUSES

    def progress(done: int, total: int) -> None:
        if not args.json and sys.stderr.isatty():
            # The carriage return is the progress line's own: written as it is.
            print(f"\ragentrt lab: {done}/{total} points", end="", file=own(sys.stderr), flush=True)

    lab = Lab(conversation, causes, on_progress=progress, only=args.at)
    try:
        report = lab.run()
        seed = args.seed if args.seed is not None else random.randrange(2**31)
        kills = real_kills(conversation, args.real_kills, seed=seed)
        report = attrs.evolve(report, real_kills=kills)
    except (LabError, ValueError) as exc:
        print(f"\nagentrt lab: {exc}", file=sys.stderr)
        return 2
    if sys.stderr.isatty() and not args.json:
        print(file=sys.stderr)
    if args.json:
        print(json.dumps(report_json(report), indent=2))
    else:
        print(format_table(report))
    if args.heatmap is not None:
        try:
            write_heatmap(report, args.heatmap)
        except LabError as exc:
            print(f"agentrt lab: {exc}", file=sys.stderr)
            return 2
        if not args.json:
            print(f"heatmap written to {args.heatmap}")
    return 1 if report.violations else 0


__all__ = [
    "CAUSES",
    "Boundary",
    "Conversation",
    "Cost",
    "Lab",
    "LabError",
    "LabReport",
    "Point",
    "Violation",
    "format_table",
    "main",
    "real_kills",
    "report_json",
    "write_heatmap",
]

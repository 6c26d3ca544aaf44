"""How costs grow with the work: a long transcript, a long history, many windows or entries.

Each benchmark runs the same operation at a large and a small size in the same
process, ABBA-interleaved, and reports the ratio of the medians; a runtime that
scales well keeps each ratio near 1.

======================  ===============================================  ======
benchmark               subject vs baseline                              target
======================  ===============================================  ======
``commit_1000``         one commit (`TaskStore.save` of the record with  <= 1.5x
                        one message more) at 1,000 messages vs at 10
``history_3000``        a short run in a session whose history holds     <= 1.5x
                        3,000 messages vs in a session with none
``post_1000``           `Registry.post` with 1,000 windows listening     <= 2x
                        vs with 1
``listen_10k``          `Registry.listen` (a window says hello) with     <= 2x
                        10,000 entries waiting vs with 100
``has_listener_1000``   `Registry.has_listener` at 1,000 listeners       <= 2x
                        vs at 1
======================  ===============================================  ======
"""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path

import attrs
import trio

from agentrt.agent.loop import AgentRun
from agentrt.core.context import RequestContext
from agentrt.core.pending import Entry
from agentrt.core.pending import Listener
from agentrt.core.pending import Registry
from agentrt.core.runtime import Runtime
from agentrt.models.messages import Message
from agentrt.store.record import TaskRecord
from agentrt.store.record import converter
from agentrt.vocab.events import Event
from agentrt.vocab.events import Outcome
from agentrt.vocab.request import Request

from ._harness import Result
from ._harness import format_time
from ._harness import interleave
from ._harness import interleave_sync
from ._workload import conversation
from ._workload import extra_message
from .bench_core import open_bench_runtime


async def _ignore(event: Event) -> None:
    await trio.lowlevel.checkpoint()


# -- one commit at 1,000 messages vs 10 ------------------------------------------


async def bench_commit_size(
    state_dir: Path, rounds: int = 40, large: int = 1000, small: int = 10
) -> Result:
    """One commit: the task's record written with one message more, at `large` vs `small`.

    A commit is what `AgentRun.commit` asks of the store: `TaskStore.save` of
    the record with the new message appended. Each sample saves a fresh
    session's record with N messages (untimed), times the save of N + 1, and
    deletes the session. `AgentRun.commit` itself is timed the same way for
    the notes, so the row can be compared with what a run really does.
    """
    runtime, close = await open_bench_runtime(state_dir)
    counter = itertools.count()
    try:
        store = runtime.store
        big, little = conversation(large, "big"), conversation(small, "little")

        async def ballast(messages: tuple[Message, ...]) -> str:
            # The small samples write as much as the large ones first, to a session of their
            # own: the disk then starts from the same state (a write-ahead log just grown by
            # the same amount) and only the length of the transcript differs.
            if len(messages) >= len(big):
                return ""
            other = f"chat-ballast-{next(counter)}"
            await store.save(TaskRecord(other, "bench", big))
            return other

        async def save(messages: tuple[Message, ...]) -> float:
            session = f"chat-commit-{next(counter)}"
            record = await store.save(TaskRecord(session, "bench", messages))
            other = await ballast(messages)
            grown = record.evolve(transcript=(*record.transcript, extra_message(len(messages))))
            start = time.perf_counter()
            await store.save(grown)
            elapsed = time.perf_counter() - start
            await store.delete(session)
            if other:
                await store.delete(other)
            return elapsed

        async def commit(messages: tuple[Message, ...]) -> float:
            session = f"chat-commit-{next(counter)}"
            record = await store.save(TaskRecord(session, "bench", messages))
            other = await ballast(messages)
            agent = _agent_run(runtime, record)
            start = time.perf_counter()
            await agent.commit(extra_message(len(messages)))
            elapsed = time.perf_counter() - start
            await store.delete(session)
            if other:
                await store.delete(other)
            return elapsed

        subject_median, baseline_median = await interleave(
            lambda: save(big), lambda: save(little), rounds
        )
        run_large, run_small = await interleave(lambda: commit(big), lambda: commit(little), rounds)
    finally:
        await close()
    return Result(
        f"commit_{large}",
        subject_median,
        baseline_median,
        "ratio",
        1.5,
        rounds,
        notes=(
            f"TaskStore.save of the record with one message more, at {large} vs {small} "
            f"messages ({_json_size(big)} vs {_json_size(little)} of JSON), one fresh session per "
            f"sample; the {small}-message samples first write {large} messages to another session",
            f"AgentRun.commit itself: {format_time(run_large)} at {large} vs "
            f"{format_time(run_small)} at {small} ({run_large / run_small:.2f}x)",
        ),
    )


def _agent_run(runtime: Runtime, record: TaskRecord) -> AgentRun:
    """A run over the saved `record`, as the executor makes one, to call `commit` on."""
    return AgentRun(
        model=runtime.model,
        registry=runtime.registry,
        config=runtime.executor.config,
        emit=_ignore,
        task_hash="bench",
        snapshot=record,
        store=runtime.store,
    )


def _json_size(messages: tuple[Message, ...]) -> str:
    """The size of `messages` encoded as JSON, for the notes."""
    size = len(json.dumps(converter.unstructure(messages, tuple[Message, ...])))
    return f"{size / 1024:.1f} KiB"


# -- a short run with 3,000 messages of history vs none -----------------------


async def bench_history_size(state_dir: Path, rounds: int = 20, history: int = 3000) -> Result:
    """A short run (``hello``: one model answer, no tools) in a session with `history` messages.

    Each sample makes a fresh session; the subject's is given `history`
    messages of finished runs first (untimed, through `TaskStore.finish`), the
    baseline's none (the same messages go to another session, so that both
    samples start from the same disk state). The time is `Executor.run` from call to return: create
    the task (reading the history), commit the answer, finish (saving the
    history).
    """
    runtime, close = await open_bench_runtime(state_dir)
    counter = itertools.count()
    owner = object()
    problems: list[str] = []
    past = conversation(history, "past")
    try:

        async def run(seed: bool) -> float:
            session = f"chat-history-{next(counter)}"
            # Both write the same history first, the baseline's to another session: the
            # disk then starts from the same state (a write-ahead log just grown by the
            # same amount) and only where the history belongs differs.
            await runtime.store.finish(session if seed else f"{session}-elsewhere", past)
            start = time.perf_counter()
            ended = await runtime.executor.run(session, "hello", owner=owner, emit=_ignore)
            elapsed = time.perf_counter() - start
            if ended.outcome is not Outcome.FINISHED:
                problems.append(f"{session} ended {ended.outcome.value}: {ended.error}")
            elif seed:
                kept = len(await runtime.store.load_history(session))
                if kept != history + 2:
                    problems.append(f"{session} kept {kept} messages of history, not {history + 2}")
            return elapsed

        subject_median, baseline_median = await interleave(
            lambda: run(True), lambda: run(False), rounds
        )
    finally:
        await close()
    return Result(
        f"history_{history}",
        subject_median,
        baseline_median,
        "ratio",
        1.5,
        rounds,
        tuple(problems[:3]),
        (
            f"Executor.run('hello') in a session with {history} messages of history "
            f"({_json_size(past)} of JSON) vs none, one fresh session per sample; both written "
            "just before, the baseline's to another session",
        ),
    )


# -- the registry with many windows or entries -------------------------------------


def _window_listener(registry: Registry, window: str) -> Listener:
    """A listener like a daemon connection's: ``cli-`` entries of one window only."""
    return registry.listen("cli-", name=f"daemon connection {window}", window=window)


@attrs.define(eq=False)
class _Windows:
    """A registry with `count` connected windows, each a daemon-like listener."""

    count: int
    registry: Registry = attrs.field(factory=Registry, init=False)
    listeners: list[Listener] = attrs.field(factory=list, init=False)
    _turn: itertools.count[int] = attrs.field(factory=itertools.count, init=False)

    def __attrs_post_init__(self) -> None:
        self.listeners = [_window_listener(self.registry, f"w-{n}") for n in range(self.count)]

    def post_batch(self, size: int) -> float:
        """Post `size` questions, each for the next window in turn; withdraw them untimed."""
        request = Request.question("which colour?")
        contexts = []
        for _ in range(size):
            n = next(self._turn) % self.count
            contexts.append(RequestContext(f"cli-{n}", window_hash=f"w-{n}"))
        post = self.registry.post
        entries: list[Entry] = []
        start = time.perf_counter()
        for ctx in contexts:
            entries.append(post(request, ctx))
        elapsed = time.perf_counter() - start
        for entry in entries:
            self.registry.withdraw(entry)
        return elapsed / size

    def has_listener_batch(self, size: int) -> tuple[float, int]:
        """Ask `size` times, alternating a connected window and a gone one; (seconds, wrong)."""
        last = self.count - 1
        here = RequestContext(f"cli-{last}", window_hash=f"w-{last}")
        gone = RequestContext("cli-gone", window_hash="w-gone")
        has = self.registry.has_listener
        answers: list[bool] = []
        start = time.perf_counter()
        for n in range(size):
            ctx = here if n % 2 == 0 else gone
            answers.append(has(ctx.origin, ctx))
        elapsed = time.perf_counter() - start
        wrong = sum(1 for n, a in enumerate(answers) if a != (n % 2 == 0))
        return elapsed / size, wrong

    def check(self) -> str | None:
        """A description of a registry that did not return to its start, or None."""
        stats = self.registry.statistics()
        if stats.waiting or stats.claimed or stats.listeners != self.count:
            return f"with {self.count} windows the registry ended at {stats}"
        return None


async def bench_post_fanout(
    rounds: int = 60, batch: int = 50, large: int = 1000, small: int = 1
) -> Result:
    """`Registry.post` of a window's question with `large` windows listening vs `small`."""
    many, few = _Windows(large), _Windows(small)

    subject_median, baseline_median = interleave_sync(
        lambda: many.post_batch(batch), lambda: few.post_batch(batch), rounds
    )
    problems = tuple(p for p in (many.check(), few.check()) if p)
    return Result(
        f"post_{large}",
        subject_median,
        baseline_median,
        "ratio",
        2.0,
        rounds,
        problems,
        (
            f"median per post with {large} vs {small} daemon-like listeners "
            f"(prefix cli-, bound to a window); each question is for one window",
        ),
    )


async def bench_has_listener(
    rounds: int = 60, batch: int = 200, large: int = 1000, small: int = 1
) -> Result:
    """`Registry.has_listener` with `large` windows listening vs `small`."""
    many, few = _Windows(large), _Windows(small)
    wrong = 0

    async def measure(windows: _Windows) -> float:
        nonlocal wrong
        await trio.lowlevel.checkpoint()
        elapsed, bad = windows.has_listener_batch(batch)
        wrong += bad
        return elapsed

    subject_median, baseline_median = await interleave(
        lambda: measure(many), lambda: measure(few), rounds
    )
    problems = (f"{wrong} wrong answers",) if wrong else ()
    return Result(
        f"has_listener_{large}",
        subject_median,
        baseline_median,
        "ratio",
        2.0,
        rounds,
        problems,
        (
            f"median per call at {large} vs {small} listeners, alternating the last "
            f"connected window (True) and a gone one (False); {format_time(subject_median)} "
            f"at {large}",
        ),
    )


@attrs.define(eq=False)
class _Waiting:
    """A registry with `size` entries waiting: a third ``tg-``, two thirds other windows'."""

    size: int
    registry: Registry = attrs.field(factory=Registry, init=False)
    _new: itertools.count[int] = attrs.field(factory=itertools.count, init=False)

    def __attrs_post_init__(self) -> None:
        request = Request.question("waiting for its window")
        for n in range(self.size):
            if n % 3 == 0:
                ctx = RequestContext(f"tg-{n}")
            else:
                ctx = RequestContext(f"cli-{n}", window_hash=f"w-{n % 100}")
            self.registry.post(request, ctx)

    def listen_batch(self, size: int) -> float:
        """Open `size` listeners for new windows, closing each untimed; seconds per listen."""
        total = 0.0
        for _ in range(size):
            window = f"new-{next(self._new)}"
            start = time.perf_counter()
            listener = _window_listener(self.registry, window)
            total += time.perf_counter() - start
            listener.close()
        return total / size

    def check(self) -> str | None:
        """A description of a registry that did not return to its start, or None."""
        stats = self.registry.statistics()
        if stats.waiting != self.size or stats.claimed or stats.listeners:
            return f"with {self.size} entries the registry ended at {stats}"
        return None


async def bench_listen_scaling(
    rounds: int = 40, batch: int = 10, large: int = 10_000, small: int = 100
) -> Result:
    """`Registry.listen` for a new window with `large` entries waiting vs `small`."""
    big, little = _Waiting(large), _Waiting(small)

    subject_median, baseline_median = interleave_sync(
        lambda: big.listen_batch(batch), lambda: little.listen_batch(batch), rounds
    )
    problems = tuple(p for p in (big.check(), little.check()) if p)
    return Result(
        f"listen_{large // 1000}k" if large >= 1000 else f"listen_{large}",
        subject_median,
        baseline_median,
        "ratio",
        2.0,
        rounds,
        problems,
        (
            f"median per listen (a new window's hello) with {large} vs {small} entries "
            "waiting, none of them for the new window",
        ),
    )


# -- running them all ------------------------------------------------------------


async def run_all(state_root: Path) -> list[Result]:
    """Every scaling benchmark at its full size, in one Trio run."""
    (state_root / "commit").mkdir()
    (state_root / "history").mkdir()
    return [
        await bench_commit_size(state_root / "commit"),
        await bench_history_size(state_root / "history"),
        await bench_post_fanout(),
        await bench_listen_scaling(),
        await bench_has_listener(),
    ]

"""Benchmarks of the core runtime, each a ratio against a baseline measured in the same run.

Machines running these are shared and noisy, so an absolute time means little.
Each benchmark measures its subject and a raw baseline (the cheapest thing
that does the same job with bare Trio or bare SQLite) in the same process,
alternating the two in ABBA order so that drift hits both alike, and reports
the ratio of their medians.

====================  ==============================================  ==========
benchmark             subject vs baseline                             target
====================  ==============================================  ==========
``ask_answer``        `Registry.ask` -> claim -> answer round trip    <= 2x
                      vs request/reply over two memory channels
``cancel_final``      `Executor.cancel(hash, PAUSE)` -> `RunEnded`    <= 3x
                      vs cancelling a scope around `sleep_forever`
``pause_resume``      pause -> persisted -> resume -> the resumed     <= 2x
                      run's tool call, vs a bare SQLite upsert +
                      select of a record of the same size
``pg_pause_resume``   the same cycle on PostgreSQL vs a bare synced   <= 2x
                      upsert + select over psycopg
``claim_10k``         `Listener.claim_nowait` among 10,000 waiting    <= 2x
                      entries vs among 100
``durable_commit``    one task-store write as the store makes it      <= 2 ms
                      (told once the WAL is fsynced) vs the same      (absolute)
                      write with no sync
====================  ==============================================  ==========

The ratio of ``durable_commit`` is the price of surviving a power cut, not
only a killed process: every pause and committed tool result pays it once per
store write. A resume's claim does not: it is made durable by the next synced
write (see docs/store.md), so a pause -> resume cycle pays one sync, as its
baseline does. On SQLite the stop's sync runs in a thread of its own, and a
claim is told once its transaction commits: the resumed run does not wait for
the stop's sync, and a cycle right after another may share its sync.
"""

from __future__ import annotations

import collections
import itertools
import json
import os
import sqlite3
import statistics
import time
from collections.abc import Awaitable
from collections.abc import Callable
from pathlib import Path
from typing import Any
from typing import TypeVar

import attrs
import psycopg
import trio
import trio.testing
from stress.fleet import postgres_base
from stress.fleet import postgres_schema

import agentrt.store.postgres
from agentrt.core.cause import Cause
from agentrt.core.context import RequestContext
from agentrt.core.pending import Answer
from agentrt.core.pending import Listener
from agentrt.core.pending import Registry
from agentrt.core.runtime import Runtime
from agentrt.core.runtime import open_runtime
from agentrt.models.messages import Message
from agentrt.models.scripted import ScriptedModel
from agentrt.store import Store
from agentrt.store.record import TaskRecord
from agentrt.store.record import converter
from agentrt.store.sql import SqlStore
from agentrt.store.sqlite import TaskStore
from agentrt.vocab.events import Event
from agentrt.vocab.events import Outcome
from agentrt.vocab.events import RunEnded
from agentrt.vocab.events import TaskStarted
from agentrt.vocab.events import ToolCallEvent
from agentrt.vocab.request import Request
from agentrt.vocab.terms import TaskStatus

from ._harness import Batch as Batch
from ._harness import Result as Result
from ._harness import format_table as format_table
from ._harness import format_time
from ._harness import interleave as interleave
from ._harness import interleave_sync

T = TypeVar("T")


async def thread_hop_median(samples: int = 100) -> float:
    """The median cost of one `trio.to_thread.run_sync` round trip doing nothing.

    The task store runs each SQLite call through one such hop, so this is the
    floor under every store operation on this machine.
    """
    times: list[float] = []
    for _ in range(samples):
        start = time.perf_counter()
        await trio.to_thread.run_sync(_nothing)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _nothing() -> None:
    pass


# -- 1. registry ask -> answer round trip -------------------------------------


async def bench_ask_answer(rounds: int = 60, batch: int = 200) -> Result:
    """`Registry.ask` answered by a listener task vs a request/reply over memory channels."""
    registry = Registry()
    ctx = RequestContext("chat-bench")
    request = Request.question("ping")
    answer = Answer("pong")
    req_send, req_recv = trio.open_memory_channel[Request](1)
    rep_send, rep_recv = trio.open_memory_channel[Answer](1)

    async def listen(listener: Listener) -> None:
        while True:
            entry = await listener.claim()
            entry.answer(answer)

    async def reply() -> None:
        async for got in req_recv:
            assert got is request
            await rep_send.send(answer)

    async def subject() -> float:
        start = time.perf_counter()
        for _ in range(batch):
            got = await registry.ask(request, context=ctx)
            assert got is answer
        return (time.perf_counter() - start) / batch

    async def baseline() -> float:
        start = time.perf_counter()
        for _ in range(batch):
            await req_send.send(request)
            got = await rep_recv.receive()
            assert got is answer
        return (time.perf_counter() - start) / batch

    with registry.listen("chat-", name="bench") as listener:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(listen, listener)
            nursery.start_soon(reply)
            subject_median, baseline_median = await interleave(subject, baseline, rounds)
            nursery.cancel_scope.cancel()
    stats = registry.statistics()
    problems = () if stats.waiting == stats.claimed == 0 else (f"entries left behind: {stats}",)
    return Result(
        "ask_answer",
        subject_median,
        baseline_median,
        "ratio",
        2.0,
        rounds,
        problems,
        (f"median per round trip over {rounds} batches of {batch}",),
    )


# -- 2. executor cancel -> final event ----------------------------------------


@attrs.define(eq=False)
class _Watch:
    """Collects a run's events and the moments that matter to a benchmark."""

    tool: str
    events: list[Event] = attrs.field(factory=list)
    started: trio.Event = attrs.field(factory=trio.Event)
    ended: trio.Event = attrs.field(factory=trio.Event)
    task_hash: str = ""
    begun_at: float = 0.0
    started_at: float = 0.0
    ended_at: float = 0.0
    final: RunEnded | None = None

    async def emit(self, event: Event) -> None:
        now = time.perf_counter()
        self.events.append(event)
        if isinstance(event, TaskStarted):
            self.begun_at = now
        elif isinstance(event, ToolCallEvent) and event.name == self.tool:
            self.task_hash = event.task_hash
            self.started_at = now
            self.started.set()
        elif isinstance(event, RunEnded):
            self.ended_at = now
            self.final = event
            self.ended.set()


def _bench_model() -> ScriptedModel:
    return ScriptedModel(word_delay=0, stream_delay=0)


async def open_bench_runtime(
    state_dir: Path, store: str | None = None
) -> tuple[Runtime, Callable[[], Awaitable[None]]]:
    """A runtime on `state_dir` (its store `store`, when given) with a scripted model that
    never sleeps; and its closer."""
    manager = open_runtime(
        state_dir, model=_bench_model(), workdir=state_dir, restricted_paths=(), store=store
    )
    runtime = await manager.__aenter__()

    async def close() -> None:
        await manager.__aexit__(None, None, None)

    return runtime, close


async def bench_cancel_final(state_dir: Path, rounds: int = 150) -> Result:
    """`executor.cancel(hash, PAUSE)` to the `RunEnded` event vs a bare cancel-scope delivery."""
    runtime, close = await open_bench_runtime(state_dir)
    owner = object()
    problems: list[str] = []
    counter = itertools.count()
    try:
        async with trio.open_nursery() as nursery:

            async def subject() -> float:
                session = f"chat-cancel-{next(counter)}"
                watch = _Watch("sleep")
                nursery.start_soon(_run, runtime, session, "sleep 1000", owner, watch)
                with trio.fail_after(30):
                    await watch.started.wait()
                    await trio.testing.wait_all_tasks_blocked()
                    start = time.perf_counter()
                    runtime.executor.cancel(watch.task_hash, Cause.PAUSE, owner=owner)
                    await watch.ended.wait()
                elapsed = watch.ended_at - start
                if watch.final is None or watch.final.outcome is not Outcome.CANCELLED:
                    problems.append(f"{session} ended with {watch.final!r}, not a pause")
                elif not watch.final.pending_kept:
                    problems.append(f"{session}: a pause did not keep the pending task")
                await runtime.executor.discard(session)
                return elapsed

            async def baseline() -> float:
                resumed = trio.Event()
                resumed_at = 0.0

                async def parked(*, task_status: trio.TaskStatus[trio.CancelScope]) -> None:
                    nonlocal resumed_at
                    with trio.CancelScope() as scope:
                        task_status.started(scope)
                        await trio.sleep_forever()
                    resumed_at = time.perf_counter()
                    resumed.set()

                scope: trio.CancelScope = await nursery.start(parked)
                with trio.fail_after(30):
                    await trio.testing.wait_all_tasks_blocked()
                    start = time.perf_counter()
                    scope.cancel()
                    await resumed.wait()
                return resumed_at - start

            subject_median, baseline_median = await interleave(subject, baseline, rounds)
            hop = await thread_hop_median()
    finally:
        await close()
    return Result(
        "cancel_final",
        subject_median,
        baseline_median,
        "ratio",
        3.0,
        rounds,
        tuple(problems[:3]),
        (
            f"median of {rounds} cancels, each of a run parked in its sleep tool",
            "the task was durable at its last commit; the pause's ledger entry and new status "
            "are queued for the store (one call, the entry made in its thread) before the final "
            "event and written (fsynced) after it",
            f"one bare thread hop costs {format_time(hop)} here",
        ),
    )


async def _run(runtime: Runtime, session: str, text: str, owner: object, watch: _Watch) -> None:
    await runtime.executor.run(session, text, owner=owner, emit=watch.emit)


async def _resume(runtime: Runtime, session: str, owner: object, watch: _Watch) -> None:
    await runtime.executor.resume(session, owner=owner, emit=watch.emit)


# -- 3. pause -> persisted -> resume cycle -------------------------------------

#: What the paused task does: a committed `big` call, then a long `sleep` it is paused in.
PAUSE_RESUME_TASK = "big 2048; sleep 1000"


@attrs.define(eq=False)
class PauseResumeLoop:
    """One session paused and resumed over and over, each cycle timed.

    The task's round commits a `big` call and then sits in a long `sleep` call.
    Each cycle pauses it (the record is saved as interrupted), resumes it, and
    ends when the resumed run emits the `sleep` call again. A resumed run that
    emits the `big` call re-executed a committed call, which must never happen.
    Start one with `PauseResumeLoop.start`; `make bench-peers` uses it too.
    """

    runtime: Runtime
    nursery: trio.Nursery
    session: str = "chat-pause-resume"
    owner: object = attrs.field(factory=object)
    watch: _Watch = attrs.field(factory=lambda: _Watch("sleep"))
    cycles: int = attrs.field(default=0, init=False)
    reexecuted: int = attrs.field(default=0, init=False)
    problems: list[str] = attrs.field(factory=list, init=False)
    #: Each cycle's parts (`phases`): the pause to its final event, then to the resumed
    #: run's first event (its claim committed), then to the tool call.
    parts: list[tuple[float, float, float]] = attrs.field(factory=list, init=False)

    @classmethod
    async def start(
        cls, runtime: Runtime, nursery: trio.Nursery, session: str = "chat-pause-resume"
    ) -> PauseResumeLoop:
        """Start the task in `nursery` and wait until it sits in its `sleep` call."""
        loop = cls(runtime, nursery, session)
        nursery.start_soon(_run, runtime, session, PAUSE_RESUME_TASK, loop.owner, loop.watch)
        with trio.fail_after(30):
            await loop.watch.started.wait()
        big_calls = sum(
            1 for e in loop.watch.events if isinstance(e, ToolCallEvent) and e.name == "big"
        )
        if big_calls != 1:
            loop.problems.append(f"the first run called big {big_calls} times, not once")
        return loop

    async def cycle(self) -> float:
        """Pause, persist, resume, reach the `sleep` call again; return the seconds it took."""
        with trio.fail_after(30):
            await trio.testing.wait_all_tasks_blocked()
            start = time.perf_counter()
            self.runtime.executor.cancel(self.watch.task_hash, Cause.PAUSE, owner=self.owner)
            await self.watch.ended.wait()
            stopped, paused = self.watch.ended_at, self.watch.final
            self.watch = _Watch("sleep")
            self.nursery.start_soon(_resume, self.runtime, self.session, self.owner, self.watch)
            await self.watch.started.wait()
        resumed = self.watch
        elapsed = resumed.started_at - start
        self.parts.append(
            (stopped - start, resumed.begun_at - stopped, resumed.started_at - resumed.begun_at)
        )
        self.cycles += 1
        if paused is None or not paused.pending_kept:
            self.problems.append(f"a pause ended with {paused!r}")
        self.reexecuted += sum(
            1 for e in self.watch.events if isinstance(e, ToolCallEvent) and e.name == "big"
        )
        return elapsed

    def phases(self, first: int = 0) -> str:
        """Where the cycles from the `first` on spent their time, each part's median."""
        parts = self.parts[first:]
        pause, claim, call = (
            format_time(statistics.median(p[i] for p in parts)) if parts else "-" for i in range(3)
        )
        return (
            f"a cycle's parts (medians): the pause to its final event {pause}, then to the "
            f"resumed run's first event (its claim committed) {claim}, then to the tool call {call}"
        )

    def check(self) -> tuple[str, ...]:
        """What went wrong besides time: the first three problems."""
        problems = list(self.problems)
        if self.reexecuted:
            problems.append(f"{self.reexecuted} committed tool calls ran again after a resume")
        return tuple(problems[:3])


async def bench_pause_resume(state_dir: Path, rounds: int = 200) -> Result:
    """A pause, its persisted record, and a resume that reaches the long tool call again.

    The baseline is one SQLite upsert and one select of a record of the same
    size, in a file set up like the store's, with no thread hop.
    """
    runtime, close = await open_bench_runtime(state_dir)
    session = "chat-pause-resume"
    store_calls, restore = _count_store_calls()
    base_db = connect_like_store(state_dir / "baseline.db")
    try:
        async with trio.open_nursery() as nursery:
            loop = await PauseResumeLoop.start(runtime, nursery, session)
            # One cycle first: by then the round's `big` result is committed, so the record
            # measured is the one every later pause keeps.
            await loop.cycle()
            record_size = await stored_record_size(runtime.store, session)
            payload = "x" * record_size
            if store_calls is not None:
                store_calls.clear()  # count the measured cycles only
            first_counted = loop.cycles

            async def baseline() -> float:
                await trio.lowlevel.checkpoint()
                return sqlite_round_trip(base_db, session, payload)

            subject_median, baseline_median = await interleave(loop.cycle, baseline, rounds)
            # Taken before the cancel below, whose shutdown saves the task once more.
            calls = None if store_calls is None else dict(store_calls)
            cycles = loop.cycles - first_counted
            nursery.cancel_scope.cancel()
        hop = await thread_hop_median()
    finally:
        restore()
        base_db.close()
        await close()
    if calls is None:
        counted = "not counted (the store has no TaskStore._submit to count through)"
    else:
        counted = ", ".join(f"{name} {count / cycles:.2f}" for name, count in calls.items())
    return Result(
        "pause_resume",
        subject_median,
        baseline_median,
        "ratio",
        2.0,
        rounds,
        loop.check(),
        (
            f"re-executed committed tool calls: {loop.reexecuted} over {loop.cycles} resumes",
            f"baseline: one SQLite upsert + select of a {record_size}-byte record (changed each "
            "time, so a real synced write), no thread hop",
            f"store calls per cycle: {counted}; one bare thread hop costs {format_time(hop)} here",
            loop.phases(first_counted),
        ),
    )


async def bench_pg_pause_resume(state_dir: Path, rounds: int = 200) -> Result:
    """The `pause_resume` cycle on PostgreSQL vs a bare synced upsert + select over psycopg.

    The store is a fresh schema of the test database (``AGENTRT_TEST_POSTGRES``,
    default ``postgresql://postgres@127.0.0.1:5432/test``), dropped after. The
    baseline is what the least store would do over the same driver, in the same
    schema: one transaction upserting a record of the same size (``BEGIN``, the
    upsert, ``COMMIT``, which waits for the server's WAL flush as the store's
    commits do but a resume's claim) and one select of it, four round trips in all.
    """
    base = postgres_base()
    try:
        with psycopg.connect(base, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        reason = " ".join(str(exc).split()) or type(exc).__name__
        return Result.failed("pg_pause_resume", f"no PostgreSQL at {base} ({reason})", 0.0, 2.0, 0)
    session = "chat-pause-resume"
    counted = _StatementCounter()
    async with postgres_schema(base) as url:
        runtime, close = await open_bench_runtime(state_dir, store=url)
        base_db = psycopg.connect(url, autocommit=True)
        try:
            base_db.execute("CREATE TABLE baseline (session_id text PRIMARY KEY, record text)")
            async with trio.open_nursery() as nursery:
                loop = await PauseResumeLoop.start(runtime, nursery, session)
                await loop.cycle()
                record_size = await stored_record_size(runtime.store, session)
                payload = "x" * record_size

                async def baseline() -> float:
                    await trio.lowlevel.checkpoint()
                    return pg_round_trip(base_db, session, payload)

                with counted:
                    first = loop.cycles
                    await loop.cycle()
                    await loop.cycle()
                    statements = counted.count / (loop.cycles - first)
                measured = loop.cycles
                subject_median, baseline_median = await interleave(loop.cycle, baseline, rounds)
                nursery.cancel_scope.cancel()
        finally:
            base_db.close()
            await close()
    return Result(
        "pg_pause_resume",
        subject_median,
        baseline_median,
        "ratio",
        2.0,
        rounds,
        loop.check(),
        (
            f"re-executed committed tool calls: {loop.reexecuted} over {loop.cycles} resumes",
            f"baseline: BEGIN, one upsert of a {record_size}-byte record, COMMIT, one select, "
            "over psycopg on the same server (4 round trips)",
            f"the store's round trips per cycle: {statements:.1f} (a pipeline of statements "
            "counts once, as does each query psycopg sends itself)",
            loop.phases(measured),
        ),
    )


@attrs.define(eq=False)
class _StatementCounter:
    """Counts the round trips made over psycopg in this process while entered.

    The store sends its statements in pipelines, each one round trip (its
    `agentrt.store.postgres._pipeline_results`); every query psycopg sends
    itself goes through `psycopg.Cursor.execute` (or ``executemany``), the
    pool's check of a connection before lending it included.
    """

    count: int = 0
    _originals: list[tuple[Any, str, Any]] = attrs.field(factory=list)

    def __enter__(self) -> None:
        for owner, name in (
            (psycopg.Cursor, "execute"),
            (psycopg.Cursor, "executemany"),
            (agentrt.store.postgres, "_pipeline_results"),
        ):
            original = getattr(owner, name)
            self._originals.append((owner, name, original))

            def counting(*args: Any, _original: Any = original, **kw: Any) -> Any:
                self.count += 1
                return _original(*args, **kw)

            setattr(owner, name, counting)

    def __exit__(self, *exc: object) -> None:
        for owner, name, original in self._originals:
            setattr(owner, name, original)
        self._originals.clear()


def pg_round_trip(db: psycopg.Connection[Any], key: str, payload: str) -> float:
    """`sqlite_round_trip` over psycopg: one synced upsert of `payload` and one select; seconds."""
    record = payload + "ab"[next(_flip) % 2]
    start = time.perf_counter()
    with db.transaction():
        db.execute(
            "INSERT INTO baseline(session_id, record) VALUES (%s, %s) "
            "ON CONFLICT (session_id) DO UPDATE SET record = excluded.record",
            (key, record),
        )
    row = db.execute("SELECT record FROM baseline WHERE session_id = %s", (key,)).fetchone()
    elapsed = time.perf_counter() - start
    assert row is not None and row[0] == record
    return elapsed


def _count_store_calls() -> tuple[collections.Counter[str] | None, Callable[[], None]]:
    """Count `TaskStore` calls by method until the returned function restores it.

    Each call is queued through `TaskStore._submit`; a store without that
    method is not counted (None) rather than breaking the run.
    """
    original = getattr(TaskStore, "_submit", None)
    if original is None:
        return None, lambda: None
    counts: collections.Counter[str] = collections.Counter()

    def counting(self: SqlStore, fn: Callable[[sqlite3.Connection], T], **how: bool) -> Any:
        counts[fn.__qualname__.split(".")[1]] += 1
        return original(self, fn, **how)

    TaskStore._submit = counting  # type: ignore[method-assign]

    def restore() -> None:
        TaskStore._submit = original  # type: ignore[method-assign]

    return counts, restore


def connect_like_store(path: Path, *, check_same_thread: bool = True) -> sqlite3.Connection:
    """A SQLite file set up as the task store sets up its own (WAL, synchronous=FULL)."""
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=check_same_thread)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("CREATE TABLE IF NOT EXISTS tasks (session_id TEXT PRIMARY KEY, record TEXT)")
    db.isolation_level = "DEFERRED"
    return db


_flip = itertools.count()


def sqlite_round_trip(db: sqlite3.Connection, key: str, payload: str) -> float:
    """One upsert of `payload` under `key` and one select of it, in the caller's thread; seconds.

    The least a store can do to persist a record and read it back: the
    baseline of the pause -> persisted -> resume cycle. Each call writes a
    record that differs from the last in one byte (as a pause and a resume
    each change the record's status): SQLite does not write a row whose bytes
    are unchanged, so upserting the same record twice would commit, and sync,
    nothing at all.
    """
    record = payload + "ab"[next(_flip) % 2]
    start = time.perf_counter()
    with db:
        db.execute(
            "INSERT INTO tasks(session_id, record) VALUES (?, ?) "
            "ON CONFLICT(session_id) DO UPDATE SET record = excluded.record",
            (key, record),
        )
    row = db.execute("SELECT record FROM tasks WHERE session_id = ?", (key,)).fetchone()
    elapsed = time.perf_counter() - start
    assert row[0] == record
    return elapsed


async def stored_record_size(store: Store, session: str) -> int:
    """The size in bytes of a session's saved record: its transcript and input as JSON.

    Read through the public store API, so it holds whatever the store's schema.
    """
    record = await store.load(session)
    if record is None:
        return 0
    transcript = converter.unstructure(record.transcript, tuple[Message, ...])
    return len(json.dumps(transcript).encode()) + len(json.dumps(record.input).encode())


# -- 4. claim cost with many waiting entries -----------------------------------


async def bench_claim_scaling(
    rounds: int = 60, batch: int = 20, large: int = 10_000, small: int = 100
) -> Result:
    """`Listener.claim_nowait` + answer with `large` entries waiting vs with `small`.

    A third of the entries belong to another prefix (a ``tg-`` listener's), a
    third to this listener's prefix but another window (refused by its match),
    and a third are this listener's own.
    """
    big = _ClaimPopulation(large)
    little = _ClaimPopulation(small)

    subject_median, baseline_median = interleave_sync(
        lambda: big.claim_batch(batch), lambda: little.claim_batch(batch), rounds
    )
    problems = [p for p in (big.check(), little.check()) if p]
    return Result(
        f"claim_{large // 1000}k" if large >= 1000 else f"claim_{large}",
        subject_median,
        baseline_median,
        "ratio",
        2.0,
        rounds,
        tuple(problems),
        (f"median per claim with {large} vs {small} entries waiting (baseline)",),
    )


@attrs.define(eq=False)
class _ClaimPopulation:
    """A registry kept at `size` waiting entries, a third of them claimable by `mine`."""

    size: int
    registry: Registry = attrs.field(factory=Registry, init=False)
    mine: Listener = attrs.field(init=False)
    others: list[Listener] = attrs.field(factory=list, init=False)
    _counter: itertools.count[int] = attrs.field(factory=itertools.count, init=False)
    _request: Request = attrs.field(factory=lambda: Request.question("claim me"), init=False)

    def __attrs_post_init__(self) -> None:
        self.mine = self.registry.listen("cli-", lambda c: c.window_hash == "w-mine", name="mine")
        self.others = [
            self.registry.listen("cli-", lambda c: c.window_hash == "w-other", name="other"),
            self.registry.listen("tg-", name="tg"),
        ]
        for n in range(self.size):
            self._post(n % 3)

    def _post(self, kind: int) -> None:
        n = next(self._counter)
        if kind == 0:
            ctx = RequestContext(f"tg-{n}")
        elif kind == 1:
            ctx = RequestContext(f"cli-{n}", window_hash="w-other")
        else:
            ctx = RequestContext(f"cli-{n}", window_hash="w-mine")
        self.registry.post(self._request, ctx)

    def claim_batch(self, count: int) -> float:
        """Claim and answer `count` of `mine`'s entries; refill untimed; seconds per claim."""
        claim = self.mine.claim_nowait
        start = time.perf_counter()
        for _ in range(count):
            entry = claim()
            assert entry is not None
            entry.answer("ok")
        elapsed = time.perf_counter() - start
        for _ in range(count):
            self._post(2)
        return elapsed / count

    def check(self) -> str | None:
        """A description of a wrong population, or None."""
        stats = self.registry.statistics()
        if stats.waiting != self.size or stats.claimed != 0:
            return f"with {self.size} entries the registry ended at {stats}"
        return None


# -- 5. the cost of a durable commit -----------------------------------------------


async def bench_durable_commit(state_dir: Path, rounds: int = 100, batch: int = 5) -> Result:
    """One store write (a status change) as the store makes it, fsynced, vs unfsynced.

    Two stores in the same folder, so on the same disk: the store as it is (the
    WAL fsynced before a write is told done) and one that leaves the sync out
    (`_UnsyncedStore`: a commit reaches the OS but not the disk). Both go through
    the same thread hop and transaction, so the ratio is the fsync (and the hop
    to the thread that makes it) alone.
    """
    durable = await TaskStore.open(state_dir / "full.db")
    quick = await _UnsyncedStore.open(state_dir / "normal.db")
    problems: list[str] = []
    try:
        # Store calls run inside a batch's transaction, where the level cannot change: set it
        # on the connection itself, before any call.
        quick._db.execute("PRAGMA synchronous=NORMAL")
        if durable.wal is None:
            problems.append("the store is not in WAL mode: it syncs inside each commit")
        record = TaskRecord("chat-durable", "x", (Message.user("x"),))
        for store in (durable, quick):
            await store.save(record)

        def writes(store: TaskStore) -> Batch:
            async def timed() -> float:
                start = time.perf_counter()
                for n in range(batch):
                    status = TaskStatus.INTERRUPTED if n % 2 else TaskStatus.FAILED
                    await store.mark("chat-durable", status)
                return (time.perf_counter() - start) / batch

            return timed

        subject_median, baseline_median = await interleave(writes(durable), writes(quick), rounds)
    finally:
        await durable.aclose()
        await quick.aclose()
    return Result(
        "durable_commit",
        subject_median,
        baseline_median,
        "absolute",
        2e-3,
        rounds,
        tuple(problems),
        (
            f"one status write, median of {rounds} batches of {batch}; the ratio is what "
            "fsyncing every commit costs on this disk",
        ),
    )


@attrs.define(eq=False)
class _UnsyncedStore(TaskStore):
    """The store with its syncs left out: `durable_commit`'s baseline."""

    def _run_batch(self, db: sqlite3.Connection, batch: list[Any]) -> bool:
        return SqlStore._run_batch(self, db, batch)


# -- the sandbox ------------------------------------------------------------------


async def bench_sandboxed_sh(root: Path, rounds: int = 20, batch: int = 10) -> Result:
    """A sandboxed ``sh -c true`` as the shell tool starts it, vs a bare ``bash -c true``.

    The subject is what a confirmed shell call spawns: its process group with
    the watcher (`agentrt.agent.toolproc.run_tool`), bubblewrap with agentrt's
    state hidden and the default restricted paths read-only, the namespace's
    first process, then ``sh -c true``; the environment is the tool's. The
    network is shared, as for every call a person confirmed; a note gives the
    cost of the private network an unasked ``full-auto`` call gets instead.
    """
    from agentrt.agent.sandbox import Sandbox
    from agentrt.agent.sandbox import tool_environment
    from agentrt.agent.toolproc import run_tool
    from agentrt.config.settings import DEFAULT_RESTRICTED

    sandbox = Sandbox.detect()
    work, state = root / "work", root / "state"
    work.mkdir()
    (state / "secrets").mkdir(parents=True)
    env = tool_environment(os.environ)

    def argv(network: bool) -> list[str]:
        return sandbox.wrap(
            ["sh", "-c", "true"],
            workdir=work,
            hidden=(state,),
            restricted=tuple(Path(p) for p in DEFAULT_RESTRICTED),
            network=network,
        )

    problems: list[str] = []
    if not sandbox.enforced:
        return Result(
            "sandboxed_sh", 0.0, 0.0, "ratio", 3.0, 0, (), (), failure=f"no sandbox: {sandbox.why}"
        )
    shared, private = argv(True), argv(False)

    def spawns(command: list[str], *, tool: bool) -> Batch:
        async def timed() -> float:
            start = time.perf_counter()
            for _ in range(batch):
                if tool:
                    out = await run_tool(command, cwd=work, env=env)
                    code = out.returncode
                else:
                    process = await trio.lowlevel.open_process(command)
                    code = await process.wait()
                if code != 0:
                    problems.append(f"{command[0]} exited {code}")
            return (time.perf_counter() - start) / batch

        return timed

    bare = spawns(["bash", "-c", "true"], tool=False)
    subject_median, baseline_median = await interleave(spawns(shared, tool=True), bare, rounds)
    cut_median, _ = await interleave(spawns(private, tool=True), bare, max(4, rounds // 4))
    return Result(
        "sandboxed_sh",
        subject_median,
        baseline_median,
        "ratio",
        3.0,
        rounds,
        tuple(problems[:3]),
        (
            f"median of {rounds} batches of {batch} spawns; bubblewrap from {sandbox.bwrap}",
            f"with the private network of an unasked full-auto call: {cut_median * 1e3:.2f} ms "
            f"a call ({cut_median / baseline_median:.2f}x the bare spawn)",
        ),
    )


# -- running them all ------------------------------------------------------------


async def run_all(state_root: Path) -> list[Result]:
    """Every core benchmark at its full size, in one Trio run."""
    (state_root / "cancel").mkdir()
    (state_root / "resume").mkdir()
    (state_root / "pg-resume").mkdir()
    (state_root / "durable").mkdir()
    (state_root / "sandbox").mkdir()
    return [
        await bench_ask_answer(),
        await bench_cancel_final(state_root / "cancel"),
        await bench_pause_resume(state_root / "resume"),
        await bench_pg_pause_resume(state_root / "pg-resume"),
        await bench_claim_scaling(),
        await bench_durable_commit(state_root / "durable"),
        await bench_sandboxed_sh(state_root / "sandbox"),
    ]

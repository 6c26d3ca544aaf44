"""``python -m benchmarks.peers`` (``make bench-peers``): agentrt beside LangGraph and the
OpenAI Agents SDK, each system's interrupt/approval -> persisted -> resume cycle in one run.

Needs the peers' virtualenv (``make bench-peers`` makes it); with the project's
own it says so and exits 2.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from pathlib import Path

import attrs
import psycopg
import trio
from stress.fleet import postgres_base
from stress.fleet import postgres_schema

from .._harness import format_time
from ..bench_core import PauseResumeLoop
from ..bench_core import connect_like_store
from ..bench_core import open_bench_runtime
from ..bench_core import pg_round_trip
from ..bench_core import sqlite_round_trip
from ..bench_core import stored_record_size

#: A batch of cycles of one system; the seconds of each cycle.
Batch = Callable[[int], Awaitable[list[float]]]

#: agentrt's cycle must be at most this many times the bare SQLite upsert+select.
SQLITE_TARGET = 2.0
#: agentrt on PostgreSQL must be at least this many times faster than LangGraph's PostgresSaver.
POSTGRES_TARGET = 5.0


@attrs.frozen
class System:
    """One system's row: what its cycle is, and its median."""

    key: str
    label: str
    median: float
    cycles: int


async def rotate(batches: Mapping[str, Batch], rounds: int, size: int) -> dict[str, list[float]]:
    """Run `rounds` batches of `size` cycles of each system, rotating the order every round.

    Round n starts with the (n mod k)-th system and alternates direction, so
    no system always runs first or after the same one. A warm-up batch of each
    runs first and is not counted.
    """
    keys = list(batches)
    for key in keys:
        await batches[key](size)
    times: dict[str, list[float]] = {key: [] for key in keys}
    for n in range(rounds):
        order = keys[n % len(keys) :] + keys[: n % len(keys)]
        if n % 2:
            order.reverse()
        for key in order:
            times[key] += await batches[key](size)
    return times


def format_systems(
    systems: Sequence[System], reference: str, others: Mapping[str, str] | None = None
) -> str:
    """The systems as a table: each median, and how it compares with `reference`'s.

    A system named in `others` is compared with the system it maps to instead.
    """
    medians = {s.key: s.median for s in systems}
    header = ("system: one cycle", "median", "vs agentrt")
    rows = []
    for s in systems:
        ref = (others or {}).get(s.key, reference)
        base = medians[ref]
        if s.key == ref:
            versus = "1.00x"
        elif s.median >= base:
            versus = f"{s.median / base:.2f}x slower"
        else:
            versus = f"{base / s.median:.2f}x faster"
        rows.append((s.label, format_time(s.median), versus))
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(3)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    rule = "  ".join("-" * w for w in widths)
    head = "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()
    return "\n".join([head, rule, *lines, rule])


def _version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "?"


def _beside(loop: PauseResumeLoop, bare: list[float], round_trip: Callable[[], float]) -> Batch:
    """A batch of `loop`'s cycles, each beside one bare round trip (into `bare`), ABBA."""

    async def batch(count: int) -> list[float]:
        # Exactly as `make bench` measures its pause_resume and pg_pause_resume rows.
        cycles = []
        for n in range(count):
            if n % 2:
                bare.append(round_trip())
            cycles.append(await loop.cycle())
            if not n % 2:
                await trio.lowlevel.checkpoint()
                bare.append(round_trip())
        return cycles

    return batch


async def _run(root: Path, rounds: int, size: int) -> int:
    async with postgres_schema(postgres_base()) as url:
        return await _run_in(root, url, rounds, size)


async def _run_in(root: Path, url: str, rounds: int, size: int) -> int:
    from .agents_cycle import AgentsCycle
    from .langgraph_cycle import LangGraphCycle
    from .langgraph_cycle import LangGraphPostgresCycle

    runtime, close = await open_bench_runtime(root / "agentrt")
    (root / "agentrt-pg").mkdir()
    pg_runtime, pg_close = await open_bench_runtime(root / "agentrt-pg", store=url)
    base_db = connect_like_store(root / "baseline.db")
    pg_db = psycopg.connect(url, autocommit=True)
    pg_db.execute("CREATE TABLE baseline (session_id text PRIMARY KEY, record text)")
    graph = LangGraphCycle(root / "langgraph.db")
    graph_normal = LangGraphCycle(root / "langgraph-normal.db", synchronous="NORMAL")
    graph_pg = LangGraphPostgresCycle(url)
    agents = await trio.to_thread.run_sync(AgentsCycle, root / "agents.db")
    try:
        async with trio.open_nursery() as nursery:
            loop = await PauseResumeLoop.start(runtime, nursery)
            await loop.cycle()
            record = "x" * await stored_record_size(runtime.store, loop.session)
            pg_loop = await PauseResumeLoop.start(pg_runtime, nursery)
            await pg_loop.cycle()
            pg_record = "x" * await stored_record_size(pg_runtime.store, pg_loop.session)

            bare: list[float] = []
            bare_pg: list[float] = []
            batches: dict[str, Batch] = {
                "agentrt": _beside(
                    loop, bare, lambda: sqlite_round_trip(base_db, "paused", record)
                ),
                "agentrt_pg": _beside(
                    pg_loop, bare_pg, lambda: pg_round_trip(pg_db, "paused", pg_record)
                ),
                "langgraph": lambda n: trio.to_thread.run_sync(graph.batch, n),
                "langgraph_normal": lambda n: trio.to_thread.run_sync(graph_normal.batch, n),
                "langgraph_pg": lambda n: trio.to_thread.run_sync(graph_pg.batch, n),
                "agents": lambda n: trio.to_thread.run_sync(agents.batch, n),
            }
            started = time.perf_counter()
            times = await rotate(batches, rounds, size)
            times["sqlite"] = bare[size:]  # without the warm-up batch's, as rotate() does
            times["pg"] = bare_pg[size:]
            elapsed = time.perf_counter() - started
            nursery.cancel_scope.cancel()
        settings = f"{graph.settings()} ({graph.checkpoints()} checkpoints kept)"
        pg_settings = f"{graph_pg.settings()} ({graph_pg.checkpoints()} checkpoints kept)"
    finally:
        await close()
        await pg_close()
        base_db.close()
        pg_db.close()
        graph.close()
        graph_normal.close()
        graph_pg.close()
        agents.close()
    medians = {key: statistics.median(values) for key, values in times.items()}
    lg, oa = _version("langgraph"), _version("openai-agents")
    labels = {
        "agentrt": "agentrt: pause -> persisted -> resume, to the tool call again",
        "sqlite": f"bare SQLite upsert + select of agentrt's {len(record)}-byte record",
        "langgraph": f"LangGraph {lg} SqliteSaver: interrupt() -> Command(resume)",
        "langgraph_normal": f"LangGraph {lg} SqliteSaver, synchronous=NORMAL",
        "agents": f"OpenAI Agents SDK {oa}: approval -> RunState in SQLite -> resume",
        "agentrt_pg": "agentrt on PostgreSQL: the same cycle (the rows below compare with it)",
        "pg": f"bare PostgreSQL upsert + select of agentrt's {len(pg_record)}-byte record",
        "langgraph_pg": f"LangGraph {lg} PostgresSaver {_version('langgraph-checkpoint-postgres')}",
    }
    systems = [System(k, labels[k], medians[k], len(times[k])) for k in labels]
    print(format_systems(systems, "agentrt", {k: "agentrt_pg" for k in ("pg", "langgraph_pg")}))
    versus_graph = medians["langgraph"] / medians["agentrt"]
    versus_agents = medians["agents"] / medians["agentrt"]
    versus_sqlite = medians["agentrt"] / medians["sqlite"]
    versus_graph_pg = medians["langgraph_pg"] / medians["agentrt_pg"]
    versus_pg = medians["agentrt_pg"] / medians["pg"]
    # The SQLite peers are printed with no target of their own: agentrt's target there is
    # the floor, the bare upsert + select (make bench's pause_resume).
    checks: list[tuple[str, str, bool | None]] = [
        (
            "agentrt against LangGraph's SqliteSaver cycle (times faster; no target: the floor is)",
            f"{versus_graph:.2f}x",
            None,
        ),
        (
            "agentrt against the OpenAI Agents SDK's cycle (times faster; no target: the floor is)",
            f"{versus_agents:.2f}x",
            None,
        ),
        (
            f"agentrt's cycle <= {SQLITE_TARGET:g}x the bare SQLite upsert + select",
            f"{versus_sqlite:.2f}x",
            versus_sqlite <= SQLITE_TARGET,
        ),
        (
            f"agentrt on PostgreSQL >= {POSTGRES_TARGET:g}x faster than LangGraph's PostgresSaver",
            f"{versus_graph_pg:.2f}x",
            versus_graph_pg >= POSTGRES_TARGET,
        ),
        (
            "agentrt's PostgreSQL cycle against the bare upsert + select (its target is "
            "make bench's pg_pause_resume)",
            f"{versus_pg:.2f}x",
            None,
        ),
    ]
    width = max(len(c[0]) for c in checks)
    for text, measured, ok in checks:
        verdict = "-" if ok is None else "PASS" if ok else "MISS"
        print(f"{text.ljust(width)}  {measured:>8}  {verdict}")
    problems = loop.check() + pg_loop.check() + tuple(graph.problems[:3])
    problems += tuple(graph_normal.problems[:3]) + tuple(graph_pg.problems[:3])
    problems += tuple(agents.problems[:3])
    for problem in problems:
        print(f"PROBLEM: {problem}")
    print(
        f"notes: {rounds} batches of {size} cycles of each system in rotating order, one process, "
        f"{elapsed:.1f} s; medians over every cycle"
    )
    print(
        f"notes: agentrt's store: WAL, synchronous=FULL; LangGraph's SqliteSaver as set up by "
        f"itself: {settings}; the Agents SDK's "
        f"RunState ({agents.state_bytes} bytes) stored in SQLite set up like agentrt's store"
    )
    print(
        f"notes: PostgreSQL at {postgres_base()}, a fresh schema for agentrt, the bare "
        f"round trip and LangGraph's PostgresSaver ({pg_settings})"
    )
    print(
        "notes: re-executed committed tool calls in agentrt: "
        f"{loop.reexecuted} (SQLite), {pg_loop.reexecuted} (PostgreSQL)"
    )
    # The cycles counted: those after the first and the warm-up batch.
    print(f"notes: agentrt on SQLite, {loop.phases(1 + size)}")
    print(f"notes: agentrt on PostgreSQL, {pg_loop.phases(1 + size)}")
    return 1 if problems else 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the comparison and print it; 2 when the peers are not installed here."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.peers", description=__doc__)
    parser.add_argument("--rounds", type=int, default=30, help="batches of each system")
    parser.add_argument("--size", type=int, default=10, help="cycles per batch")
    args = parser.parse_args(argv)
    missing = [m for m in ("langgraph", "agents") if importlib.util.find_spec(m) is None]
    if missing:
        print(
            f"benchmarks.peers: {', '.join(missing)} not installed in {sys.prefix}; "
            "run `make bench-peers`, which makes .venv-peers",
            file=sys.stderr,
        )
        return 2
    print("== interrupt/approval -> persisted -> resume, every system in one run ==")
    with tempfile.TemporaryDirectory(prefix="agentrt-peers-") as tmp:
        return trio.run(_run, Path(tmp), args.rounds, args.size)


if __name__ == "__main__":
    sys.exit(main())

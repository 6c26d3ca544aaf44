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
import trio

from .._harness import format_time
from ..bench_core import PauseResumeLoop
from ..bench_core import connect_like_store
from ..bench_core import open_bench_runtime
from ..bench_core import sqlite_round_trip
from ..bench_core import stored_record_size

#: A batch of cycles of one system; the seconds of each cycle.
Batch = Callable[[int], Awaitable[list[float]]]

#: agentrt must be at least this many times faster than LangGraph's SqliteSaver cycle.
LANGGRAPH_TARGET = 15.0
#: agentrt's cycle must be at most this many times the bare SQLite upsert+select.
SQLITE_TARGET = 6.0


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


def format_systems(systems: Sequence[System], reference: str) -> str:
    """The systems as a table: each median, and how it compares with `reference`'s."""
    base = next(s for s in systems if s.key == reference).median
    header = ("system: one cycle", "median", "vs agentrt")
    rows = []
    for s in systems:
        if s.key == reference:
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


async def _run(root: Path, rounds: int, size: int) -> int:
    from .agents_cycle import AgentsCycle
    from .langgraph_cycle import LangGraphCycle

    runtime, close = await open_bench_runtime(root / "agentrt")
    base_db = connect_like_store(root / "baseline.db")
    graph = LangGraphCycle(root / "langgraph.db")
    graph_normal = LangGraphCycle(root / "langgraph-normal.db", synchronous="NORMAL")
    agents = await trio.to_thread.run_sync(AgentsCycle, root / "agents.db")
    try:
        async with trio.open_nursery() as nursery:
            loop = await PauseResumeLoop.start(runtime, nursery)
            await loop.cycle()
            record = "x" * await stored_record_size(runtime.store, loop.session)

            bare: list[float] = []

            async def agentrt(count: int) -> list[float]:
                # Each cycle beside one bare SQLite round trip, in ABBA order, exactly as
                # `make bench` measures its pause_resume row.
                cycles = []
                for n in range(count):
                    if n % 2:
                        bare.append(sqlite_round_trip(base_db, "paused", record))
                    cycles.append(await loop.cycle())
                    if not n % 2:
                        await trio.lowlevel.checkpoint()
                        bare.append(sqlite_round_trip(base_db, "paused", record))
                return cycles

            batches: dict[str, Batch] = {
                "agentrt": agentrt,
                "langgraph": lambda n: trio.to_thread.run_sync(graph.batch, n),
                "langgraph_normal": lambda n: trio.to_thread.run_sync(graph_normal.batch, n),
                "agents": lambda n: trio.to_thread.run_sync(agents.batch, n),
            }
            started = time.perf_counter()
            times = await rotate(batches, rounds, size)
            times["sqlite"] = bare[size:]  # without the warm-up batch's, as rotate() does
            elapsed = time.perf_counter() - started
            nursery.cancel_scope.cancel()
        settings = f"{graph.settings()} ({graph.checkpoints()} checkpoints kept)"
    finally:
        await close()
        base_db.close()
        graph.close()
        graph_normal.close()
        agents.close()
    medians = {key: statistics.median(values) for key, values in times.items()}
    lg, oa = _version("langgraph"), _version("openai-agents")
    labels = {
        "agentrt": "agentrt: pause -> persisted -> resume, to the tool call again",
        "sqlite": f"bare SQLite upsert + select of agentrt's {len(record)}-byte record",
        "langgraph": f"LangGraph {lg} SqliteSaver: interrupt() -> Command(resume)",
        "langgraph_normal": f"LangGraph {lg} SqliteSaver, synchronous=NORMAL",
        "agents": f"OpenAI Agents SDK {oa}: approval -> RunState in SQLite -> resume",
    }
    systems = [System(k, labels[k], medians[k], len(times[k])) for k in labels]
    print(format_systems(systems, "agentrt"))
    versus_graph = medians["langgraph"] / medians["agentrt"]
    versus_sqlite = medians["agentrt"] / medians["sqlite"]
    checks = [
        (
            f"agentrt >= {LANGGRAPH_TARGET:g}x faster than LangGraph's SqliteSaver cycle",
            f"{versus_graph:.2f}x",
            versus_graph >= LANGGRAPH_TARGET,
        ),
        (
            f"agentrt's cycle <= {SQLITE_TARGET:g}x the bare SQLite upsert + select",
            f"{versus_sqlite:.2f}x",
            versus_sqlite <= SQLITE_TARGET,
        ),
    ]
    width = max(len(c[0]) for c in checks)
    for text, measured, ok in checks:
        print(f"{text.ljust(width)}  {measured:>8}  {'PASS' if ok else 'MISS'}")
    problems = loop.check() + tuple(graph.problems[:3]) + tuple(graph_normal.problems[:3])
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
    print(f"notes: re-executed committed tool calls in agentrt: {loop.reexecuted}")
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

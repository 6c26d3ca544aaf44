"""The fleet: how soon a task of a member killed with SIGKILL can be resumed on another.

Two daemon processes share one PostgreSQL schema (``AGENTRT_TEST_POSTGRES``,
default ``postgresql://postgres@127.0.0.1:5432/test``) with the stress suite's
lease (2 s). Each sample starts a run on one daemon, waits for its ``sleep``
call, kills the daemon's process group with SIGKILL and reads the task through
the other daemon's HTTP API until it is interrupted (cause ``disconnect``),
that is resumable there. The figure is the median of those times over the
lease; the 99th percentile is printed beside it and must meet the same target.
``fleet_takeover_zombie`` does the same with the killed daemon left unreaped (a
zombie, whose pid stays taken) until the takeover is seen, at most half the lease:
a member that took the zombie for alive would wait the whole lease (1x).
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import psycopg
import trio
from stress.fleet import LEASE
from stress.fleet import postgres_base
from stress.fleet import postgres_schema
from stress.fleet import start_fleet

from ._harness import Result

#: Kills measured.
KILLS = 20
#: Seconds between two reads of the task through the other daemon.
POLL = 0.01


async def _takeover(root: Path, url: str, kills: int, *, zombie: bool) -> list[float]:
    work = root / "work"
    work.mkdir()
    times: list[float] = []
    async with trio.open_nursery() as nursery:
        async with start_fleet(root, url, nursery, ("a", "b"), work) as nodes:
            victim, rescuer = nodes["a"], nodes["b"]
            for n in range(kills):
                session = f"take{n}"
                async with victim.events() as feed:
                    started = await victim.client.post(
                        f"/v1/session/{session}/run", json={"text": "sleep 60"}
                    )
                    if started.status_code != 202:
                        raise RuntimeError(f"the run was refused: {started.text}")
                    await feed.wait_for(lambda e: e["type"] == "tool_call" and e["name"] == "sleep")
                killed = time.monotonic()
                if zombie:
                    await victim.process.kill_unreaped()
                else:
                    await victim.process.kill()
                with trio.fail_after(LEASE * 10):
                    while True:
                        task = await rescuer.task(f"chat-{session}")
                        if task is not None and task["status"] == "interrupted":
                            break
                        await trio.sleep(POLL)
                times.append(time.monotonic() - killed)
                if zombie:
                    await victim.process.reap()
                await victim.restart(nursery)
        nursery.cancel_scope.cancel()
    return times


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


async def bench_fleet_takeover(root: Path, kills: int = KILLS, *, zombie: bool = False) -> Result:
    """SIGKILL of a member -> its task resumable on another, over the lease (p50; p99 noted).

    With `zombie`, the dead member is not reaped until the takeover is seen: its pid
    stays taken, as under a parent that does not wait for it.
    """
    # A zombie is seen at the next heartbeat, as a reaped member is (lease / 5), never by
    # waiting out the lease (1x): its bound says so, where the reaped row's leaves room.
    name, target = ("fleet_takeover_zombie", 0.5) if zombie else ("fleet_takeover", 1.5)
    base = postgres_base()
    try:
        with psycopg.connect(base, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return Result.failed(name, f"no PostgreSQL at {base} ({exc})".strip(), LEASE, target, 0)
    async with postgres_schema(base) as url:
        times = await _takeover(root, url, kills, zombie=zombie)
    p50, p99 = statistics.median(times), _percentile(times, 0.99)
    problems = () if p99 / LEASE <= target else (f"p99 {p99 / LEASE:.2f}x the lease",)
    return Result(
        name,
        p50,
        LEASE,
        "ratio",
        target,
        len(times),
        problems=problems,
        notes=(
            f"{len(times)} kills, lease {LEASE:g} s: p50 {p50:.3f} s ({p50 / LEASE:.2f}x), "
            f"p99 {p99:.3f} s ({p99 / LEASE:.2f}x), max {max(times):.3f} s; on one machine "
            "another member sees the dead process at its next heartbeat (lease / 5), before "
            "the lease runs out",
        ),
    )


async def run_all(root: Path) -> list[Result]:
    """Every fleet benchmark."""
    results = []
    for zombie in (False, True):
        folder = root / ("zombie" if zombie else "reaped")
        folder.mkdir(parents=True)
        results.append(await bench_fleet_takeover(folder, zombie=zombie))
    return results

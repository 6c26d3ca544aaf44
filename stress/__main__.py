"""``python -m stress``: run every suite, print the table, exit non-zero on any failure.

Each suite draws its schedule from the seed (printed first); pass ``--seed``
to replay one, and ``--only`` to run a single suite.
"""

from __future__ import annotations

import argparse
import logging
import secrets
import sys
import time
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Sequence

import trio

from ._common import SuiteResult
from ._common import format_table
from .canary import run_canary
from .concurrency import run_concurrency
from .crash import run_crash
from .disconnect import run_disconnect
from .fleet import run_fleet
from .fuzz import run_fuzz
from .isolation import run_isolation
from .load import run_load
from .sandbox import run_sandbox

SUITES = (
    "crash",
    "concurrency",
    "disconnect",
    "fuzz",
    "isolation",
    "secrets",
    "sandbox",
    "load",
    "fleet",
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m stress",
        description="Prove the runtime under faults, load and bad input; print a table.",
    )
    parser.add_argument("--seed", type=int, default=None, help="replay this seed")
    parser.add_argument("--only", choices=SUITES, action="append", help="run only these suites")
    parser.add_argument("--kills", type=int, default=110, help="daemon SIGKILLs (crash)")
    parser.add_argument(
        "--races",
        type=int,
        default=100,
        help="two resumes, two daemons on one state dir, and two daemons of a fleet, of one task",
    )
    parser.add_argument(
        "--answers", type=int, default=30, help="answers sent to another daemon of a fleet"
    )
    parser.add_argument(
        "--fleet-kills", type=int, default=10, help="fleet daemons SIGKILLed mid-run (fleet)"
    )
    parser.add_argument(
        "--fleet-stalls",
        type=int,
        default=5,
        help="fleet daemons SIGSTOPped past their lease in a tool call (fleet)",
    )
    parser.add_argument("--connections", type=int, default=1000, help="vanishing connections")
    parser.add_argument(
        "--fuzz", type=int, default=30_000, help="hypothesis examples (each holds 1 to 8 inputs)"
    )
    parser.add_argument("--min-inputs", type=int, default=100_000, help="fewer fuzzed is a failure")
    parser.add_argument("--sessions", type=int, default=1000, help="concurrent sessions (load)")
    parser.add_argument("--seconds", type=float, default=20.0, help="how long the load storms")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the suites; return 0 when nothing was lost, leaked, crashed or found."""
    args = _parser().parse_args(argv)
    seed = args.seed if args.seed is not None else secrets.randbelow(2**31)
    chosen = args.only or list(SUITES)
    # The daemon's own warnings (refused peers, dropped connections) are expected here.
    logging.basicConfig(level=logging.CRITICAL)
    print(f"stress: seed {seed} (replay with: python -m stress --seed {seed})", flush=True)
    runs: dict[str, Callable[[], Awaitable[SuiteResult]]] = {
        "crash": lambda: run_crash(args.kills, seed),
        "concurrency": lambda: run_concurrency(args.races, seed),
        "disconnect": lambda: run_disconnect(args.connections, seed),
        "fuzz": lambda: run_fuzz(args.fuzz, seed),
        "isolation": lambda: run_isolation(seed),
        "secrets": lambda: run_canary(seed),
        "sandbox": lambda: run_sandbox(),
        "load": lambda: run_load(args.sessions, args.seconds, seed),
        "fleet": lambda: run_fleet(
            args.races, args.answers, args.fleet_kills, seed, args.fleet_stalls
        ),
    }
    results: list[SuiteResult] = []
    started = time.monotonic()
    for name in chosen:
        print(f"stress: {name} ...", flush=True)
        try:
            result = trio.run(runs[name])
        except Exception as exc:  # a suite that could not finish is a failure, not a crash
            result = SuiteResult(name, "done", "failures")
            result.crashed(exc, f"replay: python -m stress --only {name} --seed {seed}")
        if name == "fuzz" and result.done < args.min_inputs:
            result.fail(f"only {result.done} inputs fuzzed, fewer than {args.min_inputs}")
        results.append(result)
        print(
            f"stress: {name}: {result.done} {result.done_label}, {result.bad} "
            f"{result.bad_label} ({result.seconds:.0f}s)",
            flush=True,
        )
    print()
    print(format_table(results))
    print(f"\nseed {seed}; {time.monotonic() - started:.0f}s in all")
    for result in results:
        for note in result.notes:
            print(f"{result.suite}: {note}")
        for failure in result.failures:
            print(f"FAIL {result.suite}: {failure}")
        for text in result.tracebacks:
            print(f"{result.suite}: what broke the suite:\n{text}")
    failed = [r.suite for r in results if not r.ok]
    if failed:
        print(f"stress: FAILED: {', '.join(failed)} (seed {seed})")
        return 1
    print("stress: every suite passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``python -m benchmarks`` (``make bench``): every benchmark, printed as one table.

The rows come in the order of the figures they answer (see docs/benchmarks.md).
The exit status is 0 even when a target is missed: the table is a report, and
each MISS is printed plainly. It is 1 only when a benchmark could not run.
``--only GROUP`` runs one group (core, scale, processes, load, commands, fleet, tui, mcp, undo,
conversations, stream).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import resource
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from collections.abc import Sequence
from functools import partial
from pathlib import Path

import trio

from . import bench_commands
from . import bench_conversations
from . import bench_core
from . import bench_fleet
from . import bench_load
from . import bench_mcp
from . import bench_processes
from . import bench_scale
from . import bench_stream
from . import bench_tui
from . import bench_undo
from ._harness import Result
from ._harness import format_table
from ._processes import ensure_store

#: Pending tasks in the large stores (the daemon's and the command's listing).
LARGE_STORE = 10_000
#: Pending tasks in the largest store (`agentrt pending list` through a daemon and without).
LARGEST_STORE = 100_000

#: The groups, each run in its own temporary folder under one root.
GROUPS: dict[str, Callable[[Path], list[Result]]] = {
    "core": lambda root: trio.run(bench_core.run_all, root),
    "scale": lambda root: trio.run(bench_scale.run_all, root),
    "processes": lambda root: trio.run(
        partial(bench_processes.run_all, root, stores=root.parent / "stores")
    ),
    "commands": lambda root: bench_commands.run_all(
        root,
        trio.run(ensure_store, root.parent / "stores" / str(LARGE_STORE), LARGE_STORE),
        stores=root.parent / "stores",
        largest=LARGEST_STORE,
    ),
    "fleet": lambda root: trio.run(bench_fleet.run_all, root),
    "load": lambda root: trio.run(bench_load.run_all, root),
    "tui": bench_tui.run_all,
    "mcp": lambda root: trio.run(bench_mcp.run_all, root),
    "undo": lambda root: trio.run(bench_undo.run_all, root),
    "conversations": lambda root: trio.run(bench_conversations.run_all, root),
    "stream": lambda root: trio.run(bench_stream.run_all, root),
}

#: The rows in the order of the figures they answer; any other row follows.
ORDER = (
    "cancel_final",
    "pause_resume",
    "pg_pause_resume",
    "cancel_2p",
    "cancel_under_load",
    "ask_2p",
    "commit_1000",
    "history_3000",
    "history_10000",
    "post_1000",
    "listen_10k",
    "has_listener_1000",
    "pending_list_10k",
    "cli_pending_10k",
    "pending_list_100k",
    "pending_list_100k_10k",
    "continue_10000",
    "continue_10000_daemon",
    "run_hello",
    "client_import",
    "tui_first_screen",
    "tui_stream_20k",
    "tui_idle_after_20k",
    "tui_reply_5000",
    "tui_piece_5000",
    "tui_echo_5000",
    "answer_idle_1000",
    "sandboxed_sh",
    "checkpoint_sh",
    "undo_100_files",
    "fleet_takeover",
    "fleet_takeover_zombie",
    "mcp_call",
    "otel_overhead",
    "stream_cpu",
    "stream_cpu_anthropic",
)

#: Optional benchmark modules run after the table when they exist, each through its `main()`.
OPTIONAL = ("benchmarks.bench_providers",)


def ordered(results: Sequence[Result]) -> list[Result]:
    """`results` in the order of `ORDER`, the others after them in their own order."""
    rank = {name: n for n, name in enumerate(ORDER)}
    return sorted(results, key=lambda r: rank.get(r.name, len(ORDER)))


def _run_optional(module_name: str) -> bool:
    """Import and run one optional benchmark module; False if it crashed."""
    if importlib.util.find_spec(module_name) is None:
        print(f"\n({module_name} is not present; skipped)")
        return True
    print(f"\n== {module_name} ==")
    try:
        module = importlib.import_module(module_name)
        entry = getattr(module, "main", None)
        if callable(entry):
            entry()
    except Exception:
        traceback.print_exc()
        print(f"{module_name} failed to run")
        return False
    return True


def _raise_file_limit(wanted: int = 4096) -> None:
    """Let this process and the daemons it starts hold a thousand connections and more."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the groups, print the table, then the optional modules; return the exit status."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--only", choices=list(GROUPS), action="append", help="run this group")
    args = parser.parse_args(argv)
    chosen = args.only or list(GROUPS)
    _raise_file_limit()
    print("== agentrt: each figure a ratio against a baseline measured in the same run ==")
    results: list[Result] = []
    ok = True
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="agentrt-bench-") as tmp:
        for name in chosen:
            folder = Path(tmp) / name
            folder.mkdir()
            begun = time.perf_counter()
            try:
                got = GROUPS[name](folder)
            except Exception:
                traceback.print_exc()
                print(f"{name}: failed to run", flush=True)
                ok = False
                continue
            results += got
            rows = ", ".join(r.name for r in got)
            print(f"{name}: {time.perf_counter() - begun:.1f} s ({rows})", flush=True)
    print(f"all groups: {time.perf_counter() - started:.1f} s\n")
    table = ordered(results)
    print(format_table(table))
    missed = [r.name for r in table if not r.passed]
    if missed:
        print(f"MISSED: {', '.join(missed)} (see the notes above; this is a report, not a failure)")
    else:
        print("all targets met")
    if args.only is None:
        ok = all([_run_optional(name) for name in OPTIONAL]) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""The fence watchdog: kills a fleet member's tool process groups once its lease may be lost.

A member that cannot renew its lease in the fleet must stop its tools before
another member may take its tasks over (`agentrt.fleet.member`). When the member is
alive it does so itself; but a member that is stopped (SIGSTOP, a debugger,
a swap storm) can do nothing. This small process, started by the member and
outside its process group, does it then: the member writes its *kill
deadline* (a ``time.monotonic()`` value, the same clock in every process of
the machine) to a file at every renewal, and once the deadline passes with
no renewal the watchdog SIGKILLs every tool group the member's ledger records
(`agentrt.agent.toolproc.ToolLedger`) that started before the deadline.

It reads standard input, whose only writer is the member: end of input means
the member is gone, and the watchdog ends too (the tool groups' own watchers
kill them then). Run as a plain script (``python -I _fencewatch.py FOLDER
DEADLINE_FILE RUNNER``), with the standard library only, so that it starts at
once.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import select
import signal
import sys
import time
from pathlib import Path

#: Seconds between looks once the deadline has passed (a renewal moves it again).
LAPSED_POLL = 0.1
#: The longest sleep before the deadline is read again (the member only moves it later,
#: but a file that could not be written or read must not leave the watchdog asleep).
LONGEST_SLEEP = 1.0


def read_deadline(path: Path) -> float:
    """The kill deadline the member wrote last (infinity while there is none)."""
    try:
        return float(path.read_text(encoding="ascii").strip() or "inf")
    except (OSError, ValueError):
        return math.inf


def _start_time(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().decode("ascii", "replace").rsplit(")", 1)[-1].split()
    except OSError:
        return None
    if len(fields) < 20 or fields[0] in ("Z", "X"):
        return None
    return fields[19]


def kill_groups(folder: Path, runner: str, started_before: float) -> list[int]:
    """SIGKILL the recorded tool groups of `runner` recorded before `started_before` (wall clock)."""
    killed: list[int] = []
    try:
        paths = sorted(folder.glob("*.json"))
    except OSError:
        return killed
    for path in paths:
        try:
            if path.stat().st_mtime >= started_before:
                continue  # started after the deadline: under a lease renewed since
            entry = json.loads(path.read_text(encoding="utf-8"))
            pgid, started = int(entry["pgid"]), str(entry["started"])
            if entry["runner"] != runner:
                continue
        except (OSError, ValueError, KeyError, TypeError):
            continue
        leader = _start_time(pgid)
        if leader is not None and leader != started:
            continue  # the pid names another process now: the recorded group is gone
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
            killed.append(pgid)
    return killed


def watch(folder: Path, deadline_file: Path, runner: str) -> None:
    """Kill `runner`'s groups whenever its deadline passes unrenewed; return when stdin ends."""
    reported: set[int] = set()
    while True:
        deadline = read_deadline(deadline_file)
        now = time.monotonic()
        wait = deadline - now
        if wait <= 0:
            wall = time.time() - (now - deadline)
            killed = kill_groups(folder, runner, wall)
            if set(killed) - reported:
                reported.update(killed)
                print(
                    f"agentrt fence: the lease of fleet member {runner} was not renewed "
                    f"{-wait:.2f}s past its kill deadline; killed its tool process groups: "
                    f"{' '.join(map(str, killed))}",
                    file=sys.stderr,
                    flush=True,
                )
            wait = LAPSED_POLL
        readable, _, _ = select.select([sys.stdin], [], [], min(wait, LONGEST_SLEEP))
        if readable and not os.read(sys.stdin.fileno(), 512):
            return  # the member is gone


def main(argv: list[str]) -> int:
    folder, deadline_file, runner = argv
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's ^C is the member's to handle
    watch(Path(folder), Path(deadline_file), runner)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

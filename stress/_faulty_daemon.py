"""``python -m stress._faulty_daemon``: the real daemon, which SIGKILLs itself inside a store write.

The crash suite uses it to place kills inside a save, where a kill from
outside almost never lands. ``STRESS_KILL_AT_WRITE=N:WHEN`` arms it: the Nth
SQL statement that writes (INSERT, UPDATE, DELETE) since start kills the
process, either right after the statement ran, inside its open transaction
(``WHEN`` = ``in_transaction``), or from a timer a random 0 to 3 ms after the
statement began, so that the kill lands in the statement, in the commit, or
just after it (``WHEN`` = ``timer``). Everything else is ``python -m
agentrt.daemon`` with the same arguments.
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import sys
import threading
from typing import Any

_WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE")


def _arm(spec: str) -> None:
    at_text, _, when = spec.partition(":")
    at = int(at_text)
    if when not in ("in_transaction", "timer"):
        raise SystemExit(f"STRESS_KILL_AT_WRITE: unknown moment {when!r}")
    seen = 0
    lock = threading.Lock()

    def die() -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    class FaultyConnection(sqlite3.Connection):
        def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
            nonlocal seen
            hit = False
            if sql.lstrip().upper().startswith(_WRITES):
                with lock:
                    seen += 1
                    hit = seen == at
            if hit and when == "timer":
                threading.Timer(random.uniform(0, 0.003), die).start()
            cursor = super().execute(sql, parameters)
            if hit and when == "in_transaction":
                die()
            return cursor

    connect = sqlite3.connect

    def faulty_connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        kwargs.setdefault("factory", FaultyConnection)
        db: sqlite3.Connection = connect(*args, **kwargs)
        return db

    sqlite3.connect = faulty_connect  # type: ignore[assignment]


def main() -> int:
    """Arm the fault named by the environment, then run the daemon."""
    spec = os.environ.get("STRESS_KILL_AT_WRITE")
    if spec:
        _arm(spec)
    from agentrt.daemon import main as daemon_main

    return daemon_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())

"""Which process runs a task: a token that survives pid reuse.

The executor's own bookkeeping knows the runs of its process only. A second
agentrt process on the same state directory (the `agentrt` command next to a
daemon) must not resume or discard a task the first one is running, yet must
be able to resume one whose process died. The token is the pid plus the
process's start time, so a crashed runner whose pid was reused by another
program is not taken for alive.
"""

from __future__ import annotations

import os


def _stat_fields(pid: int) -> list[str]:
    """The fields of ``/proc/PID/stat`` after the command name (from the state on); [] where
    unknown (no such process, or no /proc)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode("ascii", "replace")
    except OSError:
        return []
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    return stat.rsplit(")", 1)[-1].split()


def _start_time(pid: int) -> str:
    """The process's start time in clock ticks since boot (Linux), or "" where unknown."""
    fields = _stat_fields(pid)
    return fields[19] if len(fields) > 19 else ""


def process_token(pid: int | None = None) -> str:
    """The token of process `pid` (default: this one): ``"PID:START"``."""
    pid = os.getpid() if pid is None else pid
    return f"{pid}:{_start_time(pid)}"


#: How the token of a member of a PostgreSQL fleet starts (see `agentrt.store.postgres`).
FLEET_PREFIX = "fleet:"


def token_alive(token: str) -> bool:
    """Whether the process a token names is still running (and is the same process).

    A fleet member's token (``fleet:...``) may name a process on another
    machine: whether it lives is its lease's to say, in the database. The
    fleet turns the running tasks of a member whose lease expired into
    interrupted ones (`agentrt.fleet.member`), so a member still named as a running
    task's runner is taken as alive.
    """
    if token.startswith(FLEET_PREFIX):
        return True
    pid_text, _, start = token.partition(":")
    try:
        pid = int(pid_text)
    except ValueError:
        return False
    if pid <= 0 or not pid_alive(pid):
        return False
    return not start or _start_time(pid) == start


def pid_alive(pid: int) -> bool:
    """Whether a process has the id `pid` and still runs (one of another user's counts).

    A process that exited but is not reaped yet by its parent (a zombie) has
    the id still, and ``kill(pid, 0)`` succeeds on it: it counts as dead, as
    it is (a fleet member that died under a parent that never waits for it).
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # alive, but another user's
    fields = _stat_fields(pid)
    return not fields or fields[0] not in _DEAD_STATES


#: The states ``/proc/PID/stat`` gives a process that has exited: zombie, dead.
_DEAD_STATES = frozenset({"Z", "X", "x"})


def token_pid(token: str) -> str:
    """The pid part of a token, for messages (a fleet member's: ``PID on HOST``)."""
    if token.startswith(FLEET_PREFIX):
        host, _, rest = token.removeprefix(FLEET_PREFIX).partition(":")
        return f"{rest.partition(':')[0]} on {host}"
    return token.partition(":")[0]

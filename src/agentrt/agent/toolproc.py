"""Tool processes: each call's processes live in their own group, which never outlives it.

A shell command a tool starts may start more processes (``sleep 100 &``). All
of them run in a new session and process group (led by the command's shell),
and the group is killed on every way out of the call: a normal end (what the
command left behind in the background), a cancel, a timeout, an error.

The group must also die when the process running the call (the *runner*: the
daemon, or an ``agentrt`` command) dies without a chance to clean up, e.g. by
SIGKILL; otherwise the orphaned command would finish after a restart, and the
resume would run it again. Two guards do that:

* A **watcher** in the group: a small ``sh`` that blocks reading a pipe whose
  only writer is the runner. When the runner dies, the kernel closes its end,
  the read returns, and the watcher kills its own group with SIGKILL at once
  (nobody is left to hear how the command ended, and a sandboxed command's
  first process ignores SIGTERM until its handler is in place: a grace period
  would let a command that was just starting run on). ``PR_SET_PDEATHSIG`` would not do: it fires when the
  *thread* that forked the child exits (Trio forks from worker threads that
  retire after idling), and it reaches only the direct child, not the
  command's own children.
* A **ledger** of running groups under the state directory (``tools/``): one
  small file per group, naming its pgid, its leader's start time and the
  runner's token. `ToolLedger.reap`, called whenever a runtime opens the state
  directory, kills any group whose runner is dead (in case its watcher was
  killed too) and forgets groups from an earlier boot.

A command can still leave deliberately (``setsid``, or a daemon that forks
away into its own session); the group is what can be held to account.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
from collections.abc import Iterator
from collections.abc import Mapping
from collections.abc import Sequence
from pathlib import Path

import attrs
import trio

from ..core.process import process_token
from ..core.process import token_alive
from ..vocab.reprs import record
from .seccomp import OPEN_PROGRAM

log = logging.getLogger("agentrt.tools")

#: How long a stopped tool's group has between SIGTERM and SIGKILL.
TERM_GRACE = 1.0
#: How often SIGTERM is sent again within `TERM_GRACE`: a sandboxed command's first process
#: (the first of its PID namespace) ignores SIGTERM until its handler is set, so one sent
#: while it starts is lost; the next one reaches it.
TERM_AGAIN = 0.05

# Runs as ``sh -c WATCH agentrt-tool ARGV...`` with the watch pipe's read end as its standard
# error (dash can only name descriptors 0 to 9, and the pipe's number in the runner is larger).
# The watcher takes that end as fd 9; the command gets the output pipe as its standard error,
# so it never holds the watch pipe. The watcher ignores SIGTERM so that it outlives a
# cancel's SIGTERM and keeps the group id in use until the final SIGKILL.
_WATCH = (
    '{ trap "" TERM HUP; read -r _ <&9; kill -KILL 0; }'
    ' 9<&2 </dev/null >/dev/null 2>&1 & exec 2>&1; exec "$@"'
)
#: `_WATCH` for ``sh -c OPEN_PROGRAM PROGRAM ARGV...`` (a sandboxed call's seccomp program,
#: `agentrt.agent.seccomp`): run as ``sh -c WATCH_OPEN PROGRAM ARGV...``, the same shell
#: opens the program for the command, one program start fewer.
_WATCH_OPEN = _WATCH + OPEN_PROGRAM.removeprefix('exec "$@"')


@record
class ToolOutput:
    """What a tool process returned: its exit status and its output (stderr merged in)."""

    returncode: int
    output: bytes


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return ""


def _stat(pid: int) -> tuple[int, int, str] | None:
    """(process group, session, start time) of `pid`, or None when it is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read().decode("ascii", "replace")
    except OSError:
        return None
    fields = text.rsplit(")", 1)[-1].split()
    # fields[0] is the state (field 3 of stat(5)); pgrp, session, starttime are 5, 6 and 22.
    if len(fields) < 20 or fields[0] in ("Z", "X"):
        return None
    return int(fields[2]), int(fields[3]), fields[19]


def group_members(pgid: int) -> list[int]:
    """The live (not zombie) processes of process group `pgid`."""
    members = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            info = _stat(int(name))
            if info is not None and info[0] == pgid:
                members.append(int(name))
    return members


def _kill_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


@record
class GroupEntry:
    """One running tool group as the ledger records it."""

    pgid: int
    #: The start time of the group's leader (``/proc/PID/stat`` field 22), against pid reuse.
    started: str
    #: The token of the process running the call (see `agentrt.core.process`).
    runner: str
    boot: str


@record
class ToolLedger:
    """The running tool groups of every runner on one state directory, one file each."""

    folder: Path

    def add(self, pgid: int) -> GroupEntry:
        """Record that this process started the tool group `pgid` (whose leader is alive)."""
        info = _stat(pgid)
        entry = GroupEntry(pgid, info[2] if info else "", process_token(), _boot_id())
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = self.folder / f"{pgid}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(attrs.asdict(entry)), encoding="utf-8")
        os.replace(tmp, path)
        return entry

    def remove(self, entry: GroupEntry) -> None:
        """Forget `entry` (its group was killed)."""
        path = self.folder / f"{entry.pgid}.json"
        with contextlib.suppress(FileNotFoundError):
            if self._read(path) == entry:
                path.unlink()

    def entries(self) -> Iterator[tuple[Path, GroupEntry | None]]:
        """Every recorded group (None for a file that cannot be read)."""
        try:
            paths = sorted(self.folder.glob("*.json"))
        except OSError:
            return
        for path in paths:
            yield path, self._read(path)

    def reap(self) -> list[int]:
        """Kill the groups whose runner is dead; return their pgids.

        A group is killed only if it is provably the one recorded: same boot,
        and its leader is either gone or still the process that was recorded
        (a pid cannot be reused while a group or session still bears it, so
        live members of a group whose leader is gone are the recorded ones).
        """
        killed = []
        boot = _boot_id()
        for path, entry in self.entries():
            if entry is not None and token_alive(entry.runner):
                continue
            if entry is not None and entry.boot == boot and self._ours(entry):
                _kill_group(entry.pgid, signal.SIGKILL)
                killed.append(entry.pgid)
                log.warning(
                    "killed tool process group %d left by a runner that died (%s)",
                    entry.pgid,
                    entry.runner,
                )
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        return killed

    def kill_runner(self, runner: str | None = None) -> list[int]:
        """SIGKILL every live group `runner` (this process by default) started; return their pgids.

        For a fleet member that may have lost its lease: no tool of its runs may
        go on while another member takes their tasks over (`agentrt.fleet.member`).
        The entries stay; each call's own cleanup removes them.
        """
        token = process_token() if runner is None else runner
        boot = _boot_id()
        killed = []
        for _path, entry in self.entries():
            mine = entry is not None and entry.runner == token and entry.boot == boot
            if mine and entry is not None and self._ours(entry):
                _kill_group(entry.pgid, signal.SIGKILL)
                killed.append(entry.pgid)
        return killed

    @staticmethod
    def _ours(entry: GroupEntry) -> bool:
        leader = _stat(entry.pgid)
        if leader is not None and leader[2] != entry.started:
            return False  # the pid now names another process: the recorded group is gone
        return bool(group_members(entry.pgid))

    @staticmethod
    def _read(path: Path) -> GroupEntry | None:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            return GroupEntry(
                int(data["pgid"]), str(data["started"]), str(data["runner"]), str(data["boot"])
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None


async def run_tool(
    argv: Sequence[str],
    *,
    cwd: Path | None = None,
    stdin: bytes = b"",
    ledger: ToolLedger | None = None,
    env: Mapping[str, str] | None = None,
) -> ToolOutput:
    """Run `argv` in a new process group; return its exit status and output.

    Standard error is merged into the output. Returns once the command exited
    and its output closed; then, and on every other way out (cancelled, timed
    out, failed), the whole group is killed. A cancel sends SIGTERM to the
    group (again every `TERM_AGAIN`), waits up to `TERM_GRACE` for the
    command to exit, then SIGKILLs the group. With `ledger`, the group is
    recorded while it runs. `env` is
    the environment the command gets (default: this process's).
    """
    if list(argv[:3]) == ["sh", "-c", OPEN_PROGRAM] and len(argv) > 4:
        command = ["sh", "-c", _WATCH_OPEN, *argv[3:]]
    else:
        command = ["sh", "-c", _WATCH, "agentrt-tool", *argv]
    read_end, write_end = os.pipe()
    try:
        process = await trio.lowlevel.open_process(
            command,
            cwd=cwd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=read_end,
            start_new_session=True,
            env=dict(env) if env is not None else None,
        )
    except BaseException:
        os.close(write_end)
        raise
    finally:
        os.close(read_end)
    pgid = process.pid
    entry: GroupEntry | None = None
    done = False
    try:
        if ledger is not None:
            entry = ledger.add(pgid)
        output = bytearray()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_feed, process, stdin)
            assert process.stdout is not None
            async for chunk in process.stdout:
                output += chunk
            returncode = await process.wait()
        done = True
        return ToolOutput(returncode, bytes(output))
    finally:
        with trio.CancelScope(shield=True):
            if not done:
                with trio.move_on_after(TERM_GRACE):
                    while process.returncode is None:
                        _kill_group(pgid, signal.SIGTERM)
                        with trio.move_on_after(TERM_AGAIN):
                            await process.wait()
            # What is left (background children, the watcher) goes now.
            _kill_group(pgid, signal.SIGKILL)
            os.close(write_end)
            with trio.move_on_after(TERM_GRACE):
                await process.wait()
            for stream in (process.stdin, process.stdout):
                if stream is not None:
                    await stream.aclose()
            if ledger is not None and entry is not None:
                with contextlib.suppress(OSError):
                    ledger.remove(entry)


async def _feed(process: trio.Process, data: bytes) -> None:
    assert process.stdin is not None
    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
        if data:
            await process.stdin.send_all(data)
        await process.stdin.aclose()

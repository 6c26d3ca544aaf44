"""Tool processes never outlive their call or their runner: real processes, real signals.

Each shell command here starts background children and says when they run;
the tests find every process of the call by a tag in its command line (the
command runs in the sandbox's own PID namespace, so the pids it could write
down are not the ones seen from outside), then stop the call (cancel,
timeout, a normal end, a SIGKILL of the daemon alone, a runner that died
long ago) and poll, with a deadline, until every one of those processes is
gone: the command's shell, its children, and the sandbox around them.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Callable
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest
import trio

from agentrt import ALLOW_ONCE
from agentrt import Answer
from agentrt import Cause
from agentrt import Outcome
from agentrt import RunEnded
from agentrt import Runtime
from agentrt import ScriptedModel
from agentrt import open_runtime
from agentrt.agent.sudo import SudoVerifier
from agentrt.agent.toolproc import ToolLedger
from agentrt.agent.toolproc import group_members
from agentrt.core.process import process_token
from agentrt.protocol.client import Client
from agentrt.protocol.frames import AnswerFrame
from agentrt.protocol.frames import AskFrame
from agentrt.protocol.frames import Run

from .cli_process import DAEMON
from .cli_process import daemon_command
from .cli_process import read_past
from .conftest import Recorder

TIMEOUT = 20
#: Marks the processes of this module's commands (a run of its own: others may run beside).
TAG = f"100.{random.randrange(10**6):06d}"
#: A command that starts two background children and waits, writing three lines first.
#: (Braced: the scripted model splits a message at a top-level ";".)
SPAWNER = (
    f"{{ echo $$ > pids; sleep {TAG} & echo $! >> pids; sleep {TAG} & echo $! >> pids; wait; }}"
)


def tagged() -> list[int]:
    """The live processes whose command line holds `TAG`, as seen from outside any sandbox."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if TAG.encode() in cmdline and alive(int(name)):
            found.append(int(name))
    return found


def alive(pid: int) -> bool:
    """Whether `pid` is a running process (a zombie has finished running)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[-1].split()[0]
    except OSError:
        return False
    return state not in (b"Z", b"X")


async def poll(ready: Callable[[], bool], seconds: float = TIMEOUT) -> bool:
    """Check `ready` every 20 ms until it holds (True) or `seconds` pass (False).

    For real processes, which have no event to wait on.
    """
    with trio.move_on_after(seconds):
        while True:
            if ready():
                return True
            await trio.sleep(0.02)
    return ready()


def read_pids(path: Path) -> list[int]:
    try:
        return [int(p) for p in path.read_text().split()]
    except (FileNotFoundError, ValueError):
        return []


async def wait_for_pids(path: Path, count: int, *, running: bool = True) -> list[int]:
    """Poll until `path` lists `count` lines; return the tagged processes then running.

    With `running`, at least `count` of them must be running (the call is still on).
    """
    assert await poll(lambda: len(read_pids(path)) >= count), f"{path} never listed {count} pids"
    pids = tagged()
    if running:
        assert len(pids) >= count, f"only {pids} run with the tag {TAG}"
    return pids


async def wait_gone(pids: list[int], seconds: float = 10.0) -> None:
    """Poll until none of `pids` runs; fail naming the survivors after `seconds`."""
    await poll(lambda: not any(alive(p) for p in pids) and not tagged(), seconds)
    survivors = [p for p in pids if alive(p)] + [p for p in tagged() if p not in pids]
    assert not survivors, f"still running after {seconds:g}s: {survivors}"


def kill_all(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


async def allow_everything(runtime: Runtime, *, task_status: trio.TaskStatus[None]) -> None:
    with runtime.registry.listen("", name="test") as listener:
        task_status.started()
        while True:
            entry = await listener.claim()
            entry.answer(Answer(ALLOW_ONCE))


async def test_cancelling_a_shell_call_kills_its_background_children_too(
    runtime: Runtime, workdir: Path, nursery: trio.Nursery
) -> None:
    await nursery.start(allow_everything, runtime)
    recorder = Recorder()
    ended: list[RunEnded] = []
    done = trio.Event()

    async def run() -> None:
        ended.append(
            await runtime.executor.run("cli-tp", f"sh {SPAWNER}", owner="t", emit=recorder)
        )
        done.set()

    nursery.start_soon(run)
    pids = await wait_for_pids(workdir / "pids", 3)
    try:
        assert all(alive(p) for p in pids)
        assert runtime.executor.cancel_owner("t", Cause.USER_CANCEL) == 1
        with trio.fail_after(TIMEOUT):
            await done.wait()
        assert ended[0].outcome is Outcome.CANCELLED
        await wait_gone(pids)
    finally:
        kill_all(pids)


async def test_a_shell_call_that_times_out_leaves_no_process_behind(
    runtime: Runtime, workdir: Path, nursery: trio.Nursery
) -> None:
    runtime.executor.config = attrs.evolve(runtime.executor.config, shell_timeout=1.0)
    await nursery.start(allow_everything, runtime)
    recorder = Recorder()
    with trio.fail_after(TIMEOUT):
        ended = await runtime.executor.run("cli-to", f"sh {SPAWNER}", owner="t", emit=recorder)
    pids = await wait_for_pids(workdir / "pids", 3, running=False)
    try:
        assert ended.outcome is Outcome.FINISHED
        assert "ran longer than 1s" in recorder.text()
        await wait_gone(pids)
    finally:
        kill_all(pids)


async def test_a_finished_shell_call_leaves_no_background_process_behind(
    runtime: Runtime, workdir: Path, nursery: trio.Nursery
) -> None:
    await nursery.start(allow_everything, runtime)
    command = f"{{ sleep {TAG} >/dev/null 2>&1 & echo $! > pids; echo started; }}"
    with trio.fail_after(TIMEOUT):
        ended = await runtime.executor.run("cli-fin", f"sh {command}", owner="t", emit=Recorder())
    pids = await wait_for_pids(workdir / "pids", 1, running=False)
    try:
        assert ended.outcome is Outcome.FINISHED
        history = await runtime.store.load_history("cli-fin")
        assert any("started\n[exit status 0]" in m.content for m in history)
        await wait_gone(pids)
        assert list((runtime.state_dir / "tools").glob("*.json")) == []
    finally:
        kill_all(pids)


async def test_a_command_run_through_sudo_is_stopped_with_its_group(tmp_path: Path) -> None:
    # A stand-in sudo that drops "-n --" and runs the command (as this user).
    fake = tmp_path / "sudo"
    fake.write_text('#!/bin/sh\nshift 2\nexec "$@"\n')
    fake.chmod(0o755)
    verifier = SudoVerifier(sudo=str(fake), ledger=ToolLedger(tmp_path / "tools"))
    pidfile = tmp_path / "pids"
    command = SPAWNER.replace("pids", str(pidfile))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(verifier.run, ["sh", "-c", command])
        pids = await wait_for_pids(pidfile, 3)
        assert len(list((tmp_path / "tools").glob("*.json"))) == 1
        nursery.cancel_scope.cancel()
    try:
        await wait_gone(pids)
        assert list((tmp_path / "tools").glob("*.json")) == []
    finally:
        kill_all(pids)


# -- the runner dies -----------------------------------------------------------------


@pytest.fixture
def folder() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="atp-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


async def test_a_shell_command_dies_with_a_daemon_killed_alone(folder: Path) -> None:
    (folder / "work").mkdir()
    process = await trio.lowlevel.open_process(
        daemon_command(
            folder / "run" / "d.sock", folder / "state", folder / "work", program=DAEMON
        ),
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        # Its own session, so that only the daemon itself is killed below: no group kill
        # takes its tools along.
        start_new_session=True,
    )
    pids: list[int] = []
    try:
        assert process.stderr is not None
        with trio.fail_after(TIMEOUT):
            await read_past(process.stderr, b"listening on")
            async with await Client.connect(folder / "run" / "d.sock") as client:
                await client.send(Run(f"sh {SPAWNER}", session="cli-orphan"))
                ask = await client.wait_for(AskFrame)
                await client.send(AnswerFrame(ask.id, "allow"))
                pids = await wait_for_pids(folder / "work" / "pids", 3)
                assert all(alive(p) for p in pids)
                assert len(list((folder / "state" / "tools").glob("*.json"))) == 1
                os.kill(process.pid, signal.SIGKILL)
                await process.wait()
        await wait_gone(pids)
    finally:
        kill_all([process.pid, *pids])
        with trio.CancelScope(shield=True):
            await process.wait()


def dead_token() -> str:
    """The token of a process that has exited."""
    child = subprocess.Popen(["sleep", "100"])
    token = process_token(child.pid)
    child.kill()
    child.wait()
    return token


def leftover_group() -> int:
    """A tool group as a runner that died (watcher and all) would leave it; its pgid."""
    leader = subprocess.Popen(
        ["sh", "-c", "sleep 100 & sleep 100"], start_new_session=True, stdout=subprocess.DEVNULL
    )
    return leader.pid


def record(
    ledger: ToolLedger, pgid: int, runner: str | None = None, boot: str | None = None
) -> None:
    """Write a ledger entry for `pgid` as another runner (or an earlier boot) would have."""
    entry = ledger.add(pgid)
    data = attrs.asdict(entry) | {"runner": runner or entry.runner, "boot": boot or entry.boot}
    (ledger.folder / f"{pgid}.json").write_text(json.dumps(data))


async def test_opening_a_state_dir_reaps_a_tool_group_whose_runner_died(folder: Path) -> None:
    pgid = leftover_group()
    assert await poll(lambda: len(group_members(pgid)) == 3)
    members = group_members(pgid)
    try:
        ledger = ToolLedger(folder / "state" / "tools")
        record(ledger, pgid, runner=dead_token())
        async with open_runtime(folder / "state", model=ScriptedModel(), workdir=folder):
            await wait_gone(members)
            assert list(ledger.folder.glob("*.json")) == []
    finally:
        kill_all(members)


async def test_opening_a_state_dir_spares_a_live_runners_group_and_another_boots(
    folder: Path,
) -> None:
    live_pgid = leftover_group()
    old_pgid = leftover_group()
    assert await poll(lambda: len(group_members(live_pgid) + group_members(old_pgid)) == 6)
    members = group_members(live_pgid) + group_members(old_pgid)
    try:
        ledger = ToolLedger(folder / "state" / "tools")
        record(ledger, live_pgid)  # this process runs it: alive
        record(ledger, old_pgid, runner=dead_token(), boot="another-boot")
        async with open_runtime(folder / "state", model=ScriptedModel(), workdir=folder):
            assert all(alive(p) for p in members)
            assert [p.name for p in ledger.folder.glob("*.json")] == [f"{live_pgid}.json"]
    finally:
        kill_all(members)

"""One runner per task, with real processes on one state dir.

Two `agentrt pending answer` of one task started together, two daemons on one
state dir, and the `agentrt` command next to a running daemon.
"""

from __future__ import annotations

import signal
import sqlite3
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from agentrt import Outcome
from agentrt import ScriptedModel
from agentrt import open_runtime
from agentrt.core.process import process_token

from .cli_process import AGENTRT
from .cli_process import daemon_command
from .cli_process import env_for
from .cli_process import read_past
from .cli_process import run_in
from .conftest import Recorder

#: Runs whole daemons and suites: slower than most, and slower still on a busy machine.
pytestmark = pytest.mark.deadline(120)

#: How many times the two commands race; one double run in any trial fails the test.
TRIALS = 20


async def park_a_shell_call(state: Path, workdir: Path, session: str) -> None:
    """Leave `session` waiting on the confirmation of a shell call that appends to runs.txt."""
    async with open_runtime(
        state, model=ScriptedModel(word_delay=0, stream_delay=0), workdir=workdir
    ) as rt:
        # No listener answers chat- questions here, so the confirmation is saved.
        ended = await rt.executor.run(
            session, "sh echo ran >> runs.txt", owner="test", emit=Recorder()
        )
    assert ended.outcome is Outcome.AWAITING_ANSWER, ended


async def answer_twice_at_once(state: Path, work: Path, session: str) -> list[int]:
    """Start two `agentrt pending answer SESSION allow` together; their exit statuses."""
    with trio.fail_after(60):
        procs = [
            await trio.lowlevel.open_process(
                [*AGENTRT, "pending", "answer", session, "allow"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=env_for(state),
                cwd=work,
            )
            for _ in range(2)
        ]
        return [await p.wait() for p in procs]


def runs_of(work: Path) -> list[str]:
    path = work / "runs.txt"
    return path.read_text().splitlines() if path.exists() else []


async def test_two_answers_started_together_run_the_tool_once(tmp_path: Path) -> None:
    for trial in range(TRIALS):
        state = tmp_path / f"state{trial}"
        work = tmp_path / f"work{trial}"
        work.mkdir()
        await park_a_shell_call(state, work, "chat-race")
        codes = await answer_twice_at_once(state, work, "chat-race")
        runs = runs_of(work)
        assert runs == ["ran"], f"trial {trial}: the tool ran {len(runs)} times; exits {codes}"
        # The loser is told the task is running elsewhere, or (if it came late) that it is gone.
        assert sorted(codes) == [0, 1], f"trial {trial}: exits {codes}"


# -- daemons ----------------------------------------------------------------------


@asynccontextmanager
async def daemon_process(
    socket_path: Path, state: Path, workdir: Path
) -> AsyncIterator[trio.Process]:
    await trio.Path(workdir).mkdir(exist_ok=True)
    process = await trio.lowlevel.open_process(
        daemon_command(socket_path, state, workdir),
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env_for(state),
    )
    try:
        assert process.stderr is not None
        with trio.fail_after(30):
            await read_past(process.stderr, b"listening on")
        yield process
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        with trio.CancelScope(shield=True), trio.move_on_after(20) as late:
            await process.wait()
        if late.cancelled_caught:
            process.kill()
            await process.wait()


async def test_a_second_daemon_on_the_same_state_dir_refuses_in_one_line(
    tmp_path: Path, short_dir: Path
) -> None:
    state = tmp_path / "state"
    async with daemon_process(short_dir / "one.sock", state, tmp_path / "work") as first:
        with trio.fail_after(60):
            second = await trio.run_process(
                daemon_command(short_dir / "two.sock", state, tmp_path / "work"),
                check=False,
                capture_stderr=True,
                env=env_for(state),
            )
        assert second.returncode == 1
        assert second.stderr.decode() == (
            f"agentrt daemon: another daemon (pid {first.pid}, socket {short_dir / 'one.sock'}) "
            f"already uses the state dir {state}; stop it first, or pass another --state-dir\n"
        )
        assert not (short_dir / "two.sock").exists()
        assert first.returncode is None


async def agentrt(
    args: list[str], env: dict[str, str], cwd: Path
) -> subprocess.CompletedProcess[str]:
    """Run the `agentrt` command to its end (at most a minute) in a thread, its output captured
    as text."""
    return await trio.to_thread.run_sync(run_in, args, env, cwd)


async def test_with_a_daemon_running_the_command_runs_its_task_in_the_daemon(
    tmp_path: Path, short_dir: Path
) -> None:
    state = tmp_path / "state"
    async with daemon_process(short_dir / "d.sock", state, tmp_path / "work") as daemon:
        env = env_for(state)
        # A model this command could not even start on its own: only the daemon's is used.
        env["AGENTRT_MODEL"] = "no-such-model"
        parked = await agentrt(["run", "--session", "chat-1", "ask Name?"], env, tmp_path)
        assert parked.returncode == 3, parked.stderr
        assert "agentrt pending answer chat-1" in parked.stderr
        db = sqlite3.connect(state / "tasks.db")
        try:
            [(runner,)] = db.execute("SELECT runner FROM tasks WHERE session_id = 'chat-1'")
        finally:
            db.close()
        assert runner == process_token(daemon.pid)
        answered = await agentrt(["pending", "answer", "chat-1", "Ada"], env, tmp_path)
        assert answered.returncode == 0, answered.stderr
        assert "You answered: Ada" in answered.stdout


async def test_two_answers_through_a_daemon_run_the_tool_once(
    tmp_path: Path, short_dir: Path
) -> None:
    state = tmp_path / "state"
    trials = 5
    for trial in range(trials):
        (tmp_path / f"work{trial}").mkdir()
        await park_a_shell_call(state, tmp_path / f"work{trial}", f"chat-race{trial}")
    async with daemon_process(short_dir / "d.sock", state, tmp_path / "daemon-work"):
        for trial in range(trials):
            work = tmp_path / f"work{trial}"
            codes = await answer_twice_at_once(state, work, f"chat-race{trial}")
            runs = runs_of(work)
            assert runs == ["ran"], f"trial {trial}: the tool ran {len(runs)} times; exits {codes}"
            assert sorted(codes) == [0, 1], f"trial {trial}: exits {codes}"


async def test_a_command_whose_daemon_dies_mid_run_says_the_task_is_kept(
    tmp_path: Path, short_dir: Path
) -> None:
    state = tmp_path / "state"
    async with daemon_process(short_dir / "d.sock", state, tmp_path / "work") as daemon:
        command = await trio.lowlevel.open_process(
            [*AGENTRT, "run", "--json", "--session", "cli-gone", "sleep 60"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env_for(state),
            cwd=tmp_path,
        )
        assert command.stdout is not None
        assert command.stderr is not None
        seen = b""
        with trio.fail_after(30):
            while b'"tool_call"' not in seen:
                chunk = await command.stdout.receive_some()
                assert chunk, f"the command exited early: {seen!r}"
                seen += chunk
            daemon.kill()
            errors = b""
            while chunk := await command.stderr.receive_some():
                errors += chunk
            assert await command.wait() == 1
    assert errors.decode() == (
        "agentrt: the daemon closed the connection before the run ended (did it crash?); "
        "the task is kept: agentrt pending resume cli-gone\n"
    )
    listed = await trio.run_process(
        [*AGENTRT, "pending", "list", "--json"], capture_stdout=True, env=env_for(state)
    )
    assert b'"session": "cli-gone", "status": "crashed"' in listed.stdout

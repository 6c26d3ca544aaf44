"""One runner per task, with real processes on one state dir.

Two `agentrt pending answer` of one task started together, and two daemons on
one state dir.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from agentrt import Outcome, ScriptedModel, open_runtime

from .conftest import Recorder

AGENTRT = [sys.executable, "-m", "agentrt"]
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


def env_for(state: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["AGENTRT_STATE_DIR"] = str(state)
    env.pop("AGENTRT_MODEL", None)
    env.pop("AGENTRT_SOCKET", None)
    return env


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


@pytest.fixture
def sockets() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="ag1-"))  # short: a socket path has a length limit
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def daemon_command(socket_path: Path, state: Path, workdir: Path) -> list[str]:
    return [
        *AGENTRT,
        "daemon",
        "--socket",
        str(socket_path),
        "--state-dir",
        str(state),
        "--workdir",
        str(workdir),
    ]


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
        seen = b""
        with trio.fail_after(30):
            while b"listening on" not in seen:
                chunk = await process.stderr.receive_some(4096)
                assert chunk, f"the daemon exited: {seen!r}"
                seen += chunk
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
    tmp_path: Path, sockets: Path
) -> None:
    state = tmp_path / "state"
    async with daemon_process(sockets / "one.sock", state, tmp_path / "work") as first:
        with trio.fail_after(60):
            second = await trio.run_process(
                daemon_command(sockets / "two.sock", state, tmp_path / "work"),
                check=False,
                capture_stderr=True,
                env=env_for(state),
            )
        assert second.returncode == 1
        assert second.stderr.decode() == (
            f"agentrt daemon: another daemon (pid {first.pid}, socket {sockets / 'one.sock'}) "
            f"already uses the state dir {state}; stop it first, or pass another --state-dir\n"
        )
        assert not (sockets / "two.sock").exists()
        assert first.returncode is None

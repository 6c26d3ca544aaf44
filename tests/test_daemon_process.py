"""The daemon as a real process: SIGTERM mid-run, restart, resume; one daemon per socket."""

from __future__ import annotations

import os
import signal
import socket as stdlib_socket
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from agentrt import Cause
from agentrt import Outcome
from agentrt.protocol.client import Client
from agentrt.protocol.frames import AnswerFrame
from agentrt.protocol.frames import AskFrame
from agentrt.protocol.frames import EndedFrame
from agentrt.protocol.frames import PendingAction
from agentrt.protocol.frames import PendingList
from agentrt.protocol.frames import PendingRequest
from agentrt.protocol.frames import Run
from agentrt.protocol.frames import SessionMessages
from agentrt.protocol.frames import SessionsAction
from agentrt.protocol.frames import SessionsRequest
from agentrt.protocol.frames import TaskFrame
from agentrt.protocol.frames import UsageFrame
from agentrt.vocab.usage import TokenCount

from .cli_process import DAEMON
from .cli_process import daemon_command as command_of_daemon
from .cli_process import read_past
from .conftest import answered_and_finished

TIMEOUT = 20


@pytest.fixture
def folder(short_dir: Path) -> Path:
    """The daemon's socket folder, state dir and working folder: short, for the socket."""
    return short_dir


def daemon_command(folder: Path) -> list[str]:
    return command_of_daemon(
        folder / "run" / "daemon.sock", folder / "state", folder, program=DAEMON
    )


@asynccontextmanager
async def daemon_process(folder: Path) -> AsyncIterator[trio.Process]:
    process = await trio.lowlevel.open_process(
        daemon_command(folder), stderr=subprocess.PIPE, stdin=subprocess.DEVNULL
    )
    try:
        assert process.stderr is not None
        await read_past(process.stderr, b"listening on")
        yield process
    finally:
        if process.returncode is None:
            process.kill()
        with trio.CancelScope(shield=True):
            await process.wait()


async def test_sigterm_mid_run_keeps_the_task_and_a_restarted_daemon_resumes_it(
    folder: Path,
) -> None:
    socket_path = folder / "run" / "daemon.sock"
    with trio.fail_after(TIMEOUT):
        async with daemon_process(folder) as process:
            client = await Client.connect(socket_path)
            await client.send(Run("ask Deploy where?"))
            task = await client.wait_for(TaskFrame)
            await client.wait_for(AskFrame)
            process.send_signal(signal.SIGTERM)
            ended = await client.wait_for(EndedFrame)
            assert (ended.outcome, ended.cause, ended.pending_kept) == (
                Outcome.CANCELLED,
                Cause.SHUTDOWN,
                True,
            )
            assert await process.wait() == 0
            await client.aclose()
        assert not socket_path.exists()

        async with daemon_process(folder) as process:
            async with await Client.connect(socket_path) as client:
                await client.send(PendingRequest(PendingAction.LIST))
                listed = await client.wait_for(PendingList)
                [pending] = listed.tasks
                assert (pending.session, pending.cause) == (task.session_id, Cause.SHUTDOWN)
                await client.send(PendingRequest(PendingAction.RESUME, session=task.session_id))
                ask = await client.wait_for(AskFrame)
                assert ask.prompt == "Deploy where?"
                await answered_and_finished(client, ask.id, "staging")
                await client.send(PendingRequest(PendingAction.LIST))
                assert await client.wait_for(PendingList) == PendingList(())
            process.send_signal(signal.SIGINT)
            assert await process.wait() == 0


async def test_sigusr1_writes_every_threads_stack_and_the_daemon_goes_on(folder: Path) -> None:
    socket_path = folder / "run" / "daemon.sock"
    with trio.fail_after(TIMEOUT):
        async with daemon_process(folder) as process:
            assert process.stderr is not None
            process.send_signal(signal.SIGUSR1)
            # The Trio thread's stack, from the daemon's entry down to where it waits.
            said = await read_past(process.stderr, b"apps/daemon.py")
            assert b"(most recent call first)" in said
            assert b"Current thread" in said or b"Thread 0x" in said
            assert process.returncode is None
            async with await Client.connect(socket_path) as client:
                await client.send(Run("hello"))
                ended = await client.wait_for(EndedFrame)
                assert ended.outcome is Outcome.FINISHED
            process.send_signal(signal.SIGTERM)
            assert await process.wait() == 0


async def test_a_second_daemon_process_says_so_and_exits_non_zero(folder: Path) -> None:
    with trio.fail_after(TIMEOUT):
        async with daemon_process(folder) as first:
            second = await trio.run_process(
                daemon_command(folder), check=False, capture_stderr=True
            )
            assert second.returncode == 1
            assert b"a daemon is already running on" in second.stderr
            assert first.returncode is None
            first.send_signal(signal.SIGTERM)
            assert await first.wait() == 0


async def test_help_explains_the_options() -> None:
    result = await trio.run_process(
        [sys.executable, "-m", "agentrt.daemon", "--help"], capture_stdout=True
    )
    text = result.stdout.decode()
    for option in ("--socket", "AGENTRT_SOCKET", "--state-dir", "AGENTRT_STATE_DIR", "--model"):
        assert option in text
    assert "SIGTERM" in text


async def test_an_unsafe_socket_folder_is_refused(folder: Path) -> None:
    target = folder / "elsewhere"
    target.mkdir()
    (folder / "run").symlink_to(target)
    with trio.fail_after(TIMEOUT):
        result = await trio.run_process(daemon_command(folder), check=False, capture_stderr=True)
    assert result.returncode == 1
    assert b"is not a directory (a symlink?)" in result.stderr
    assert os.listdir(target) == []


async def test_a_sessions_tokens_survive_a_daemon_restart(folder: Path) -> None:
    socket_path = folder / "run" / "daemon.sock"
    seen: list[UsageFrame] = []
    with trio.fail_after(TIMEOUT):
        async with daemon_process(folder) as process:
            async with await Client.connect(socket_path) as client:
                session = ""
                for text in ("hello there", "write a.txt hi; and more words"):
                    await client.send(Run(text, session=session or None))
                    task = await client.wait_for(TaskFrame)
                    session = task.session_id
                    while True:
                        frame = await client.receive()
                        if isinstance(frame, UsageFrame):
                            seen.append(frame)
                        if isinstance(frame, AskFrame):
                            await client.send(AnswerFrame(frame.id, "allow"))
                        if isinstance(frame, EndedFrame):
                            assert frame.outcome is Outcome.FINISHED, frame.error
                            break
            process.send_signal(signal.SIGINT)
            assert await process.wait() == 0

        async with daemon_process(folder) as process:
            async with await Client.connect(socket_path) as client:
                await client.send(SessionsRequest(SessionsAction.SHOW, session, limit=1))
                shown = await client.wait_for(SessionMessages)
            process.send_signal(signal.SIGINT)
            assert await process.wait() == 0
    assert len(seen) == 3  # the first run's one round, the second's two
    total = TokenCount.total(run.tokens for run in shown.usage)
    assert total == TokenCount(
        3,
        sum(f.input_tokens for f in seen),
        sum(f.output_tokens for f in seen),
        sum(f.cache_read_tokens for f in seen),
        sum(f.reasoning_tokens for f in seen),
    )
    assert total.input_tokens > 0 and total.output_tokens > 0
    assert [run.tokens.rounds for run in shown.usage] == [1, 2]
    assert {run.model for run in shown.usage} == {"scripted"}
    # The scripted model has no price: its cost is not made up.
    assert [run.cost for run in shown.usage] == [None, None]


#: ``python -m agentrt.daemon`` with the rest of the command line, telling on stderr of each
#: collection the collector starts once the daemon's modules begin to load
#: (``collect GENERATION FROZEN``: how many objects were frozen by then) and, as the
#: process exits, whether the collector is on.
_TELLING_DAEMON = """\
import gc, runpy, sys
def told(phase, info):
    if phase == "start" and "agentrt.apps.daemon" in sys.modules:
        print("collect", info["generation"], gc.get_freeze_count(), file=sys.stderr, flush=True)
gc.callbacks.append(told)
sys.argv[0] = "agentrt.daemon"
try:
    runpy.run_module("agentrt.daemon", run_name="__main__")
finally:
    print("exit", gc.isenabled(), file=sys.stderr, flush=True)
"""


async def test_the_collector_waits_until_the_socket_is_served_then_skips_the_start(
    folder: Path,
) -> None:
    socket_path = folder / "run" / "daemon.sock"
    command = daemon_command(folder)[3:]  # the options, after ``python -m agentrt.daemon``
    with trio.fail_after(TIMEOUT):
        process = await trio.lowlevel.open_process(
            [sys.executable, "-c", _TELLING_DAEMON, *command],
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
        )
        assert process.stderr is not None
        try:
            said = await read_past(process.stderr, b"listening on")
            async with await Client.connect(socket_path) as client:
                for _ in range(20):  # enough made and dropped for the collector to run
                    await client.send(Run("hello"))
                    assert (await client.wait_for(EndedFrame)).outcome is Outcome.FINISHED
            process.send_signal(signal.SIGTERM)
            while chunk := await process.stderr.receive_some(65536):
                said += chunk
            assert await process.wait() == 0
        finally:
            if process.returncode is None:
                process.kill()
            with trio.CancelScope(shield=True):
                await process.wait()
    told = [line.split() for line in said.decode().splitlines()]
    collections = [words for words in told if words[:1] == ["collect"]]
    # Starting makes tens of thousands of objects: with the collector on, tens of collections
    # would run before the socket is served. None does; those of the runs skip the start.
    assert collections, said
    assert all(int(frozen) > 10_000 for _, _, frozen in collections), collections
    assert ["exit", "True"] in told


async def _answering(socket_path: Path, process: trio.Process) -> None:
    """Return the moment `socket_path` answers a connection (`process` still running)."""
    while True:
        probe = stdlib_socket.socket(stdlib_socket.AF_UNIX)
        try:
            probe.connect(os.fspath(socket_path))
            return
        except OSError:
            assert process.returncode is None and process.poll() is None, "the daemon exited"
            await trio.lowlevel.checkpoint()
        finally:
            probe.close()


async def test_a_sigterm_the_moment_the_socket_answers_is_a_graceful_stop(folder: Path) -> None:
    # Whoever sees the socket answer may stop the daemon at once (a window closed as soon as
    # it opened, `agentrt daemon stop`): the signal must find the daemon's handler, not the
    # default one that kills it where it stands, socket file and all.
    socket_path = folder / "run" / "daemon.sock"
    for _ in range(3):
        with trio.fail_after(TIMEOUT):
            process = await trio.lowlevel.open_process(
                daemon_command(folder), stderr=subprocess.PIPE, stdin=subprocess.DEVNULL
            )
            assert process.stderr is not None
            try:
                await _answering(socket_path, process)
                process.send_signal(signal.SIGTERM)
                said = b""
                while chunk := await process.stderr.receive_some(65536):
                    said += chunk
                assert await process.wait() == 0, said
            finally:
                if process.returncode is None:
                    process.kill()
                with trio.CancelScope(shield=True):
                    await process.wait()
        assert b"SIGTERM: shutting down" in said
        assert not socket_path.exists()


#: ``python -m agentrt.daemon`` with the rest of the command line, whose stop signals reach it
#: in the instant between its own handler's setting and Trio's receiver's opening: a SIGTERM
#: sent to itself just before the receiver opens.
_SIGNALLED_EARLY = """\
import os, runpy, signal, sys
import trio
opening = trio.open_signal_receiver
def signalled_first(*signals):
    os.kill(os.getpid(), signal.SIGTERM)
    return opening(*signals)
trio.open_signal_receiver = signalled_first
sys.argv[0] = "agentrt.daemon"
runpy.run_module("agentrt.daemon", run_name="__main__")
"""


async def test_a_sigterm_before_the_daemon_listens_for_signals_is_not_lost(
    folder: Path,
) -> None:
    command = daemon_command(folder)[3:]  # the options, after ``python -m agentrt.daemon``
    with trio.fail_after(TIMEOUT):
        done = await trio.run_process(
            [sys.executable, "-c", _SIGNALLED_EARLY, *command],
            capture_stderr=True,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    said = done.stderr.decode()
    assert done.returncode == 0, said
    assert "SIGTERM: shutting down" in said
    assert "already stopping" not in said

"""Two agentrt processes on one state directory never run the same task at once."""

from __future__ import annotations

import os
import subprocess

import pytest
import trio

from agentrt import Message
from agentrt import Outcome
from agentrt import Runtime
from agentrt import SessionBusyError
from agentrt import TaskRecord
from agentrt import TaskStatus
from agentrt.core.process import pid_alive
from agentrt.core.process import process_token
from agentrt.core.process import token_alive

from .conftest import Recorder


def test_a_process_token_names_a_live_process_and_survives_pid_reuse() -> None:
    me = process_token()
    assert token_alive(me)
    pid, _, start = me.partition(":")
    assert start, "the start time is read from /proc on Linux"
    assert not token_alive(f"{pid}:{int(start) + 1}")  # same pid, another process
    assert not token_alive("not-a-token")


def test_a_process_that_exited_but_is_not_reaped_is_dead() -> None:
    """A zombie keeps its pid until its parent waits for it; it runs nothing any more."""
    child = subprocess.Popen(["sleep", "60"])
    try:
        token = process_token(child.pid)
        assert token_alive(token) and pid_alive(child.pid)
        child.kill()
        # Wait for it to exit without reaping it: a zombie from here on.
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
        assert not pid_alive(child.pid)
        assert not token_alive(token)
    finally:
        child.kill()
        child.wait()


async def test_a_task_running_in_another_live_process_is_not_resumed_or_discarded(
    runtime: Runtime,
) -> None:
    other = await trio.lowlevel.open_process(["sleep", "600"], stdin=subprocess.DEVNULL)
    try:
        record = TaskRecord(
            "cli-elsewhere",
            "ask Q?",
            (Message.user("ask Q?"),),
            status=TaskStatus.RUNNING,
            runner=process_token(other.pid),
        )
        await runtime.store.save(record)
        message = f"running in another agentrt process \\(pid {other.pid}\\)"
        with pytest.raises(SessionBusyError, match=message):
            await runtime.executor.resume("cli-elsewhere", owner="o", emit=Recorder())
        with pytest.raises(SessionBusyError, match=message):
            await runtime.executor.discard("cli-elsewhere")
        assert await runtime.store.load("cli-elsewhere") == record  # untouched
    finally:
        other.kill()
        await other.wait()
    # The other process died while running it: a crash, so the task is ours to resume.
    with runtime.registry.listen("cli-") as listener:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_answer_one, listener)
            ended = await runtime.executor.resume("cli-elsewhere", owner="o", emit=Recorder())
    assert ended.outcome is Outcome.FINISHED
    assert ended.text == "Done.\nYou answered: here"


async def _answer_one(listener: object) -> None:
    from agentrt import Listener

    assert isinstance(listener, Listener)
    (await listener.claim()).answer("here")


async def test_a_run_records_this_process_as_its_runner(runtime: Runtime) -> None:
    await runtime.executor.run("chat-r", "ask Q?", owner="o", emit=Recorder())
    record = await runtime.store.load("chat-r")
    assert record is not None
    assert record.runner == process_token(os.getpid())

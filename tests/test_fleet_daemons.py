"""Three daemon processes sharing one PostgreSQL store, each serving the HTTP API.

What a load balancer in front of them would do: each request goes to any
daemon. A question asked by a run on one is answered through another; a run
is paused through a third and resumed through a second; a daemon is killed
with SIGKILL mid-run, and its task is resumed on another without running its
committed tool call again.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio
from stress.fleet import LEASE
from stress.fleet import ended as run_ended
from stress.fleet import question_of
from stress.fleet import start_fleet
from stress.fleet import wait_interrupted

from agentrt.agent.toolproc import group_members

from .fakes.tcp_proxy import TcpProxy

pytestmark = [pytest.mark.e2e, pytest.mark.deadline(150)]


def ended(session: str) -> Callable[[dict[str, Any]], bool]:
    return run_ended(f"chat-{session}")


async def test_three_daemons_share_runs_questions_pauses_and_a_killed_daemons_tasks(
    tmp_path: Path, postgres_url: str, nursery: trio.Nursery
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    # A lease that a loaded machine's delays never come near: no member fences itself here.
    async with start_fleet(
        tmp_path, postgres_url, nursery, ("a", "b", "c"), work, lease=8.0
    ) as nodes:
        a, b, c = nodes["a"], nodes["b"], nodes["c"]

        # 1. A run on a asks a confirmation; the person's answer arrives at b.
        async with a.events() as on_a, b.events() as on_b:
            started = await a.client.post("/v1/session/ask/run", json={"text": "write f.txt hi"})
            assert started.status_code == 202, started.text
            question = await on_b.wait_for(
                lambda e: e["type"] == "question" and e["session_id"] == "chat-ask"
            )
            listed = (await b.client.get("/v1/questions")).json()["questions"]
            assert [q["id"] for q in listed] == [question["id"]]
            answered = await b.client.post(
                f"/v1/questions/{question['id']}/answer", json={"value": "allow"}
            )
            assert answered.status_code == 200, answered.text
            end = await on_a.wait_for(ended("ask"))
        assert end["outcome"] == "finished", end
        assert (work / "f.txt").read_text() == "hi"

        # 2. A run on a is paused through c and resumed through b.
        async with a.events() as on_a, b.events() as on_b:
            started = await a.client.post("/v1/session/nap/run", json={"text": "sleep 60"})
            task_hash = started.json()["task_hash"]
            await on_a.wait_for(lambda e: e["type"] == "tool_call" and e["name"] == "sleep")
            paused = await c.client.post(f"/v1/task/{task_hash}/cancel", json={"pause": True})
            assert paused.status_code == 200, paused.text
            assert paused.json() == {
                "task_hash": task_hash,
                "session_id": "chat-nap",
                "cause": "pause",
            }
            end = await on_a.wait_for(ended("nap"))
            assert (end["outcome"], end["cause"], end["pending_kept"]) == (
                "cancelled",
                "pause",
                True,
            )
            # The final event may come before the pause's status is written (it is queued
            # behind the last commit, which made the task durable): read it once written.
            task = await wait_interrupted(c, "chat-nap", 10 * LEASE)
            assert task is not None and (task["status"], task["cause"]) == ("interrupted", "pause")
            resumed = await b.client.post("/v1/session/nap/task/resume", json={})
            assert resumed.status_code == 202, resumed.text
            await on_b.wait_for(lambda e: e["type"] == "tool_call" and e["name"] == "sleep")
            # Running on b now: a refuses to take it too.
            busy = await a.client.post("/v1/session/nap/task/resume", json={})
            assert busy.status_code == 409, busy.text
            assert "running in another agentrt process" in busy.json()["error"]["message"]
            stopped = await a.client.post(
                f"/v1/task/{resumed.json()['task_hash']}/cancel", json={"pause": False}
            )
            assert stopped.status_code == 200, stopped.text
            end = await on_b.wait_for(ended("nap"))
            assert (end["cause"], end["pending_kept"]) == ("user_cancel", False)

        # 3. b is killed in the middle of a run; c resumes the task; the committed call
        # does not run again.
        async with b.events() as on_b, c.events() as on_c:
            script = "sh echo k1 >> counter; sleep 4"
            started = await b.client.post("/v1/session/kill/run", json={"text": script})
            assert started.status_code == 202, started.text
            confirm = await on_c.wait_for(
                lambda e: e["type"] == "question" and e["session_id"] == "chat-kill"
            )
            allowed = await c.client.post(
                f"/v1/questions/{confirm['id']}/answer", json={"value": "allow"}
            )
            assert allowed.status_code == 200, allowed.text
            result = await on_b.wait_for(
                lambda e: e["type"] == "tool_result" and e["name"] == "shell"
            )
            assert result["ok"], result
        await b.process.kill()
        # Another process's state: nothing to wait on but the database itself.
        task = await wait_interrupted(c, "chat-kill", 30)
        assert task is not None
        assert (task["status"], task["cause"]) == ("interrupted", "disconnect")
        async with c.events() as on_c:
            resumed = await c.client.post("/v1/session/kill/task/resume", json={})
            assert resumed.status_code == 202, resumed.text
            end = await on_c.wait_for(ended("kill"))
        assert end["outcome"] == "finished", end
        assert (work / "counter").read_text().split() == ["k1"]

        status = await trio.run_process(
            [sys.executable, "-m", "agentrt", "fleet", "status", "--json"],
            capture_stdout=True,
            env={**os.environ, "AGENTRT_STORE": postgres_url},
            stdin=subprocess.DEVNULL,
        )
        members = json.loads(status.stdout)["members"]
        live = sorted(m["http"] for m in members if m["live"])
        assert live == sorted(n.address for n in (a, c))


def _state(pid: int) -> str:
    """The state letter of process `pid` (``T``: stopped)."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        return f.read().decode().rsplit(")", 1)[-1].split()[0]


async def _tool_group(state_dir: Path) -> int:
    """The pgid of the one tool group a daemon's ledger records (it is written as it starts)."""
    with trio.fail_after(10):
        while True:
            entries = list((state_dir / "tools").glob("*.json"))
            if entries:
                return int(json.loads(entries[0].read_text())["pgid"])
            await trio.sleep(0.02)


async def _until(
    condition: Callable[[], bool], seconds: float, what: str, said: Callable[[], str] = str
) -> None:
    """Another process's doing: poll `condition` until it holds, for at most `seconds`.

    On failure, what `said` gives (a process's log) follows `what`.
    """
    with trio.move_on_after(seconds):
        while True:
            if condition():
                return
            await trio.sleep(0.02)
    assert condition(), f"{what}\n{said()}"


@pytest.mark.parametrize("stall", ["sigstop", "cut_from_the_database"])
async def test_a_stalled_member_is_fenced_while_another_resumes_its_task(
    tmp_path: Path, postgres_url: str, nursery: trio.Nursery, stall: str
) -> None:
    """A is stopped (or cut off) in a tool call; B resumes the task; A's tool and writes are dead.

    With a lease of 2 s: A's tool group dies before B may take the task (the
    watchdog's doing while A is stopped). A wakes while the task, interrupted,
    still names it as its runner: its late writes are refused by the database
    (its lease epoch is stale) and it says so in its log. B then runs the call
    once, as attempt 2.
    """
    work = tmp_path / "work"
    work.mkdir()
    parts = urllib.parse.urlsplit(postgres_url)
    proxy = TcpProxy(parts.hostname or "127.0.0.1", parts.port or 5432)
    port = await nursery.start(proxy.serve)
    through = postgres_url.replace(f":{parts.port or 5432}/", f":{port}/", 1)
    async with start_fleet(
        tmp_path, postgres_url, nursery, ("a", "b"), work, urls={"a": through}
    ) as nodes:
        a, b = nodes["a"], nodes["b"]
        assert a.process.process is not None
        pid = a.process.process.pid
        async with a.events() as on_a, b.events() as on_b:
            started = await a.client.post(
                "/v1/session/stall/run", json={"text": "sh sleep 4 && date +%s.%N >> log"}
            )
            assert started.status_code == 202, started.text
            confirm = await on_b.wait_for(question_of("chat-stall"))
            await b.client.post(f"/v1/questions/{confirm['id']}/answer", json={"value": "allow"})
            await on_a.wait_for(lambda e: e["type"] == "tool_call" and e["name"] == "shell")
        pgid = await _tool_group(a.process.state_dir)
        assert group_members(pgid)
        if stall == "sigstop":
            os.kill(pid, signal.SIGSTOP)
        else:
            proxy.cut()
        try:
            # Dead before the lease (2 s) can run out, while A cannot act if it is stopped.
            await _until(lambda: not group_members(pgid), 2 * LEASE, "A's tool still runs")
            if stall == "sigstop":
                assert _state(pid) == "T"  # not A's doing: A is stopped
            task = await wait_interrupted(b, "chat-stall", 10 * LEASE)
            assert task is not None
            assert (task["status"], task["cause"]) == ("interrupted", "disconnect"), task
        finally:
            if stall == "sigstop":
                os.kill(pid, signal.SIGCONT)
            else:
                proxy.restore()
        # A wakes (or reaches the database again): the database refuses what its run still
        # writes, and A says so.
        await _until(
            lambda: (
                "joins again under epoch" in a.process.log_text()
                and "was refused" in a.process.log_text()
            ),
            10 * LEASE,
            "A's log says nothing of its fencing; A's log ends:",
            lambda: a.process.log_text()[-4000:],
        )
        log_text = a.process.log_text()
        assert "writes under lease epoch" in log_text and "are refused" in log_text, log_text
        task = await b.task("chat-stall")
        assert task is not None
        assert (task["status"], task["cause"]) == ("interrupted", "disconnect"), task
        async with b.events() as on_b:
            resumed = await b.client.post("/v1/session/stall/task/resume", json={})
            assert resumed.status_code == 202, resumed.text
            again = await on_b.wait_for(question_of("chat-stall"))
            assert "may already have run (attempt 2)" in again["prompt"], again
            await b.client.post(f"/v1/questions/{again['id']}/answer", json={"value": "allow"})
            end = await on_b.wait_for(ended("stall"))
        assert end["outcome"] == "finished", end
        # A is a member again that takes new work under its new lease.
        async with a.events() as on_a:
            fresh = await a.client.post("/v1/session/after/run", json={"text": "hello"})
            assert fresh.status_code == 202, fresh.text
            assert (await on_a.wait_for(ended("after")))["outcome"] == "finished"
        # One run of the call: one timestamp, one result in the session's history.
        assert len((work / "log").read_text().splitlines()) == 1
        history = (await b.client.get("/v1/sessions/chat-stall/messages")).json()
        results = [m for m in history["messages"] if m.get("role") == "tool"]
        assert len(results) == 1, history
        assert await b.task("chat-stall") is None

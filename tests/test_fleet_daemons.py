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
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio
from stress.fleet import ended as run_ended
from stress.fleet import start_fleet, wait_interrupted

pytestmark = [pytest.mark.e2e, pytest.mark.deadline(150)]


def ended(session: str) -> Callable[[dict[str, Any]], bool]:
    return run_ended(f"chat-{session}")


async def test_three_daemons_share_runs_questions_pauses_and_a_killed_daemons_tasks(
    tmp_path: Path, postgres_url: str, nursery: trio.Nursery
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    async with start_fleet(tmp_path, postgres_url, nursery, ("a", "b", "c"), work) as nodes:
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
            task = await c.task("chat-nap")
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

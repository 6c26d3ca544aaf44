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
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
import trio
from stress._common import DaemonProcess, http_base

from agentrt.http import load_or_create_token

pytestmark = [pytest.mark.e2e, pytest.mark.deadline(150)]

#: Seconds a daemon's lease lasts here: a killed daemon's tasks are free soon after.
LEASE = "2"
STEP = 30.0


@attrs.define(eq=False)
class Feed:
    """A daemon's `/v1/events` stream, read as it comes."""

    lines: AsyncIterator[str]

    async def wait_for(self, match: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        """The next event `match` accepts (the ones before it are passed over)."""
        with trio.fail_after(STEP):
            async for line in self.lines:
                if line.startswith("data: "):
                    event = json.loads(line.removeprefix("data: "))
                    if match(event):
                        return dict(event)
        raise AssertionError("the event stream ended")


@attrs.define(eq=False)
class Node:
    """One daemon of the fleet and an HTTP client of its API."""

    name: str
    process: DaemonProcess
    client: httpx.AsyncClient
    #: ``HOST:PORT`` of its HTTP API.
    address: str

    @asynccontextmanager
    async def events(self) -> AsyncIterator[Feed]:
        async with self.client.stream("GET", "/v1/events", timeout=None) as response:
            feed = Feed(response.aiter_lines())
            await feed.wait_for(lambda e: e["type"] == "ready")  # subscribed from here on
            yield feed

    async def task(self, session: str) -> dict[str, Any] | None:
        response = await self.client.get(f"/v1/session/{session}/task")
        if response.status_code == 404:
            return None
        assert response.status_code == 200, response.text
        return dict(response.json()["task"])


def ended(session: str) -> Callable[[dict[str, Any]], bool]:
    return lambda e: e["type"] == "run_ended" and e["session_id"] == f"chat-{session}"


@asynccontextmanager
async def fleet(
    tmp_path: Path, url: str, nursery: trio.Nursery, names: tuple[str, ...]
) -> AsyncIterator[dict[str, Node]]:
    work = tmp_path / "work"
    work.mkdir()
    env = {**os.environ, "AGENTRT_FLEET_LEASE": LEASE}
    processes = {
        name: DaemonProcess(
            socket_path=tmp_path / name / "d.sock",
            state_dir=tmp_path / name / "state",
            workdir=work,
            log_path=tmp_path / f"{name}.log",
            extra_args=("--store", url, "--http", "127.0.0.1:0"),
            env=env,
        )
        for name in names
    }
    said: dict[str, str] = {}

    async def start(name: str) -> None:
        said[name] = await processes[name].start(nursery, ready=b"web chat on")

    async with trio.open_nursery() as starting:
        for name in names:
            starting.start_soon(start, name)
    async with AsyncExitStack() as stack:
        nodes = {}
        for name, process in processes.items():
            token = load_or_create_token(process.state_dir)
            client = await stack.enter_async_context(
                httpx.AsyncClient(
                    base_url=http_base(said[name]),
                    headers={"Authorization": f"Bearer {token}"},
                    timeout=STEP,
                )
            )
            base = http_base(said[name])
            nodes[name] = Node(name, process, client, base.removeprefix("http://"))
        try:
            yield nodes
        finally:
            for process in processes.values():
                if process.alive:
                    await process.terminate()


async def test_three_daemons_share_runs_questions_pauses_and_a_killed_daemons_tasks(
    tmp_path: Path, postgres_url: str, nursery: trio.Nursery
) -> None:
    async with fleet(tmp_path, postgres_url, nursery, ("a", "b", "c")) as nodes:
        a, b, c = nodes["a"], nodes["b"], nodes["c"]
        work = tmp_path / "work"

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
        assert await poll_until_async(lambda: _interrupted(c, "chat-kill"), STEP)
        task = await c.task("chat-kill")
        assert task is not None and task["cause"] == "disconnect"
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


async def _interrupted(node: Node, session: str) -> bool:
    task = await node.task(session)
    return task is not None and task["status"] == "interrupted"


async def poll_until_async(ready: Callable[[], Any], seconds: float) -> bool:
    """`poll_until` for an async check (the state of other processes offers no event)."""
    result = False

    async def check() -> None:
        nonlocal result
        result = await ready()

    with trio.move_on_after(seconds):
        while True:
            await check()
            if result:
                return True
            await trio.sleep(0.1)
    return False

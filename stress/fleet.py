"""A fleet of three daemons on one PostgreSQL store, under kills, races and misrouted answers.

Three real daemon processes share one database schema, each serving the HTTP
API, as behind a load balancer that sends each request anywhere. A seeded
schedule runs three kinds of step:

* **simultaneous resumes** (``--races``): a parked task waiting for its shell
  call's confirmation is resumed, with the answer, through two different
  daemons at the same moment. Correct when the call ran once: one daemon ran
  the task and the other refused (busy) or found it done. A *double run* (the
  marker ran twice, or both started it) is a failure.
* **answers at the wrong daemon** (``--answers``): a run on one daemon asks
  for a confirmation, and the answer is sent to another. Correct when the run
  finishes, having done what was confirmed exactly once.
* **kills** (``--fleet-kills``): a run on one daemon commits a shell call
  (confirmed through another daemon) and is sleeping in a second call when its
  daemon is killed with SIGKILL. Correct when, its lease run out, the task is
  interrupted with cause ``disconnect``, another daemon resumes it to the end,
  and the committed call never ran again. A task that is lost, or that no
  daemon can resume, is a failure. The killed daemon is started again.
* **stalls** (``--fleet-stalls``): a run on one daemon commits one of its two
  shell calls and is in the other (``sleep 3`` and then a marker) when its
  daemon is stopped with SIGSTOP. Another daemon resumes the task once it is
  interrupted, while the stalled one is still stopped, and runs it to the end;
  then the stalled daemon is continued. Correct when the stalled daemon's
  tool was dead before the task was taken (fenced: its watchdog's doing), the
  committed call never ran again, the interrupted call ran once (on the
  other daemon, shown as attempt 2), and the stalled daemon logs that it was
  fenced and joins again.

Needs PostgreSQL: ``AGENTRT_TEST_POSTGRES`` (default
``postgresql://postgres@127.0.0.1:5432/test``); the suite works in a schema of
its own and drops it. Without a database it is skipped, and says so.
"""

from __future__ import annotations

import json
import os
import random
import secrets
import signal
import time
from collections.abc import AsyncIterator
from collections.abc import Callable
from collections.abc import Mapping
from contextlib import AsyncExitStack
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import httpx
import psycopg
import trio

from agentrt.agent.toolproc import group_members
from agentrt.core.runtime import open_runtime
from agentrt.http import load_or_create_token
from agentrt.models.scripted import ScriptedModel

from ._common import STEP_TIMEOUT
from ._common import DaemonProcess
from ._common import SuiteResult
from ._common import http_base
from ._common import short_tempdir

#: The database the suite works in (a schema of its own).
POSTGRES_ENV = "AGENTRT_TEST_POSTGRES"
DEFAULT_POSTGRES = "postgresql://postgres@127.0.0.1:5432/test"
#: Seconds a daemon's lease lasts here: a killed daemon's tasks are free soon after.
LEASE = 2.0
_COUNTER = "counter"
#: What a daemon's log says once it joins the fleet again after its lease ran out.
_REJOINED = "joins again under epoch"


def postgres_base() -> str:
    """The database URL the suite (and the tests) use."""
    return os.environ.get(POSTGRES_ENV, "").strip() or DEFAULT_POSTGRES


@asynccontextmanager
async def postgres_schema(base: str) -> AsyncIterator[str]:
    """A URL of `base` whose connections use a fresh schema, dropped after."""
    schema = "agentrt_stress_" + secrets.token_hex(6)
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        yield f"{base}{'&' if '?' in base else '?'}options=-csearch_path%3D{schema}"
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


# -- the daemons and their HTTP APIs --------------------------------------------------------


@attrs.define(eq=False)
class Feed:
    """A daemon's `/v1/events` stream, read as it comes."""

    lines: AsyncIterator[str]

    async def wait_for(self, match: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        """The next event `match` accepts (the ones before it are passed over)."""
        with trio.fail_after(STEP_TIMEOUT):
            async for line in self.lines:
                if line.startswith("data: "):
                    event = json.loads(line.removeprefix("data: "))
                    if match(event):
                        return dict(event)
        raise RuntimeError("the event stream ended")


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
        """The daemon's events from now on (the stream is open once this returns)."""
        async with self.client.stream("GET", "/v1/events", timeout=None) as response:
            feed = Feed(response.aiter_lines())
            await feed.wait_for(lambda e: e["type"] == "ready")
            yield feed

    async def task(self, session: str) -> dict[str, Any] | None:
        """The pending task of `session` as this daemon's API shows it, or None."""
        response = await self.client.get(f"/v1/session/{session}/task")
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            raise RuntimeError(f"GET task of {session} on {self.name}: {response.text}")
        return dict(response.json()["task"])

    async def restart(self, nursery: trio.Nursery) -> None:
        """Start the daemon again (after a kill); its HTTP API moves to a new port."""
        said = await self.process.start(nursery, ready=b"web chat on")
        base = http_base(said)
        self.address = base.removeprefix("http://")
        self.client.base_url = httpx.URL(base)


def ended(session: str) -> Callable[[dict[str, Any]], bool]:
    """Matches the final event of the runs of `session`."""
    return lambda e: e["type"] == "run_ended" and e["session_id"] == session


def question_of(session: str) -> Callable[[dict[str, Any]], bool]:
    """Matches a question of a run of `session`."""
    return lambda e: e["type"] == "question" and e["session_id"] == session


@asynccontextmanager
async def start_fleet(
    root: Path,
    url: str,
    nursery: trio.Nursery,
    names: tuple[str, ...],
    work: Path,
    urls: Mapping[str, str] | None = None,
    lease: float = LEASE,
) -> AsyncIterator[dict[str, Node]]:
    """Daemons `names` on the store at `url`, each with its HTTP API, tools working in `work`.

    `urls` gives some of them another URL of the same store (through a proxy). A member
    whose renewals are late by 0.7 of `lease` fences itself: a test that is not about
    stalls may want a lease that a busy machine's delays never come near.
    """
    env = {**os.environ, "AGENTRT_FLEET_LEASE": str(lease)}
    urls = urls or {}
    processes = {
        name: DaemonProcess(
            socket_path=root / name / "d.sock",
            state_dir=root / name / "state",
            workdir=work,
            log_path=root / f"{name}.log",
            extra_args=("--store", urls.get(name, url), "--http", "127.0.0.1:0"),
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
            base = http_base(said[name])
            client = await stack.enter_async_context(
                httpx.AsyncClient(
                    base_url=base,
                    headers={"Authorization": f"Bearer {token}"},
                    timeout=STEP_TIMEOUT,
                )
            )
            nodes[name] = Node(name, process, client, base.removeprefix("http://"))
        try:
            yield nodes
        finally:
            for process in processes.values():
                if process.alive:
                    await process.terminate()


def _runs_of(work: Path, marker: str) -> int:
    try:
        return (work / _COUNTER).read_text().split().count(marker)
    except FileNotFoundError:
        return 0


async def wait_interrupted(node: Node, session: str, seconds: float) -> dict[str, Any] | None:
    """The task of `session` once it is interrupted (another process's state: polled)."""
    with trio.move_on_after(seconds):
        while True:
            task = await node.task(session)
            if task is None or task["status"] == "interrupted":
                return task
            await trio.sleep(0.1)
    return await node.task(session)


# -- the steps ----------------------------------------------------------------------------------


@attrs.define
class _Tally:
    races: dict[str, int] = attrs.field(factory=dict)
    answers: int = 0
    kills: int = 0
    rerun_after_kill: int = 0
    stalls: int = 0
    rerun_after_stall: int = 0
    #: Calls a stalled daemon had started that ran to their end anyway (not fenced).
    unfenced: int = 0

    def race(self, outcome: str) -> None:
        self.races[outcome] = self.races.get(outcome, 0) + 1


async def _park(url: str, root: Path, work: Path, sessions: list[str]) -> None:
    """Give each session a task waiting for its shell call's confirmation (nobody listens)."""

    async def ignore(event: object) -> None:
        await trio.lowlevel.checkpoint()

    async with open_runtime(
        root / "setup", model=ScriptedModel(word_delay=0, stream_delay=0), workdir=work, store=url
    ) as runtime:
        for session in sessions:
            ended_run = await runtime.executor.run(
                session, f"sh echo {session} >> {_COUNTER}", owner="setup", emit=ignore
            )
            if ended_run.question is None:
                raise RuntimeError(f"{session} did not park on its confirmation: {ended_run}")


async def _race(
    nodes: list[Node], session: str, work: Path, result: SuiteResult, tally: _Tally, replay: str
) -> None:
    """Resume one parked task through two daemons at once, with the answer."""
    first, second = nodes
    path = f"/v1/session/{session}/task/resume"
    answers: dict[str, int] = {}
    async with first.events() as on_first, second.events() as on_second:

        async def resume(node: Node) -> None:
            response = await node.client.post(path, json={"answer": "allow"})
            answers[node.name] = response.status_code

        async with trio.open_nursery() as nursery:
            nursery.start_soon(resume, first)
            nursery.start_soon(resume, second)
        winners = [n for n in (first, second) if answers[n.name] == 202]
        for node, feed in ((first, on_first), (second, on_second)):
            if node in winners:
                await feed.wait_for(ended(session))
    runs = _runs_of(work, session)
    statuses = sorted(answers.values())
    refused = [s for s in statuses if s != 202]
    if runs > 1 or len(winners) > 1:
        tally.race("double run")
        result.fail(f"race on {session}: ran {runs} times, answers {statuses} {replay}")
    elif runs == 1 and refused and refused[0] in (404, 409):
        tally.race("once, the other " + ("busy" if refused[0] == 409 else "found it done"))
    else:
        tally.race("unclear")
        result.fail(f"race on {session}: ran {runs} times, answers {statuses} {replay}")


async def _misrouted_answer(
    asker: Node, answerer: Node, n: int, work: Path, result: SuiteResult, replay: str
) -> None:
    """A run on `asker` asks; the answer is sent to `answerer`."""
    session = f"chat-ans{n}"
    marker = f"a{n}"
    async with asker.events() as on_asker, answerer.events() as on_answerer:
        started = await asker.client.post(
            f"/v1/session/{session}/run", json={"text": f"sh echo {marker} >> {_COUNTER}"}
        )
        if started.status_code != 202:
            result.fail(f"answers {n}: the run was refused: {started.text} {replay}")
            return
        question = await on_answerer.wait_for(question_of(session))
        answered = await answerer.client.post(
            f"/v1/questions/{question['id']}/answer", json={"value": "allow"}
        )
        end = await on_asker.wait_for(ended(session))
    runs = _runs_of(work, marker)
    if answered.status_code != 200 or end["outcome"] != "finished" or runs != 1:
        result.fail(
            f"answers {n}: asked on {asker.name}, answered on {answerer.name} "
            f"({answered.status_code}): {end['outcome']}, ran {runs} times {replay}"
        )


async def _kill_and_resume(
    victim: Node,
    helper: Node,
    rescuer: Node,
    n: int,
    work: Path,
    nursery: trio.Nursery,
    result: SuiteResult,
    tally: _Tally,
    replay: str,
) -> None:
    """Kill `victim` while its run sleeps after a committed call; `rescuer` resumes the task."""
    session = f"chat-kill{n}"
    marker = f"k{n}"
    script = f"sh echo {marker} >> {_COUNTER}; sleep 3"
    async with victim.events() as on_victim, helper.events() as on_helper:
        started = await victim.client.post(f"/v1/session/{session}/run", json={"text": script})
        if started.status_code != 202:
            result.fail(f"kill {n}: the run was refused: {started.text} {replay}")
            return
        question = await on_helper.wait_for(question_of(session))
        await helper.client.post(f"/v1/questions/{question['id']}/answer", json={"value": "allow"})
        await on_victim.wait_for(lambda e: e["type"] == "tool_result" and e["name"] == "shell")
    await victim.process.kill()
    tally.kills += 1
    task = await wait_interrupted(rescuer, session, LEASE * 5 + STEP_TIMEOUT / 3)
    if task is None:
        result.fail(f"kill {n}: the task of {session} was lost with {victim.name} {replay}")
    elif (task["status"], task["cause"]) != ("interrupted", "disconnect"):
        result.fail(f"kill {n}: the task of {session} is still {task['status']} {replay}")
    else:
        async with rescuer.events() as on_rescuer:
            resumed = await rescuer.client.post(f"/v1/session/{session}/task/resume", json={})
            if resumed.status_code != 202:
                result.fail(f"kill {n}: {rescuer.name} could not resume: {resumed.text} {replay}")
            else:
                end = await on_rescuer.wait_for(ended(session))
                if end["outcome"] != "finished":
                    result.fail(f"kill {n}: the resumed run ended {end['outcome']} {replay}")
        runs = _runs_of(work, marker)
        if runs != 1:
            tally.rerun_after_kill += 1
            result.fail(f"kill {n}: the committed call ran {runs} times {replay}")
    await victim.restart(nursery)


async def _poll(condition: Callable[[], bool], seconds: float) -> bool:
    """Another process's doing: whether `condition` holds within `seconds` (polled)."""
    with trio.move_on_after(seconds):
        while True:
            if condition():
                return True
            await trio.sleep(0.02)
    return condition()


async def _stall_and_resume(
    victim: Node, rescuer: Node, n: int, work: Path, result: SuiteResult, tally: _Tally, replay: str
) -> None:
    """SIGSTOP `victim` in a tool call after a committed one; `rescuer` resumes the task."""
    session = f"chat-stall{n}"
    first, second = f"c{n}", f"s{n}"
    script = f"sh echo {first} >> {_COUNTER}; sh sleep 3 && echo {second} >> {_COUNTER}"
    assert victim.process.process is not None
    pid = victim.process.process.pid
    prompts: list[str] = []
    async with victim.events() as on_victim, rescuer.events() as on_rescuer:
        started = await victim.client.post(f"/v1/session/{session}/run", json={"text": script})
        if started.status_code != 202:
            result.fail(f"stall {n}: the run was refused: {started.text} {replay}")
            return
        # Both calls run in one round; the questions come in either order.
        answered: set[str] = set()
        for _ in range(2):
            question = await on_rescuer.wait_for(
                lambda e: question_of(session)(e) and e["id"] not in answered
            )
            answered.add(question["id"])
            await rescuer.client.post(
                f"/v1/questions/{question['id']}/answer", json={"value": "allow"}
            )
        quick = await on_victim.wait_for(
            lambda e: e["type"] == "tool_call" and f"echo {first} " in str(e["arguments"])
        )
        # Committed once its result is out (and its group gone from the ledger).
        await on_victim.wait_for(
            lambda e: e["type"] == "tool_result" and e["call_id"] == quick["call_id"]
        )
    tools = victim.process.state_dir / "tools"

    def groups() -> list[int]:
        return [int(json.loads(p.read_text())["pgid"]) for p in tools.glob("*.json")]

    if not await _poll(lambda: bool(groups()), STEP_TIMEOUT / 3):
        result.fail(f"stall {n}: no tool group of {victim.name} was recorded {replay}")
        return
    pgid = groups()[0]
    rejoined = victim.process.log_text().count(_REJOINED)
    os.kill(pid, signal.SIGSTOP)
    tally.stalls += 1
    try:
        if not await _poll(lambda: not group_members(pgid), LEASE * 2):
            tally.unfenced += 1
            result.fail(f"stall {n}: {victim.name}'s tool still ran past its lease {replay}")
        task = await wait_interrupted(rescuer, session, LEASE * 5 + STEP_TIMEOUT / 3)
        if task is None or (task["status"], task["cause"]) != ("interrupted", "disconnect"):
            result.fail(f"stall {n}: the task of {session} is {task} {replay}")
            return
        async with rescuer.events() as on_rescuer:
            resumed = await rescuer.client.post(f"/v1/session/{session}/task/resume", json={})
            if resumed.status_code != 202:
                result.fail(f"stall {n}: {rescuer.name} could not resume: {resumed.text} {replay}")
                return
            while True:  # every confirmation the resumed run asks is allowed
                event = await on_rescuer.wait_for(
                    lambda e: e["type"] in ("question", "run_ended") and e["session_id"] == session
                )
                if event["type"] == "run_ended":
                    end = event
                    break
                prompts.append(event["prompt"])
                await rescuer.client.post(
                    f"/v1/questions/{event['id']}/answer", json={"value": "allow"}
                )
            if not any("may already have run (attempt 2)" in p for p in prompts):
                result.fail(f"stall {n}: the call was not shown as attempt 2: {prompts} {replay}")
            if end["outcome"] != "finished":
                result.fail(f"stall {n}: the resumed run ended {end['outcome']} {replay}")
    finally:
        os.kill(pid, signal.SIGCONT)
    if not await _poll(
        lambda: victim.process.log_text().count(_REJOINED) > rejoined, STEP_TIMEOUT / 3
    ):
        result.fail(f"stall {n}: {victim.name} does not say it was fenced {replay}")
    runs = (_runs_of(work, first), _runs_of(work, second))
    if runs[0] != 1:
        tally.rerun_after_stall += 1
        result.fail(
            f"stall {n}: the committed call ran {runs[0]} times (asked on resume: {prompts}) "
            f"{replay}"
        )
    if runs[1] != 1:
        tally.unfenced += 1
        result.fail(f"stall {n}: the interrupted call ran {runs[1]} times {replay}")


async def run_fleet(
    races: int, answers: int, kills: int, seed: int, stalls: int = 0
) -> SuiteResult:
    """Run the steps on three daemons sharing one PostgreSQL schema; count what went wrong."""
    result = SuiteResult(
        "fleet", "steps (races, answers, kills, stalls)", "double runs, lost or wrong", seed=seed
    )
    started = time.monotonic()
    replay = (
        f"(replay: python -m stress --only fleet --seed {seed} --races {races} "
        f"--answers {answers} --fleet-kills {kills} --fleet-stalls {stalls})"
    )
    base = postgres_base()
    try:
        with psycopg.connect(base, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        result.notes.append(
            f"skipped: no PostgreSQL answers at {base} ({' '.join(str(exc).split())}); set "
            f"{POSTGRES_ENV} to a database URL"
        )
        result.detail = "skipped"
        return result
    rng = random.Random(seed)
    tally = _Tally()
    with short_tempdir("stf-") as root:
        work = root / "work"
        work.mkdir()
        async with postgres_schema(base) as url, trio.open_nursery() as nursery:
            raced = [f"chat-race{n}" for n in range(races)]
            await _park(url, root, work, raced)
            async with start_fleet(root, url, nursery, ("a", "b", "c"), work) as nodes:
                everyone = list(nodes.values())
                steps = ["race"] * races + ["answer"] * answers + ["kill"] * kills
                steps += ["stall"] * stalls
                rng.shuffle(steps)
                for step in steps:
                    picked = rng.sample(everyone, 3)
                    if step == "race":
                        await _race(picked[:2], raced.pop(), work, result, tally, replay)
                    elif step == "stall":
                        await _stall_and_resume(
                            picked[0], picked[1], tally.stalls, work, result, tally, replay
                        )
                    elif step == "answer":
                        tally.answers += 1
                        await _misrouted_answer(
                            picked[0], picked[1], tally.answers, work, result, replay
                        )
                    else:
                        await _kill_and_resume(
                            picked[0],
                            picked[1],
                            picked[2],
                            tally.kills,
                            work,
                            nursery,
                            result,
                            tally,
                            replay,
                        )
                    result.done += 1
            nursery.cancel_scope.cancel()
    doubles = tally.races.get("double run", 0)
    result.detail = (
        f"double runs: {doubles}; committed calls re-run after a kill: {tally.rerun_after_kill}"
    )
    if stalls:
        result.detail += (
            f"; after a stall: {tally.rerun_after_stall}; stalled tools not fenced: "
            f"{tally.unfenced}"
        )
    result.notes.append(
        f"{races} simultaneous resumes on two daemons: {dict(sorted(tally.races.items()))}"
    )
    result.notes.append(f"{tally.answers} answers sent to another daemon than the asking run's")
    result.notes.append(
        f"{tally.kills} daemons killed (SIGKILL) mid-run, each task resumed on another daemon"
    )
    if stalls:
        result.notes.append(
            f"{tally.stalls} daemons stopped (SIGSTOP) past their lease in a tool call, each "
            "task resumed on another daemon meanwhile, then continued"
        )
    result.seconds = time.monotonic() - started
    return result

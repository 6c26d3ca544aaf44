"""One daemon process, four front-ends at once: a terminal window, the web API, Telegram, Discord.

The daemon runs as a real process with ``--http``, ``--telegram`` and
``--discord``, its bots pointed at the Telegram and Discord servers of
``tests/fakes`` on loopback. Each front-end starts a run that needs a
confirmation and asks a question, at the same moment; each sees only its own
questions and answers them, and no front-end waits on another. Then the
terminal window closes with its questions open: its task is kept, the others
go on with new runs meanwhile, and the web API resumes the closed window's
task to the end.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from collections.abc import Awaitable
from collections.abc import Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from typing import Generic
from typing import TypeVar

import attrs
import httpx
import pytest
import trio

from agentrt import Cause
from agentrt import Outcome
from agentrt import RequestKind
from agentrt.http import load_or_create_token
from agentrt.protocol.client import Client
from agentrt.protocol.client import new_window_hash
from agentrt.protocol.frames import AnswerFrame
from agentrt.protocol.frames import AskFrame
from agentrt.protocol.frames import AskWithdrawn
from agentrt.protocol.frames import DaemonFrame
from agentrt.protocol.frames import EndedFrame
from agentrt.protocol.frames import PendingAction
from agentrt.protocol.frames import PendingList
from agentrt.protocol.frames import PendingRequest
from agentrt.protocol.frames import Run
from agentrt.protocol.frames import TaskFrame
from agentrt.protocol.frames import ToolResultFrame

from .fakes.discord_server import TOKEN as DISCORD_TOKEN
from .fakes.discord_server import FakeDiscord
from .fakes.telegram_server import TOKEN as TELEGRAM_TOKEN
from .fakes.telegram_server import FakeTelegram

pytestmark = pytest.mark.e2e

#: The whole test, daemon start and stop included.
TIMEOUT = 30
TG_USER = 42
TG_CHAT = 42
DC_USER = "1001"
DC_CHANNEL = "5000"
WEB_ID = "side"
WEB_SESSION = f"chat-{WEB_ID}"
TG_SESSION = f"tg-{TG_CHAT}"
DC_SESSION = f"dc-{DC_CHANNEL}"
#: What each front-end names its runs' files and questions with; none may see another's.
MARKS = ("tui", "web", "tg", "dc")

T = TypeVar("T")
R = TypeVar("R")


# --------------------------------------------------------------------------- observing


@attrs.define(eq=False)
class Feed(Generic[T]):
    """Everything one front-end received, in order, and a wait for what should come."""

    items: list[T] = attrs.field(factory=list)
    ended: bool = False
    _changed: trio.Event = attrs.field(factory=trio.Event)

    def add(self, item: T) -> None:
        self.items.append(item)
        self._poke()

    def end(self) -> None:
        self.ended = True
        self._poke()

    def _poke(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def wait_for(self, find: Callable[[list[T]], R | None]) -> R:
        """Wait until `find(items)` is not None; return it."""
        while True:
            found = find(self.items)
            if found is not None:
                return found
            if self.ended:
                raise AssertionError(f"the feed ended before it came; it had {self.items!r}")
            await self._changed.wait()


@attrs.define(eq=False)
class Gate:
    """Holds the flows once each has its confirmation open, until the test has looked."""

    expected: int
    arrived: list[str] = attrs.field(factory=list)
    all_here: trio.Event = attrs.field(factory=trio.Event)
    go: trio.Event = attrs.field(factory=trio.Event)

    async def arrive(self, who: str) -> None:
        self.arrived.append(who)
        if len(self.arrived) == self.expected:
            self.all_here.set()
        await self.go.wait()


async def read_frames(client: Client, feed: Feed[DaemonFrame]) -> None:
    async for frame in client:
        feed.add(frame)
    feed.end()


async def read_events(http: httpx.AsyncClient, feed: Feed[dict[str, Any]]) -> None:
    timeout = httpx.Timeout(5.0, read=None)
    async with http.stream("GET", "/v1/events", timeout=timeout) as response:
        assert response.status_code == 200, await response.aread()
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                feed.add(json.loads(line.removeprefix("data: ")))
    feed.end()


def run_ended(task_hash: str) -> Callable[[list[dict[str, Any]]], dict[str, Any] | None]:
    def find(events: list[dict[str, Any]]) -> dict[str, Any] | None:
        return next(
            (e for e in events if e["type"] == "run_ended" and e["task_hash"] == task_hash), None
        )

    return find


async def sessions(http: httpx.AsyncClient) -> dict[str, dict[str, Any]]:
    response = await http.get("/v1/sessions")
    assert response.status_code == 200, response.text
    return {s["session_id"]: s for s in response.json()["sessions"]}


def active(listed: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The listed sessions with a run going on or a pending task (finished ones stay listed)."""
    return {k: v for k, v in listed.items() if v["running"] or v["status"] is not None}


async def sessions_when(
    http: httpx.AsyncClient, settled: Callable[[dict[str, dict[str, Any]]], bool]
) -> dict[str, dict[str, Any]]:
    """`GET /v1/sessions` once `settled` holds for it.

    Nothing is pushed to an HTTP client when a run of another front-end ends,
    so, as a dashboard would, this reads the list again until it shows the
    change; the pause between reads only paces them and decides nothing.
    """
    while True:
        listed = await sessions(http)
        if settled(listed):
            return listed
        await trio.sleep(0.02)


def waits(listed: dict[str, dict[str, Any]], session_id: str) -> str:
    """``kind@who`` of each open question of a session, sorted: who holds what."""
    entry = listed[session_id]
    return "+".join(sorted(f"{w['kind']}@{w['who']}" for w in entry["waiting_on"]))


# --------------------------------------------------------------------------- the daemon


@attrs.frozen
class Daemon:
    process: trio.Process
    socket: Path
    base_url: str
    stderr: bytearray


async def drain(stream: trio.abc.ReceiveStream, into: bytearray) -> None:
    while chunk := await stream.receive_some():
        into += chunk


@asynccontextmanager
async def daemon_process(
    short_dir: Path, state: Path, work: Path, tg: FakeTelegram, dc: FakeDiscord
) -> AsyncIterator[Daemon]:
    socket = short_dir / "run" / "daemon.sock"
    argv = [sys.executable, "-m", "agentrt.daemon", "--socket", str(socket)]
    argv += ["--state-dir", str(state), "--workdir", str(work)]
    argv += ["--http", "127.0.0.1:0", "--telegram", "--discord"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTRT_")}
    env |= {
        "AGENTRT_TELEGRAM_TOKEN": TELEGRAM_TOKEN,
        "AGENTRT_TELEGRAM_ALLOW": str(TG_USER),
        "AGENTRT_TELEGRAM_API": tg.base_url,
        "AGENTRT_DISCORD_TOKEN": DISCORD_TOKEN,
        "AGENTRT_DISCORD_ALLOW": DC_USER,
        "AGENTRT_DISCORD_API": dc.api_url,
        "AGENTRT_DISCORD_GATEWAY": dc.gateway_url,
    }
    process = await trio.lowlevel.open_process(
        argv, env=env, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    said = bytearray()
    try:
        assert process.stderr is not None
        while b"Telegram and Discord bot listening" not in said:
            chunk = await process.stderr.receive_some()
            if not chunk:
                raise AssertionError(f"the daemon exited; it said: {said.decode()}")
            said += chunk
        found = re.search(r"web chat on (http://127\.0\.0\.1:\d+)/", said.decode())
        assert found, said.decode()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(drain, process.stderr, said)
            yield Daemon(process, socket, found.group(1), said)
            nursery.cancel_scope.cancel()
    finally:
        if process.returncode is None:
            process.kill()
        with trio.CancelScope(shield=True):
            await process.wait()


# --------------------------------------------------------------------------- the front-ends


@attrs.define
class Report:
    """What one front-end saw of one run, and how it ended: one part of a summary line."""

    name: str
    asked: list[str] = attrs.field(factory=list)
    parked: str | None = None
    #: How many times its run wrote its file (a resumed run must not write it again).
    writes: int = 0
    ended: str = "?"

    def __str__(self) -> str:
        parked = f", parked {self.parked!r}, resumed by the answer" if self.parked else ""
        writes = "once" if self.writes == 1 else f"{self.writes} times"
        return f"{self.name} asked {'+'.join(self.asked)}{parked}, wrote {writes} -> {self.ended}"


@attrs.define(eq=False)
class Terminal:
    """A terminal window: the daemon's socket client, as agenttui uses it."""

    client: Client
    feed: Feed[DaemonFrame] = attrs.field(factory=Feed)
    sessions: list[str] = attrs.field(factory=list)
    #: The reading task's scope: cancelled before the window closes.
    reader: trio.CancelScope = attrs.field(factory=trio.CancelScope)

    async def read(self) -> None:
        with self.reader:
            await read_frames(self.client, self.feed)

    async def start(self, text: str) -> tuple[TaskFrame, list[AskFrame]]:
        """Start a run; wait for its confirmation and its inline question."""
        mark = len(self.feed.items)
        await self.client.send(Run(text))
        task = await self.feed.wait_for(
            lambda items: next((f for f in items[mark:] if isinstance(f, TaskFrame)), None)
        )
        self.sessions.append(task.session_id)

        def both(items: list[DaemonFrame]) -> list[AskFrame] | None:
            asks = [f for f in items[mark:] if isinstance(f, AskFrame) and f.task == task.task_hash]
            return asks if len(asks) == 2 else None

        asks = sorted(await self.feed.wait_for(both), key=lambda a: a.kind.value)
        assert [a.kind for a in asks] == [RequestKind.CONFIRM, RequestKind.QUESTION]
        return task, asks

    async def flow(self, n: int, gate: Gate) -> Report:
        report = Report("tui")
        task, (confirm, question) = await self.start(f"write tui-{n}.txt x; ask tui question {n}?")
        report.asked = [a.kind.value for a in (confirm, question)]
        assert confirm.prompt.startswith("write 1 bytes to ") and f"tui-{n}.txt" in confirm.prompt
        assert question.prompt == f"tui question {n}?"
        await gate.arrive("tui")
        await self.client.send(AnswerFrame(confirm.id, "allow"))
        await self.client.send(AnswerFrame(question.id, f"tui answer {n}"))
        ended = await self.feed.wait_for(
            lambda items: next(
                (f for f in items if isinstance(f, EndedFrame) and f.task_hash == task.task_hash),
                None,
            )
        )
        assert ended.outcome is Outcome.FINISHED, ended
        assert ended.text is not None and f"You answered: tui answer {n}" in ended.text
        assert not ended.pending_kept
        report.writes = sum(
            1
            for f in self.feed.items
            if isinstance(f, ToolResultFrame)
            and f.task_hash == task.task_hash
            and f.name == "write_file"
        )
        report.ended = ended.outcome.value
        return report


@attrs.define(eq=False)
class Web:
    """The web front-end: the HTTP API with the bearer token, and its event stream."""

    http: httpx.AsyncClient
    events: Feed[dict[str, Any]]

    async def started(self, path: str, body: dict[str, Any]) -> str:
        response = await self.http.post(path, json=body)
        assert response.status_code == 202, response.text
        task_hash: str = response.json()["task_hash"]
        return task_hash

    async def flow(self, n: int, gate: Gate) -> Report:
        report = Report("web")
        text = f"write web-{n}.txt x; ask web question {n}?"
        first = await self.started(f"/v1/session/{WEB_ID}/run", {"text": text})
        question = await self.events.wait_for(
            lambda events: next(
                (e for e in events if e["type"] == "question" and e["task_hash"] == first), None
            )
        )
        assert question["session_id"] == WEB_SESSION
        assert question["kind"] == "confirm" and f"web-{n}.txt" in question["prompt"]
        report.asked.append(question["kind"])
        await gate.arrive("web")
        answered = await self.http.post(
            f"/v1/questions/{question['id']}/answer", json={"value": "allow"}
        )
        assert answered.json() == {"id": question["id"], "answered": True}
        parked = await self.events.wait_for(run_ended(first))
        assert (parked["outcome"], parked["pending_kept"]) == ("awaiting_answer", True), parked
        report.parked = parked["question"]
        resumed = await self.started(
            f"/v1/session/{WEB_ID}/task/resume", {"answer": f"web answer {n}"}
        )
        ended = await self.events.wait_for(run_ended(resumed))
        assert ended["outcome"] == "finished", ended
        assert f"You answered: web answer {n}" in ended["text"]
        report.writes = sum(
            1
            for e in self.events.items
            if e["type"] == "tool_result"
            and e["task_hash"] in (first, resumed)
            and e["name"] == "write_file"
        )
        report.ended = ended["outcome"]
        return report


@attrs.frozen
class Chat:
    """A chat service's fake as the owner uses it, with its names for what both services have."""

    name: str
    #: The origin, which names the files and questions of its runs.
    tag: str
    fake: FakeTelegram | FakeDiscord
    chat: Any
    user: Any
    #: A message's chat and text, and a button's label and data, as the service names them.
    chat_key: str
    text_key: str
    label_key: str
    data_key: str

    def posted(self) -> dict[Any, dict[str, Any]]:
        """The bot's messages in the chat, by id."""
        return {mid: m for mid, m in self.fake.messages.items() if m[self.chat_key] == self.chat}

    def texts(self) -> list[str]:
        return [m[self.text_key] for m in self.posted().values()]

    def says(self, text: str) -> None:
        self.fake.user_says(self.chat, self.user, text)

    def press(self, message_id: Any, label: str) -> None:
        [button] = [b for b in self.fake.buttons(message_id) if b[self.label_key] == label]
        self.fake.press(self.user, message_id, button[self.data_key])


def telegram_chat(tg: FakeTelegram) -> Chat:
    return Chat("telegram", "tg", tg, TG_CHAT, TG_USER, "chat_id", "text", "text", "callback_data")


def discord_chat(dc: FakeDiscord) -> Chat:
    return Chat(
        "discord", "dc", dc, DC_CHANNEL, DC_USER, "channel_id", "content", "label", "custom_id"
    )


async def chat_flow(chat: Chat, n: int, gate: Gate) -> Report:
    report = Report(chat.name)
    file = f"{chat.tag}-{n}.txt"
    chat.says(f"write {file} x; ask {chat.tag} question {n}?")

    def confirmation() -> Any:
        return next(
            (
                mid
                for mid, m in chat.posted().items()
                if chat.fake.buttons(mid)
                and "Allow this?" in m[chat.text_key]
                and file in m[chat.text_key]
            ),
            None,
        )

    message_id = await chat.fake.wait_for(confirmation)
    report.asked.append("confirm")
    await gate.arrive(chat.name)
    chat.press(message_id, "Allow once")
    asked = f"❓ {chat.tag} question {n}?"
    notice = await chat.fake.wait_for(
        lambda: next((t for t in chat.texts() if t.startswith(asked)), None)
    )
    report.parked = notice.splitlines()[0].removeprefix("❓ ")
    chat.says(f"{chat.tag} answer {n}")
    done = f"You answered: {chat.tag} answer {n}"
    await chat.fake.wait_for(lambda: any(t.startswith("Done.") and done in t for t in chat.texts()))
    # Every write asks first: one confirmation means one write (the resumed run did not redo it).
    confirmations = [t for t in chat.texts() if "Allow this?" in t and f"{chat.tag}-{n}" in t]
    report.writes = len(confirmations)
    assert "Allowed once" in chat.posted()[message_id][chat.text_key]
    report.ended = "finished"
    return report


async def together(
    gate: Gate, flows: dict[str, Callable[[], Awaitable[Report]]], look: Callable[[], Awaitable[R]]
) -> tuple[list[Report], R]:
    """Run `flows` at once; once each has its confirmation open, `look`, then let them finish."""
    done: dict[str, Report] = {}

    async def keep(name: str, flow: Callable[[], Awaitable[Report]]) -> None:
        done[name] = await flow()

    async with trio.open_nursery() as nursery:
        for name, flow in flows.items():
            nursery.start_soon(keep, name, flow)
        await gate.all_here.wait()
        seen = await look()
        gate.go.set()
    return [done[name] for name in flows], seen


# --------------------------------------------------------------------------- the test


async def test_four_front_ends_ask_side_by_side_and_a_closed_window_leaves_its_task_to_http(
    tmp_path: Path, short_dir: Path
) -> None:
    state, work = tmp_path / "state", tmp_path / "work"
    work.mkdir()
    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as services:
            tg = FakeTelegram()
            await services.start(tg.run)
            dc = FakeDiscord()
            await services.start(dc.run)
            async with daemon_process(short_dir, state, work, tg, dc) as daemon:
                await side_by_side(daemon, state, work, tg, dc)
                daemon.process.send_signal(signal.SIGTERM)
                assert await daemon.process.wait() == 0, daemon.stderr.decode()
            assert b"Traceback" not in daemon.stderr, daemon.stderr.decode()
            services.cancel_scope.cancel()


async def side_by_side(
    daemon: Daemon, state: Path, work: Path, tg: FakeTelegram, dc: FakeDiscord
) -> None:
    token = load_or_create_token(state)
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        httpx.AsyncClient(base_url=daemon.base_url, headers=headers) as http,
        await Client.connect(daemon.socket, window=new_window_hash()) as window,
        await Client.connect(daemon.socket, window=new_window_hash()) as idle,
        trio.open_nursery() as readers,
    ):
        terminal = Terminal(window)
        idle_feed: Feed[DaemonFrame] = Feed()
        web = Web(http, Feed())
        readers.start_soon(terminal.read)
        readers.start_soon(read_frames, idle, idle_feed)
        readers.start_soon(read_events, http, web.events)
        await web.events.wait_for(lambda events: events[0] if events else None)
        assert web.events.items[0] == {"type": "ready", "questions": []}

        # -- phase 1: four runs start at once, each asks its own front-end ----------
        async def look() -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
            listed = await sessions(http)
            questions: list[dict[str, Any]] = (await http.get("/v1/questions")).json()["questions"]
            return listed, questions

        gate = Gate(4)
        reports, (listed, questions) = await together(
            gate,
            {
                "tui": lambda: terminal.flow(1, gate),
                "web": lambda: web.flow(1, gate),
                "telegram": lambda: chat_flow(telegram_chat(tg), 1, gate),
                "discord": lambda: chat_flow(discord_chat(dc), 1, gate),
            },
            look,
        )
        [tui_1] = terminal.sessions
        # Every confirmation was open at the same moment (the gate saw each front-end hold
        # its own). HTTP sees only its own session: not the live window's, not the chats'.
        assert sorted(listed) == [WEB_SESSION]
        assert listed[WEB_SESSION]["running"]
        assert waits(listed, WEB_SESSION) == "confirm@web"
        # The web lists only its own question, not the three others open at that moment.
        assert [(q["session_id"], q["kind"]) for q in questions] == [(WEB_SESSION, "confirm")]
        # Every run finished: no session is left running or pending.
        finished = await sessions_when(http, lambda listed: not active(listed))
        # The web's conversation is kept, finished; the live window's is still not HTTP's.
        assert list(finished) == [WEB_SESSION] and finished[WEB_SESSION]["messages"] > 0
        for mark in MARKS:
            assert (work / f"{mark}-1.txt").read_text() == "x"
        line = (
            f"phase 1: {len(reports)} confirmations open at once, each held by its own front-end; "
        )
        line += "; ".join(map(str, reports))
        print(line)
        assert line == (
            "phase 1: 4 confirmations open at once, each held by its own front-end; "
            "tui asked confirm+question, wrote once -> finished; "
            "web asked confirm, parked 'web question 1?', resumed by the answer, "
            "wrote once -> finished; "
            "telegram asked confirm, parked 'tg question 1?', resumed by the answer, "
            "wrote once -> finished; "
            "discord asked confirm, parked 'dc question 1?', resumed by the answer, "
            "wrote once -> finished"
        )

        # -- phase 2: the window closes mid-question; the others go on meanwhile -----
        task_2, asks_2 = await terminal.start("write tui-2.txt x; ask tui question 2?")
        tui_2 = task_2.session_id
        gate = Gate(3)
        reports, (listed, questions) = await together(
            gate,
            {
                "web": lambda: web.flow(2, gate),
                "telegram": lambda: chat_flow(telegram_chat(tg), 2, gate),
                "discord": lambda: chat_flow(discord_chat(dc), 2, gate),
            },
            look,
        )
        assert sorted(listed) == [WEB_SESSION]  # the live window's task is not HTTP's to see
        assert waits(listed, WEB_SESSION) == "confirm@web"
        assert [(q["session_id"], q["kind"]) for q in questions] == [(WEB_SESSION, "confirm")]
        # The others finished while the window's questions stayed open: nobody answered those.
        await sessions_when(http, lambda listed: not active(listed))
        withdrawn = {f.id for f in terminal.feed.items if isinstance(f, AskWithdrawn)}
        assert [a.kind.value for a in asks_2 if a.id not in withdrawn] == ["confirm", "question"]

        terminal.reader.cancel()
        await window.aclose()
        # The window is gone: its kept task is the owner's to see and resume over HTTP.
        listed = await sessions_when(
            http, lambda listed: tui_2 in listed and not listed[tui_2]["running"]
        )
        assert list(active(listed)) == [tui_2]
        # The closed window's finished conversation is the owner's to read over HTTP now.
        assert listed[tui_1]["status"] is None and listed[tui_1]["title"].startswith("write tui-1")
        kept = (await http.get(f"/v1/session/{tui_2}/task")).json()["task"]
        assert (kept["status"], kept["cause"], kept["running"]) == (
            "interrupted",
            "disconnect",
            False,
        )
        # A window nobody holds any more: another terminal window may resume it too.
        await idle.send(PendingRequest(PendingAction.LIST))
        pending = await idle_feed.wait_for(
            lambda items: next((f for f in items if isinstance(f, PendingList)), None)
        )
        assert [(p.session, p.cause) for p in pending.tasks] == [(tui_2, Cause.DISCONNECT)]

        # Resumed over HTTP, answering each saved question, until it finishes.
        answered: list[str] = []
        for _ in range(3):
            saved = (await http.get(f"/v1/session/{tui_2}/task")).json()["task"]
            assert not saved["running"]
            kind = saved["question"]["kind"]
            answer = "allow" if kind == "confirm" else "tui answer 2"
            resumed = await web.started(f"/v1/session/{tui_2}/task/resume", {"answer": answer})
            ended = await web.events.wait_for(run_ended(resumed))
            answered.append(kind)
            if ended["outcome"] != "awaiting_answer":
                break
            assert ended["pending_kept"]
        assert ended["outcome"] == "finished", ended
        assert "You answered: tui answer 2" in ended["text"]
        gone = await http.get(f"/v1/session/{tui_2}/task")
        assert gone.status_code == 404
        assert active(await sessions(http)) == {}
        for mark in MARKS:
            assert (work / f"{mark}-2.txt").read_text() == "x"
        line = (
            f"phase 2: tui closed with {len(asks_2)} questions open -> "
            f"{kept['status']} ({kept['cause']}), task kept, listed by another window; "
            "meanwhile " + "; ".join(map(str, reports))
        )
        tui_writes = sum(
            1
            for e in web.events.items
            if e["type"] == "tool_result" and e["session_id"] == tui_2 and e["name"] == "write_file"
        )
        line += f"; tui task resumed over HTTP answering {'+'.join(sorted(answered))}"
        line += f", wrote {'once' if tui_writes == 1 else f'{tui_writes} times'}"
        line += f" -> {ended['outcome']}"
        print(line)
        assert line == (
            "phase 2: tui closed with 2 questions open -> interrupted (disconnect), task kept, "
            "listed by another window; meanwhile "
            "web asked confirm, parked 'web question 2?', resumed by the answer, "
            "wrote once -> finished; "
            "telegram asked confirm, parked 'tg question 2?', resumed by the answer, "
            "wrote once -> finished; "
            "discord asked confirm, parked 'dc question 2?', resumed by the answer, "
            "wrote once -> finished; "
            "tui task resumed over HTTP answering confirm+question, wrote once -> finished"
        )

        # -- what each front-end received, over both phases ------------------------
        tui_asks = [f for f in terminal.feed.items if isinstance(f, AskFrame)]
        assert {a.session for a in tui_asks} == {tui_1, tui_2}
        assert all(
            f.session_id in (tui_1, tui_2)
            for f in terminal.feed.items
            if isinstance(f, TaskFrame | EndedFrame)
        )
        assert all(isinstance(f, PendingList) for f in idle_feed.items)
        web_questions = [e for e in web.events.items if e["type"] == "question"]
        assert {e["session_id"] for e in web_questions} == {WEB_SESSION}
        web_runs = {e["session_id"] for e in web.events.items if e["type"] == "task_started"}
        assert web_runs == {WEB_SESSION, tui_2}  # its own, and the task it resumed
        tg_sent = tg.calls_of("sendMessage") + tg.calls_of("editMessageText")
        assert {c.payload["chat_id"] for c in tg_sent} == {TG_CHAT}
        assert foreign(tg.texts(TG_CHAT), "tg") == []
        dc_sent = dc.calls_of("create") + dc.calls_of("edit")
        assert all(c.path.startswith(f"/api/v10/channels/{DC_CHANNEL}/") for c in dc_sent)
        assert foreign(dc.contents(DC_CHANNEL), "dc") == []
        idle_asks = sum(1 for f in idle_feed.items if isinstance(f, AskFrame))
        tg_keyboards = sum(1 for m in tg.messages.values() if m["text"].startswith("🔐"))
        dc_keyboards = sum(1 for m in dc.messages.values() if "Allow this?" in m["content"])
        line = (
            f"each saw only its own: tui {len(tui_asks)} asks, idle window {idle_asks}, "
            f"web {len(web_questions)} questions, telegram {tg_keyboards} keyboards "
            f"all in chat {TG_CHAT}, discord {dc_keyboards} in channel {DC_CHANNEL}"
        )
        print(line)
        assert line == (
            "each saw only its own: tui 4 asks, idle window 0, web 2 questions, "
            "telegram 2 keyboards all in chat 42, discord 2 in channel 5000"
        )
        readers.cancel_scope.cancel()


def foreign(texts: list[str], own: str) -> list[str]:
    """The texts that name another front-end's files or questions."""
    others = [m for m in MARKS if m != own]
    return [t for t in texts if any(f"{m}-" in t or f"{m} question" in t for m in others)]

"""Sessions over the daemon socket: list finished ones in pages, show their messages,
continue them with their history, remove them; what a window and the command may see."""

from __future__ import annotations

from collections.abc import AsyncIterator
from collections.abc import Sequence
from pathlib import Path

import pytest
import trio

from agentrt import Message
from agentrt import Outcome
from agentrt import Runtime
from agentrt import ScriptedModel
from agentrt import open_runtime
from agentrt.daemon import Daemon
from agentrt.daemon import serve
from agentrt.models.messages import ModelResponse
from agentrt.models.messages import OnDelta
from agentrt.models.messages import ToolSpec
from agentrt.protocol.client import Client
from agentrt.protocol.frames import Ack
from agentrt.protocol.frames import AskFrame
from agentrt.protocol.frames import EndedFrame
from agentrt.protocol.frames import ErrorCode
from agentrt.protocol.frames import ErrorFrame
from agentrt.protocol.frames import Run
from agentrt.protocol.frames import Scope
from agentrt.protocol.frames import SessionList
from agentrt.protocol.frames import SessionMessages
from agentrt.protocol.frames import SessionsAction
from agentrt.protocol.frames import SessionsRequest

from .conftest import Recorder

TIMEOUT = 10


class RecordingModel:
    """The scripted model, remembering every conversation it was given."""

    def __init__(self) -> None:
        self.inner = ScriptedModel(word_delay=0, stream_delay=0)
        self.seen: list[tuple[Message, ...]] = []

    @property
    def name(self) -> str:
        return "recording"

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], on_delta: OnDelta
    ) -> ModelResponse:
        self.seen.append(tuple(messages))
        return await self.inner.complete(messages, tools, on_delta)


@pytest.fixture
def model() -> RecordingModel:
    return RecordingModel()


@pytest.fixture
async def runtime(tmp_path: Path, model: RecordingModel) -> AsyncIterator[Runtime]:
    async with open_runtime(tmp_path / "state", model=model, workdir=tmp_path) as rt:
        yield rt


@pytest.fixture
async def daemon(runtime: Runtime, sock_path: Path, nursery: trio.Nursery) -> Daemon:
    started: Daemon = await nursery.start(serve, sock_path, runtime)
    return started


async def finish(client: Client, text: str, session: str | None = None) -> EndedFrame:
    await client.send(Run(text, session))
    ended = await client.wait_for(EndedFrame)
    assert ended.outcome is Outcome.FINISHED, ended
    return ended


async def ask(client: Client, request: SessionsRequest) -> object:
    await client.send(request)
    return await client.receive()


async def test_a_window_lists_its_finished_sessions_and_continues_one_with_its_history(
    daemon: Daemon, model: RecordingModel
) -> None:
    with trio.fail_after(TIMEOUT):
        async with await Client.connect(daemon.socket_path, window="w-1") as window:
            first = await finish(window, "hello there")
            await finish(window, "and a second thing", first.session_id)
            other = await finish(window, "another talk")
            listed = await ask(window, SessionsRequest(SessionsAction.LIST))
            assert isinstance(listed, SessionList) and listed.next is None
            assert [(s.session, s.title, s.messages, s.status) for s in listed.sessions] == [
                (other.session_id, "another talk", 2, None),
                (first.session_id, "hello there", 4, None),
            ]
        # Yesterday's window is gone; a new one continues the conversation with its history.
        async with await Client.connect(daemon.socket_path, window="w-2") as window:
            listed = await ask(window, SessionsRequest(SessionsAction.LIST))
            assert isinstance(listed, SessionList) and len(listed.sessions) == 2
            await finish(window, "third", first.session_id)
            given = model.seen[-1]
            assert [m.content for m in given if m.role.value == "user"] == [
                "hello there",
                "and a second thing",
                "third",
            ]
            shown = await ask(window, SessionsRequest(SessionsAction.SHOW, first.session_id))
            assert isinstance(shown, SessionMessages) and shown.next is None
            assert shown.session.messages == 6
            assert [(m.seq, m.role) for m in shown.messages] == [
                (0, "user"),
                (1, "assistant"),
                (2, "user"),
                (3, "assistant"),
                (4, "user"),
                (5, "assistant"),
            ]
            assert shown.messages[4].content == "third"


async def test_messages_come_in_pages_and_a_session_in_pages_too(
    daemon: Daemon, runtime: Runtime
) -> None:
    for n in range(5):
        await runtime.executor.run("cli-long", f"turn {n}", owner="o", emit=Recorder())
    for n in range(12):
        await runtime.executor.run(f"cli-s{n:02}", f"talk {n}", owner="o", emit=Recorder())
    with trio.fail_after(TIMEOUT):
        async with await Client.connect(daemon.socket_path) as window:
            seqs: list[int] = []
            after = -1
            while True:
                page = await ask(
                    window, SessionsRequest(SessionsAction.SHOW, "cli-long", after=after, limit=3)
                )
                assert isinstance(page, SessionMessages) and len(page.messages) <= 3
                seqs += [m.seq for m in page.messages]
                if page.next is None:
                    break
                after = page.next
            assert seqs == list(range(10))
            seen: list[str] = []
            cursor: str | None = None
            while True:
                listed = await ask(
                    window, SessionsRequest(SessionsAction.LIST, limit=5, cursor=cursor)
                )
                assert isinstance(listed, SessionList)
                seen += [s.session for s in listed.sessions]
                if listed.next is None:
                    break
                cursor = listed.next
            assert sorted(seen) == sorted(["cli-long", *(f"cli-s{n:02}" for n in range(12))])
            assert len(seen) == len(set(seen)) == 13
            for bad in (
                SessionsRequest(SessionsAction.LIST, limit=0),
                SessionsRequest(SessionsAction.SHOW, "cli-long", limit=5000),
                SessionsRequest(SessionsAction.LIST, cursor="nonsense"),
                SessionsRequest(SessionsAction.SHOW),
            ):
                refused = await ask(window, bad)
                assert isinstance(refused, ErrorFrame) and refused.code is ErrorCode.INVALID
            assert isinstance(await ask(window, SessionsRequest(SessionsAction.LIST)), SessionList)


async def test_a_window_never_sees_another_live_windows_sessions_nor_other_origins(
    daemon: Daemon, runtime: Runtime
) -> None:
    await runtime.executor.run("chat-web", "hello", owner="web", emit=Recorder())
    with trio.fail_after(TIMEOUT):
        async with (
            await Client.connect(daemon.socket_path, window="w-a") as a,
            await Client.connect(daemon.socket_path, window="w-b") as b,
            await Client.connect(daemon.socket_path, scope=Scope.ALL) as command,
        ):
            mine = await finish(a, "private plans")
            listed = await ask(b, SessionsRequest(SessionsAction.LIST))
            assert listed == SessionList(())
            for request in (
                SessionsRequest(SessionsAction.SHOW, mine.session_id),
                SessionsRequest(SessionsAction.RM, mine.session_id),
                SessionsRequest(SessionsAction.SHOW, "chat-web"),
                SessionsRequest(SessionsAction.SHOW, "cli-nothing"),
            ):
                refused = await ask(b, request)
                assert isinstance(refused, ErrorFrame) and refused.code is ErrorCode.NOT_FOUND
                assert "is visible to this window" in refused.message
            # Continuing it from the other window is refused too.
            await b.send(Run("let me in", mine.session_id))
            refused = await b.receive()
            assert isinstance(refused, ErrorFrame) and refused.code is ErrorCode.NOT_FOUND
            everything = await ask(command, SessionsRequest(SessionsAction.LIST))
            assert isinstance(everything, SessionList)
            assert {s.session for s in everything.sessions} == {mine.session_id, "chat-web"}
            shown = await ask(command, SessionsRequest(SessionsAction.SHOW, "chat-web"))
            assert isinstance(shown, SessionMessages)
            assert shown.messages[0].content == "hello"
            missing = await ask(command, SessionsRequest(SessionsAction.SHOW, "chat-none"))
            assert missing == ErrorFrame(ErrorCode.NOT_FOUND, "no session chat-none", "sessions")


async def test_rm_deletes_a_finished_session_and_refuses_one_with_a_pending_task(
    daemon: Daemon, runtime: Runtime
) -> None:
    with trio.fail_after(TIMEOUT):
        async with await Client.connect(daemon.socket_path, window="w-rm") as window:
            done = await finish(window, "hello")
            await window.send(Run("ask Colour?"))
            question = await window.wait_for(AskFrame)
            removed = await ask(window, SessionsRequest(SessionsAction.RM, question.session))
            # A session this window is running is seen, and refused as busy.
            assert isinstance(removed, ErrorFrame) and removed.code is ErrorCode.STATE
            assert "is running" in removed.message
            await window.send_eof()
        async with await Client.connect(daemon.socket_path, window="w-rm2") as window:
            # The closed window's run was kept as a pending task.
            refused = await ask(window, SessionsRequest(SessionsAction.RM, question.session))
            assert isinstance(refused, ErrorFrame) and refused.code is ErrorCode.STATE
            assert f"agentrt pending discard {question.session}" in refused.message
            assert await runtime.store.session(question.session) is not None
            gone = await ask(window, SessionsRequest(SessionsAction.RM, done.session_id))
            assert gone == Ack("sessions", "removed", session=done.session_id)
            assert await runtime.store.session(done.session_id) is None
            again = await ask(window, SessionsRequest(SessionsAction.RM, done.session_id))
            assert isinstance(again, ErrorFrame) and again.code is ErrorCode.NOT_FOUND


async def test_a_message_with_tool_calls_keeps_them_in_the_shown_page(
    daemon: Daemon, runtime: Runtime, tmp_path: Path
) -> None:
    (tmp_path / "notes.txt").write_text("remember this")
    await runtime.executor.run("cli-t", "read notes.txt", owner="o", emit=Recorder())
    with trio.fail_after(TIMEOUT):
        async with await Client.connect(daemon.socket_path) as window:
            shown = await ask(window, SessionsRequest(SessionsAction.SHOW, "cli-t"))
            assert isinstance(shown, SessionMessages)
            call, result = shown.messages[1], shown.messages[2]
            assert call.role == "assistant"
            assert [c["name"] for c in call.tool_calls] == ["read_file"]
            assert call.tool_calls[0]["arguments"] == {"path": "notes.txt"}
            assert (result.role, result.name, result.content) == (
                "tool",
                "read_file",
                "remember this",
            )
            assert result.tool_call_id == call.tool_calls[0]["id"]
            assert all(m.created_at > 0 for m in shown.messages)

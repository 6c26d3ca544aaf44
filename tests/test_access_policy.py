"""Who may act on what: the one policy table, and the daemon socket enforcing it."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import httpx
import pytest
import trio

from agentrt import ALLOW_ONCE
from agentrt import Cause
from agentrt import Runtime
from agentrt.core.policy import AccessPolicy
from agentrt.core.policy import Actor
from agentrt.core.policy import origin_rules
from agentrt.daemon import Daemon
from agentrt.http import load_or_create_token
from agentrt.http import serve_http
from agentrt.protocol.client import Client
from agentrt.protocol.frames import AnswerFrame
from agentrt.protocol.frames import AskFrame
from agentrt.protocol.frames import Cancel
from agentrt.protocol.frames import EndedFrame
from agentrt.protocol.frames import ErrorCode
from agentrt.protocol.frames import ErrorFrame
from agentrt.protocol.frames import PendingAction
from agentrt.protocol.frames import PendingList
from agentrt.protocol.frames import PendingRequest
from agentrt.protocol.frames import Run
from agentrt.protocol.frames import TaskFrame

from .conftest import Recorder

LIMIT = 10


@pytest.mark.parametrize(
    ("session", "inline", "secrets"),
    [
        ("cli-1", True, True),
        ("chat-1", False, True),
        ("tg-42", False, False),
        ("dc-999", False, False),
        ("x", False, True),
    ],
)
def test_the_origin_table(session: str, inline: bool, secrets: bool) -> None:
    # Only a terminal asks ask_user inline; no chat service ever carries a secret or password.
    rules = origin_rules(session)
    assert (rules.asks_inline, rules.takes_secrets) == (inline, secrets)


def test_the_table() -> None:
    policy = AccessPolicy()
    policy.windows.claim("w-live", object())
    me = Actor.terminal("w-me")
    http = Actor.http()
    tg = Actor.chat("tg-42")
    # A window: its own cli- sessions and those of windows that are gone; nothing else.
    assert policy.may_act(me, "cli-1", "w-me")
    assert policy.may_act(me, "cli-1", "w-gone")
    assert policy.may_act(me, "cli-1", None)
    assert not policy.may_act(me, "cli-1", "w-live")
    assert not policy.may_act(me, "chat-1", None)
    assert not policy.may_act(me, "tg-42", None)
    # HTTP: chat- sessions, and cli- tasks of closed windows; starts chat- sessions only.
    assert policy.may_act(http, "chat-1", None)
    assert policy.may_act(http, "cli-1", "w-gone")
    assert not policy.may_act(http, "cli-1", "w-live")
    assert not policy.may_act(http, "tg-42", None)
    assert not policy.may_act(http, "dc-999", None)
    assert policy.may_start(http, "chat-1", None)
    assert not policy.may_start(http, "cli-1", "w-gone")
    assert not policy.may_start(http, "dc-999", None)
    # A chat: its own session only.
    assert policy.may_act(tg, "tg-42", None)
    assert not policy.may_act(tg, "tg-43", None)
    assert not policy.may_act(tg, "chat-1", None)
    # The owner's agentrt command: everything, as in the store it could open itself.
    owner = Actor.owner()
    for session, window in (("cli-1", "w-live"), ("chat-1", None), ("tg-42", None), ("x", None)):
        assert policy.may_act(owner, session, window)
        assert policy.may_start(owner, session, window)


async def error_of(client: Client) -> ErrorFrame:
    frame = await client.receive()
    assert isinstance(frame, ErrorFrame), frame
    return frame


async def test_a_window_cannot_resume_or_discard_a_web_task_and_hears_not_found(
    daemon: Daemon, runtime: Runtime
) -> None:
    with trio.fail_after(LIMIT):
        await runtime.executor.run("chat-web", "ask Name?", owner="web", emit=Recorder())
        assert await runtime.store.load("chat-web") is not None
        async with await Client.connect(daemon.socket_path) as client:
            answers = []
            for action, session in [
                (PendingAction.RESUME, "chat-web"),
                (PendingAction.DISCARD, "chat-web"),
                (PendingAction.RESUME, "chat-nothing-here"),
                (PendingAction.DISCARD, "chat-nothing-here"),
            ]:
                await client.send(PendingRequest(action, session, answer="Mallory"))
                error = await error_of(client)
                answers.append((error.code, error.message.replace(session, "S")))
    # Forbidden and unknown read the same.
    assert answers[0] == answers[2]
    assert answers[1] == answers[3]
    assert answers[0][0] is ErrorCode.NOT_FOUND
    record = await runtime.store.load("chat-web")
    assert record is not None
    assert record.question is not None  # not answered, not discarded


async def test_a_window_cannot_continue_another_live_windows_finished_session(
    daemon: Daemon,
) -> None:
    with trio.fail_after(LIMIT):
        async with (
            await Client.connect(daemon.socket_path, window="w-alice") as alice,
            await Client.connect(daemon.socket_path, window="w-bob") as bob,
        ):
            await alice.send(Run("my diary says hello", session="cli-alice"))
            while not isinstance(await alice.receive(), EndedFrame):
                pass
            await bob.send(Run("what did I say before?", session="cli-alice"))
            error = await error_of(bob)
            assert error.code is ErrorCode.NOT_FOUND
            await bob.send(PendingRequest(PendingAction.LIST))
            listed = await bob.receive()
            assert isinstance(listed, PendingList)
            assert listed.tasks == ()
        # Alice's window is gone: her session is free to continue from another window.
        async with await Client.connect(daemon.socket_path, window="w-bob") as bob:
            await bob.send(Run("and now?", session="cli-alice"))
            frames: list[object] = []
            while not isinstance(frames[-1] if frames else None, EndedFrame):
                frames.append(await bob.receive())
            assert all(not isinstance(f, ErrorFrame) for f in frames)


async def run_to_end(client: Client, frame: Run) -> list[object]:
    await client.send(frame)
    frames: list[object] = []
    while not isinstance(frames[-1] if frames else None, EndedFrame | ErrorFrame):
        received = await client.receive()
        if isinstance(received, AskFrame):
            await client.send(AnswerFrame(received.id, ALLOW_ONCE))
        frames.append(received)
    return frames


async def test_each_windows_runs_work_in_its_own_folder_and_a_resume_stays_there(
    daemon: Daemon, runtime: Runtime, tmp_path: Path
) -> None:
    one, two = tmp_path / "project-one", tmp_path / "project-two"
    one.mkdir()
    two.mkdir()
    with trio.fail_after(LIMIT):
        async with (
            await Client.connect(daemon.socket_path, window="w-1") as first,
            await Client.connect(daemon.socket_path, window="w-2") as second,
        ):
            await run_to_end(first, Run("write a.txt one", cwd=str(one)))
            await run_to_end(second, Run("write a.txt two", cwd=str(two)))
            # A task paused in project one...
            await first.send(Run("sleep 30; write b.txt later", session="cli-p", cwd=str(one)))
            task = await first.wait_for(TaskFrame)
            await first.send(Cancel(task.task_hash, Cause.PAUSE))
            ended = await first.wait_for(EndedFrame)
            assert ended.pending_kept
        # ...resumed from another window opened elsewhere still works in project one.
        async with await Client.connect(daemon.socket_path, window="w-3") as third:
            await third.send(PendingRequest(PendingAction.RESUME, "cli-p"))
            task = await third.wait_for(TaskFrame)
            # The sleep runs again; stop waiting for it by pausing and checking the record.
            await third.send(Cancel(task.task_hash, Cause.PAUSE))
            await third.wait_for(EndedFrame)
    assert (one / "a.txt").read_text() == "one"
    assert (two / "a.txt").read_text() == "two"
    record = await runtime.store.load("cli-p")
    assert record is not None
    assert record.workdir == str(one)


async def test_a_run_with_a_missing_folder_gets_a_clear_error(
    daemon: Daemon, tmp_path: Path
) -> None:
    with trio.fail_after(LIMIT):
        async with await Client.connect(daemon.socket_path) as client:
            frames = await run_to_end(client, Run("hello", cwd=str(tmp_path / "nope")))
    (error,) = frames
    assert isinstance(error, ErrorFrame)
    assert "not an existing folder" in error.message


async def test_http_sees_a_windows_task_only_once_the_window_is_gone_and_never_a_chats(
    daemon: Daemon, runtime: Runtime, nursery: trio.Nursery
) -> None:
    token = load_or_create_token(runtime.state_dir)
    port = await nursery.start(partial(serve_http, runtime, "127.0.0.1", 0, token=token))
    headers = {"Authorization": f"Bearer {token}"}
    with trio.fail_after(LIMIT):
        await runtime.executor.run("tg-42", "ask Colour?", owner="tg", emit=Recorder())
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", headers=headers) as http:

            async def answers(session: str) -> list[tuple[int, str]]:
                got = [
                    await http.get(f"/v1/session/{session}/task"),
                    await http.post(f"/v1/session/{session}/task/resume", json={"answer": "x"}),
                    await http.delete(f"/v1/session/{session}/task"),
                ]
                return [(r.status_code, r.json()["error"]["code"]) for r in got]

            unknown = await answers("cli-nobody")
            assert await answers("tg-42") == unknown
            async with await Client.connect(daemon.socket_path, window="w-live") as window:
                await window.send(Run("sleep 30", session="cli-live"))
                task = await window.wait_for(TaskFrame)
                await window.send(Cancel(task.task_hash, Cause.PAUSE))
                await window.wait_for(EndedFrame)
                # Paused, but its window is still open: not HTTP's.
                assert await answers("cli-live") == unknown
                listed = (await http.get("/v1/sessions")).json()["sessions"]
                assert [s["session_id"] for s in listed] == []
            # The window closed: the owner may see it over HTTP now.
            shown = await http.get("/v1/session/cli-live/task")
            assert shown.status_code == 200, shown.text
            listed = (await http.get("/v1/sessions")).json()["sessions"]
            assert [s["session_id"] for s in listed] == ["cli-live"]
    assert unknown == [(404, "no_pending_task")] * 3
    assert await runtime.store.load("tg-42") is not None

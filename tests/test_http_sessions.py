"""Conversations over HTTP, against the real server with httpx: `GET /v1/sessions` lists finished
sessions too, in pages; their messages come back page by page; a finished one can be deleted;
and `/v1/events` numbers its events, replays them after `Last-Event-ID`, and filters by session."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import jsonschema
import pytest
import trio

from agentrt import Approval
from agentrt import Cause
from agentrt import Runtime
from agentrt import TaskInfo
from agentrt.frontends.http import frontend as frontend_module
from agentrt.http import openapi_document

from .conftest import Recorder
from .test_http import Server
from .test_http import assert_error
from .test_http import serving_http
from .test_http import start

Json = dict[str, Any]


@pytest.fixture
async def server(runtime: Runtime) -> AsyncIterator[Server]:
    async with serving_http(runtime) as served:
        yield served


def schema_validator(name: str) -> jsonschema.protocols.Validator:
    """Validates one object against ``#/components/schemas/NAME`` of the served document."""
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$ref": f"#/components/schemas/{name}",
        "components": openapi_document()["components"],
    }
    validator: jsonschema.protocols.Validator = jsonschema.Draft202012Validator(schema)
    return validator


async def finished(runtime: Runtime, session: str, text: str) -> None:
    ended = await runtime.executor.run(session, text, owner="o", emit=Recorder())
    assert ended.outcome.value in ("finished", "awaiting_answer"), ended


# -- the list ---------------------------------------------------------------------


async def test_the_list_has_finished_sessions_with_title_and_count_and_pending_ones_as_before(
    server: Server, runtime: Runtime
) -> None:
    await finished(runtime, "chat-done", "hello there\nsecond line")
    await finished(runtime, "chat-parked", "ask Your name?")
    await finished(runtime, "cli-closed", "from a window that is gone")
    await finished(runtime, "tg-42", "a Telegram chat")
    listed = await server.client.get("/v1/sessions")
    assert listed.status_code == 200, listed.text
    body = listed.json()
    assert body["next"] is None
    by_id = {s["session_id"]: s for s in body["sessions"]}
    assert list(by_id) == ["cli-closed", "chat-parked", "chat-done"]  # newest first; no tg-
    done = by_id["chat-done"]
    assert done["title"] == "hello there"
    assert (done["messages"], done["status"], done["running"]) == (2, None, False)
    assert (done["origin"], done["running_task"], done["stoppable"]) == ("chat-", None, False)
    assert done["waiting_on"] == [] and done["question"] is None
    assert 0 < done["created_at"] <= done["updated_at"]
    parked = by_id["chat-parked"]
    assert (parked["title"], parked["messages"]) == ("ask Your name?", 2)
    assert parked["status"] == "awaiting_answer"
    assert parked["question"]["prompt"] == "Your name?"
    assert parked["input"] == "ask Your name?" and parked["runs"] == 1
    assert parked["waiting_on"][0]["who"] == "saved: answer it to resume"
    validate = schema_validator("Session")
    for item in body["sessions"]:
        validate.validate(item)


async def test_the_list_comes_in_pages_that_cover_every_session_once(
    server: Server, runtime: Runtime
) -> None:
    for n in range(7):
        await finished(runtime, f"chat-p{n}", f"talk {n}")
    seen: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        params = {"limit": "3"} | ({"cursor": cursor} if cursor else {})
        page = (await server.client.get("/v1/sessions", params=params)).json()
        assert len(page["sessions"]) <= 3
        pages += 1
        seen += [s["session_id"] for s in page["sessions"]]
        cursor = page["next"]
        if cursor is None:
            break
    assert pages == 3
    assert seen == [f"chat-p{n}" for n in reversed(range(7))]
    for params in ({"limit": "0"}, {"limit": "1001"}, {"limit": "three"}, {"limit": "²"}):
        message = assert_error(
            await server.client.get("/v1/sessions", params=params), 400, "bad_query"
        )
        assert "limit must be a whole number from 1 to 1000" in message
    bad = await server.client.get("/v1/sessions", params={"cursor": "nonsense"})
    assert "pass the `next` of a page" in assert_error(bad, 400, "bad_query")


# -- messages ----------------------------------------------------------------------


async def test_messages_come_back_page_by_page_in_the_documented_shape(
    server: Server, runtime: Runtime, workdir: Path
) -> None:
    (workdir / "notes.txt").write_text("remember this")
    await finished(runtime, "chat-m", "read notes.txt")
    await finished(runtime, "chat-m", "and again")
    first = await server.client.get("/v1/sessions/m/messages", params={"limit": "2"})
    assert first.status_code == 200, first.text
    page = first.json()
    assert [m["seq"] for m in page["messages"]] == [0, 1] and page["next"] == 1
    user, call = page["messages"]
    assert user == {
        "seq": 0,
        "role": "user",
        "content": "read notes.txt",
        "created_at": user["created_at"],
    }
    assert call["role"] == "assistant"
    assert call["tool_calls"] == [
        {"id": call["tool_calls"][0]["id"], "name": "read_file", "arguments": {"path": "notes.txt"}}
    ]
    rest = await server.client.get(
        "/v1/sessions/chat-m/messages", params={"after": str(page["next"])}
    )
    later = rest.json()
    assert later["next"] is None
    assert [m["seq"] for m in later["messages"]] == [2, 3, 4, 5]
    result = later["messages"][0]
    assert (result["role"], result["name"], result["content"]) == (
        "tool",
        "read_file",
        "remember this",
    )
    assert result["tool_call_id"] == call["tool_calls"][0]["id"]
    assert later["messages"][2]["content"] == "and again"
    validate = schema_validator("StoredMessage")
    for message in page["messages"] + later["messages"]:
        validate.validate(message)
    empty = await server.client.get("/v1/sessions/chat-m/messages", params={"after": "5"})
    empty_page = empty.json()
    assert (empty_page["messages"], empty_page["next"]) == ([], None)
    # Every page says the session's tokens: two runs of the scripted model, no price.
    usage = empty_page["usage"]
    assert (usage["rounds"], usage["cost"], len(usage["runs"])) == (3, None, 2)
    assert usage["input_tokens"] == sum(r["tokens"]["input_tokens"] for r in usage["runs"])


async def test_a_session_http_may_not_see_is_answered_like_one_that_does_not_exist(
    server: Server, runtime: Runtime
) -> None:
    await finished(runtime, "tg-7", "a Telegram chat")
    for path in ("/v1/sessions/tg-7/messages", "/v1/sessions/chat-none/messages"):
        response = await server.client.get(path)
        assert "no session" in assert_error(response, 404, "unknown_session")
    assert_error(await server.client.delete("/v1/sessions/tg-7"), 404, "unknown_session")
    for params in ({"after": "-2"}, {"after": "x"}, {"limit": "0"}):
        response = await server.client.get("/v1/sessions/chat-none/messages", params=params)
        assert_error(response, 400, "bad_query")
    assert await runtime.store.session("tg-7") is not None


# -- deleting ------------------------------------------------------------------------


async def test_delete_removes_a_finished_session_and_refuses_a_pending_or_running_one(
    server: Server, runtime: Runtime
) -> None:
    await finished(runtime, "chat-old", "hello")
    await finished(runtime, "chat-waits", "ask Colour?")
    refused = await server.client.delete("/v1/sessions/chat-waits")
    assert "discard" in assert_error(refused, 409, "pending_task_exists")
    assert await runtime.store.session("chat-waits") is not None
    deleted = await server.client.delete("/v1/sessions/old")
    assert deleted.status_code == 200, deleted.text
    assert deleted.json() == {"session_id": "chat-old", "deleted": True}
    assert_error(await server.client.get("/v1/sessions/chat-old/messages"), 404, "unknown_session")
    assert_error(await server.client.delete("/v1/sessions/chat-old"), 404, "unknown_session")
    listed = [s["session_id"] for s in (await server.client.get("/v1/sessions")).json()["sessions"]]
    assert listed == ["chat-waits"]
    async with trio.open_nursery() as nursery:
        info: TaskInfo = await nursery.start(
            partial(runtime.executor.run, "chat-busy", "sleep 60", owner="o", emit=Recorder())
        )
        busy = await server.client.delete("/v1/sessions/chat-busy")
        assert_error(busy, 409, "session_busy")
        runtime.executor.cancel(info.task_hash, Cause.PAUSE)


# -- the event stream ----------------------------------------------------------------


@attrs.define
class Stream:
    """Reads server-sent events: each one's id and JSON object, in order."""

    lines: AsyncIterator[str]
    seen: list[tuple[int, Json]] = attrs.field(factory=list)

    async def next(self) -> tuple[int, Json]:
        event_id: int | None = None
        data: list[str] = []
        async for line in self.lines:
            if line.startswith("id: "):
                event_id = int(line[4:])
            elif line.startswith("data: "):
                data.append(line[6:])
            elif line == "" and data:
                assert event_id is not None, f"an event without an id: {data}"
                event = (event_id, json.loads("\n".join(data)))
                self.seen.append(event)
                return event
        raise AssertionError(f"the stream ended; seen: {self.seen}")

    async def until(self, kind: str, **fields: Any) -> tuple[int, Json]:
        with trio.fail_after(10):
            while True:
                event_id, obj = await self.next()
                if obj["type"] == kind and all(obj.get(k) == v for k, v in fields.items()):
                    return event_id, obj


@asynccontextmanager
async def stream(
    server: Server, *, last: str | None = None, session: str | None = None
) -> AsyncIterator[Stream]:
    headers = {"Last-Event-ID": last} if last is not None else {}
    params = {"session": session} if session is not None else {}
    async with server.client.stream("GET", "/v1/events", headers=headers, params=params) as r:
        assert r.status_code == 200, await r.aread()
        yield Stream(r.aiter_lines())


async def test_every_event_has_an_increasing_id_and_a_reconnection_gets_what_it_missed(
    server: Server,
) -> None:
    async with stream(server) as watcher:
        await watcher.until("ready")
        async with stream(server) as reader:
            ready_id, _ = await reader.until("ready")
            first = await start(server, "e1", "hello")
            await reader.until("run_ended", session_id="chat-e1")
            ids = [event_id for event_id, _ in reader.seen]
            assert ids == sorted(set(ids)) and ids[0] == ready_id and ids[1] == ready_id + 1
            last_read = ids[-1]
        # While the reader is away, a run goes from start to end.
        second = await start(server, "e2", "stream 3")
        await watcher.until("run_ended", session_id="chat-e2")
        missed = [(i, e) for i, e in watcher.seen if i > last_read]
        assert missed
    async with stream(server, last=str(last_read)) as again:
        ready_id, _ = await again.until("ready")
        assert ready_id == last_read  # the stream starts where the reader left off
        replayed = [await again.next() for _ in missed]
        assert replayed == missed
        assert replayed[0][1]["type"] == "task_started"
        assert replayed[0][1]["task_hash"] == second["task_hash"] != first["task_hash"]
        assert replayed[-1][1]["type"] == "run_ended"
        # Live events follow, numbered on.
        await start(server, "e3", "hello")
        event_id, _ = await again.until("task_started", session_id="chat-e3")
        assert event_id == missed[-1][0] + 1


async def test_an_id_older_than_the_ring_or_never_given_gets_a_reload(server: Server) -> None:
    async with stream(server) as watcher:
        ready_id, _ = await watcher.until("ready")
        for n in range(3):
            await start(server, f"r{n}", "hello")
            await watcher.until("run_ended", session_id=f"chat-r{n}")
        newest = watcher.seen[-1][0]
    kept = frontend_module.EVENT_RING
    assert newest - ready_id < kept  # every event is still kept: a replay, no reload
    async with stream(server, last=str(ready_id)) as again:
        await again.until("ready")
        event_id, obj = await again.next()
        assert (event_id, obj["type"]) == (ready_id + 1, "task_started")
    for last in ("0", "not a number", str(newest + 10**6)):
        async with stream(server, last=last) as lost:
            start_id, ready = await lost.next()
            assert (start_id, ready["type"]) == (newest, "ready")
            reload_id, reload = await lost.next()
            assert reload_id == newest
            assert reload["type"] == "reload"
            assert "read the sessions and their messages again" in reload["reason"]
            schema_validator("Event").validate(reload)


async def test_a_stream_whose_events_were_pushed_out_of_the_ring_is_told_to_reload(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(frontend_module, "EVENT_RING", 4)
    async with serving_http(runtime) as server:
        async with stream(server) as watcher:
            ready_id, _ = await watcher.until("ready")
            for name in ("small", "again"):
                await start(server, name, "hello")
                await watcher.until("run_ended", session_id=f"chat-{name}")
            assert len(watcher.seen) > 1 + 4  # more events than the ring keeps
            newest = watcher.seen[-1][0]
        async with stream(server, last=str(ready_id)) as late:
            assert (await late.next())[1]["type"] == "ready"
            assert (await late.next())[1]["type"] == "reload"
        # The newest four are still there to replay.
        async with stream(server, last=str(newest - 4)) as recent:
            assert (await recent.next())[0] == newest - 4
            assert [(await recent.next())[0] for _ in range(4)] == [
                newest - 3,
                newest - 2,
                newest - 1,
                newest,
            ]


async def test_a_stream_can_follow_one_session(server: Server) -> None:
    async with stream(server) as everything, stream(server, session="f1") as one:
        await everything.until("ready")
        await one.until("ready")
        await start(server, "f2", "hello")
        await start(server, "f1", "hello")
        await everything.until("run_ended", session_id="chat-f2")
        await everything.until("run_ended", session_id="chat-f1")
        await one.until("run_ended", session_id="chat-f1")
        assert {obj["session_id"] for _, obj in one.seen[1:]} == {"chat-f1"}
        # Replaying honours the filter too.
        since = one.seen[0][0]
    async with stream(server, last=str(since), session="chat-f1") as again:
        await again.until("ready")
        await again.until("run_ended")
        assert {obj["session_id"] for _, obj in again.seen[1:]} == {"chat-f1"}
    bad = await server.client.get("/v1/events", params={"session": "has space"})
    assert_error(bad, 400, "bad_session_id")


# -- undo and turns ---------------------------------------------------------------------


async def test_undo_puts_back_a_chat_runs_files_and_a_conflict_waits_for_force(
    server: Server, runtime: Runtime, workdir: Path
) -> None:
    runtime.executor.config = attrs.evolve(runtime.executor.config, approval=Approval.FULL_AUTO)
    (workdir / "a.txt").write_text("before\n")
    await finished(runtime, "chat-u", "write a.txt after")
    turns = await server.client.get("/v1/sessions/u/turns")
    assert turns.status_code == 200, turns.text
    assert turns.json() == {
        "session_id": "chat-u",
        "turns": [{"seq": 0, "text": "write a.txt after", "files": 0}],
    }
    (workdir / "a.txt").write_text("mine\n")
    asked = await server.client.post("/v1/sessions/u/undo", json={})
    assert asked.status_code == 200, asked.text
    path = str(workdir / "a.txt")
    assert asked.json() == {
        "session_id": "chat-u",
        "done": False,
        "restored": [path],
        "conflicts": [path],
        "kept": {},
        "skipped": {},
    }
    assert (workdir / "a.txt").read_text() == "mine\n"
    done = await server.client.post("/v1/sessions/u/undo", json={"force": True})
    assert done.json()["done"] is True
    assert done.json()["kept"] == {path: f"{path}.agentrt-undo-1"}
    assert (workdir / "a.txt").read_text() == "before\n"
    bad = await server.client.post("/v1/sessions/u/undo", json={"turn": "0"})
    assert_error(bad, 400, "bad_body")
    wrong = await server.client.post("/v1/sessions/u/undo", json={"turn": 5})
    assert "no turn at message 5" in assert_error(wrong, 409, "no_such_turn")
    assert_error(await server.client.post("/v1/sessions/nosuch/undo"), 404, "unknown_session")

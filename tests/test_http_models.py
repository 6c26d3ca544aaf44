"""The models and the last turn over HTTP: `GET /v1/models`, a session's model, regenerate and
edit-and-resend, against the real server with httpx, every answer checked against the
OpenAPI document."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from agentrt import Runtime
from agentrt.models.messages import Role

from .conftest import FakeVerifier
from .conftest import Recorder
from .conftest import runtime_in
from .test_http import Events
from .test_http import Server
from .test_http import assert_error
from .test_http import serving_http
from .test_http import start
from .test_http_sessions import schema_validator

Json = dict[str, Any]


@pytest.fixture
async def models_server(
    tmp_path: Path, workdir: Path, verifier: FakeVerifier, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Server]:
    """A server whose runtime offers a replay model beside the scripted default, and a
    hosted model without its key."""
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    replay = tmp_path / "replay.json"
    replay.write_text(json.dumps({"turns": [{"text": f"replayed {n}"} for n in range(9)]}))
    models = [f"replay:{replay}", "openai:gpt-x"]
    async with (
        runtime_in(tmp_path, workdir, verifier, models=models) as runtime,
        serving_http(runtime) as served,
    ):
        yield served


async def finished(runtime: Runtime, session: str, text: str) -> None:
    ended = await runtime.executor.run(session, text, owner="o", emit=Recorder())
    assert ended.outcome.value in ("finished", "awaiting_answer"), ended


@asynccontextmanager
async def watching(server: Server) -> AsyncIterator[Events]:
    """The server's event stream, read from before the block's requests."""
    async with server.client.stream("GET", "/v1/events") as response:
        reader = Events(response.aiter_lines())
        await reader.expect("ready")
        yield reader


async def conversation(server: Server, session: str) -> list[tuple[str, str]]:
    page = (await server.client.get(f"/v1/sessions/{session}/messages")).json()
    return [(m["role"], m["content"]) for m in page["messages"]]


def validate(name: str, body: Json) -> None:
    schema_validator(name).validate(body)


def response_schema(path: str, method: str, status: str) -> Json:
    from agentrt.http import openapi_document

    document = openapi_document()
    operation = document["paths"][path][method]
    schema: Json = operation["responses"][status]["content"]["application/json"]["schema"]
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        **schema,
        "components": document["components"],
    }


def conforms(path: str, method: str, status: str, body: Json) -> None:
    import jsonschema

    jsonschema.Draft202012Validator(response_schema(path, method, status)).validate(body)


# -- models -------------------------------------------------------------------------------


async def test_the_models_are_listed_with_the_default_and_why_one_cannot_be_used(
    models_server: Server, tmp_path: Path
) -> None:
    listed = await models_server.client.get("/v1/models")
    assert listed.status_code == 200, listed.text
    body = listed.json()
    conforms("/v1/models", "get", "200", body)
    replay = f"replay:{tmp_path / 'replay.json'}"
    assert body["default"] == "scripted"
    assert [(m["name"], m["default"], m["usable"]) for m in body["models"]] == [
        ("scripted", True, True),
        (replay, False, True),
        ("openai:gpt-x", False, False),
    ]
    assert "OPENAI_API_KEY" in body["models"][2]["why"]


async def test_a_chats_model_is_set_read_back_listed_and_used_by_its_next_run(
    models_server: Server, tmp_path: Path
) -> None:
    client = models_server.client
    replay = f"replay:{tmp_path / 'replay.json'}"
    got = await client.get("/v1/session/chat-m/model")
    assert got.json() == {"session_id": "chat-m", "model": "scripted"}
    conforms("/v1/session/{session_id}/model", "get", "200", got.json())
    put = await client.put("/v1/session/chat-m/model", json={"model": replay})
    assert put.status_code == 200, put.text
    conforms("/v1/session/{session_id}/model", "put", "200", put.json())
    assert (await client.get("/v1/session/chat-m/model")).json()["model"] == replay
    # Not listed before its first message; its run talks to the replay model.
    assert (await client.get("/v1/sessions")).json()["sessions"] == []
    async with watching(models_server) as events:
        await start(models_server, "chat-m", "hello")
        await events.expect("run_ended", session_id="chat-m")
    assert await conversation(models_server, "chat-m") == [
        ("user", "hello"),
        ("assistant", "replayed 0"),
    ]
    [listed] = (await client.get("/v1/sessions")).json()["sessions"]
    assert (listed["session_id"], listed["model"], listed["title"]) == ("chat-m", replay, "hello")
    validate("Session", listed)


async def test_a_model_that_cannot_be_set_is_refused_clearly(models_server: Server) -> None:
    client = models_server.client
    unknown = await client.put("/v1/session/chat-m/model", json={"model": "anthropic:nope"})
    assert "is not configured" in assert_error(unknown, 404, "unknown_model")
    no_key = await client.put("/v1/session/chat-m/model", json={"model": "openai:gpt-x"})
    assert "OPENAI_API_KEY" in assert_error(no_key, 503, "model_not_configured")
    terminal = await client.put("/v1/session/cli-x/model", json={"model": "scripted"})
    assert_error(terminal, 400, "bad_session_id")
    for body in ({}, {"model": ""}, {"model": 3}, {"model": "scripted", "x": 1}):
        assert_error(await client.put("/v1/session/chat-m/model", json=body), 400, "bad_body")
    assert (await client.get("/v1/session/chat-m/model")).json()["model"] == "scripted"


# -- regenerate and edit -------------------------------------------------------------------


async def test_regenerate_replaces_the_last_reply_and_its_tool_calls(
    models_server: Server, tmp_path: Path, workdir: Path
) -> None:
    runtime = models_server.runtime
    (workdir / "notes.txt").write_text("hi", "utf-8")
    await finished(runtime, "chat-r", "first words")
    await finished(runtime, "chat-r", "read notes.txt")
    before = await conversation(models_server, "chat-r")
    assert [role for role, _ in before] == [
        "user",
        "assistant",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    # The next run's model is the replay one: the reply that replaces the last is its.
    replay = f"replay:{tmp_path / 'replay.json'}"
    await models_server.client.put("/v1/session/chat-r/model", json={"model": replay})
    async with watching(models_server) as events:
        redone = await models_server.client.post("/v1/session/chat-r/regenerate")
        assert redone.status_code == 202, redone.text
        await events.expect("run_ended", session_id="chat-r")
    conforms("/v1/session/{session_id}/regenerate", "post", "202", redone.json())
    after = await conversation(models_server, "chat-r")
    # The first exchange is untouched; the last user message stays, its reply is new.
    assert after == [*before[:3], ("assistant", "replayed 1")]
    assert await runtime.store.load("chat-r") is None


async def test_edit_replaces_the_last_user_message_and_everything_after_it(
    models_server: Server,
) -> None:
    runtime = models_server.runtime
    await finished(runtime, "chat-e", "first words")
    await finished(runtime, "chat-e", "a typo here")
    async with watching(models_server) as events:
        edited = await models_server.client.post(
            "/v1/session/chat-e/edit", json={"text": "the fixed words"}
        )
        assert edited.status_code == 202, edited.text
        await events.expect("run_ended", session_id="chat-e")
    conforms("/v1/session/{session_id}/edit", "post", "202", edited.json())
    said = await conversation(models_server, "chat-e")
    assert [text for role, text in said if role == "user"] == ["first words", "the fixed words"]
    assert "a typo here" not in json.dumps(said)
    assert len(said) == 4
    history = await runtime.store.load_history("chat-e")
    assert [m.role for m in history] == [Role.USER, Role.ASSISTANT] * 2
    for body in ({"text": "  "}, {}, {"text": 1}):
        assert_error(
            await models_server.client.post("/v1/session/chat-e/edit", json=body), 400, "bad_body"
        )


async def test_regenerate_and_edit_are_refused_while_a_run_goes_on_or_a_task_is_pending(
    models_server: Server,
) -> None:
    runtime = models_server.runtime
    client = models_server.client
    await finished(runtime, "chat-p", "hello")
    await finished(runtime, "chat-p", "ask Colour?")  # a pending task: the saved question
    kept = await conversation(models_server, "chat-p")
    for path, body in (("regenerate", None), ("edit", {"text": "other"})):
        refused = await client.post(f"/v1/session/chat-p/{path}", json=body)
        assert "has a pending task" in assert_error(refused, 409, "pending_task_exists")
    assert await conversation(models_server, "chat-p") == kept
    assert await runtime.store.load("chat-p") is not None

    await finished(runtime, "chat-b", "hello")
    async with watching(models_server) as events:
        running = await start(models_server, "chat-b", "sleep 30")
        for path, body in (("regenerate", None), ("edit", {"text": "other"})):
            refused = await client.post(f"/v1/session/chat-b/{path}", json=body)
            assert "is running" in assert_error(refused, 409, "session_busy")
        cancel = {"cause": "user_cancel"}
        await client.post(f"/v1/task/{running['task_hash']}/cancel", json=cancel)
        await events.expect("run_ended", session_id="chat-b")

    # A chat with a model chosen but no message: nothing to replace; none at all: unknown.
    await client.put("/v1/session/chat-n/model", json={"model": "scripted"})
    empty = await client.post("/v1/session/chat-n/regenerate")
    assert "no message to replace" in assert_error(empty, 409, "nothing_to_replace")
    assert_error(await client.post("/v1/session/chat-none/regenerate"), 404, "unknown_session")
    assert_error(await client.post("/v1/session/cli-x/regenerate"), 400, "bad_session_id")

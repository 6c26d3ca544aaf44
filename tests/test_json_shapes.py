"""`agentrt run --json` prints the HTTP API's event shapes, each line with its schema version.

Both the lines of the command (with no daemon and through one) and the objects of
the HTTP API's `/v1/events` stream are checked against the OpenAPI document's
``Event`` schema, whose per-type schemas allow exactly the keys each object has;
and the same kinds of event carry the same keys on both. `agentrt run -` reads
its message from standard input.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
import trio

from agentrt import Runtime
from agentrt.http import load_or_create_token
from agentrt.http import openapi_document
from agentrt.http import serve_http
from agentrt.present.shapes import EVENT_TYPES
from agentrt.present.shapes import SCHEMA_VERSION

from .cli_process import run

Json = dict[str, Any]


def event_validator() -> jsonschema.protocols.Validator:
    """Validates one object against ``#/components/schemas/Event`` of the served document."""
    document = openapi_document()
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$ref": "#/components/schemas/Event",
        "components": document["components"],
    }
    validator: jsonschema.protocols.Validator = jsonschema.Draft202012Validator(schema)
    return validator


def test_the_event_schemas_are_exact_and_cover_every_event_type() -> None:
    schemas = openapi_document()["components"]["schemas"]
    named = {s["$ref"].rsplit("/", 1)[1] for s in schemas["Event"]["oneOf"]}
    kinds = {schemas[name]["properties"]["type"]["const"] for name in named}
    assert kinds == {*EVENT_TYPES.values(), "question", "question_closed", "ready", "reload"}
    for name in named:
        assert schemas[name]["additionalProperties"] is False
        assert schemas[name]["required"] == list(schemas[name]["properties"])
    validator = event_validator()
    with pytest.raises(jsonschema.ValidationError):
        # A key no event has is refused, as is a text event without its text.
        validator.validate({"type": "text", "task_hash": "t", "text": "x", "agent": "", "x": 1})
    with pytest.raises(jsonschema.ValidationError):
        validator.validate({"type": "text", "task_hash": "t", "agent": "", "session_id": "s"})


SCRIPT = "write a.txt hey; sh echo hi; stream 3"


def test_run_json_lines_are_the_http_api_events_with_a_version(state: Path, tmp_path: Path) -> None:
    done = run(["run", "--json", "--session", "cli-j", SCRIPT], state, tmp_path, "y\ny\n")
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    validator = event_validator()
    for line in lines:
        assert line["v"] == SCHEMA_VERSION == 1
        event = {k: v for k, v in line.items() if k != "v"}
        validator.validate(event)
    types = [line["type"] for line in lines]
    assert types[0] == "task_started" and types[-1] == "run_ended"
    assert {"tool_call", "question", "tool_result", "text"} <= set(types)


async def http_events(runtime: Runtime, session: str, text: str) -> list[Json]:
    """The objects `/v1/events` sends for one run of `text`, confirmations allowed."""
    token = load_or_create_token(runtime.state_dir)
    seen: list[Json] = []
    async with trio.open_nursery() as nursery:
        port = await nursery.start(partial(serve_http, runtime, "127.0.0.1", 0, token=token))
        async with (
            httpx.AsyncClient(
                base_url=f"http://127.0.0.1:{port}",
                headers={"Authorization": f"Bearer {token}"},
                timeout=10,
            ) as client,
            client.stream("GET", "/v1/events") as stream,
        ):
            lines: AsyncIterator[str] = stream.aiter_lines()

            async def next_object() -> Json:
                async for line in lines:
                    if line.startswith("data: "):
                        obj: Json = json.loads(line[6:])
                        seen.append(obj)
                        return obj
                raise AssertionError(f"the stream ended; seen {seen}")

            assert (await next_object())["type"] == "ready"
            started = await client.post(f"/v1/session/{session}/run", json={"text": text})
            assert started.status_code == 202, started.text
            with trio.fail_after(10):
                while (obj := await next_object())["type"] != "run_ended":
                    if obj["type"] == "question":
                        answer = {"value": "allow"}
                        sent = await client.post(f"/v1/questions/{obj['id']}/answer", json=answer)
                        assert sent.status_code == 200, sent.text
        nursery.cancel_scope.cancel()
    return seen


async def test_http_events_fit_the_same_schemas_and_keys_as_the_command(
    runtime: Runtime, tmp_path: Path
) -> None:
    served = await http_events(runtime, "chat-j", SCRIPT)
    validator = event_validator()
    for obj in served:
        validator.validate(obj)
    done = await trio.to_thread.run_sync(
        partial(run, ["run", "--json", SCRIPT], tmp_path / "cli-state", tmp_path, "y\ny\n")
    )
    assert done.returncode == 0, done.stderr
    printed = [json.loads(line) for line in done.stdout.splitlines()]
    keys_served = {obj["type"]: set(obj) for obj in served}
    keys_printed = {obj["type"]: set(obj) - {"v"} for obj in printed}
    shared = set(keys_served) & set(keys_printed)
    assert {"task_started", "tool_call", "question", "tool_result", "text", "run_ended"} <= shared
    for kind in shared:
        assert keys_printed[kind] == keys_served[kind], kind


def test_run_dash_reads_the_message_from_stdin(state: Path, tmp_path: Path) -> None:
    done = run(["run", "--json", "-"], state, tmp_path, "hello from stdin; stream 3\n")
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    text = "".join(line["text"] for line in lines if line["type"] == "text")
    assert "hello from stdin" in text
    ended = lines[-1]
    assert ended["type"] == "run_ended" and ended["outcome"] == "finished"


def test_run_dash_with_nothing_on_stdin_is_a_usage_error(state: Path, tmp_path: Path) -> None:
    done = run(["run", "-"], state, tmp_path, "  \n")
    assert done.returncode == 2
    assert "no message on standard input" in done.stderr
    listed = run(["pending", "list"], state, tmp_path)
    assert listed.stdout == "no pending tasks\n"

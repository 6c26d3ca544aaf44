"""The HTTP API over a real socket: runs, pending tasks, questions, auth, bad input."""

from __future__ import annotations

import contextlib
import gc
import json
import os
import re
import stat
import sys
import typing
import warnings
from collections.abc import AsyncIterator
from collections.abc import Callable
from collections.abc import Iterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import h11
import httpx
import jsonschema
import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
from starlette.routing import Route

from agentrt import Answer
from agentrt import BadSessionIdError
from agentrt import Cause
from agentrt import Event
from agentrt import RequestKind
from agentrt import Runtime
from agentrt import TaskStatus
from agentrt.frontends.http.bodies import NOT_BLANK
from agentrt.frontends.http.bodies import OLDER_FIELDS
from agentrt.frontends.http.bodies import AnswerBody
from agentrt.frontends.http.bodies import BadBodyError
from agentrt.frontends.http.bodies import CancelBody
from agentrt.frontends.http.bodies import ResumeBody
from agentrt.frontends.http.bodies import RunBody
from agentrt.frontends.http.bodies import parse_body
from agentrt.frontends.http.frontend import CHAT_SESSION_ID_PATTERN
from agentrt.frontends.http.frontend import CURSOR_PATTERN
from agentrt.frontends.http.frontend import SESSION_ID_PATTERN
from agentrt.http import BODY_SECONDS
from agentrt.http import MAX_BODY
from agentrt.http import WebFrontEnd
from agentrt.http import allowed_hosts
from agentrt.http import build_app
from agentrt.http import load_or_create_token
from agentrt.http import openapi_document
from agentrt.http import serve_http
from agentrt.http import session_id_from_path
from agentrt.http import token_main
from agentrt.present.shapes import EVENT_TYPES
from agentrt.present.shapes import event_to_json
from agentrt.store.sql import parse_cursor

from .conftest import Recorder
from .conftest import insert_unreadable

Json = dict[str, Any]


@attrs.define
class Server:
    runtime: Runtime
    port: int
    token: str
    client: httpx.AsyncClient

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@asynccontextmanager
async def serving_http(runtime: Runtime) -> AsyncIterator[Server]:
    """The HTTP server on `runtime` on a free loopback port, with a client logged in to it."""
    token = load_or_create_token(runtime.state_dir)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(partial(serve_http, runtime, "127.0.0.1", 0, token=token))
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{port}",
            headers={"Authorization": f"Bearer {token}"},
            timeout=10,
        ) as client:
            yield Server(runtime, port, token, client)
        nursery.cancel_scope.cancel()


@pytest.fixture
async def server(runtime: Runtime) -> AsyncIterator[Server]:
    async with serving_http(runtime) as served:
        yield served


class Events:
    """Reads `/v1/events` and waits for events matching a test's expectations."""

    def __init__(self, lines: AsyncIterator[str]) -> None:
        self._lines = lines
        self.seen: list[Json] = []

    async def next(self) -> Json:
        async for line in self._lines:
            if line.startswith("data: "):
                obj: Json = json.loads(line[6:])
                self.seen.append(obj)
                return obj
        raise AssertionError(f"the event stream ended; seen: {self.seen}")

    async def expect(self, type_: str, **fields: Any) -> Json:
        with trio.fail_after(10):
            while True:
                obj = await self.next()
                if obj["type"] == type_ and all(obj.get(k) == v for k, v in fields.items()):
                    return obj


@pytest.fixture
async def events(server: Server) -> AsyncIterator[Events]:
    async with server.client.stream("GET", "/v1/events") as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        reader = Events(response.aiter_lines())
        await reader.expect("ready")  # subscribed: nothing from now on is missed
        yield reader


async def start(server: Server, session: str, text: str) -> Json:
    response = await server.client.post(f"/v1/session/{session}/run", json={"text": text})
    assert response.status_code == 202, response.text
    body: Json = response.json()
    return body


def assert_error(response: httpx.Response, status: int, code: str) -> str:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    error = response.json()["error"]
    assert error["code"] == code, error
    assert error["message"]
    message: str = error["message"]
    return message


# -- the token ------------------------------------------------------------


def test_token_is_made_once_stored_0600_and_printed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    token = load_or_create_token(state)
    assert len(token) >= 32
    mode = stat.S_IMODE(os.stat(state / "http-token").st_mode)
    assert mode == 0o600
    assert load_or_create_token(state) == token
    assert token_main(["--state-dir", str(state)]) == 0
    assert capsys.readouterr().out.strip() == token


def test_token_file_loosened_by_someone_is_made_private_again(tmp_path: Path) -> None:
    token = load_or_create_token(tmp_path)
    os.chmod(tmp_path / "http-token", 0o644)
    assert load_or_create_token(tmp_path) == token
    assert stat.S_IMODE(os.stat(tmp_path / "http-token").st_mode) == 0o600


async def test_requests_without_the_right_token_are_refused(server: Server) -> None:
    async with httpx.AsyncClient(base_url=server.base) as anonymous:
        for path in ("/v1/sessions", "/v1/events", "/static/nothing.js"):
            response = await anonymous.get(path)
            assert_error(response, 401, "missing_token")
            assert response.headers["www-authenticate"] == "Bearer"
        wrong = await anonymous.get("/v1/sessions", headers={"Authorization": "Bearer nope"})
        assert_error(wrong, 401, "bad_token")
        basic = await anonymous.get("/v1/sessions", headers={"Authorization": "Basic eDp5"})
        assert_error(basic, 401, "bad_token")
        in_the_query = await anonymous.get("/v1/sessions", params={"token": server.token})
        assert_error(in_the_query, 401, "missing_token")
    assert (await server.client.get("/v1/sessions")).status_code == 200


async def test_only_the_page_its_files_and_the_document_are_served_without_the_token(
    server: Server,
) -> None:
    async with httpx.AsyncClient(base_url=server.base) as anonymous:
        page = await anonymous.get("/")
        assert page.status_code == 200
        assert 'id="login-form"' in page.text  # the page logs in by itself
        assert server.token not in page.text
        for asset in ("app.js", "app.css", "vendor/markdown-it.min.js", "vendor/purify.min.js"):
            assert (await anonymous.get(f"/static/{asset}")).status_code == 200
        # The vendored libraries' licence notes are not served at all.
        assert_error(await anonymous.get("/static/vendor/README.md"), 401, "missing_token")
        assert_error(await server.client.get("/static/vendor/README.md"), 404, "not_found")
        document = await anonymous.get("/openapi.json")
        assert document.status_code == 200
        assert document.json() == openapi_document()
        assert server.token not in document.text
        for path in ("/login", "/logout"):  # there is no cookie login any more
            assert_error(await anonymous.get(path), 401, "missing_token")
            assert_error(await anonymous.post(path), 401, "missing_token")


async def test_no_response_sets_a_cookie_and_a_cookie_is_no_credential(server: Server) -> None:
    async with httpx.AsyncClient(base_url=server.base) as browser:
        responses = [
            await browser.get("/"),
            await browser.get("/static/app.js"),
            await browser.get("/login", params={"token": server.token}),
            await browser.post("/login", data={"token": server.token}),
            await server.client.get("/v1/sessions"),
            await server.client.post("/v1/session/c0/run", json={"text": "hi"}),
        ]
        assert all("set-cookie" not in r.headers for r in responses)
        assert not browser.cookies
        # What the old login cookie and its CSRF twin would carry, replayed: refused.
        replayed = await browser.post(
            "/v1/session/c1/run",
            json={"text": "sh id"},
            headers={"Cookie": "agentrt_auth=x; agentrt_csrf=c", "X-CSRF-Token": "c"},
        )
        assert_error(replayed, 401, "missing_token")
    assert await server.runtime.store.load("chat-c1") is None


@pytest.mark.parametrize(
    "host",
    [
        "evil.example:{port}",
        "evil.example",
        "127.0.0.1:1",
        "localhost",
        "",
        "127.0.0.1.nip.io:{port}",
    ],
)
async def test_a_request_naming_another_host_is_refused(server: Server, host: str) -> None:
    # A DNS-rebinding page reaches the server under the attacker's name.
    for path in ("/", "/v1/sessions"):
        response = await server.client.get(path, headers={"Host": host.format(port=server.port)})
        message = assert_error(response, 421, "bad_host")
        assert f"http://127.0.0.1:{server.port}/" in message


@pytest.mark.parametrize("host", ["127.0.0.1:{port}", "localhost:{port}", "[::1]:{port}"])
async def test_the_loopback_names_with_the_port_are_answered(server: Server, host: str) -> None:
    response = await server.client.get(
        "/v1/sessions", headers={"Host": host.format(port=server.port)}
    )
    assert response.status_code == 200


def test_allowed_hosts_are_the_bound_address_and_the_loopback_names() -> None:
    assert allowed_hosts("127.0.0.1", 8765) == {
        "127.0.0.1:8765",
        "localhost:8765",
        "[::1]:8765",
    }
    assert "[::1]:8765" in allowed_hosts("::1", 8765)
    assert "localhost" in allowed_hosts("127.0.0.1", 80)


async def test_every_response_forbids_framing_and_limits_the_page_to_its_own_files(
    server: Server,
) -> None:
    async with httpx.AsyncClient(base_url=server.base) as anonymous:
        for response in (
            await anonymous.get("/"),
            await anonymous.get("/static/app.js"),
            await anonymous.get("/v1/sessions"),
            await anonymous.get("/v1/sessions", headers={"Host": "evil.example"}),
            await server.client.get("/v1/sessions"),
            await server.client.get("/nothing"),
        ):
            csp = response.headers["content-security-policy"]
            assert "frame-ancestors 'none'" in csp
            assert "script-src 'self'" in csp and "'unsafe-inline'" not in csp
            assert response.headers["x-frame-options"] == "DENY"
            assert response.headers["x-content-type-options"] == "nosniff"
            assert response.headers["referrer-policy"] == "no-referrer"


# -- runs ----------------------------------------------------------------


async def test_run_over_http_streams_text_and_finishes_as_a_chat_session(
    server: Server, events: Events
) -> None:
    started = await start(server, "hello", "hello there")
    assert started["session_id"] == "chat-hello"
    first = await events.expect("task_started", task_hash=started["task_hash"])
    assert first["session_id"] == "chat-hello"
    ended = await events.expect("run_ended", task_hash=started["task_hash"])
    assert ended["outcome"] == "finished"
    text = "".join(e["text"] for e in events.seen if e["type"] == "text")
    assert "hello there" in text
    assert_error(await server.client.get("/v1/session/hello/task"), 404, "no_pending_task")


async def test_session_id_with_the_chat_origin_keeps_it(server: Server, events: Events) -> None:
    started = await start(server, "chat-42", "hi")
    assert started["session_id"] == "chat-42"
    await events.expect("run_ended", task_hash=started["task_hash"])


@pytest.mark.parametrize("session", ["tg-42", "dc-999", "cli-abc"])
async def test_runs_in_sessions_of_other_front_ends_are_refused(
    server: Server, session: str
) -> None:
    response = await server.client.post(f"/v1/session/{session}/run", json={"text": "sh id"})
    message = assert_error(response, 400, "bad_session_id")
    assert "'chat-' sessions only" in message
    assert not server.runtime.executor.running()


async def test_confirmation_then_saved_question_then_answer_resumes_as_new_turn(
    server: Server, events: Events, workdir: Path
) -> None:
    started = await start(server, "c1", "write a.txt hi; ask Your name?")
    question = await events.expect("question", kind="confirm")
    assert question["session_id"] == "chat-c1"
    assert question["choices"] == ["allow", "allow_session", "deny"]
    listed = (await server.client.get("/v1/questions")).json()["questions"]
    assert [q["id"] for q in listed] == [question["id"]]
    # The change the write makes, a new file: all additions.
    diff = "--- /dev/null\n+++ b/a.txt\n@@ -0,0 +1 @@\n+hi\n\\ No newline at end of file"
    assert question["diff"] == listed[0]["diff"] == diff
    sessions = (await server.client.get("/v1/sessions")).json()["sessions"]
    (chat,) = [s for s in sessions if s["session_id"] == "chat-c1"]
    assert chat["running"] is True
    assert chat["waiting_on"][0]["who"] == "web"

    answered = await server.client.post(
        f"/v1/questions/{question['id']}/answer", json={"value": "allow"}
    )
    assert answered.status_code == 200, answered.text
    await events.expect("question_closed", id=question["id"], state="answered")
    ended = await events.expect("run_ended", task_hash=started["task_hash"])
    assert ended["outcome"] == "awaiting_answer"
    assert ended["question"] == "Your name?"
    assert (workdir / "a.txt").read_text() == "hi"

    task = (await server.client.get("/v1/session/chat-c1/task")).json()["task"]
    assert task["status"] == "awaiting_answer"
    assert task["question"]["prompt"] == "Your name?"
    assert task["question"]["kind"] == "question"
    assert task["running"] is False
    assert task["transcript"]["tool_results"] == 1  # the write was committed before parking
    assert task["transcript"]["unanswered_calls"] == ["ask_user"]
    assert task["waiting_on"][0]["who"] == "saved: answer it to resume"

    resumed = await server.client.post("/v1/session/c1/task/resume", json={"answer": "Ada"})
    assert resumed.status_code == 202, resumed.text
    hash2 = resumed.json()["task_hash"]
    assert (await events.expect("task_started", task_hash=hash2))["resumed"] is True
    final = await events.expect("run_ended", task_hash=hash2)
    assert final["outcome"] == "finished"
    assert "Ada" in final["text"]
    assert_error(await server.client.get("/v1/session/c1/task"), 404, "no_pending_task")


async def test_pause_keeps_pending_task_and_resume_continues_it(
    server: Server, events: Events
) -> None:
    started = await start(server, "p1", "sleep 60")
    await events.expect("tool_call", task_hash=started["task_hash"], name="sleep")
    stopped = await server.client.post(
        f"/v1/task/{started['task_hash']}/cancel", json={"pause": True}
    )
    assert stopped.json() == {
        "task_hash": started["task_hash"],
        "session_id": "chat-p1",
        "cause": "pause",
    }
    ended = await events.expect("run_ended", task_hash=started["task_hash"])
    assert (ended["outcome"], ended["cause"], ended["pending_kept"]) == (
        "cancelled",
        "pause",
        True,
    )
    sessions = (await server.client.get("/v1/sessions")).json()["sessions"]
    (paused,) = [s for s in sessions if s["session_id"] == "chat-p1"]
    assert (paused["status"], paused["cause"], paused["running"]) == ("interrupted", "pause", False)

    resumed = await server.client.post("/v1/session/p1/task/resume")
    assert resumed.status_code == 202, resumed.text
    hash2 = resumed.json()["task_hash"]
    await events.expect("task_started", task_hash=hash2, resumed=True)
    # The committed tool call is re-run (it had no result), so the run is going again.
    await events.expect("tool_call", task_hash=hash2, name="sleep")
    task = (await server.client.get("/v1/session/p1/task")).json()["task"]
    assert (task["status"], task["running"], task["runs"]) == ("running", True, 2)

    discarded = await server.client.delete("/v1/session/p1/task")
    assert discarded.json() == {"session_id": "chat-p1", "discarded": True}
    ended2 = await events.expect("run_ended", task_hash=hash2)
    assert (ended2["cause"], ended2["pending_kept"]) == ("user_cancel", False)
    assert_error(await server.client.get("/v1/session/p1/task"), 404, "no_pending_task")


async def test_the_task_says_what_a_resume_will_do_in_its_documented_shape(
    server: Server, events: Events
) -> None:
    started = await start(server, "pv", "read nothing; sleep 60")
    await events.expect("tool_call", task_hash=started["task_hash"], name="sleep")
    await events.expect("tool_result", task_hash=started["task_hash"], name="read_file")
    await server.client.post(f"/v1/task/{started['task_hash']}/cancel", json={"cause": "pause"})
    await events.expect("run_ended", task_hash=started["task_hash"])

    task = (await server.client.get("/v1/session/pv/task")).json()["task"]
    preview = task["preview"]
    assert preview["stop"] == "pause"
    assert [(c["name"], c["state"]) for c in preview["kept"]] == [("read_file", "done")]
    assert [(c["call_id"], c["name"], c["attempt"]) for c in preview["to_run"]] == [
        ("call_1_1", "sleep", 1)
    ]
    assert (preview["reissue"], preview["questions"]) == ([], [])
    assert preview["lines"][:2] == [
        "resume will keep 1 call (its result is saved, it does not run again)",
        "resume will run 1 call:",
    ]
    assert preview["lines"][2].startswith("  sleep call_1_1 (")
    validator = _validator("Task")
    assert [e.message for e in validator.iter_errors(task)] == []
    # The document holds the preview to its shape: without it, or with a key too many, no.
    assert list(validator.iter_errors({k: v for k, v in task.items() if k != "preview"}))
    assert list(validator.iter_errors(task | {"preview": preview | {"extra": 1}}))


async def test_a_question_is_listed_and_answered_only_for_its_own_session(
    server: Server, events: Events, workdir: Path
) -> None:
    one = await start(server, "q1", "write one.txt hi")
    first = await events.expect("question", kind="confirm", session_id="chat-q1")
    await start(server, "q2", "write two.txt hi")
    second = await events.expect("question", kind="confirm", session_id="chat-q2")

    def ids(response: httpx.Response) -> list[str]:
        return [q["id"] for q in response.json()["questions"]]

    assert ids(await server.client.get("/v1/questions")) == [first["id"], second["id"]]
    assert ids(await server.client.get("/v1/questions", params={"session": "q1"})) == [first["id"]]
    assert ids(await server.client.get("/v1/questions", params={"session": "chat-new"})) == []
    bad = await server.client.get("/v1/questions", params={"session": "a b"})
    assert_error(bad, 400, "bad_session_id")

    # Given in the view of chat-q2, an answer to chat-q1's question answers nothing.
    wrong = await server.client.post(
        f"/v1/questions/{first['id']}/answer", json={"value": "allow", "session_id": "chat-q2"}
    )
    message = assert_error(wrong, 404, "unknown_question")
    assert message == (
        f"no open question {first['id']!r} of session chat-q2; list them at /v1/questions"
    )
    assert ids(await server.client.get("/v1/questions", params={"session": "q1"})) == [first["id"]]
    assert not (workdir / "one.txt").exists()
    right = await server.client.post(
        f"/v1/questions/{first['id']}/answer", json={"value": "allow", "session_id": "chat-q1"}
    )
    assert right.status_code == 200, right.text
    await events.expect("run_ended", task_hash=one["task_hash"])
    assert (workdir / "one.txt").read_text() == "hi"
    assert not (workdir / "two.txt").exists()
    # Without a session the answer goes to the question named, as before.
    plain = await server.client.post(f"/v1/questions/{second['id']}/answer", json={"value": "deny"})
    assert plain.status_code == 200, plain.text


async def test_stop_without_pause_drops_the_pending_task(server: Server, events: Events) -> None:
    started = await start(server, "s1", "sleep 60")
    await events.expect("tool_call", task_hash=started["task_hash"])
    await server.client.post(f"/v1/task/{started['task_hash']}/cancel", json={"pause": False})
    ended = await events.expect("run_ended", task_hash=started["task_hash"])
    assert (ended["cause"], ended["pending_kept"]) == ("user_cancel", False)
    assert_error(await server.client.get("/v1/session/s1/task"), 404, "no_pending_task")


async def test_a_cancel_body_names_its_cause(server: Server, events: Events) -> None:
    started = await start(server, "c2", "sleep 60")
    await events.expect("tool_call", task_hash=started["task_hash"])
    stopped = await server.client.post(
        f"/v1/task/{started['task_hash']}/cancel", json={"cause": "pause"}
    )
    assert stopped.json()["cause"] == "pause"
    ended = await events.expect("run_ended", task_hash=started["task_hash"])
    assert (ended["cause"], ended["pending_kept"]) == ("pause", True)


@pytest.mark.parametrize(
    ("body", "cause"),
    [
        ({}, Cause.USER_CANCEL),
        ({"cause": "user_cancel"}, Cause.USER_CANCEL),
        ({"cause": "pause"}, Cause.PAUSE),
        # The older spelling, read by the body's decode step alone.
        ({"pause": True}, Cause.PAUSE),
        ({"pause": False}, Cause.USER_CANCEL),
        ({"pause": False, "cause": "pause"}, Cause.PAUSE),
        ({"pause": True, "cause": "pause"}, Cause.PAUSE),
    ],
)
def test_a_cancel_body_reads_its_cause_and_the_older_pause_flag(
    body: dict[str, Any], cause: Cause
) -> None:
    assert parse_body(json.dumps(body).encode(), CancelBody) == CancelBody(cause)
    assert [field.name for field in attrs.fields(CancelBody)] == ["cause"]
    assert _validator("CancelBody").is_valid(body)  # and the API document says so


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"pause": True, "cause": "user_cancel"}, "'pause' is true but 'cause' is not 'pause'"),
        ({"cause": "disconnect"}, "a cancel's cause is 'user_cancel' or 'pause', not 'disconnect'"),
        ({"cause": "nonsense"}, "expected Cause @ $.cause"),
        ({"pause": 1}, "expected bool @ $.pause"),
    ],
)
def test_a_cancel_body_refuses_other_causes_and_two_that_disagree(
    body: dict[str, Any], says: str
) -> None:
    with pytest.raises(BadBodyError, match=re.escape(says)):
        parse_body(json.dumps(body).encode(), CancelBody)
    assert not _validator("CancelBody").is_valid(body)  # as the API document says


async def test_cancel_reaches_only_tasks_started_over_http(server: Server) -> None:
    runtime = server.runtime
    tui = object()
    started = trio.Event()

    async def recorder(event: Event) -> None:
        started.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            partial(runtime.executor.run, "cli-w1", "sleep 60", owner=tui, emit=recorder)
        )
        with trio.fail_after(10):
            await started.wait()
        (info,) = runtime.executor.running()
        foreign = await server.client.post(f"/v1/task/{info.task_hash}/cancel", json={})
        # A task of another front-end is answered exactly like one that does not exist.
        message = assert_error(foreign, 404, "unknown_task")
        assert message == f"no running task {info.task_hash!r}: unknown or already finished"
        refused = await server.client.delete("/v1/session/cli-w1/task")
        assert_error(refused, 409, "session_busy")
        assert runtime.executor.is_running("cli-w1")
        runtime.executor.cancel(info.task_hash, Cause.PAUSE)
    unknown = await server.client.post("/v1/task/0123456789ab/cancel", json={"pause": True})
    message = assert_error(unknown, 404, "unknown_task")
    assert message == "no running task '0123456789ab': unknown or already finished"


async def test_running_or_pending_session_refuses_a_new_run(server: Server, events: Events) -> None:
    started = await start(server, "b1", "sleep 60")
    await events.expect("tool_call", task_hash=started["task_hash"])
    busy = await server.client.post("/v1/session/b1/run", json={"text": "again"})
    assert_error(busy, 409, "session_busy")
    await server.client.post(f"/v1/task/{started['task_hash']}/cancel", json={"pause": True})
    await events.expect("run_ended", task_hash=started["task_hash"])
    pending = await server.client.post("/v1/session/b1/run", json={"text": "again"})
    assert "resume it or discard it" in assert_error(pending, 409, "pending_task_exists")
    no_question = await server.client.post("/v1/session/b1/task/resume", json={"answer": "x"})
    assert_error(no_question, 409, "bad_answer")
    assert_error(await server.client.post("/v1/session/zz/task/resume"), 404, "no_pending_task")
    assert_error(await server.client.delete("/v1/session/zz/task"), 404, "no_pending_task")


async def test_sessions_list_says_which_front_end_a_question_waits_on(
    server: Server, events: Events
) -> None:
    runtime = server.runtime
    with runtime.registry.listen("cli-", name="tui") as tui_listener:

        async def recorder(event: Event) -> None:
            pass

        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                partial(runtime.executor.run, "cli-w2", "sh true", owner=object(), emit=recorder)
            )
            with trio.fail_after(10):
                entry = await tui_listener.claim()
            sessions = (await server.client.get("/v1/sessions")).json()["sessions"]
            (cli,) = [s for s in sessions if s["session_id"] == "cli-w2"]
            assert cli["origin"] == "cli-"
            assert cli["stoppable"] is False
            assert [(w["who"], w["kind"]) for w in cli["waiting_on"]] == [("tui", "confirm")]
            assert (await server.client.get("/v1/questions")).json()["questions"] == []
            entry.answer(Answer("deny"))


async def test_secret_is_stored_and_never_echoed(server: Server, events: Events) -> None:
    started = await start(server, "k1", "secret API_KEY")
    question = await events.expect("question", kind="secret")
    assert question["masked"] is True
    missing = await server.client.post(
        f"/v1/questions/{question['id']}/answer", json={"value": "store"}
    )
    assert_error(missing, 409, "bad_answer")
    answered = await server.client.post(
        f"/v1/questions/{question['id']}/answer", json={"value": "store", "secret": "s3cr3t-v"}
    )
    assert answered.status_code == 200
    assert "s3cr3t-v" not in answered.text
    await events.expect("run_ended", task_hash=started["task_hash"], outcome="finished")
    assert server.runtime.secrets.get("API_KEY") == "s3cr3t-v"
    assert "s3cr3t-v" not in json.dumps(events.seen)


async def test_confirmation_answer_must_be_one_of_its_choices(
    server: Server, events: Events
) -> None:
    started = await start(server, "q1", "sh true")
    question = await events.expect("question", kind="confirm")
    bad = await server.client.post(f"/v1/questions/{question['id']}/answer", json={"value": "yes"})
    assert "allow, allow_session, deny" in assert_error(bad, 409, "bad_answer")
    unknown = await server.client.post("/v1/questions/q999/answer", json={"value": "allow"})
    assert_error(unknown, 404, "unknown_question")
    await server.client.post(f"/v1/questions/{question['id']}/answer", json={"value": "deny"})
    ended = await events.expect("run_ended", task_hash=started["task_hash"])
    assert ended["outcome"] == "finished"
    again = await server.client.post(
        f"/v1/questions/{question['id']}/answer", json={"value": "deny"}
    )
    assert "was answered already at" in assert_error(again, 409, "late_answer")


async def test_stopping_a_run_withdraws_its_open_question(server: Server, events: Events) -> None:
    started = await start(server, "w1", "sh true")
    question = await events.expect("question", kind="confirm")
    await server.client.post(f"/v1/task/{started['task_hash']}/cancel", json={"pause": True})
    closed = await events.expect("question_closed", id=question["id"])
    assert closed["state"] == "withdrawn"
    late = await server.client.post(
        f"/v1/questions/{question['id']}/answer", json={"value": "allow"}
    )
    assert assert_error(late, 409, "late_answer") == (
        f"question {question['id']} was withdrawn: its run was paused"
    )
    assert (await server.client.get("/v1/questions")).json()["questions"] == []


# -- bad input --------------------------------------------------------------

_JSON = {"Content-Type": "application/json"}


@pytest.mark.parametrize(
    ("send", "status", "code", "says"),
    [
        (
            lambda c: c.post("/v1/session/x/run", content=b"{nope", headers=_JSON),
            400,
            "bad_body",
            "not valid JSON",
        ),
        (
            lambda c: c.post("/v1/session/x/run", content=b"[1]", headers=_JSON),
            400,
            "bad_body",
            "JSON object",
        ),
        (lambda c: c.post("/v1/session/x/run", json={}), 400, "bad_body", "$.text"),
        (
            lambda c: c.post("/v1/session/x/run", json={"text": 5}),
            400,
            "bad_body",
            "expected str @ $.text",
        ),
        (
            lambda c: c.post("/v1/session/x/run", json={"text": "a", "extra": 1}),
            400,
            "bad_body",
            "extra",
        ),
        (lambda c: c.post("/v1/session/x/run", json={"text": "  "}), 400, "bad_body", "empty"),
        (
            lambda c: c.post(
                "/v1/session/x/run", content=b"text=hi", headers={"Content-Type": "text/plain"}
            ),
            415,
            "unsupported_media_type",
            "application/json",
        ),
        (
            lambda c: c.post("/v1/session/x/run", content=b"\xff\xfe", headers=_JSON),
            400,
            "bad_body",
            "not valid JSON",
        ),
        (
            lambda c: c.post(
                "/v1/task/abc/cancel", content=b'{"pause": ' + b"1" * 5000 + b"}", headers=_JSON
            ),
            400,
            "bad_body",
            "an integer of 5000 digits is longer than the 4300 digits accepted",
        ),
        (
            lambda c: c.post("/v1/task/abc/cancel", json={"pause": "yes"}),
            400,
            "bad_body",
            "expected bool @ $.pause",
        ),
        (
            lambda c: c.post("/v1/session/" + "x" * 200 + "/run", json={"text": "a"}),
            400,
            "bad_session_id",
            "1 to 128",
        ),
        (lambda c: c.get("/v1/nothing"), 404, "not_found", "/openapi.json"),
        (lambda c: c.put("/v1/sessions"), 405, "method_not_allowed", "PUT"),
        (lambda c: c.get("/static/../_app.py"), 404, "not_found", ""),
    ],
)
async def test_bad_requests_get_a_json_error_and_the_server_keeps_serving(
    server: Server,
    send: Callable[[httpx.AsyncClient], Any],
    status: int,
    code: str,
    says: str,
) -> None:
    response = await send(server.client)
    assert says in assert_error(response, status, code)
    assert (await server.client.get("/v1/sessions")).status_code == 200


async def test_oversized_body_is_refused_declared_or_streamed(server: Server) -> None:
    big = json.dumps({"text": "x" * (MAX_BODY + 10)}).encode()
    declared = await server.client.post("/v1/session/x/run", content=big, headers=_JSON)
    assert_error(declared, 413, "body_too_large")

    async def chunks() -> AsyncIterator[bytes]:
        for start_ in range(0, len(big), 65536):
            yield big[start_ : start_ + 65536]

    streamed = await server.client.post("/v1/session/x/run", content=chunks(), headers=_JSON)
    assert_error(streamed, 413, "body_too_large")
    assert (await server.client.get("/v1/sessions")).status_code == 200
    assert await server.runtime.store.load("chat-x") is None


async def test_a_declared_body_too_large_is_refused_before_the_token_is_checked(
    server: Server,
) -> None:
    stream = await trio.open_tcp_stream("127.0.0.1", server.port)
    await stream.send_all(
        f"POST /v1/session/x/run HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n".encode()
        + b"Content-Length: 314572800\r\n\r\n"
    )
    reply = await _read_response(stream)
    assert reply.startswith(b"HTTP/1.1 413 "), reply
    assert b'"body_too_large"' in reply
    # A Content-Length of 5,000 digits is refused by h11 before the request reaches us.
    stream = await trio.open_tcp_stream("127.0.0.1", server.port)
    await stream.send_all(
        f"POST /v1/session/x/run HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n".encode()
        + b"Content-Length: "
        + b"9" * 5000
        + b"\r\n\r\n"
    )
    assert (await _read_response(stream)).startswith(b"HTTP/1.1 400 ")
    assert (await server.client.get("/v1/sessions")).status_code == 200


async def _read_response(stream: trio.SocketStream) -> bytes:
    """Everything the server sends until it closes the connection; then ours is closed too."""
    reply = b""
    async with stream:
        with trio.fail_after(30):
            while chunk := await stream.receive_some():
                reply += chunk
    return reply


async def test_a_body_that_does_not_arrive_in_time_gets_408_and_the_connection_closes(
    server: Server, autojump_clock: trio.testing.MockClock
) -> None:
    stream = await trio.open_tcp_stream("127.0.0.1", server.port)
    await stream.send_all(
        f"POST /v1/session/x/run HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
        f"Authorization: Bearer {server.token}\r\nContent-Type: application/json\r\n"
        "Content-Length: 100\r\n\r\n{".encode()
    )
    started = trio.current_time()
    reply = await _read_response(stream)
    assert reply.startswith(b"HTTP/1.1 408 "), reply
    assert b'"body_timeout"' in reply and b"send it at once" in reply
    assert trio.current_time() - started == pytest.approx(BODY_SECONDS, abs=0.5)
    assert await server.runtime.store.load("chat-x") is None


#: More pieces of body than hypercorn queues for the application (10 messages).
_PIECES = 12


@asynccontextmanager
async def _held_task_route(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[trio.Event]:
    """``GET /v1/session/{id}/task`` answers (404) only once the event yielded is set."""
    answer = trio.Event()
    task = WebFrontEnd.task

    async def held(self: WebFrontEnd, session_id: str) -> dict[str, Any] | None:
        await answer.wait()
        return await task(self, session_id)

    monkeypatch.setattr(WebFrontEnd, "task", held)
    yield answer
    answer.set()


async def _unread_body(stream: trio.SocketStream, server: Server, framing: str) -> h11.Connection:
    """Send ``GET /v1/session/x/task`` with a body of `_PIECES` pieces the server reads one by
    one; the route takes no body. Returns the client's side of the connection."""
    client = h11.Connection(h11.CLIENT)
    pieces = [b"x" * 100] * _PIECES
    framed = (
        ("Content-Length", str(sum(map(len, pieces))))
        if framing == "content-length"
        else ("Transfer-Encoding", "chunked")
    )
    headers = [
        ("Host", f"127.0.0.1:{server.port}"),
        ("Authorization", f"Bearer {server.token}"),
        framed,
    ]
    await stream.send_all(
        client.send(h11.Request(method="GET", target="/v1/session/x/task", headers=headers))
    )
    for piece in pieces:
        await stream.send_all(client.send(h11.Data(data=piece)))
        # Read by the server before the next is sent: one message each in its queue.
        await trio.testing.wait_all_tasks_blocked()
    await stream.send_all(client.send(h11.EndOfMessage()))
    await trio.testing.wait_all_tasks_blocked()
    return client


async def _next_response(client: h11.Connection, stream: trio.SocketStream) -> h11.Response | None:
    """The next whole response on the connection; None when the server closed it instead."""
    response = None
    while True:
        try:
            event = client.next_event()
        except h11.RemoteProtocolError:
            return None
        if event is h11.NEED_DATA:
            try:
                client.receive_data(await stream.receive_some())
            except trio.BrokenResourceError:
                return None
        elif isinstance(event, h11.Response):
            response = event
        elif isinstance(event, h11.EndOfMessage):
            return response
        elif isinstance(event, h11.ConnectionClosed):
            return None


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
async def test_a_body_the_route_did_not_read_never_leaves_the_connection_unread(
    server: Server, monkeypatch: pytest.MonkeyPatch, framing: str
) -> None:
    """A route that answers without reading a body that came in more pieces than hypercorn
    queues for it: the answer comes, and so does the answer to the next request on the
    same connection (or the server closes it; the client then asks on a new one)."""
    stream = await trio.open_tcp_stream("127.0.0.1", server.port)
    async with stream, _held_task_route(monkeypatch) as answer:
        client = await _unread_body(stream, server, framing)
        answer.set()
        with trio.fail_after(10):
            first = await _next_response(client, stream)
        assert first is not None and first.status_code == 404, first
        client.start_next_cycle()
        headers = [
            ("Host", f"127.0.0.1:{server.port}"),
            ("Authorization", f"Bearer {server.token}"),
        ]
        request = h11.Request(method="GET", target="/v1/sessions", headers=headers)
        with contextlib.suppress(trio.BrokenResourceError):
            await stream.send_all(client.send(request) + client.send(h11.EndOfMessage()))
        with trio.move_on_after(10) as waited:
            second = await _next_response(client, stream)
        assert not waited.cancelled_caught, "the server never read the connection again"
        assert second is None or second.status_code == 200, second
    assert (await server.client.get("/v1/sessions")).status_code == 200


async def test_a_client_leaving_with_its_body_unread_frees_its_connection_slot(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = load_or_create_token(runtime.state_dir)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(
            partial(serve_http, runtime, "127.0.0.1", 0, token=token, max_connections=1)
        )
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{port}",
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
        ) as client:
            server = Server(runtime, port, token, client)
            async with _held_task_route(monkeypatch) as answer:
                async with await trio.open_tcp_stream("127.0.0.1", port) as stream:
                    await _unread_body(stream, server, "content-length")
                answer.set()  # answered to nobody: the client has gone
                # The only slot is free again once the server is done with that connection.
                with trio.move_on_after(10) as waited:
                    response = await client.get("/v1/sessions")
                assert not waited.cancelled_caught, (
                    "the connection of the client that left was kept"
                )
                assert response.status_code == 200
        nursery.cancel_scope.cancel()


async def test_shutting_the_server_down_keeps_the_running_task(runtime: Runtime) -> None:
    token = load_or_create_token(runtime.state_dir)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(partial(serve_http, runtime, "127.0.0.1", 0, token=token))
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {token}"}
        ) as client:
            response = await client.post("/v1/session/d1/run", json={"text": "sleep 60"})
            assert response.status_code == 202
        nursery.cancel_scope.cancel()
    record = await runtime.store.load("chat-d1")
    assert record is not None
    assert record.cause is Cause.SHUTDOWN
    assert runtime.registry.statistics().listeners == 0  # the chat- listener went with it


async def test_shutting_the_server_down_closes_the_connections_it_was_serving(
    runtime: Runtime,
) -> None:
    token = load_or_create_token(runtime.state_dir)
    collecting = gc.isenabled()
    gc.disable()  # only the server's own close may end the connection, not the collector
    try:
        async with trio.open_nursery() as nursery:
            port = await nursery.start(partial(serve_http, runtime, "127.0.0.1", 0, token=token))
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            # A whole request, answered; the connection stays open for the next one.
            await stream.send_all(b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            with trio.fail_after(30):
                reply = await stream.receive_some()
            assert reply.startswith(b"HTTP/1.1 "), reply
            nursery.cancel_scope.cancel()
        async with stream:
            with trio.fail_after(30):
                while await stream.receive_some():
                    pass  # the rest of the reply, if any; then the server's close
    finally:
        if collecting:
            gc.enable()


async def test_a_client_leaving_the_event_stream_closes_it_at_once(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The client goes while the server waits to send (its socket full): the stream's
    generator, stopped at a ``yield``, is closed by the server, not left to the collector."""
    unsubscribed = trio.Event()
    subscribe = WebFrontEnd.subscribe

    @contextlib.contextmanager
    def watched(self: WebFrontEnd, **kwargs: Any) -> Iterator[Any]:
        with subscribe(self, **kwargs) as subscription:
            try:
                yield subscription
            finally:
                unsubscribed.set()

    monkeypatch.setattr(WebFrontEnd, "subscribe", watched)
    sending = trio.Event()

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            sending.set()
            await trio.sleep_forever()  # a client that does not read

    async def receive() -> dict[str, Any]:
        await sending.wait()
        return {"type": "http.disconnect"}

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": "/v1/events",
        "raw_path": b"/v1/events",
        "root_path": "",
        "query_string": b"",
        "headers": [],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        with runtime.registry.listen("chat-", name="web") as listener:
            async with trio.open_nursery() as nursery:
                guard: Any = build_app(WebFrontEnd(runtime, nursery, listener), "t", hosts=())
                with trio.fail_after(30):
                    await guard.app(scope, receive, send)
                    closed_in_time = unsubscribed.is_set()
                    await unsubscribed.wait()
                nursery.cancel_scope.cancel()
    assert closed_in_time, "the subscription outlived the response"
    collected = [str(w.message) for w in caught if "_event_stream" in str(w.message)]
    assert collected == []


# -- the document and the page ---------------------------------------------------


async def test_openapi_documents_exactly_the_routes_the_server_has(server: Server) -> None:
    served = (await server.client.get("/openapi.json")).json()
    assert served == openapi_document()
    documented = {
        (path, method.upper()) for path, item in served["paths"].items() for method in item
    }
    routes: set[tuple[str, str]] = set()
    with server.runtime.registry.listen("chat-none-", name="probe") as listener:
        async with trio.open_nursery() as nursery:
            frontend = WebFrontEnd(server.runtime, nursery, listener)
            guard: Any = build_app(frontend, server.token, hosts=())
    for route in guard.app.routes:
        assert isinstance(route, Route)
        routes |= {(route.path, m) for m in route.methods or () if m != "HEAD"}
    assert routes == documented


def test_openapi_bodies_and_enums_come_from_the_classes() -> None:
    schemas = openapi_document()["components"]["schemas"]
    for cls in (RunBody, ResumeBody, CancelBody, AnswerBody):
        older = set(OLDER_FIELDS.get(cls, {}).get("properties", {}))
        fields = {f.name for f in attrs.fields(cls)}
        assert set(schemas[cls.__name__]["properties"]) == fields | older
        assert all(schemas[cls.__name__]["properties"][name]["deprecated"] for name in older)
        assert schemas[cls.__name__]["additionalProperties"] is False
    assert schemas["CancelBody"]["properties"]["cause"]["enum"] == ["user_cancel", "pause"]
    assert schemas["RunBody"]["required"] == ["text"]
    assert schemas["Task"]["properties"]["status"]["enum"] == [s.value for s in TaskStatus]
    assert schemas["Question"]["properties"]["kind"]["enum"] == [k.value for k in RequestKind]


async def test_page_and_its_assets_are_served(server: Server) -> None:
    page = await server.client.get("/")
    assert page.headers["content-type"].startswith("text/html")
    for asset, kind in (("app.js", "text/javascript"), ("app.css", "text/css")):
        response = await server.client.get(f"/static/{asset}")
        assert response.status_code == 200
        assert response.headers["content-type"].startswith(kind)
        assert f"/static/{asset}" in page.text


async def test_an_unreadable_task_is_listed_and_can_be_deleted(server: Server) -> None:
    runtime = server.runtime
    await runtime.executor.run("chat-fine", "ask Name?", owner="o", emit=Recorder())
    insert_unreadable(runtime.store, "chat-bad")
    listed = await server.client.get("/v1/sessions")
    assert listed.status_code == 200, listed.text
    by_id = {s["session_id"]: s for s in listed.json()["sessions"]}
    assert by_id["chat-fine"]["status"] == "awaiting_answer"
    assert by_id["chat-bad"]["status"] == "unreadable"
    assert "agentrt pending discard chat-bad" in by_id["chat-bad"]["error"]
    deleted = await server.client.delete("/v1/session/chat-bad/task")
    assert deleted.json() == {"session_id": "chat-bad", "discarded": True}
    left = (await server.client.get("/v1/sessions")).json()["sessions"]
    assert [s["session_id"] for s in left] == ["chat-fine"]


async def test_a_method_a_path_lacks_gets_405_naming_every_method_it_has(server: Server) -> None:
    response = await server.client.put("/v1/session/x/task")
    assert_error(response, 405, "method_not_allowed")
    allowed = {m.strip() for m in response.headers["allow"].split(",")}
    assert allowed == {"GET", "HEAD", "DELETE"}
    assert (await server.client.delete("/v1/session/x/task")).status_code == 404
    options = await server.client.options("/v1/questions")
    assert_error(options, 405, "method_not_allowed")
    assert {m.strip() for m in options.headers["allow"].split(",")} == {"GET", "HEAD"}


_PATH_TEXT = st.text(st.characters(codec="utf-8"), max_size=140) | st.text(
    st.sampled_from("cli-chat-tg-dc-xyz09~!/ %é"), max_size=135
)


@settings(deadline=None)
@given(raw=_PATH_TEXT)
def test_the_documented_session_id_pattern_is_the_rule_the_server_checks(raw: str) -> None:
    declared = re.fullmatch(SESSION_ID_PATTERN, raw) is not None
    try:
        session_id = session_id_from_path(raw)
    except BadSessionIdError:
        accepted = False
    else:
        accepted = True
        assert len(session_id) <= 128 and session_id.startswith(("cli-", "chat-", "tg-", "dc-"))
    assert declared == accepted, raw
    chat = re.fullmatch(CHAT_SESSION_ID_PATTERN, raw) is not None
    assert chat == (accepted and session_id.startswith("chat-")), raw


@pytest.mark.parametrize(
    ("raw", "accepted"),
    [
        ("x" * 123, True),
        ("x" * 124, False),  # chat- before it makes 129
        ("cli-" + "x" * 124, True),
        ("chat-" + "x" * 124, False),
        ("a/b", False),
        ("a%20b", False),
        ("a b", False),
        ("café", False),
        ("", False),
    ],
)
def test_session_ids_at_the_edges_of_the_pattern(raw: str, accepted: bool) -> None:
    assert (re.fullmatch(SESSION_ID_PATTERN, raw) is not None) is accepted
    if accepted:
        session_id_from_path(raw)
    else:
        with pytest.raises(BadSessionIdError, match="visible ASCII"):
            session_id_from_path(raw)


@settings(deadline=None)
@given(
    cursor=st.from_regex(CURSOR_PATTERN, fullmatch=True)
    | st.text(st.sampled_from("0123456789.:eE+- inf_x"), max_size=12)
)
def test_every_cursor_the_document_allows_is_one_the_store_reads(cursor: str) -> None:
    if re.fullmatch(CURSOR_PATTERN, cursor) is not None:
        parse_cursor(cursor)  # never BadCursorError: the HTTP API answers it with a page


async def test_a_cursor_outside_the_pattern_gets_400_and_one_inside_a_page(
    server: Server,
) -> None:
    for cursor in ("inf:x", " 1:x", "1_0:x", "x"):
        response = await server.client.get("/v1/sessions", params={"cursor": cursor})
        assert_error(response, 400, "bad_query")
    response = await server.client.get("/v1/sessions", params={"cursor": "1e3:chat-z"})
    assert response.status_code == 200, response.text
    assert response.json() == {"sessions": [], "next": None}


@settings(deadline=None)
@given(text=st.text(st.characters(codec="utf-8"), max_size=20))
def test_the_documented_run_text_pattern_is_what_the_server_takes_for_blank(text: str) -> None:
    assert (re.search(NOT_BLANK, text) is not None) == bool(text.strip())


def test_no_whitespace_lies_beyond_the_basic_multilingual_plane() -> None:
    # NOT_BLANK lists the BMP's whitespace only.
    assert not any(chr(c).isspace() for c in range(0x10000, sys.maxunicode + 1))


def _validator(name: str) -> jsonschema.protocols.Validator:
    document = openapi_document()
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$ref": f"#/components/schemas/{name}",
        "components": document["components"],
    }
    validator: jsonschema.protocols.Validator = jsonschema.Draft202012Validator(schema)
    return validator


_EVENT_CLASSES = sorted(EVENT_TYPES, key=lambda cls: cls.__name__)


@pytest.mark.parametrize("cls", _EVENT_CLASSES, ids=lambda cls: cls.__name__)
@settings(deadline=None)
@given(data=st.data())
def test_every_run_event_fits_the_documented_event_schema(cls: type, data: st.DataObject) -> None:
    # Each field drawn from its (string) annotation; a tool call's arguments are any JSON.
    fields = {
        name: st.dictionaries(st.text(max_size=5), st.text(max_size=5) | st.integers())
        if hint == dict[str, Any]
        else st.from_type(hint)
        for name, hint in typing.get_type_hints(cls).items()
    }
    event = data.draw(st.builds(cls, **fields))
    obj = event_to_json(data.draw(st.text(min_size=1, max_size=10)), event)
    errors = [e.message for e in _validator("Event").iter_errors(json.loads(json.dumps(obj)))]
    assert errors == [], obj


async def test_the_live_event_stream_fits_the_documented_schema(server: Server) -> None:
    validator = _validator("Event")
    seen: list[Json] = []
    async with server.client.stream("GET", "/v1/events") as response:
        lines = response.aiter_lines()
        first: list[str] = []
        while line := await anext(lines):
            first.append(line)
        # The reconnection delay rides on the first event, which carries data.
        assert first[0] == "retry: 1000", first
        assert [line for line in first if line.startswith("data: ")], first
        seen += [json.loads(line[6:]) for line in first if line.startswith("data: ")]
        events = Events(lines)
        started = await start(server, "doc", "write a.txt hi; ask Your name?")
        question = await events.expect("question", kind="confirm")
        await server.client.post(f"/v1/questions/{question['id']}/answer", json={"value": "allow"})
        await events.expect("run_ended", task_hash=started["task_hash"])
        resumed = await server.client.post("/v1/session/doc/task/resume", json={"answer": "Ada"})
        await events.expect("run_ended", task_hash=resumed.json()["task_hash"])
    seen += events.seen
    types = {obj["type"] for obj in seen}
    assert {"ready", "task_started", "text", "tool_call", "tool_result", "run_ended"} <= types
    assert {"question", "question_closed", "usage"} <= types
    for obj in seen:
        assert [e.message for e in validator.iter_errors(obj)] == [], obj

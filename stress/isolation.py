"""Isolation: nobody sees, answers, cancels or resumes another's task or question.

Three kinds of intruder try, and every attempt is counted:

* **another Unix user.** As root, the suite creates a throwaway user and
  runs a client as that uid (a child process that drops to it), with the
  socket's folder and file modes loosened on purpose, so that only the
  daemon's ``SO_PEERCRED`` check stands in the way; then again with the
  modes intact. Without root (or ``useradd``) it makes the daemon believe it
  belongs to another uid instead, which exercises the same check.
* **another window of the same user.** Window A holds a question, a
  confirmation, a streaming run and a paused task; window B, knowing every
  id and hash of A's, tries to cancel, pause, answer, resume, discard, list,
  run in A's sessions and take over A's window hash.
* **HTTP without the token** (no header, a wrong one, the token in the query
  string, a forged cookie), and HTTP with it against the terminal's runs.

A leak is any reply that carries A's data, any effect on A's runs, or a
refusal that did not come. At the end A answers, finishes or resumes every
one of its runs, proving none of them was disturbed.
"""

from __future__ import annotations

import json
import os
import pwd
import secrets
import shutil
import subprocess
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import trio

from agentrt.core.runtime import Runtime
from agentrt.http import serve_http
from agentrt.protocol.client import Client
from agentrt.protocol.frames import AnswerFrame
from agentrt.protocol.frames import AskFrame
from agentrt.protocol.frames import Cancel
from agentrt.protocol.frames import DaemonFrame
from agentrt.protocol.frames import EndedFrame
from agentrt.protocol.frames import ErrorFrame
from agentrt.protocol.frames import PendingAction
from agentrt.protocol.frames import PendingList
from agentrt.protocol.frames import PendingRequest
from agentrt.protocol.frames import Run
from agentrt.protocol.frames import TaskFrame
from agentrt.protocol.frames import TextFrame
from agentrt.vocab.terms import Cause

from ._common import STEP_TIMEOUT
from ._common import SuiteResult
from ._common import TrackedDaemon
from ._common import inprocess_daemon
from ._common import short_tempdir

_INTRUDER = r"""
import json, socket, sys
path, frames = sys.argv[1], json.loads(sys.argv[2])
out = {"connected": False, "replies": []}
try:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(path)
    out["connected"] = True
    try:
        s.sendall(b"".join(json.dumps(f).encode() + b"\n" for f in frames))
    except OSError:
        pass
    buf = b""
    while True:
        try:
            chunk = s.recv(65536)
        except OSError:
            break
        if not chunk:
            break
        buf += chunk
    out["replies"] = [json.loads(x) for x in buf.split(b"\n") if x.strip()]
except OSError as exc:
    out["error"] = type(exc).__name__
print(json.dumps(out))
"""


class _WindowA:
    """Window A's runs in every state an intruder could reach for."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.frames: list[DaemonFrame] = []
        self.asks: dict[str, AskFrame] = {}
        self.tasks: dict[str, str] = {}

    async def until(self, want: type[Any], session: str) -> Any:
        while True:
            frame = await self.client.receive()
            self.frames.append(frame)
            if isinstance(frame, AskFrame):
                self.asks[frame.session] = frame
            if isinstance(frame, TaskFrame):
                self.tasks[frame.session_id] = frame.task_hash
            if isinstance(frame, want) and getattr(frame, "session", session) == session:
                return frame


async def run_isolation(seed: int) -> SuiteResult:
    """Count intrusion attempts and leaks."""
    result = SuiteResult("isolation", "isolation attempts", "leaks", seed=seed)
    started = time.monotonic()
    tag = secrets.token_hex(3)
    with short_tempdir("sti-") as root:
        async with inprocess_daemon(root) as (runtime, daemon, nursery):
            token = "k" * 43
            port = await nursery.start(partial(serve_http, runtime, "127.0.0.1", 0, token=token))
            async with await Client.connect(daemon.socket_path) as a_client:
                a = _WindowA(a_client)
                s = {
                    name: f"cli-iso{tag}-{name}" for name in ("ask", "confirm", "stream", "paused")
                }
                await a_client.send(Run("ask favourite colour?", session=s["ask"]))
                await a.until(AskFrame, s["ask"])
                await a_client.send(Run("sh echo from-a", session=s["confirm"]))
                await a.until(AskFrame, s["confirm"])
                await a_client.send(Run("stream 100000", session=s["stream"]))
                await a.until(TextFrame, "")
                await a_client.send(Run("ask paused question?", session=s["paused"]))
                await a.until(AskFrame, s["paused"])
                await a_client.send(Cancel(a.tasks[s["paused"]], Cause.PAUSE))
                await a.until(EndedFrame, s["paused"])
                secrets_of_a = {
                    *s.values(),
                    *a.tasks.values(),
                    *(ask.id for ask in a.asks.values()),
                    "favourite colour",
                    "from-a",
                }
                with trio.fail_after(STEP_TIMEOUT * 2):
                    await _other_window(daemon, a, s, secrets_of_a, result)
                    await _other_user(daemon, root, a, s, result)
                    await _http(port, token, a, s, secrets_of_a, result)
                    await _policy(runtime, daemon, port, token, a, s, result)
                    await _a_still_works(runtime, a, s, result)
    result.seconds = time.monotonic() - started
    return result


def _leaks(frame: DaemonFrame | dict[str, Any], secrets_of_a: set[str]) -> bool:
    text = json.dumps(frame if isinstance(frame, dict) else repr(frame))
    return any(secret in text for secret in secrets_of_a)


async def _other_window(
    daemon: TrackedDaemon,
    a: _WindowA,
    s: dict[str, str],
    secrets_of_a: set[str],
    result: SuiteResult,
) -> None:
    attempts: list[Any] = []
    for task in a.tasks.values():
        attempts += [Cancel(task), Cancel(task, Cause.PAUSE)]
    for ask in a.asks.values():
        attempts += [AnswerFrame(ask.id, "allow"), AnswerFrame(ask.id, "blue", secret="x")]
    for session in s.values():
        attempts += [
            PendingRequest(PendingAction.RESUME, session=session),
            PendingRequest(PendingAction.RESUME, session=session, answer="allow"),
            PendingRequest(PendingAction.DISCARD, session=session),
            PendingRequest(PendingAction.SHOW, session=session),
            PendingRequest(PendingAction.PREVIEW, session=session),
            Run("hello", session=session),
        ]
    attempts.append(PendingRequest(PendingAction.LIST))
    async with await Client.connect(daemon.socket_path) as b:
        for frame in attempts:
            result.done += 1
            await b.send(frame)
            reply = await b.receive()
            refused = isinstance(reply, ErrorFrame) or (
                isinstance(reply, PendingList)
                and not any(t.session in s.values() for t in reply.tasks)
            )
            # Echoing back an id B sent itself tells B nothing new.
            echoed = {x for x in secrets_of_a if x in repr(frame)}
            leaked = _leaks(reply, secrets_of_a - echoed - set(s.values()))
            if not refused or isinstance(reply, TaskFrame) or leaked:
                result.fail(f"window B sent {frame!r} and got {reply!r}")
    # Taking over A's window hash while A is connected.
    result.done += 1
    try:
        stolen = await Client.connect(daemon.socket_path, window=a.client.window)
    except Exception:
        pass
    else:
        await stolen.aclose()
        result.fail("a second connection took over window A's hash while A was connected")
    # B's own question goes to B, never to A.
    async with await Client.connect(daemon.socket_path) as b:
        result.done += 1
        await b.send(Run("ask b's own question?", session="cli-b-own"))
        ask = await b.wait_for(AskFrame)
        await b.send(AnswerFrame(ask.id, "b"))
        ended = await b.wait_for(EndedFrame)
        if ended.outcome.value != "finished":
            result.fail(f"window B's own run ended {ended}")


async def _other_user(
    daemon: TrackedDaemon, root: Path, a: _WindowA, s: dict[str, str], result: SuiteResult
) -> None:
    frames: list[dict[str, Any]] = [{"type": "hello", "version": 1, "window": "intruder"}]
    frames += [{"type": "cancel", "task": t, "pause": False} for t in a.tasks.values()]
    frames += [{"type": "answer", "ask": q.id, "value": "allow"} for q in a.asks.values()]
    frames += [{"type": "pending", "action": "list"}]
    frames += [{"type": "pending", "action": "resume", "session": x} for x in s.values()]
    frames += [{"type": "pending", "action": "discard", "session": x} for x in s.values()]
    frames += [{"type": "run", "text": "hello", "session": s["ask"]}]
    user = _make_user() if os.geteuid() == 0 else None
    try:
        if user is None:
            # Not root: make the daemon believe it belongs to someone else.
            daemon.uid = os.getuid() + 1
            try:
                replies = await _intrude_in_process(daemon, frames)
            finally:
                daemon.uid = os.getuid()
            _judge_intruder(replies, frames, result, "a client of another uid")
            return
        uid, gid = user[1], user[2]
        # Modes intact: the folder alone keeps the other user out.
        out = await _intrude(daemon.socket_path, frames, uid, gid)
        result.done += len(frames)
        if out.get("connected"):
            result.fail("another user connected through a 0700 folder and a 0600 socket")
        # Modes loosened by mistake: only SO_PEERCRED stands in the way.
        for folder in (root, daemon.socket_path.parent):
            os.chmod(folder, 0o755)
        os.chmod(daemon.socket_path, 0o777)
        try:
            out = await _intrude(daemon.socket_path, frames, uid, gid)
        finally:
            os.chmod(daemon.socket_path, 0o600)
            os.chmod(daemon.socket_path.parent, 0o700)
            os.chmod(root, 0o700)
        if not out.get("connected"):
            result.fail(f"the intruder could not even connect with loosened modes: {out}")
        _judge_intruder(out.get("replies", []), frames, result, f"user {user[0]} (uid {uid})")
    finally:
        if user is not None:
            await trio.run_process(["userdel", user[0]], check=False, capture_stderr=True)


def _judge_intruder(
    replies: list[dict[str, Any]], frames: list[dict[str, Any]], result: SuiteResult, who: str
) -> None:
    result.done += len(frames)
    if [r.get("code") for r in replies] != ["forbidden"]:
        result.fail(f"{who} got {replies!r}, not one 'forbidden' error and a closed connection")


def _make_user() -> tuple[str, int, int] | None:
    if shutil.which("useradd") is None:
        return None
    name = f"agentrt-iso-{secrets.token_hex(3)}"
    made = subprocess.run(
        ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
        check=False,
        capture_output=True,
    )
    if made.returncode != 0:
        return None
    entry = pwd.getpwnam(name)
    return name, entry.pw_uid, entry.pw_gid


def _intruder_python() -> str:
    """An interpreter another user may run (the virtualenv's may live under /root)."""
    if os.path.exists("/usr/bin/python3"):
        return "/usr/bin/python3"
    return os.path.realpath(sys.executable)


async def _intrude(path: Path, frames: list[dict[str, Any]], uid: int, gid: int) -> dict[str, Any]:
    python = _intruder_python()
    done = await trio.run_process(
        [python, "-I", "-S", "-c", _INTRUDER, os.fspath(path), json.dumps(frames)],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
        user=uid,
        group=gid,
        extra_groups=[],
        cwd="/",
    )
    try:
        out: dict[str, Any] = json.loads(done.stdout)
    except ValueError:
        return {"connected": False, "error": done.stderr.decode(errors="replace")[-500:]}
    return out


async def _intrude_in_process(
    daemon: TrackedDaemon, frames: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    stream = await trio.open_unix_socket(os.fspath(daemon.socket_path))
    async with stream:
        await stream.send_all(b"".join(json.dumps(f).encode() + b"\n" for f in frames))
        buf = b""
        while chunk := await stream.receive_some(65536):
            buf += chunk
    return [json.loads(x) for x in buf.split(b"\n") if x.strip()]


async def _http(
    port: int,
    token: str,
    a: _WindowA,
    s: dict[str, str],
    secrets_of_a: set[str],
    result: SuiteResult,
) -> None:
    base = f"http://127.0.0.1:{port}"
    routes: list[tuple[str, str, dict[str, Any] | None]] = [
        ("GET", "/v1/sessions", None),
        ("GET", "/v1/questions", None),
        ("GET", "/v1/events", None),
    ]
    for session in s.values():
        routes += [
            ("GET", f"/v1/session/{session}/task", None),
            ("DELETE", f"/v1/session/{session}/task", None),
            ("GET", f"/v1/sessions/{session}/messages", None),
            ("DELETE", f"/v1/sessions/{session}", None),
            ("POST", f"/v1/session/{session}/task/resume", {}),
            ("POST", f"/v1/session/{session}/run", {"text": "hello"}),
        ]
    for task in a.tasks.values():
        routes.append(("POST", f"/v1/task/{task}/cancel", {"pause": False}))
    for ask in a.asks.values():
        routes.append(("POST", f"/v1/questions/{ask.id}/answer", {"value": "allow"}))
    ways: list[tuple[dict[str, str], str]] = [
        ({}, ""),
        ({"authorization": "Bearer " + "x" * len(token)}, ""),
        ({"authorization": f"Basic {token}"}, ""),
        ({}, f"?token={token}"),
        ({"cookie": "agentrt_auth=forged; agentrt_csrf=c", "x-csrf-token": "c"}, ""),
    ]
    async with httpx.AsyncClient(base_url=base, timeout=STEP_TIMEOUT) as http:
        for method, path, body in routes:
            for headers, query in ways:
                result.done += 1
                response = await http.request(method, path + query, json=body, headers=headers)
                if response.status_code not in (401, 403) or _leaks(
                    {"body": response.text}, secrets_of_a
                ):
                    result.fail(
                        f"{method} {path}{query} without the token got {response.status_code}"
                    )
        # The API's document is served without the token: it must hold nothing secret.
        result.done += 1
        document = await http.get("/openapi.json")
        if document.status_code != 200 or _leaks({"body": document.text}, {*secrets_of_a, token}):
            result.fail(f"/openapi.json without the token: {document.status_code} or a secret")
        # With the token, the web may not stop or answer what a terminal window started.
        auth = {"authorization": f"Bearer {token}"}
        for task in a.tasks.values():
            result.done += 1
            response = await http.post(f"/v1/task/{task}/cancel", json={}, headers=auth)
            if response.status_code < 400:
                result.fail(f"HTTP cancelled window A's task {task}")
        for ask in a.asks.values():
            result.done += 1
            response = await http.post(
                f"/v1/questions/{ask.id}/answer", json={"value": "allow"}, headers=auth
            )
            if response.status_code < 400:
                result.fail(f"HTTP answered window A's question {ask.id}")


async def _policy(
    runtime: Runtime,
    daemon: TrackedDaemon,
    port: int,
    token: str,
    a: _WindowA,
    s: dict[str, str],
    result: SuiteResult,
) -> None:
    """Who may act on what, with the right credentials: the one policy, on every front-end.

    HTTP never sees a live window's task nor a chat's, starts runs in ``chat-``
    sessions only, and answers a forbidden id exactly like an unknown one; a
    window cannot resume or discard a web or chat task; no response carries a
    cookie; a foreign Host is refused; an oversized body is refused unread.
    """

    async def quiet(event: Any) -> None:
        await trio.lowlevel.checkpoint()

    for session in ("tg-iso", "chat-iso"):
        await runtime.executor.run(session, "ask colour of the chat?", owner="x", emit=quiet)
    auth = {"authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{port}", headers=auth, timeout=STEP_TIMEOUT
    ) as http:

        async def answers(session: str) -> list[tuple[int, str]]:
            got = [
                await http.get(f"/v1/session/{session}/task"),
                await http.post(f"/v1/session/{session}/task/resume", json={"answer": "x"}),
                await http.delete(f"/v1/session/{session}/task"),
                await http.get(f"/v1/sessions/{session}/messages"),
                await http.delete(f"/v1/sessions/{session}"),
            ]
            for response in got:
                if "set-cookie" in response.headers:
                    result.fail(f"a response about {session} set a cookie")
            return [(r.status_code, r.json().get("error", {}).get("code", "")) for r in got]

        unknown = await answers("cli-nobody-here")
        for session in [*s.values(), "tg-iso"]:
            result.done += 1
            if await answers(session) != unknown:
                result.fail(f"HTTP told {session} apart from an unknown session")
        for session in ("tg-1", "dc-999", "cli-iso-new"):
            result.done += 1
            response = await http.post(f"/v1/session/{session}/run", json={"text": "sh id"})
            if response.status_code != 400:
                result.fail(f"HTTP started a run in {session}: {response.status_code}")
        result.done += 1
        foreign = await http.get("/v1/sessions", headers={"host": "evil.example"})
        if foreign.status_code != 421:
            result.fail(f"a foreign Host got {foreign.status_code}, not 421")
        result.done += 1
        status = await _declared_body(port, token, 300 << 20)
        if status != 413:
            result.fail(f"a declared 300 MB body got {status}, not 413")
    # A terminal window: neither the web's task nor the chat's, answered like an unknown one.
    async with await Client.connect(daemon.socket_path) as other:
        replies = []
        for session in ("chat-iso", "tg-iso", "chat-nobody-here"):
            for action in (PendingAction.RESUME, PendingAction.DISCARD):
                result.done += 1
                await other.send(PendingRequest(action, session, answer="mallory"))
                frame = await other.receive()
                code = frame.code.value if isinstance(frame, ErrorFrame) else type(frame).__name__
                message = (
                    frame.message.replace(session, "S") if isinstance(frame, ErrorFrame) else ""
                )
                replies.append((action, code, message))
        if replies[0:2] != replies[4:6] or replies[2:4] != replies[4:6]:
            result.fail(f"a window told web or chat tasks apart from unknown ones: {replies}")
    for session in ("tg-iso", "chat-iso"):
        record = await runtime.store.load(session)
        if record is None or record.question is None:
            result.fail(f"{session}'s task was changed by a front-end that may not act on it")


async def _declared_body(port: int, token: str, length: int) -> int:
    """The status answered to a request that declares a `length`-byte body and sends 2 bytes."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        head = (
            f"POST /v1/session/x/run HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\n\r\n{{}}"
        )
        await stream.send_all(head.encode())
        reply = b""
        while b"\r\n" not in reply:
            chunk = await stream.receive_some(4096)
            if not chunk:
                break
            reply += chunk
    return int(reply.split(b" ", 2)[1]) if reply.startswith(b"HTTP/1.1 ") else 0


async def _a_still_works(
    runtime: Runtime, a: _WindowA, s: dict[str, str], result: SuiteResult
) -> None:
    """Every run of A is where A left it: answer, finish, resume."""
    client = a.client
    for name in ("ask", "confirm"):
        ask = a.asks[s[name]]
        await client.send(AnswerFrame(ask.id, "allow" if ask.choices else "blue"))
        ended = await a.until(EndedFrame, s[name])
        if ended.outcome.value != "finished":
            result.fail(f"window A's {name} run ended {ended.outcome.value} after the intrusions")
    await client.send(Cancel(a.tasks[s["stream"]]))
    ended = await a.until(EndedFrame, s["stream"])
    if ended.cause is None or ended.cause.value != "user_cancel":
        result.fail(f"window A's stream ended {ended} instead of by A's own cancel")
    await client.send(PendingRequest(PendingAction.RESUME, session=s["paused"]))
    ask = await a.until(AskFrame, s["paused"])
    await client.send(AnswerFrame(ask.id, "later"))
    ended = await a.until(EndedFrame, s["paused"])
    if ended.outcome.value != "finished":
        result.fail(f"window A's paused task did not resume to the end: {ended}")
    foreign = [f for f in a.frames if "cli-b-own" in repr(f) or "intruder" in repr(f)]
    if foreign:
        result.fail(f"window A received another window's frames: {foreign[:3]}")
    if await runtime.store.list(prefix="cli-iso"):
        result.fail("window A's tasks were not all finished")

"""Secrets: a canary secret and a canary password must never show up where they do not belong.

The real daemon (a child process, logging every connection) runs with a
stand-in ``sudo`` first on its PATH: the stand-in checks a password against
a SHA-256 hash, so the password itself is written nowhere. The suite stores
a canary secret with ``store_secret`` and types a canary password (and a
wrong one) for a restricted path, over the socket and over HTTP, through
full runs, pauses and resumes, a SIGKILL in the middle of a run and in the
middle of a password check, and a string of mistakes whose error messages
could echo them. Then it searches, in plain, base64 and hex form:

* every file of the state directory (the SQLite file, its WAL and SHM, the
  token; the secret store's own files are the one place the secret belongs,
  and they must be mode 0600),
* the daemon's log, every frame and event the clients received, and every
  HTTP response body.
"""

from __future__ import annotations

import base64
import hashlib
import os
import secrets
import stat
import time
from pathlib import Path
from typing import Any

import attrs
import httpx
import trio

from agentrt.http import load_or_create_token
from agentrt.protocol.client import BrokenDaemonConnectionError
from agentrt.protocol.client import Client
from agentrt.protocol.codec import encode
from agentrt.protocol.frames import AnswerFrame
from agentrt.protocol.frames import AskFrame
from agentrt.protocol.frames import Cancel
from agentrt.protocol.frames import DaemonFrame
from agentrt.protocol.frames import EndedFrame
from agentrt.protocol.frames import PendingAction
from agentrt.protocol.frames import PendingRequest
from agentrt.protocol.frames import Run
from agentrt.protocol.frames import TaskFrame
from agentrt.protocol.frames import ToolResultFrame
from agentrt.vocab.terms import Cause

from ._common import STEP_TIMEOUT
from ._common import DaemonProcess
from ._common import SuiteResult
from ._common import http_base
from ._common import short_tempdir

_STAND_IN_SUDO = """#!/bin/sh
# A stand-in for sudo: never cached; -S -v checks the password's SHA-256; -n -- CMD runs CMD.
case "$1" in
  -n) shift
      [ "$1" = "-v" ] && exit 1
      [ "$1" = "--" ] && shift
      exec "$@" ;;
  -S) IFS= read -r pw
      sum=$(printf '%s' "$pw" | sha256sum | cut -d' ' -f1)
      [ "$sum" = "HASH" ] && exit 0
      exit 1 ;;
esac
exit 1
"""


@attrs.define
class _Seen:
    """Everything that left the daemon, as bytes."""

    chunks: list[bytes] = attrs.field(factory=list)

    def frame(self, frame: DaemonFrame) -> None:
        self.chunks.append(encode(frame))

    def add(self, data: bytes) -> None:
        self.chunks.append(data)


@attrs.define(eq=False)
class _Socket:
    """A window that answers questions from a script and records every frame."""

    daemon: DaemonProcess
    seen: _Seen
    secret: str
    password: str
    wrong: str

    async def run(
        self,
        frame: Any,
        session: str,
        *,
        pause_after: str | None = None,
        kill_after: str | None = None,
    ) -> EndedFrame | None:
        """Send `frame`; answer asks; pause or kill after a result of tool `..._after`."""
        async with await Client.connect(self.daemon.socket_path) as client:
            await client.send(frame)
            task = ""
            wrong_sent = False
            while True:
                try:
                    got = await client.receive()
                except BrokenDaemonConnectionError:
                    return None
                self.seen.frame(got)
                if isinstance(got, TaskFrame):
                    task = got.task_hash
                elif isinstance(got, AskFrame):
                    if got.kind.value == "secret":
                        await client.send(AnswerFrame(got.id, "allow", secret=self.secret))
                    elif got.kind.value == "password":
                        value = self.password if wrong_sent else self.wrong
                        wrong_sent = True
                        await client.send(AnswerFrame(got.id, "allow", secret=value))
                        if kill_after == "password" and value == self.password:
                            await self.daemon.kill()
                            return None
                    elif got.choices:
                        await client.send(AnswerFrame(got.id, "allow"))
                    else:
                        await client.send(AnswerFrame(got.id, "blue"))
                elif isinstance(got, ToolResultFrame):
                    if got.name == pause_after:
                        await client.send(Cancel(task, Cause.PAUSE))
                    if got.name == kill_after:
                        await self.daemon.kill()
                        return None
                elif isinstance(got, EndedFrame) and got.session_id == session:
                    return got


async def run_canary(seed: int) -> SuiteResult:
    """Run every path a secret or a password travels; count where a canary shows up."""
    result = SuiteResult("secrets", "places searched", "canary hits", seed=seed)
    started = time.monotonic()
    secret = "CANARY-SECRET-" + secrets.token_hex(8)
    password = "CANARY-PW-" + secrets.token_hex(8)
    wrong = "CANARY-WRONG-" + secrets.token_hex(8)
    seen = _Seen()
    with short_tempdir("sts-") as root:
        bin_dir = root / "bin"
        bin_dir.mkdir()
        sudo = bin_dir / "sudo"
        digest = hashlib.sha256(password.encode()).hexdigest()
        sudo.write_text(_STAND_IN_SUDO.replace("HASH", digest))
        sudo.chmod(0o755)
        (root / "work").mkdir()
        (root / "restricted").mkdir()
        daemon = DaemonProcess(
            root / "s" / "d.sock",
            root / "state",
            root / "work",
            root / "daemon.log",
            extra_args=("-v", "--http", "127.0.0.1:0"),
            env={
                **os.environ,
                "PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
                "AGENTRT_RESTRICTED": str(root / "restricted"),
            },
        )
        window = _Socket(daemon, seen, secret, password, wrong)
        async with trio.open_nursery() as nursery:
            said = await daemon.start(nursery, ready=b"web chat on")
            with trio.fail_after(STEP_TIMEOUT * 4):
                await _socket_paths(window, nursery, result)
                await _tools_reach_for_secrets(window, root, result)
                said = await _crashes(window, nursery, result) or said
                await _mistakes(window, result)
                base = http_base(said)
                await _http_paths(base, load_or_create_token(daemon.state_dir), window, result)
            stored = {"API_KEY", "K2", "K3", "K4"}
            canaries = (secret, password, wrong)
            # Once while the daemon runs (the WAL and SHM exist), once after it stopped.
            _search(daemon, seen, canaries, stored, result, live=True)
            await daemon.terminate()
        _search(daemon, seen, canaries, stored, result, live=False)
        if (root / "restricted" / "f1").read_text() != "hello":
            result.fail("the restricted write did not happen: the password path was not taken")
    result.seconds = time.monotonic() - started
    return result


def _expect(
    ended: EndedFrame | None, what: str, result: SuiteResult, outcome: str = "finished"
) -> None:
    if ended is None or ended.outcome.value != outcome:
        result.fail(f"{what}: ended {ended}")


async def _socket_paths(window: _Socket, nursery: trio.Nursery, result: SuiteResult) -> None:
    ended = await window.run(Run("secret API_KEY", session="cli-sec1"), "cli-sec1")
    _expect(ended, "store_secret over the socket", result)
    ended = await window.run(Run("write ../restricted/f1 hello", session="cli-pw1"), "cli-pw1")
    _expect(ended, "a restricted write with a wrong then a right password", result)
    # Pause after the secret is stored, then resume.
    ended = await window.run(
        Run("secret K2; sleep 1", session="cli-sec2"), "cli-sec2", pause_after="store_secret"
    )
    _expect(ended, "pause after store_secret", result, "cancelled")
    ended = await window.run(PendingRequest(PendingAction.RESUME, session="cli-sec2"), "cli-sec2")
    _expect(ended, "resume after a pause", result)
    ended = await window.run(
        Run("write ../restricted/f2 x; sleep 1", session="cli-pw2"),
        "cli-pw2",
        pause_after="write_file",
    )
    _expect(ended, "pause after a password", result, "cancelled")
    ended = await window.run(PendingRequest(PendingAction.RESUME, session="cli-pw2"), "cli-pw2")
    _expect(ended, "resume after a password and a pause", result)


async def _tools_reach_for_secrets(window: _Socket, root: Path, result: SuiteResult) -> None:
    """A prompt-injected model reads the secret store, the token and the store, every spelling.

    Every such call must be refused (no confirmation offered), and a stored secret
    that reaches a tool's output by another road (a copy in the working folder) must
    come back as ``[secret NAME]``. The canary search afterwards covers what leaked.
    """
    state = window.daemon.state_dir
    (root / "work" / "innocent").symlink_to(state)
    (root / "work" / "copy.txt").write_text(f"key={window.secret}\n")
    target = state / "secrets" / "API_KEY"
    attempts = [
        f"read {target}",
        "read ../state/secrets/API_KEY",
        "read ./innocent/secrets/API_KEY",
        f"read /proc/self/root{target}",
        f"read {state}/http-token",
        f"write {state}/secrets/API_KEY overwritten",
        f"sh cat {state}/secrets/*",
        "sh cat ~/../..{state}/http-token".replace("{state}", str(state)),
        f"sh sqlite3 {state}/tasks.db .dump",
    ]
    for n, text in enumerate(attempts):
        session = f"cli-reach{n}"
        mark = len(window.seen.chunks)
        ended = await window.run(Run(text, session=session), session)
        _expect(ended, f"a tool reaching for the agent's state ({text})", result)
        said = b"\n".join(window.seen.chunks[mark:])
        result.done += 1
        if b"agentrt's own state" not in said:
            result.fail(f"{text!r} was not refused as the agent's own state")
        if b'"type":"ask"' in said:
            result.fail(f"{text!r} offered a confirmation instead of a refusal")
    if (state / "secrets" / "API_KEY").read_text() != window.secret:
        result.fail("a tool overwrote a stored secret")
    for n, text in enumerate(["read copy.txt", "sh cat copy.txt"]):
        session = f"cli-copy{n}"
        mark = len(window.seen.chunks)
        ended = await window.run(Run(text, session=session), session)
        _expect(ended, f"a copy of a secret read by a tool ({text})", result)
        result.done += 1
        said = b"\n".join(window.seen.chunks[mark:])
        # The canary is stored under several names; any of them may stand in for it.
        if b"=[secret " not in said:
            result.fail(f"{text!r}: the secret's value was not replaced by its name")


async def _crashes(window: _Socket, nursery: trio.Nursery, result: SuiteResult) -> str | None:
    daemon = window.daemon
    await window.run(
        Run("secret K3; write ../restricted/f3 y; sleep 2", session="cli-crash1"),
        "cli-crash1",
        kill_after="write_file",
    )
    await daemon.start(nursery, ready=b"web chat on")
    ended = await window.run(
        PendingRequest(PendingAction.RESUME, session="cli-crash1"), "cli-crash1"
    )
    _expect(ended, "resume after a SIGKILL mid-run", result)
    await window.run(
        Run("write ../restricted/f4 z", session="cli-crash2"), "cli-crash2", kill_after="password"
    )
    said = await daemon.start(nursery, ready=b"web chat on")
    ended = await window.run(
        PendingRequest(PendingAction.RESUME, session="cli-crash2"), "cli-crash2"
    )
    _expect(ended, "resume after a SIGKILL during a password check", result)
    return said


async def _mistakes(window: _Socket, result: SuiteResult) -> None:
    """Secrets put where they do not belong: the errors must not echo them."""
    s, p = window.secret, window.password
    lines = [
        encode(AnswerFrame("no-such-question", s, secret=s)),
        encode(AnswerFrame("no-such-question", p, secret=p)),
        f'{{"type":"answer","ask":1,"value":"v","secret":"{s}"}}\n'.encode(),
        f'{{"type":"answer","ask":"a","value":"v","secret":"{p}","extra":true}}\n'.encode(),
        f'{{"type":"answer","ask":"a","value":"v","secret":["{s}"]}}\n'.encode(),
        f'{{"type":"answer","ask":"a","value":"v","secret":"{p}"'.encode() + b"\n",
        b'{"type":"answer","ask":"a","value":"v","secret":"' + p.encode() * 70000 + b'"}\n',
    ]
    async with await Client.connect(window.daemon.socket_path) as client:
        await client.send(Run("sh echo confirm-me", session="cli-mistake"))
        ask = await client.wait_for(AskFrame)
        # A password typed into a confirmation's choice: refused without being quoted.
        await client.send(AnswerFrame(ask.id, p, secret=s))
        for line in lines:
            await client.send_raw(line)
        for _ in range(len(lines) + 1):
            window.seen.frame(await client.receive())
        await client.send(AnswerFrame(ask.id, "deny"))
        while True:
            got = await client.receive()
            window.seen.frame(got)
            if isinstance(got, EndedFrame):
                break
        result.done += len(lines) + 1
    # A frame cut off by the end of the stream, with the password in it.
    stream = await trio.open_unix_socket(os.fspath(window.daemon.socket_path))
    async with stream:
        await stream.send_all(b'{"type":"hello","version":1,"window":"cut"}\n')
        await stream.send_all(f'{{"type":"answer","ask":"a","value":"v","secret":"{p}'.encode())
        await stream.send_eof()
        while chunk := await stream.receive_some(65536):
            window.seen.add(chunk)


async def _http_paths(base: str, token: str, window: _Socket, result: SuiteResult) -> None:
    s, p = window.secret, window.password
    auth = {"authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=base, headers=auth, timeout=STEP_TIMEOUT) as http:
        async with trio.open_nursery() as nursery:
            events: list[bytes] = []
            both_ended = trio.Event()
            questions: trio.MemorySendChannel[dict[str, Any]]
            questions, incoming = trio.open_memory_channel[dict[str, Any]](16)

            async def listen(task_status: trio.TaskStatus[None]) -> None:
                import json

                async with http.stream("GET", "/v1/events") as response:
                    task_status.started()
                    async for line in response.aiter_lines():
                        events.append(line.encode())
                        if sum(b'"type":"run_ended"' in e for e in events) >= 2:
                            both_ended.set()
                        if line.startswith("data: "):
                            obj = json.loads(line[6:])
                            if obj.get("type") == "question":
                                await questions.send(obj)

            await nursery.start(listen)

            async def run(session: str, text: str, answers: list[dict[str, Any]]) -> None:
                response = await http.post(f"/v1/session/{session}/run", json={"text": text})
                window.seen.add(response.content)
                for answer in answers:
                    question = await incoming.receive()
                    response = await http.post(
                        f"/v1/questions/{question['id']}/answer", json=answer
                    )
                    window.seen.add(response.content)

            await run("chat-sec4", "secret K4", [{"value": "allow", "secret": s}])
            await run(
                "chat-pw5",
                "write ../restricted/f5 q",
                [{"value": "allow", "secret": window.wrong}, {"value": "allow", "secret": p}],
            )
            for body in (
                {"value": "allow", "secret": s},
                {"value": 5, "secret": p},
                {"value": "v", "secret": s, "extra": p},
            ):
                response = await http.post("/v1/questions/nope/answer", json=body)
                window.seen.add(response.content)
                result.done += 1
            for session in ("chat-sec4", "chat-pw5"):
                response = await http.get(f"/v1/session/{session}/task")
                window.seen.add(response.content)
                # The stored conversation, as the web page reads it back.
                response = await http.get(f"/v1/sessions/{session}/messages")
                window.seen.add(response.content)
            response = await http.get("/v1/sessions")
            window.seen.add(response.content)
            # Let the runs finish and their events arrive, then stop listening.
            with trio.fail_after(STEP_TIMEOUT):
                await both_ended.wait()
            nursery.cancel_scope.cancel()
        window.seen.chunks.extend(events)


def _forms(canary: str) -> list[bytes]:
    raw = canary.encode()
    return [raw, base64.b64encode(raw), raw.hex().encode(), canary.encode("utf-16-le")]


def _search(
    daemon: DaemonProcess,
    seen: _Seen,
    canaries: tuple[str, str, str],
    stored: set[str],
    result: SuiteResult,
    *,
    live: bool,
) -> None:
    secret = canaries[0]
    places: list[tuple[str, bytes]] = []
    for path in sorted(daemon.state_dir.rglob("*")):
        if not path.is_file():
            continue
        data = path.read_bytes()
        if path.parent.name == "secrets" and path.name in stored:
            if stat.S_IMODE(path.stat().st_mode) != 0o600:
                result.fail(f"{path} is not mode 0600")
            if data.decode() != secret:
                result.fail(f"{path} does not hold the stored secret")
            places.append((str(path), data.replace(secret.encode(), b"")))
            continue
        places.append((str(path), data))
    places.append(("the daemon log", daemon.log_path.read_bytes()))
    places.append(("frames, events and HTTP responses", b"\n".join(seen.chunks)))
    names = {n for n, _ in places}
    for want in ("tasks.db", "tasks.db-wal", "tasks.db-shm") if live else ("tasks.db",):
        if not any(n.endswith(want) for n in names):
            result.fail(f"the state directory has no {want} to search")
    for name, data in places:
        result.done += 1
        for canary in canaries:
            for form in _forms(canary):
                if form in data:
                    result.fail(f"{canary.split('-')[1].lower()} canary found in {name}")

"""HTTP clients cannot exhaust the daemon: bodies are capped, connections bounded, logs short.

These run the real daemon (`agentrt daemon --http`) as a process, measure it
from the outside (its resident memory, its log) and reach it over loopback and
its Unix socket, as another local user's program would.
"""

from __future__ import annotations

import re
import resource
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import BinaryIO

import attrs
import httpx
import pytest
import trio

from agentrt import Outcome
from agentrt.http import load_or_create_token
from agentrt.protocol.client import Client
from agentrt.protocol.frames import EndedFrame
from agentrt.protocol.frames import Run

pytestmark = pytest.mark.e2e

MB = 1024 * 1024
#: Open connections before a terminal window tries the Unix socket.
FLOOD_OPEN = 180


@attrs.define
class Daemon:
    process: trio.Process
    base: str
    port: int
    socket: Path
    log: Path
    token: str

    def rss(self) -> int:
        """The process's resident memory in bytes."""
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        found = re.search(r"^VmRSS:\s+(\d+) kB", status, re.MULTILINE)
        assert found, status
        return int(found.group(1)) * 1024


async def _wait_for_log(log: Path, pattern: str) -> str:
    deadline = trio.current_time() + 20
    while trio.current_time() < deadline:
        said = await trio.Path(log).read_text(errors="replace")
        found = re.search(pattern, said)
        if found:
            return found.group(1)
        await trio.sleep(0.05)  # polling a real process's log, with a deadline
    raise AssertionError(f"the daemon did not say {pattern!r}:\n{said}")


def _low_fd_limit(limit: int) -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))


async def _start_daemon(folder: Path, fd_limit: int | None = None) -> Daemon:
    state = folder / "state"
    token = load_or_create_token(state)
    sock = folder / "d.sock"
    log = folder / "daemon.log"
    argv = [sys.executable, "-m", "agentrt.daemon", "-v", "--socket", str(sock)]
    argv += ["--state-dir", str(state), "--workdir", str(folder), "--http", "127.0.0.1:0"]
    with _create(log) as out:
        process = await trio.lowlevel.open_process(
            argv,
            stderr=out,
            preexec_fn=None if fd_limit is None else (lambda: _low_fd_limit(fd_limit)),
        )
    base = await _wait_for_log(log, r"web chat on (http://127\.0\.0\.1:\d+)/")
    return Daemon(process, base, int(base.rpartition(":")[2]), sock, log, token)


def _create(path: Path) -> BinaryIO:
    return path.open("wb")


async def _stop(daemon: Daemon) -> None:
    daemon.process.terminate()
    with trio.move_on_after(20):
        await daemon.process.wait()
    if daemon.process.returncode is None:
        daemon.process.kill()
        await daemon.process.wait()


async def _run_over_the_unix_socket(daemon: Daemon, text: str) -> EndedFrame:
    async with await Client.connect(daemon.socket) as client:
        await client.send(Run(text))
        return await client.wait_for(EndedFrame)


async def test_a_300_mb_streamed_body_is_refused_at_once_and_the_daemon_does_not_grow(
    short_dir: Path,
) -> None:
    daemon = await _start_daemon(short_dir)
    try:
        before = daemon.rss()
        for path, token, status, code in [
            ("/v1/session/big/run", daemon.token, 413, "body_too_large"),
            ("/v1/session/big/run", None, 401, "missing_token"),
            ("/v1/questions/q1/answer", daemon.token, 413, "body_too_large"),
            ("/login", None, 401, "missing_token"),
            ("/", None, 405, "method_not_allowed"),
        ]:
            sent = 0

            async def body() -> AsyncIterator[bytes]:
                nonlocal sent
                chunk = b"x" * 65536
                for _ in range(300 * MB // len(chunk)):
                    sent += len(chunk)
                    yield chunk

            headers = {"Content-Type": "application/json"}
            if token:
                headers["Authorization"] = f"Bearer {token}"
            started = time.monotonic()
            with trio.fail_after(20):
                async with httpx.AsyncClient(base_url=daemon.base, timeout=20) as client:
                    response = await client.post(path, content=body(), headers=headers)
            took = time.monotonic() - started
            assert response.status_code == status, (path, response.text)
            assert response.json()["error"]["code"] == code
            assert took < 5, f"{path}: {took:.1f}s to refuse a streamed 300 MB body"
            assert sent < 20 * MB, f"{path}: the server read {sent // MB} MB before refusing"
        grown = daemon.rss() - before
        assert grown < 30 * MB, f"the daemon grew by {grown // MB} MB"
        ended = await _run_over_the_unix_socket(daemon, "still here")
        assert ended.outcome is Outcome.FINISHED
    finally:
        await _stop(daemon)


async def test_300_slow_http_connections_leave_the_unix_socket_serving_and_the_log_short(
    short_dir: Path,
) -> None:
    # 300 connections would use every file descriptor of a process allowed 256.
    daemon = await _start_daemon(short_dir, fd_limit=256)
    head = (
        f"POST /v1/session/slow/run HTTP/1.1\r\nHost: 127.0.0.1:{daemon.port}\r\n"
        f"Authorization: Bearer {daemon.token}\r\nContent-Type: application/json\r\n"
        "Content-Length: 100000\r\n\r\n{"
    ).encode()
    held: list[trio.SocketStream] = []
    opened = trio.Event()

    async def slow_client(index: int) -> None:
        stream = await trio.open_tcp_stream("127.0.0.1", daemon.port)
        held.append(stream)
        if len(held) == FLOOD_OPEN:
            opened.set()
        # A third each: a body that never comes, a head that never ends, nothing at all.
        if index % 3 == 0:
            await stream.send_all(head)
        elif index % 3 == 1:
            await stream.send_all(b"POST /v1/session/slow/run HTTP/1.1\r\nHost: 127.")
        await trio.sleep_forever()

    try:
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                for index in range(300):
                    nursery.start_soon(slow_client, index)
                # Enough connections to use up the process's descriptors if each were
                # accepted; the kernel's backlog holds those the daemon has not.
                await opened.wait()
                ended = await _run_over_the_unix_socket(daemon, "hello through the flood")
                assert ended.outcome is Outcome.FINISHED
                assert ended.text is not None and "hello through the flood" in ended.text
                nursery.cancel_scope.cancel()
        for stream in held:
            await stream.aclose()
        # The HTTP API serves again once the flood is gone: a slot whose client left is
        # free at the latest when its head timeout (5 s) ends.
        async with httpx.AsyncClient(
            base_url=daemon.base, headers={"Authorization": f"Bearer {daemon.token}"}
        ) as client:
            with trio.fail_after(30):
                assert (await client.get("/v1/sessions", timeout=25)).status_code == 200
    finally:
        await _stop(daemon)
    said = daemon.log.read_text()
    assert "Traceback" not in said, said[:3000]
    assert len(said) < 4000, f"{len(said)} bytes of log:\n{said[:3000]}"

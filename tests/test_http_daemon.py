"""`agentrt daemon --http HOST:PORT`: the daemon process also serves the HTTP API."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import trio

from agentrt.http import load_or_create_token

from .cli_process import read_match

pytestmark = pytest.mark.e2e


async def test_daemon_with_http_serves_the_api_and_a_sigterm_keeps_http_runs_pending(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    work = tmp_path / "work"
    work.mkdir()
    argv = [sys.executable, "-m", "agentrt.daemon", "--socket", str(tmp_path / "d.sock")]
    argv += ["--state-dir", str(state), "--workdir", str(work), "--http", "127.0.0.1:0"]
    process = await trio.lowlevel.open_process(argv, stderr=subprocess.PIPE)
    try:
        assert process.stderr is not None
        said = bytearray()
        base = await read_match(process.stderr, r"web chat on (http://127\.0\.0\.1:\d+)/", said, 20)
        token = load_or_create_token(state)
        async with httpx.AsyncClient(
            base_url=base, headers={"Authorization": f"Bearer {token}"}
        ) as client:
            assert (await client.get("/v1/sessions")).json() == {"sessions": [], "next": None}
            started = await client.post("/v1/session/d1/run", json={"text": "sleep 60"})
            assert started.status_code == 202, started.text
            anonymous = await client.get("/v1/sessions", headers={"Authorization": ""})
            assert anonymous.status_code == 401
        process.send_signal(signal.SIGTERM)
        with trio.fail_after(20):
            while chunk := await process.stderr.receive_some():
                said += chunk  # all the daemon says while it shuts down, for the messages below
            code = await process.wait()
        assert code == 0, said.decode()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    db = sqlite3.connect(state / "tasks.db")
    rows = db.execute("SELECT session_id, status FROM tasks").fetchall()
    db.close()
    assert rows == [("chat-d1", "interrupted")], said.decode()

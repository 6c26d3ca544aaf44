"""A running HTTP server fuzzed against the OpenAPI document it serves, by schemathesis.

Every phase runs: the coverage phase (boundary and invalid values of each
parameter and body), random fuzzing, and stateful sequences that follow the
document's links (start a run, then cancel it by the hash the answer names;
list the questions, then answer the first). Before it starts, the server has
something to find: a task parked on a saved question, a run waiting on a
confirmation, and a run streaming text, so the links lead somewhere and the
event stream carries run events for the fuzzer to check against the schema.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from agentrt import Runtime
from agentrt.http import load_or_create_token
from agentrt.http import serve_http

from .conftest import scripted_runtime

pytestmark = pytest.mark.e2e

#: Test cases per operation and phase; with 13 operations this is a few hundred in all.
EXAMPLES = 25
#: A fixed seed: the run is the same each time, so a failure can be replayed.
SEED = 15
SCHEMATHESIS = shutil.which("st", path=str(Path(sys.executable).parent))


@pytest.fixture
async def runtime(tmp_path: Path) -> AsyncIterator[Runtime]:
    (tmp_path / "work").mkdir()
    # Paced, so the streaming run is still streaming while the fuzzer reads events.
    async with scripted_runtime(tmp_path / "state", tmp_path / "work", stream_delay=0.05) as rt:
        yield rt


async def _wait_for(lines: AsyncIterator[str], wanted: set[tuple[str, str]]) -> None:
    """Read events until one of each (type, session id) in `wanted` has been seen."""
    async for line in lines:
        if line.startswith("data: "):
            event: dict[str, Any] = json.loads(line[6:])
            wanted.discard((event["type"], event.get("session_id", "")))
            if not wanted:
                return


async def _give_the_server_something_to_find(base: str, token: str) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        httpx.AsyncClient(base_url=base, headers=headers, timeout=10) as client,
        client.stream("GET", "/v1/events") as events,
    ):
        lines = events.aiter_lines()
        runs = {
            "chat-parked": "ask Your name?",
            "chat-confirm": "write a.txt hi",
            "chat-stream": "stream 100000",
        }
        for session, text in runs.items():
            started = await client.post(f"/v1/session/{session}/run", json={"text": text})
            assert started.status_code == 202, started.text
        await _wait_for(
            lines,
            {("run_ended", "chat-parked"), ("question", "chat-confirm"), ("text", "chat-stream")},
        )


@pytest.mark.deadline(150)
@pytest.mark.skipif(SCHEMATHESIS is None, reason="schemathesis is not installed")
async def test_the_running_server_keeps_to_its_openapi_document(
    runtime: Runtime, tmp_path: Path
) -> None:
    assert SCHEMATHESIS is not None
    token = load_or_create_token(runtime.state_dir)
    # The token goes to schemathesis through its environment, not its command line.
    config = tmp_path / "schemathesis.toml"
    config.write_text(
        # An event stream never ends, and one filtered to a session may stay silent: read
        # its first event (ready), not 10 s of it. The events that follow are checked
        # against the same schemas by tests/test_http.py and tests/test_json_shapes.py.
        'max-stream-events = 1\n[headers]\nAuthorization = "Bearer ${AGENTRT_FUZZ_TOKEN}"\n'
        # A session's model is what its next run would use: the default for a session not
        # started yet, or forgotten (docs/http.md), so it answers 200 after a DELETE of the
        # session, where the use-after-free check expects the session's own 404.
        '[[operations]]\ninclude-path = "/v1/session/{session_id}/model"\n'
        "checks.use_after_free.enabled = false\n"
    )
    async with trio.open_nursery() as nursery:
        port = await nursery.start(partial(serve_http, runtime, "127.0.0.1", 0, token=token))
        base = f"http://127.0.0.1:{port}"
        with trio.fail_after(10):
            await _give_the_server_something_to_find(base, token)
        with trio.fail_after(120):
            result = await trio.run_process(
                [
                    SCHEMATHESIS,
                    "--config-file",
                    str(config),
                    "--no-color",
                    "run",
                    f"{base}/openapi.json",
                    "--max-examples",
                    str(EXAMPLES),
                    "--seed",
                    str(SEED),
                    "--workers",
                    "1",
                    "--report-dir",
                    str(tmp_path / "report"),
                ],
                capture_stdout=True,
                capture_stderr=True,
                check=False,
                env={"AGENTRT_FUZZ_TOKEN": token, "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
                cwd=tmp_path,
            )
        nursery.cancel_scope.cancel()
    output = result.stdout.decode("utf-8", "replace") + result.stderr.decode("utf-8", "replace")
    summary = [line for line in output.splitlines() if line.startswith("=") and " in " in line]
    assert summary, output
    assert result.returncode == 0, output
    counts = re.search(r"Test cases:\s+((\d+) generated, (\d+) passed.*)", output)
    assert counts is not None, output
    print(f"schemathesis: {counts.group(1)}\nschemathesis: {summary[-1]}")
    generated, passed = int(counts.group(2)), int(counts.group(3))
    assert generated == passed >= 200, output
    # Every phase ran; a phase skipped for want of links or data would prove nothing.
    for phase in ("Coverage", "Fuzzing", "Stateful"):
        assert f"✅ {phase}" in output, output
    assert token not in output, "the token appeared in the fuzzer's output"

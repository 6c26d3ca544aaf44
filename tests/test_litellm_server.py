"""The OpenAI provider against a server this project did not write: LiteLLM's proxy.

The proxy runs as a real subprocess on a free loopback port, from its own
virtualenv (``make .venv-litellm/.installed``, pinned by
``constraints-litellm.txt``), fully offline. It serves two models:
``mock-text`` is LiteLLM's own ``mock_response``, and ``scripted-tools`` a
`CustomLLM` (`tests/fakes/litellm_handler.py`) that asks for a tool call. In
both cases the proxy writes the OpenAI wire format itself: its chunk
framing, its tool-call deltas, its usage chunk, its 401 body. Our provider
streams them, and the agent runs the tool call end to end.
"""

from __future__ import annotations

import json
import os
import selectors
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest
import trio

from agentrt import Message
from agentrt import Outcome
from agentrt import TextDelta
from agentrt import ToolCallDeltaEvent
from agentrt import ToolCallEvent
from agentrt import ToolResultEvent
from agentrt import UsageEvent
from agentrt import open_runtime
from agentrt.models.messages import ModelDelta
from agentrt.models.providers import ModelAuthError
from agentrt.models.providers import ModelRequestError
from agentrt.models.providers import OpenAIModel
from agentrt.models.providers import RetryPolicy

from .conftest import FakeVerifier
from .conftest import Recorder

ROOT = Path(__file__).resolve().parent.parent
MASTER_KEY = "sk-litellm-master-3c9e1f7a5b2d"
MOCK_TEXT = "Hello from LiteLLM's mock response."
#: Real seconds the proxy may take to start on a busy two-core machine.
STARTUP_SECONDS = 90.0

# One proxy for the module (it takes seconds to start): its tests run in one test process.
pytestmark = [pytest.mark.e2e, pytest.mark.deadline(60), pytest.mark.xdist_group("litellm")]


@attrs.frozen
class Proxy:
    base_url: str
    output: list[str]


def _litellm() -> Path:
    exe = Path(os.environ.get("AGENTRT_LITELLM", ROOT / ".venv-litellm" / "bin" / "litellm"))
    if not exe.exists():
        pytest.fail(
            f"LiteLLM's proxy is not installed at {exe}: run `make .venv-litellm/.installed`"
            " (`make test` and `make unit` do it too)",
            pytrace=False,
        )
    return exe


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _config() -> dict[str, object]:
    # JSON is YAML: the proxy reads this file as its config.
    return {
        "model_list": [
            {
                "model_name": "mock-text",
                "litellm_params": {
                    "model": "openai/mock-text",
                    "api_key": "unused",
                    "mock_response": MOCK_TEXT,
                },
            },
            {"model_name": "scripted-tools", "litellm_params": {"model": "scripted/tools"}},
        ],
        "litellm_settings": {
            "custom_provider_map": [
                {"provider": "scripted", "custom_handler": "litellm_handler.scripted_tools"}
            ]
        },
    }


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    """LiteLLM's proxy on a free loopback port, started once for this module."""
    exe = _litellm()
    home = tmp_path_factory.mktemp("litellm")
    shutil.copy(ROOT / "tests" / "fakes" / "litellm_handler.py", home / "litellm_handler.py")
    (home / "config.yaml").write_text(json.dumps(_config()))
    port = _free_port()
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "LITELLM_MASTER_KEY": MASTER_KEY,
        # Use the model prices shipped in the package: no download at start.
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }
    command = [str(exe), "--config", "config.yaml", "--host", "127.0.0.1", "--port", str(port)]
    process = subprocess.Popen(
        command, cwd=home, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    assert process.stdout is not None
    fd = process.stdout.fileno()
    output: list[str] = []
    # Read from the descriptor itself, lines split here: a buffered reader may hold the line
    # awaited after a select on the descriptor said nothing more is coming.
    pending = [b""]

    def take(chunk: bytes) -> None:
        *lines, pending[0] = (pending[0] + chunk).split(b"\n")
        output.extend(line.decode("utf-8", "replace") + "\n" for line in lines)

    try:
        # Ready when uvicorn says it listens: read its output as it comes, no polling.
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            give_up = time.monotonic() + STARTUP_SECONDS
            while not any("Uvicorn running on" in line for line in output):
                left = give_up - time.monotonic()
                if left <= 0 or not selector.select(left):
                    pytest.fail(f"LiteLLM's proxy did not start: {''.join(output)[-3000:]}")
                chunk = os.read(fd, 65536)
                if not chunk:
                    pytest.fail(f"LiteLLM's proxy exited: {''.join(output)[-3000:]}")
                take(chunk)

        def drain() -> None:
            while chunk := os.read(fd, 65536):
                take(chunk)

        threading.Thread(target=drain, daemon=True).start()
        yield Proxy(f"http://127.0.0.1:{port}/v1", output)
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def model(proxy: Proxy, name: str, key: str = MASTER_KEY) -> OpenAIModel:
    return OpenAIModel(name, proxy.base_url, api_key=key, retry=RetryPolicy(max_attempts=1))


async def test_a_completion_streams_through_litellms_proxy(proxy: Proxy) -> None:
    deltas: list[ModelDelta] = []

    async def collect(delta: ModelDelta) -> None:
        deltas.append(delta)

    with trio.fail_after(30):
        response = await model(proxy, "mock-text").complete([Message.user("hi")], [], collect)
    assert response.text == MOCK_TEXT
    assert all(isinstance(d, TextDelta) for d in deltas)
    assert len(deltas) > 1, "the proxy streams the reply in pieces"
    assert "".join(d.text for d in deltas if isinstance(d, TextDelta)) == MOCK_TEXT
    assert response.usage is not None
    assert response.usage.output_tokens > 0


async def test_a_tool_call_streams_through_litellms_proxy_and_the_agent_runs_it(
    proxy: Proxy, tmp_path: Path, workdir: Path, verifier: FakeVerifier
) -> None:
    (workdir / "notes.txt").write_text("hello from disk")
    rec = Recorder()
    with trio.fail_after(30):
        async with open_runtime(
            tmp_path / "state",
            model=model(proxy, "scripted-tools"),
            workdir=workdir,
            restricted_paths=[],
            verifier=verifier,
        ) as rt:
            ended = await rt.executor.run(
                "cli-litellm", "what does notes.txt say?", owner=object(), emit=rec
            )
    assert ended.outcome is Outcome.FINISHED, ended.error
    pieces = rec.of(ToolCallDeltaEvent)
    assert pieces[0].name == "read_file"
    assert pieces[0].call_id == "call_litellm_1"
    assert "".join(p.arguments for p in pieces) == '{"path": "notes.txt"}'
    [call] = rec.of(ToolCallEvent)
    assert (call.name, call.arguments) == ("read_file", {"path": "notes.txt"})
    [result] = rec.of(ToolResultEvent)
    assert result.ok
    assert ended.text == "The note says: hello from disk"
    assert len(rec.of(UsageEvent)) == 2


async def test_a_key_the_proxy_does_not_know_is_refused_and_never_shown(proxy: Proxy) -> None:
    wrong = "sk-wrong-key-8d2f6a1c9e"

    async def ignore(delta: ModelDelta) -> None:
        pass

    # Without a database the proxy knows only its master key; it refuses any other
    # before a model is asked (with 400 "No connected db." in this version, 401 with one).
    with trio.fail_after(30), pytest.raises((ModelAuthError, ModelRequestError)) as caught:
        await model(proxy, "mock-text", key=wrong).complete([Message.user("hi")], [], ignore)
    assert caught.value.status in (400, 401)
    assert f"{proxy.base_url}/chat/completions" in str(caught.value)
    assert wrong not in str(caught.value)

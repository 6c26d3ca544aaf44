"""A whole tool-using conversation through the executor, with each real provider.

The model answers from a scripted server on loopback in the provider's own
wire format: a tool call (arguments split mid-JSON), then, after the tool ran,
a reply that stalls mid-stream. A Pause cancels the run: the server must see
the connection closed, and the task must be kept. Resuming sends the saved
transcript (with the tool's result) to the model, which finishes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest
import trio

from agentrt import Cause
from agentrt import Model
from agentrt import Outcome
from agentrt import ReasoningEvent
from agentrt import RunEnded
from agentrt import TaskStarted
from agentrt import TextEvent
from agentrt import ToolResultEvent
from agentrt import UsageEvent
from agentrt import open_runtime
from agentrt.models.providers import AnthropicModel
from agentrt.models.providers import OpenAIModel
from agentrt.models.providers import RetryPolicy

from .conftest import FakeVerifier
from .conftest import Recorder
from .fakes.llm_server import OA_DONE
from .fakes.llm_server import Handler
from .fakes.llm_server import LLMServer
from .fakes.llm_server import an_end
from .fakes.llm_server import an_error
from .fakes.llm_server import an_start
from .fakes.llm_server import an_text_block
from .fakes.llm_server import an_thinking_block
from .fakes.llm_server import an_tool_block
from .fakes.llm_server import json_error
from .fakes.llm_server import oa_finish
from .fakes.llm_server import oa_text
from .fakes.llm_server import oa_tool
from .fakes.llm_server import oa_usage
from .fakes.llm_server import sse
from .fakes.llm_server import stall

CANARY = "sk-e2e-canary-5d1f0b9a7c3e"
NOTE = "hello from disk"


def openai_script() -> list[Handler]:
    return [
        sse(
            [
                oa_text("Let me read it."),
                oa_tool(0, id="call_1", name="read_file"),
                oa_tool(0, arguments='{"pa'),
                oa_tool(0, arguments='th": "notes.txt"}'),
                oa_finish("tool_calls"),
                oa_usage(50, 10),
                OA_DONE,
            ]
        ),
        stall([oa_text("Reading")]),
        sse([oa_text("The note says "), oa_text("hello."), oa_finish(), oa_usage(80, 6), OA_DONE]),
    ]


def anthropic_script() -> list[Handler]:
    return [
        sse(
            [
                an_start(50),
                *an_text_block(0, ["Let me read it."]),
                *an_tool_block(1, "toolu_1", "read_file", ['{"pa', 'th": "notes.txt"}']),
                *an_end("tool_use", 10),
            ]
        ),
        stall([an_start(60), *an_text_block(0, ["Reading"])[:2]]),
        sse([an_start(80), *an_text_block(0, ["The note says ", "hello."]), *an_end()]),
    ]


PROVIDERS: dict[str, tuple[Callable[[str], Model], Callable[[], list[Handler]]]] = {
    "openai": (lambda url: OpenAIModel("m", url + "/v1", api_key=CANARY), openai_script),
    "anthropic": (lambda url: AnthropicModel("m", url, api_key=CANARY), anthropic_script),
}


def noticing(text: str) -> tuple[Recorder, trio.Event]:
    """A recorder, and an event it sets once the text `text` has streamed."""
    recorder = Recorder()
    seen = trio.Event()

    def on_event(event: object) -> None:
        if isinstance(event, TextEvent) and event.text == text:
            seen.set()

    recorder.hooks.append(on_event)
    return recorder, seen


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
async def test_tool_conversation_pause_and_resume(
    provider: str, llm_server: LLMServer, tmp_path: Path, workdir: Path, verifier: FakeVerifier
) -> None:
    make, script = PROVIDERS[provider]
    (workdir / "notes.txt").write_text(NOTE)
    llm_server.script(*script())
    owner = object()
    first, streaming = noticing("Reading")
    ended: list[RunEnded] = []
    with trio.fail_after(10):
        async with open_runtime(
            tmp_path / "state",
            model=make(llm_server.base_url),
            workdir=workdir,
            restricted_paths=[],
            verifier=verifier,
        ) as rt:
            async with trio.open_nursery() as nursery:

                async def run() -> None:
                    ended.append(
                        await rt.executor.run(
                            "cli-e2e", "what does notes.txt say?", owner=owner, emit=first
                        )
                    )

                nursery.start_soon(run)
                await streaming.wait()
                [started] = first.of(TaskStarted)
                assert isinstance(started, TaskStarted)
                rt.executor.cancel(started.task_hash, Cause.PAUSE, owner=owner)
                exchange = await llm_server.wait_request(2)
                await exchange.disconnected.wait()

            [paused] = ended
            assert paused.outcome is Outcome.CANCELLED
            assert paused.cause is Cause.PAUSE
            assert paused.pending_kept
            assert await rt.store.load("cli-e2e") is not None
            [result] = first.of(ToolResultEvent)
            assert isinstance(result, ToolResultEvent)
            assert result.ok
            assert NOTE in result.preview

            second = Recorder()
            done = await rt.executor.resume("cli-e2e", owner=owner, emit=second)

    assert done.outcome is Outcome.FINISHED
    assert done.text == "The note says hello."
    assert second.text() == "The note says hello."
    # The tool ran once, before the pause; resuming did not run it again.
    assert second.of(ToolResultEvent) == []
    assert len(llm_server.requests) == 3
    resumed_body = llm_server.requests[2].body.decode()
    assert NOTE in resumed_body
    assert "notes.txt" in resumed_body


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
async def test_auth_failure_fails_the_run_without_the_key(
    provider: str,
    llm_server: LLMServer,
    tmp_path: Path,
    workdir: Path,
    verifier: FakeVerifier,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    make, _ = PROVIDERS[provider]
    llm_server.script(json_error(401, an_error("authentication_error", f"bad key {CANARY}")))
    model = make(llm_server.base_url)
    assert isinstance(model, (OpenAIModel, AnthropicModel))
    model.retry = RetryPolicy(max_attempts=1)
    rec = Recorder()
    with trio.fail_after(10):
        async with open_runtime(
            tmp_path / "state", model=model, workdir=workdir, restricted_paths=[], verifier=verifier
        ) as rt:
            ended = await rt.executor.run("cli-e2e", "hi", owner=object(), emit=rec)
    assert ended.outcome is Outcome.FAILED
    assert ended.error is not None
    assert "API_KEY" in ended.error
    assert CANARY not in ended.error
    assert CANARY not in caplog.text
    assert all(CANARY not in repr(e) for e in rec.events)


SIGNATURE = "ErUBCkYIBRgCIkD0signature=="
SECRET_VALUE = "tok-4f2a9d81c7e3b5a6"


async def test_anthropic_thinking_is_shown_kept_in_the_task_and_sent_back_after_a_pause(
    llm_server: LLMServer, tmp_path: Path, workdir: Path, verifier: FakeVerifier
) -> None:
    """Thinking reaches the events; its signed block is saved with the task and goes back
    to the API on the round after the tool ran, even when that round is a resume."""
    (workdir / "notes.txt").write_text(NOTE)
    llm_server.script(
        sse(
            [
                an_start(40, cache_read=900, cache_creation=60),
                *an_thinking_block(0, ["I need ", "the notes."], SIGNATURE),
                *an_tool_block(1, "toolu_1", "read_file", ['{"path": "notes.txt"}']),
                *an_end("tool_use", 10),
            ]
        ),
        stall([an_start(60), *an_text_block(0, ["Reading"])[:2]]),
        sse([an_start(80), *an_text_block(0, ["The note says hello."]), *an_end()]),
    )
    model = AnthropicModel("m", llm_server.base_url, api_key=CANARY, thinking_budget=1024)
    owner = object()
    first, streaming = noticing("Reading")
    with trio.fail_after(10):
        async with open_runtime(
            tmp_path / "state", model=model, workdir=workdir, restricted_paths=[], verifier=verifier
        ) as rt:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(
                    lambda: rt.executor.run("cli-think", "notes?", owner=owner, emit=first)
                )
                await streaming.wait()
                [started] = first.of(TaskStarted)
                rt.executor.cancel(started.task_hash, Cause.PAUSE, owner=owner)
            record = await rt.store.load("cli-think")
            assert record is not None
            done = await rt.executor.resume("cli-think", owner=owner, emit=Recorder())

    assert done.outcome is Outcome.FINISHED
    assert "".join(e.text for e in first.of(ReasoningEvent)) == "I need the notes."
    assert first.text() == "Reading"  # the reasoning is not part of the reply
    usage = first.of(UsageEvent)[0]
    assert (usage.input_tokens, usage.cache_read_tokens, usage.cache_creation_tokens) == (
        1000,
        900,
        60,
    )
    [saved] = [m for m in record.transcript if m.thinking]
    assert saved.thinking[0].signature == SIGNATURE
    signed = {"type": "thinking", "thinking": "I need the notes.", "signature": SIGNATURE}
    for request in llm_server.requests[1:]:  # the round after the tool, live and resumed
        assistant = request.json()["messages"][1]
        assert assistant["content"][0] == signed


async def test_a_secret_in_the_thinking_is_scrubbed_and_the_block_is_not_sent_back(
    llm_server: LLMServer, tmp_path: Path, workdir: Path, verifier: FakeVerifier
) -> None:
    (workdir / "notes.txt").write_text(NOTE)
    llm_server.script(
        sse(
            [
                an_start(),
                *an_thinking_block(0, [f"the token is {SECRET_VALUE}"], SIGNATURE),
                *an_tool_block(1, "toolu_1", "read_file", ['{"path": "notes.txt"}']),
                *an_end("tool_use"),
            ]
        ),
        sse([an_start(), *an_text_block(0, ["done"]), *an_end()]),
    )
    model = AnthropicModel("m", llm_server.base_url, api_key=CANARY, thinking_budget=1024)
    rec = Recorder()
    with trio.fail_after(10):
        async with open_runtime(
            tmp_path / "state", model=model, workdir=workdir, restricted_paths=[], verifier=verifier
        ) as rt:
            rt.secrets.put("deploy_token", SECRET_VALUE)
            ended = await rt.executor.run("cli-secret", "go", owner=object(), emit=rec)
            history = await rt.store.load_history("cli-secret")
    assert ended.outcome is Outcome.FINISHED
    shown = "".join(e.text for e in rec.of(ReasoningEvent))
    assert shown == "the token is [secret deploy_token]"
    [kept] = [m for m in history if m.thinking]
    assert kept.thinking[0].text == "the token is [secret deploy_token]"
    assert kept.thinking[0].signature is None
    assert all(SECRET_VALUE not in repr(m) for m in history)
    # The scrubbed block has no valid signature any more, so it is left out of the request.
    assert SECRET_VALUE not in llm_server.requests[1].body.decode()
    assistant = llm_server.requests[1].json()["messages"][1]
    assert [b["type"] for b in assistant["content"]] == ["tool_use"]

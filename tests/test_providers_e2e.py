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

from agentrt import (
    Cause,
    Model,
    Outcome,
    RunEnded,
    TaskStarted,
    TextEvent,
    ToolResultEvent,
    open_runtime,
)
from agentrt.providers import AnthropicModel, OpenAIModel, RetryPolicy

from .conftest import FakeVerifier, Recorder
from .fakes.llm_server import (
    OA_DONE,
    Handler,
    LLMServer,
    an_end,
    an_error,
    an_start,
    an_text_block,
    an_tool_block,
    json_error,
    oa_finish,
    oa_text,
    oa_tool,
    oa_usage,
    sse,
    stall,
)

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


@pytest.fixture
async def server(nursery: trio.Nursery) -> LLMServer:
    srv = LLMServer()
    await nursery.start(srv.run)
    return srv


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
async def test_tool_conversation_pause_and_resume(
    provider: str, server: LLMServer, tmp_path: Path, workdir: Path, verifier: FakeVerifier
) -> None:
    make, script = PROVIDERS[provider]
    (workdir / "notes.txt").write_text(NOTE)
    server.script(*script())
    owner = object()
    first = Recorder()
    streaming = trio.Event()

    def on_event(event: object) -> None:
        if isinstance(event, TextEvent) and event.text == "Reading":
            streaming.set()

    first.hooks.append(on_event)
    ended: list[RunEnded] = []
    with trio.fail_after(10):
        async with open_runtime(
            tmp_path / "state",
            model=make(server.base_url),
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
                exchange = await server.wait_request(2)
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
    assert len(server.requests) == 3
    resumed_body = server.requests[2].body.decode()
    assert NOTE in resumed_body
    assert "notes.txt" in resumed_body


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
async def test_auth_failure_fails_the_run_without_the_key(
    provider: str,
    server: LLMServer,
    tmp_path: Path,
    workdir: Path,
    verifier: FakeVerifier,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    make, _ = PROVIDERS[provider]
    server.script(json_error(401, an_error("authentication_error", f"bad key {CANARY}")))
    model = make(server.base_url)
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

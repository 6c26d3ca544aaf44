"""Long conversations: context windows, and the compaction of older turns into a summary.

The end-to-end tests give a real provider class a fake server that refuses, with
the provider's own error, any request longer than a small context window: a
session of 2,000 messages goes on working, every request stays under the
window, and the summary is an entry of the conversation the store keeps.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from collections.abc import Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from agentrt import Cause
from agentrt import CompactionEvent
from agentrt import Model
from agentrt import Outcome
from agentrt import RunEnded
from agentrt import Runtime
from agentrt import TaskStarted
from agentrt import open_runtime
from agentrt.agent.compaction import DEFAULT_SHARE
from agentrt.agent.compaction import SUMMARY_REQUEST
from agentrt.agent.compaction import ContextLimits
from agentrt.agent.compaction import Joined
from agentrt.agent.compaction import estimate
from agentrt.agent.compaction import plan
from agentrt.agent.compaction import prompt_of
from agentrt.agent.compaction import trim_summary
from agentrt.agent.loop import AgentRun
from agentrt.config.settings import load_settings
from agentrt.models.messages import Compaction
from agentrt.models.messages import Message
from agentrt.models.messages import Role
from agentrt.models.messages import ToolCall
from agentrt.models.providers import AnthropicModel
from agentrt.models.providers import OpenAIModel
from agentrt.models.providers import RetryPolicy
from agentrt.store.record import TaskRecord
from agentrt.vocab.events import describe_compaction

from .conftest import FakeVerifier
from .conftest import Recorder
from .conftest import runtime_in
from .fakes.llm_server import OA_DONE
from .fakes.llm_server import Exchange
from .fakes.llm_server import Handler
from .fakes.llm_server import LLMServer
from .fakes.llm_server import an_end
from .fakes.llm_server import an_start
from .fakes.llm_server import an_text_block
from .fakes.llm_server import oa_finish
from .fakes.llm_server import oa_text
from .fakes.llm_server import oa_usage
from .fakes.llm_server import request_tokens
from .fakes.llm_server import sse
from .fakes.llm_server import stall

WINDOW = 6000
SUMMARY = "SUMMARY: the user asked about topics 0 to 1999; nothing is open."


def conversation(count: int) -> list[Message]:
    """`count` messages of user questions and replies, each about 60 words."""
    out: list[Message] = []
    for n in range(count):
        if n % 2 == 0:
            out.append(Message.user(f"question {n}: " + "tell me more about this topic " * 10))
        else:
            out.append(Message.assistant(f"answer {n}: " + "here is more about that topic " * 10))
    return out


# -- the pieces ------------------------------------------------------------------------------


def test_known_families_have_windows_and_the_configuration_wins() -> None:
    limits = ContextLimits({"openai:gpt-4o": 1000, "openai:local": 4096})
    assert limits.window_of("openai:gpt-4o") == 1000
    assert limits.window_of("openai:gpt-4o-mini") == 128_000
    assert limits.window_of("anthropic:claude-sonnet-4-5") == 200_000
    assert limits.window_of("openai:local") == 4096
    assert limits.window_of("openai:unknown-model") is None
    assert limits.window_of("scripted") is None
    assert limits.budget_of("openai:local") == int(4096 * DEFAULT_SHARE)


def test_the_prompt_holds_the_summary_the_kept_messages_and_what_came_after() -> None:
    old = conversation(10)
    entry = Message(Role.NOTE, "the summary", compaction=Compaction(summarised=8, kept=2))
    after = [Message.user("and now?")]
    prompt = prompt_of([*old, entry, *after])
    assert [m.content for m in prompt] == [
        "the summary",
        old[8].content,
        old[9].content,
        "and now?",
    ]
    assert prompt[0].role is Role.NOTE
    assert prompt[0].compaction is None


def test_a_kept_part_never_starts_with_a_tools_result() -> None:
    call = ToolCall("c1", "read_file", {"path": "a"})
    messages = [
        Message.user("read a " * 50),
        Message.assistant("", [call]),
        Message.tool_result(call, "x" * 3000),
        Message.assistant("done " * 10),
    ]
    # Room for the last two messages: the result would start the kept part, so the cut
    # goes back to the assistant message that asked for it, or on to the last reply.
    found = plan(messages, keep_tokens=1050)
    assert found is not None
    kept = messages[len(messages) - found.kept :]
    assert kept[0].role is not Role.TOOL
    assert found.summarised + found.kept == len(messages)


def test_a_second_compaction_covers_the_first_summary_and_counts_every_message() -> None:
    first = plan(conversation(20), keep_tokens=300)
    assert first is not None
    entry = Message(Role.NOTE, "first summary", compaction=Compaction(first.summarised, first.kept))
    later = [*conversation(20), entry, *conversation(10)]
    second = plan(later, keep_tokens=300)
    assert second is not None
    assert second.earlier == "first summary"
    assert second.summarised + second.kept == 30
    assert estimate(prompt_of([*later, Message(Role.NOTE, "s", compaction=Compaction(30, 0))])) < (
        estimate(later)
    )


def test_the_trim_is_deterministic_and_names_the_first_and_last_requests() -> None:
    found = plan(conversation(40), keep_tokens=200)
    assert found is not None
    text = trim_summary(found)
    assert text == trim_summary(found)
    assert "question 0:" in text
    assert f"{found.summarised} messages were trimmed" in text


# -- a long session against a provider that refuses an over-long request ---------------------


def oa_reply(text: str) -> Handler:
    return sse([oa_text(text), oa_finish(), oa_usage(100, 10), OA_DONE])


def an_reply(text: str) -> Handler:
    return sse([an_start(100), *an_text_block(0, [text]), *an_end()])


def answering(reply: Callable[[str], Handler]) -> Handler:
    """A summary to a summary request, else a short answer."""

    async def handler(exchange: Exchange) -> None:
        body = exchange.request.body.decode()
        asked = SUMMARY_REQUEST.split(".")[0] in body
        await reply(SUMMARY if asked else "Noted.")(exchange)

    return handler


PROVIDERS: dict[str, tuple[Callable[[str], Model], Callable[[str], Handler]]] = {
    "openai": (lambda url: OpenAIModel("m", url + "/v1", api_key="k"), oa_reply),
    "anthropic": (lambda url: AnthropicModel("m", url, api_key="k"), an_reply),
}


@asynccontextmanager
async def long_session(
    tmp_path: Path,
    model: Model,
    workdir: Path,
    verifier: FakeVerifier,
    context: ContextLimits | None = None,
) -> AsyncIterator[tuple[Runtime, list[Message]]]:
    """A runtime of `model` whose session ``cli-long`` holds 2,000 messages already."""
    history = conversation(2000)
    async with open_runtime(
        tmp_path / "state",
        model=model,
        workdir=workdir,
        restricted_paths=[],
        verifier=verifier,
        context=context,
    ) as rt:
        await rt.store.create(TaskRecord("cli-long", history[0].content, tuple(history)))
        await rt.store.finish("cli-long", history)
        yield rt, history


def sent_texts(body: dict[str, object]) -> str:
    return json.dumps(body)


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
async def test_a_2000_message_session_goes_on_within_a_small_window(
    provider: str, llm_server: LLMServer, tmp_path: Path, workdir: Path, verifier: FakeVerifier
) -> None:
    make, reply = PROVIDERS[provider]
    model = make(llm_server.base_url)
    llm_server.context_window = WINDOW
    llm_server.fallback = answering(reply)
    limits = ContextLimits({model.name: WINDOW})
    with trio.fail_after(20):
        async with long_session(tmp_path, model, workdir, verifier, limits) as (rt, history):
            recorders = []
            for turn in range(3):
                rec = Recorder()
                ended = await rt.executor.run(
                    "cli-long", f"next question {turn}", owner=object(), emit=rec
                )
                assert ended.outcome is Outcome.FINISHED, ended.error
                assert ended.text == "Noted."
                recorders.append(rec)
            stored = await rt.store.messages("cli-long", limit=3000)
            usage = await rt.store.usage("cli-long")

    assert llm_server.refused == []
    assert all(request_tokens(r) <= WINDOW for r in llm_server.requests)
    # One compaction, on the first turn: a summary request, then the turn's own.
    [event] = recorders[0].of(CompactionEvent)
    assert isinstance(event, CompactionEvent)
    assert recorders[1].of(CompactionEvent) == recorders[2].of(CompactionEvent) == []
    assert len(llm_server.requests) == 4
    # The summary's request cost tokens too: counted with the first run's.
    assert [run.tokens.rounds for run in usage] == [2, 1, 1]
    # The store keeps every message, the summary entry among them, after the first question.
    messages = [s.message for s in stored.items]
    assert len(messages) == 2000 + 3 * 2 + 1
    assert messages[:2000] == history
    [entry] = [m for m in messages if m.compaction is not None]
    assert entry.role is Role.NOTE
    assert SUMMARY in entry.content
    assert entry.compaction is not None
    assert entry.compaction.summarised == event.summarised
    assert entry.compaction.summarised + entry.compaction.kept == 2001
    assert messages.index(entry) == 2001
    # Every later request carries the summary and the newest turns, not the oldest ones.
    for request in llm_server.requests[1:]:
        body = request.body.decode()
        assert SUMMARY in body
        assert "question 0:" not in body
    assert "next question 2" in llm_server.requests[-1].body.decode()
    assert (
        describe_compaction(event.summarised) == f"{event.summarised} earlier messages summarised"
    )
    # The run's system prompt leads every request of a turn, the compacted ones too; the
    # summary's request (the history alone) never holds it.
    prompts = [system_prompt_of(provider, request.body) for request in llm_server.requests]
    assert prompts[0] is None
    assert prompts[1] is not None and prompts[1].startswith("You are")
    assert prompts[1] not in llm_server.requests[0].body.decode()
    assert prompts[1:] == [prompts[1]] * 3


def system_prompt_of(provider: str, body: bytes) -> str | None:
    """The system prompt a request sent, in its provider's shape (None: it sent none)."""
    sent = json.loads(body)
    if provider == "anthropic":
        blocks = sent.get("system") or []
        return "".join(block["text"] for block in blocks) or None
    first = sent["messages"][0]
    return str(first["content"]) if first["role"] == "system" else None


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
async def test_without_a_known_window_the_provider_refuses_the_long_request(
    provider: str, llm_server: LLMServer, tmp_path: Path, workdir: Path, verifier: FakeVerifier
) -> None:
    """The fake refuses as the provider does, and the run fails saying why: what compaction
    spares a session whose model's window is known."""
    make, reply = PROVIDERS[provider]
    model = make(llm_server.base_url)
    assert isinstance(model, OpenAIModel | AnthropicModel)
    model.retry = RetryPolicy(max_attempts=1)
    llm_server.context_window = WINDOW
    llm_server.fallback = answering(reply)
    with trio.fail_after(20):
        async with long_session(tmp_path, model, workdir, verifier) as (rt, _):
            ended = await rt.executor.run("cli-long", "next", owner=object(), emit=Recorder())
    assert ended.outcome is Outcome.FAILED
    assert ended.error is not None
    assert ("maximum context length" in ended.error) or ("prompt is too long" in ended.error)
    assert len(llm_server.refused) == 1


async def test_a_pause_during_a_compaction_keeps_the_task_and_the_resume_compacts_once(
    llm_server: LLMServer, tmp_path: Path, workdir: Path, verifier: FakeVerifier
) -> None:
    model = OpenAIModel("m", llm_server.base_url + "/v1", api_key="k")
    llm_server.context_window = WINDOW
    llm_server.script(stall([oa_text("SUMMARY: half")]))
    llm_server.fallback = answering(oa_reply)
    owner = object()
    limits = ContextLimits({model.name: WINDOW})
    with trio.fail_after(20):
        async with long_session(tmp_path, model, workdir, verifier, limits) as (rt, history):
            first = Recorder()
            ended: list[RunEnded] = []
            async with trio.open_nursery() as nursery:

                async def run() -> None:
                    ended.append(
                        await rt.executor.run("cli-long", "go on", owner=owner, emit=first)
                    )

                nursery.start_soon(run)
                exchange = await llm_server.wait_request(1)
                assert SUMMARY_REQUEST.split(".")[0] in exchange.request.body.decode()
                [started] = first.of(TaskStarted)
                assert isinstance(started, TaskStarted)
                rt.executor.cancel(started.task_hash, Cause.PAUSE, owner=owner)
                await exchange.disconnected.wait()
            [paused] = ended
            assert paused.outcome is Outcome.CANCELLED
            assert paused.pending_kept
            kept = await rt.store.load("cli-long")
            assert kept is not None
            assert all(m.compaction is None for m in kept.transcript)
            assert first.of(CompactionEvent) == []

            second = Recorder()
            done = await rt.executor.resume("cli-long", owner=owner, emit=second)
            assert done.outcome is Outcome.FINISHED, done.error
            stored = await rt.store.messages("cli-long", limit=3000)

    assert llm_server.refused == []
    assert len(second.of(CompactionEvent)) == 1
    messages = [s.message for s in stored.items]
    assert messages[:2000] == history
    assert [m.content for m in messages[2000:2001]] == ["go on"]
    # The stop's note, one compaction entry, then the reply: nothing lost, nothing twice.
    tail = messages[2001:]
    assert [m.role for m in tail] == [Role.NOTE, Role.NOTE, Role.ASSISTANT]
    assert tail[0].compaction is None
    assert "stopped by a pause" in tail[0].content
    assert tail[1].compaction is not None
    assert SUMMARY in tail[1].content
    assert tail[2].content == "Noted."


async def test_the_scripted_model_trims_and_the_session_goes_on(
    tmp_path: Path, workdir: Path, verifier: FakeVerifier
) -> None:
    history = conversation(400)
    with trio.fail_after(20):
        async with open_runtime(
            tmp_path / "state",
            model_spec="scripted",
            workdir=workdir,
            restricted_paths=[],
            verifier=verifier,
            context=ContextLimits({"scripted": 4000}),
        ) as rt:
            await rt.store.create(TaskRecord("cli-s", history[0].content, tuple(history)))
            await rt.store.finish("cli-s", history)
            rec = Recorder()
            ended = await rt.executor.run("cli-s", "hello", owner=object(), emit=rec)
            stored = await rt.store.messages("cli-s", limit=1000)
    assert ended.outcome is Outcome.FINISHED
    [event] = rec.of(CompactionEvent)
    assert isinstance(event, CompactionEvent)
    [entry] = [s.message for s in stored.items if s.message.compaction is not None]
    assert "question 0:" in entry.content
    assert f"{event.summarised} messages were trimmed" in entry.content
    assert estimate(prompt_of([s.message for s in stored.items])) <= 4000 * DEFAULT_SHARE


def test_the_users_latest_message_goes_along_when_it_was_summarised() -> None:
    call = ToolCall("c1", "read_file", {"path": "a"})
    asked = Message.user("do the long job")
    work = [Message.assistant("", [call]), Message.tool_result(call, "ok")]
    entry = Message(Role.NOTE, "summary", compaction=Compaction(summarised=3, kept=0))
    prompt = prompt_of([Message.user("old"), asked, *work, entry, Message.assistant("next")])
    assert prompt == [Message.note("summary"), asked, Message.assistant("next")]


def test_the_prompt_of_a_joined_conversation_is_that_of_the_same_messages_in_a_list() -> None:
    call = ToolCall("c1", "read_file", {"path": "a"})
    lead = [Message.system("be brief"), Message.system("the folder is /w")]
    asked = Message.user("do the long job")
    work = [Message.assistant("", [call]), Message.system("aside"), Message.tool_result(call, "ok")]
    first = Message(Role.NOTE, "first", compaction=Compaction(summarised=2, kept=1))
    last = Message(Role.NOTE, "last", compaction=Compaction(summarised=4, kept=2))
    shapes = [
        [*lead, Message.user("old"), asked, *work, last, Message.assistant("next")],
        [*lead, asked, first, *work, last],
        [*lead, asked, *work, Message(Role.NOTE, "all", compaction=Compaction(3, 9))],
        [Message.user("old"), first, *conversation(4)],
        [*lead, *conversation(5)],
        [],
    ]
    # The system prompt leads; the one kept whole skips the system message among them
    # and goes back to the user's message, which it did not reach.
    assert prompt_of(shapes[0]) == [
        *lead,
        Message.note("last"),
        asked,
        work[0],
        work[2],
        Message.assistant("next"),
    ]
    for messages in shapes:
        expected = prompt_of(messages)
        for cut in range(len(messages) + 1):
            for inner in range(cut, len(messages) + 1):
                joined = Joined(messages[:cut], Joined(messages[cut:inner], messages[inner:]))
                assert list(joined) == messages
                assert list(prompt_of(joined)) == list(expected), (cut, inner)


async def test_a_session_on_its_own_model_compacts_with_that_models_window_and_summary(
    llm_server: LLMServer, tmp_path: Path, workdir: Path, verifier: FakeVerifier
) -> None:
    """The default (scripted) model has no window; the session's own one has a small one: the
    run compacts for it, its summary is written by it and its tokens are counted as its."""
    config = tmp_path / "config.toml"
    config.write_text(
        'models = ["openai:m1"]\n'
        'context_windows = { "openai:m1" = 4000 }\n\n'
        f'[openai]\nbase_url = "{llm_server.base_url}/v1"\n',
        "utf-8",
    )
    settings = load_settings(
        environ={"AGENTRT_CONFIG": str(config), "AGENTRT_STATE_DIR": str(tmp_path / "state")}
    )
    llm_server.fallback = answering(oa_reply)
    history = conversation(200)
    with trio.fail_after(20):
        async with runtime_in(tmp_path, workdir, verifier, settings=settings) as rt:
            await rt.store.create(TaskRecord("cli-own", history[0].content, tuple(history)))
            await rt.store.finish("cli-own", history)
            await rt.executor.choose_model("cli-own", "openai:m1")
            rec = Recorder()
            ended = await rt.executor.run("cli-own", "next question", owner=object(), emit=rec)
            assert (ended.outcome, ended.text) == (Outcome.FINISHED, "Noted."), ended.error
            assert len(rec.of(CompactionEvent)) == 1
            usage = await rt.store.usage("cli-own")
            # By hand too: the summary is asked of the session's model.
            summarised = await rt.executor.compact("cli-own")
    assert summarised > 0
    summaries = [r for r in llm_server.requests if SUMMARY_REQUEST[:40] in r.body.decode()]
    assert len(summaries) == 2 and len(llm_server.requests) == 3
    assert all(r.json()["model"] == "m1" for r in llm_server.requests)
    assert [(run.model, run.tokens.rounds) for run in usage] == [("openai:m1", 2)]


async def test_the_prompt_starts_with_the_system_prompt_and_a_rewind_past_a_compaction_undoes_it(
    runtime: Runtime,
) -> None:
    """A rewind note drops what came after its turn, a compaction entry among it: the model is
    then sent those messages whole again; a rewind after a compaction keeps its summary."""
    u = [Message.user(f"question {n}") for n in range(4)]
    a = [Message.assistant(f"answer {n}") for n in range(4)]
    entry = Message(Role.NOTE, "SUMMARY of the first exchanges", compaction=Compaction(2, 2))

    def sent(history: list[Message]) -> list[Message]:
        ask = (Message.user("and now?"),)
        run = AgentRun(
            model=runtime.model,
            registry=runtime.registry,
            config=runtime.executor.config,
            emit=Recorder(),
            task_hash="t1",
            snapshot=TaskRecord("cli-r", ask[0].content, ask),
            store=None,
            history=tuple(history),
            live=list(ask),
        )
        return list(run._model_messages())

    compacted = [u[0], a[0], u[1], a[1], entry, u[2], a[2], u[3], a[3]]
    after = sent([*compacted, Message(Role.NOTE, "rewound", rewinds=7)])
    assert after[0].role is Role.SYSTEM
    assert after[1].content == entry.content
    assert [m.content for m in after[2:]] == [
        *("question 1", "answer 1", "question 2", "answer 2", "rewound", "and now?")
    ]
    before = sent([*compacted, Message(Role.NOTE, "rewound", rewinds=2)])
    assert before[0].role is Role.SYSTEM
    assert [m.content for m in before[1:]] == ["question 0", "answer 0", "rewound", "and now?"]

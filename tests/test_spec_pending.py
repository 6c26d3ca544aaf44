"""The spec's "Pending registry" section, one test (or more) per sentence."""

from __future__ import annotations

import os
import stat
from functools import partial
from pathlib import Path

import pytest
import trio
import trio.testing

from agentrt import Answer
from agentrt import Entry
from agentrt import EntryGoneError
from agentrt import EntryState
from agentrt import ListenerGoneError
from agentrt import Message
from agentrt import ModelResponse
from agentrt import Outcome
from agentrt import Registry
from agentrt import Request
from agentrt import RequestContext
from agentrt import RequestKind
from agentrt import Runtime
from agentrt import TaskStatus
from agentrt import TextEvent
from agentrt import ToolCall
from agentrt import ToolCallEvent
from agentrt import ToolResultEvent
from agentrt import VerifyEvent
from agentrt import bind_context
from agentrt import origin_of
from agentrt.core.pending import NoRequestContextError
from agentrt.models.messages import Role
from agentrt.vocab.clamp import ARGUMENT_LIMIT
from agentrt.vocab.clamp import MARKER_RE
from agentrt.vocab.clamp import TOOL_RESULT_LIMIT

from .conftest import FakeVerifier
from .conftest import Recorder


def ctx(session: str, window: str | None = None) -> RequestContext:
    return RequestContext(session, window)


async def answer_all(runtime: Runtime, prefix: str, reply: str | Answer, seen: list[str]) -> None:
    with runtime.registry.listen(prefix) as listener:
        while True:
            entry = await listener.claim()
            seen.append(entry.request.prompt)
            entry.answer(reply)


# "the prefix-routed confirm/ask registry shared by the main agent and any in-process subagents"


async def test_registry_is_shared_by_main_agent_and_in_process_subagents(
    runtime: Runtime, workdir: Path
) -> None:
    seen: list[str] = []
    recorder = Recorder()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(answer_all, runtime, "cli-", "allow", seen)
        ended = await runtime.executor.run(
            "cli-main", "write a.txt parent; spawn {write b.txt child}", owner="t", emit=recorder
        )
        nursery.cancel_scope.cancel()
    assert ended.outcome is Outcome.FINISHED
    # The subagent's confirmation went through the same registry, routed like its parent.
    assert sorted(seen) == sorted(
        [f"write 6 bytes to {workdir / 'a.txt'}", f"write 5 bytes to {workdir / 'b.txt'}"]
    )
    assert (workdir / "b.txt").read_text() == "child"
    agents = {e.agent for e in recorder.of(ToolCallEvent)}
    assert agents == {"", "sub1"}


# "Producers (toolCall confirm, ask_user handler, store_secret handler) call Ask(ctx, req)
#  and block on a per-entry buffered=1 reply channel."


async def test_producers_confirm_ask_user_and_store_secret_block_until_answered(
    runtime: Runtime,
) -> None:
    recorder = Recorder()
    kinds: list[RequestKind] = []
    async with trio.open_nursery() as nursery:

        async def run() -> None:
            await runtime.executor.run(
                "cli-p", "write x.txt 1; ask Name?; secret token", owner="t", emit=recorder
            )

        nursery.start_soon(run)
        with runtime.registry.listen("cli-") as listener:
            entries = [await listener.claim() for _ in range(3)]
            await trio.testing.wait_all_tasks_blocked()
            # All three producers are blocked on their reply: nothing was committed yet.
            assert recorder.of(ToolResultEvent) == []
            assert runtime.registry.statistics().claimed == 3
            for entry in entries:
                kinds.append(entry.request.kind)
                if entry.request.kind is RequestKind.CONFIRM:
                    entry.answer("allow")
                elif entry.request.kind is RequestKind.SECRET:
                    entry.answer(Answer("", secret="s3cr3t-value"))
                else:
                    entry.answer("Ada")
    assert sorted(k.value for k in kinds) == ["confirm", "question", "secret"]
    assert len(recorder.of(ToolResultEvent)) == 3


async def test_an_entry_takes_exactly_one_answer() -> None:
    registry = Registry()
    entry = registry.post(Request.question("q"), ctx("cli-1"))
    entry.answer("a")
    with pytest.raises(Exception, match="answered already"):
        entry.answer("b")


# "Each front-end registers a listener via RegisterListener(prefix) ... (an empty prefix
#  matches everything) — and claims only matching entries through PickNextMatch(prefix, accept)."


async def test_listeners_claim_only_entries_matching_their_prefix() -> None:
    registry = Registry()
    web = registry.listen("chat-")
    telegram = registry.listen("tg-")
    registry.post(Request.question("from tg"), ctx("tg-7"))
    registry.post(Request.question("from web"), ctx("chat-1"))
    claimed = web.claim_nowait()
    assert claimed is not None and claimed.request.prompt == "from web"
    assert web.claim_nowait() is None
    tg = telegram.claim_nowait()
    assert tg is not None and tg.context.session_id == "tg-7"


async def test_empty_prefix_matches_everything() -> None:
    registry = Registry()
    everything = registry.listen("")
    for session in ("cli-1", "chat-1", "tg-1", "dc-1", "other"):
        registry.post(Request.question(session), ctx(session))
    got = [everything.claim_nowait() for _ in range(5)]
    assert [e.context.session_id for e in got if e] == ["cli-1", "chat-1", "tg-1", "dc-1", "other"]


async def test_pick_next_match_claims_the_oldest_entry_that_accept_allows() -> None:
    registry = Registry()
    listener = registry.listen("chat-")
    registry.post(Request.question("first"), ctx("chat-1"))
    registry.post(Request.question("second"), ctx("chat-2"))
    registry.post(Request.question("third"), ctx("chat-2"))
    entry = listener.claim_nowait(accept=lambda e: e.context.session_id == "chat-2")
    assert entry is not None and entry.request.prompt == "second"
    oldest = listener.claim_nowait()
    assert oldest is not None and oldest.request.prompt == "first"


async def test_awaitable_claim_waits_instead_of_polling() -> None:
    registry = Registry()
    with registry.listen("dc-") as listener:
        async with trio.open_nursery() as nursery:
            got: list[str] = []

            async def claimer() -> None:
                entry = await listener.claim()
                got.append(entry.request.prompt)

            nursery.start_soon(claimer)
            await trio.testing.wait_all_tasks_blocked()
            assert listener.statistics().tasks_waiting == 1
            registry.post(Request.question("wake up"), ctx("dc-1"))
        assert got == ["wake up"]


# "each daemon socket connection registers "cli-" with RegisterListenerMatch(prefix, match),
#  matching only requests whose ctx carries a window hash that connection started"


async def test_match_listener_claims_only_requests_of_its_own_windows() -> None:
    registry = Registry()
    window_a = registry.listen("cli-", lambda c: c.window_hash == "A")
    window_b = registry.listen("cli-", lambda c: c.window_hash == "B")
    registry.post(Request.question("for B"), ctx("cli-1", "B"))
    registry.post(Request.question("for A"), ctx("cli-2", "A"))
    a = window_a.claim_nowait()
    assert a is not None and a.request.prompt == "for A"
    assert window_a.claim_nowait() is None
    b = window_b.claim_nowait()
    assert b is not None and b.request.prompt == "for B"


async def test_request_context_travels_to_child_tasks_so_subagents_route_like_parent() -> None:
    registry = Registry()
    listener = registry.listen("cli-", lambda c: c.window_hash == "W")
    async with trio.open_nursery() as nursery:
        with bind_context(ctx("cli-9", "W")):
            nursery.start_soon(registry.ask, Request.question("from a child task"))
        entry = await listener.claim()
        assert entry.context.window_hash == "W"
        entry.answer("ok")


async def test_ask_outside_a_run_says_to_pass_a_context() -> None:
    with pytest.raises(NoRequestContextError, match="inside a run, or pass context"):
        await Registry().ask(Request.question("q"))


# "A restricted-path confirmation asks for the system password in a TUI password field
#  (skipped while sudo credentials are still cached); the daemon verifies it with sudo -S -v
#  and reports the result in a verify frame when a password was entered or verification fails."


async def test_restricted_path_confirmation_asks_for_the_system_password(
    runtime: Runtime, tmp_path: Path, verifier: FakeVerifier
) -> None:
    target = tmp_path / "restricted" / "conf"
    target.parent.mkdir()
    recorder = Recorder()
    async with trio.open_nursery() as nursery:

        async def run() -> None:
            await runtime.executor.run("cli-r", f"write {target} x", owner="t", emit=recorder)

        nursery.start_soon(run)
        with runtime.registry.listen("cli-") as listener:
            first = await listener.claim()
            assert first.request.kind is RequestKind.PASSWORD and first.request.masked
            first.answer(Answer("allow", secret="wrong"))
            second = await listener.claim()
            assert second.request.error == "wrong password, 2 tries left"
            second.answer(Answer("allow", secret="hunter2"))
    verify = recorder.of(VerifyEvent)
    assert [(v.ok, v.attempts_left) for v in verify] == [(False, 2), (True, 1)]
    [argv] = verifier.commands  # the sandboxed writer, through sudo
    assert (
        argv[-1] == str(target)
        and ["--bind", str(target.parent), str(target.parent)]
        == [argv[i : i + 3] for i, a in enumerate(argv) if a == "--bind"][-1]
    )
    assert target.read_text() == "x"
    # The password never reaches an event.
    assert "hunter2" not in repr(recorder.events) and "wrong" not in repr(verify[1])


async def test_password_field_is_skipped_while_sudo_credentials_are_cached(
    runtime: Runtime, tmp_path: Path, verifier: FakeVerifier
) -> None:
    verifier.is_cached = True
    target = tmp_path / "restricted" / "f"
    target.parent.mkdir()
    target.write_text("secret config")
    recorder = Recorder()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(answer_all, runtime, "cli-", "allow", [])
        ended = await runtime.executor.run("cli-c", f"read {target}", owner="t", emit=recorder)
        nursery.cancel_scope.cancel()
    assert ended.outcome is Outcome.FINISHED
    assert verifier.verified == [] and recorder.of(VerifyEvent) == []
    assert "secret config" in recorder.text()


async def test_three_wrong_passwords_deny_the_tool_call(
    runtime: Runtime, tmp_path: Path, verifier: FakeVerifier
) -> None:
    target = tmp_path / "restricted" / "x"
    recorder = Recorder()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(answer_all, runtime, "cli-", Answer("allow", secret="nope"), [])
        ended = await runtime.executor.run("cli-w", f"write {target} x", owner="t", emit=recorder)
        nursery.cancel_scope.cancel()
    assert ended.outcome is Outcome.FINISHED
    assert verifier.verified == [False, False, False]
    assert not target.exists()
    results = recorder.of(ToolResultEvent)
    assert results[0].preview == "error: denied: 3 wrong passwords"


# "Closing the connection resolves its open questions with an error."


async def test_closing_a_listener_fails_its_claimed_questions_with_an_error() -> None:
    registry = Registry()
    listener = registry.listen("cli-")
    errors: list[BaseException] = []

    async def producer() -> None:
        try:
            await registry.ask(Request.question("anyone?"), context=ctx("cli-1"))
        except ListenerGoneError as exc:
            errors.append(exc)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(producer)
        entry = await listener.claim()
        listener.close("the window closed")
    assert entry.state is EntryState.FAILED
    assert len(errors) == 1
    assert str(errors[0]) == "the window closed before answering: anyone?"
    assert registry.statistics().claimed == 0


# "ctx cancellation removes the entry so a stale producer never wastes a human interaction."


async def test_cancelled_producer_withdraws_its_entry_and_a_late_answer_is_refused() -> None:
    registry = Registry()
    listener = registry.listen("chat-")
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                lambda: registry.ask(Request.question("stale?"), context=ctx("chat-1"))
            )
            await trio.testing.wait_all_tasks_blocked()
            scope.cancel()
    # Withdrawn before a claim: nothing left to claim.
    assert listener.claim_nowait() is None
    assert registry.statistics() == type(registry.statistics())(0, 0, 1)
    # Withdrawn after a claim: the late answer is refused with a clear error.
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                lambda: registry.ask(Request.question("also stale"), context=ctx("chat-2"))
            )
            entry = await listener.claim()
            scope.cancel()
    assert entry.state is EntryState.WITHDRAWN
    with pytest.raises(EntryGoneError, match="its run was stopped before the answer arrived"):
        entry.answer("too late")


# "The gate HasListener(origin) checks whether a listener whose prefix matches the session's
#  origin (OriginOf recognizes cli-, chat-, tg-, dc-) is registered."


def test_origin_of_recognizes_cli_chat_tg_and_dc() -> None:
    assert [origin_of(s) for s in ("cli-1", "chat-x", "tg-42", "dc-9", "web-1", "")] == [
        "cli-",
        "chat-",
        "tg-",
        "dc-",
        "",
        "",
    ]


async def test_has_listener_checks_for_a_listener_whose_prefix_matches_the_origin() -> None:
    registry = Registry()
    assert not registry.has_listener("chat-")
    with registry.listen("chat-"):
        assert registry.has_listener("chat-")
        assert not registry.has_listener("tg-")
    assert not registry.has_listener("chat-")
    with registry.listen(""):
        assert registry.has_listener("dc-")


# "With a match function, the listener counts only when the request's ctx passes it, so a TUI
#  run whose window is disconnected finds no listener."


async def test_has_listener_consults_match_functions_so_a_disconnected_window_has_none() -> None:
    registry = Registry()
    with registry.listen("cli-", lambda c: c.window_hash == "alive"):
        assert registry.has_listener("cli-", ctx("cli-1", "alive"))
        assert not registry.has_listener("cli-", ctx("cli-2", "gone"))


async def test_a_terminal_run_whose_window_is_gone_parks_its_question(runtime: Runtime) -> None:
    with runtime.registry.listen("cli-", lambda c: c.window_hash == "other-window"):
        ended = await runtime.executor.run(
            "cli-gone", "ask Still there?", owner="t", emit=Recorder(), window_hash="closed"
        )
    assert ended.outcome is Outcome.AWAITING_ANSWER and ended.pending_kept
    record = await runtime.store.load("cli-gone")
    assert record is not None and record.question is not None
    assert record.question.prompt == "Still there?"


# "This replaces the old global pending.Active atomic.Bool, so TUI, web, Telegram, and Discord
#  confirm flows run side by side without blocking each other."


async def test_terminal_web_telegram_and_discord_confirm_flows_run_side_by_side(
    runtime: Runtime,
) -> None:
    results: dict[str, Outcome] = {}
    done = {s: trio.Event() for s in ("cli-1", "chat-1", "tg-1", "dc-1")}

    async def run(session: str) -> None:
        ended = await runtime.executor.run(
            session, f"write {session}.txt x", owner=session, emit=Recorder()
        )
        results[session] = ended.outcome
        done[session].set()

    sessions = ["cli-1", "chat-1", "tg-1", "dc-1"]
    listeners = {p: runtime.registry.listen(p) for p in ("cli-", "chat-", "tg-", "dc-")}
    async with trio.open_nursery() as nursery:
        for session in sessions:
            nursery.start_soon(run, session)
        # Every front-end holds its confirmation at the same moment; none waits on another.
        claimed = {p: await listener.claim() for p, listener in listeners.items()}
        assert {p: e.context.session_id for p, e in claimed.items()} == {
            "cli-": "cli-1",
            "chat-": "chat-1",
            "tg-": "tg-1",
            "dc-": "dc-1",
        }
        # Answer in reverse order, and leave Telegram unanswered: the others still finish.
        for prefix in ("dc-", "chat-", "cli-"):
            claimed[prefix].answer("allow")
        for session in ("dc-1", "chat-1", "cli-1"):
            await done[session].wait()
        assert results == {s: Outcome.FINISHED for s in ("dc-1", "chat-1", "cli-1")}
        assert not done["tg-1"].is_set()
        claimed["tg-"].answer("deny")
    assert results["tg-1"] is Outcome.FINISHED
    for listener in listeners.values():
        listener.close()


def test_two_registries_in_one_process_share_nothing() -> None:
    one, two = Registry(), Registry()
    one.listen("chat-")
    one.post(Request.question("q"), ctx("chat-1"))
    assert two.statistics() == type(two.statistics())(0, 0, 0)
    assert not two.has_listener("chat-")


# "Since v1.0.23 ask_user splits by origin. From a TUI run (origin cli-) the question goes
#  through Ask as an inline request and the same run continues with the answer."


async def test_ask_user_from_a_terminal_run_is_inline_and_the_same_run_continues(
    runtime: Runtime,
) -> None:
    recorder = Recorder()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(answer_all, runtime, "cli-", "Ada", [])
        ended = await runtime.executor.run("cli-a", "ask Your name?", owner="t", emit=recorder)
        nursery.cancel_scope.cancel()
    assert ended.outcome is Outcome.FINISHED
    assert ended.text == "Done.\nYou answered: Ada"
    assert len({e.task_hash for e in recorder.events}) == 1  # one run, one task hash
    assert await runtime.store.load("cli-a") is None


# "From any other origin the round's other tool results are committed, a pending snapshot is
#  written (...), the run ends, and the answer resumes it as a new turn."


@pytest.mark.parametrize("session", ["chat-1", "tg-1", "dc-1"])
async def test_ask_user_from_another_origin_commits_the_round_saves_a_snapshot_and_ends(
    runtime: Runtime, workdir: Path, session: str
) -> None:
    (workdir / "notes.txt").write_text("remember this")
    recorder = Recorder()
    ended = await runtime.executor.run(
        session, "read notes.txt; ask Which color?; big 10", owner="t", emit=recorder
    )
    assert ended.outcome is Outcome.AWAITING_ANSWER
    assert ended.question == "Which color?" and ended.pending_kept
    record = await runtime.store.load(session)
    assert record is not None and record.status is TaskStatus.AWAITING_ANSWER
    committed = {m.name: m.content for m in record.transcript if m.role is Role.TOOL}
    assert committed == {"read_file": "remember this", "big": "0123456789"}
    assert [c.name for c in record.unanswered_calls()] == ["ask_user"]

    resumed = Recorder()
    again = await runtime.executor.resume(session, answer="teal", owner="t", emit=resumed)
    assert again.outcome is Outcome.FINISHED
    assert again.task_hash != ended.task_hash  # a new turn
    assert "You answered: teal" in (again.text or "")
    assert [e.name for e in resumed.of(ToolCallEvent)] == []  # nothing re-ran
    assert await runtime.store.load(session) is None


async def test_snapshot_clamps_tool_results_to_32k_and_argument_strings_to_4k(
    runtime: Runtime,
) -> None:
    long_text = "é" * 5000  # 10,000 bytes of UTF-8
    await runtime.executor.run(
        "chat-big", f"big 100000; write long.txt {long_text}; ask ok?", owner="t", emit=Recorder()
    )
    record = await runtime.store.load("chat-big")
    assert record is not None
    result = next(m.content for m in record.transcript if m.name == "big")
    assert len(result.encode()) <= TOOL_RESULT_LIMIT
    match = MARKER_RE.search(result)
    assert match is not None
    assert int(match.group(1)) == 100000 - (len(result.encode()) - len(match.group(0)))
    call = next(c for c in record.unanswered_calls() if c.name == "write_file")
    content = call.arguments["content"]
    assert len(content.encode()) <= ARGUMENT_LIMIT and MARKER_RE.search(content)
    content.encode("utf-8")  # never splits a character


async def test_resume_prompt_tells_the_model_to_rerun_a_call_whose_elided_part_matters(
    runtime: Runtime,
) -> None:
    seen: list[list[Message]] = []

    class Spy:
        name = "spy"

        async def complete(self, messages, tools, on_delta):  # type: ignore[no-untyped-def]
            seen.append(list(messages))
            assistant_turns = sum(1 for m in messages if m.role is Role.ASSISTANT)
            if assistant_turns == 0:
                return ModelResponse(
                    "",
                    (
                        ToolCall("c1", "big", {"size": 50000}),
                        ToolCall("c2", "ask_user", {"question": "go?"}),
                    ),
                )
            return ModelResponse("done")

    runtime.executor.model = Spy()
    await runtime.executor.run("chat-e", "anything", owner="t", emit=Recorder())
    await runtime.executor.resume("chat-e", answer="yes", owner="t", emit=Recorder())
    resumed_messages = seen[-1]
    # No stop came between (the run parked on its question): the note says only what is true.
    assert resumed_messages[-1] == Message.note(
        "agentrt: This task was resumed from its saved form. Some saved values were shortened: "
        "a '...[N bytes elided]...' marker shows where N bytes were removed. If an elided part "
        "matters, run that call again."
    )
    # The run's system prompt comes first; nothing of the conversation is a system message.
    assert resumed_messages[0].role is Role.SYSTEM
    assert not any(m.role is Role.SYSTEM for m in resumed_messages[1:])
    big = next(m for m in resumed_messages if m.name == "big")
    assert MARKER_RE.search(big.content)


# Secrets: the model sees only the name; the value is stored 0600 outside the transcript.


async def test_store_secret_keeps_the_value_out_of_transcript_and_events(
    runtime: Runtime,
) -> None:
    recorder = Recorder()
    canary = "canary-6f1e2d"
    async with trio.open_nursery() as nursery:
        nursery.start_soon(answer_all, runtime, "cli-", Answer("", secret=canary), [])
        ended = await runtime.executor.run("cli-s", "secret api_key", owner="t", emit=recorder)
        nursery.cancel_scope.cancel()
    del ended
    assert runtime.secrets.get("api_key") == canary
    path = runtime.state_dir / "secrets" / "api_key"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700
    assert canary not in repr(recorder.events)
    assert canary.encode() not in (runtime.state_dir / "tasks.db").read_bytes()
    assert "stored secret 'api_key'" in recorder.text()


@pytest.mark.parametrize("session", ["tg-5", "dc-5"])
async def test_secrets_never_travel_through_a_chat_service(runtime: Runtime, session: str) -> None:
    recorder = Recorder()
    with runtime.registry.listen(""):
        ended = await runtime.executor.run(session, "secret key", owner="t", emit=recorder)
    assert ended.outcome is Outcome.FINISHED
    result = recorder.of(ToolResultEvent)[0]
    assert "must not travel through a chat service" in result.preview
    assert runtime.registry.statistics().waiting == 0


async def test_streamed_text_arrives_as_text_events(runtime: Runtime) -> None:
    recorder = Recorder()
    await runtime.executor.run("cli-t", "stream 5", owner="t", emit=recorder)
    assert len(recorder.of(TextEvent)) >= 5
    assert recorder.text().startswith("word1 word2 word3 word4 word5")


async def test_streamed_tool_call_pieces_arrive_as_events_before_the_call_runs(
    runtime: Runtime,
) -> None:
    from agentrt import ToolCallDeltaEvent
    from agentrt.models.messages import ToolCallDelta

    class Streaming:
        name = "streaming"

        async def complete(self, messages, tools, on_delta):  # type: ignore[no-untyped-def]
            if any(m.role is Role.TOOL for m in messages):
                return ModelResponse("ok")
            await on_delta(ToolCallDelta(0, "c1", "big", ""))
            await on_delta(ToolCallDelta(0, None, None, '{"si'))
            await on_delta(ToolCallDelta(0, None, None, 'ze": 3}'))
            return ModelResponse("", (ToolCall("c1", "big", {"size": 3}),))

    runtime.executor.model = Streaming()
    recorder = Recorder()
    await runtime.executor.run("cli-d", "go", owner="t", emit=recorder)
    deltas = recorder.of(ToolCallDeltaEvent)
    assert [(d.name, d.arguments) for d in deltas] == [
        ("big", ""),
        (None, '{"si'),
        (None, 'ze": 3}'),
    ]
    kinds = [type(e).__name__ for e in recorder.events]
    assert kinds.index("ToolCallDeltaEvent") < kinds.index("ToolCallEvent")


# An answer's sender hears that the run goes on with it: `on_resumed`.


async def test_on_resumed_is_called_once_the_producer_has_the_answer_not_before() -> None:
    registry = Registry()
    order: list[str] = []

    async def producer() -> None:
        answer = await registry.ask(
            Request(RequestKind.QUESTION, "Colour?"), context=ctx("cli-1", "w")
        )
        order.append(f"producer resumed with {answer.value}")

    async with trio.open_nursery() as nursery:
        with registry.listen("cli-") as listener:
            nursery.start_soon(producer)
            entry = await listener.claim()
            entry.answer("blue", on_resumed=lambda: order.append("acknowledged"))
            # Delivered, but the producer has not run yet: nothing acknowledged.
            assert order == []
            await trio.testing.wait_all_tasks_blocked()
    assert order == ["acknowledged", "producer resumed with blue"]


async def test_on_resumed_is_never_called_for_a_producer_that_stopped() -> None:
    registry = Registry()
    called: list[str] = []
    async with trio.open_nursery() as nursery:
        with registry.listen("cli-") as listener:

            async def producer() -> None:
                await registry.ask(
                    Request(RequestKind.QUESTION, "Colour?"), context=ctx("cli-1", "w")
                )

            nursery.start_soon(producer)
            entry = await listener.claim()
            nursery.cancel_scope.cancel()
            await trio.testing.wait_all_tasks_blocked()
            with pytest.raises(EntryGoneError):
                entry.answer("blue", on_resumed=lambda: called.append("acknowledged"))
    assert called == []


# A front-end learns that a question it forwarded is over: `add_done_callback`.


async def test_done_callbacks_run_once_in_the_turn_that_settles_the_entry(
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry = Registry()
    seen: list[tuple[str, EntryState]] = []

    def note(entry: Entry) -> None:
        seen.append((entry.id, entry.state))

    def broken(entry: Entry) -> None:
        raise RuntimeError("a front-end's bug")

    with registry.listen("cli-") as listener:
        async with trio.open_nursery() as nursery:
            ask = partial(registry.ask, context=ctx("cli-1", "w"))
            for _ in range(2):
                nursery.start_soon(ask, Request(RequestKind.QUESTION, "Colour?"))
            answered = await listener.claim()
            withdrawn = await listener.claim()
            for entry in (answered, withdrawn):
                entry.add_done_callback(broken)
                entry.add_done_callback(note)
            answered.answer("blue")  # a failing callback does not fail the answer
            assert seen == [(answered.id, EntryState.ANSWERED)]  # before any checkpoint
            nursery.cancel_scope.cancel()  # the second producer stops: its entry is withdrawn
    assert seen == [(answered.id, EntryState.ANSWERED), (withdrawn.id, EntryState.WITHDRAWN)]
    assert caplog.text.count("a callback of question") == 2
    # Added to an entry that is over already: called at once.
    answered.add_done_callback(note)
    assert seen[-1] == (answered.id, EntryState.ANSWERED) and len(seen) == 3

"""The Discord front-end against a REST API and a Gateway on loopback."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import trio

from agentrt import Runtime
from agentrt.agent.preview import resume_preview
from agentrt.bots import ConfigError
from agentrt.bots import RetryPolicy
from agentrt.frontends.chats.discord import DEFAULT_INTENTS
from agentrt.frontends.chats.discord import DiscordBot
from agentrt.frontends.chats.discord import DiscordConfig
from agentrt.present.preview import preview_lines
from agentrt.vocab.questions import clock_time

from .conftest import started
from .fakes.discord_server import TOKEN
from .fakes.discord_server import FakeDiscord

OWNER = "1001"
STRANGER = "6666"
CHANNEL = "5000"
#: The session the owner's channel runs in.
SESSION = f"dc-{CHANNEL}"
LIMIT = 10


@pytest.fixture
async def server(nursery: trio.Nursery) -> FakeDiscord:
    return await started(nursery, FakeDiscord(heartbeat_ms=100))


def make_bot(runtime: Runtime, server: FakeDiscord, gateway: bool = True) -> DiscordBot:
    config = DiscordConfig(
        TOKEN,
        frozenset({OWNER}),
        server.api_url,
        server.gateway_url if gateway else None,
        edit_interval=0.01,
        retry=RetryPolicy(max_attempts=6, base_delay=0.01, max_delay=0.05),
        invalid_session_delay=0.01,
    )
    return DiscordBot(config, runtime.executor)


@pytest.fixture
async def bot(runtime: Runtime, server: FakeDiscord, nursery: trio.Nursery) -> DiscordBot:
    return await started(nursery, make_bot(runtime, server))


def last(server: FakeDiscord, channel: str = CHANNEL) -> str:
    contents = server.contents(channel)
    return contents[-1] if contents else ""


async def echoed(server: FakeDiscord, text: str) -> None:
    """The owner says `text` in the channel; wait until the scripted model's echo is posted."""
    server.user_says(CHANNEL, OWNER, text)
    await server.wait_for(lambda: last(server) == text)


def confirmations(server: FakeDiscord, channel: str = CHANNEL) -> list[str]:
    return [
        mid
        for mid, m in server.messages.items()
        if m["channel_id"] == channel and "Allow this?" in m["content"]
    ]


def custom_id(server: FakeDiscord, message_id: str, label: str) -> str:
    for button in server.buttons(message_id):
        if button["label"] == label:
            return str(button["custom_id"])
    raise AssertionError(f"no button {label!r} in {server.buttons(message_id)}")


def callback_types(server: FakeDiscord) -> list[int]:
    return [c.body["type"] for c in server.calls_of("callback")]


async def test_identifies_with_intents_and_heartbeats_with_the_last_sequence(
    server: FakeDiscord, bot: DiscordBot
) -> None:
    with trio.fail_after(LIMIT):
        identify = server.ops(2)[0]["d"]
        assert identify["token"] == TOKEN
        assert identify["intents"] == DEFAULT_INTENTS
        await server.wait_for(lambda: len(server.ops(1)) >= 2)
    assert server.ops(1)[-1]["d"] == 1  # READY was sequence 1
    assert bot.session_id == server.session_id


async def test_gateway_url_is_asked_from_rest_when_not_configured(
    runtime: Runtime, server: FakeDiscord, nursery: trio.Nursery
) -> None:
    bot = make_bot(runtime, server, gateway=False)
    with trio.fail_after(LIMIT):
        await nursery.start(bot.run)
    assert [c.kind for c in server.calls][:1] == ["gateway"]
    assert len(server.ops(2)) == 1


async def test_confirmation_is_posted_with_buttons_and_a_press_answers_it(
    runtime: Runtime, server: FakeDiscord, bot: DiscordBot, tmp_path: Path
) -> None:
    with trio.fail_after(LIMIT):
        server.user_says(CHANNEL, OWNER, "write out.txt hello")
        [message_id] = await server.wait_for(lambda: confirmations(server))
        row = server.messages[message_id]["components"][0]
        assert row["type"] == 1
        assert [(b["type"], b["label"]) for b in row["components"]] == [
            (2, "Allow once"),
            (2, "Allow for this session"),
            (2, "Deny"),
        ]
        server.press(OWNER, message_id, custom_id(server, message_id, "Allow once"))
        await server.wait_for(lambda: "Done." in last(server))
        await bot.bridge.wait_idle()
    assert (tmp_path / "work" / "out.txt").read_text() == "hello"
    assert callback_types(server) == [6]
    assert server.messages[message_id]["components"] == []
    assert "Allowed once" in server.messages[message_id]["content"]
    assert await runtime.store.load(SESSION) is None


async def test_unknown_user_is_refused_and_reaches_nothing(
    runtime: Runtime, server: FakeDiscord, bot: DiscordBot, tmp_path: Path
) -> None:
    with trio.fail_after(LIMIT):
        server.user_says("7000", STRANGER, "write x.txt pwned")
        await server.wait_for(lambda: server.contents("7000"))
        assert "Sorry" in server.contents("7000")[0]
        assert await runtime.store.load("dc-7000") is None

        server.user_says(CHANNEL, OWNER, "write out.txt hello")
        [message_id] = await server.wait_for(lambda: confirmations(server))
        server.press(STRANGER, message_id, custom_id(server, message_id, "Allow once"))
        await server.wait_for(lambda: server.calls_of("callback"))
        refusal = server.calls_of("callback")[0].body
        assert refusal["type"] == 4
        assert refusal["data"]["flags"] == 64
        assert "Sorry" in refusal["data"]["content"]
        assert not (tmp_path / "work" / "out.txt").exists()
        assert server.buttons(message_id)  # still waiting for its owner

        server.press(OWNER, message_id, custom_id(server, message_id, "Deny"))
        await server.wait_for(lambda: "Done." in last(server))
    assert not (tmp_path / "work" / "out.txt").exists()


async def test_dropped_gateway_resumes_with_the_last_sequence_and_no_question_is_lost_or_answered_twice(
    runtime: Runtime, server: FakeDiscord, bot: DiscordBot, tmp_path: Path
) -> None:
    with trio.fail_after(LIMIT):
        said = server.user_says(CHANNEL, OWNER, "write out.txt once")
        [message_id] = await server.wait_for(lambda: confirmations(server))
        await server.drop()

        # Pressed while the bot is away, and delivered twice: Discord replays after RESUME.
        allow = custom_id(server, message_id, "Allow once")
        press = server.press_data(OWNER, message_id, allow)
        server.dispatch("INTERACTION_CREATE", press)
        server.dispatch("INTERACTION_CREATE", press)
        second = server.press(OWNER, message_id, custom_id(server, message_id, "Deny"))

        await server.wait_for(lambda: server.ops(6))
        await server.wait_for(lambda: "Done." in last(server))
        await server.wait_for(lambda: len(server.calls_of("callback")) == 2)
        await bot.bridge.wait_idle()

    resume = server.ops(6)[0]["d"]
    assert resume == {"token": TOKEN, "session_id": bot.session_id, "seq": said["s"]}
    assert len(server.ops(2)) == 1  # resumed, not identified again
    assert confirmations(server) == [message_id]  # the question was asked once
    assert (tmp_path / "work" / "out.txt").read_text() == "once"
    # The replayed copy of the press is dropped; the later Deny is told politely.
    assert callback_types(server) == [6, 4]
    question = allow.split(":")[0]
    settled = runtime.registry.settled(question)
    assert settled is not None
    assert server.calls_of("callback")[1].body["data"]["content"] == (
        f"Question {question} was answered already at {clock_time(settled.trace.at)}."
    )
    assert server.calls_of("callback")[1].path.endswith(
        f"/{second['d']['id']}/{second['d']['token']}/callback"
    )


async def test_reconnect_opcode_makes_the_bot_resume(
    runtime: Runtime, server: FakeDiscord, bot: DiscordBot
) -> None:
    with trio.fail_after(LIMIT):
        await server.send_reconnect()
        await echoed(server, "after reconnect")
    assert len(server.ops(6)) == 1
    assert len(server.ops(2)) == 1
    assert server.connections == 2


async def test_a_payload_with_an_integer_of_5000_digits_makes_the_bot_resume(
    runtime: Runtime,
    server: FakeDiscord,
    bot: DiscordBot,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="agentrt.bots")
    with trio.fail_after(LIMIT):
        await server.send_raw('{"op": 0, "t": "MESSAGE_CREATE", "s": ' + "9" * 5000 + ', "d": {}}')
        await server.wait_for(lambda: len(server.ops(6)) == 1)
        await echoed(server, "after the bad payload")
    assert server.connections == 2
    said = [r.getMessage() for r in caplog.records if r.name.startswith("agentrt.bots")]
    assert any("an integer of 5000 digits" in m for m in said), said


async def test_invalid_session_makes_the_bot_identify_afresh(
    runtime: Runtime, server: FakeDiscord, bot: DiscordBot
) -> None:
    old_session = bot.session_id
    server.invalidate_next_resume = True
    with trio.fail_after(LIMIT):
        await server.drop()
        await server.wait_for(lambda: len(server.ops(2)) == 2)
        await echoed(server, "fresh start")
    assert len(server.ops(6)) == 1
    assert bot.session_id == server.session_id != old_session


async def test_stop_command_throws_the_running_task_away(
    runtime: Runtime, server: FakeDiscord, bot: DiscordBot
) -> None:
    with trio.fail_after(LIMIT):
        server.user_says(CHANNEL, OWNER, "working; sleep 60")
        await server.wait_for(lambda: last(server) == "working")
        assert runtime.executor.is_running(SESSION)
        server.user_says(CHANNEL, OWNER, "/stop")
        await server.wait_for(lambda: "thrown away" in last(server))
        await bot.bridge.wait_idle()
    assert await runtime.store.load(SESSION) is None


def test_config_from_env_reads_token_and_allow_list() -> None:
    env: dict[str, Any] = {"AGENTRT_DISCORD_TOKEN": "t0k", "AGENTRT_DISCORD_ALLOW": "1,2"}
    config = DiscordConfig.from_env(env)
    assert config.allow == frozenset({"1", "2"})
    assert "t0k" not in repr(config)
    with pytest.raises(ConfigError, match="AGENTRT_DISCORD_TOKEN"):
        DiscordConfig.from_env({})


# --------------------------------------------------------------------------- slash commands


def answer_of(server: FakeDiscord, interaction: dict[str, Any]) -> str:
    return server.responses.get(interaction["d"]["token"], "")


async def test_slash_commands_are_registered_at_start(server: FakeDiscord, bot: DiscordBot) -> None:
    [put] = server.calls_of("commands")
    assert put.path == "/api/v10/applications/900/commands"
    assert put.status == 200
    assert sorted(c["name"] for c in server.commands) == ["pause", "pending", "stop"]
    assert all(c["type"] == 1 and c["description"] for c in server.commands)


async def test_slash_pause_pending_and_stop_are_acknowledged_first_then_answered(
    runtime: Runtime, server: FakeDiscord, bot: DiscordBot
) -> None:
    with trio.fail_after(LIMIT):
        server.user_says(CHANNEL, OWNER, "sleep 60")
        await server.wait_for(lambda: runtime.executor.is_running(SESSION))

        pause = server.slash(OWNER, CHANNEL, "pause")
        await server.wait_for(lambda: answer_of(server, pause))
        assert answer_of(server, pause) == "⏸ Pausing the task."
        await server.wait_for(lambda: "Paused" in last(server))
        await bot.bridge.wait_idle()
        record = await runtime.store.load(SESSION)
        assert record is not None

        pending = server.slash(OWNER, CHANNEL, "pending")
        await server.wait_for(lambda: answer_of(server, pending))
        # What the resume will do comes first, in the words of every front-end.
        preview = preview_lines(resume_preview(record))
        assert answer_of(server, pending) == "\n".join(["Resuming: sleep 60", *preview])
        await server.wait_for(lambda: runtime.executor.is_running(SESSION))

        stop = server.slash(OWNER, CHANNEL, "stop")
        await server.wait_for(lambda: "thrown away" in last(server))
        await bot.bridge.wait_idle()
    assert await runtime.store.load(SESSION) is None
    assert answer_of(server, stop) == "⏹ Stopping the task."
    # Each was acknowledged with "thinking..." (type 5) before its answer was put there.
    assert callback_types(server) == [5, 5, 5]
    for callback, original in zip(
        server.calls_of("callback"), server.calls_of("original"), strict=True
    ):
        assert callback.status == 204
        assert callback.at <= original.at


async def test_an_interaction_is_acknowledged_while_a_message_is_still_being_handled(
    runtime: Runtime, server: FakeDiscord, bot: DiscordBot
) -> None:
    release = server.hold("create")
    with trio.fail_after(LIMIT):
        # The bot is busy answering this message: its reply waits on Discord.
        server.user_says(CHANNEL, OWNER, "/help")
        await server.wait_for(lambda: server.waiting.get("create"))
        command = server.slash(OWNER, CHANNEL, "pending")
        await server.wait_for(lambda: server.calls_of("callback"))
        [ack] = server.calls_of("callback")
        assert ack.status == 204  # within Discord's 3 seconds, not after the message
        assert server.waiting["create"] == 1
        await server.wait_for(lambda: answer_of(server, command))
        release.set()
        await server.wait_for(lambda: any("/stop" in c for c in server.contents(CHANNEL)))
    assert answer_of(server, command) == "No pending task in this chat."


async def test_a_slash_command_from_a_stranger_gets_a_private_refusal(
    runtime: Runtime, server: FakeDiscord, bot: DiscordBot
) -> None:
    with trio.fail_after(LIMIT):
        server.slash(STRANGER, CHANNEL, "stop")
        await server.wait_for(lambda: server.calls_of("callback"))
    [refusal] = server.calls_of("callback")
    assert refusal.body["type"] == 4
    assert refusal.body["data"]["flags"] == 64
    assert "Sorry" in refusal.body["data"]["content"]
    assert server.calls_of("original") == []


async def test_typing_is_posted_while_a_run_works(
    runtime: Runtime, server: FakeDiscord, bot: DiscordBot
) -> None:
    with trio.fail_after(LIMIT):
        server.user_says(CHANNEL, OWNER, "sleep 0.2")
        await server.wait_for(lambda: "Done." in last(server))
    [first, *_] = server.calls_of("typing")
    assert first.path == f"/api/v10/channels/{CHANNEL}/typing"
    assert first.status == 204
    assert first.at <= server.calls_of("create")[-1].at

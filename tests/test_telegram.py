"""The Telegram front-end against a Bot API server on loopback."""

from __future__ import annotations

import os
import subprocess
import sys
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio

from agentrt import RequestKind, Runtime, ScriptedModel
from agentrt.bots import ConfigError, RetryPolicy, TelegramBot, TelegramConfig, run_bots

from .fakes.telegram_server import TOKEN, FakeTelegram

OWNER = 42
CHAT = 42
STRANGER = 666
LIMIT = 10


@pytest.fixture
async def server(nursery: trio.Nursery) -> FakeTelegram:
    fake = FakeTelegram()
    await nursery.start(fake.run)
    return fake


def make_bot(runtime: Runtime, server: FakeTelegram, edit_interval: float = 0.01) -> TelegramBot:
    config = TelegramConfig(
        TOKEN,
        frozenset({str(OWNER)}),
        server.base_url,
        poll_timeout=5,
        edit_interval=edit_interval,
        retry=RetryPolicy(max_attempts=6, base_delay=0.01, max_delay=0.05),
    )
    return TelegramBot(config, runtime.executor)


async def handled(server: FakeTelegram, update: dict[str, Any]) -> None:
    """Wait until the bot has handled `update` (it polls again past it)."""
    await server.wait_for(lambda: any(o > update["update_id"] for o in server.polls))


@pytest.fixture
async def bot(runtime: Runtime, server: FakeTelegram, nursery: trio.Nursery) -> TelegramBot:
    started = make_bot(runtime, server)
    await nursery.start(started.run)
    return started


def last_text(server: FakeTelegram, chat: int = CHAT) -> str:
    texts = server.texts(chat)
    return texts[-1] if texts else ""


def confirmation(server: FakeTelegram, chat: int = CHAT) -> int | None:
    """The id of the latest message in `chat` that carries an inline keyboard."""
    for message_id in sorted(server.messages, reverse=True):
        held = server.messages[message_id]
        if held["chat_id"] == chat and held.get("reply_markup"):
            return message_id
    return None


def data_of(server: FakeTelegram, message_id: int, label: str) -> str:
    for button in server.buttons(message_id):
        if button["text"] == label:
            return str(button["callback_data"])
    raise AssertionError(f"no button {label!r} in {server.buttons(message_id)}")


async def test_confirmation_is_sent_with_an_inline_keyboard_and_a_press_answers_it(
    runtime: Runtime, server: FakeTelegram, bot: TelegramBot, tmp_path: Path
) -> None:
    with trio.fail_after(LIMIT):
        server.user_says(CHAT, OWNER, "write out.txt hello")
        message_id = await server.wait_for(lambda: confirmation(server))
        labels = [b["text"] for b in server.buttons(message_id)]
        assert labels == ["Allow once", "Allow for this session", "Deny"]
        assert "out.txt" in server.messages[message_id]["text"]

        server.press(OWNER, message_id, data_of(server, message_id, "Allow once"))
        await server.wait_for(lambda: "Done." in last_text(server))
        await bot.bridge.wait_idle()

    assert (tmp_path / "work" / "out.txt").read_text() == "hello"
    answers = server.calls_of("answerCallbackQuery")
    assert [c.payload["text"] for c in answers] == ["Allowed once"]
    # The question's message keeps its text, loses its buttons and says what was chosen.
    assert server.messages[message_id]["reply_markup"] is None
    assert "Allowed once" in server.messages[message_id]["text"]
    assert await runtime.store.load(f"tg-{CHAT}") is None


async def test_deny_button_denies_the_tool_call(
    runtime: Runtime, server: FakeTelegram, bot: TelegramBot, tmp_path: Path
) -> None:
    with trio.fail_after(LIMIT):
        server.user_says(CHAT, OWNER, "write out.txt hello")
        message_id = await server.wait_for(lambda: confirmation(server))
        server.press(OWNER, message_id, data_of(server, message_id, "Deny"))
        await server.wait_for(lambda: "denied by the user" in last_text(server))
    assert not (tmp_path / "work" / "out.txt").exists()


async def test_a_second_press_of_the_same_button_is_answered_politely_and_changes_nothing(
    runtime: Runtime, server: FakeTelegram, bot: TelegramBot, tmp_path: Path
) -> None:
    with trio.fail_after(LIMIT):
        server.user_says(CHAT, OWNER, "write out.txt hello")
        message_id = await server.wait_for(lambda: confirmation(server))
        allow = data_of(server, message_id, "Allow once")
        deny = data_of(server, message_id, "Deny")
        server.press(OWNER, message_id, allow)
        server.press(OWNER, message_id, deny)
        await server.wait_for(lambda: len(server.calls_of("answerCallbackQuery")) == 2)
        await server.wait_for(lambda: "Done." in last_text(server))
    replies = [c.payload["text"] for c in server.calls_of("answerCallbackQuery")]
    assert replies == [
        "Allowed once",
        "This question was already answered or is no longer waiting.",
    ]
    assert (tmp_path / "work" / "out.txt").read_text() == "hello"


async def test_a_repeated_update_is_handled_once(
    runtime: Runtime, server: FakeTelegram, bot: TelegramBot, tmp_path: Path
) -> None:
    with trio.fail_after(LIMIT):
        server.user_says(CHAT, OWNER, "write out.txt hello")
        message_id = await server.wait_for(lambda: confirmation(server))
        press = server.press(OWNER, message_id, data_of(server, message_id, "Allow once"))
        server.push(press)  # the same update id again, as after a lost acknowledgement
        await server.wait_for(lambda: "Done." in last_text(server))
        await handled(server, press)
    assert len(server.calls_of("answerCallbackQuery")) == 1


async def test_parked_question_is_answered_by_the_next_message_and_resumes_as_a_new_turn(
    runtime: Runtime, server: FakeTelegram, bot: TelegramBot
) -> None:
    session = f"tg-{CHAT}"
    with trio.fail_after(LIMIT):
        server.user_says(CHAT, OWNER, "ask what colour?")
        await server.wait_for(lambda: "what colour?" in last_text(server))
        await bot.bridge.wait_idle()
        record = await runtime.store.load(session)
        assert record is not None
        assert record.question is not None
        assert record.question.kind is RequestKind.QUESTION
        assert not runtime.executor.is_running(session)  # the run ended, parked

        server.user_says(CHAT, OWNER, "blue")
        await server.wait_for(lambda: "You answered: blue" in last_text(server))
        await bot.bridge.wait_idle()
    assert await runtime.store.load(session) is None
    history = await runtime.store.load_history(session)
    assert any(m.content == "blue" for m in history)


async def test_unknown_user_is_refused_and_reaches_nothing(
    runtime: Runtime, server: FakeTelegram, bot: TelegramBot, tmp_path: Path
) -> None:
    session = f"tg-{CHAT}"
    with trio.fail_after(LIMIT):
        # A stranger's message starts nothing.
        server.user_says(STRANGER, STRANGER, "write x.txt pwned")
        await server.wait_for(lambda: server.texts(STRANGER))
        assert "Sorry" in server.texts(STRANGER)[0]
        assert str(STRANGER) in server.texts(STRANGER)[0]
        assert await runtime.store.load(f"tg-{STRANGER}") is None

        # A stranger in the owner's group chat cannot press the owner's buttons ...
        server.user_says(CHAT, OWNER, "write out.txt hello")
        message_id = await server.wait_for(lambda: confirmation(server))
        server.press(STRANGER, message_id, data_of(server, message_id, "Allow once"))
        await server.wait_for(lambda: server.calls_of("answerCallbackQuery"))
        assert "Sorry" in server.calls_of("answerCallbackQuery")[0].payload["text"]
        assert runtime.executor.is_running(session)
        assert not (tmp_path / "work" / "out.txt").exists()
        server.press(OWNER, message_id, data_of(server, message_id, "Deny"))
        await server.wait_for(lambda: "Done." in last_text(server))
        await bot.bridge.wait_idle()

        # ... nor answer the owner's parked question.
        server.user_says(CHAT, OWNER, "ask the password of the vault?")
        await server.wait_for(lambda: "vault" in last_text(server))
        await bot.bridge.wait_idle()
        server.user_says(CHAT, STRANGER, "hunter2")
        await server.wait_for(lambda: "Sorry" in last_text(server))
    record = await runtime.store.load(session)
    assert record is not None
    assert record.question is not None
    assert not any("hunter2" in m.content for m in record.transcript)
    assert runtime.executor.running() == []


async def test_secret_request_is_refused_and_the_refusal_is_shown(
    runtime: Runtime, server: FakeTelegram, bot: TelegramBot
) -> None:
    with trio.fail_after(LIMIT):
        server.user_says(CHAT, OWNER, "secret API_KEY")
        await server.wait_for(
            lambda: any("must not travel through a chat service" in t for t in server.texts(CHAT))
        )
        await server.wait_for(lambda: "Done." in last_text(server))
    shown = [t for t in server.texts(CHAT) if "must not travel" in t]
    assert shown[0].startswith("⚠️ store_secret: error: refused: secret 'API_KEY'")
    assert runtime.secrets.get("API_KEY") is None


async def test_restricted_path_password_is_refused_and_the_refusal_is_shown(
    runtime: Runtime, server: FakeTelegram, bot: TelegramBot, tmp_path: Path
) -> None:
    target = tmp_path / "restricted" / "conf"
    with trio.fail_after(LIMIT):
        server.user_says(CHAT, OWNER, f"write {target} x")
        await server.wait_for(lambda: "Done." in last_text(server))
    assert any("never travels through a chat service" in t for t in server.texts(CHAT))
    assert confirmation(server) is None


async def test_rate_limited_send_is_retried_after_retry_after(
    runtime: Runtime, server: FakeTelegram, bot: TelegramBot
) -> None:
    server.fail_next(
        "sendMessage",
        429,
        {
            "ok": False,
            "error_code": 429,
            "description": "Too Many Requests: retry after 0.05",
            "parameters": {"retry_after": 0.05},
        },
    )
    with trio.fail_after(LIMIT):
        server.user_says(CHAT, OWNER, "hello there")
        await server.wait_for(lambda: last_text(server) == "hello there")
    sends = server.calls_of("sendMessage")
    assert [c.status for c in sends] == [429, 200]
    assert sends[1].at - sends[0].at >= 0.05
    assert server.texts(CHAT) == ["hello there"]


async def test_server_errors_on_get_updates_are_retried(
    runtime: Runtime, server: FakeTelegram, nursery: trio.Nursery
) -> None:
    for _ in range(3):
        server.fail_next(
            "getUpdates", 502, {"ok": False, "error_code": 502, "description": "Bad Gateway"}
        )
    bot = make_bot(runtime, server)
    await nursery.start(bot.run)
    with trio.fail_after(LIMIT):
        server.user_says(CHAT, OWNER, "still here")
        await server.wait_for(lambda: last_text(server) == "still here")
    assert [c.status for c in server.calls_of("getUpdates")][:4] == [502, 502, 502, 200]


async def test_a_reply_with_an_integer_of_5000_digits_is_retried_and_the_bot_goes_on(
    runtime: Runtime,
    server: FakeTelegram,
    nursery: trio.Nursery,
    caplog: pytest.LogCaptureFixture,
) -> None:
    huge = b'{"ok": true, "result": [{"update_id": ' + b"9" * 5000 + b"}]}"
    server.fail_next("getUpdates", 200, huge)
    bot = make_bot(runtime, server)
    await nursery.start(bot.run)
    with trio.fail_after(LIMIT):
        server.user_says(CHAT, OWNER, "still here")
        await server.wait_for(lambda: last_text(server) == "still here")
    assert [c.status for c in server.calls_of("getUpdates")][:2] == [200, 200]
    warned = [r for r in caplog.records if "getUpdates" in r.getMessage()]
    assert warned, "the unreadable reply was not logged"
    assert "an integer of 5000 digits" in warned[0].getMessage()
    assert all(r.exc_info is None for r in warned), "a traceback for an expected failure"


async def test_streamed_text_is_sent_once_then_edited_as_it_grows(
    runtime: Runtime, server: FakeTelegram, nursery: trio.Nursery
) -> None:
    runtime.executor.model = ScriptedModel(word_delay=0, stream_delay=0.005)
    bot = make_bot(runtime, server, edit_interval=0.05)
    await nursery.start(bot.run)
    with trio.fail_after(LIMIT):
        server.user_says(CHAT, OWNER, "stream 40")
        expected = " ".join(f"word{i + 1}" for i in range(40))
        await server.wait_for(lambda: last_text(server) == expected)
    assert len([c for c in server.calls_of("sendMessage") if c.payload["chat_id"] == CHAT]) == 1
    edits = server.calls_of("editMessageText")
    # Edited as the text grew, but throttled: far fewer edits than words.
    assert 1 <= len(edits) < 40


async def test_pause_keeps_the_task_and_pending_resumes_it(
    runtime: Runtime, server: FakeTelegram, bot: TelegramBot
) -> None:
    session = f"tg-{CHAT}"
    with trio.fail_after(LIMIT):
        await handled(server, server.user_says(CHAT, OWNER, "sleep 60"))
        assert runtime.executor.is_running(session)
        server.user_says(CHAT, OWNER, "/pause")
        await server.wait_for(lambda: "Paused" in last_text(server))
        await bot.bridge.wait_idle()
        record = await runtime.store.load(session)
        assert record is not None

        pending = server.user_says(CHAT, OWNER, "/pending")
        await server.wait_for(lambda: "Resuming: sleep 60" in last_text(server))
        await handled(server, pending)
        assert runtime.executor.is_running(session)
        server.user_says(CHAT, OWNER, "/stop")
        await server.wait_for(lambda: "thrown away" in last_text(server))
    assert await runtime.store.load(session) is None


async def test_stop_throws_a_paused_task_away(
    runtime: Runtime, server: FakeTelegram, bot: TelegramBot
) -> None:
    session = f"tg-{CHAT}"
    with trio.fail_after(LIMIT):
        server.user_says(CHAT, OWNER, "ask favourite number?")
        await server.wait_for(lambda: "favourite number?" in last_text(server))
        await bot.bridge.wait_idle()
        server.user_says(CHAT, OWNER, "/stop")
        await server.wait_for(lambda: "thrown away" in last_text(server))
    assert await runtime.store.load(session) is None


async def test_bad_token_fails_start_with_a_config_error(
    runtime: Runtime, server: FakeTelegram
) -> None:
    bot = TelegramBot(
        TelegramConfig("999:wrong", frozenset({str(OWNER)}), server.base_url), runtime.executor
    )
    with trio.fail_after(LIMIT), pytest.raises(ConfigError, match="AGENTRT_TELEGRAM_TOKEN"):
        await bot.run()


def test_config_from_env_reads_token_allow_list_and_base_url() -> None:
    config = TelegramConfig.from_env(
        {
            "AGENTRT_TELEGRAM_TOKEN": "1:abc",
            "AGENTRT_TELEGRAM_ALLOW": "42, 43 44",
            "AGENTRT_TELEGRAM_API": "http://127.0.0.1:8081",
        }
    )
    assert config.allow == frozenset({"42", "43", "44"})
    assert config.base_url == "http://127.0.0.1:8081"
    assert "1:abc" not in repr(config)
    with pytest.raises(ConfigError, match="AGENTRT_TELEGRAM_TOKEN"):
        TelegramConfig.from_env({})


async def test_run_bots_reports_a_missing_token_as_a_config_error(runtime: Runtime) -> None:
    with trio.fail_after(LIMIT), pytest.raises(ConfigError, match="AGENTRT_TELEGRAM_TOKEN"):
        await run_bots(runtime.executor, telegram=True, environ={})


async def test_daemon_telegram_flag_runs_the_bot_in_the_daemon(
    server: FakeTelegram, nursery: trio.Nursery, tmp_path: Path
) -> None:
    env = {
        **os.environ,
        "AGENTRT_TELEGRAM_TOKEN": TOKEN,
        "AGENTRT_TELEGRAM_ALLOW": str(OWNER),
        "AGENTRT_TELEGRAM_API": server.base_url,
    }
    command = [
        sys.executable,
        "-m",
        "agentrt.daemon",
        "--socket",
        str(tmp_path / "run" / "daemon.sock"),
        "--state-dir",
        str(tmp_path / "daemon-state"),
        "--workdir",
        str(tmp_path),
        "--telegram",
    ]
    with trio.fail_after(30):
        process = await nursery.start(
            partial(trio.run_process, command, env=env, check=False, stderr=subprocess.DEVNULL)
        )
        server.user_says(CHAT, OWNER, "hello daemon")
        await server.wait_for(lambda: "hello daemon" in last_text(server))
    process.terminate()

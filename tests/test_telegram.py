"""The Telegram front-end against a Bot API server on loopback."""

from __future__ import annotations

import os
import subprocess
import sys
from functools import partial
from pathlib import Path
from typing import Any

import hypothesis
import hypothesis.strategies
import pytest
import trio

from agentrt import Runtime
from agentrt import ScriptedModel
from agentrt.agent.preview import resume_preview
from agentrt.bots import ConfigError
from agentrt.bots import RetryPolicy
from agentrt.bots import TelegramBot
from agentrt.bots import TelegramConfig
from agentrt.bots import run_bots
from agentrt.frontends.chats.markup import telegram_html
from agentrt.present.preview import preview_lines
from agentrt.vocab.questions import clock_time

from .conftest import started
from .fakes.telegram_server import TOKEN
from .fakes.telegram_server import FakeTelegram
from .fakes.telegram_server import parse_html
from .fakes.telegram_server import utf16

OWNER = 42
CHAT = 42
STRANGER = 666
LIMIT = 10


@pytest.fixture
async def server(nursery: trio.Nursery) -> FakeTelegram:
    return await started(nursery, FakeTelegram())


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
    return await started(nursery, make_bot(runtime, server))


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


async def confirmation_for(server: FakeTelegram, text: str = "write out.txt hello") -> int:
    """The owner says `text`; the id of the confirmation the bot then shows."""
    server.user_says(CHAT, OWNER, text)
    message_id: int = await server.wait_for(lambda: confirmation(server))
    return message_id


def data_of(server: FakeTelegram, message_id: int, label: str) -> str:
    for button in server.buttons(message_id):
        if button["text"] == label:
            return str(button["callback_data"])
    raise AssertionError(f"no button {label!r} in {server.buttons(message_id)}")


async def test_confirmation_is_sent_with_an_inline_keyboard_and_a_press_answers_it(
    runtime: Runtime, server: FakeTelegram, bot: TelegramBot, tmp_path: Path
) -> None:
    with trio.fail_after(LIMIT):
        message_id = await confirmation_for(server)
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
        message_id = await confirmation_for(server)
        server.press(OWNER, message_id, data_of(server, message_id, "Deny"))
        await server.wait_for(lambda: "denied by the user" in last_text(server))
    assert not (tmp_path / "work" / "out.txt").exists()


async def test_a_second_press_of_the_same_button_is_answered_politely_and_changes_nothing(
    runtime: Runtime, server: FakeTelegram, bot: TelegramBot, tmp_path: Path
) -> None:
    with trio.fail_after(LIMIT):
        message_id = await confirmation_for(server)
        allow = data_of(server, message_id, "Allow once")
        deny = data_of(server, message_id, "Deny")
        server.press(OWNER, message_id, allow)
        server.press(OWNER, message_id, deny)
        await server.wait_for(lambda: len(server.calls_of("answerCallbackQuery")) == 2)
        await server.wait_for(lambda: "Done." in last_text(server))
    replies = [c.payload["text"] for c in server.calls_of("answerCallbackQuery")]
    # The button carries its question's id; the second press is told when it was answered.
    question = allow.split(":")[0]
    settled = runtime.registry.settled(question)
    assert settled is not None
    assert replies == [
        "Allowed once",
        f"Question {question} was answered already at {clock_time(settled.trace.at)}.",
    ]
    assert (tmp_path / "work" / "out.txt").read_text() == "hello"


def keyboards(server: FakeTelegram, chat: int = CHAT) -> list[int]:
    """The ids of the messages in `chat` that carry an inline keyboard now, oldest first."""
    return sorted(
        m
        for m, held in server.messages.items()
        if held["chat_id"] == chat and held.get("reply_markup")
    )


async def test_an_old_button_resumes_the_question_a_paused_task_waits_for_and_a_stale_one_is_refused(
    runtime: Runtime, server: FakeTelegram, bot: TelegramBot, tmp_path: Path
) -> None:
    session = f"tg-{CHAT}"
    with trio.fail_after(LIMIT):
        server.user_says(CHAT, OWNER, "write a.txt 1; write b.txt 2")
        shown = await server.wait_for(lambda: len(keyboards(server)) == 2 and keyboards(server))
        allow_a, allow_b = (data_of(server, m, "Allow once") for m in shown)
        first_a, first_b = (data.split(":")[0] for data in (allow_a, allow_b))
        server.user_says(CHAT, OWNER, "/pause")
        await server.wait_for(lambda: "Paused" in last_text(server))
        await bot.bridge.wait_idle()
        record = await runtime.store.load(session)
        assert record is not None and record.question is not None
        assert record.question.id == first_a  # the task waits for a's confirmation

        # a's button, pressed after the pause, still answers a: the task resumes with it.
        server.press(OWNER, shown[0], allow_a)
        again = await server.wait_for(
            lambda: [m for m in keyboards(server) if m > shown[1]] or None
        )
        [asked] = again
        second_b = data_of(server, asked, "Allow once").split(":")[0]
        assert second_b not in (first_a, first_b)  # b's question was never saved: a new one
        # Pressed again, a's button is told a was answered; b's old one that it was withdrawn.
        server.press(OWNER, shown[0], allow_a)
        server.press(OWNER, shown[1], allow_b)
        await server.wait_for(lambda: len(server.calls_of("answerCallbackQuery")) == 3)
        server.press(OWNER, asked, data_of(server, asked, "Allow once"))
        await server.wait_for(lambda: "Done." in last_text(server))
        await bot.bridge.wait_idle()
    settled = runtime.registry.settled(first_a)
    assert settled is not None
    assert [c.payload["text"] for c in server.calls_of("answerCallbackQuery")] == [
        "Allowed once",
        f"Question {first_a} was answered already at {clock_time(settled.trace.at)}.",
        f"Question {first_b} was withdrawn: its run was paused.",
        "Allowed once",
    ]
    assert (tmp_path / "work" / "a.txt").read_text() == "1"
    assert (tmp_path / "work" / "b.txt").read_text() == "2"
    assert await runtime.store.load(session) is None


async def test_a_repeated_update_is_handled_once(
    runtime: Runtime, server: FakeTelegram, bot: TelegramBot, tmp_path: Path
) -> None:
    with trio.fail_after(LIMIT):
        message_id = await confirmation_for(server)
        press = server.press(OWNER, message_id, data_of(server, message_id, "Allow once"))
        server.push(press)  # the same update id again, as after a lost acknowledgement
        await server.wait_for(lambda: "Done." in last_text(server))
        await handled(server, press)
    assert len(server.calls_of("answerCallbackQuery")) == 1


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
        message_id = await confirmation_for(server)
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


async def test_restricted_path_password_is_refused_and_the_refusal_is_shown(
    runtime: Runtime, server: FakeTelegram, bot: TelegramBot, tmp_path: Path
) -> None:
    target = tmp_path / "restricted" / "conf"
    with trio.fail_after(LIMIT):
        server.user_says(CHAT, OWNER, f"write {target} x")
        await server.wait_for(lambda: "Done." in last_text(server))
    assert any("never travels through a chat service" in t for t in server.texts(CHAT))
    assert confirmation(server) is None


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
        said = "\n".join(["Resuming: sleep 60", *preview_lines(resume_preview(record))])
        await server.wait_for(lambda: said in last_text(server))
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


# --------------------------------------------------------------------------- formatting


async def test_a_reply_is_sent_as_html_and_telegram_shows_its_markdown_formatted(
    runtime: Runtime, server: FakeTelegram, bot: TelegramBot
) -> None:
    with trio.fail_after(LIMIT):
        server.user_says(CHAT, OWNER, "**Bold** and `x < y` & <b>not a tag</b>")
        await server.wait_for(lambda: last_text(server) == "Bold and x < y & <b>not a tag</b>")
        await bot.bridge.wait_idle()
    [message] = [m for m in server.messages.values() if m["chat_id"] == CHAT]
    assert message["entities"] == [
        {"type": "bold", "offset": 0, "length": 4},
        {"type": "code", "offset": 9, "length": 5},
    ]
    # Every markup character that is not markup went escaped: Telegram refused nothing.
    assert "&lt;b&gt;not a tag&lt;/b&gt;" in message["sent"]
    sent = server.calls_of("sendMessage") + server.calls_of("editMessageText")
    assert {c.payload.get("parse_mode") for c in sent} == {"HTML"}
    assert [c.said for c in sent if c.status != 200 and "not modified" not in c.said] == []


async def test_the_bots_own_words_go_as_plain_text_exactly_as_written(
    runtime: Runtime, server: FakeTelegram, bot: TelegramBot
) -> None:
    with trio.fail_after(LIMIT):
        message_id = await confirmation_for(server, "sh echo *a* [b](c)")
        held = server.messages[message_id]
        assert "run: echo *a* [b](c)" in held["text"]  # not formatted: this is what will run
        assert held["entities"] == []
        [call] = [c for c in server.calls_of("sendMessage") if c.payload.get("reply_markup")]
        assert "parse_mode" not in call.payload
        server.press(OWNER, message_id, data_of(server, message_id, "Deny"))
        await server.wait_for(lambda: "denied by the user" in last_text(server))
        await bot.bridge.wait_idle()  # the denied run ends before the next message
        # A write's question carries its diff as a code block; the words before it stay plain.
        edited = await confirmation_for(server, "write a*b*_c_.txt hello")
        assert edited != message_id
    held = server.messages[edited]
    assert "a*b*_c_.txt" in held["text"]
    [pre] = held["entities"]
    assert (pre["type"], pre["language"]) == ("pre", "diff")
    assert held["text"].index("a*b*_c_.txt") < pre["offset"]


async def test_a_reply_whose_markup_telegram_refuses_is_sent_again_as_plain_text(
    runtime: Runtime, server: FakeTelegram, bot: TelegramBot
) -> None:
    server.fail_next(
        "sendMessage",
        400,
        {
            "ok": False,
            "error_code": 400,
            "description": "Bad Request: can't parse entities: Unsupported start tag",
        },
    )
    with trio.fail_after(LIMIT):
        server.user_says(CHAT, OWNER, "**plain** after all")
        await server.wait_for(lambda: "after all" in last_text(server))
    sends = server.calls_of("sendMessage")
    assert [(c.status, c.payload.get("parse_mode")) for c in sends[:2]] == [
        (400, "HTML"),
        (200, None),
    ]


async def test_a_long_reply_is_split_counting_utf16_units_so_emoji_count_double(
    runtime: Runtime, server: FakeTelegram, bot: TelegramBot
) -> None:
    emoji = "😀" * 3000  # 3000 characters, 6000 UTF-16 code units
    with trio.fail_after(LIMIT):
        server.user_says(CHAT, OWNER, emoji)
        await server.wait_for(lambda: "".join(server.texts(CHAT)) == emoji)
        await bot.bridge.wait_idle()
    texts = server.texts(CHAT)
    assert len(texts) == 2
    assert all(utf16(t) <= 4096 for t in texts)
    refused = [c.said for c in server.calls if c.status == 400 and "not modified" not in c.said]
    assert refused == []


# --------------------------------------------------------------------------- typing, webhook


async def test_typing_is_shown_while_a_run_works(
    runtime: Runtime, server: FakeTelegram, bot: TelegramBot
) -> None:
    with trio.fail_after(LIMIT):
        server.user_says(CHAT, OWNER, "sleep 0.2")
        await server.wait_for(lambda: "Done." in last_text(server))
    [first, *_] = server.calls_of("sendChatAction")
    assert first.payload == {"chat_id": CHAT, "action": "typing"}
    assert first.status == 200
    reply = server.calls_of("sendMessage")[-1]
    assert first.at <= reply.at


def webhook_of(server: FakeTelegram) -> str | None:
    """Read through a call, so that the type checker does not narrow it across steps."""
    return server.webhook


async def test_a_webhook_that_blocks_polling_is_deleted_and_polling_goes_on(
    runtime: Runtime, server: FakeTelegram, nursery: trio.Nursery, caplog: pytest.LogCaptureFixture
) -> None:
    server.webhook = "https://example.org/telegram-hook"
    bot = make_bot(runtime, server)
    await nursery.start(bot.run)
    with trio.fail_after(LIMIT):
        server.user_says(CHAT, OWNER, "still here")
        await server.wait_for(lambda: last_text(server) == "still here")
    assert webhook_of(server) is None
    [deleted] = server.calls_of("deleteWebhook")
    assert deleted.payload == {"drop_pending_updates": False}  # the queued updates stay
    assert [c.status for c in server.calls_of("getUpdates")][:2] == [409, 200]
    assert "webhook" in caplog.text


async def test_another_poller_is_not_a_reason_to_delete_a_webhook(
    runtime: Runtime, server: FakeTelegram, nursery: trio.Nursery
) -> None:
    server.fail_next(
        "getUpdates",
        409,
        {
            "ok": False,
            "error_code": 409,
            "description": "Conflict: terminated by other getUpdates request; make sure that"
            " only one bot instance is running",
        },
    )
    bot = make_bot(runtime, server)
    await nursery.start(bot.run)
    with trio.fail_after(LIMIT):
        server.user_says(CHAT, OWNER, "still here")
        await server.wait_for(lambda: last_text(server) == "still here")
    assert server.calls_of("deleteWebhook") == []


# --------------------------------------------------------------------------- Markdown as HTML


def test_markdown_becomes_telegrams_html() -> None:
    source = (
        "# Deploy\n\nRun **now**, *carefully*, with `make deploy` & ~~not~~ <b>.\n\n"
        "- first\n- second\n  1. nested\n\n"
        '```python\nif a < b:\n    pass\n```\n\n> quoted\n\n[the docs](https://x.org/?a=1&b="2")'
    )
    text, entities = parse_html(telegram_html(source))
    assert text == (
        "Deploy\n\nRun now, carefully, with make deploy & not <b>.\n\n"
        "• first\n• second\n  1. nested\n\n"
        "if a < b:\n    pass\n\nquoted\n\nthe docs"
    )
    kinds = [(e["type"], text[e["offset"] : e["offset"] + e["length"]]) for e in entities]
    assert kinds == [
        ("bold", "Deploy"),
        ("bold", "now"),
        ("italic", "carefully"),
        ("code", "make deploy"),
        ("strikethrough", "not"),
        ("pre", "if a < b:\n    pass"),
        ("blockquote", "quoted"),
        ("text_link", "the docs"),
    ]
    assert entities[5]["language"] == "python"
    assert entities[-1]["url"] == "https://x.org/?a=1&b=%222%22"


@hypothesis.given(
    hypothesis.strategies.text(
        alphabet=hypothesis.strategies.sampled_from(list("ab *_`~#>-+1.[]()<>&\"'\n😀|!\\")),
        max_size=200,
    )
)
def test_any_reply_becomes_markup_telegram_accepts_and_shows_no_longer(source: str) -> None:
    markup = telegram_html(source)
    if not markup.strip():
        return
    text, _ = parse_html(markup)  # raises as Telegram refuses: unescaped or unbalanced markup
    # Cutting the Markdown to the limit is enough: what Telegram counts is never longer.
    assert utf16(text) <= utf16(source)


@pytest.mark.parametrize(
    ("source", "shown"),
    [
        ("1\n- 1", "1\n• 1"),  # a list right under a paragraph: no blank line is added
        ("# Plan\nsteps", "Plan\nsteps"),
        ("first\n\n- a\n- b\n\nlast", "first\n\n• a\n• b\n\nlast"),
    ],
)
def test_blocks_are_apart_by_a_blank_line_only_where_the_markdown_had_one(
    source: str, shown: str
) -> None:
    text, _ = parse_html(telegram_html(source))
    assert text == shown
    assert utf16(text) <= utf16(source)

"""What the Discord and the Telegram front-ends do alike, each against its own fake service on
loopback: each test runs once for each service, a `Service` giving what differs (the fake, the
ids, how a message is read back, how a rate limit is said)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from agentrt import RequestKind
from agentrt import Runtime
from agentrt.bots import ConfigError
from agentrt.bots import DiscordBot
from agentrt.bots import TelegramBot
from agentrt.bots import TelegramConfig
from agentrt.frontends.chats.conversation import diff_block
from agentrt.frontends.chats.conversation import markdown_escape
from agentrt.frontends.chats.discord import DiscordConfig

from .conftest import started
from .fakes.discord_server import FakeDiscord
from .fakes.telegram_server import FakeTelegram
from .test_discord import CHANNEL
from .test_discord import OWNER as DISCORD_OWNER
from .test_discord import custom_id
from .test_discord import make_bot as make_discord_bot
from .test_telegram import CHAT
from .test_telegram import OWNER as TELEGRAM_OWNER
from .test_telegram import data_of
from .test_telegram import make_bot as make_telegram_bot

LIMIT = 10

Fake = FakeDiscord | FakeTelegram
Bot = DiscordBot | TelegramBot


@attrs.frozen
class Service:
    """One chat service: its fake, how a bot is made on it, and where the owner talks."""

    name: str
    fake: Callable[[], Fake]
    bot: Callable[[Runtime, Any], Bot]
    #: A bot whose token the service refuses, and the variable the error names.
    bad_token_bot: Callable[[Runtime, Any], Bot]
    token_variable: str
    #: The owner's chat, the owner, and the session the chat's runs go to.
    chat: Any
    owner: Any
    session: str
    #: Everything the bot has posted in a chat; the text of one message the fake holds; and
    #: what pressing the button of a label on a message sends.
    texts: Callable[[Any, Any], list[str]]
    message_text: Callable[[dict[str, Any]], str]
    button: Callable[[Any, Any, str], str]
    #: Makes the next message the bot posts get a 429 that asks to wait 0.05 s; the fake's name
    #: of that call; and the wait that must not be reached (a header asking for more loses).
    rate_limit_next: Callable[[Any], None]
    post_call: str
    waits_less_than: float | None


def _discord_rate_limit(fake: FakeDiscord) -> None:
    fake.fail_next(
        "create",
        429,
        {"message": "You are being rate limited.", "retry_after": 0.05, "global": False},
        {"retry-after": "1", "x-ratelimit-scope": "user"},
    )


def _telegram_rate_limit(fake: FakeTelegram) -> None:
    fake.fail_next(
        "sendMessage",
        429,
        {
            "ok": False,
            "error_code": 429,
            "description": "Too Many Requests: retry after 0.05",
            "parameters": {"retry_after": 0.05},
        },
    )


DISCORD = Service(
    name="discord",
    fake=lambda: FakeDiscord(heartbeat_ms=100),
    bot=make_discord_bot,
    bad_token_bot=lambda runtime, fake: DiscordBot(
        DiscordConfig("wrong", frozenset({DISCORD_OWNER}), fake.api_url), runtime.executor
    ),
    token_variable="AGENTRT_DISCORD_TOKEN",
    chat=CHANNEL,
    owner=DISCORD_OWNER,
    session=f"dc-{CHANNEL}",
    texts=lambda fake, chat: fake.contents(chat),
    message_text=lambda message: str(message["content"]),
    button=custom_id,
    rate_limit_next=_discord_rate_limit,
    post_call="create",
    # The body's precise retry_after wins over the header's whole seconds.
    waits_less_than=1.0,
)

TELEGRAM = Service(
    name="telegram",
    fake=FakeTelegram,
    bot=make_telegram_bot,
    bad_token_bot=lambda runtime, fake: TelegramBot(
        TelegramConfig("999:wrong", frozenset({str(TELEGRAM_OWNER)}), fake.base_url),
        runtime.executor,
    ),
    token_variable="AGENTRT_TELEGRAM_TOKEN",
    chat=CHAT,
    owner=TELEGRAM_OWNER,
    session=f"tg-{CHAT}",
    texts=lambda fake, chat: fake.texts(chat),
    message_text=lambda message: str(message["text"]),
    button=data_of,
    rate_limit_next=_telegram_rate_limit,
    post_call="sendMessage",
    waits_less_than=None,
)


@attrs.frozen
class Chat:
    """A service's fake running, and the owner's chat on it."""

    service: Service
    fake: Any

    def says(self, text: str) -> None:
        self.fake.user_says(self.service.chat, self.service.owner, text)

    def texts(self) -> list[str]:
        return self.service.texts(self.fake, self.service.chat)

    def last(self) -> str:
        texts = self.texts()
        return texts[-1] if texts else ""

    async def wait_for(self, predicate: Callable[[], object]) -> None:
        await self.fake.wait_for(predicate)

    def press(self, message_id: Any, label: str) -> None:
        """The owner presses the button `label` on the message `message_id`."""
        data = self.service.button(self.fake, message_id, label)
        self.fake.press(self.service.owner, message_id, data)


@pytest.fixture(params=[DISCORD, TELEGRAM], ids=lambda service: service.name)
async def chat(request: pytest.FixtureRequest, nursery: trio.Nursery) -> Chat:
    service: Service = request.param
    return Chat(service, await started(nursery, service.fake()))


@pytest.fixture
async def bot(runtime: Runtime, chat: Chat, nursery: trio.Nursery) -> Bot:
    return await started(nursery, chat.service.bot(runtime, chat.fake))


async def test_parked_question_is_answered_by_the_next_message_and_resumes_as_a_new_turn(
    runtime: Runtime, chat: Chat, bot: Bot
) -> None:
    session = chat.service.session
    with trio.fail_after(LIMIT):
        chat.says("ask which branch?")
        await chat.wait_for(lambda: "which branch?" in chat.last())
        await bot.bridge.wait_idle()
        record = await runtime.store.load(session)
        assert record is not None
        assert record.question is not None
        assert record.question.kind is RequestKind.QUESTION
        assert not runtime.executor.is_running(session)  # the run ended, parked

        chat.says("main")
        await chat.wait_for(lambda: "You answered: main" in chat.last())
        await bot.bridge.wait_idle()
    assert await runtime.store.load(session) is None
    history = await runtime.store.load_history(session)
    assert any(m.content == "main" for m in history)


async def test_secret_request_is_refused_and_the_refusal_is_shown(
    runtime: Runtime, chat: Chat, bot: Bot
) -> None:
    with trio.fail_after(LIMIT):
        chat.says("secret API_KEY")
        await chat.wait_for(
            lambda: any("must not travel through a chat service" in t for t in chat.texts())
        )
        await chat.wait_for(lambda: "Done." in chat.last())
    shown = [t for t in chat.texts() if "must not travel through a chat service" in t]
    assert shown[0].startswith("⚠️ store_secret: error: refused: secret 'API_KEY'")
    assert runtime.secrets.get("API_KEY") is None


async def test_an_edit_confirmation_shows_its_diff_in_a_code_block(
    runtime: Runtime, chat: Chat, bot: Bot, workdir: Path
) -> None:
    target = workdir / "a.txt"
    target.write_text("one\ntwo\n")
    diff = "--- a/a.txt\n+++ b/a.txt\n@@ -1,2 +1,2 @@\n one\n-two\n+2"
    fake = chat.fake
    with trio.fail_after(LIMIT):
        chat.says("edit a.txt two 2")
        await chat.wait_for(lambda: any("Allow this?" in t for t in chat.texts()))
        [message_id] = [k for k, m in fake.messages.items() if "Allow this?" in str(m)]
        message = fake.messages[message_id]
        if chat.service is TELEGRAM:
            # Sent as HTML: a pre block of language diff, shown as the diff's plain lines.
            [pre] = [e for e in message["entities"] if e["type"] == "pre"]
            assert pre["language"] == "diff"
            units = message["text"].encode("utf-16-le")
            shown = units[2 * pre["offset"] : 2 * (pre["offset"] + pre["length"])]
            assert shown.decode("utf-16-le") == diff
            assert f"edit {target} (1 replacement)" in message["text"]
        else:
            # Discord shows Markdown itself: the prompt escaped, the diff fenced as diff.
            assert message["content"] == (
                f"🔐 Allow this?\n{markdown_escape(f'edit {target} (1 replacement)')}\n"
                f"```diff\n{diff}\n```"
            )
        chat.press(message_id, "Allow once")
        await chat.wait_for(lambda: "Done." in chat.last())
    assert target.read_text() == "one\n2\n"


def test_a_long_diff_is_cut_to_fit_one_message() -> None:
    diff = "\n".join(f"+line {n}" for n in range(1000))
    block = diff_block(diff, 1900)
    assert len(block) <= 1900 + 100
    body = block.split("\n")
    assert body[0] == "```diff" and body[-1] == "```"
    assert body[-2] == (
        f"... {1000 - (len(body) - 3)} more lines (the terminal or the web page shows them all)"
    )
    # A diff holding a fence is fenced with a longer one.
    assert diff_block("+```", 100) == "````diff\n+```\n````"


async def test_rate_limited_post_is_retried_after_retry_after(
    runtime: Runtime, chat: Chat, bot: Bot
) -> None:
    chat.service.rate_limit_next(chat.fake)
    with trio.fail_after(LIMIT):
        chat.says("hello there")
        await chat.wait_for(lambda: chat.last() == "hello there")
    posts = chat.fake.calls_of(chat.service.post_call)
    assert [c.status for c in posts] == [429, 200]
    waited = posts[1].at - posts[0].at
    assert waited >= 0.05
    if chat.service.waits_less_than is not None:
        assert waited < chat.service.waits_less_than
    assert chat.texts() == ["hello there"]


async def test_bad_token_fails_start_with_a_config_error(runtime: Runtime, chat: Chat) -> None:
    bot = chat.service.bad_token_bot(runtime, chat.fake)
    with (
        trio.fail_after(LIMIT),
        pytest.raises(ConfigError, match=chat.service.token_variable),
    ):
        await bot.run()

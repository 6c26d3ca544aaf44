"""The Telegram front-end: the Bot API over HTTP with httpx, origin ``tg-``.

The bot long-polls ``getUpdates`` (acknowledging each batch through
``offset``), answers text messages and ``callback_query`` presses through
`ChatBridge`, streams a run's text by ``editMessageText``, and shows tool
confirmations with an inline keyboard whose presses are acknowledged with
``answerCallbackQuery``. The model's replies are Markdown, sent as
Telegram's HTML (``parse_mode: "HTML"``, see `agentrt.frontends.chats.markup`); the
bot's own notices and questions go as plain text, exactly as written. While a
run works, ``sendChatAction`` shows "typing" every 4 seconds (Telegram shows
it for 5). Telegram's 4096-character limit counts UTF-16 code units (an emoji
outside the BMP counts two), and long text is split accordingly. When polling
is refused because a webhook is set (409), the bot removes the webhook with
``deleteWebhook`` and polls on. The base URL is configurable: a local Bot API
server (``telegram-bot-api --local``) is a real deployment.

A chat's conversation is the session ``tg-<chat id>``. Only users on the
allow-list reach the runtime; everyone else gets a polite refusal.
"""

from __future__ import annotations

import logging
import os
from collections import OrderedDict
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

import attrs
import httpx
import trio

from ...config.retry import CHAT_RETRY
from ...config.retry import RetryPolicy
from ...config.settings import ConfigError
from ...core.executor import Executor
from ...vocab.peerjson import JsonNumberError
from ...vocab.peerjson import loads
from ...vocab.reprs import mutable
from ...vocab.reprs import record
from ...vocab.terms import TELEGRAM
from .conversation import Button
from .conversation import ChatBridge
from .conversation import DeliveryError
from .conversation import read_env
from .conversation import utf16_length
from .markup import telegram_html
from .sending import LazyTransport
from .sending import header_retry_after
from .sending import send_with_retries

log = logging.getLogger("agentrt.bots.telegram")

#: The public Bot API.
TELEGRAM_API = "https://api.telegram.org"
#: The longest text of one Telegram message, in UTF-16 code units (after parsing the markup).
MAX_TEXT = 4096
#: Seconds between two "typing" actions; Telegram shows one for 5 seconds.
TYPING_EVERY = 4.0
#: A typing indicator is sent once: a late one is worth nothing.
_ONCE = RetryPolicy(max_attempts=1)
#: Update ids remembered to drop a callback that arrives twice.
_SEEN_LIMIT = 1024


class TelegramError(DeliveryError):
    """The Bot API answered ``ok: false``; `description` is Telegram's reason."""

    def __init__(self, method: str, status: int, description: str) -> None:
        super().__init__(f"Telegram {method}: HTTP {status}: {description}")
        self.method = method
        self.status = status
        self.description = description


@record
class TelegramConfig:
    """How to reach Telegram and whom to listen to."""

    token: str = attrs.field(repr=False)
    #: Telegram user ids allowed to talk to the agent; empty lets nobody in.
    allow: frozenset[str] = frozenset()
    #: The Bot API's base URL (a local Bot API server's, for instance).
    base_url: str = TELEGRAM_API
    #: Seconds a ``getUpdates`` long poll may wait for news.
    poll_timeout: int = 30
    #: Seconds between two edits of a streamed message.
    edit_interval: float = 1.0
    retry: RetryPolicy = CHAT_RETRY

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> TelegramConfig:
        """Read ``AGENTRT_TELEGRAM_TOKEN``, ``AGENTRT_TELEGRAM_ALLOW`` and ``AGENTRT_TELEGRAM_API``.

        Raises `ConfigError` saying what to set when the token is missing.
        """
        env = os.environ if environ is None else environ
        token, allow, api = read_env(
            env,
            "Telegram",
            token_hint="the token @BotFather gave you",
            allow_hint="your numeric user id",
        )
        return cls(token, allow, api or TELEGRAM_API)


def _retry_after(response: httpx.Response) -> float | None:
    try:
        body = response.json()
        value = body["parameters"]["retry_after"]
        return float(value)
    except (ValueError, KeyError, TypeError):
        return header_retry_after(response)


@mutable(eq=False)
class TelegramApi:
    """Calls Bot API methods; the token lives only in the URL it builds here."""

    client: httpx.AsyncClient
    config: TelegramConfig

    async def call(
        self,
        method: str,
        payload: Mapping[str, Any] | None = None,
        *,
        policy: RetryPolicy | None = None,
        http_timeout: float | None = None,
    ) -> Any:
        """POST `payload` as JSON to `method`; return its ``result``.

        Raises `TelegramError` when Telegram says no, `DeliveryError` when it
        cannot be reached after the retries of `policy`.
        """
        url = f"{self.config.base_url.rstrip('/')}/bot{self.config.token}/{method}"
        body = dict(payload or {})

        async def send() -> httpx.Response:
            if http_timeout is None:
                return await self.client.post(url, json=body)
            return await self.client.post(url, json=body, timeout=http_timeout)

        response = await send_with_retries(
            send,
            what=f"Telegram {method}",
            retry_after=_retry_after,
            policy=policy or self.config.retry,
        )
        try:
            data = loads(response.content)
        except JsonNumberError as exc:
            raise DeliveryError(
                f"Telegram {method}: HTTP {response.status_code} with a body we cannot read: {exc}"
            ) from None
        except (ValueError, RecursionError):
            raise DeliveryError(
                f"Telegram {method}: HTTP {response.status_code} with a body that is not JSON"
            ) from None
        if not isinstance(data, dict) or not data.get("ok"):
            description = (
                str(data.get("description", "no description"))
                if isinstance(data, dict)
                else "malformed reply"
            )
            raise TelegramError(method, response.status_code, description)
        return data.get("result")


def _chat_id(chat: str) -> int | str:
    try:
        return int(chat)
    except ValueError:
        return chat  # a channel's @username


@mutable(eq=False)
class TelegramTransport:
    """`ChatTransport` over the Bot API."""

    api: TelegramApi
    max_text: int = MAX_TEXT
    typing_every: float = TYPING_EVERY

    def text_length(self, text: str) -> int:
        """Telegram counts UTF-16 code units."""
        return utf16_length(text)

    async def send(
        self, chat: str, text: str, buttons: Sequence[Button] = (), *, markdown: bool = False
    ) -> str:
        """``sendMessage``, with an inline keyboard (one button a row) when given buttons."""
        payload: dict[str, Any] = {"chat_id": _chat_id(chat), "text": text}
        if buttons:
            payload["reply_markup"] = {
                "inline_keyboard": [[{"text": b.label, "callback_data": b.data}] for b in buttons]
            }
        result = await self._formatted("sendMessage", payload, markdown)
        return str(result["message_id"])

    async def edit(self, chat: str, message_id: str, text: str, *, markdown: bool = False) -> None:
        """``editMessageText`` without a keyboard, which removes the buttons."""
        payload = {"chat_id": _chat_id(chat), "message_id": int(message_id), "text": text}
        try:
            await self._formatted("editMessageText", payload, markdown)
        except TelegramError as exc:
            if "not modified" not in exc.description:
                raise

    async def typing(self, chat: str) -> None:
        """``sendChatAction`` with ``typing``."""
        await self.api.call(
            "sendChatAction", {"chat_id": _chat_id(chat), "action": "typing"}, policy=_ONCE
        )

    async def _formatted(self, method: str, payload: dict[str, Any], markdown: bool) -> Any:
        """Call `method` with the text as HTML when it is Markdown, else as plain text.

        Should Telegram refuse the markup it is sent again as plain text, so a
        reply is never lost to its formatting.
        """
        html = telegram_html(payload["text"]) if markdown else ""
        if not html.strip():
            return await self.api.call(method, payload)
        try:
            return await self.api.call(method, {**payload, "text": html, "parse_mode": "HTML"})
        except TelegramError as exc:
            if "can't parse entities" not in exc.description:
                raise
            log.warning("Telegram refused a formatted reply (%s); sent as plain text", exc)
            return await self.api.call(method, payload)


@mutable(eq=False)
class TelegramBot:
    """The Telegram service: start it with ``await nursery.start(bot.run)``."""

    config: TelegramConfig
    executor: Executor
    #: The bot's own username, known once `run` has started.
    username: str | None = attrs.field(default=None, init=False)
    #: Where the next ``getUpdates`` starts; every update before it was handled.
    offset: int | None = attrs.field(default=None, init=False)
    bridge: ChatBridge = attrs.field(init=False)
    _api: TelegramApi | None = attrs.field(default=None, init=False)
    _seen: OrderedDict[int, None] = attrs.field(factory=OrderedDict, init=False)

    def __attrs_post_init__(self) -> None:
        self.bridge = ChatBridge(
            self.executor,
            LazyTransport("Telegram", self._transport, MAX_TEXT, TYPING_EVERY, utf16_length),
            TELEGRAM,
            self.config.allow,
            "Telegram",
            "AGENTRT_TELEGRAM_ALLOW",
            self.config.edit_interval,
        )

    def _transport(self) -> TelegramTransport | None:
        return None if self._api is None else TelegramTransport(self._api)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Check the token, then poll and answer until cancelled.

        Reports ready once Telegram accepted the token. Raises `ConfigError`
        when it refuses it.
        """
        timeout = httpx.Timeout(30.0, read=self.config.poll_timeout + 15.0)
        async with httpx.AsyncClient(timeout=timeout) as client:
            api = TelegramApi(client, self.config)
            self._api = api
            forever = attrs.evolve(self.config.retry, max_attempts=None)
            try:
                me = await api.call("getMe", policy=forever)
            except TelegramError as exc:
                raise ConfigError(
                    f"Telegram refused the bot token ({exc.description}); "
                    "check AGENTRT_TELEGRAM_TOKEN"
                ) from None
            self.username = str(me.get("username", "")) if isinstance(me, dict) else None
            async with trio.open_nursery() as nursery:
                await nursery.start(self.bridge.serve)
                log.info("Telegram bot @%s is listening", self.username)
                task_status.started()
                await self._poll(api, forever)

    async def _poll(self, api: TelegramApi, policy: RetryPolicy) -> None:
        failures = 0
        while True:
            payload: dict[str, Any] = {
                "timeout": self.config.poll_timeout,
                "allowed_updates": ["message", "callback_query"],
            }
            if self.offset is not None:
                payload["offset"] = self.offset
            try:
                updates = await api.call(
                    "getUpdates",
                    payload,
                    policy=policy,
                    http_timeout=self.config.poll_timeout + 15.0,
                )
            except TelegramError as exc:
                failures += 1
                if exc.status == 409 and "webhook" in exc.description.lower():
                    # Telegram delivers to a webhook or to getUpdates, never both: this
                    # bot polls, so the webhook goes (its queued updates stay).
                    # Polled again at once, unless a webhook keeps coming back.
                    if await self._delete_webhook(api) and failures == 1:
                        continue
                else:
                    # 409 otherwise: another process polls with this token.
                    log.error("Telegram getUpdates failed: %s", exc)
                await trio.sleep(policy.backoff(failures))
                continue
            except DeliveryError as exc:
                # A reply we cannot read: ask again, as after a server error, and stay up.
                failures += 1
                log.warning("%s; asking again", exc)
                await trio.sleep(policy.backoff(failures))
                continue
            failures = 0
            for update in updates if isinstance(updates, list) else []:
                await self._take(update)

    async def _delete_webhook(self, api: TelegramApi) -> bool:
        """Remove the bot's webhook so that polling works; True when it is gone."""
        log.warning("a webhook is set for this Telegram bot; deleting it to poll getUpdates")
        try:
            await api.call("deleteWebhook", {"drop_pending_updates": False})
        except DeliveryError as exc:
            log.error("Telegram deleteWebhook failed: %s", exc)
            return False
        return True

    async def _take(self, update: Any) -> None:
        if not isinstance(update, dict) or not isinstance(update.get("update_id"), int):
            log.warning("Telegram sent an update without an update_id; ignored")
            return
        update_id: int = update["update_id"]
        if self.offset is not None and update_id < self.offset:
            return
        self.offset = update_id + 1
        if update_id in self._seen:  # the same update delivered twice
            return
        self._seen[update_id] = None
        while len(self._seen) > _SEEN_LIMIT:
            self._seen.popitem(last=False)
        try:
            await self._handle(update)
        except (KeyError, TypeError, ValueError) as exc:
            log.warning("Telegram update %d is malformed (%r); ignored", update_id, exc)

    async def _handle(self, update: dict[str, Any]) -> None:
        message = update.get("message")
        if isinstance(message, dict):
            sender = message.get("from") or {}
            text = message.get("text")
            if sender.get("is_bot") or not isinstance(text, str):
                return
            chat = str(message["chat"]["id"])
            await self.bridge.on_message(chat, str(sender["id"]), text)
            return
        query = update.get("callback_query")
        if isinstance(query, dict):
            held = query.get("message") or {}
            chat = str(held.get("chat", {}).get("id", ""))
            user = str(query["from"]["id"])
            reply = await self.bridge.on_button(chat, user, str(query.get("data", "")))
            assert self._api is not None
            try:
                await self._api.call(
                    "answerCallbackQuery", {"callback_query_id": query["id"], "text": reply.text}
                )
            except DeliveryError as exc:
                log.info("Telegram callback not acknowledged: %s", exc)

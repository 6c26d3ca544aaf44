"""The Discord front-end: the Gateway over trio-websocket, REST v10 over httpx, origin ``dc-``.

Events arrive over the Gateway: HELLO (op 10) gives the heartbeat interval,
the bot IDENTIFYs (op 2) with its intents, heartbeats (op 1, acknowledged by
op 11) with the last sequence number, and receives DISPATCH (op 0) events:
READY (with the ``session_id`` and ``resume_gateway_url`` a RESUME needs),
MESSAGE_CREATE and INTERACTION_CREATE. A dropped connection, a missing
heartbeat acknowledgement or RECONNECT (op 7) makes it reconnect to the
resume URL and RESUME (op 6) with the last sequence, so Discord replays what
was missed; INVALID_SESSION (op 9) that cannot be resumed means a fresh
IDENTIFY.

Messages go out over REST: ``POST /channels/{id}/messages`` (a confirmation
carries an action row of buttons), ``PATCH`` edits for streamed text,
``POST /channels/{id}/typing`` every 8 seconds while a run works (Discord
shows it for 10), and ``POST /interactions/{id}/{token}/callback`` to answer
an interaction.

At start the bot registers its slash commands, ``/pending``, ``/stop`` and
``/pause``, with ``PUT /applications/{application id}/commands`` (a bulk
overwrite, so starting again changes nothing). An interaction must be
answered within 3 seconds, so interactions never queue behind messages: each
is handled in a task of its own and acknowledged first. A button press gets
type 6 (or type 4 with an ephemeral refusal); a slash command gets type 5
("thinking...") at once, then the command runs and its answer replaces that
with ``PATCH /webhooks/{application id}/{token}/messages/@original``.

Messages are handed from the connection to one consumer task, so a
connection that drops while a message is being handled does not cut the
handling short; message and interaction ids already handled are remembered,
so a replayed or repeated event changes nothing.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import sys
from collections import OrderedDict
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

import attrs
import httpx
import trio
from trio_websocket import ConnectionClosed
from trio_websocket import HandshakeError
from trio_websocket import WebSocketConnection
from trio_websocket import open_websocket_url

from ...config.retry import CHAT_RETRY
from ...config.retry import RetryPolicy
from ...config.settings import ConfigError
from ...core.executor import Executor
from ...vocab.peerjson import JsonNumberError
from ...vocab.peerjson import loads
from ...vocab.reprs import mutable
from ...vocab.reprs import record
from ...vocab.terms import DISCORD
from .conversation import Button
from .conversation import ChatBridge
from .conversation import DeliveryError
from .conversation import read_env
from .conversation import split_text
from .sending import LazyTransport
from .sending import header_retry_after
from .sending import send_with_retries

log = logging.getLogger("agentrt.bots.discord")

DISCORD_API = "https://discord.com/api/v10"
#: The longest text of one Discord message.
MAX_TEXT = 2000
#: Seconds between two typing indicators; Discord shows one for 10 seconds.
TYPING_EVERY = 8.0
#: A typing indicator is sent once: a late one is worth nothing.
_ONCE = RetryPolicy(max_attempts=1)

# Gateway opcodes.
OP_DISPATCH = 0
OP_HEARTBEAT = 1
OP_IDENTIFY = 2
OP_RESUME = 6
OP_RECONNECT = 7
OP_INVALID_SESSION = 9
OP_HELLO = 10
OP_HEARTBEAT_ACK = 11

# Gateway intents: guild messages, direct messages, and their content.
INTENT_GUILD_MESSAGES = 1 << 9
INTENT_DIRECT_MESSAGES = 1 << 12
INTENT_MESSAGE_CONTENT = 1 << 15
DEFAULT_INTENTS = INTENT_GUILD_MESSAGES | INTENT_DIRECT_MESSAGES | INTENT_MESSAGE_CONTENT

# Interaction types and callback types.
INTERACTION_COMMAND = 2
INTERACTION_COMPONENT = 3
CALLBACK_MESSAGE = 4
CALLBACK_DEFERRED_MESSAGE = 5
CALLBACK_DEFERRED_UPDATE = 6
EPHEMERAL = 1 << 6

#: The slash commands registered at start (type 1: CHAT_INPUT), as Discord wants them.
SLASH_COMMANDS: tuple[dict[str, Any], ...] = (
    {"name": "pending", "type": 1, "description": "Show or resume this channel's paused task"},
    {"name": "stop", "type": 1, "description": "Stop the running task and throw it away"},
    {"name": "pause", "type": 1, "description": "Stop the running task but keep it"},
)
#: What a slash command's answer says when the command itself had nothing to say.
_COMMAND_DONE = {
    "stop": "⏹ Stopping the task.",
    "pause": "⏸ Pausing the task.",
}

#: Close codes after which reconnecting cannot help; the message says what to fix.
FATAL_CLOSE_CODES: dict[int, str] = {
    4004: "Discord refused the bot token; check AGENTRT_DISCORD_TOKEN",
    4010: "invalid shard",
    4011: "the bot is in too many guilds and needs sharding",
    4012: "invalid gateway API version",
    4013: "invalid intents",
    4014: (
        "Discord refused the intents: enable the Message Content intent for the bot "
        "in the Developer Portal"
    ),
}
#: Close codes after which the session cannot be resumed: identify afresh.
FRESH_CLOSE_CODES = frozenset({4007, 4009})

_SEEN_LIMIT = 1024


class DiscordError(DeliveryError):
    """Discord refused a REST request; `status` and Discord's message say why."""

    def __init__(self, what: str, status: int, message: str) -> None:
        super().__init__(f"{what}: HTTP {status}: {message}")
        self.status = status


@record
class DiscordConfig:
    """How to reach Discord and whom to listen to."""

    token: str = attrs.field(repr=False)
    #: Discord user ids allowed to talk to the agent; empty lets nobody in.
    allow: frozenset[str] = frozenset()
    api_url: str = DISCORD_API
    #: The Gateway URL; None asks ``GET /gateway/bot``.
    gateway_url: str | None = None
    intents: int = DEFAULT_INTENTS
    edit_interval: float = 1.0
    retry: RetryPolicy = CHAT_RETRY
    #: Longest random wait before identifying again after INVALID_SESSION (Discord asks 1-5s).
    invalid_session_delay: float = 5.0
    #: Register /pending, /stop and /pause as slash commands at start.
    register_commands: bool = True

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> DiscordConfig:
        """Read ``AGENTRT_DISCORD_TOKEN``, ``AGENTRT_DISCORD_ALLOW`` and ``AGENTRT_DISCORD_API``.

        Raises `ConfigError` saying what to set when the token is missing.
        """
        env = os.environ if environ is None else environ
        token, allow, api = read_env(
            env,
            "Discord",
            token_hint="Developer Portal > your app > Bot",
            allow_hint="your user id",
        )
        api = api or DISCORD_API
        gateway = env.get("AGENTRT_DISCORD_GATEWAY", "").strip() or None
        return cls(token, allow, api, gateway)


def _retry_after(response: httpx.Response) -> float | None:
    try:
        return float(response.json()["retry_after"])
    except (ValueError, KeyError, TypeError):
        return header_retry_after(response)


@mutable(eq=False)
class DiscordRest:
    """REST v10 calls; the token travels only in the Authorization header."""

    client: httpx.AsyncClient
    config: DiscordConfig

    async def request(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
        *,
        policy: RetryPolicy | None = None,
    ) -> Any:
        """Send one request; its JSON reply (None for 204). Raises `DeliveryError`."""
        url = self.config.api_url.rstrip("/") + path
        headers = {
            "Authorization": f"Bot {self.config.token}",
            "User-Agent": "DiscordBot (https://github.com/agentrt/agentrt, 0.1)",
        }
        what = f"Discord {method} {path.split('/')[1] if '/' in path else path}"

        async def send() -> httpx.Response:
            return await self.client.request(method, url, json=body, headers=headers)

        response = await send_with_retries(
            send, what=what, retry_after=_retry_after, policy=policy or self.config.retry
        )
        if response.status_code == 204 or not response.content:
            if response.status_code >= 400:
                raise DiscordError(what, response.status_code, "no details")
            return None
        try:
            data = loads(response.content)
        except JsonNumberError as exc:
            raise DiscordError(what, response.status_code, f"reply cannot be read: {exc}") from None
        except (ValueError, RecursionError):
            raise DiscordError(what, response.status_code, "reply is not JSON") from None
        if response.status_code >= 400:
            message = data.get("message", "no details") if isinstance(data, dict) else data
            raise DiscordError(what, response.status_code, str(message))
        return data


@mutable(eq=False)
class DiscordTransport:
    """`ChatTransport` over REST v10."""

    rest: DiscordRest
    max_text: int = MAX_TEXT
    typing_every: float = TYPING_EVERY

    def text_length(self, text: str) -> int:
        """Discord counts characters."""
        return len(text)

    async def send(
        self, chat: str, text: str, buttons: Sequence[Button] = (), *, markdown: bool = False
    ) -> str:
        """``POST /channels/{chat}/messages``, with one action row of buttons when given.

        Discord shows Markdown itself, so a reply goes as it is.
        """
        body: dict[str, Any] = {"content": text, "allowed_mentions": {"parse": []}}
        if buttons:
            body["components"] = [
                {
                    "type": 1,
                    "components": [
                        {
                            "type": 2,
                            "style": 4 if b.data.endswith(":d") else 1,
                            "label": b.label,
                            "custom_id": b.data,
                        }
                        for b in buttons
                    ],
                }
            ]
        message = await self.rest.request("POST", f"/channels/{chat}/messages", body)
        return str(message["id"])

    async def edit(self, chat: str, message_id: str, text: str, *, markdown: bool = False) -> None:
        """``PATCH`` the message's content and drop its buttons."""
        await self.rest.request(
            "PATCH", f"/channels/{chat}/messages/{message_id}", {"content": text, "components": []}
        )

    async def typing(self, chat: str) -> None:
        """``POST /channels/{chat}/typing``."""
        await self.rest.request("POST", f"/channels/{chat}/typing", policy=_ONCE)


class _Reconnect(Exception):
    """The connection ended; `fresh` says whether the session is lost."""

    def __init__(self, why: str, *, fresh: bool = False) -> None:
        super().__init__(why)
        self.fresh = fresh


@mutable(eq=False)
class DiscordBot:
    """The Discord service: start it with ``await nursery.start(bot.run)``."""

    config: DiscordConfig
    executor: Executor
    bridge: ChatBridge = attrs.field(init=False)
    #: The gateway session, and the last sequence number received on it.
    session_id: str | None = attrs.field(default=None, init=False)
    resume_url: str | None = attrs.field(default=None, init=False)
    seq: int | None = attrs.field(default=None, init=False)
    #: The bot's own user id, from READY.
    user_id: str | None = attrs.field(default=None, init=False)
    #: The application's id, from READY: slash commands belong to it.
    application_id: str | None = attrs.field(default=None, init=False)
    _rest: DiscordRest | None = attrs.field(default=None, init=False)
    _seen: OrderedDict[str, None] = attrs.field(factory=OrderedDict, init=False)
    _ready: trio.Event = attrs.field(factory=trio.Event, init=False)
    #: Where interactions are handled, each in a task of its own.
    _interactions: trio.Nursery | None = attrs.field(default=None, init=False)

    def __attrs_post_init__(self) -> None:
        self.bridge = ChatBridge(
            self.executor,
            LazyTransport("Discord", self._transport, MAX_TEXT, TYPING_EVERY),
            DISCORD,
            self.config.allow,
            "Discord",
            "AGENTRT_DISCORD_ALLOW",
            self.config.edit_interval,
        )

    def _transport(self) -> DiscordTransport | None:
        return None if self._rest is None else DiscordTransport(self._rest)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Connect to the Gateway and answer until cancelled.

        Reports ready after the first READY. Raises `ConfigError` when Discord
        refuses the token or the intents.
        """
        async with httpx.AsyncClient(timeout=httpx.Timeout(30.0)) as client:
            self._rest = DiscordRest(client, self.config)
            gateway = self.config.gateway_url
            if gateway is None:
                try:
                    info = await self._rest.request("GET", "/gateway/bot")
                except DiscordError as exc:
                    if exc.status == 401:
                        raise ConfigError(FATAL_CLOSE_CODES[4004]) from None
                    raise
                gateway = str(info["url"])
            send_events, receive_events = trio.open_memory_channel[dict[str, Any]](256)
            async with trio.open_nursery() as nursery:
                await nursery.start(self.bridge.serve)
                self._interactions = nursery
                nursery.start_soon(self._consume, receive_events)
                nursery.start_soon(self._connect_forever, gateway, send_events)
                await self._ready.wait()
                if self.config.register_commands:
                    await self._register_commands()
                log.info("Discord bot %s is listening", self.user_id)
                task_status.started()

    async def _register_commands(self) -> None:
        """Make /pending, /stop and /pause slash commands of the application (bulk overwrite)."""
        assert self._rest is not None
        app = self.application_id or self.user_id
        try:
            await self._rest.request("PUT", f"/applications/{app}/commands", list(SLASH_COMMANDS))
        except DeliveryError as exc:
            # The commands still work typed as messages (/stop, !stop).
            log.warning("Discord slash commands not registered: %s", exc)

    # -- the gateway ------------------------------------------------------

    async def _connect_forever(
        self, gateway: str, events: trio.MemorySendChannel[dict[str, Any]]
    ) -> None:
        failures = 0
        while True:
            resuming = self.session_id is not None and self.seq is not None
            url = (self.resume_url if resuming and self.resume_url else gateway).rstrip("/")
            try:
                async with open_websocket_url(f"{url}/?v=10&encoding=json") as ws:
                    await self._session(ws, events, resuming)
            except _Reconnect as why:
                log.info("Discord gateway: %s; reconnecting", why)
                if why.fresh:
                    self.session_id = self.resume_url = None
                    self.seq = None
                failures = 0
                continue
            except ConnectionClosed as exc:
                code = exc.reason.code if exc.reason is not None else None
                if code in FATAL_CLOSE_CODES:
                    raise ConfigError(FATAL_CLOSE_CODES[code]) from None
                if code in FRESH_CLOSE_CODES:
                    self.session_id = self.resume_url = None
                    self.seq = None
                log.info("Discord gateway closed (%s); reconnecting", code)
            except (HandshakeError, OSError, trio.BrokenResourceError) as exc:
                log.info("Discord gateway unreachable (%s); retrying", type(exc).__name__)
            failures += 1
            await trio.sleep(self.config.retry.backoff(failures) if failures > 1 else 0)

    async def _session(
        self,
        ws: WebSocketConnection,
        events: trio.MemorySendChannel[dict[str, Any]],
        resuming: bool,
    ) -> None:
        hello = await _receive(ws)
        if hello.get("op") != OP_HELLO:
            raise _Reconnect(f"expected HELLO, got op {hello.get('op')}")
        interval = float(hello["d"]["heartbeat_interval"]) / 1000.0
        try:
            await self._converse(ws, events, resuming, interval)
        except BaseExceptionGroup as group:
            # Report why the connection ended, not the nursery's wrapping of it.
            raise _leaf(group) from None

    async def _converse(
        self,
        ws: WebSocketConnection,
        events: trio.MemorySendChannel[dict[str, Any]],
        resuming: bool,
        interval: float,
    ) -> None:
        acked = [True]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._heartbeat, ws, interval, acked)
            if resuming:
                await _send(
                    ws,
                    OP_RESUME,
                    {"token": self.config.token, "session_id": self.session_id, "seq": self.seq},
                )
            else:
                await self._identify(ws)
            while True:
                payload = await _receive(ws)
                op = payload.get("op")
                if isinstance(payload.get("s"), int):
                    self.seq = payload["s"]
                if op == OP_DISPATCH:
                    self._on_dispatch(payload, events)
                elif op == OP_HEARTBEAT:
                    await _send(ws, OP_HEARTBEAT, self.seq)
                elif op == OP_HEARTBEAT_ACK:
                    acked[0] = True
                elif op == OP_RECONNECT:
                    raise _Reconnect("Discord asked for a reconnect (op 7)")
                elif op == OP_INVALID_SESSION:
                    if payload.get("d") is True and self.session_id is not None:
                        raise _Reconnect("session invalidated, resumable (op 9)")
                    # Discord asks for a random 1-5 s wait before identifying again.
                    await trio.sleep(random.uniform(0, self.config.invalid_session_delay))
                    self.session_id = self.resume_url = None
                    self.seq = None
                    await self._identify(ws)

    async def _identify(self, ws: WebSocketConnection) -> None:
        await _send(
            ws,
            OP_IDENTIFY,
            {
                "token": self.config.token,
                "intents": self.config.intents,
                "properties": {"os": sys.platform, "browser": "agentrt", "device": "agentrt"},
            },
        )

    async def _heartbeat(self, ws: WebSocketConnection, interval: float, acked: list[bool]) -> None:
        # The first beat comes after a random part of the interval, as Discord asks.
        await trio.sleep(interval * random.random())
        while True:
            if not acked[0]:
                # No ACK for the last beat: the connection is a zombie. Close it and resume.
                await ws.aclose(code=4000, reason="heartbeat not acknowledged")
                return
            acked[0] = False
            await _send(ws, OP_HEARTBEAT, self.seq)
            await trio.sleep(interval)

    def _on_dispatch(
        self, payload: dict[str, Any], events: trio.MemorySendChannel[dict[str, Any]]
    ) -> None:
        kind = payload.get("t")
        data = payload.get("d") or {}
        if kind == "READY":
            self.session_id = str(data["session_id"])
            self.resume_url = data.get("resume_gateway_url")
            self.user_id = str((data.get("user") or {}).get("id", "")) or None
            self.application_id = str((data.get("application") or {}).get("id", "")) or None
            self._ready.set()
        elif kind == "RESUMED":
            log.info("Discord gateway session resumed")
        elif kind == "INTERACTION_CREATE" and self._interactions is not None:
            # Never behind a message being handled: Discord waits 3 seconds for the answer.
            self._interactions.start_soon(self._interaction, data)
        elif kind == "MESSAGE_CREATE":
            try:
                events.send_nowait(payload)
            except trio.WouldBlock:
                log.error("Discord: too many events waiting; dropped a %s", kind)

    # -- events -----------------------------------------------------------

    async def _consume(self, events: trio.MemoryReceiveChannel[dict[str, Any]]) -> None:
        async for payload in events:
            data = payload.get("d") or {}
            try:
                await self._on_message(data)
            except (KeyError, TypeError, ValueError) as exc:
                log.warning("Discord %s is malformed (%r); ignored", payload.get("t"), exc)

    async def _interaction(self, data: dict[str, Any]) -> None:
        try:
            await self._on_interaction(data)
        except (KeyError, TypeError, ValueError) as exc:
            log.warning("Discord INTERACTION_CREATE is malformed (%r); ignored", exc)

    def _first_time(self, key: str) -> bool:
        if key in self._seen:
            return False
        self._seen[key] = None
        while len(self._seen) > _SEEN_LIMIT:
            self._seen.popitem(last=False)
        return True

    async def _on_message(self, data: dict[str, Any]) -> None:
        author = data.get("author") or {}
        if author.get("bot") or str(author.get("id")) == self.user_id:
            return
        content = data.get("content")
        if not isinstance(content, str) or not content.strip():
            return
        if not self._first_time(f"m{data['id']}"):
            return
        await self.bridge.on_message(str(data["channel_id"]), str(author["id"]), content)

    async def _on_interaction(self, data: dict[str, Any]) -> None:
        kind = data.get("type")
        if kind not in (INTERACTION_COMPONENT, INTERACTION_COMMAND):
            return
        user = (data.get("member") or {}).get("user") or data.get("user") or {}
        path = f"/interactions/{data['id']}/{data['token']}/callback"
        if not self._first_time(f"i{data['id']}"):
            # The same interaction delivered twice: it was answered the first time.
            return
        if kind == INTERACTION_COMMAND:
            await self._on_slash_command(data, str(user.get("id")), path)
            return
        custom_id = str((data.get("data") or {}).get("custom_id", ""))
        reply = await self.bridge.on_button(str(data["channel_id"]), str(user.get("id")), custom_id)
        if reply.ok:
            callback: dict[str, Any] = {"type": CALLBACK_DEFERRED_UPDATE}
        else:
            callback = {
                "type": CALLBACK_MESSAGE,
                "data": {"content": reply.text, "flags": EPHEMERAL},
            }
        assert self._rest is not None
        try:
            await self._rest.request("POST", path, callback)
        except DeliveryError as exc:
            log.info("Discord interaction not acknowledged: %s", exc)

    async def _on_slash_command(self, data: dict[str, Any], user: str, path: str) -> None:
        """Acknowledge at once ("thinking..."), run the command, then put its answer there."""
        assert self._rest is not None
        rest = self._rest
        channel = str(data["channel_id"])
        name = str((data.get("data") or {}).get("name", "")).lower()
        if not self.bridge.is_allowed(user):
            log.info("Discord: refused a slash command from user %s", user)
            refusal = {"content": self.bridge.refusal(user), "flags": EPHEMERAL}
            with contextlib.suppress(DeliveryError):
                await rest.request("POST", path, {"type": CALLBACK_MESSAGE, "data": refusal})
            return
        try:
            await rest.request("POST", path, {"type": CALLBACK_DEFERRED_MESSAGE})
        except DeliveryError as exc:
            log.warning("Discord /%s not acknowledged: %s", name, exc)
            return
        said: list[str] = []

        async def reply(text: str) -> None:
            said.append(text)

        await self.bridge.command(channel, user, name, reply)
        answer = "\n\n".join(said) or _COMMAND_DONE.get(name, f"/{name}: done.")
        webhook = f"/webhooks/{data.get('application_id') or self.application_id}/{data['token']}"
        for n, piece in enumerate(split_text(answer, MAX_TEXT)):
            body = {"content": piece, "allowed_mentions": {"parse": []}}
            try:
                if n == 0:
                    await rest.request("PATCH", f"{webhook}/messages/@original", body)
                else:
                    await rest.request("POST", webhook, body)
            except DeliveryError as exc:
                log.warning("Discord /%s answer not shown: %s", name, exc)
                return


def _leaf(group: BaseExceptionGroup[BaseException]) -> BaseException:
    leaves: list[BaseException] = []
    for exc in group.exceptions:
        leaves.append(_leaf(exc) if isinstance(exc, BaseExceptionGroup) else exc)
    for exc in leaves:
        if not isinstance(exc, trio.Cancelled):
            return exc
    return leaves[0]


async def _receive(ws: WebSocketConnection) -> dict[str, Any]:
    message = await ws.get_message()
    try:
        payload = loads(message)
    except JsonNumberError as exc:
        raise _Reconnect(f"the gateway sent a payload we cannot read: {exc}") from None
    except (ValueError, RecursionError):
        raise _Reconnect("the gateway sent something that is not JSON") from None
    if not isinstance(payload, dict):
        raise _Reconnect("the gateway sent a payload that is not an object")
    return payload


async def _send(ws: WebSocketConnection, op: int, data: Any) -> None:
    await ws.send_message(json.dumps({"op": op, "d": data}))

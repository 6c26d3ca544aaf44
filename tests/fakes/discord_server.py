"""Discord on loopback: REST v10 (Starlette on hypercorn's Trio worker) and a Gateway
(trio-websocket's `serve_websocket`).

The Gateway speaks the real opcodes: HELLO with ``heartbeat_interval``,
HEARTBEAT answered by HEARTBEAT_ACK, IDENTIFY answered by READY (with
``session_id`` and ``resume_gateway_url``), RESUME answered by a replay of the
dispatches after the given ``seq`` and RESUMED, RECONNECT, and INVALID_SESSION.
Every dispatch carries a sequence number ``s`` and is kept in the session's
history, so events dispatched while the bot is disconnected are replayed on
RESUME, as Discord does.

REST answers ``GET /gateway/bot``, ``POST /channels/{id}/messages``,
``PATCH /channels/{id}/messages/{id}``, ``POST /channels/{id}/typing``,
``PUT /applications/{id}/commands`` (a bulk overwrite of the slash
commands, checked as Discord checks them), ``POST
/interactions/{id}/{token}/callback`` and the interaction's webhook
(``PATCH /webhooks/{application}/{token}/messages/@original``, ``POST
/webhooks/{application}/{token}`` for follow-ups). As on Discord, an
interaction not answered within 3 seconds of its dispatch is gone (404,
code 10062), a second answer is refused (400, code 40060), and its webhook
works only once it was answered. `fail_next` makes the next request of a
kind answer an error (a 429 with ``retry_after``, for one); `hold` keeps the
requests of a kind waiting until the test lets them go.
"""

from __future__ import annotations

import itertools
import json
import re
import time
from collections.abc import Callable
from typing import Any

import attrs
import trio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.responses import Response
from starlette.routing import Route
from trio_websocket import ConnectionClosed
from trio_websocket import WebSocketConnection
from trio_websocket import WebSocketRequest
from trio_websocket import serve_websocket

from .loopback import Changes
from .loopback import serve_app

TOKEN = "discord-test-token"
BOT_ID = "900"
#: Seconds Discord gives an interaction to be answered.
INTERACTION_DEADLINE = 3.0
_COMMAND_NAME = re.compile(r"^[-_\w]{1,32}$")


@attrs.frozen
class Call:
    """One REST request as the server saw it; `at` is `time.monotonic()`."""

    kind: str
    path: str
    body: Any
    at: float
    status: int


@attrs.define(eq=False)
class FakeDiscord:
    """Both servers; start with ``await nursery.start(server.run)``."""

    token: str = TOKEN
    heartbeat_ms: int = 45000
    rest_port: int = 0
    gateway_port: int = 0
    calls: list[Call] = attrs.field(factory=list)
    #: The bot's messages by id: channel, latest content and components.
    messages: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    #: Every payload the bot sent over the gateway, in order.
    received: list[dict[str, Any]] = attrs.field(factory=list)
    connections: int = 0
    #: Answer the next RESUME with INVALID_SESSION (d: false).
    invalidate_next_resume: bool = False
    session_id: str | None = None
    history: list[dict[str, Any]] = attrs.field(factory=list)
    #: The application's slash commands, as the last bulk overwrite left them.
    commands: list[dict[str, Any]] = attrs.field(factory=list)
    #: Interactions by token: when dispatched, and the callback type that answered them.
    interactions: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    #: The answer shown for each interaction (its @original message), by token.
    responses: dict[str, str] = attrs.field(factory=dict)
    #: How many requests of each kind `hold` keeps waiting now.
    waiting: dict[str, int] = attrs.field(factory=dict)
    _holds: dict[str, trio.Event] = attrs.field(factory=dict)
    _failures: dict[str, list[tuple[int, dict[str, Any], dict[str, str]]]] = attrs.field(
        factory=dict
    )
    _seq: int = 0
    _ids: itertools.count[int] = attrs.field(factory=lambda: itertools.count(1_000_000))
    _live: trio.MemorySendChannel[dict[str, Any]] | None = None
    _ws: WebSocketConnection | None = None
    _changes: Changes = attrs.field(factory=Changes)

    @property
    def api_url(self) -> str:
        """The REST base, ``http://127.0.0.1:<port>/api/v10``."""
        return f"http://127.0.0.1:{self.rest_port}/api/v10"

    @property
    def gateway_url(self) -> str:
        """``ws://127.0.0.1:<port>``."""
        return f"ws://127.0.0.1:{self.gateway_port}"

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve REST and the Gateway on ephemeral loopback ports until cancelled."""
        app = Starlette(
            routes=[
                Route("/api/v10/gateway/bot", self._gateway_bot, methods=["GET"]),
                Route("/api/v10/channels/{cid}/messages", self._create, methods=["POST"]),
                Route("/api/v10/channels/{cid}/messages/{mid}", self._edit, methods=["PATCH"]),
                Route(
                    "/api/v10/interactions/{iid}/{itoken}/callback",
                    self._callback,
                    methods=["POST"],
                ),
                Route("/api/v10/channels/{cid}/typing", self._typing, methods=["POST"]),
                Route("/api/v10/applications/{app}/commands", self._commands, methods=["PUT"]),
                Route(
                    "/api/v10/webhooks/{app}/{itoken}/messages/@original",
                    self._edit_original,
                    methods=["PATCH"],
                ),
                Route("/api/v10/webhooks/{app}/{itoken}", self._followup, methods=["POST"]),
            ]
        )
        async with trio.open_nursery() as nursery:
            self.rest_port = await serve_app(app, nursery)
            server = await nursery.start(serve_websocket, self._connection, "127.0.0.1", 0, None)
            self.gateway_port = server.port
            task_status.started()

    # -- playing Discord and its users ----------------------------------------

    def dispatch(self, kind: str, data: dict[str, Any]) -> dict[str, Any]:
        """Dispatch an event (op 0) with the next sequence number; returns the payload."""
        self._seq += 1
        payload = {"op": 0, "t": kind, "s": self._seq, "d": data}
        self.history.append(payload)
        if self._live is not None:
            self._live.send_nowait(payload)
        return payload

    def user_says(self, channel: str, user: str, content: str) -> dict[str, Any]:
        """A MESSAGE_CREATE from `user` in `channel`."""
        return self.dispatch(
            "MESSAGE_CREATE",
            {
                "id": self._snowflake(),
                "channel_id": channel,
                "author": {"id": user, "username": f"user{user}", "discriminator": "0"},
                "content": content,
                "type": 0,
                "timestamp": "2025-01-01T00:00:00+00:00",
                "mentions": [],
                "attachments": [],
                "embeds": [],
            },
        )

    def press_data(self, user: str, message_id: str, custom_id: str) -> dict[str, Any]:
        """The INTERACTION_CREATE data of a button press (not dispatched)."""
        held = self.messages[message_id]
        return {
            "id": self._snowflake(),
            "application_id": BOT_ID,
            "type": 3,
            "token": f"itoken{next(self._ids)}",
            "version": 1,
            "channel_id": held["channel_id"],
            "member": {"user": {"id": user, "username": f"user{user}"}},
            "message": {"id": message_id, "channel_id": held["channel_id"]},
            "data": {"custom_id": custom_id, "component_type": 2},
        }

    def press(self, user: str, message_id: str, custom_id: str) -> dict[str, Any]:
        """Dispatch a press of one of the buttons under `message_id`."""
        return self._interact(self.press_data(user, message_id, custom_id))

    def slash(self, user: str, channel: str, name: str) -> dict[str, Any]:
        """Dispatch a use of the registered slash command `name` in `channel`."""
        [command] = [c for c in self.commands if c["name"] == name]
        return self._interact(
            {
                "id": self._snowflake(),
                "application_id": BOT_ID,
                "type": 2,
                "token": f"itoken{next(self._ids)}",
                "version": 1,
                "channel_id": channel,
                "member": {"user": {"id": user, "username": f"user{user}"}},
                "data": {"id": command["id"], "name": name, "type": 1},
            }
        )

    def _interact(self, data: dict[str, Any]) -> dict[str, Any]:
        self.interactions[data["token"]] = {
            "id": data["id"],
            "at": time.monotonic(),
            "answered": None,
        }
        return self.dispatch("INTERACTION_CREATE", data)

    def hold(self, kind: str) -> trio.Event:
        """Keep REST requests of `kind` waiting until the returned event is set."""
        release = self._holds[kind] = trio.Event()
        return release

    async def drop(self) -> None:
        """Drop the bot's gateway connection; later dispatches wait for a RESUME."""
        ws, self._ws, self._live = self._ws, None, None
        if ws is not None:
            await ws.aclose(code=4000, reason="dropped")

    async def send_reconnect(self) -> None:
        """Send RECONNECT (op 7); later dispatches wait for a RESUME."""
        ws, self._ws, self._live = self._ws, None, None
        if ws is not None:
            await ws.send_message(json.dumps({"op": 7, "d": None}))

    async def send_raw(self, text: str) -> None:
        """Send `text` as it is on the live gateway connection (a broken payload, say)."""
        assert self._ws is not None, "the bot is not connected"
        await self._ws.send_message(text)

    def fail_next(
        self, kind: str, status: int, body: dict[str, Any], headers: dict[str, str] | None = None
    ) -> None:
        """Make the next REST request of `kind` (create, edit, callback) answer this."""
        self._failures.setdefault(kind, []).append((status, body, headers or {}))

    # -- reading what the bot did ---------------------------------------------

    def ops(self, op: int) -> list[dict[str, Any]]:
        """The payloads with this opcode the bot sent."""
        return [p for p in self.received if p.get("op") == op]

    def calls_of(self, kind: str) -> list[Call]:
        """REST requests of one kind, in order."""
        return [c for c in self.calls if c.kind == kind]

    def contents(self, channel: str) -> list[str]:
        """The latest content of every message the bot posted in `channel`."""
        return [m["content"] for m in self.messages.values() if m["channel_id"] == channel]

    def buttons(self, message_id: str) -> list[dict[str, Any]]:
        """A message's buttons, flattened from its action rows."""
        rows = self.messages[message_id].get("components") or []
        return [c for row in rows for c in row.get("components", [])]

    async def wait_for(self, predicate: Callable[[], Any]) -> Any:
        """Wait until `predicate()` is truthy (checked after every change); return its value."""
        return await self._changes.wait_for(predicate)

    def _notify(self) -> None:
        self._changes.notify()

    def _snowflake(self) -> str:
        return str(next(self._ids))

    # -- the gateway ------------------------------------------------------------

    async def _connection(self, request: WebSocketRequest) -> None:
        ws = await request.accept()
        self.connections += 1
        self._notify()
        try:
            await ws.send_message(
                json.dumps({"op": 10, "s": None, "d": {"heartbeat_interval": self.heartbeat_ms}})
            )
            first = await self._read_command(ws)
            replay: list[dict[str, Any]] = []
            if first.get("op") == 6:
                d = first["d"]
                if self.invalidate_next_resume or d.get("session_id") != self.session_id:
                    self.invalidate_next_resume = False
                    await ws.send_message(json.dumps({"op": 9, "s": None, "d": False}))
                    first = await self._read_command(ws)
                else:
                    replay = [p for p in self.history if p["s"] > int(d["seq"])]
                    self._seq += 1
                    resumed = {"op": 0, "t": "RESUMED", "s": self._seq, "d": {}}
                    self.history.append(resumed)
                    replay.append(resumed)
            if first.get("op") == 2:
                self.session_id = f"session{next(self._ids)}"
                self.history = []
                self._seq = 1
                ready = {
                    "op": 0,
                    "t": "READY",
                    "s": 1,
                    "d": {
                        "v": 10,
                        "user": {"id": BOT_ID, "username": "agent", "bot": True},
                        "guilds": [],
                        "session_id": self.session_id,
                        "resume_gateway_url": self.gateway_url,
                        "application": {"id": BOT_ID},
                    },
                }
                self.history.append(ready)
                replay = [ready]
            elif first.get("op") != 6:
                await ws.aclose(code=4003, reason="not authenticated")
                return
            send, receive = trio.open_memory_channel[dict[str, Any]](1000)
            for payload in replay:
                send.send_nowait(payload)
            self._ws, self._live = ws, send
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._pump, ws, receive)
                try:
                    while True:
                        payload = await self._read(ws)
                        if payload.get("op") == 1:
                            await ws.send_message(json.dumps({"op": 11, "s": None, "d": None}))
                except ConnectionClosed:
                    nursery.cancel_scope.cancel()
        except ConnectionClosed:
            pass
        finally:
            if self._ws is ws:
                self._ws, self._live = None, None
            self._notify()

    async def _pump(
        self, ws: WebSocketConnection, receive: trio.MemoryReceiveChannel[dict[str, Any]]
    ) -> None:
        try:
            async for payload in receive:
                await ws.send_message(json.dumps(payload))
        except ConnectionClosed:
            pass

    async def _read_command(self, ws: WebSocketConnection) -> dict[str, Any]:
        """The next payload that is not a heartbeat (heartbeats are acknowledged)."""
        while True:
            payload = await self._read(ws)
            if payload.get("op") != 1:
                return payload
            await ws.send_message(json.dumps({"op": 11, "s": None, "d": None}))

    async def _read(self, ws: WebSocketConnection) -> dict[str, Any]:
        message = await ws.get_message()
        payload: dict[str, Any] = json.loads(message)
        self.received.append(payload)
        self._notify()
        return payload

    # -- REST -------------------------------------------------------------------

    async def _answer(
        self, kind: str, request: Request, ok: Callable[[Any], tuple[int, Any]]
    ) -> Response:
        raw = await request.body()
        body = json.loads(raw) if raw else None
        held = self._holds.get(kind)
        if held is not None and not held.is_set():
            self.waiting[kind] = self.waiting.get(kind, 0) + 1
            self._notify()
            await held.wait()
            self.waiting[kind] -= 1
        headers: dict[str, str]
        reply: Any
        if request.headers.get("authorization") != f"Bot {self.token}" and kind not in (
            "original",
            "followup",
        ):  # an interaction's webhook is authorised by its token
            status, reply, headers = 401, {"message": "401: Unauthorized", "code": 0}, {}
        elif self._failures.get(kind):
            status, reply, headers = self._failures[kind].pop(0)
        else:
            status, reply = ok(body)
            headers = {}
        self.calls.append(Call(kind, request.url.path, body, time.monotonic(), status))
        self._notify()
        if status == 204:
            return Response(status_code=204)
        return JSONResponse(reply, status_code=status, headers=headers)

    async def _gateway_bot(self, request: Request) -> Response:
        return await self._answer(
            "gateway",
            request,
            lambda _: (200, {"url": self.gateway_url, "shards": 1, "session_start_limit": {}}),
        )

    async def _create(self, request: Request) -> Response:
        channel = request.path_params["cid"]

        def ok(body: Any) -> tuple[int, Any]:
            message_id = self._snowflake()
            self.messages[message_id] = {
                "channel_id": channel,
                "content": body["content"],
                "components": body.get("components") or [],
            }
            return 200, {
                "id": message_id,
                "channel_id": channel,
                "content": body["content"],
                "author": {"id": BOT_ID, "username": "agent", "bot": True},
                "components": body.get("components") or [],
            }

        return await self._answer("create", request, ok)

    async def _edit(self, request: Request) -> Response:
        message_id = request.path_params["mid"]

        def ok(body: Any) -> tuple[int, Any]:
            held = self.messages.get(message_id)
            if held is None:
                return 404, {"message": "Unknown Message", "code": 10008}
            if "content" in body:
                held["content"] = body["content"]
            if "components" in body:
                held["components"] = body["components"]
            return 200, {"id": message_id, **held}

        return await self._answer("edit", request, ok)

    async def _callback(self, request: Request) -> Response:
        token = request.path_params["itoken"]

        def ok(body: Any) -> tuple[int, Any]:
            held = self.interactions.get(token)
            if held is None or held["id"] != request.path_params["iid"]:
                return 404, {"message": "Unknown interaction", "code": 10062}
            if time.monotonic() - held["at"] > INTERACTION_DEADLINE:
                return 404, {"message": "Unknown interaction", "code": 10062}
            if held["answered"] is not None:
                return 400, {
                    "message": "Interaction has already been acknowledged.",
                    "code": 40060,
                }
            if body.get("type") not in (1, 4, 5, 6, 7, 9):
                return 400, {"message": "Invalid Form Body", "code": 50035}
            held["answered"] = body["type"]
            if body["type"] == 4:
                self.responses[token] = body["data"]["content"]
            return 204, None

        return await self._answer("callback", request, ok)

    async def _typing(self, request: Request) -> Response:
        return await self._answer("typing", request, lambda _: (204, None))

    async def _commands(self, request: Request) -> Response:
        def ok(body: Any) -> tuple[int, Any]:
            if request.path_params["app"] != BOT_ID:
                return 403, {"message": "Missing Access", "code": 50001}
            for command in body:
                description = command.get("description", "")
                if (
                    not _COMMAND_NAME.match(command.get("name", ""))
                    or command["name"] != command["name"].lower()
                    or not 1 <= len(description) <= 100
                    or command.get("type", 1) != 1
                ):
                    return 400, {"message": "Invalid Form Body", "code": 50035}
            self.commands = [
                {**command, "id": self._snowflake(), "application_id": BOT_ID} for command in body
            ]
            return 200, self.commands

        return await self._answer("commands", request, ok)

    def _webhook_of(self, request: Request) -> tuple[str, dict[str, Any] | None]:
        token = request.path_params["itoken"]
        held = self.interactions.get(token)
        if request.path_params["app"] != BOT_ID or held is None or held["answered"] is None:
            return token, None
        return token, held

    async def _edit_original(self, request: Request) -> Response:
        token, held = self._webhook_of(request)

        def ok(body: Any) -> tuple[int, Any]:
            if held is None:
                return 404, {"message": "Unknown Webhook", "code": 10015}
            self.responses[token] = body["content"]
            return 200, {"id": self._snowflake(), "content": body["content"]}

        return await self._answer("original", request, ok)

    async def _followup(self, request: Request) -> Response:
        token, held = self._webhook_of(request)

        def ok(body: Any) -> tuple[int, Any]:
            if held is None:
                return 404, {"message": "Unknown Webhook", "code": 10015}
            self.responses[token] += "\n" + body["content"]
            return 200, {"id": self._snowflake(), "content": body["content"]}

        return await self._answer("followup", request, ok)

"""A Telegram Bot API server on loopback: Starlette served by hypercorn's Trio worker.

It speaks the Bot API's HTTP shapes (``POST /bot<token>/<method>`` with a JSON
body, replies ``{"ok": true, "result": ...}`` or ``{"ok": false,
"error_code": ..., "description": ..., "parameters": {...}}``) for the methods
a bot uses: ``getMe``, ``getUpdates`` (a real long poll honouring ``offset``
and ``timeout``; a 409 while a webhook is set), ``sendMessage``,
``editMessageText``, ``answerCallbackQuery``, ``sendChatAction``,
``setWebhook`` and ``deleteWebhook``. A test plays the users (`user_says`,
`press`) and reads what the bot did from `calls`; `fail_next` makes the next
calls of a method fail (a 429 with ``retry_after``, a 502).

Text is taken as Telegram takes it: with ``parse_mode: "HTML"`` the markup is
parsed (only Telegram's tags; every ``<``, ``>``, ``&`` that is not markup
must be escaped) into the plain `text` and its `entities`, with offsets in
UTF-16 code units, and a text longer than 4096 UTF-16 code units after
parsing is refused, as are malformed markup and an empty text.
"""

from __future__ import annotations

import html
import itertools
import time
from collections.abc import Callable
from html.parser import HTMLParser
from typing import Any

import attrs
import trio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.responses import Response
from starlette.routing import Route

from .loopback import Changes
from .loopback import serve_app

TOKEN = "123456:TEST-token"
BOT_ID = 123456
#: Telegram's limit on a message's text, in UTF-16 code units after the markup is parsed.
MAX_TEXT = 4096

#: HTML tags Telegram accepts, and the entity each one makes.
_TAGS = {
    "b": "bold",
    "strong": "bold",
    "i": "italic",
    "em": "italic",
    "u": "underline",
    "ins": "underline",
    "s": "strikethrough",
    "strike": "strikethrough",
    "del": "strikethrough",
    "tg-spoiler": "spoiler",
    "span": "spoiler",
    "a": "text_link",
    "code": "code",
    "pre": "pre",
    "blockquote": "blockquote",
}


def utf16(text: str) -> int:
    """Length in UTF-16 code units, as Telegram counts."""
    return len(text.encode("utf-16-le")) // 2


class ParseError(ValueError):
    """Telegram's "can't parse entities" refusal."""


class _TelegramHTML(HTMLParser):
    """Telegram's HTML: markup into plain text plus entities (offsets in UTF-16 units)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=False)
        self.text = ""
        self.entities: list[dict[str, Any]] = []
        self._open: list[tuple[str, int, dict[str, Any]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in _TAGS:
            raise ParseError(f'Unsupported start tag "{tag}"')
        entity: dict[str, Any] = {"type": _TAGS[tag]}
        found = dict(attrs)
        if tag == "a":
            if not found.get("href"):
                raise ParseError("Can't find href attribute in the a tag")
            entity["url"] = found["href"]
        if tag == "code" and self._open and self._open[-1][0] == "pre":
            language = (found.get("class") or "").removeprefix("language-")
            self._open[-1][2]["language"] = language
            entity = {}
        self._open.append((tag, utf16(self.text), entity))

    def handle_endtag(self, tag: str) -> None:
        if not self._open or self._open[-1][0] != tag:
            raise ParseError(f'Can\'t find end tag corresponding to start tag "{tag}"')
        _, start, entity = self._open.pop()
        length = utf16(self.text) - start
        if entity and length:
            self.entities.append({**entity, "offset": start, "length": length})

    def handle_data(self, data: str) -> None:
        if any(c in data for c in "<>&"):
            raise ParseError("Unescaped character in the text")
        self.text += data

    def handle_entityref(self, name: str) -> None:
        if name not in ("lt", "gt", "amp", "quot"):
            raise ParseError(f'Unsupported HTML entity "&{name};"')
        self.text += html.unescape(f"&{name};")

    def handle_charref(self, name: str) -> None:
        self.text += html.unescape(f"&#{name};")


def parse_html(markup: str) -> tuple[str, list[dict[str, Any]]]:
    """The text and entities Telegram makes of `markup`; raises `ParseError` like Telegram."""
    parser = _TelegramHTML()
    parser.feed(markup)
    parser.close()
    if parser._open:
        raise ParseError(f'Can\'t find end tag corresponding to start tag "{parser._open[-1][0]}"')
    if parser.rawdata:
        raise ParseError("Unexpected end of the text")
    return parser.text, sorted(parser.entities, key=lambda e: e["offset"])


@attrs.frozen
class Call:
    """One Bot API call as the server saw it; `at` is `time.monotonic()`."""

    method: str
    payload: dict[str, Any]
    at: float
    status: int
    #: Telegram's description of a refusal.
    said: str = ""


@attrs.define(eq=False)
class FakeTelegram:
    """The server; start with ``await nursery.start(server.run)``."""

    token: str = TOKEN
    port: int = 0
    calls: list[Call] = attrs.field(factory=list)
    #: Every message the bot sent, by message id, as its latest text and keyboard.
    messages: dict[int, dict[str, Any]] = attrs.field(factory=dict)
    updates: list[dict[str, Any]] = attrs.field(factory=list)
    #: The ``offset`` of every ``getUpdates`` as it arrived: the bot handled all before it.
    polls: list[int] = attrs.field(factory=list)
    #: The webhook URL set (``setWebhook``); while there is one, ``getUpdates`` is refused.
    webhook: str | None = None
    _failures: dict[str, list[tuple[int, dict[str, Any] | bytes]]] = attrs.field(factory=dict)
    _update_ids: itertools.count[int] = attrs.field(factory=lambda: itertools.count(1000))
    _message_ids: itertools.count[int] = attrs.field(factory=lambda: itertools.count(1))
    _callback_ids: itertools.count[int] = attrs.field(factory=lambda: itertools.count(1))
    _changes: Changes = attrs.field(factory=Changes)

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self.port}"

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve on an ephemeral loopback port until cancelled."""
        app = Starlette(routes=[Route("/bot{token}/{method}", self._endpoint, methods=["POST"])])
        async with trio.open_nursery() as nursery:
            self.port = await serve_app(app, nursery)
            task_status.started()

    # -- playing the users ---------------------------------------------------

    def user_says(self, chat_id: int, user_id: int, text: str) -> dict[str, Any]:
        """Queue a text message from `user_id` in `chat_id`; returns the update."""
        update = {
            "update_id": next(self._update_ids),
            "message": {
                "message_id": next(self._message_ids),
                "from": {"id": user_id, "is_bot": False, "first_name": f"user{user_id}"},
                "chat": {"id": chat_id, "type": "private" if chat_id > 0 else "group"},
                "date": int(time.time()),
                "text": text,
            },
        }
        self.push(update)
        return update

    def press(self, user_id: int, message_id: int, data: str) -> dict[str, Any]:
        """Queue a press of an inline button under the bot's message `message_id`."""
        held = self.messages[message_id]
        update = {
            "update_id": next(self._update_ids),
            "callback_query": {
                "id": str(next(self._callback_ids)),
                "from": {"id": user_id, "is_bot": False, "first_name": f"user{user_id}"},
                "message": {
                    "message_id": message_id,
                    "from": {"id": BOT_ID, "is_bot": True, "first_name": "bot"},
                    "chat": {"id": held["chat_id"], "type": "private"},
                    "date": int(time.time()),
                    "text": held["text"],
                },
                "chat_instance": "1",
                "data": data,
            },
        }
        self.push(update)
        return update

    def push(self, update: dict[str, Any]) -> None:
        """Queue an update as it is (a repeated one included)."""
        self.updates.append(update)
        self._notify()

    def fail_next(self, method: str, status: int, body: dict[str, Any] | bytes) -> None:
        """Make the next call of `method` answer `status` with `body` (JSON, or raw bytes)."""
        self._failures.setdefault(method, []).append((status, body))

    # -- reading what the bot did ---------------------------------------------

    def calls_of(self, method: str) -> list[Call]:
        """The calls of one method, in order."""
        return [c for c in self.calls if c.method == method]

    def texts(self, chat_id: int) -> list[str]:
        """The latest text of every message the bot sent to `chat_id`, in order."""
        return [m["text"] for m in self.messages.values() if m["chat_id"] == chat_id]

    def buttons(self, message_id: int) -> list[dict[str, Any]]:
        """The inline keyboard's buttons of a message, flattened."""
        markup = self.messages[message_id].get("reply_markup") or {}
        return [b for row in markup.get("inline_keyboard", []) for b in row]

    async def wait_for(self, predicate: Callable[[], Any]) -> Any:
        """Wait until `predicate()` is truthy (checked after every change); return its value."""
        return await self._changes.wait_for(predicate)

    def _notify(self) -> None:
        self._changes.notify()

    # -- the API -------------------------------------------------------------

    async def _endpoint(self, request: Request) -> Response:
        method = request.path_params["method"]
        if request.path_params["token"] != self.token:
            return self._record(
                method, {}, 401, {"ok": False, "error_code": 401, "description": "Unauthorized"}
            )
        raw = await request.body()
        payload = await request.json() if raw else {}
        queued = self._failures.get(method)
        if queued:
            status, body = queued.pop(0)
            if isinstance(body, bytes):
                self.calls.append(Call(method, payload, time.monotonic(), status))
                self._notify()
                return Response(body, status_code=status, media_type="application/json")
            return self._record(method, payload, status, body)
        handler = getattr(self, f"_m_{method}", None)
        if handler is None:
            return self._record(
                method, payload, 404, {"ok": False, "error_code": 404, "description": "Not Found"}
            )
        if method == "getUpdates":
            result = await handler(payload)
        else:
            result = handler(payload)
        if isinstance(result, Response):
            return result
        return self._record(method, payload, 200, {"ok": True, "result": result})

    def _record(
        self, method: str, payload: dict[str, Any], status: int, body: dict[str, Any]
    ) -> Response:
        self.calls.append(Call(method, payload, time.monotonic(), status))
        self._notify()
        headers = {}
        retry = (body.get("parameters") or {}).get("retry_after")
        if retry is not None:
            headers["retry-after"] = str(int(retry) + 1)
        return JSONResponse(body, status_code=status, headers=headers)

    def _m_getMe(self, payload: dict[str, Any]) -> Any:
        return {"id": BOT_ID, "is_bot": True, "first_name": "agent", "username": "agent_bot"}

    def _refuse(self, method: str, payload: dict[str, Any], status: int, said: str) -> Response:
        body = {"ok": False, "error_code": status, "description": said}
        self.calls.append(Call(method, payload, time.monotonic(), status, said))
        self._notify()
        return JSONResponse(body, status_code=status)

    def _shown(self, method: str, payload: dict[str, Any]) -> tuple[str, list[Any]] | Response:
        """The text and entities a message shows, or Telegram's refusal of its text."""
        raw = payload.get("text")
        if not isinstance(raw, str):
            return self._refuse(method, payload, 400, "Bad Request: message text is empty")
        mode = payload.get("parse_mode")
        entities: list[dict[str, Any]] = []
        if mode is None:
            text = raw
        elif mode == "HTML":
            try:
                text, entities = parse_html(raw)
            except ParseError as exc:
                said = f"Bad Request: can't parse entities: {exc}"
                return self._refuse(method, payload, 400, said)
        else:
            return self._refuse(method, payload, 400, f"Bad Request: unsupported parse_mode {mode}")
        if not text.strip():
            return self._refuse(method, payload, 400, "Bad Request: message text is empty")
        if utf16(text) > MAX_TEXT:
            return self._refuse(method, payload, 400, "Bad Request: message is too long")
        return text, entities

    def _m_sendChatAction(self, payload: dict[str, Any]) -> Any:
        if payload.get("action") not in ("typing", "upload_document", "record_voice"):
            return self._refuse(
                "sendChatAction", payload, 400, "Bad Request: wrong parameter action in request"
            )
        return True

    def _m_setWebhook(self, payload: dict[str, Any]) -> Any:
        self.webhook = payload.get("url") or None
        return True

    def _m_deleteWebhook(self, payload: dict[str, Any]) -> Any:
        self.webhook = None
        return True

    async def _m_getUpdates(self, payload: dict[str, Any]) -> Any:
        if self.webhook is not None:
            return self._refuse(
                "getUpdates",
                payload,
                409,
                "Conflict: can't use getUpdates method while webhook is active;"
                " use deleteWebhook to delete the webhook first",
            )
        offset = payload.get("offset", 0)
        self.polls.append(offset)
        self._notify()
        timeout = float(payload.get("timeout", 0))
        with trio.move_on_after(timeout):
            while not any(u["update_id"] >= offset for u in self.updates):
                await self._changes.wait()
        # Telegram forgets the updates before an acknowledged offset.
        self.updates = [u for u in self.updates if u["update_id"] >= offset]
        return list(self.updates)

    def _m_sendMessage(self, payload: dict[str, Any]) -> Any:
        shown = self._shown("sendMessage", payload)
        if isinstance(shown, Response):
            return shown
        text, entities = shown
        message_id = next(self._message_ids)
        self.messages[message_id] = {
            "chat_id": payload["chat_id"],
            "text": text,
            "entities": entities,
            "sent": payload["text"],
            "reply_markup": payload.get("reply_markup"),
        }
        message = {
            "message_id": message_id,
            "from": {"id": BOT_ID, "is_bot": True, "first_name": "agent"},
            "chat": {"id": payload["chat_id"], "type": "private"},
            "date": int(time.time()),
            "text": text,
        }
        if entities:
            message["entities"] = entities
        return message

    def _m_editMessageText(self, payload: dict[str, Any]) -> Any:
        held = self.messages.get(payload["message_id"])
        if held is None:
            return JSONResponse(
                {
                    "ok": False,
                    "error_code": 400,
                    "description": "Bad Request: message to edit not found",
                },
                status_code=400,
            )
        shown = self._shown("editMessageText", payload)
        if isinstance(shown, Response):
            return shown
        text, entities = shown
        if (text, entities) == (held["text"], held["entities"]) and not held.get("reply_markup"):
            return self._refuse(
                "editMessageText",
                payload,
                400,
                "Bad Request: message is not modified: specified new message content and reply"
                " markup are exactly the same as a current content and reply markup of the message",
            )
        held["text"] = text
        held["entities"] = entities
        held["sent"] = payload["text"]
        held["reply_markup"] = payload.get("reply_markup")
        return {"message_id": payload["message_id"], "text": text}

    def _m_answerCallbackQuery(self, payload: dict[str, Any]) -> Any:
        return True

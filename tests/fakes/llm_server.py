"""A scripted model API server on loopback, speaking HTTP/1.1 over raw Trio sockets.

Each test scripts the replies in order (`LLMServer.script`), one handler per
incoming request, so retries meet the next reply. A handler gets an `Exchange`:
the parsed request plus the means to answer it byte by byte, as a chunked
stream, and to notice the moment the client hangs up. Raw sockets rather than
a framework, so that a test controls exactly which bytes go out when and sees
the disconnect itself, not a framework's idea of it.

Helpers build the two wire formats: OpenAI chat completion chunks (`oa_*`,
ending in ``data: [DONE]``) and Anthropic message events (`an_*`), reasoning,
extended thinking and prompt-cache usage included. `tests/test_wire_formats.py`
parses what they build with the official SDKs' own models.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Mapping
from typing import Any

import attrs
import trio

Handler = Callable[["Exchange"], Awaitable[None]]


@attrs.frozen
class Request:
    """One request as the server read it. Header names are lower-case."""

    method: str
    path: str
    headers: Mapping[str, str]
    body: bytes

    def json(self) -> Any:
        """The body parsed as JSON."""
        return json.loads(self.body)


@attrs.define(eq=False)
class Exchange:
    """One connection: its request, and a way to answer and to watch for the hang-up."""

    request: Request
    _stream: trio.SocketStream
    #: Set when the client closes the connection while a handler waits for it.
    disconnected: trio.Event = attrs.field(factory=trio.Event, init=False)
    #: `time.perf_counter()` when the disconnect was seen.
    disconnected_at: float | None = attrs.field(default=None, init=False)

    async def start(self, status: int = 200, headers: Mapping[str, str] | None = None) -> None:
        """Send the status line and headers of a chunked response."""
        fields = {"content-type": "text/event-stream", **(headers or {})}
        fields["transfer-encoding"] = "chunked"
        await self._stream.send_all(_head(status, fields))

    async def send(self, data: bytes) -> None:
        """Send one HTTP chunk."""
        if data:
            await self._stream.send_all(b"%x\r\n%s\r\n" % (len(data), data))

    async def end(self) -> None:
        """Send the last chunk."""
        await self._stream.send_all(b"0\r\n\r\n")

    async def respond(
        self, status: int, body: bytes, headers: Mapping[str, str] | None = None
    ) -> None:
        """Send a whole response with a Content-Length."""
        fields = {"content-type": "application/json", **(headers or {})}
        fields["content-length"] = str(len(body))
        await self._stream.send_all(_head(status, fields) + body)

    async def wait_disconnect(self) -> None:
        """Read until the client closes the connection, then record when."""
        try:
            while await self._stream.receive_some(65536):
                pass
        except trio.BrokenResourceError:
            pass
        self.disconnected_at = time.perf_counter()
        self.disconnected.set()


def _head(status: int, fields: Mapping[str, str]) -> bytes:
    lines = [f"HTTP/1.1 {status} Scripted", "connection: close"]
    lines += [f"{k}: {v}" for k, v in fields.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


@attrs.define(eq=False)
class LLMServer:
    """The server. Start it with ``await nursery.start(server.run)``."""

    port: int = 0
    requests: list[Request] = attrs.field(factory=list)
    exchanges: list[Exchange] = attrs.field(factory=list)
    _handlers: list[Handler] = attrs.field(factory=list)
    #: Set each time a request arrives (replaced by a fresh event after).
    _arrived: trio.Event = attrs.field(factory=trio.Event)
    #: The model's context window in tokens (`request_tokens`): a longer request is refused
    #: with the provider's own error, as the real APIs refuse it, and no reply is used up.
    context_window: int | None = None
    #: Requests refused for passing `context_window`.
    refused: list[Request] = attrs.field(factory=list)
    #: The reply to every request once the scripted ones are used up (else a 500).
    fallback: Handler | None = None

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self.port}"

    def script(self, *handlers: Handler) -> None:
        """Queue replies, one per request to come."""
        self._handlers.extend(handlers)

    async def wait_request(self, count: int) -> Exchange:
        """Wait until `count` requests have arrived; the last one's exchange."""
        while len(self.exchanges) < count:
            await self._arrived.wait()
        return self.exchanges[count - 1]

    async def run(
        self, *, task_status: trio.TaskStatus[LLMServer] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Listen on 127.0.0.1 on an ephemeral port and serve until cancelled."""
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started(self)
        await trio.serve_listeners(self._serve, listeners)

    async def _serve(self, stream: trio.SocketStream) -> None:
        try:
            async with stream:
                request = await _read_request(stream)
                if request is None:
                    return
                exchange = Exchange(request, stream)
                self.requests.append(request)
                self.exchanges.append(exchange)
                self._arrived.set()
                self._arrived = trio.Event()
                window = self.context_window
                if window is not None and request_tokens(request) > window:
                    self.refused.append(request)
                    await too_long(window)(exchange)
                elif self._handlers:
                    await self._handlers.pop(0)(exchange)
                elif self.fallback is not None:
                    await self.fallback(exchange)
                else:
                    await exchange.respond(500, b'{"error": {"message": "no scripted reply"}}')
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            # The client went away mid-reply: exactly what cancel tests provoke.
            pass


async def _read_request(stream: trio.SocketStream) -> Request | None:
    data = bytearray()
    while b"\r\n\r\n" not in data:
        chunk = await stream.receive_some(65536)
        if not chunk:
            return None
        data += chunk
    head, _, rest = bytes(data).partition(b"\r\n\r\n")
    first, *lines = head.decode("latin-1").split("\r\n")
    method, path, _ = first.split(" ", 2)
    headers: dict[str, str] = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    body = bytearray(rest)
    while len(body) < length:
        chunk = await stream.receive_some(65536)
        if not chunk:
            return None
        body += chunk
    return Request(method, path, headers, bytes(body))


# --------------------------------------------------------------------------- replies


def request_tokens(request: Request) -> int:
    """The tokens a request's prompt counts as here: its body's bytes over 4, about what the
    providers' tokenizers make of English text and the JSON around it."""
    return -(-len(request.body) // 4)


def too_long(window: int) -> Handler:
    """The provider's refusal of a request longer than the context window `window`: a 400,
    in OpenAI's words and code (``context_length_exceeded``) on ``/chat/completions``, in
    Anthropic's (``prompt is too long``) on ``/v1/messages``."""

    async def handler(exchange: Exchange) -> None:
        tokens = request_tokens(exchange.request)
        if exchange.request.path.endswith("/messages"):
            body: dict[str, Any] = an_error(
                "invalid_request_error", f"prompt is too long: {tokens} tokens > {window} maximum"
            )
        else:
            body = {
                "error": {
                    "message": f"This model's maximum context length is {window} tokens. "
                    f"However, your messages resulted in {tokens} tokens. Please reduce the "
                    "length of the messages.",
                    "type": "invalid_request_error",
                    "param": "messages",
                    "code": "context_length_exceeded",
                }
            }
        await exchange.respond(400, json.dumps(body).encode())

    return handler


def sse(pieces: Iterable[bytes], *, split: int | None = None) -> Handler:
    """A 200 event stream sending each piece as its own chunk (or all cut every `split` bytes)."""
    parts = list(pieces)

    async def handler(exchange: Exchange) -> None:
        await exchange.start()
        if split is not None:
            blob = b"".join(parts)
            for i in range(0, len(blob), split):
                await exchange.send(blob[i : i + split])
        else:
            for part in parts:
                await exchange.send(part)
        await exchange.end()

    return handler


def json_error(status: int, body: Any, headers: Mapping[str, str] | None = None) -> Handler:
    """An error response with a JSON body."""

    async def handler(exchange: Exchange) -> None:
        await exchange.respond(status, json.dumps(body).encode(), headers)

    return handler


def raw(status: int, body: bytes, content_type: str) -> Handler:
    """A whole response with any body and content type."""

    async def handler(exchange: Exchange) -> None:
        await exchange.respond(status, body, {"content-type": content_type})

    return handler


def stall(pieces: Iterable[bytes] = ()) -> Handler:
    """A 200 event stream that sends `pieces`, then holds the connection until the client leaves."""
    parts = list(pieces)

    async def handler(exchange: Exchange) -> None:
        await exchange.start()
        for part in parts:
            await exchange.send(part)
        await exchange.wait_disconnect()

    return handler


def cut(pieces: Iterable[bytes] = ()) -> Handler:
    """A 200 event stream that sends `pieces`, then drops the connection mid-reply."""
    parts = list(pieces)

    async def handler(exchange: Exchange) -> None:
        await exchange.start()
        for part in parts:
            await exchange.send(part)
        # Returning closes the socket without the last chunk: a truncated reply.

    return handler


# --------------------------------------------------------------------------- OpenAI wire format


def oa_chunk(delta: Mapping[str, Any], finish_reason: str | None = None) -> bytes:
    """One ``chat.completion.chunk`` event for choice 0."""
    return _oa(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "created": 1700000000,
            "model": "test-model",
            "choices": [{"index": 0, "delta": dict(delta), "finish_reason": finish_reason}],
        }
    )


def oa_text(text: str) -> bytes:
    """A chunk of assistant text."""
    return oa_chunk({"content": text})


def oa_tool(
    index: int, *, id: str | None = None, name: str | None = None, arguments: str = ""
) -> bytes:
    """A chunk carrying one piece of tool call `index`."""
    call: dict[str, Any] = {"index": index, "function": {"arguments": arguments}}
    if id is not None:
        call["id"] = id
        call["type"] = "function"
    if name is not None:
        call["function"]["name"] = name
    return oa_chunk({"tool_calls": [call]})


def oa_reasoning(text: str, field: str = "reasoning_content") -> bytes:
    """A chunk of reasoning, as DeepSeek and vLLM (``reasoning_content``) or Ollama and
    OpenRouter (``reasoning``) stream it beside the answer."""
    return oa_chunk({field: text})


def oa_finish(reason: str = "stop") -> bytes:
    """The chunk that ends choice 0."""
    return oa_chunk({}, finish_reason=reason)


def oa_usage(
    prompt: int, completion: int, cached: int | None = None, reasoning: int | None = None
) -> bytes:
    """The usage chunk sent with ``stream_options.include_usage`` (no choices).

    `cached` adds ``prompt_tokens_details.cached_tokens``, as OpenAI reports prompt caching;
    `reasoning` ``completion_tokens_details.reasoning_tokens``, as its reasoning models do.
    """
    usage: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if cached is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    if reasoning is not None:
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    return _oa(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "created": 1700000000,
            "model": "test-model",
            "choices": [],
            "usage": usage,
        }
    )


OA_DONE = b"data: [DONE]\n\n"


def _oa(payload: Mapping[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


# --------------------------------------------------------------------------- Anthropic wire format


def an_event(kind: str, **fields: Any) -> bytes:
    """One Anthropic stream event: ``event: kind`` plus ``data: {"type": kind, ...}``."""
    data = json.dumps({"type": kind, **fields})
    return f"event: {kind}\ndata: {data}\n\n".encode()


def an_start(input_tokens: int = 10, *, cache_read: int = 0, cache_creation: int = 0) -> bytes:
    """``message_start`` with the input usage (``input_tokens`` is the uncached part)."""
    usage: dict[str, Any] = {"input_tokens": input_tokens, "output_tokens": 1}
    if cache_read or cache_creation:
        usage["cache_read_input_tokens"] = cache_read
        usage["cache_creation_input_tokens"] = cache_creation
    return an_event(
        "message_start",
        message={
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": "test-model",
            "stop_reason": None,
            "stop_sequence": None,
            "usage": usage,
        },
    )


def an_text_block(index: int, pieces: Iterable[str]) -> list[bytes]:
    """A whole text block: start, one ``text_delta`` per piece, stop."""
    out = [an_event("content_block_start", index=index, content_block={"type": "text", "text": ""})]
    out += [
        an_event("content_block_delta", index=index, delta={"type": "text_delta", "text": p})
        for p in pieces
    ]
    out.append(an_event("content_block_stop", index=index))
    return out


def an_tool_block(index: int, id: str, name: str, json_pieces: Iterable[str]) -> list[bytes]:
    """A whole tool_use block: start, one ``input_json_delta`` per piece, stop."""
    out = [
        an_event(
            "content_block_start",
            index=index,
            content_block={"type": "tool_use", "id": id, "name": name, "input": {}},
        )
    ]
    out += [
        an_event(
            "content_block_delta",
            index=index,
            delta={"type": "input_json_delta", "partial_json": p},
        )
        for p in json_pieces
    ]
    out.append(an_event("content_block_stop", index=index))
    return out


def an_thinking_block(index: int, pieces: Iterable[str], signature: str) -> list[bytes]:
    """A whole extended-thinking block: start, ``thinking_delta`` per piece, the
    ``signature_delta`` just before the stop, as the API sends it."""
    out = [
        an_event(
            "content_block_start",
            index=index,
            content_block={"type": "thinking", "thinking": "", "signature": ""},
        )
    ]
    out += [
        an_event(
            "content_block_delta", index=index, delta={"type": "thinking_delta", "thinking": p}
        )
        for p in pieces
    ]
    out.append(
        an_event(
            "content_block_delta",
            index=index,
            delta={"type": "signature_delta", "signature": signature},
        )
    )
    out.append(an_event("content_block_stop", index=index))
    return out


def an_redacted_thinking_block(index: int, data: str) -> list[bytes]:
    """A ``redacted_thinking`` block: encrypted data, whole in its start event."""
    return [
        an_event(
            "content_block_start",
            index=index,
            content_block={"type": "redacted_thinking", "data": data},
        ),
        an_event("content_block_stop", index=index),
    ]


def an_end(stop_reason: str = "end_turn", output_tokens: int = 5) -> list[bytes]:
    """``message_delta`` with the stop reason and output usage, then ``message_stop``."""
    return [
        an_event(
            "message_delta",
            delta={"stop_reason": stop_reason, "stop_sequence": None},
            usage={"output_tokens": output_tokens},
        ),
        an_event("message_stop"),
    ]


def an_error(kind: str, message: str) -> dict[str, Any]:
    """An Anthropic error body (also the data of an ``error`` event)."""
    return {"type": "error", "error": {"type": kind, "message": message}}

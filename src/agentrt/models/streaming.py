"""What every HTTP model provider shares: errors, retries, the SSE decoder, the stream loop.

The providers differ only in how they build a request and how they read the
events of a stream. Everything about talking HTTP lives here: which failures
are worth a retry, how long to wait, how a status code becomes an error the
user can act on, and how a server-sent event stream is cut into events.

Credentials: the key only ever travels in request headers. Error messages are
built from our own words plus the server's message after `Redactor` has scrubbed
it, and no exception raised here chains to an httpx exception (whose request
object carries the headers).
"""

from __future__ import annotations

import abc
import email.utils
import functools
import json
import re
import ssl
import time
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any
from typing import Protocol

import attrs
import httpx
import trio

from ..config.retry import MODEL_RETRY
from ..config.retry import RetryPolicy
from ..vocab.reprs import mutable
from ..vocab.reprs import quick_init
from ..vocab.reprs import record
from .messages import Message
from .messages import ModelDelta
from .messages import ModelError
from .messages import ModelResponse
from .messages import OnDelta
from .messages import ToolSpec

# --------------------------------------------------------------------------- errors


class ProviderError(ModelError):
    """A hosted or local model API failed; the message says what to check.

    `retryable` tells whether sending the same request again may succeed
    (only ever done before any delta reached the caller). `status` is the HTTP
    status when there was one.
    """

    retryable: bool = False

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class ModelAuthError(ProviderError):
    """The API rejected the key, or no key was configured for a hosted API."""


class ModelNotFoundError(ProviderError):
    """The API does not know the model (or the URL is not the API's)."""


class _RetryLaterError(ProviderError):
    """A failure worth another try; `retry_after` is the wait the server asked for, if any."""

    retryable = True

    def __init__(
        self, message: str, *, status: int | None = None, retry_after: float | None = None
    ) -> None:
        super().__init__(message, status=status)
        self.retry_after = retry_after


class ModelRateLimitError(_RetryLaterError):
    """The API asked us to slow down (HTTP 429)."""


class ModelServerError(_RetryLaterError):
    """The API failed on its side (HTTP 5xx, 408, or an overloaded/api error event)."""


class ModelRequestError(ProviderError):
    """The API refused the request itself (another HTTP 4xx); retrying will not help."""


class ModelConnectError(ProviderError):
    """No connection could be made (refused, DNS failure, connect timeout)."""

    retryable = True


class ModelTimeoutError(ProviderError):
    """The API stopped sending for longer than the read timeout."""


class ModelStreamError(ProviderError):
    """The reply was not the stream we expected (malformed, cut short, wrong content)."""


class ModelMaxTokensError(ModelStreamError):
    """The reply reached the output limit (``max_tokens``) in the middle of a tool call.

    The call's arguments are incomplete, so it cannot run; asking again the same
    way would be cut at the same place, so it is not retried.
    """


def cut_at_max_tokens(provider: str, tool: str, limit: int | None) -> ModelMaxTokensError:
    """The error for a reply cut at the output limit while tool call `tool` was written."""
    said = f"max_tokens ({limit})" if limit is not None else "max_tokens (the server's default)"
    return ModelMaxTokensError(
        f"the reply was cut at {said}: {provider} stopped in the middle of tool call {tool!r},"
        " whose arguments are incomplete; raise max_tokens or ask for smaller steps"
    )


class ModelStreamCutError(ModelStreamError):
    """The reply stopped before it was complete (connection dropped, stream ended early).

    A fresh request may well work, so it is retried, as long as nothing was
    delivered yet.
    """

    retryable = True


# --------------------------------------------------------------------------- redaction


@mutable(eq=False)
class Redactor:
    """Scrubs secrets out of text that came from elsewhere (server error bodies).

    Servers echo keys back in 401 bodies, sometimes whole, sometimes with the
    middle masked. Any word that shares a run of `min_run` characters with a
    secret is replaced, which catches both forms. Besides the key, `others`
    are scrubbed too (credentials in custom headers). `repr` never shows them.
    """

    _secret: str | None = attrs.field(alias="secret", repr=False)
    min_run: int = 6
    others: tuple[str, ...] = attrs.field(default=(), repr=False)

    def scrub(self, text: str) -> str:
        """`text` with every trace of the secrets replaced by ``[redacted]``."""
        secrets = [s for s in (self._secret, *self.others) if s]
        if not secrets:
            return text
        pieces: set[str] = set()
        for secret in secrets:
            text = text.replace(secret, "[redacted]")
            run = min(self.min_run, len(secret))
            pieces |= {secret[i : i + run] for i in range(len(secret) - run + 1)}

        def fix(match: re.Match[str]) -> str:
            word = match.group(0)
            if any(p in word for p in pieces):
                return "[redacted]"
            return word

        return re.sub(r"[^\s\"',;()\[\]{}]+", fix, text)


# --------------------------------------------------------------------------- what to say


@record
class Api:
    """What sets one model API apart, as far as talking to it goes: its name and its key."""

    #: How users know the API: ``"OpenAI-compatible API"``, ``"Anthropic API"``.
    provider: str
    #: The hosted service's base URL, which never works without a key,
    hosted_url: str
    #: and its name in the message saying so (``"OpenAI API"``).
    hosted_name: str
    #: The environment variable and stored-secret name a key is read from.
    key_env: str
    key_secret: str
    #: True when every base URL of this API needs a key (Azure), not only `hosted_url`.
    always_needs_key: bool = False


#: Words in a header's name that mark its value as a credential, scrubbed from error text.
_CREDENTIAL_WORDS = ("auth", "key", "token", "secret", "cookie", "password")


def merge_headers(base: Mapping[str, str], custom: Mapping[str, str]) -> dict[str, str]:
    """`base` with `custom` on top; names compare case-insensitively, the custom value wins.

    Raises ValueError for a header that cannot be sent (a name that is not a
    token, a value with a line break), naming it.
    """
    merged = {name.lower(): value for name, value in base.items()}
    for name, value in custom.items():
        if not re.fullmatch(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+", name):
            raise ValueError(f"custom header name {name!r} is not a valid HTTP header name")
        if not isinstance(value, str) or "\r" in value or "\n" in value:
            raise ValueError(f"custom header {name!r} must be one line of text")
        merged[name.lower()] = value
    return merged


def header_secrets(headers: Mapping[str, str]) -> tuple[str, ...]:
    """The values of `headers` that look like credentials (by the header's name)."""
    return tuple(
        value
        for name, value in headers.items()
        if value and any(word in name.lower() for word in _CREDENTIAL_WORDS)
    )


@record
class ErrorContext:
    """What an error message names: the API, the model, the URL, whether a key was sent."""

    api: Api
    model: str
    url: str
    has_key: bool

    @property
    def provider(self) -> str:
        """The API's name as users know it."""
        return self.api.provider

    def key_hint(self) -> str:
        """Where to put the key, in words."""
        return (
            f"set {self.api.key_env} or store the key as the agentrt secret {self.api.key_secret!r}"
        )


#: Connect quickly or fail; but wait long between chunks, because a local server
#: may be loading the model and a reasoning model may think before its first token.
DEFAULT_TIMEOUT = httpx.Timeout(connect=10.0, read=300.0, write=30.0, pool=10.0)

_MAX_SERVER_TEXT = 300
_MAX_ERROR_BODY = 64 * 1024


def server_message(body: bytes, redactor: Redactor) -> str:
    """The human part of an error body, scrubbed, on one line, at most 300 characters.

    Understands ``{"error": {"message": ...}}`` (OpenAI, Anthropic, Ollama,
    vLLM, llama.cpp), ``{"error": "..."}``, ``{"message": ...}`` and
    ``{"detail": ...}``, and falls back on the raw text.
    """
    text = body.decode("utf-8", errors="replace")
    found: Any = None
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict):
            found = error.get("message")
        elif isinstance(error, str):
            found = error
        if found is None:
            found = data.get("message", data.get("detail"))
    said = found if isinstance(found, str) else text
    said = " ".join(redactor.scrub(said).split())
    if len(said) > _MAX_SERVER_TEXT:
        said = said[: _MAX_SERVER_TEXT - 3] + "..."
    return said


def parse_retry_after(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``retry-after`` (seconds or HTTP date)."""
    value = headers.get("retry-after-ms")
    if value is not None:
        try:
            return max(0.0, float(value) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def error_for_status(
    status: int, headers: Mapping[str, str], body: bytes, ctx: ErrorContext, redactor: Redactor
) -> ProviderError:
    """The error an HTTP error response stands for, with what to check."""
    said = server_message(body, redactor)
    where = f"{ctx.provider} at {ctx.url}"
    head = f"HTTP {status} from {where}: {said}" if said else f"HTTP {status} from {where}"
    if status in (401, 403):
        if ctx.has_key:
            advice = f"the API key was rejected; check the key in {ctx.api.key_env} or the stored secret {ctx.api.key_secret!r}"
        else:
            advice = f"no API key was sent; {ctx.key_hint()}"
        return ModelAuthError(f"{head} ({advice})", status=status)
    if status == 404:
        return ModelNotFoundError(
            f"{head} (check the model name {ctx.model!r} and the base URL)", status=status
        )
    retry_after = parse_retry_after(headers)
    if status == 429:
        return ModelRateLimitError(
            f"{head} (rate limited; wait and try again, or check your plan's limits)",
            status=status,
            retry_after=retry_after,
        )
    if status == 408 or status >= 500:
        return ModelServerError(
            f"{head} (the server failed; try again later)", status=status, retry_after=retry_after
        )
    return ModelRequestError(f"{head} (the request was refused)", status=status)


# --------------------------------------------------------------------------- retries


def retry_delay(policy: RetryPolicy, attempt: int, error: ProviderError) -> float | None:
    """Seconds to wait before attempt `attempt + 1` (0-based), or None to give up."""
    if not error.retryable or policy.exhausted(attempt + 1):
        return None
    asked = error.retry_after if isinstance(error, _RetryLaterError) else None
    if asked is not None:
        return asked if policy.obeys(asked) else None
    return policy.backoff(attempt + 1)


DEFAULT_RETRY = MODEL_RETRY
NO_RETRY = RetryPolicy(max_attempts=1)


@mutable(eq=False)
class Progress:
    """Whether an attempt has handed the caller a delta yet (then it is not retried)."""

    delivered: bool = False


async def with_retries(
    policy: RetryPolicy,
    attempt: Callable[[OnDelta], Awaitable[ModelResponse]],
    on_delta: OnDelta,
    progress: Progress | None = None,
) -> ModelResponse:
    """Run `attempt` until it succeeds, retrying per `policy` only while no delta was delivered.

    Once the caller has seen part of a reply, a retry would show it a second,
    different reply; so from the first delivered delta on, errors propagate.
    Waits go through `trio.sleep`, so they are cancellable and mock-clock friendly.

    With `progress`, `attempt` is given `on_delta` itself and marks `progress`
    before it hands over its first delta (as `stream_once` does); without it,
    each delta goes through a wrapper that marks it, one more call a delta.
    """
    deliver = on_delta
    if progress is None:
        progress = seen = Progress()

        async def tracking(delta: ModelDelta) -> None:
            seen.delivered = True
            await on_delta(delta)

        deliver = tracking

    n = 0
    while True:
        try:
            return await attempt(deliver)
        except ProviderError as error:
            wait = None if progress.delivered else retry_delay(policy, n, error)
            if wait is None:
                if n > 0:
                    error.args = (f"{error.args[0]} [gave up after {n + 1} attempts]",)
                raise
        await trio.sleep(wait)
        n += 1


# --------------------------------------------------------------------------- SSE


@quick_init
@record
class SSEEvent:
    """One server-sent event: its ``event:`` name (``"message"`` if none) and joined ``data:``."""

    event: str
    data: str


class SSEError(ValueError):
    """The byte stream is not a valid event stream (bad UTF-8, an event over the size cap)."""


@mutable(eq=False)
class SSEDecoder:
    """Cuts a ``text/event-stream`` byte stream into events; knows no sockets.

    `feed` bytes as they come (``b""`` is EOF), then call `next_event` until it
    returns None (need more data), or take every complete event at once with
    `drain`; `feed_events` does both in one call. Lines may end in CRLF, LF or
    CR, split anywhere across feeds. Comments (``:``), ``id`` and ``retry`` are
    skipped. At EOF an event missing its final blank line is still delivered,
    because some local servers end their stream that way. An event larger than
    `max_event_bytes` raises `SSEError` rather than growing without bound; so
    does bad UTF-8, once the events before it were taken.

    What was received is cut into lines all at once (`bytes.splitlines`, which
    splits exactly at CR, LF and CRLF), and an event's data is decoded once.
    A feed of whole lines with nothing left over before it (nearly every HTTP
    chunk of a model's stream) is cut without being copied into the buffer.
    """

    max_event_bytes: int = 8 * 1024 * 1024
    _buffer: bytearray = attrs.field(factory=bytearray, init=False)
    _eof: bool = attrs.field(default=False, init=False)
    #: The last complete line ended in a CR at the end of what was received: a LF next is its end.
    _skip_lf: bool = attrs.field(default=False, init=False)
    _event: str = attrs.field(default="", init=False)
    _data: list[bytes] = attrs.field(factory=list, init=False)
    _size: int = attrs.field(default=0, init=False)
    _ready: list[SSEEvent] = attrs.field(factory=list, init=False)
    #: How many of `_ready` `next_event` has handed out.
    _taken: int = attrs.field(default=0, init=False)
    _error: SSEError | None = attrs.field(default=None, init=False)

    def feed(self, data: bytes) -> None:
        """Add received bytes; ``b""`` marks the end of the stream."""
        if self._eof:
            raise SSEError("fed data after the end of the stream")
        if not data:
            self._eof = True
            return
        self._buffer += data
        if len(self._buffer) > self.max_event_bytes:
            raise SSEError(f"an event stream line exceeds {self.max_event_bytes} bytes")

    def feed_events(self, data: bytes) -> list[SSEEvent]:
        """`feed` `data`, then `drain`: every event complete once `data` is in."""
        if (
            data.endswith(b"\n")
            and not self._buffer
            and not self._skip_lf
            and not self._eof
            and self._error is None
            and len(data) <= self.max_event_bytes
        ):
            # Whole lines, nothing held from before: cut them where they are.
            self._cut(data.splitlines())
            return self._take()
        self.feed(data)
        return self.drain()

    def next_event(self) -> SSEEvent | None:
        """The next complete event, or None when more data is needed (or the stream is over)."""
        if self._taken == len(self._ready):
            self._ready, self._taken = [], 0
            self._parse()
            if not self._ready:
                if self._error is not None:
                    raise self._error
                return None
        self._taken += 1
        return self._ready[self._taken - 1]

    def drain(self) -> list[SSEEvent]:
        """Every complete event fed so far (none when more data is needed)."""
        self._parse()
        return self._take()

    def _take(self) -> list[SSEEvent]:
        events = self._ready
        if self._taken:
            events = events[self._taken :]
        elif not events:
            if self._error is not None:
                raise self._error
            return events
        self._ready, self._taken = [], 0
        return events

    def _parse(self) -> None:
        buffer = self._buffer
        if self._error is not None or (not buffer and not self._eof):
            return
        if self._skip_lf and buffer:
            self._skip_lf = False
            if buffer[0] == 0x0A:
                del buffer[0]
        if self._eof or buffer.endswith(b"\n"):  # nearly always: all of it is whole lines
            complete = bytes(buffer)
            buffer.clear()
        else:
            end = max(buffer.rfind(b"\n"), buffer.rfind(b"\r")) + 1
            if end == len(buffer):  # ends in a CR, which may be the first half of a CRLF
                self._skip_lf = True
            complete = bytes(buffer[:end])
            del buffer[:end]
        self._cut(complete.splitlines())
        if self._eof and self._error is None:
            self._cut([b""])  # the last event, even without its blank line

    def _cut(self, lines: list[bytes]) -> None:
        """Take `lines` (complete, without their ends) into events; an error is kept for later."""
        ready = self._ready
        data, name, size = self._data, self._event, self._size
        try:
            for line in lines:
                if not line:  # the blank line that ends an event
                    if data:
                        if size > self.max_event_bytes:
                            raise SSEError(f"an event exceeds {self.max_event_bytes} bytes")
                        raw = data[0] if len(data) == 1 else b"\n".join(data)
                        ready.append(SSEEvent(name or "message", raw.decode()))
                        data, size = [], 0
                    name = ""
                elif line.startswith(b"data: "):
                    size += len(line)
                    data.append(line[6:])
                elif line.startswith(b"data:"):
                    size += len(line)
                    data.append(line[5:])
                elif line.startswith(b"event:"):
                    name = line[7:].decode() if line[6:7] == b" " else line[6:].decode()
                elif line == b"data":  # "data" alone: an empty line of data
                    data.append(b"")
                elif line == b"event":
                    name = ""
                # Anything else is a comment (":"), or a field we skip (id, retry, unknown).
            if size > self.max_event_bytes:
                raise SSEError(f"an event exceeds {self.max_event_bytes} bytes")
        except UnicodeDecodeError:
            self._error = SSEError("the event stream is not valid UTF-8")
        except SSEError as exc:
            self._error = exc
        self._data, self._event, self._size = data, name, size


# --------------------------------------------------------------------------- one streamed request


class StreamReader(Protocol):
    """A provider's reading of one reply: events in, deltas out, a response at the end."""

    @property
    def done(self) -> bool:
        """True once the reply said it is complete (``[DONE]``, ``message_stop``)."""
        ...

    def handle(self, event: SSEEvent) -> list[ModelDelta]:
        """The deltas `event` carries; raises `ProviderError` for error events or bad data."""
        ...

    def finish(self) -> ModelResponse:
        """The whole response; raises `ModelStreamError` if the reply was incomplete."""
        ...


@record
class ModelCall:
    """One streaming POST a model asks for, and how to read its reply.

    `repr` hides the key, the headers (they hold the key) and the body.
    """

    api: Api
    #: The model as error messages name it.
    model: str
    #: The base URL the model was given, which tells whether the hosted API is asked.
    base_url: str
    url: str
    api_key: str | None = attrs.field(repr=False)
    headers: Mapping[str, str] = attrs.field(repr=False)
    body: Mapping[str, Any] = attrs.field(repr=False)
    #: Makes a fresh reader for each attempt.
    reader: Callable[[ErrorContext, Redactor], StreamReader] = attrs.field(repr=False)
    retry: RetryPolicy
    timeout: httpx.Timeout


class StreamedModel(abc.ABC):
    """What every HTTP provider's model shares: `complete` sends the `call` it builds."""

    # No instance dict of its own: the attrs classes built on it stay slotted.
    __slots__ = ()

    @abc.abstractmethod
    def call(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> ModelCall:
        """The streaming request for `messages`, offering `tools`, with the key as it is now."""

    async def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
        on_delta: OnDelta,
    ) -> ModelResponse:
        """Stream one response, delivering text, reasoning and tool-call deltas as they arrive."""
        return await stream_completion(self.call(messages, tools), on_delta)


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The TLS settings of every model request of this process, made once.

    Made as httpx makes them (its CA bundle, ``SSL_CERT_FILE``/``SSL_CERT_DIR``
    when set); a client left to make its own loads the CA bundle again at every
    request, some 40 ms each.
    """
    return httpx.create_ssl_context()


async def stream_completion(call: ModelCall, on_delta: OnDelta) -> ModelResponse:
    """One model response, streamed: what every provider's `complete` does.

    Fails at once (`ModelAuthError`) when the hosted API is asked without a key.
    Each attempt is a fresh POST of the body to the URL read by a fresh reader;
    failures are retried per the call's `retry`, but only while no delta reached
    `on_delta`. The key travels only in the headers, and error text is scrubbed
    of it (and of any header value that looks like a credential).
    """
    api = call.api
    ctx = ErrorContext(api, call.model, call.url, has_key=bool(call.api_key))
    if not call.api_key and (api.always_needs_key or call.base_url.rstrip("/") == api.hosted_url):
        raise ModelAuthError(f"no API key for the {api.hosted_name}: {ctx.key_hint()}")
    redactor = Redactor(call.api_key, others=header_secrets(call.headers))
    progress = Progress()

    async def attempt(deliver: OnDelta) -> ModelResponse:
        return await stream_once(call, ctx, redactor, deliver, progress)

    return await with_retries(call.retry, attempt, on_delta, progress)


async def stream_once(
    call: ModelCall,
    ctx: ErrorContext,
    redactor: Redactor,
    on_delta: OnDelta,
    progress: Progress | None = None,
) -> ModelResponse:
    """Send `call`, feed the event stream through a fresh reader, deliver deltas as they arrive.

    `progress` is marked before the first delta is delivered.

    A cancel anywhere in here leaves the `async with` blocks, which close the
    response and its connection at once (httpx shields that close), so the
    server sees the disconnect immediately.
    """
    reader = call.reader(ctx, redactor)
    failure: ProviderError | None = None
    try:
        async with (
            httpx.AsyncClient(timeout=call.timeout, verify=tls_context()) as client,
            client.stream(
                "POST", call.url, headers=dict(call.headers), json=dict(call.body)
            ) as response,
        ):
            if response.status_code >= 400:
                body = await _read_capped(response)
                failure = error_for_status(
                    response.status_code, response.headers, body, ctx, redactor
                )
            else:
                ctype = response.headers.get("content-type", "")
                if "text/event-stream" not in ctype:
                    body = await _read_capped(response)
                    said = server_message(body, redactor)[:120]
                    failure = ModelStreamError(
                        f"{ctx.provider} at {ctx.url} answered with {ctype or 'no content type'}"
                        f" instead of an event stream ({said!r}); check that the base URL"
                        " points at the API itself",
                        status=response.status_code,
                    )
                else:
                    return await _pump(response, reader, on_delta, ctx, progress or Progress())
    except httpx.ConnectTimeout:
        failure = ModelConnectError(
            f"timed out connecting to {ctx.provider} at {ctx.url}; check the base URL"
            " and that the server is up"
        )
    except httpx.ConnectError as exc:
        failure = ModelConnectError(
            f"cannot connect to {ctx.provider} at {ctx.url} ({_plain(exc)}); check the"
            " base URL and that the server is running"
        )
    except httpx.TimeoutException:
        failure = ModelTimeoutError(
            f"{ctx.provider} at {ctx.url} sent nothing for {call.timeout.read} s;"
            " the server may be overloaded or stuck (a larger timeout may help)"
        )
    except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
        failure = ModelStreamCutError(
            f"the connection to {ctx.provider} at {ctx.url} broke mid-reply ({_plain(exc)})"
        )
    except httpx.HTTPError as exc:
        failure = ModelStreamError(f"HTTP failure talking to {ctx.provider}: {_plain(exc)}")
    # Raised here, outside the except blocks, so no httpx exception (which holds
    # the request and its headers) is chained as __context__.
    assert failure is not None
    raise failure


async def _pump(
    response: httpx.Response,
    reader: StreamReader,
    on_delta: OnDelta,
    ctx: ErrorContext,
    progress: Progress,
) -> ModelResponse:
    decoder = SSEDecoder()
    try:
        async for chunk in response.aiter_bytes():
            if not chunk:
                continue  # b"" would mean EOF to the decoder
            for event in decoder.feed_events(chunk):
                deltas = reader.handle(event)
                if deltas:
                    progress.delivered = True
                    for delta in deltas:
                        await on_delta(delta)
                if reader.done:
                    return reader.finish()
        decoder.feed(b"")
        for event in decoder.drain():
            deltas = reader.handle(event)
            if deltas:
                progress.delivered = True
                for delta in deltas:
                    await on_delta(delta)
    except SSEError as exc:
        msg = f"{ctx.provider} sent a malformed event stream: {exc}"
    else:
        return reader.finish()
    raise ModelStreamError(msg)


async def _read_capped(response: httpx.Response) -> bytes:
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) >= _MAX_ERROR_BODY:
            break
    return bytes(body[:_MAX_ERROR_BODY])


def _plain(exc: BaseException) -> str:
    # httpx messages name the failure ("[Errno 111] Connection refused") and
    # never the headers; still keep them short and on one line.
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:200]


def parse_json_event(event: SSEEvent, provider: str) -> dict[str, Any]:
    """An event's data as a JSON object, or `ModelStreamError` saying what arrived instead."""
    try:
        data = json.loads(event.data)
    except ValueError:
        shown = event.data[:80]
        raise ModelStreamError(f"{provider} sent an event that is not JSON: {shown!r}") from None
    if not isinstance(data, dict):
        raise ModelStreamError(f"{provider} sent an event that is not a JSON object")
    return data


def parse_arguments(text: str, tool: str, provider: str) -> dict[str, Any]:
    """A tool call's complete argument JSON as a dict (empty text is ``{}``)."""
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        raise ModelStreamError(
            f"{provider} streamed arguments for tool {tool!r} that are not valid JSON"
        ) from None
    if not isinstance(value, dict):
        raise ModelStreamError(
            f"{provider} streamed arguments for tool {tool!r} that are not a JSON object"
        )
    return value

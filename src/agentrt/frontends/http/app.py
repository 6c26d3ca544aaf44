"""The Starlette application: routes, bearer authentication, Host and framing checks, JSON errors."""

from __future__ import annotations

import contextlib
import hmac
import ipaddress
import json
import logging
import re
from collections.abc import AsyncGenerator
from collections.abc import AsyncIterator
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Collection
from typing import Any
from typing import TypeVar

import trio
from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.datastructures import MutableHeaders
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.responses import JSONResponse
from starlette.responses import Response
from starlette.responses import StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp
from starlette.types import Message
from starlette.types import Receive
from starlette.types import Scope
from starlette.types import Send

from ...core.desk import REFUSED
from ...core.desk import refusal
from ...core.errors import NoPendingTaskError
from ...protocol.frames import LIST_PAGE
from ...protocol.frames import LIST_PAGE_MAX
from ...protocol.frames import MESSAGES_PAGE
from ...protocol.frames import MESSAGES_PAGE_MAX
from .bodies import AnswerBody
from .bodies import ApiError
from .bodies import CancelBody
from .bodies import EditBody
from .bodies import ModelBody
from .bodies import ResumeBody
from .bodies import RunBody
from .bodies import UndoBody
from .bodies import error_body
from .bodies import parse_body
from .files import page_files
from .frontend import CURSOR_PATTERN
from .frontend import EVENT_RING
from .frontend import StreamItem
from .frontend import WebFrontEnd
from .frontend import session_id_from_path
from .openapi import openapi_document

log = logging.getLogger("agentrt.http")

#: The largest request body accepted, in bytes.
MAX_BODY = 1024 * 1024
#: Seconds a request body may take to arrive in full.
BODY_SECONDS = 10.0
#: Seconds between keep-alive comments on an idle event stream.
KEEPALIVE_SECONDS = 15.0
#: Sent with every response: no page may frame ours (clickjacking), the page loads
#: only its own files, and no response is sniffed into another type or leaks a referrer.
SECURITY_HEADERS: dict[str, str] = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}

T = TypeVar("T")
Handler = Callable[[Request, Exception], Any]
Endpoint = Callable[[Request], Awaitable[Response]]


def json_error(status: int, code: str, message: str, **headers: str) -> JSONResponse:
    """An error response in the API's one error shape."""
    return JSONResponse(error_body(code, message), status_code=status, headers=headers or None)


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return json_error(exc.status, exc.code, exc.message)


async def _refused(request: Request, exc: Exception) -> Response:
    # The runtime's refusals are answered as every front-end answers them (agentrt.core.desk).
    said = refusal(exc)
    return json_error(said.http_status, said.code, said.message)


async def _client_disconnected(request: Request, exc: Exception) -> Response:
    # The client left while sending its body: there is nobody to answer or to blame.
    return json_error(400, "client_disconnected", "the client closed the connection")


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    path = request.url.path
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    message = {
        404: f"no file {path.removeprefix('/static/')!r} among the page's files"
        if path.startswith("/static/")
        else f"no route {path}; the routes are listed at /openapi.json",
        405: f"{request.method} is not allowed on {path}",
    }.get(exc.status_code, str(exc.detail))
    return json_error(exc.status_code, code, message, **(exc.headers or {}))


async def _internal(request: Request, exc: Exception) -> Response:
    # Starlette raises the error on after this answer, and hypercorn logs it with its
    # traceback; one request's failure never stops the server.
    log.error("%s %s failed: %s", request.method, request.url.path, type(exc).__name__)
    return json_error(500, "internal", f"the server failed: {type(exc).__name__}")


#: Which failure becomes which answer; Starlette picks the handler by the error's class.
EXCEPTION_HANDLERS: dict[Any, Handler] = {
    ApiError: _api_error,
    **dict.fromkeys(REFUSED, _refused),
    ClientDisconnect: _client_disconnected,
    HTTPException: _http_error,
    Exception: _internal,
}


async def _read_limited(request: Request, limit: int) -> bytes:
    _check_declared_length(request.headers, limit)
    chunks: list[bytes] = []
    size = 0
    # Closed at once when left early (too large, too slow), not by the garbage collector.
    with trio.move_on_after(BODY_SECONDS) as deadline:
        async with contextlib.aclosing(request.stream()) as body:
            async for chunk in body:
                size += len(chunk)
                if size > limit:
                    raise ApiError(413, "body_too_large", f"the body is larger than {limit} bytes")
                chunks.append(chunk)
    if deadline.cancelled_caught:
        raise ApiError(
            408,
            "body_timeout",
            f"the body did not arrive within {BODY_SECONDS:g} seconds; send it at once",
        )
    return b"".join(chunks)


async def read_body(request: Request, cls: type[T]) -> T:
    """The request's JSON body as `cls`: checks content type and size, reads at most `MAX_BODY`.

    The whole body must arrive within `BODY_SECONDS`: a client that sends it
    byte by byte gets a 408 instead of holding a connection for ever.
    """
    raw = await _read_limited(request, MAX_BODY)
    if raw.strip():
        media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if media_type != "application/json":
            raise ApiError(
                415,
                "unsupported_media_type",
                "send the body as JSON with 'Content-Type: application/json'",
            )
    return parse_body(raw, cls)


def _check_declared_length(headers: Headers, limit: int = MAX_BODY) -> None:
    length = headers.get("content-length")
    if length is None:
        return
    if not length.isdigit():
        raise ApiError(400, "bad_request", "Content-Length is not a number")
    # Compared as text first: a Content-Length of thousands of digits is not worth an int().
    if len(length.lstrip("0")) > len(str(limit)) or int(length) > limit:
        raise ApiError(413, "body_too_large", f"the body is larger than {limit} bytes")


def _session(request: Request) -> str:
    return session_id_from_path(request.path_params["session_id"])


def _started(session_id: str, task_hash: str) -> JSONResponse:
    """202 Accepted: a run of `session_id` has started as the task `task_hash`."""
    return JSONResponse({"session_id": session_id, "task_hash": task_hash}, status_code=202)


async def _text_body(request: Request, kind: type[RunBody | EditBody], what: str) -> str:
    """The text of the request's body, refused (400) when it is all whitespace."""
    body = await read_body(request, kind)
    if not body.text.strip():
        raise ApiError(400, "bad_body", f"{what} must not be empty")
    return body.text


def build_app(frontend: WebFrontEnd, token: str, *, hosts: Collection[str]) -> ASGIApp:
    """The ASGI application of the HTTP API and the web page, guarded by `token`.

    `hosts` are the values of the ``Host`` header it answers to (see
    `allowed_hosts`); a request naming any other host is refused.
    """
    files = page_files()
    page = files["/static/"].page()
    document = openapi_document()

    async def index(request: Request) -> Response:
        return HTMLResponse(page, headers={"Cache-Control": "no-store"})

    async def openapi(request: Request) -> Response:
        return JSONResponse(document)

    async def sessions(request: Request) -> Response:
        limit = _query_int(request, "limit", LIST_PAGE, 1, LIST_PAGE_MAX)
        cursor = request.query_params.get("cursor")
        if cursor is not None and re.fullmatch(CURSOR_PATTERN, cursor) is None:
            raise ApiError(
                400,
                "bad_query",
                f"not a listing cursor: {cursor[:40]!r}; pass the `next` of a page",
            )
        listed, after = await frontend.sessions(limit=limit, cursor=cursor)
        return JSONResponse({"sessions": listed, "next": after})

    async def session_messages(request: Request) -> Response:
        session_id = _session(request)
        after = _query_int(request, "after", -1, -1, None)
        limit = _query_int(request, "limit", MESSAGES_PAGE, 1, MESSAGES_PAGE_MAX)
        return JSONResponse(await frontend.messages(session_id, after=after, limit=limit))

    async def forget_session(request: Request) -> Response:
        session_id = _session(request)
        await frontend.forget(session_id)
        return JSONResponse({"session_id": session_id, "deleted": True})

    async def undo(request: Request) -> Response:
        session_id = _session(request)
        body = await read_body(request, UndoBody)
        return JSONResponse(await frontend.undo(session_id, body))

    async def turns(request: Request) -> Response:
        session_id = _session(request)
        return JSONResponse({"session_id": session_id, "turns": await frontend.turns(session_id)})

    async def get_task(request: Request) -> Response:
        session_id = _session(request)
        task = await frontend.task(session_id)
        if task is None:
            raise NoPendingTaskError(f"session {session_id} has no pending task")
        return JSONResponse({"task": task})

    async def discard_task(request: Request) -> Response:
        session_id = _session(request)
        if not await frontend.discard(session_id):
            raise NoPendingTaskError(f"session {session_id} has no pending task")
        return JSONResponse({"session_id": session_id, "discarded": True})

    async def resume_task(request: Request) -> Response:
        session_id = _session(request)
        body = await read_body(request, ResumeBody)
        return _started(
            session_id, await frontend.resume(session_id, body.answer, body.question_id)
        )

    async def run(request: Request) -> Response:
        session_id = _session(request)
        text = await _text_body(request, RunBody, "the text of a run")
        return _started(session_id, await frontend.start_run(session_id, text))

    async def regenerate(request: Request) -> Response:
        session_id = _session(request)
        return _started(session_id, await frontend.redo(session_id))

    async def edit(request: Request) -> Response:
        session_id = _session(request)
        text = await _text_body(request, EditBody, "the edited message")
        return _started(session_id, await frontend.redo(session_id, text))

    async def models(request: Request) -> Response:
        return JSONResponse(frontend.models())

    async def get_model(request: Request) -> Response:
        return JSONResponse(await frontend.session_model(_session(request)))

    async def set_model(request: Request) -> Response:
        session_id = _session(request)
        body = await read_body(request, ModelBody)
        if not body.model:
            raise ApiError(400, "bad_body", "name the model (one GET /v1/models lists)")
        return JSONResponse(await frontend.choose_model(session_id, body.model))

    async def cancel(request: Request) -> Response:
        body = await read_body(request, CancelBody)
        info = await frontend.cancel_anywhere(request.path_params["task_hash"], body.cause)
        return JSONResponse(
            {"task_hash": info.task_hash, "session_id": info.session_id, "cause": body.cause.value}
        )

    async def questions(request: Request) -> Response:
        raw = request.query_params.get("session")
        session = session_id_from_path(raw) if raw is not None else None
        return JSONResponse({"questions": frontend.questions(session)})

    async def answer(request: Request) -> Response:
        body = await read_body(request, AnswerBody)
        question_id = request.path_params["question_id"]
        frontend.answer(question_id, body.value, body.secret, body.session_id)
        return JSONResponse({"id": question_id, "answered": True})

    async def events(request: Request) -> Response:
        raw = request.query_params.get("session")
        session = session_id_from_path(raw) if raw is not None else None
        last = request.headers.get("last-event-id")
        return _ClosingStreamingResponse(
            _event_stream(frontend, session=session, last_event_id=last),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )

    # One route per path, whatever its methods: a 405 then lists in `Allow` every
    # method the path has, not only those of the first route that matched it.
    handlers: dict[str, dict[str, Endpoint]] = {
        "/": {"GET": index},
        "/openapi.json": {"GET": openapi},
        "/v1/sessions": {"GET": sessions},
        "/v1/sessions/{session_id}": {"DELETE": forget_session},
        "/v1/sessions/{session_id}/messages": {"GET": session_messages},
        "/v1/sessions/{session_id}/undo": {"POST": undo},
        "/v1/sessions/{session_id}/turns": {"GET": turns},
        "/v1/session/{session_id}/task": {"GET": get_task, "DELETE": discard_task},
        "/v1/session/{session_id}/task/resume": {"POST": resume_task},
        "/v1/session/{session_id}/run": {"POST": run},
        "/v1/session/{session_id}/regenerate": {"POST": regenerate},
        "/v1/session/{session_id}/edit": {"POST": edit},
        "/v1/session/{session_id}/model": {"GET": get_model, "PUT": set_model},
        "/v1/models": {"GET": models},
        "/v1/task/{task_hash}/cancel": {"POST": cancel},
        "/v1/questions": {"GET": questions},
        "/v1/questions/{question_id}/answer": {"POST": answer},
        "/v1/events": {"GET": events},
    }
    routes = [
        *(Route(f"{prefix}{{name}}", folder, methods=["GET"]) for prefix, folder in files.items()),
        *(_route(path, by_method) for path, by_method in handlers.items()),
    ]
    app = Starlette(routes=routes, exception_handlers=EXCEPTION_HANDLERS)
    # The page and its own files carry no secret, and a browser cannot send a header
    # when it navigates or loads a script; the API's document holds nothing secret
    # either: they are the only routes without the token.
    public = {"/", "/openapi.json"} | {
        f"{prefix}{name}" for prefix, folder in files.items() for name in folder.names()
    }
    return _Guard(app, token, hosts=frozenset(hosts), public=frozenset(public))


def _route(path: str, by_method: dict[str, Endpoint]) -> Route:
    """A route for every method of `path`, each with its own endpoint."""
    if len(by_method) == 1:
        ((method, endpoint),) = by_method.items()
        return Route(path, endpoint, methods=[method])

    async def dispatch(request: Request) -> Response:
        # Starlette answers HEAD as GET and refuses every method not in `methods`.
        method = "GET" if request.method == "HEAD" else request.method
        return await by_method[method](request)

    return Route(path, dispatch, methods=list(by_method))


class _ClosingStreamingResponse(StreamingResponse):
    """A `StreamingResponse` that closes its generator when the response ends.

    A client that goes while the server waits to send leaves the generator
    stopped at a ``yield``; Starlette drops it there. Closed here, it lets go
    of what it holds (the event feed's subscription) at once, not when the
    collector finds it.
    """

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            body = self.body_iterator
            if isinstance(body, AsyncGenerator):
                with trio.CancelScope(shield=True):
                    await body.aclose()


async def _event_stream(
    frontend: WebFrontEnd, *, session: str | None, last_event_id: str | None
) -> AsyncIterator[str]:
    """The `/v1/events` stream: ``ready``, then what the client missed, then live events.

    Every event carries an ``id:``. ``ready`` carries the id the stream starts
    from (the client's ``Last-Event-ID`` when the events after it are kept, else
    the newest), so a client that reconnects with it misses nothing. When the
    events after the client's id are no longer kept, ``reload`` follows
    ``ready`` (with the same id): what happened meanwhile must be read afresh.
    """
    given = (last_event_id or "").strip()
    after: int | None = None
    if last_event_id is not None:
        # An id this server never gave (not a number) cannot be replayed from: -1 is
        # older than any, so it gets `reload`.
        after = int(given) if given.isascii() and given.isdigit() and len(given) <= 20 else -1
    with frontend.subscribe(after=after, session=session) as feed:
        questions = frontend.questions(session)
        yield "retry: 1000\n" + _sse(feed.start, {"type": "ready", "questions": questions})
        if feed.lost:
            reason = (
                f"the events after {given[:40]!r} are not kept here (this server keeps its "
                f"last {EVENT_RING}, numbered from when it started); read the sessions and "
                "their messages again"
            )
            yield _sse(feed.start, {"type": "reload", "reason": reason})
        for item in feed.replay:
            yield _sse_item(item)
        channel = feed.channel
        while True:
            with trio.move_on_after(KEEPALIVE_SECONDS) as idle:
                try:
                    item = await channel.receive()
                except (trio.EndOfChannel, trio.ClosedResourceError):
                    return
            if idle.cancelled_caught:
                yield ": keep-alive\n\n"
            else:
                yield _sse_item(item)


def _sse(event_id: int, obj: dict[str, Any]) -> str:
    data = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    return f"id: {event_id}\ndata: {data}\n\n"


def _sse_item(item: StreamItem) -> str:
    return f"id: {item.id}\ndata: {item.data}\n\n"


def _query_int(request: Request, name: str, default: int, low: int, high: int | None) -> int:
    """The integer query parameter `name`, `default` when absent; 400 ``bad_query`` when it is
    not a whole number from `low` to `high`."""
    raw = request.query_params.get(name)
    if raw is None:
        return default
    text = raw.strip()
    digits = text.removeprefix("-")
    fits = digits.isascii() and digits.isdigit() and len(digits) <= 18
    value = int(text) if fits else None
    if value is None or value < low or (high is not None and value > high):
        bound = f"from {low} to {high}" if high is not None else f"of at least {low}"
        raise ApiError(400, "bad_query", f"{name} must be a whole number {bound}, not {raw[:40]!r}")
    return value


def allowed_hosts(host: str, port: int) -> frozenset[str]:
    """The ``Host`` values a server bound to `host`:`port` answers to.

    The bound address and the loopback names (``localhost``, ``127.0.0.1``,
    ``[::1]``), each with the port; without it when the port is 80. A DNS
    rebinding page reaches the server under its own name (``evil.example:PORT``),
    which is none of these, so it is refused. A server bound to every address
    (``0.0.0.0``, ``::``) also answers to any IP address, never to a name.
    """
    bound = f"[{host}]" if ":" in host else host
    names = {bound.lower(), "localhost", "127.0.0.1", "[::1]"}
    hosts = {f"{name}:{port}" for name in names}
    if port == 80:
        hosts |= names
    if host in ("0.0.0.0", "::"):
        hosts.add(_ANY_IP)
    return frozenset(hosts)


# A marker in the allowed hosts: any IP address literal (with the port) is fine.
_ANY_IP = "*ip*"


def _host_is_ip(host: str) -> bool:
    name = host.rpartition(":")[0] if not host.endswith("]") else host
    try:
        ipaddress.ip_address(name.strip("[]"))
    except ValueError:
        return False
    return True


class _RequestBody:
    """A request's ASGI ``receive``: the application's, then, once it answers, `drain`'s.

    hypercorn passes a request's body to the application through a queue of
    10 messages (``Config.max_app_queue_size``) and stops reading the
    connection while that queue is full. When a response ends, it puts
    ``http.disconnect`` in that same queue, from within the application's last
    ``send``. A route that answered without reading a body that came in more
    than 10 pieces (a GET with a body, a 401 or a 404 before the body was
    read) left the queue full: that ``send`` never returned and the connection
    was never read again, so the client's next request on it waited for ever.

    No route reads the body once its answer has started: from then on `drain`
    receives what the client still sends and drops it, so the queue always
    has room. One message is received at a time, and a disconnect is kept:
    a response that listens for the client leaving (`StreamingResponse`) is
    told of it whoever received it.
    """

    def __init__(self, receive: Receive) -> None:
        self._receive = receive
        self._one_at_a_time = trio.Lock()
        self._left = False

    async def receive(self) -> Message:
        """The next message of the request; ``http.disconnect`` for ever once the client left."""
        async with self._one_at_a_time:
            if self._left:
                return {"type": "http.disconnect"}
            message = await self._receive()
            self._left = message["type"] == "http.disconnect"
            return message

    async def drain(self) -> None:
        """Receive and drop the rest of the body until the client has left (or cancelled)."""
        while (await self.receive())["type"] != "http.disconnect":
            pass


class _Guard:
    """Checks every request before the application sees it.

    In order: the ``Host`` header names this server (against DNS rebinding,
    421 otherwise); a declared body is not too large (413, before a byte is
    read); the ``Authorization: Bearer`` header carries the token, except on
    the page and its files. No cookie is ever read or set: a browser would
    send one to any other server on the same host, whatever its port. Every
    response gets `SECURITY_HEADERS`. Once a response starts, what the client
    still sends of its body is read and dropped (`_RequestBody`).
    """

    def __init__(
        self, app: ASGIApp, token: str, *, hosts: frozenset[str], public: frozenset[str]
    ) -> None:
        self.app = app
        self._token = token.encode()
        self._hosts = hosts
        self._public = public

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        body = _RequestBody(receive)
        failure: BaseException | None = None
        try:
            async with trio.open_nursery() as nursery:

                async def send_secured(message: Message) -> None:
                    if message["type"] == "http.response.start":
                        headers = MutableHeaders(scope=message)
                        for name, value in SECURITY_HEADERS.items():
                            headers.setdefault(name, value)
                        nursery.start_soon(body.drain)
                    await send(message)

                try:
                    await self._answer(scope, body.receive, send_secured)
                finally:
                    # The response is sent (or never will be): the drain has done its part.
                    nursery.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            # The drain raises nothing: the answer's own error goes on as it was raised,
            # not in the group the nursery put it in.
            failure = group.exceptions[0] if len(group.exceptions) == 1 else group
        if failure is not None:
            raise failure

    async def _answer(self, scope: Scope, receive: Receive, send: Send) -> None:
        problem = self._check(scope)
        if problem is None:
            await self.app(scope, receive, send)
            return
        status, code, message = problem
        headers = {"WWW-Authenticate": "Bearer"} if status == 401 else {}
        await json_error(status, code, message, **headers)(scope, receive, send)

    def _check(self, scope: Scope) -> tuple[int, str, str] | None:
        headers = Headers(scope=scope)
        host = headers.get("host", "").lower()
        if host not in self._hosts and not (_ANY_IP in self._hosts and _host_is_ip(host)):
            shown = sorted(h for h in self._hosts if h != _ANY_IP)
            return (
                421,
                "bad_host",
                f"this server does not answer to the host {host[:100]!r}; "
                f"use http://{shown[0]}/ (it answers to {', '.join(shown)})",
            )
        try:
            # Before anything else: a body too large is refused without reading a byte of it.
            _check_declared_length(headers)
        except ApiError as exc:
            return exc.status, exc.code, exc.message
        if scope["path"] in self._public:
            return None
        authorization = headers.get("authorization")
        if authorization is None:
            return (
                401,
                "missing_token",
                "this needs 'Authorization: Bearer TOKEN' ('agentrt token' prints it); "
                "in a browser, open the page at / and log in there",
            )
        scheme, _, value = authorization.partition(" ")
        if scheme.lower() != "bearer" or not value.strip():
            return (
                401,
                "bad_token",
                "use 'Authorization: Bearer TOKEN' ('agentrt token' prints it)",
            )
        if not hmac.compare_digest(value.strip().encode(), self._token):
            return 401, "bad_token", "the bearer token is wrong ('agentrt token' prints it)"
        return None

"""Bad input: property-based fuzzing of the frame codec, the daemon socket and the HTTP API.

Every generated input is counted. The properties:

* **codec**: any bytes, split at any offsets, decode to the same items as fed
  whole; every non-blank line yields exactly one frame or one `ProtocolError`
  with a message; nothing raises; a decoded frame re-encodes to itself.
* **socket**: on a live connection of the real daemon (a child process),
  every bad line gets exactly one ``error`` frame with a code and a message,
  in order, and the connection carries on. Fresh connections get garbage
  before ``hello`` and lines cut off by the end of the stream. A canary
  connection holds a question open the whole time and finishes its run at
  the end; the daemon process never exits.
* **http**: every route, with and without the token, with malformed,
  truncated, non-UTF-8, deeply nested, oversized and mistyped bodies and odd
  path segments: never a 5xx, every error in the API's JSON error shape, and
  a canary request keeps working. Raw garbage on the TCP port gets a 4xx or
  a closed connection, never a dead server.
* **big numbers**: integers of thousands of digits (past Python's 4,300-digit
  conversion limit) anywhere in a frame or a body, fuzzed and, at 5,000 digits,
  in every field of every frame and body: a clear error each, and no
  connection but the offending request's is affected.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any
from typing import Literal

import attrs
import httpx
import hypothesis
import trio
from hypothesis import HealthCheck
from hypothesis import Phase
from hypothesis import settings
from hypothesis import strategies as st

from agentrt.http import load_or_create_token
from agentrt.protocol.codec import EOF
from agentrt.protocol.codec import NEED_DATA
from agentrt.protocol.codec import FrameCodec
from agentrt.protocol.codec import ProtocolError
from agentrt.protocol.codec import encode
from agentrt.protocol.frames import PROTOCOL_VERSION
from agentrt.protocol.frames import AnswerFrame
from agentrt.protocol.frames import Hello
from agentrt.protocol.frames import PendingAction
from agentrt.protocol.frames import PendingRequest
from agentrt.protocol.frames import Run

from ._common import DaemonProcess
from ._common import SuiteResult
from ._common import http_base
from ._common import short_tempdir

#: How the socket and HTTP properties split the inputs (the codec takes the rest).
SHARE = {"socket": 0.45, "fresh": 0.03, "http": 0.08, "raw_http": 0.01}
#: The examples of the big-number properties, on top (as a share of the total).
BIG_SHARE = {"codec": 0.03, "socket": 0.02, "http": 0.01}

_SAMPLES: tuple[dict[str, Any], ...] = (
    {"type": "hello", "version": PROTOCOL_VERSION, "window": "w1"},
    {"type": "run", "text": "hello", "session": "cli-x"},
    {"type": "answer", "ask": "a1", "value": "allow", "secret": None},
    {"type": "cancel", "task": "0123456789ab", "pause": True},
    {"type": "pending", "action": "list", "session": None, "answer": None},
    {"type": "pending", "action": "resume", "session": "cli-nope", "answer": "x"},
    {"type": "pending", "action": "discard", "session": "cli-nope"},
)

_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=30)
)
_json = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
#: JSON numbers of thousands of digits. Python refuses to convert an int of more than 4,300
#: digits (CVE-2020-10735), so `json.loads` raises a plain ValueError for them: a decoder
#: that only expects `JSONDecodeError` lets it through. They are spliced in as text.
_big_number = st.builds(
    lambda sign, digits, tail: sign + "1" * digits + tail,
    st.sampled_from(["", "-"]),
    st.integers(4_301, 6_000) | st.just(5_000),
    st.sampled_from(["", "", ".5", "e3"]),
)
_BIG = "BIG-NUMBER-HERE"
#: Whether a strategy puts such a number in ("always": every example has one).
Big = Literal["never", "always"]
_DIGITS = "7" * 5_000
_odd_text = st.sampled_from(
    ["\ud800", "a\udfffb", "\x00", "\u202e", "\ufeff", "💥" * 40, "x" * 5000, "", " ", "\n"]
)


@st.composite
def mutated_frame(draw: st.DrawFn, big: Big = "never") -> bytes:
    """A real client frame with one thing wrong, as one line (no newline).

    `big` says whether the wrong thing is a number of thousands of digits.
    """
    data = dict(draw(st.sampled_from(_SAMPLES)))
    how = (
        "big"
        if big == "always"
        else draw(
            st.sampled_from(
                ["drop", "retype", "extra", "type", "odd_text", "nest", "not_object", "none"]
            )
        )
    )
    keys = [k for k in data if k != "type"]
    if how == "drop" and keys:
        del data[draw(st.sampled_from(keys))]
    elif how == "retype" and keys:
        data[draw(st.sampled_from(keys))] = draw(_json)
    elif how == "extra":
        data[draw(st.text(min_size=1, max_size=10))] = draw(_json)
    elif how == "type":
        data["type"] = draw(_json | st.sampled_from(["", "HELLO", "ask", "ended", "error"]))
    elif how == "odd_text" and keys:
        data[draw(st.sampled_from(keys))] = draw(_odd_text)
    elif how == "nest" and keys:
        depth = draw(st.integers(1, 3000))
        data[draw(st.sampled_from(keys))] = "NEST"
        text = json.dumps(data).replace('"NEST"', "[" * depth + "]" * depth)
        return text.encode()
    elif how == "not_object":
        return json.dumps(draw(st.lists(_json, max_size=3) | _scalars)).encode()
    elif how == "big":
        data[draw(st.sampled_from([*keys, "x"]))] = draw(st.sampled_from([_BIG, [_BIG]]))
    raw = json.dumps(data, allow_nan=True).encode()
    raw = raw.replace(f'"{_BIG}"'.encode(), draw(_big_number).encode())
    cut = draw(st.sampled_from(["whole", "whole", "truncate", "bad_utf8", "flip"]))
    if cut == "truncate" and len(raw) > 1:
        raw = raw[: draw(st.integers(1, len(raw) - 1))]
    elif cut == "bad_utf8":
        at = draw(st.integers(0, len(raw)))
        raw = (
            raw[:at]
            + draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x80\x80"]))
            + raw[at:]
        )
    elif cut == "flip" and raw:
        at = draw(st.integers(0, len(raw) - 1))
        raw = raw[:at] + bytes([draw(st.integers(0, 255))]) + raw[at + 1 :]
    return raw.replace(b"\n", b" ")


@st.composite
def deep_line(draw: st.DrawFn) -> bytes:
    """Deeply nested JSON, closed or not."""
    # json gives up past ~1,000 levels; a few much deeper ones check nothing grows with depth.
    depth = draw(
        st.integers(500, 3000) | st.integers(500, 3000) | st.sampled_from([20_000, 100_000])
    )
    opener = draw(st.sampled_from([b"[", b'{"a":', b'{"type":"run","text":']))
    closer = {b"[": b"]"}.get(opener, b"}")
    closed = draw(st.booleans())
    return opener * depth + (b"1" + closer * depth if closed else b"")


def line_strategy(big: Big = "never") -> st.SearchStrategy[bytes]:
    """One line of bad (or odd) client input, without its newline."""
    if big == "always":
        return mutated_frame(big)
    return st.one_of(
        mutated_frame(big),
        mutated_frame(big),
        mutated_frame(big),
        st.binary(max_size=200).map(lambda b: b.replace(b"\n", b" ")),
        deep_line(),
        st.text(max_size=100).map(
            lambda t: t.encode("utf-8", "surrogatepass").replace(b"\n", b" ")
        ),
    )


def _settings(examples: int, seed: int) -> Callable[[Callable[..., None]], Callable[..., None]]:
    rules = settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=False,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.explicit, Phase.generate, Phase.shrink],
        print_blob=False,
    )

    def apply(fn: Callable[..., None]) -> Callable[..., None]:
        return hypothesis.seed(seed)(rules(fn))

    return apply


# -- codec --------------------------------------------------------------------


def _items(codec: FrameCodec[Any]) -> list[object]:
    out: list[object] = []
    while True:
        item = codec.next_frame()
        if item is NEED_DATA or item is EOF:
            return out
        out.append(item)


def _items_expected(data: bytes, limit: int) -> int:
    """How many items `data` (then the end of the stream) must decode to."""
    *lines, last = data.split(b"\n")
    count = sum(1 for ln in lines if len(ln) > limit or ln.strip())
    # What follows the last newline is cut off by the end of the stream (or too long).
    return count + (1 if last else 0)


def fuzz_codec(examples: int, seed: int, big: Big = "never") -> int:
    """Run the codec property on `examples` inputs; return how many ran (raises on failure)."""
    count = 0

    @_settings(examples, seed)
    @hypothesis.given(
        lines=st.lists(line_strategy(big), min_size=1, max_size=5),
        cuts=st.lists(st.integers(0, 10_000), max_size=6),
        final_newline=st.booleans(),
        small=st.booleans(),
    )
    def check(lines: list[bytes], cuts: list[int], final_newline: bool, small: bool) -> None:
        nonlocal count
        count += len(lines)
        limit = 64 if small else 1024 * 1024
        data = b"\n".join(lines) + (b"\n" if final_newline else b"")
        whole = FrameCodec.for_daemon(max_frame_size=limit)
        if data:
            whole.feed(data)
        whole.feed(b"")
        expected = _items(whole)
        split = FrameCodec.for_daemon(max_frame_size=limit)
        got: list[object] = []
        start = 0
        for cut in sorted(c % (len(data) + 1) for c in cuts):
            split.feed(data[start:cut]) if cut > start else None
            got.extend(_items(split))
            start = max(start, cut)
            assert split.buffered <= limit + len(data), "the codec buffered past its cap"
        if start < len(data):
            split.feed(data[start:])
        split.feed(b"")
        got.extend(_items(split))
        assert got == expected, f"split decoding differs: {got!r} != {expected!r}"
        assert len(expected) == _items_expected(data, limit), "not one item per line"
        for item in expected:
            if isinstance(item, ProtocolError):
                assert item.message and item.code, "an error without a message"
            else:
                again = FrameCodec.for_daemon()
                again.feed(encode(item))  # type: ignore[arg-type]
                assert _items(again) == [item], "a decoded frame does not re-encode to itself"

    check()
    return count


# -- the daemon socket --------------------------------------------------------------


class _Line:
    """A blocking line-oriented connection to the daemon's socket."""

    def __init__(self, path: Path, timeout: float = 10.0) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(os.fspath(path))
        self.buffer = b""

    def hello(self, window: str) -> None:
        self.send(encode(Hello(PROTOCOL_VERSION, window)))
        frame = self.frame()
        assert frame.get("type") == "hello", f"hello refused: {frame}"

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def line(self) -> bytes | None:
        while b"\n" not in self.buffer:
            chunk = self.sock.recv(65536)
            if not chunk:
                return None
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line

    def frame(self) -> dict[str, Any]:
        line = self.line()
        assert line is not None, "the daemon closed the connection"
        obj: dict[str, Any] = json.loads(line)
        return obj

    def close(self) -> None:
        self.sock.close()


def _expected_reply(line: bytes) -> str | None:
    """What the daemon answers to `line` on a ready connection: "error", or None to skip it."""
    if not line.strip():
        return "blank"
    reference = FrameCodec.for_daemon()
    reference.feed(line + b"\n")
    try:
        item = reference.next_frame()
    except Exception:  # the codec property reports this; the daemon still owes an error
        return "error"
    if isinstance(item, ProtocolError):
        return "error"
    if isinstance(item, Run):
        # A run of a terminal session would really run; others are refused at once.
        session = item.session
        return None if session is None or session.startswith("cli-") else "error"
    if isinstance(item, PendingRequest) and item.action is PendingAction.LIST:
        return None
    return "error"  # hello again, answers, cancels, resumes and discards of nothing


@attrs.define
class _Canary:
    """A connection whose run waits on a question the whole time; answered at the end."""

    conn: _Line
    ask_id: str = ""

    @classmethod
    def open(cls, path: Path) -> _Canary:
        conn = _Line(path)
        conn.hello("canary-window")
        conn.send(encode(Run("ask still there?", session="cli-canary")))
        canary = cls(conn)
        while not canary.ask_id:
            frame = conn.frame()
            if frame["type"] == "ask":
                canary.ask_id = frame["id"]
        return canary

    def ping(self) -> None:
        self.conn.send(encode(PendingRequest(PendingAction.LIST)))
        while True:
            frame = self.conn.frame()
            if frame["type"] == "pending":
                return

    def finish(self) -> None:
        self.conn.send(encode(AnswerFrame(self.ask_id, "yes")))
        while True:
            frame = self.conn.frame()
            if frame["type"] == "ended":
                assert frame["outcome"] == "finished", f"the canary's run ended {frame}"
                return


def fuzz_socket(path: Path, examples: int, seed: int, canary: _Canary, big: Big = "never") -> int:
    """Bad lines on one ready connection: one error frame each, in order."""
    count = 0
    windows = 0
    live: list[_Line] = []

    def connection() -> _Line:
        nonlocal windows
        if not live:
            windows += 1
            conn = _Line(path)
            conn.hello(f"fuzz-window-{windows}")
            live.append(conn)
        return live[0]

    @_settings(examples, seed)
    @hypothesis.given(lines=st.lists(line_strategy(big), min_size=1, max_size=8))
    def check(lines: list[bytes]) -> None:
        nonlocal count
        count += len(lines)
        wanted = [(ln, _expected_reply(ln)) for ln in lines]
        sent = [(ln, w) for ln, w in wanted if w == "error"]
        conn = connection()
        try:
            conn.send(
                b"".join(ln + b"\n" for ln, _ in sent) + encode(PendingRequest(PendingAction.LIST))
            )
            for ln, _ in sent:
                frame = conn.frame()
                assert frame.get("type") == "error", f"{ln[:200]!r} got {frame}, not an error"
                assert frame.get("code") and frame.get("message"), f"unclear error {frame}"
            frame = conn.frame()
            assert frame.get("type") == "pending", f"expected the pending list, got {frame}"
        except BaseException:
            # The next example starts on a new connection: one failure must not make every
            # later example fail (hypothesis then shrinks to the input that really broke it).
            live.pop().close()
            raise
        if count % 1000 < len(lines):
            canary.ping()

    try:
        check()
    finally:
        for conn in live:
            conn.close()
    return count


def fuzz_fresh(path: Path, examples: int, seed: int) -> int:
    """Garbage before hello, and lines cut off by the end of the stream."""
    count = 0

    @_settings(examples, seed)
    @hypothesis.given(
        before=st.lists(line_strategy(), max_size=3),
        tail=line_strategy(),
        hello=st.booleans(),
    )
    def check(before: list[bytes], tail: bytes, hello: bool) -> None:
        nonlocal count
        count += len(before) + 1
        conn = _Line(path)
        try:
            if hello:
                conn.hello(f"fresh-{count}")
            # Lines that would start real runs are left out: their replies come later, from
            # the run, and would interleave with the errors checked here.
            sent = []  # the lines that must each get an error
            lines = []
            ready = hello
            for ln in before:
                if not ready and _is_hello(ln):
                    ready = True  # the first valid hello is welcomed, not refused
                    lines.append(ln)
                elif _expected_reply(ln) == "error":
                    sent.append(ln)
                    lines.append(ln)
            payload = b"".join(ln + b"\n" for ln in lines) + tail
            conn.send(payload)
            conn.sock.shutdown(socket.SHUT_WR)
            replies = []
            while (line := conn.line()) is not None:
                replies.append(json.loads(line))
            errors = [r for r in replies if r.get("type") == "error"]
            for r in errors:
                assert r.get("code") and r.get("message"), f"unclear error {r}"
            if any(_hello_refused(r) for r in errors):
                return  # a refused hello ends the connection: what follows is not read
            assert len(errors) >= len(sent), f"{len(sent)} bad lines got {replies}"
            if tail.strip():
                assert errors and errors[-1]["code"] in ("truncated", "too_large"), (
                    f"a frame cut off by the end of the stream got {replies[-1:]}"
                )
        finally:
            conn.close()

    check()
    return count


def _is_hello(line: bytes) -> bool:
    """Whether `line` is a well-formed hello (which a connection not yet ready accepts)."""
    reference = FrameCodec.for_daemon()
    reference.feed(line + b"\n")
    try:
        return isinstance(reference.next_frame(), Hello)
    except Exception:
        return False


def _hello_refused(reply: dict[str, Any]) -> bool:
    """A refusal of a well-formed hello, after which the daemon closes the connection."""
    message = str(reply.get("message", ""))
    return reply.get("ref") == "hello" and (
        reply.get("code") == "version"
        or message.startswith(("the window hash", "another live connection"))
    )


# -- HTTP ---------------------------------------------------------------------------

_ROUTES: tuple[tuple[str, str], ...] = (
    ("GET", "/v1/sessions"),
    ("GET", "/v1/sessions/{s}/messages"),
    ("DELETE", "/v1/sessions/{s}"),
    ("GET", "/v1/session/{s}/task"),
    ("DELETE", "/v1/session/{s}/task"),
    ("POST", "/v1/session/{s}/task/resume"),
    ("POST", "/v1/session/{s}/run"),
    ("POST", "/v1/task/{s}/cancel"),
    ("GET", "/v1/questions"),
    ("POST", "/v1/questions/{s}/answer"),
    ("GET", "/openapi.json"),
    ("GET", "/static/{s}"),
    ("POST", "/logout"),
    ("PUT", "/v1/sessions"),
    ("PATCH", "/v1/session/{s}/run"),
    ("GET", "/{s}"),
)

_segment = st.one_of(
    st.text(min_size=1, max_size=40),
    st.sampled_from(
        ["chat-x", "cli-x", "tg-1", "..", "%2F", "%00", "%ff%fe", "%ED%A0%80", "a" * 300]
    ),
    st.binary(min_size=1, max_size=20).map(lambda b: "".join(f"%{x:02X}" for x in b)),
)


@st.composite
def http_body(draw: st.DrawFn, big: Big = "never") -> tuple[bytes, str | None]:
    kinds = ["json", "json", "frame", "raw", "deep", "empty", "big"]
    kind = "json" if big == "always" else draw(st.sampled_from(kinds))
    ctype = draw(st.sampled_from(["application/json", "application/json", "text/plain", None]))
    if kind == "json":
        body = draw(
            st.dictionaries(
                st.sampled_from(["text", "answer", "pause", "value", "secret", "x"]),
                st.just(_BIG) if big == "always" else _json | _odd_text,
                min_size=1 if big == "always" else 0,
                max_size=3,
            )
        )
        raw = json.dumps(body, allow_nan=True).encode("utf-8", "surrogatepass")
        return raw.replace(f'"{_BIG}"'.encode(), draw(_big_number).encode()), ctype
    if kind == "frame":
        return draw(mutated_frame(big)), ctype
    if kind == "raw":
        return draw(st.binary(max_size=200)), ctype
    if kind == "deep":
        return draw(deep_line()), ctype
    if kind == "big":
        return b'{"text":"' + b"x" * (1024 * 1024 + 10) + b'"}', ctype
    return b"", ctype


def fuzz_http(
    base: str,
    token: str,
    examples: int,
    seed: int,
    canary: Callable[[], None],
    closed_connections: list[str],
    big: Big = "never",
    diagnose: Callable[[], str] | None = None,
) -> int:
    """Every route with odd paths, headers and bodies: 4xx in the JSON error shape, never 5xx.

    A request that found its kept-alive connection closed by the server is
    sent again on a new one and noted in `closed_connections`. A request the
    server does not answer fails with what `diagnose` finds then (once).
    """
    count = 0
    diagnosed: list[str] = []
    client = httpx.Client(base_url=base, timeout=30.0)

    @_settings(examples, seed)
    @hypothesis.given(
        route=st.sampled_from(_ROUTES),
        segment=_segment,
        body=http_body(big),
        auth=st.sampled_from(["token", "token", "none", "wrong", "basic", "empty", "query"]),
    )
    def check(
        route: tuple[str, str], segment: str, body: tuple[bytes, str | None], auth: str
    ) -> None:
        nonlocal count
        count += 1
        method, template = route
        # Percent-encode what a URL cannot carry raw; "%XX" sequences are sent as drawn.
        path = template.replace("{s}", urllib.parse.quote(segment, safe="%"))
        content, ctype = body
        if len(content) > 1024 * 1024 and (method != "POST" or auth != "token"):
            # A server may answer a request it will not read without draining a large body
            # and close the connection; that is allowed, so big bodies go where bodies are read.
            content = content[:1000]
        if template.endswith("/run") and method == "POST" and auth == "token":
            # A well-formed run really runs: keep it to a harmless echo.
            try:
                parsed = json.loads(content)
            except (ValueError, RecursionError):
                parsed = None
            if isinstance(parsed, dict) and isinstance(parsed.get("text"), str):
                parsed["text"] = "fuzzed"
                content = json.dumps(parsed).encode()
        headers: dict[str, str] = {}
        if ctype is not None:
            headers["content-type"] = ctype
        if auth == "token":
            headers["authorization"] = f"Bearer {token}"
        elif auth == "wrong":
            headers["authorization"] = "Bearer " + "x" * len(token)
        elif auth == "basic":
            headers["authorization"] = "Basic dXNlcjpwYXNz"
        elif auth == "empty":
            headers["authorization"] = "Bearer"
        elif auth == "query":
            path += ("&" if "?" in path else "?") + f"token={token}"
        request = client.build_request(method, path, content=content or None, headers=headers)
        try:
            response = client.send(request)
        except httpx.TimeoutException as exc:
            # Named in full, so that the failure says which request the server sat on, and
            # what the server was doing then.
            if diagnose is not None and not diagnosed:
                diagnosed.append(diagnose())
            raise AssertionError(
                f"{method} {path} ({len(content)} bytes of body, content type {ctype!r}, "
                f"auth {auth}): no answer within {client.timeout.read}s ({exc!r}); "
                + (diagnosed[0] if diagnosed else "")
            ) from None
        except (httpx.RemoteProtocolError, httpx.WriteError, httpx.ReadError) as exc:
            if len(content) > 1024 * 1024:
                # A body over the cap may be refused (413) before it is read, and the
                # connection closed while it is still being sent; the canary shows the
                # server lives on.
                canary()
                return
            # hypercorn closes a kept-alive connection, without a "connection: close", after
            # answering a request whose body was not read (a GET with a body, a request
            # refused before its body arrived); the next request sent on it finds it closed.
            # Such a request never reached the server: it is sent again on a new connection,
            # and counted. A request that fails there too was dropped.
            closed_connections.append(f"{method} {path}: {exc}")
            try:
                response = client.send(request)
            except httpx.TransportError as again:
                raise AssertionError(
                    f"{method} {path}: the server hung up, also on a new connection ({again})"
                ) from None
        assert response.status_code < 500, (
            f"{method} {path} body {content[:200]!r} -> {response.status_code} {response.text[:300]}"
        )
        # The page, its static files and the API's document are the only routes without
        # the token; the path the server saw decides (a segment of ".." normalises to
        # another route).
        seen_path = response.request.url.path
        public = seen_path in ("/", "/openapi.json") or seen_path.startswith("/static/")
        if auth != "token" and not public and template != "/{s}":
            assert response.status_code == 401, (
                f"{method} {path} without the token got {response.status_code}"
            )
        if response.status_code >= 400 and response.headers.get("content-type", "").startswith(
            "application/json"
        ):
            error = response.json().get("error", {})
            assert error.get("code") and error.get("message"), (
                f"unclear error {response.text[:300]}"
            )
        elif response.status_code >= 400 and not (public or template == "/{s}"):
            raise AssertionError(f"{method} {path}: a non-JSON error {response.status_code}")
        if count % 500 == 0:
            canary()

    try:
        check()
    finally:
        client.close()
    return count


#: The TCP states of /proc/net/tcp that a server's connection can be in, by their number.
_TCP_STATES = {
    "01": "established",
    "02": "syn-sent",
    "03": "syn-recv",
    "04": "fin-wait-1",
    "05": "fin-wait-2",
    "06": "time-wait",
    "08": "close-wait",
    "09": "last-ack",
    "0A": "listen",
    "0B": "closing",
}


def tcp_states(port: int) -> dict[str, int]:
    """How many of this machine's TCP sockets on local `port` are in each state (Linux)."""
    counts: dict[str, int] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 3 and int(fields[1].rpartition(":")[2], 16) == port:
                state = _TCP_STATES.get(fields[3], fields[3])
                counts[state] = counts.get(state, 0) + 1
    return counts


def fuzz_raw_http(host: str, port: int, examples: int, seed: int) -> int:
    """Garbage on the TCP port: a 4xx or a closed connection, and the server lives on."""
    count = 0

    @_settings(examples, seed)
    @hypothesis.given(
        data=st.one_of(
            st.binary(max_size=300),
            st.sampled_from(
                [
                    b"GET / HTTP/1.1\r\n\r\n",
                    b"GET /v1/sessions HTTP/9.9\r\nHost: x\r\n\r\n",
                    b"POST /v1/session/x/run HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
                    b"POST /v1/session/x/run HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
                    b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
                    b"GET / HTTP/1.1\r\n" + b"X: y\r\n" * 2000 + b"\r\n",
                ]
            ),
        )
    )
    def check(data: bytes) -> None:
        nonlocal count
        count += 1
        with socket.create_connection((host, port), timeout=10) as sock:
            try:
                sock.sendall(data)
                sock.shutdown(socket.SHUT_WR)
                reply = sock.recv(65536)
            except OSError:
                # The server may answer and hang up before reading everything (a 431 for a
                # huge request line): the write or the shutdown then fails, which is fine.
                return
        if reply:
            status = reply.split(b" ", 2)[1:2]
            assert status and status[0][:1] in (b"2", b"3", b"4"), (
                f"{data[:100]!r} -> {reply[:200]!r}"
            )

    check()
    return count


# -- the suite ----------------------------------------------------------------------


async def run_fuzz(total: int, seed: int, *, big_numbers: bool = True) -> SuiteResult:
    """Fuzz `total` inputs across the codec, the socket and HTTP; count failures.

    `big_numbers` False leaves numbers of thousands of digits out (for a sample
    that checks the rest while they are known to fail).
    """
    result = SuiteResult("fuzz", "inputs fuzzed", "crashes or unclear errors", seed=seed)
    started = time.monotonic()
    quotas = {name: max(5, int(total * share)) for name, share in SHARE.items()}
    quotas["codec"] = max(5, total - sum(quotas.values()))
    # Big numbers have properties of their own, so that a failure there (a property stops
    # at its first) leaves the rest of the fuzzing whole.
    big_quotas = {name: max(5, int(total * share)) for name, share in BIG_SHARE.items()}
    replay = f"(replay: python -m stress --only fuzz --seed {seed} --fuzz {total})"

    def attempt(name: str, fn: Callable[[], int]) -> None:
        try:
            result.done += fn()
        except Exception as exc:  # a falsified property
            result.fail(f"{name}: {_describe(exc)} {replay}")

    attempt("codec", lambda: fuzz_codec(quotas["codec"], seed))
    if big_numbers:
        attempt("codec, big numbers", lambda: fuzz_codec(big_quotas["codec"], seed, "always"))
    with short_tempdir("stf-") as root:
        (root / "work").mkdir()
        daemon = DaemonProcess(
            root / "s" / "d.sock",
            root / "state",
            root / "work",
            root / "daemon.log",
            extra_args=("--http", "127.0.0.1:0"),
            env={**os.environ, "AGENTRT_RESTRICTED": str(root / "restricted")},
        )
        async with trio.open_nursery() as nursery:
            said = await daemon.start(nursery, ready=b"web chat on")
            base = http_base(said)
            host, _, port = base.removeprefix("http://").rpartition(":")
            token = load_or_create_token(daemon.state_dir)
            closed_connections: list[str] = []
            canary = await trio.to_thread.run_sync(_Canary.open, daemon.socket_path)

            def http_canary() -> None:
                response = httpx.get(
                    f"{base}/v1/sessions", headers={"authorization": f"Bearer {token}"}
                )
                assert response.status_code == 200, f"the HTTP canary got {response.status_code}"
                canary.ping()

            def diagnose_http() -> str:
                # Whether the server answers anyone, what it holds, and where it stands.
                begun = time.monotonic()
                try:
                    answer = httpx.get(
                        f"{base}/v1/sessions",
                        headers={"authorization": f"Bearer {token}"},
                        timeout=5.0,
                    )
                    fresh = (
                        f"a new connection was answered {answer.status_code} in "
                        f"{time.monotonic() - begun:.2f}s"
                    )
                except httpx.HTTPError as exc:
                    fresh = f"a new connection was not answered either ({exc!r})"
                held = tcp_states(int(port))
                stacks = daemon.stacks()
                print(f"stress: fuzz: the daemon's threads then:\n{stacks}", file=sys.stderr)
                return (
                    f"{fresh}; the server's connections by state: {held or 'none'}; its "
                    f"threads' stacks are printed above ({len(stacks.splitlines())} lines)"
                )

            def blocking() -> None:
                path = daemon.socket_path
                attempt("socket", lambda: fuzz_socket(path, quotas["socket"], seed, canary))
                attempt("fresh", lambda: fuzz_fresh(path, quotas["fresh"], seed))
                attempt(
                    "http",
                    lambda: fuzz_http(
                        base,
                        token,
                        quotas["http"],
                        seed,
                        http_canary,
                        closed_connections,
                        diagnose=diagnose_http,
                    ),
                )
                if big_numbers:
                    attempt(
                        "socket, big numbers",
                        lambda: fuzz_socket(path, big_quotas["socket"], seed, canary, "always"),
                    )
                    attempt(
                        "http, big numbers",
                        lambda: fuzz_http(
                            base,
                            token,
                            big_quotas["http"],
                            seed,
                            http_canary,
                            closed_connections,
                            "always",
                            diagnose=diagnose_http,
                        ),
                    )
                    attempt(
                        "big numbers in every field (socket)",
                        lambda: _big_numbers_socket(path, canary),
                    )
                    attempt(
                        "big numbers in every field (http)",
                        lambda: _big_numbers_http(base, token, http_canary),
                    )
                attempt(
                    "raw_http", lambda: fuzz_raw_http(host, int(port), quotas["raw_http"], seed)
                )
                attempt("oversized", lambda: _oversized(path))

                def last_canary() -> int:
                    http_canary()
                    canary.finish()
                    return 0

                attempt("canary", last_canary)

            await trio.to_thread.run_sync(blocking)
            if not daemon.alive:
                result.fail(f"the daemon died: {daemon.log_text()[-2000:]} {replay}")
            await daemon.terminate()
            canary.conn.close()
            result.notes.append(
                f"{len(closed_connections)} HTTP requests found their kept-alive connection "
                "closed by the server and were sent again on a new one"
                + (f", e.g. {closed_connections[0]}" if closed_connections else "")
            )
    result.seconds = time.monotonic() - started
    return result


def _describe(exc: BaseException) -> str:
    """What failed, short: the innermost errors' types and messages, cut to a readable size."""
    if isinstance(exc, BaseExceptionGroup):
        return " + ".join(_describe(e) for e in exc.exceptions[:3])
    text = " ".join(str(exc).split())
    notes = " ".join(" ".join(getattr(exc, "__notes__", [])).split())
    return f"{type(exc).__name__}: {text[:600]} {notes[:600]}".rstrip()


def _big_numbers_socket(path: Path, canary: _Canary) -> int:
    """An integer of 5,000 digits in every field of every frame: one clear error frame each.

    The connection carries on (it answers a ``pending list`` after each), and
    the canary connection never notices.
    """
    count = 0
    conn = _Line(path)
    conn.hello("big-number-window")
    try:
        for sample in _SAMPLES:
            for key in [k for k in sample if k != "type"] + ["extra", "type"]:
                line = json.dumps({**sample, key: _BIG}).replace(f'"{_BIG}"', _DIGITS).encode()
                count += 1
                conn.send(line + b"\n" + encode(PendingRequest(PendingAction.LIST)))
                frame = conn.frame()
                assert frame.get("type") == "error", f"{line[:80]!r}... got {frame}"
                assert frame.get("code") and frame.get("message"), f"unclear error {frame}"
                assert conn.frame().get("type") == "pending", "the connection did not carry on"
    finally:
        conn.close()
    canary.ping()
    return count


def _big_numbers_http(base: str, token: str, canary: Callable[[], None]) -> int:
    """Integers of 5,000 digits in HTTP bodies: a 4xx in the API's JSON error shape each."""
    count = 0
    headers = {"authorization": f"Bearer {token}", "content-type": "application/json"}
    with httpx.Client(base_url=base, timeout=30.0, headers=headers) as client:
        bodies = [
            (route, f'{{"{key}": {_DIGITS}}}')
            for route in ("/v1/session/chat-big/run", "/v1/session/chat-big/task/resume")
            for key in ("text", "answer", "pause", "x")
        ]
        bodies += [
            ("/v1/task/0123456789ab/cancel", f'{{"pause": {_DIGITS}}}'),
            ("/v1/questions/q0/answer", f'{{"value": {_DIGITS}}}'),
            ("/v1/session/chat-big/run", f"[{_DIGITS}]"),
        ]
        for route, body in bodies:
            count += 1
            response = client.post(route, content=body)
            assert 400 <= response.status_code < 500, (
                f"POST {route} {body[:20]}... got {response.status_code} {response.text[:200]}"
            )
            error = response.json().get("error", {})
            assert error.get("code") and error.get("message"), f"unclear {response.text}"
    canary()
    return count


def _oversized(path: Path) -> int:
    """Lines past the 1 MiB cap, whole and in pieces: one ``too_large`` error each."""
    conn = _Line(path, timeout=60)
    conn.hello("oversized-window")
    sizes = [1024 * 1024 + 1, 3 * 1024 * 1024, 16 * 1024 * 1024]
    try:
        for size in sizes:
            conn.send(b'{"type":"run","text":"' + b"x" * size + b'"}\n')
            frame = conn.frame()
            assert frame.get("code") == "too_large", f"a {size}-byte line got {frame}"
        conn.send(encode(PendingRequest(PendingAction.LIST)))
        assert conn.frame().get("type") == "pending"
    finally:
        conn.close()
    return len(sizes)

"""The sans-I/O line codec of the daemon protocol: bytes in, frames out, and back.

It knows no sockets. Feed it whatever bytes arrived (``b""`` when the peer
closed), then call `FrameCodec.next_frame` until it returns `NEED_DATA`::

    codec = FrameCodec.for_daemon()
    codec.feed(await stream.receive_some())
    while (item := codec.next_frame()) is not NEED_DATA:
        ...  # a frame, a ProtocolError, or EOF

Each frame is one JSON object on one line. A line longer than `MAX_FRAME_SIZE`
is skipped up to its newline without being buffered whole and reported as a
`ProtocolError`; so is a line that is not JSON, names an unknown ``type`` or
has a missing or mistyped field. After an error the codec carries on with the
next line, so one bad frame never ends a connection by itself.
"""

from __future__ import annotations

import collections
import enum
import json
from collections.abc import Callable
from typing import TYPE_CHECKING
from typing import Any
from typing import Final
from typing import Generic
from typing import Literal
from typing import TypeAlias
from typing import TypeVar

from ..vocab.clamp import clamp_arguments
from ..vocab.peerjson import JsonNumberError
from ..vocab.peerjson import loads
from ..vocab.reprs import record
from .handshake import ErrorCode
from .handshake import ErrorFrame
from .handshake import FrameError

if TYPE_CHECKING:
    from .frames import ClientFrame
    from .frames import DaemonFrame
    from .frames import Frame

#: The largest frame, in bytes of its line without the newline: 1 MiB.
MAX_FRAME_SIZE: Final = 1024 * 1024


class Sentinel(enum.Enum):
    """Values `FrameCodec.next_frame` returns that are not frames."""

    #: Nothing complete is buffered: feed more bytes.
    NEED_DATA = "need_data"
    #: The peer closed the stream and every frame before that was returned.
    EOF = "eof"


NEED_DATA: Final = Sentinel.NEED_DATA
EOF: Final = Sentinel.EOF


@record
class ProtocolError:
    """A line that was not a valid frame. The codec has already moved past it.

    `message` names the problem for a human ("expected int, got str @
    $.attempts_left"); `ref` is the offending frame's type when it was known.
    """

    code: ErrorCode
    message: str
    ref: str | None = None

    def to_frame(self) -> ErrorFrame:
        """The `error` frame that tells the peer about this problem."""
        return ErrorFrame(self.code, self.message, self.ref)


class CodecClosedError(RuntimeError):
    """The codec was fed after it was told the stream ended."""


_F = TypeVar("_F", "ClientFrame", "DaemonFrame")


class _Marker(enum.Enum):
    TOO_LARGE = "too_large"
    TRUNCATED = "truncated"


_Line: TypeAlias = bytes | _Marker


class FrameCodec(Generic[_F]):
    """Splits a byte stream into frames of one direction (`encode` writes them).

    Make one with `for_daemon` (reads what clients send) or `for_client`
    (reads what the daemon sends).
    """

    def __init__(self, union: Any, *, max_frame_size: int = MAX_FRAME_SIZE) -> None:
        from .frames import from_wire  # the frames are loaded by the first codec, not at import

        self._union = union
        self._from_wire = from_wire
        self._max = max_frame_size
        self._lines: collections.deque[_Line] = collections.deque()
        self._partial = bytearray()
        self._skipping = False
        self._eof = False

    @classmethod
    def for_daemon(cls, *, max_frame_size: int = MAX_FRAME_SIZE) -> FrameCodec[ClientFrame]:
        """A codec for the daemon's side: it decodes `ClientFrame` values."""
        from .frames import ClientFrame

        return FrameCodec(ClientFrame, max_frame_size=max_frame_size)

    @classmethod
    def for_client(cls, *, max_frame_size: int = MAX_FRAME_SIZE) -> FrameCodec[DaemonFrame]:
        """A codec for a client's side: it decodes `DaemonFrame` values."""
        from .frames import DaemonFrame

        return FrameCodec(DaemonFrame, max_frame_size=max_frame_size)

    @property
    def buffered(self) -> int:
        """Bytes held: the partial line plus the complete lines not yet returned."""
        held = sum(len(line) for line in self._lines if isinstance(line, bytes))
        return held + len(self._partial)

    @property
    def ready(self) -> bool:
        """True when `next_frame` has something to return without more data (a whole line)."""
        return bool(self._lines)

    def feed(self, data: bytes) -> None:
        """Add bytes received from the peer; ``b""`` means the peer closed the stream."""
        if self._eof:
            raise CodecClosedError("feed() after end of stream; make a new codec per connection")
        if not data:
            self._eof = True
            if self._partial:
                self._partial.clear()
                self._lines.append(_Marker.TRUNCATED)
            return
        if not self._partial and not self._skipping and len(data) <= self._max:
            # The usual case: whole lines, each within the cap, and perhaps the start of one.
            lines = data.split(b"\n")
            self._partial += lines.pop()
            self._lines.extend(lines)
            return
        view = memoryview(data)
        start = 0
        end = len(data)
        while start < end:
            newline = data.find(b"\n", start)
            if self._skipping:
                if newline < 0:
                    return
                self._skipping = False
                start = newline + 1
                continue
            stop = end if newline < 0 else newline
            if len(self._partial) + (stop - start) > self._max:
                # Too long: drop what we have and skip to the end of the line.
                self._partial.clear()
                self._lines.append(_Marker.TOO_LARGE)
                if newline < 0:
                    self._skipping = True
                    return
                start = newline + 1
                continue
            self._partial += view[start:stop]
            if newline < 0:
                return
            self._lines.append(bytes(self._partial))
            self._partial.clear()
            start = newline + 1

    def next_frame(self) -> _F | ProtocolError | Literal[Sentinel.NEED_DATA, Sentinel.EOF]:
        """The next frame, a `ProtocolError` for a bad line, `NEED_DATA`, or `EOF`."""
        while self._lines:
            line = self._lines.popleft()
            if line is _Marker.TOO_LARGE:
                return ProtocolError(
                    ErrorCode.TOO_LARGE,
                    f"frame longer than {self._max} bytes; it was skipped. "
                    "Send large content in smaller pieces",
                )
            if line is _Marker.TRUNCATED:
                return ProtocolError(
                    ErrorCode.TRUNCATED,
                    "the stream ended in the middle of a frame; end every frame with a newline",
                )
            assert isinstance(line, bytes)
            if not line.strip():
                continue  # blank lines are harmless keep-alives
            return self._decode(line)
        return EOF if self._eof else NEED_DATA

    def _decode(self, line: bytes) -> _F | ProtocolError:
        try:
            data = loads(line)
        except UnicodeDecodeError:
            return ProtocolError(ErrorCode.MALFORMED, "frame is not valid UTF-8")
        except json.JSONDecodeError as exc:
            return ProtocolError(
                ErrorCode.MALFORMED, f"malformed JSON: {exc.msg} at column {exc.colno}"
            )
        except JsonNumberError as exc:
            return ProtocolError(ErrorCode.MALFORMED, f"malformed JSON: {exc}")
        except RecursionError:
            return ProtocolError(ErrorCode.MALFORMED, "malformed JSON: nested too deeply")
        try:
            frame: _F = self._from_wire(data, self._union)
        except FrameError as exc:
            return ProtocolError(exc.code, str(exc), exc.ref)
        return frame


def _first_to_wire(frame: Frame) -> dict[str, Any]:
    """`to_wire` for the first frame encoded: it loads the frames, and `encode` then calls
    their `to_wire` directly (importing the codec builds none of them)."""
    global _to_wire
    from .frames import to_wire

    _to_wire = to_wire
    return to_wire(frame)


_to_wire: Callable[[Frame], dict[str, Any]] = _first_to_wire


#: String limits tried, longest first, when a frame would not fit in its size cap.
_FIT_STRING_LIMITS: Final = (64 * 1024, 4 * 1024, 256)


def encode(frame: Frame, *, limit: int = MAX_FRAME_SIZE) -> bytes:
    """The line that carries `frame`: compact JSON, UTF-8, ending in a newline.

    A frame whose line would be longer than `limit` (the peer's cap) has its
    long strings shortened, head and tail kept around a ``...[N bytes elided]...``
    marker, until it fits: the peer gets a shortened frame rather than one it
    must refuse.
    """
    wire = _to_wire(frame)
    data = _dump(wire)
    for cap in _FIT_STRING_LIMITS:
        if len(data) <= limit + 1:
            break
        data = _dump(clamp_arguments(wire, cap))
    return data


#: Compact JSON with non-ASCII text as it is; one encoder for every frame (`json.dumps`
#: with these options would build a new one per call).
_ENCODER: Final = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def _dump(wire: dict[str, Any]) -> bytes:
    text = _ENCODER.encode(wire)
    # A lone surrogate (a field name quoted in an error, a file name decoded with
    # surrogateescape) has no UTF-8 form; it goes out as "?" instead of failing the frame.
    return text.encode("utf-8", "replace") + b"\n"

"""The sans-I/O line codec of the daemon protocol: bytes in, frames out, and back.

The public names of `agentrt.protocol.codec`, where the code lives."""

from __future__ import annotations

from .protocol.codec import EOF as EOF
from .protocol.codec import MAX_FRAME_SIZE as MAX_FRAME_SIZE
from .protocol.codec import NEED_DATA as NEED_DATA
from .protocol.codec import CodecClosedError as CodecClosedError
from .protocol.codec import FrameCodec as FrameCodec
from .protocol.codec import ProtocolError as ProtocolError
from .protocol.codec import Sentinel as Sentinel
from .protocol.codec import encode as encode

__all__ = [
    "EOF",
    "MAX_FRAME_SIZE",
    "NEED_DATA",
    "CodecClosedError",
    "FrameCodec",
    "ProtocolError",
    "Sentinel",
    "encode",
]

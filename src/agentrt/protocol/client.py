"""A small Trio client of the daemon: connect, say hello, send frames, receive frames.

::

    async with await Client.connect(window=new_window_hash()) as client:
        await client.send(Run("ask What colour?"))
        ask = await client.wait_for(AskFrame)
        await client.send(AnswerFrame(ask.id, "blue"))
        ended = await client.wait_for(EndedFrame)
"""

from __future__ import annotations

import os
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING
from typing import TypeVar

import trio

from ..vocab.locations import StrPath
from ..vocab.locations import default_socket_path as default_socket_path
from ..vocab.locations import default_state_dir as default_state_dir
from ..vocab.locations import is_socket_answering as is_socket_answering
from .codec import EOF
from .codec import NEED_DATA
from .codec import FrameCodec
from .codec import ProtocolError
from .codec import encode
from .handshake import PROTOCOL_VERSION
from .handshake import ErrorFrame
from .handshake import Hello
from .handshake import Scope
from .handshake import Welcome

if TYPE_CHECKING:
    from .frames import ClientFrame
    from .frames import DaemonFrame

_F = TypeVar("_F", bound="DaemonFrame")


class ClientError(Exception):
    """Base class of the client's errors."""


class ClosedClientError(ClientError):
    """This client was closed (by us); make a new one with `Client.connect`."""


class BrokenDaemonConnectionError(ClientError):
    """The daemon went away or sent something that is not a frame."""


class HandshakeError(ClientError):
    """The daemon refused the hello; the message is the daemon's reason."""


class DaemonNotRunningError(ClientError):
    """Nothing answers on the socket path; start one with ``agentrt daemon``."""


def new_window_hash() -> str:
    """A fresh window hash: one per terminal window, never reused."""
    return os.urandom(8).hex()


class Client:
    """One connection to the daemon, for one window. Make it with `Client.connect`."""

    def __init__(self, stream: trio.SocketStream, window: str) -> None:
        self.window = window
        #: The daemon's `Welcome`, once the hello was answered.
        self.welcome: Welcome | None = None
        self._stream = stream
        self._codec = FrameCodec.for_client()
        self._send_lock = trio.Lock()
        self._closed = False

    @classmethod
    async def connect(
        cls,
        socket_path: StrPath | None = None,
        *,
        window: str | None = None,
        scope: Scope = Scope.WINDOW,
    ) -> Client:
        """Connect to the daemon at `socket_path` (default: `default_socket_path`) and say hello.

        `scope` is what the connection speaks for: a terminal window, or (``Scope.ALL``)
        the owner's `agentrt` command. Raises `DaemonNotRunningError` when nothing
        answers and `HandshakeError` when the daemon refuses the hello.
        """
        path = Path(socket_path) if socket_path is not None else default_socket_path()
        try:
            stream = await trio.open_unix_socket(os.fspath(path))
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            raise DaemonNotRunningError(
                f"no daemon answers on {path} ({exc.strerror}); start one with 'agentrt daemon'"
            ) from None
        client = cls(stream, window or new_window_hash())
        try:
            await client.send(Hello(PROTOCOL_VERSION, client.window, scope))
            reply = await client.receive()
            if isinstance(reply, ErrorFrame):
                raise HandshakeError(reply.message)
            if not isinstance(reply, Welcome):
                raise BrokenDaemonConnectionError(
                    f"the daemon answered hello with a {reply.TYPE!r} frame; is it an agentrt daemon?"
                )
        except BaseException:
            await client.aclose()
            raise
        client.welcome = reply
        return client

    async def send(self, frame: ClientFrame) -> None:
        """Send one frame."""
        self._check_open()
        async with self._send_lock:
            try:
                await self._stream.send_all(encode(frame))
            except trio.BrokenResourceError as exc:
                raise BrokenDaemonConnectionError(f"the daemon went away: {exc}") from None

    async def send_raw(self, data: bytes) -> None:
        """Send bytes as they are (tests use it to send what the codec never would)."""
        self._check_open()
        async with self._send_lock:
            try:
                await self._stream.send_all(data)
            except trio.BrokenResourceError as exc:
                raise BrokenDaemonConnectionError(f"the daemon went away: {exc}") from None

    async def send_eof(self) -> None:
        """Say that nothing more will be sent, and keep receiving.

        The daemon treats it as the window going away (its runs stop with cause
        ``disconnect``, their tasks kept) and still sends each run's ``ended``
        frame before it closes the connection.
        """
        self._check_open()
        async with self._send_lock:
            try:
                await self._stream.send_eof()
            except trio.BrokenResourceError as exc:
                raise BrokenDaemonConnectionError(f"the daemon went away: {exc}") from None

    @property
    def ready(self) -> bool:
        """True when a frame already read is waiting: `receive` returns it without waiting."""
        return self._codec.ready

    async def receive(self) -> DaemonFrame:
        """The next frame from the daemon.

        Raises `BrokenDaemonConnectionError` when the daemon closed the
        connection or sent a line that is not a frame.
        """
        self._check_open()
        while True:
            item = self._codec.next_frame()
            if item is NEED_DATA:
                try:
                    data = await self._stream.receive_some(65536)
                except trio.BrokenResourceError:
                    data = b""
                self._codec.feed(data)
                continue
            if item is EOF:
                raise BrokenDaemonConnectionError("the daemon closed the connection")
            if isinstance(item, ProtocolError):
                raise BrokenDaemonConnectionError(f"the daemon sent a bad frame: {item.message}")
            return item

    async def wait_for(self, kind: type[_F]) -> _F:
        """Receive frames until one of type `kind` arrives; return it (the others are dropped)."""
        while True:
            frame = await self.receive()
            if isinstance(frame, kind):
                return frame

    def __aiter__(self) -> Client:
        return self

    async def __anext__(self) -> DaemonFrame:
        try:
            return await self.receive()
        except BrokenDaemonConnectionError:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        """Close the connection; the daemon cancels this window's runs, keeping their tasks."""
        if self._closed:
            return
        self._closed = True
        await self._stream.aclose()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedClientError("this client is closed; connect again with Client.connect()")

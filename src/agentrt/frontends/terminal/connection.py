"""One client connection: a reader task, a request task, a handler per frame type, two lanes out.

Control frames (a cancel or pause, an answer) are handled as soon as they are
read; other requests are handled one at a time, in order, by a task of their
own. Replies to control frames go out before frames still queued for a slow
peer; the rest goes out in the order sent.

A connection speaks for one window (the ``window`` of its hello). Runs it
starts are bound to that window, so the registry routes their questions to
this connection's ``cli-`` listener and nowhere else; it may cancel, answer
and list only what belongs to that window. When it closes, its open
questions fail, its runs are cancelled with `Cause.DISCONNECT` and their
pending tasks are kept for a later resume.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Iterable
from functools import partial
from operator import itemgetter
from pathlib import Path
from typing import Any
from typing import Final
from typing import Protocol
from typing import TypeVar

import attrs
import trio

from ...core.cause import Cause
from ...core.context import RequestContext
from ...core.desk import REFUSED
from ...core.desk import Desk
from ...core.desk import refusal
from ...core.executor import NotOwnerError
from ...core.executor import SessionBusyError
from ...core.executor import TaskInfo
from ...core.executor import UnknownTaskError
from ...core.pending import Answer
from ...core.pending import Entry
from ...core.pending import EntryState
from ...core.pending import NoAnswerComingError
from ...core.pending import RegistryError
from ...core.policy import Actor
from ...core.runtime import Runtime
from ...present.listing import templates
from ...protocol.codec import EOF
from ...protocol.codec import NEED_DATA
from ...protocol.codec import FrameCodec
from ...protocol.codec import ProtocolError
from ...protocol.codec import encode
from ...protocol.frames import LIST_PAGE
from ...protocol.frames import LIST_PAGE_MAX
from ...protocol.frames import MESSAGES_PAGE
from ...protocol.frames import MESSAGES_PAGE_MAX
from ...protocol.frames import PROTOCOL_VERSION
from ...protocol.frames import Ack
from ...protocol.frames import AnswerFrame
from ...protocol.frames import AskFrame
from ...protocol.frames import AskWithdrawn
from ...protocol.frames import Cancel
from ...protocol.frames import ClientFrame
from ...protocol.frames import DaemonAction
from ...protocol.frames import DaemonFrame
from ...protocol.frames import DaemonRequest
from ...protocol.frames import DaemonStatus
from ...protocol.frames import EndedFrame
from ...protocol.frames import ErrorCode
from ...protocol.frames import ErrorFrame
from ...protocol.frames import Hello
from ...protocol.frames import ModelList
from ...protocol.frames import ModelsAction
from ...protocol.frames import ModelsRequest
from ...protocol.frames import PendingAction
from ...protocol.frames import PendingDetail
from ...protocol.frames import PendingLines
from ...protocol.frames import PendingList
from ...protocol.frames import PendingRequest
from ...protocol.frames import Run
from ...protocol.frames import Scope
from ...protocol.frames import SessionList
from ...protocol.frames import SessionMessages
from ...protocol.frames import SessionsAction
from ...protocol.frames import SessionsRequest
from ...protocol.frames import TextFrame
from ...protocol.frames import TurnItem
from ...protocol.frames import TurnList
from ...protocol.frames import Undone
from ...protocol.frames import Welcome
from ...protocol.frames import frame_of
from ...store import ListedTask
from ...store import Page
from ...store import SessionInfo
from ...store import StoredTask
from ...store import StoreError
from ...store import UnreadableTask
from ...store import brief_of
from ...vocab.events import Event
from ...vocab.events import RunEnded
from ...vocab.events import describe_compaction
from ...vocab.reprs import mutable
from ...vocab.terms import TERMINAL
from .framing import ask_frame
from .framing import model_items
from .framing import pending_detail
from .framing import pending_preview
from .framing import pending_task
from .framing import session_item
from .framing import session_message
from .lifecycle import IllegalStepError
from .lifecycle import Lifecycle
from .lifecycle import Step

log = logging.getLogger("agentrt.daemon")

T = TypeVar("T")
#: What a session's look-up finds (None: nothing), for `Connection._visible`.
R = TypeVar("R", StoredTask | None, SessionInfo | None)

#: The origin of every session a window runs.
ORIGIN: Final = TERMINAL
#: A write that takes longer than this means the client stopped reading; it is dropped.
SEND_TIMEOUT: Final = 30.0
#: Frames waiting to be written past this many bytes mean the same: the client is dropped.
OUTBOX_LIMIT: Final = 16 * 1024 * 1024
#: How long a closing connection goes on writing what it still has to send.
FLUSH_SECONDS: Final = 1.0
#: How long a closing connection waits for its cancelled runs to save their tasks.
CLEANUP_TIMEOUT: Final = 10.0
_RECEIVE_SIZE: Final = 65536
#: Frames a window waits for: a reply to its request, its run's end, a question for its
#: person. Once one is written, the daemon lets the window run first (see `send`).
_AWAITED: Final[frozenset[type[DaemonFrame]]] = frozenset(
    {
        Welcome,
        Ack,
        ErrorFrame,
        EndedFrame,
        AskFrame,
        PendingList,
        PendingDetail,
        SessionList,
        SessionMessages,
        TurnList,
        Undone,
        DaemonStatus,
        ModelList,
    }
)
#: Gives up the processor to another runnable process, if any (a no-op where it is missing).
_yield_processor: Final[Callable[[], None]] = getattr(os, "sched_yield", lambda: None)
#: Frames handled as soon as they are read, past the requests waiting for theirs to end:
#: a cancel (or pause) and an answer act on a run already going, and are quick.
_CONTROL: Final[frozenset[type[ClientFrame]]] = frozenset({Cancel, AnswerFrame})
#: Requests read but not yet handled, at most; past it the reader waits.
_REQUESTS_QUEUED: Final = 64
#: Queued text of one run is joined up to this many characters a frame.
_JOINED_TEXT: Final = 16 * 1024
_MAX_WINDOW: Final = 128


def new_session_id() -> str:
    """A fresh ``cli-`` session id."""
    return ORIGIN + os.urandom(6).hex()


def _lines_of(page: Page[tuple[str, int]]) -> PendingLines:
    """A `PendingLines` frame of a page of lines, each with its time's second."""
    items = page.items
    return PendingLines(
        tuple(map(itemgetter(0), items)), tuple(map(itemgetter(1), items)), page.next
    )


@mutable(eq=False)
class RunCounter:
    """Counts runs in flight so their owner can wait until none is left."""

    count: int = attrs.field(default=0, init=False)
    _idle: trio.Event = attrs.field(factory=trio.Event, init=False)

    def __attrs_post_init__(self) -> None:
        self._idle.set()

    def enter(self) -> None:
        """A run started."""
        if self.count == 0:
            self._idle = trio.Event()
        self.count += 1

    def exit(self) -> None:
        """A run ended."""
        self.count -= 1
        if self.count == 0:
            self._idle.set()

    async def wait_idle(self) -> None:
        """Wait until no run is in flight."""
        await self._idle.wait()


class Host(Protocol):
    """What a connection needs of the server that accepted it (`agentrt.daemon.Daemon`)."""

    @property
    def runtime(self) -> Runtime:
        """The runtime the connection's runs use."""
        ...

    @property
    def version(self) -> str:
        """The daemon's version, sent in the welcome."""
        ...

    @property
    def stopping(self) -> bool:
        """True once the daemon shuts down: no new runs."""
        ...

    @property
    def runs(self) -> RunCounter:
        """Runs in flight over every connection (a shutdown waits for them)."""
        ...

    def claim_window(self, conn: Connection, window: str) -> bool:
        """Bind `window` to `conn`; False when another live connection holds it."""
        ...

    def release_window(self, conn: Connection) -> None:
        """Forget the window `conn` held."""
        ...

    def status(self) -> DaemonStatus:
        """How the daemon is (a ``daemon status`` request)."""
        ...

    def stop_soon(self) -> DaemonStatus:
        """Start a graceful shutdown (a ``daemon stop`` request); the daemon as it starts it."""
        ...


Handler = Callable[[Any], Awaitable[None]]


#: How long, and how much, a closing connection reads and discards of what its peer still sends.
DRAIN_SECONDS = 0.5
DRAIN_BYTES = 1 << 20


@mutable(eq=False)
class Connection:
    """The daemon's side of one client connection. Made and served by `Daemon`."""

    daemon: Host = attrs.field(repr=False)
    stream: trio.SocketStream = attrs.field(repr=False)
    number: int
    window: str | None = attrs.field(default=None, init=False)
    #: What the connection speaks for, from its hello.
    scope: Scope = attrs.field(default=Scope.WINDOW, init=False)
    lifecycle: Lifecycle = attrs.field(factory=Lifecycle, init=False)
    _codec: FrameCodec[ClientFrame] = attrs.field(factory=FrameCodec.for_daemon, init=False)
    #: Encoded frames on their way to the peer (see `send`), and the bytes waiting in all
    #: (`_partial`, `_urgent`, `_outbox`).
    _outbox: collections.deque[bytes] = attrs.field(
        factory=collections.deque, init=False, repr=False
    )
    #: The priority lane: replies to control frames (a cancel's or an answer's ack, an error
    #: about one), written before what waits in `_outbox`.
    _urgent: collections.deque[bytes] = attrs.field(
        factory=collections.deque, init=False, repr=False
    )
    #: What a write left of the bytes it was given (the socket was full): written first.
    _partial: bytes = attrs.field(default=b"", init=False, repr=False)
    #: The last frame queued in `_outbox`'s order when it is streamed text, not encoded yet:
    #: text of the same run queued after it joins it (see `_queue_text`).
    _text: TextFrame | None = attrs.field(default=None, init=False, repr=False)
    _outbox_bytes: int = attrs.field(default=0, init=False, repr=False)
    _outbox_ready: trio.Event = attrs.field(factory=trio.Event, init=False, repr=False)
    _closing: bool = attrs.field(default=False, init=False, repr=False)
    #: The writer task is writing frames it took from the outbox.
    _writing: bool = attrs.field(default=False, init=False, repr=False)
    #: The writer waits a turn of the scheduler before its next write (see `send`).
    _linger: bool = attrs.field(default=False, init=False, repr=False)
    #: Set when the writer task has written all it will.
    _flushed: trio.Event = attrs.field(factory=trio.Event, init=False, repr=False)
    #: Set when the socket has taken everything sent, or the peer is gone (see `_sent`).
    _outbox_taken: trio.Event = attrs.field(factory=trio.Event, init=False, repr=False)
    #: Claims, forwards and answers the window's questions (from its hello on).
    _desk: Desk[None] | None = attrs.field(default=None, init=False, repr=False)
    _runs: RunCounter = attrs.field(factory=RunCounter, init=False, repr=False)
    _nursery: trio.Nursery | None = attrs.field(default=None, init=False, repr=False)
    _reader_scope: trio.CancelScope = attrs.field(factory=trio.CancelScope, init=False)
    _broken: bool = attrs.field(default=False, init=False)
    _handlers: dict[type[ClientFrame], Handler] = attrs.field(init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        self._handlers = {
            Hello: self._on_hello,
            Run: self._on_run,
            AnswerFrame: self._on_answer,
            Cancel: self._on_cancel,
            PendingRequest: self._on_pending,
            SessionsRequest: self._on_sessions,
            DaemonRequest: self._on_daemon,
            ModelsRequest: self._on_models,
        }

    # -- the connection's life ---------------------------------------------

    async def serve(self) -> None:
        """Read and handle frames until the peer leaves, then clean up.

        Frames are written by a task of their own (see `send`), so the reader
        never waits for the peer to read: a client that sends many requests
        before reading any reply is served, not deadlocked.
        """
        try:
            async with trio.open_nursery() as outer:
                outer.start_soon(self._write_loop)
                try:
                    await self._serve_requests()
                finally:
                    # What was sent before the end still reaches the peer (an error
                    # refusing its hello, the last events of its runs), within a bound.
                    self._closing = True
                    self._outbox_ready.set()
                    with trio.CancelScope(shield=True), trio.move_on_after(FLUSH_SECONDS):
                        await self._flushed.wait()
                    outer.cancel_scope.cancel()
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(1.0):
                await self._close_gracefully()

    async def _serve_requests(self) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            try:
                with self._reader_scope:
                    await self._read_loop()
            finally:
                self._release()
            # The runs were cancelled with DISCONNECT; let them save their tasks.
            with trio.move_on_after(CLEANUP_TIMEOUT):
                await self._runs.wait_idle()
            # A run that outlived the wait is still the window's: it stops as a disconnect.
            nursery.cancel_scope.cancel(reason=Cause.DISCONNECT.reason)

    async def _close_gracefully(self) -> None:
        """Close so that the peer reads what it was sent, then an end of stream.

        Closing a Unix socket with unread input resets the connection, and the
        peer's next read can fail before it sees the frames it was sent (the
        error that refused its hello, say). So: end our side, discard a bounded
        amount of what the peer still sends, then close.
        """
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            await self.stream.send_eof()
            with trio.move_on_after(DRAIN_SECONDS):
                drained = 0
                while drained < DRAIN_BYTES:
                    chunk = await self.stream.receive_some(65536)
                    if not chunk:
                        break
                    drained += len(chunk)
        await self.stream.aclose()

    def _release(self) -> None:
        """Everything a closing connection must undo, synchronously, in this order."""
        # Cancel first: a producer cancelled with a cause withdraws its question,
        # so the run ends as a disconnect rather than a failed answer.
        self.daemon.runtime.executor.cancel_owner(self, Cause.DISCONNECT)
        if self._desk is not None:
            self._desk.close("the window closed")
        self.daemon.release_window(self)
        self.lifecycle.step(Step.CLOSE)

    async def _read_loop(self) -> None:
        """Read frames; handle a control frame at once, queue the rest for `_request_loop`.

        A request may take long (a run's start writes the task, a listing waits
        for the peer to take each page); a cancel or an answer read meanwhile
        does not wait for it. Before the hello is handled everything queues, so
        frames are handled in the order sent until the connection may act.
        At the end of the input, the requests read before it are still handled.
        """
        send, receive = trio.open_memory_channel[ClientFrame | ProtocolError](_REQUESTS_QUEUED)
        async with trio.open_nursery() as lanes:
            lanes.start_soon(self._request_loop, receive)
            async with send:
                while True:
                    item = self._codec.next_frame()
                    if item is NEED_DATA:
                        try:
                            data = await self.stream.receive_some(_RECEIVE_SIZE)
                        except (trio.BrokenResourceError, trio.ClosedResourceError):
                            data = b""
                        self._codec.feed(data)
                        continue
                    if item is EOF:
                        return
                    if (
                        not isinstance(item, ProtocolError)
                        and type(item) in _CONTROL
                        and self.lifecycle.allows(Step.REQUEST)
                    ):
                        await self._dispatch(item)
                    else:
                        await send.send(item)

    async def _request_loop(
        self, receive: trio.MemoryReceiveChannel[ClientFrame | ProtocolError]
    ) -> None:
        """Handle the queued frames one at a time, in the order read."""
        async with receive:
            async for item in receive:
                if isinstance(item, ProtocolError):
                    await self.send(item.to_frame())
                else:
                    await self._dispatch(item)

    async def _dispatch(self, frame: ClientFrame) -> None:
        step = Step.HELLO if isinstance(frame, Hello) else Step.REQUEST
        if not self.lifecycle.allows(step):
            try:
                self.lifecycle.step(step, f"a {frame.TYPE!r} frame")
            except IllegalStepError as exc:
                await self.error(ErrorCode.STATE, str(exc), frame)
            return
        await self._handlers[type(frame)](frame)

    def _close_soon(self) -> None:
        """End the connection after the frame being handled (a refused hello)."""
        self._reader_scope.cancel(reason=Cause.DISCONNECT.reason)

    # -- writing ----------------------------------------------------------

    async def send(self, frame: DaemonFrame, *, linger: bool = False, urgent: bool = False) -> None:
        """Send one frame to the peer; frames reach it in the order sent, but for `urgent` ones.

        Never waits for the peer. Unless a write is under way (the socket was
        full), the frame is written at once, in the caller's own turn (a
        non-blocking write), after any frames still queued; what the socket
        does not take, the writer task (`_write_loop`) writes once it can, in
        order. An `urgent` frame (the reply to a control frame: a cancel's or an
        answer's ack) goes before the frames still queued, at the first frame
        boundary; a run's streamed text still queued is joined into fewer
        frames (`_queue_text`), and a run's end never overtakes its text. With
        `linger` (a cancel's ack, which its run's final event follows soon) the
        frame waits for the next one sent, or for a turn of the writer task, and
        both go out in one write the peer reads at once.
        A client that left, or stopped reading (a write blocked for
        `SEND_TIMEOUT`, or more than `OUTBOX_LIMIT` bytes waiting), is
        dropped, not raised.

        Once a frame the window waits for (`_AWAITED`: an ack, its run's end,
        a reply) is written, the daemon gives up the processor (`sched_yield`).
        What follows such a frame here is more work (the resumed run, the
        store's write of a paused task) in this thread and the store's, and on
        a machine with few cores the window, woken by the write, would wait
        for all of it before it could read the frame it was waiting for.
        """
        self.send_nowait(frame, linger=linger, urgent=urgent)

    def send_nowait(
        self, frame: DaemonFrame, *, linger: bool = False, urgent: bool = False
    ) -> None:
        """`send`, callable outside a task of the connection (a producer's hook)."""
        if self._broken:
            return
        if not (linger or self._writing or self._closing or self._waiting()):
            # Nothing waits (the common case, a streamed piece): straight to the socket.
            self._partial = rest = self._write_some(encode(frame))
            if not rest:
                if type(frame) in _AWAITED:
                    _yield_processor()
                return
            self._outbox_bytes += len(rest)
            self._outbox_ready.set()
            return
        if urgent:
            data = encode(frame)
            self._urgent.append(data)
            self._outbox_bytes += len(data)
        elif type(frame) is TextFrame:
            self._queue_text(frame)
        else:
            self._seal_text()
            data = encode(frame)
            self._outbox.append(data)
            self._outbox_bytes += len(data)
        if linger:
            self._linger = True
        elif not self._writing and not self._partial and not self._closing:
            # No write is under way, and the socket took all it was given: what waits
            # (frames lingering for this one, perhaps) and this frame go out now, in order,
            # in one write. Once it is full, the writer task writes when it can take more.
            self._write_outbox()
            if not self._waiting():
                if type(frame) in _AWAITED:
                    _yield_processor()
                return
        self._outbox_ready.set()
        if self._outbox_bytes > OUTBOX_LIMIT:
            log.warning(
                "connection %d stopped reading (%d bytes waiting); closing it",
                self.number,
                self._outbox_bytes,
            )
            self._drop()

    def _queue_text(self, frame: TextFrame) -> None:
        """Queue streamed text; joined to the text queued just before it if of the same run.

        Text waits only while the socket is full (or an ack lingers): the peer then
        reads the run's text in fewer, longer frames, in the same order, and
        whatever was queued after the last piece (its run's end) still comes after it.
        """
        tail = self._text
        if (
            tail is not None
            and tail.task_hash == frame.task_hash
            and tail.agent == frame.agent
            and len(tail.text) + len(frame.text) <= _JOINED_TEXT
        ):
            self._text = TextFrame(tail.task_hash, tail.text + frame.text, tail.agent)
            return
        self._seal_text()
        self._text = frame

    def _seal_text(self) -> None:
        """Encode the queued text (`_text`): a frame of another kind goes after it."""
        if self._text is not None:
            data = encode(self._text)
            self._text = None
            self._outbox.append(data)
            self._outbox_bytes += len(data)

    def _waiting(self) -> bool:
        """Whether anything sent is not written yet (beside a write under way)."""
        return bool(self._partial or self._urgent or self._outbox or self._text is not None)

    def _take(self, most: int | None = None) -> bytes:
        """The next bytes to write, about `most` of them (None: all): what a write left
        over, then the priority lane, then the other frames, in order."""
        self._seal_text()
        chunks = [self._partial] if self._partial else []
        size = len(self._partial)
        self._partial = b""
        for lane in (self._urgent, self._outbox):
            while lane and (most is None or size < most):
                chunk = lane.popleft()
                chunks.append(chunk)
                size += len(chunk)
        self._outbox_bytes -= size
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def _write_outbox(self) -> None:
        """Write what the socket takes of what waits now, without waiting; keep the rest."""
        self._linger = False
        rest = self._write_some(self._take())
        self._partial = rest
        self._outbox_bytes += len(rest)

    def _write_some(self, data: bytes) -> bytes:
        """Write what the socket takes of `data` now, without waiting; return the rest.

        A peer that is gone (or a socket closed here) drops the connection,
        and nothing is left to write.
        """
        fd = self.stream.socket.fileno()
        if fd < 0:
            self._drop()
            return b""
        try:
            sent = os.write(fd, data)
        except BlockingIOError:
            return data
        except OSError:
            self._drop()
            return b""
        return data[sent:]

    async def _write_loop(self) -> None:
        """Write what `send` left queued (the socket was full), many frames per write."""
        try:
            while True:
                if not self._waiting():
                    self._outbox_taken.set()
                    if self._closing or self._broken:
                        return
                    self._outbox_ready = trio.Event()
                    await self._outbox_ready.wait()
                    continue
                if self._linger:
                    # A cancel's ack: the run's final event follows within a turn of the
                    # scheduler and takes it along (see `send_nowait`); if it does not, the
                    # ack goes out alone after that turn.
                    self._linger = False
                    await trio.lowlevel.checkpoint()
                    continue
                data = self._take(65536)
                # While it holds bytes not yet written, frames sent meanwhile queue behind them.
                self._writing = True
                try:
                    with trio.move_on_after(SEND_TIMEOUT) as timeout:
                        while data := self._write_some(data):
                            await trio.lowlevel.wait_writable(self.stream.socket)
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    self._drop()
                    return
                finally:
                    self._writing = False
                if self._broken:
                    return
                if timeout.cancelled_caught:
                    log.warning("connection %d stopped reading; closing it", self.number)
                    self._drop()
                    return
        finally:
            self._outbox_taken.set()
            self._flushed.set()

    def _drop(self) -> None:
        """The peer is gone or not reading: write nothing more, and end the connection."""
        self._broken = True
        self._outbox.clear()
        self._urgent.clear()
        self._partial = b""
        self._text = None
        self._outbox_bytes = 0
        self._outbox_ready.set()
        self._outbox_taken.set()
        # Its runs stop as the disconnect it is: told by their own scopes, as `_release`
        # tells them, since a run still starting (the reader waits for it) is also under
        # the reader's scope, and a `Cancelled` from there may not say why.
        self.daemon.runtime.executor.cancel_owner(self, Cause.DISCONNECT)
        self._reader_scope.cancel(reason=Cause.DISCONNECT.reason)

    async def error(
        self, code: ErrorCode, message: str, about: ClientFrame | str | None = None
    ) -> None:
        """Send an `error` frame about `about` (a frame or a frame type).

        About a control frame (`_CONTROL`), it goes in the priority lane, as the
        frame's ack would.
        """
        ref = about if isinstance(about, str) or about is None else about.TYPE
        urgent = about is not None and not isinstance(about, str) and type(about) in _CONTROL
        await self.send(ErrorFrame(code, message, ref), urgent=urgent)

    async def refuse(self, exc: Exception, about: ClientFrame) -> None:
        """Send the `error` frame that refuses `about` for `exc`, one of `REFUSED`."""
        said = refusal(exc)
        if isinstance(exc, StoreError):
            log.error("connection %d: task store failed: %s", self.number, exc)
        await self.error(ErrorCode(said.frame_code), said.message, about)

    async def _emit(self, event: Event) -> None:
        if self._desk is not None:
            # A question its run withdrew is announced before the run's next event.
            await self._desk.close_done()
        await self.send(frame_of(event))

    # -- hello ------------------------------------------------------------

    async def _on_hello(self, frame: Hello) -> None:
        if frame.version != PROTOCOL_VERSION:
            await self.error(
                ErrorCode.VERSION,
                f"protocol version {frame.version} is not spoken here (this daemon speaks "
                f"{PROTOCOL_VERSION}); upgrade the older of the two",
                frame,
            )
            self._close_soon()
            return
        window = frame.window
        if not window or len(window) > _MAX_WINDOW or not window.isprintable():
            await self.error(
                ErrorCode.INVALID,
                f"the window hash must be 1 to {_MAX_WINDOW} printable characters",
                frame,
            )
            self._close_soon()
            return
        if not self.daemon.claim_window(self, window):
            await self.error(
                ErrorCode.STATE,
                "another live connection holds this window; make a new window hash",
                frame,
            )
            self._close_soon()
            return
        self.window = window
        self.scope = frame.scope
        self.lifecycle.step(Step.HELLO)
        # The `agentrt` command runs sessions of any origin; each run's questions still
        # come back only to the connection that started it (the listener is bound to its window).
        prefix = "" if self.scope is Scope.ALL else ORIGIN
        self._desk = Desk.open(
            self.daemon.runtime.registry,
            prefix,
            name=f"daemon connection {self.number}",
            window=window,
            forward=self._forward,
            closed=self._question_closed,
        )
        assert self._nursery is not None
        self._nursery.start_soon(self._desk.serve)
        await self.send(Welcome(PROTOCOL_VERSION, self.daemon.version, window))

    # -- questions ---------------------------------------------------------

    def _forward(self, entry: Entry) -> None:
        self.send_nowait(ask_frame(entry))

    async def _question_closed(self, entry: Entry, state: EntryState, shown: None) -> None:
        if state in (EntryState.WITHDRAWN, EntryState.EXPIRED):
            # Why, in the words a late answer to it would hear.
            await self.send(AskWithdrawn(entry.id, entry.trace.refusal()))

    async def _on_answer(self, frame: AnswerFrame) -> None:
        assert self._desk is not None
        entry = self._desk.find(frame.ask)
        if entry is None or entry.done:
            late = self._desk.late(frame.ask, self._may_see_question)
            if late is not None:
                await self.refuse(late, frame)
                return
            await self.error(
                ErrorCode.NOT_FOUND,
                f"no question {frame.ask!r} is waiting for an answer from this window",
                frame,
            )
            return
        if frame.unanswerable:
            with contextlib.suppress(RegistryError):
                entry.fail(NoAnswerComingError("no answer will come from this window"))
            return
        # Acknowledged once the run that asked has resumed with the answer, not before.
        ack = Ack(frame.TYPE, "answered; the run goes on", task=entry.context.task_hash)
        try:
            self._desk.answer(
                entry,
                Answer(frame.value, secret=frame.secret),
                on_resumed=partial(self.send_nowait, ack, urgent=True),
            )
        except REFUSED as exc:
            await self.refuse(exc, frame)

    # -- runs -------------------------------------------------------------

    async def _may_use(self, session: str | None, frame: Run | ModelsRequest) -> str | None:
        """The session `frame` acts on (a new one for None) if this window may start runs
        of it; None once an error frame said why not."""
        if session is None:
            return new_session_id()
        if self.scope is Scope.WINDOW and not session.startswith(ORIGIN):
            await self.error(
                ErrorCode.INVALID,
                f"session {session!r} is not a terminal session; runs over the daemon socket "
                f"use {ORIGIN!r} sessions (leave session out to start a new one)",
                frame,
            )
            return None
        runtime = self.daemon.runtime
        try:
            owner = await runtime.store.owner(session)
        except REFUSED as exc:
            await self.refuse(exc, frame)
            return None
        if not runtime.policy.may_start(self._actor(), session, owner):
            await self.error(
                ErrorCode.NOT_FOUND,
                f"session {session!r} belongs to another live window; leave session out "
                "to start a new one",
                frame,
            )
            return None
        return session

    async def _on_run(self, frame: Run) -> None:
        session = await self._may_use(frame.session, frame)
        if session is None:
            return
        runtime = self.daemon.runtime
        workdir = Path(frame.cwd) if frame.cwd is not None else None
        await self._start_run(
            partial(runtime.executor.run, session, frame.text, workdir=workdir), frame
        )

    async def _start_run(
        self, start: Callable[..., Awaitable[RunEnded]], frame: ClientFrame
    ) -> None:
        """Start a run in the connection's nursery; return once its ``task`` frame is out.

        `start` is `Executor.run` or `Executor.resume` with the request's
        arguments. The requests after it wait for the run's start, so an error
        before the start is the answer to this frame; a cancel of the run names
        the task hash of its ``task`` frame, sent once the run is registered.
        """
        if self.daemon.stopping:
            await self.error(
                ErrorCode.FAILED, "the daemon is shutting down; try again once it restarts", frame
            )
            return
        assert self._nursery is not None
        run = partial(start, owner=self, emit=self._emit, window_hash=self.window)
        try:
            await self._nursery.start(self._run, run)
        except REFUSED as exc:
            await self.refuse(exc, frame)

    async def _run(
        self,
        run: Callable[..., Awaitable[RunEnded]],
        *,
        task_status: trio.TaskStatus[TaskInfo],
    ) -> None:
        self._runs.enter()
        self.daemon.runs.enter()
        try:
            await run(task_status=task_status)
        finally:
            self._runs.exit()
            self.daemon.runs.exit()

    async def _on_cancel(self, frame: Cancel) -> None:
        try:
            self.daemon.runtime.executor.cancel(frame.task, frame.cause, owner=self)
        except (UnknownTaskError, NotOwnerError):
            # One message for both, so a window cannot probe for other windows' tasks.
            await self.error(
                ErrorCode.NOT_FOUND,
                f"no running task {frame.task!r} was started by this window",
                frame,
            )
            return
        detail = (
            "cancelling" if frame.cause.deletes_pending else "pausing; the pending task is kept"
        )
        # Before the run's text still queued, if any; its end follows it (see `send_nowait`).
        await self.send(Ack(frame.TYPE, detail, task=frame.task), linger=True, urgent=True)

    # -- models -------------------------------------------------------------

    async def _on_models(self, frame: ModelsRequest) -> None:
        executor = self.daemon.runtime.executor
        session = frame.session
        if frame.action is ModelsAction.SET:
            if frame.model is None:
                await self.error(ErrorCode.INVALID, "models set needs the model to set", frame)
                return
            session = await self._may_use(session, frame)
            if session is None:
                return
            try:
                await executor.choose_model(session, frame.model, window_hash=self.window)
            except REFUSED as exc:
                await self.refuse(exc, frame)
                return
        elif session is not None and await self._may_use(session, frame) is None:
            return
        try:
            entries = executor.models()
            current = (
                await executor.session_model(session)
                if session is not None
                else next(e.name for e in entries if e.default)
            )
        except REFUSED as exc:
            await self.refuse(exc, frame)
            return
        await self.send(ModelList(model_items(entries), session, current))

    # -- pending tasks ------------------------------------------------------

    async def _on_pending(self, frame: PendingRequest) -> None:
        if frame.action is PendingAction.LIST:
            await self._pending_list(frame)
            return
        stored = await self._visible(frame, self.daemon.runtime.store.lookup, self._no_pending)
        if stored is None:
            return
        if frame.action in (PendingAction.SHOW, PendingAction.PREVIEW):
            if isinstance(stored, UnreadableTask):
                await self.error(ErrorCode.FAILED, stored.error, frame)
            elif frame.action is PendingAction.SHOW:
                await self.send(pending_detail(stored))
            else:
                await self.send(pending_preview(stored))
        elif frame.action is PendingAction.RESUME:
            await self._pending_resume(frame, stored.session_id)
        else:
            await self._pending_discard(frame, stored.session_id)

    async def _visible(
        self,
        frame: PendingRequest | SessionsRequest,
        look_up: Callable[[str], Awaitable[R]],
        missing: Callable[[str], str],
    ) -> R:
        """What `look_up` finds of the session `frame` names, if this connection may see it.

        None once an error frame said why not: no session named, the store
        failed, or `missing` (one answer for an unknown and a hidden session alike).
        """
        if frame.session is None:
            action = frame.action.value
            await self.error(
                ErrorCode.INVALID, f"{frame.TYPE} {action} needs the session to {action}", frame
            )
            return None
        try:
            record = await look_up(frame.session)
        except REFUSED as exc:
            await self.refuse(exc, frame)
            return None
        if record is None or not self._may_see(record):
            await self.error(ErrorCode.NOT_FOUND, missing(frame.session), frame)
            return None
        return record

    def _no_pending(self, session: str) -> str:
        if self.scope is Scope.ALL:
            return f"session {session} has no pending task"
        return f"no pending task of session {session!r} is visible to this window"

    def _no_session(self, session: str) -> str:
        if self.scope is Scope.ALL:
            return f"no session {session}"
        return f"no session {session!r} is visible to this window"

    def _actor(self) -> Actor:
        if self.scope is Scope.ALL:
            return Actor.owner()
        assert self.window is not None, "only a connection past hello acts on sessions"
        return Actor.terminal(self.window)

    def _may_see_question(self, ctx: RequestContext) -> bool:
        """Whether the access policy lets this connection hear of a question of `ctx`."""
        return self.daemon.runtime.policy.may_act(self._actor(), ctx.session_id, ctx.window_hash)

    def _may_see(self, record: StoredTask | ListedTask | SessionInfo) -> bool:
        """What the access policy lets this connection see.

        A window does not see a task another client is running; the `agentrt`
        command (scope ``all``) sees it, as in the store.
        """
        runtime = self.daemon.runtime
        if (
            self.scope is Scope.WINDOW
            and runtime.executor.is_running(record.session_id)
            and not any(
                info.session_id == record.session_id for info in runtime.executor.running(self)
            )
        ):
            return False
        return runtime.policy.may_act(self._actor(), record.session_id, record.window_hash)

    def _list_prefix(self, prefix: str) -> str | None:
        """The prefix a listing may use: a window's is narrowed to its own origin (None:
        nothing it may list starts with `prefix`)."""
        if self.scope is Scope.ALL:
            return prefix
        if prefix.startswith(ORIGIN) or ORIGIN.startswith(prefix):
            return max(prefix, ORIGIN, key=len)  # the narrower of the two
        return None

    async def _check_limit(
        self, frame: ClientFrame, limit: int | None, default: int, most: int
    ) -> int | None:
        """The page size asked for, or None (after an error frame) when it is out of range."""
        value = default if limit is None else limit
        if not 1 <= value <= most:
            await self.error(
                ErrorCode.INVALID, f"limit must be between 1 and {most}, not {value}", frame
            )
            return None
        return value

    def _sees_every_task(self) -> bool:
        """Whether this connection may see every stored task (`_may_see` is then True for
        each): the access policy is asked once a listing, not once a task."""
        return self.scope is Scope.ALL and self.daemon.runtime.policy.may_act_on_every_task(
            self._actor()
        )

    async def _pending_list(self, frame: PendingRequest) -> None:
        store = self.daemon.runtime.store
        every = self._sees_every_task()
        if frame.lines and every:
            # The lines as the store keeps them: nothing is decoded or checked a task.
            await self._listing(frame, store.line_page, _lines_of)
            return

        def seen(page: Page[ListedTask]) -> Iterable[ListedTask]:
            return page.items if every else (r for r in page.items if self._may_see(r))

        def reply(page: Page[ListedTask]) -> PendingList:
            return PendingList(tuple(pending_task(r) for r in seen(page)), page.next)

        def reply_lines(page: Page[ListedTask]) -> PendingLines:
            briefs = [brief_of(r) for r in seen(page)]
            timed = zip(templates(briefs), [int(b[4]) for b in briefs], strict=True)
            return _lines_of(Page(tuple(timed), page.next))

        await self._listing(frame, store.list_page, reply_lines if frame.lines else reply)

    async def _listing(
        self,
        frame: PendingRequest | SessionsRequest,
        fetch: Callable[..., Awaitable[Page[T]]],
        reply: Callable[[Page[T]], DaemonFrame],
    ) -> None:
        """Answer a listing `frame` with its page; with ``all_pages``, every page on.

        Each page is its own frame, the last one's ``next`` None. The next
        page is read while the one before is on its way to the peer, and sent
        once the socket has taken that one: a peer slow to read holds the
        listing back rather than having it queued here.
        """
        page = await self._page_of(frame, fetch)
        while page is not None:
            await self.send(reply(page))
            if not frame.all_pages or page.next is None:
                return
            page = await self._page_of(attrs.evolve(frame, cursor=page.next), fetch)
            await self._sent()

    async def _sent(self) -> None:
        """Wait until the socket has taken every frame sent so far, or the peer is gone."""
        while (self._waiting() or self._writing) and not self._broken:
            self._outbox_taken = trio.Event()
            await self._outbox_taken.wait()

    async def _page_of(
        self,
        frame: PendingRequest | SessionsRequest,
        fetch: Callable[..., Awaitable[Page[T]]],
    ) -> Page[T] | None:
        """The page of a listing `frame` asks for; None when an error frame answered it.

        A window asking for sessions of another origin gets an empty page: it
        lists ``cli-`` ones only.
        """
        prefix = self._list_prefix(frame.prefix)
        if prefix is None:
            return Page(())
        limit = await self._check_limit(frame, frame.limit, LIST_PAGE, LIST_PAGE_MAX)
        if limit is None:
            return None
        try:
            return await fetch(prefix, limit=limit, cursor=frame.cursor)
        except REFUSED as exc:
            await self.refuse(exc, frame)
        return None

    async def _pending_resume(self, frame: PendingRequest, session: str) -> None:
        workdir = Path(frame.cwd) if frame.cwd is not None else None
        resume = partial(
            self.daemon.runtime.executor.resume,
            session,
            answer=frame.answer,
            question_id=frame.question_id,
            workdir=workdir,
        )
        await self._start_run(resume, frame)

    async def _pending_discard(self, frame: PendingRequest, session: str) -> None:
        executor = self.daemon.runtime.executor
        if self.scope is Scope.ALL and executor.is_running(session):
            # Another client's run: the command stops only what it started, as it
            # would refuse a task another agentrt process runs.
            await self.error(
                ErrorCode(SessionBusyError.frame_code),
                f"session {session} is running in the daemon (pid {os.getpid()}); pause or "
                "stop it there first",
                frame,
            )
            return
        try:
            existed = await executor.discard(session)
        except REFUSED as exc:
            await self.refuse(exc, frame)
            return
        if not existed:
            await self.error(ErrorCode.NOT_FOUND, self._no_pending(session), frame)
            return
        await self.send(Ack(frame.TYPE, "discarded", session=session))

    # -- sessions -----------------------------------------------------------

    # -- the daemon itself ----------------------------------------------------

    async def _on_daemon(self, frame: DaemonRequest) -> None:
        if frame.action is DaemonAction.STATUS:
            await self.send(self.daemon.status())
            return
        if self.scope is not Scope.ALL:
            # A window closing would stop every other window's runs with it.
            await self.error(
                ErrorCode.FORBIDDEN,
                "a window cannot stop the daemon; run 'agentrt daemon stop'",
                frame,
            )
            return
        log.info("connection %d asked the daemon to stop", self.number)
        await self.send(self.daemon.stop_soon())

    async def _on_sessions(self, frame: SessionsRequest) -> None:
        if frame.action is SessionsAction.LIST:
            await self._sessions_list(frame)
            return
        info = await self._visible(frame, self.daemon.runtime.store.session, self._no_session)
        if info is None:
            return
        if frame.action is SessionsAction.SHOW:
            await self._sessions_show(frame, info)
        elif frame.action is SessionsAction.UNDO:
            await self._sessions_undo(frame, info.session_id)
        elif frame.action is SessionsAction.TURNS:
            turns = await self.daemon.runtime.executor.turns(info.session_id)
            items = tuple(TurnItem(t.index, t.text, t.files) for t in turns)
            await self.send(TurnList(info.session_id, items))
        elif frame.action is SessionsAction.COMPACT:
            await self._sessions_compact(frame, info.session_id)
        else:
            await self._sessions_rm(frame, info.session_id)

    async def _sessions_undo(self, frame: SessionsRequest, session: str) -> None:
        try:
            result = await self.daemon.runtime.executor.undo(
                session, turn=frame.turn, force=frame.force, task=frame.task, dry_run=frame.dry_run
            )
        except REFUSED as exc:
            await self.refuse(exc, frame)
            return
        await self.send(
            Undone(
                session,
                result.done,
                result.restored,
                result.conflicts,
                dict(result.kept),
                dict(result.skipped),
                frame.dry_run,
                frame.task,
            )
        )

    async def _sessions_list(self, frame: SessionsRequest) -> None:
        def reply(page: Page[SessionInfo]) -> SessionList:
            return SessionList(
                tuple(session_item(s) for s in page.items if self._may_see(s)), page.next
            )

        await self._listing(frame, self.daemon.runtime.store.sessions, reply)

    async def _sessions_show(self, frame: SessionsRequest, info: SessionInfo) -> None:
        limit = await self._check_limit(frame, frame.limit, MESSAGES_PAGE, MESSAGES_PAGE_MAX)
        if limit is None:
            return
        runtime = self.daemon.runtime
        try:
            page = await runtime.store.messages(info.session_id, after=frame.after, limit=limit)
            usage = await runtime.store.usage(info.session_id)
        except REFUSED as exc:
            await self.refuse(exc, frame)
            return
        prices = runtime.executor.config.prices
        await self.send(
            SessionMessages(
                session_item(info),
                tuple(session_message(m) for m in page.items),
                None if page.next is None else int(page.next),
                tuple(prices.priced(run) for run in usage),
            )
        )

    async def _sessions_compact(self, frame: SessionsRequest, session: str) -> None:
        try:
            summarised = await self.daemon.runtime.executor.compact(session)
        except REFUSED as exc:
            await self.refuse(exc, frame)
            return
        said = describe_compaction(summarised) if summarised else "nothing to summarise yet"
        await self.send(Ack(frame.TYPE, said, session=session))

    async def _sessions_rm(self, frame: SessionsRequest, session: str) -> None:
        try:
            await self.daemon.runtime.executor.forget(session)
        except REFUSED as exc:
            await self.refuse(exc, frame)
            return
        await self.send(Ack(frame.TYPE, "removed", session=session))

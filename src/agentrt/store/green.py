"""Blocking store code run in the Trio thread, its waits on the network made by the event loop.

The store's logic is written for a blocking connection (`agentrt.store.sql`), and
runs in the store's writer thread. On PostgreSQL a small call (a stop's write, a
resume's claim) spends most of its time waiting for the server's answer; in the
writer thread that wait costs two thread hops (waking the thread, then waking
the Trio run back), about as long as the round trip itself on one machine.
`start` runs such a batch in a greenlet of the Trio thread instead: where the
code would block on the connection's socket (`wait_socket`) the greenlet
switches back to the event loop, which waits for the socket with everything
else it waits for and switches back in once it is ready; whatever else would
block there (taking a connection from the pool while it reconnects) goes to a
worker thread (`blocking`). Outside such a greenlet both block, as before.

greenlet, rather than rewriting the store's logic as coroutines twice (one
blocking, for the writer thread, and one for Trio), is what SQLAlchemy uses to
run its blocking core over asyncio drivers.
"""

from __future__ import annotations

import select
from collections.abc import Callable
from typing import Any
from typing import TypeVar
from typing import cast

import attrs
import greenlet
import trio

from ..vocab.reprs import mutable
from ..vocab.reprs import record

T = TypeVar("T")

_READ: int = select.POLLIN
_WRITE: int = select.POLLOUT


class _Batch(greenlet.greenlet):
    """A greenlet running a store batch in the Trio thread (`start`)."""


@record
class _Wait:
    """What a batch waits for: `fd` readable, writable, or either (`events`, poll's bits)."""

    fd: int
    events: int


@record
class _Blocking:
    """A blocking call a batch has a worker thread make."""

    fn: Callable[[], Any]


def running_batch() -> bool:
    """Whether this code runs in a batch `start`ed in the Trio thread."""
    return isinstance(greenlet.getcurrent(), _Batch)


def wait_socket(fd: int, *, read: bool = True, write: bool = False) -> None:
    """Return once `fd` is readable (`read`) or writable (`write`), whichever comes first.

    In a batch `start`ed in the Trio thread the event loop waits, running other
    tasks meanwhile; anywhere else this thread blocks.
    """
    events = (_READ if read else 0) | (_WRITE if write else 0)
    current = greenlet.getcurrent()
    if isinstance(current, _Batch):
        _loop_of(current).switch(_Wait(fd, events))
        return
    poller = select.poll()
    poller.register(fd, events)
    poller.poll()


def blocking(fn: Callable[[], T]) -> T:
    """`fn()`: in a worker thread when called from a batch `start`ed in the Trio thread
    (the event loop goes on meanwhile), else right here."""
    current = greenlet.getcurrent()
    if isinstance(current, _Batch):
        return cast(T, _loop_of(current).switch(_Blocking(fn)))
    return fn()


def _loop_of(batch: _Batch) -> greenlet.greenlet:
    """The greenlet the event loop runs in: the one `start` ran `batch` from."""
    loop = batch.parent
    assert loop is not None
    return loop


@mutable(eq=False)
class Started:
    """What `start` did: `value` is the function's return value if it `ended` at once."""

    ended: bool
    value: Any = None
    #: Set once the function has ended (at once, or in the task that drove it).
    done: trio.Event = attrs.field(factory=trio.Event)


def start(fn: Callable[[], object]) -> Started:
    """Run `fn` here (the Trio thread) until it ends or first waits; the rest in a task.

    When `fn` waits (`wait_socket`, `blocking`), a system task of the Trio run
    drives it on from then: it waits as asked, shielded from cancels (a batch
    that began runs to its end, as in the writer thread), and switches back
    in. `fn` must not raise: what it raises ends the run (`TrioInternalError`).
    """
    batch = _Batch(fn)
    request = batch.switch()
    if batch.dead:
        started = Started(True, request)
        started.done.set()
        return started
    started = Started(False)
    trio.lowlevel.spawn_system_task(
        _drive, batch, request, started.done, name="agentrt store batch"
    )
    return started


async def _drive(batch: _Batch, request: object, done: trio.Event) -> None:
    """Serve what `batch` asks for until it ends, then set `done`."""
    with trio.CancelScope(shield=True):
        while not batch.dead:
            try:
                value = await _serve(request)
            except Exception as exc:  # a closed socket, the blocking call's own error
                request = batch.throw(exc)
            else:
                request = batch.switch(value)
    done.set()


async def _serve(request: object) -> object:
    if isinstance(request, _Blocking):
        return await trio.to_thread.run_sync(request.fn)
    assert isinstance(request, _Wait), request
    if request.events == _READ:
        await trio.lowlevel.wait_readable(request.fd)
    elif request.events == _WRITE:
        await trio.lowlevel.wait_writable(request.fd)
    else:
        async with trio.open_nursery() as nursery:  # whichever comes first

            async def first(wait: Callable[[int], Any]) -> None:
                await wait(request.fd)
                nursery.cancel_scope.cancel()

            nursery.start_soon(first, trio.lowlevel.wait_readable)
            nursery.start_soon(first, trio.lowlevel.wait_writable)
    return None

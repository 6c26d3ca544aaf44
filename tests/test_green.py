"""`agentrt.store.green`: blocking code run in the Trio thread, its waits the event loop's."""

from __future__ import annotations

import socket
import threading

import trio
from trio.testing import wait_all_tasks_blocked

from agentrt.store import green


async def test_a_batch_that_never_waits_ends_at_once_with_its_value() -> None:
    started = green.start(lambda: 42)
    assert (started.ended, started.value, started.done.is_set()) == (True, 42, True)
    assert not green.running_batch()


async def test_a_batch_waits_for_its_socket_while_the_event_loop_runs_other_tasks() -> None:
    here, there = socket.socketpair()
    with here, there:
        here.setblocking(False)
        seen: list[object] = []

        def batch() -> bool:
            seen.append((threading.get_ident(), green.running_batch()))
            green.wait_socket(here.fileno())
            seen.append(here.recv(100))
            return True

        started = green.start(batch)
        # It sent nothing yet: the batch waits, and this task (the event loop) goes on.
        assert not started.ended and not started.done.is_set()
        await wait_all_tasks_blocked()
        assert seen == [(threading.get_ident(), True)]
        there.send(b"answer")
        with trio.fail_after(10):
            await started.done.wait()
        assert seen[1:] == [b"answer"]


async def test_a_cancel_does_not_end_a_batch_that_began() -> None:
    here, there = socket.socketpair()
    with here, there:
        ended: list[bytes] = []

        def batch() -> None:
            green.wait_socket(here.fileno())
            ended.append(here.recv(100))

        with trio.CancelScope() as scope:
            started = green.start(batch)
            scope.cancel()
            await trio.lowlevel.checkpoint()
        assert scope.cancelled_caught and not started.done.is_set()
        there.send(b"late")
        with trio.fail_after(10):
            await started.done.wait()
        assert ended == [b"late"]


async def test_a_wait_for_either_ends_once_the_socket_can_be_written() -> None:
    here, there = socket.socketpair()
    with here, there:
        order: list[str] = []

        def batch() -> None:
            green.wait_socket(here.fileno(), read=True, write=True)  # nothing to read
            order.append("writable")

        started = green.start(batch)
        with trio.fail_after(10):
            await started.done.wait()
        assert order == ["writable"]


async def test_a_blocking_call_goes_to_a_worker_thread_from_a_batch_and_runs_here_elsewhere() -> (
    None
):
    loop = threading.get_ident()
    assert green.blocking(threading.get_ident) == loop
    threads: list[int] = []
    errors: list[str] = []

    def batch() -> None:
        threads.append(green.blocking(threading.get_ident))
        try:
            green.blocking(lambda: 1 // 0)
        except ZeroDivisionError as exc:  # the call's own error, raised in the batch
            errors.append(type(exc).__name__)

    started = green.start(batch)
    with trio.fail_after(10):
        await started.done.wait()
    assert len(threads) == 1 and threads[0] != loop
    assert errors == ["ZeroDivisionError"]


def test_outside_a_trio_run_a_wait_blocks_this_thread() -> None:
    here, there = socket.socketpair()
    with here, there:
        there.send(b"x")
        green.wait_socket(here.fileno())  # readable already: returns
        assert here.recv(10) == b"x"
        assert green.blocking(lambda: 7) == 7

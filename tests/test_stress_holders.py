"""The load suite's leak report names what holds a leaked object, not only its kind."""

from __future__ import annotations

import threading
from collections.abc import Callable

import trio
from stress.holders import holder_chain
from stress.load import _alive


class Leaked:
    """Stands for an object that should be gone (a paused run, a window's connection)."""


#: A module global: a root of its own.
KEPT: list[object] = []


def _closure(obj: Leaked) -> Callable[[], Leaked]:
    def write() -> Leaked:
        return obj

    return write


def test_an_object_kept_by_a_threads_variable_is_traced_to_that_threads_frame() -> None:
    """The shape of a leak once found: a store thread's loop kept its last batch of calls,
    each a closure over a run, in a variable while it waited for the next one."""
    box = [Leaked()]  # the test holds it only through this list, which the walk ignores
    release = threading.Event()
    ready = threading.Event()

    def loop(calls: list[Callable[[], Leaked]]) -> None:
        ready.set()
        release.wait()

    thread = threading.Thread(target=loop, args=([_closure(box[0])],))
    thread.start()
    try:
        assert ready.wait(30)
        chain = holder_chain(box[0], ignore=(box,))
    finally:
        release.set()
        thread.join()
    assert chain.startswith("Leaked <- cell <- tuple <- function _closure.<locals>.write <- list")
    waiting = loop.__code__.co_firstlineno + 2  # the line its thread waits on
    assert chain.endswith(
        " <- frame test_an_object_kept_by_a_threads_variable_is_traced_to_that_threads_frame"
        f".<locals>.loop (test_stress_holders.py:{waiting})"
    )


async def test_an_object_kept_by_a_sleeping_task_is_traced_to_its_coroutine() -> None:
    async def keeper(obj: Leaked, task_status: trio.TaskStatus[None]) -> None:
        task_status.started()
        await trio.sleep_forever()  # `obj` is a variable of its frame meanwhile

    box = [Leaked()]
    async with trio.open_nursery() as nursery:
        await nursery.start(keeper, box[0])
        chain = holder_chain(box[0], ignore=(box,))
        nursery.cancel_scope.cancel()
    assert chain == (
        "Leaked <- coroutine test_an_object_kept_by_a_sleeping_task_is_traced_to_its_coroutine"
        f".<locals>.keeper (test_stress_holders.py:{keeper.__code__.co_firstlineno + 2})"
    )


def test_an_object_kept_by_a_module_is_traced_to_it() -> None:
    KEPT.append({"run": Leaked()})
    try:
        # (Not inside the assert: pytest keeps an assert's values in variables of its own.)
        chain = holder_chain(KEPT[0]["run"])  # type: ignore[index]
        assert chain == "Leaked <- dict <- list <- dict <- module tests.test_stress_holders"
    finally:
        KEPT.clear()


def test_the_load_suites_count_says_what_holds_each_kind() -> None:
    KEPT.append(_closure(Leaked()))
    try:
        counts, holders = _alive((Leaked,))
    finally:
        KEPT.clear()
    assert counts == {"Leaked": 1}
    assert holders == [
        "Leaked <- cell <- tuple <- function _closure.<locals>.write <- list <- dict "
        "<- module tests.test_stress_holders"
    ]
    assert _alive((Leaked,)) == ({}, [])

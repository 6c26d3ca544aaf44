"""What keeps an object alive: the chain of references from something that lives on.

A leak the load suite finds (an object of a kind that should be gone once the
storm is over) is only half a finding until its holder is known. `holder_chain`
walks the garbage collector's referrers back from the object until it reaches a
running frame (a thread's or a task's stack), a module, or a class, and words
each step: ``AgentRun <- cell <- function Foo.stopped_later.<locals>.write <- Call
<- list <- frame _Syncer._loop (sqlite.py:668)``.
"""

from __future__ import annotations

import gc
import sys
import types
from collections import deque
from typing import Any

#: How many objects the walk looks at before it gives up: each look scans every object the
#: collector tracks (some 3 ms among 300,000 objects).
MAX_VISITED = 300


def holder_chain(target: object, ignore: tuple[object, ...] = ()) -> str:
    """The shortest chain of referrers from `target` to a root, worded (see the module).

    `ignore`: objects that refer to `target` only because the caller holds them (the
    list it found `target` in, say). Where no root is found within `MAX_VISITED`
    objects, the chain to the last object looked at is given, with ``...`` at its end.
    """
    skipped = {id(item) for item in ignore}
    # The collector does not see what a thread's running frame holds in its variables:
    # those are looked up here (a suspended coroutine's it does see).
    held = _held_by_stacks()
    skipped.add(id(held))
    # The walk's own bookkeeping refers to what it visits: never a step of a chain.
    objects: dict[int, object] = {id(target): target}
    up: dict[int, int | None] = {id(target): None}
    queue: deque[object] = deque([target])
    skipped.update((id(skipped), id(objects), id(up), id(queue)))
    last = target
    while queue and len(objects) < MAX_VISITED:
        current = queue.popleft()
        last = current
        if current is not target and _is_root(current):
            return _worded(id(current), objects, up)
        referrers = gc.get_referrers(current)
        skipped.add(id(referrers))
        if id(current) in held:
            referrers.append(held[id(current)])
        for referrer in referrers:
            key = id(referrer)
            if key in objects or key in skipped or _is_walk(referrer):
                continue
            objects[key] = referrer
            up[key] = id(current)
            queue.append(referrer)
        skipped.discard(id(referrers))
        del referrers
    return _worded(id(last), objects, up) + " <- ..."


def _held_by_stacks() -> dict[int, types.FrameType]:
    """The frame of a running thread that holds each object its variables hold, by id."""
    held: dict[int, types.FrameType] = {}
    for frame in sys._current_frames().values():
        current: types.FrameType | None = frame
        while current is not None:
            if current.f_code.co_filename != __file__:
                for value in current.f_locals.values():
                    held.setdefault(id(value), current)
            current = current.f_back
    return held


def _is_walk(obj: object) -> bool:
    """Whether `obj` belongs to this walk (its own frames and bookkeeping)."""
    return isinstance(obj, types.FrameType) and obj.f_code.co_filename == __file__


def _is_root(obj: object) -> bool:
    """A running frame or a suspended coroutine (a stack), a module, or a class."""
    return isinstance(
        obj,
        types.FrameType
        | types.CoroutineType
        | types.GeneratorType
        | types.AsyncGeneratorType
        | types.ModuleType
        | type,
    )


def _worded(end: int, objects: dict[int, object], up: dict[int, int | None]) -> str:
    steps: list[str] = []
    key: int | None = end
    while key is not None:
        steps.append(describe(objects[key]))
        key = up[key]
    return " <- ".join(reversed(steps))


def describe(obj: Any) -> str:
    """One object of a chain: its type, and for code-like objects where they are."""
    if isinstance(obj, types.FrameType):
        code = obj.f_code
        return f"frame {code.co_qualname} ({code.co_filename.rsplit('/', 1)[-1]}:{obj.f_lineno})"
    if isinstance(obj, types.FunctionType):
        return f"function {obj.__qualname__}"
    if isinstance(obj, types.MethodType):
        return f"method {obj.__func__.__qualname__}"
    if isinstance(obj, types.ModuleType):
        return f"module {obj.__name__}"
    if isinstance(obj, type):
        return f"class {obj.__qualname__}"
    if isinstance(obj, types.CoroutineType | types.GeneratorType | types.AsyncGeneratorType):
        frame = getattr(obj, "cr_frame", None) or getattr(obj, "gi_frame", None)
        frame = frame or getattr(obj, "ag_frame", None)
        where = f" ({describe(frame).split(' (', 1)[1]}" if frame is not None else ""
        return f"{type(obj).__name__} {obj.__qualname__}{where}"
    return type(obj).__qualname__

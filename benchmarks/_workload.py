"""The data benchmarks fill stores with: conversations and paused tasks of realistic shape."""

from __future__ import annotations

from pathlib import Path

import trio

from agentrt.core.cause import Cause
from agentrt.models.messages import Message
from agentrt.models.messages import ToolCall
from agentrt.store.record import TaskRecord
from agentrt.store.sqlite import TaskStore
from agentrt.vocab.terms import TaskStatus

_RESULT = "line of a file the agent read, as a tool returns it; " * 3
_THOUGHT = "Reading the two files the user named before answering."


def conversation(count: int, tag: str = "s") -> tuple[Message, ...]:
    """`count` messages as a working session has them, about 200 bytes each on average.

    A user turn, then rounds of an assistant message asking for two calls
    followed by their two results, and so on.
    """
    messages: list[Message] = [Message.user(f"summarise the notes of {tag}")]
    round_number = 0
    while len(messages) < count:
        calls = (
            ToolCall(
                f"call_{round_number}_0", "read_file", {"path": f"notes/{tag}-{round_number}.md"}
            ),
            ToolCall(
                f"call_{round_number}_1", "read_file", {"path": f"notes/{tag}-{round_number}.txt"}
            ),
        )
        messages.append(Message.assistant(_THOUGHT, calls))
        messages.extend(Message.tool_result(call, _RESULT) for call in calls)
        round_number += 1
    return tuple(messages[:count])


def extra_message(count: int) -> Message:
    """The message a commit adds after `count` messages: one more tool result."""
    return Message.tool_result(ToolCall(f"call_extra_{count}", "read_file"), _RESULT)


def paused_task(number: int, *, window: str = "gone-window") -> TaskRecord:
    """A ``cli-`` task paused in its `sleep` call, as ``/pending`` lists them.

    Its window is not connected, so every daemon connection may list it.
    """
    text = f"read notes/{number}.md; sleep 30"
    first = ToolCall("call_1_0", "read_file", {"path": f"notes/{number}.md"})
    second = ToolCall("call_1_1", "sleep", {"seconds": 30})
    transcript = (
        Message.user(text),
        Message.assistant("", (first, second)),
        Message.tool_result(first, _RESULT),
    )
    return TaskRecord(
        f"cli-{number:08x}",
        text,
        transcript,
        status=TaskStatus.INTERRUPTED,
        cause=Cause.PAUSE,
        window_hash=window,
        task_hash=f"{number:012x}",
    )


#: How many saves `fill_store` has under way at once: the store's writer thread commits
#: what is queued together (one sync to disk for the lot), so 100,000 tasks take seconds.
FILL_BATCH = 500


async def fill_store(path: Path, count: int) -> None:
    """Write `count` paused tasks into the store at `path` through the public store API.

    The saves go in batches of `FILL_BATCH` at once, numbers in order within each.
    """
    store = await TaskStore.open(path)
    try:
        for first in range(0, count, FILL_BATCH):
            async with trio.open_nursery() as nursery:
                for number in range(first, min(count, first + FILL_BATCH)):
                    nursery.start_soon(store.save, paused_task(number))
    finally:
        await store.aclose()

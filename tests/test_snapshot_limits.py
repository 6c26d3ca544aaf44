"""The snapshot limits, pinned to the byte: 32 KiB a tool result, 4 KiB an argument string.

The numbers are written out here, not imported: a change of either limit in
`agentrt.vocab.clamp` fails these tests. A clamped value is head + marker + tail
filling the limit exactly; a value at or under the limit is saved unchanged.
"""

from __future__ import annotations

import re

import pytest

from agentrt import Message
from agentrt import TaskRecord
from agentrt import ToolCall
from agentrt.store import Store
from agentrt.store.record import clamp_message

RESULT_LIMIT = 32 * 1024
ARGUMENT_LIMIT = 4 * 1024
MARKER = re.compile(r"\.\.\.\[(\d+) bytes elided\]\.\.\.")

#: Text whose every byte says where it was, so a head and a tail are checked exactly.
ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz"


def text_of(size: int) -> str:
    return "".join(ALPHABET[n % len(ALPHABET)] for n in range(size))


def check_clamped(original: str, saved: str, limit: int) -> None:
    """`saved` is head + marker + tail of `original`, exactly `limit` bytes long."""
    assert len(saved.encode()) == limit
    (match,) = MARKER.finditer(saved)
    head, tail = saved[: match.start()], saved[match.end() :]
    assert original.startswith(head) and original.endswith(tail)
    assert int(match.group(1)) == len(original) - len(head) - len(tail)
    # Head and tail share the room evenly (the head takes the odd byte).
    assert len(head) - len(tail) in (0, 1)


def result_message(size: int) -> Message:
    return Message.tool_result(ToolCall("c1", "big", {}), text_of(size))


def call_message(size: int) -> Message:
    call = ToolCall(
        "c1", "write_file", {"path": "a.txt", "content": text_of(size), "more": [text_of(size)]}
    )
    return Message.assistant("", [call])


@pytest.mark.parametrize("size", [RESULT_LIMIT + 1, RESULT_LIMIT + 10, 100_000, 1_000_000])
def test_a_tool_result_over_32_kib_is_clamped_to_exactly_32_kib(size: int) -> None:
    original = result_message(size)
    check_clamped(original.content, clamp_message(original).content, RESULT_LIMIT)


@pytest.mark.parametrize("size", [0, 1, RESULT_LIMIT - 1, RESULT_LIMIT])
def test_a_tool_result_at_or_under_32_kib_is_saved_unchanged(size: int) -> None:
    original = result_message(size)
    assert clamp_message(original) is original


@pytest.mark.parametrize("size", [ARGUMENT_LIMIT + 1, ARGUMENT_LIMIT + 10, 10_000, 100_000])
def test_an_argument_over_4_kib_is_clamped_to_exactly_4_kib(size: int) -> None:
    original = call_message(size)
    (call,) = clamp_message(original).tool_calls
    whole = original.tool_calls[0].arguments
    check_clamped(whole["content"], call.arguments["content"], ARGUMENT_LIMIT)
    check_clamped(whole["more"][0], call.arguments["more"][0], ARGUMENT_LIMIT)
    assert call.arguments["path"] == "a.txt"


@pytest.mark.parametrize("size", [0, 1, ARGUMENT_LIMIT - 1, ARGUMENT_LIMIT])
def test_an_argument_at_or_under_4_kib_is_saved_unchanged(size: int) -> None:
    original = call_message(size)
    assert clamp_message(original) == original


async def test_each_store_saves_a_snapshot_within_the_limits_to_the_byte(store: Store) -> None:
    big, under = result_message(100_000), result_message(RESULT_LIMIT)
    wide, narrow = call_message(10_000), call_message(ARGUMENT_LIMIT)
    record = TaskRecord("cli-limits", "limits", (Message.user("limits"), wide, big, narrow, under))
    await store.create(record)
    loaded = await store.load("cli-limits")
    assert loaded is not None
    _, saved_wide, saved_big, saved_narrow, saved_under = loaded.transcript
    check_clamped(big.content, saved_big.content, RESULT_LIMIT)
    assert saved_under == under
    content = saved_wide.tool_calls[0].arguments["content"]
    check_clamped(wide.tool_calls[0].arguments["content"], content, ARGUMENT_LIMIT)
    assert saved_narrow == narrow

"""The chat bridge's typing indicator and text splitting, on Trio's mock clock.

A transport in memory records when the bridge shows "typing" (by
`trio.current_time()`), so the interval is checked exactly without waiting
for it: the scripted model's ``sleep`` runs on the same mock clock.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import attrs
import pytest
import trio
import trio.testing

from agentrt import Runtime
from agentrt.bots import ChatBridge
from agentrt.frontends.chats.conversation import Button
from agentrt.frontends.chats.conversation import split_text
from agentrt.frontends.chats.conversation import utf16_length

CHAT = "42"
OWNER = "7"


@attrs.define(eq=False)
class MemoryTransport:
    """A `ChatTransport` that keeps what it was asked to do."""

    typing_every: float = 4.0
    max_text: int = 4096
    typed: list[float] = attrs.field(factory=list)
    sent: list[tuple[str, Sequence[Button]]] = attrs.field(factory=list)
    changed: trio.Event = attrs.field(factory=trio.Event)

    def text_length(self, text: str) -> int:
        return utf16_length(text)

    async def send(
        self, chat: str, text: str, buttons: Sequence[Button] = (), *, markdown: bool = False
    ) -> str:
        await trio.lowlevel.checkpoint()
        self.sent.append((text, tuple(buttons)))
        self._notify()
        return str(len(self.sent))

    async def edit(self, chat: str, message_id: str, text: str, *, markdown: bool = False) -> None:
        await trio.lowlevel.checkpoint()
        self.sent[int(message_id) - 1] = (text, ())
        self._notify()

    async def typing(self, chat: str) -> None:
        await trio.lowlevel.checkpoint()
        self.typed.append(trio.current_time())
        self._notify()

    def _notify(self) -> None:
        self.changed.set()
        self.changed = trio.Event()

    async def wait_for(self, predicate: object) -> None:
        assert callable(predicate)
        while not predicate():
            await self.changed.wait()


async def bridge_with(
    runtime: Runtime, transport: MemoryTransport, nursery: trio.Nursery
) -> ChatBridge:
    bridge = ChatBridge(
        runtime.executor, transport, "tg-", frozenset({OWNER}), "Telegram", "ALLOW", 0.01
    )
    await nursery.start(bridge.serve)
    return bridge


@pytest.mark.parametrize("every", [4.0, 8.0])
async def test_typing_repeats_while_a_run_works_and_stops_when_it_ends(
    runtime: Runtime, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock, every: float
) -> None:
    # No fail_after here: the store works in threads, and the mock clock jumps to the
    # next deadline whenever they keep every task waiting (the test's real-time deadline
    # still holds). Sleeps end exactly at their deadline, so the intervals are exact.
    transport = MemoryTransport(typing_every=every)
    bridge = await bridge_with(runtime, transport, nursery)
    await bridge.on_message(CHAT, OWNER, "sleep 30")
    await transport.wait_for(lambda: any("Done." in text for text, _ in transport.sent))
    await bridge.wait_idle()
    ended = trio.current_time()
    await trio.sleep(3 * every)  # nothing more once the run is over
    typed = transport.typed
    assert len(typed) >= 30 // every  # the tool alone slept 30 s
    assert [b - a for a, b in itertools.pairwise(typed)] == [every] * (len(typed) - 1)
    assert typed[-1] <= ended


async def test_no_typing_while_the_run_waits_for_the_persons_answer(
    runtime: Runtime, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    transport = MemoryTransport()
    bridge = await bridge_with(runtime, transport, nursery)
    await bridge.on_message(CHAT, OWNER, "write out.txt hello")
    await transport.wait_for(lambda: any(buttons for _, buttons in transport.sent))
    before = len(transport.typed)
    assert before >= 1  # shown while the model worked out the call
    await trio.sleep(60)  # a person taking their time over the question
    assert len(transport.typed) == before
    [(_, buttons)] = [s for s in transport.sent if s[1]]
    reply = await bridge.on_button(CHAT, OWNER, buttons[0].data)
    assert reply.ok
    await transport.wait_for(lambda: any("Done." in text for text, _ in transport.sent))


def test_split_counts_utf16_units_and_never_cuts_a_character() -> None:
    text = "a" + "😀" * 2048  # 4097 UTF-16 code units in 2049 characters
    pieces = split_text(text, 4096, utf16_length)
    assert "".join(pieces) == text
    assert [utf16_length(p) for p in pieces] == [4095, 2]
    assert all("\ud83d" not in p for p in pieces)  # no lone surrogate halves
    # Counting characters, the same text fits in one piece, which Telegram would refuse.
    assert split_text(text, 4096) == [text]


def test_split_prefers_a_newline_near_the_limit() -> None:
    text = "🙂" * 1500 + "\n" + "x" * 2000
    pieces = split_text(text, 4096, utf16_length)
    assert pieces == ["🙂" * 1500 + "\n", "x" * 2000]

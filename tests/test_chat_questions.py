"""A chat message answers the question the chat was shown, never one saved after it.

The bridge with a transport in memory (as `test_chat_typing`): what it sends is
read back from the transport, what the task waits for from the store.
"""

from __future__ import annotations

import trio
import trio.testing

from agentrt import Outcome
from agentrt import Runtime
from agentrt.bots import ChatBridge

from .conftest import Recorder
from .test_chat_typing import CHAT
from .test_chat_typing import OWNER
from .test_chat_typing import MemoryTransport
from .test_chat_typing import bridge_with

SESSION = f"tg-{CHAT}"
LIMIT = 10


def texts(transport: MemoryTransport) -> list[str]:
    return [text for text, _ in transport.sent]


async def says(bridge: ChatBridge, text: str) -> None:
    """The owner says `text`; return once what it started has ended and been shown."""
    await bridge.on_message(CHAT, OWNER, text)
    await trio.testing.wait_all_tasks_blocked()  # a run it started has begun by now
    await bridge.wait_idle()


async def waits_for(runtime: Runtime) -> tuple[str, str]:
    """The id and prompt of the question the chat's task waits for."""
    record = await runtime.store.load(SESSION)
    assert record is not None and record.question is not None
    return record.question.id, record.question.prompt


async def test_a_message_meant_for_a_question_answered_elsewhere_is_not_taken_for_the_next(
    runtime: Runtime, nursery: trio.Nursery
) -> None:
    transport = MemoryTransport()
    bridge = await bridge_with(runtime, transport, nursery)
    with trio.fail_after(LIMIT):
        await says(bridge, "ask Colour?; ask Size?")
        colour, prompt = await waits_for(runtime)
        assert prompt == "Colour?"
        assert any("Colour?" in text for text in texts(transport))
        # Answered elsewhere (another front-end of the owner's) meanwhile: "Size?" is saved.
        ended = await runtime.executor.resume(
            SESSION, owner="elsewhere", emit=Recorder(), answer="red", question_id=colour
        )
        assert ended.question == "Size?"
        # The chat's next message was typed for "Colour?": it is not "Size?"'s answer.
        await says(bridge, "blue")
        size, prompt = await waits_for(runtime)
        assert (size, prompt) == (ended.question_id, "Size?")
        record = await runtime.store.load(SESSION)
        assert record is not None
        [answered] = [t for t in record.questions if t.id == colour]
        refusal = f"Question {colour} was answered already at "
        said = texts(transport)[-2:]
        assert said[0].startswith(refusal) and said[0].endswith(".")
        assert said[1] == "❓ Size?\n(Your next message answers this question.)"
        assert all("blue" not in m.content for m in record.transcript)
        # The next message answers "Size?", the question the chat was shown.
        await says(bridge, "L")
    history = await runtime.store.load_history(SESSION)
    assert [m.content for m in history if m.role.value == "tool"] == ["red", "L"]
    assert answered.state.value == "answered"


async def test_a_chat_never_shown_the_question_its_task_waits_for_is_shown_it_first(
    runtime: Runtime, nursery: trio.Nursery
) -> None:
    # The task parked before this bridge started (the daemon restarted since).
    ended = await runtime.executor.run(SESSION, "ask Name?", owner="before", emit=Recorder())
    assert ended.outcome is Outcome.AWAITING_ANSWER
    transport = MemoryTransport()
    bridge = await bridge_with(runtime, transport, nursery)
    with trio.fail_after(LIMIT):
        await says(bridge, "Ada")
        assert texts(transport) == ["❓ Name?\n(Your next message answers this question.)"]
        assert await waits_for(runtime) == (ended.question_id, "Name?")
        await says(bridge, "Grace")
    assert await runtime.store.load(SESSION) is None
    history = await runtime.store.load_history(SESSION)
    assert [m.content for m in history if m.role.value == "tool"] == ["Grace"]

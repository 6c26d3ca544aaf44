"""The interrupt ledger as the model receives it: exact request bodies after each stop.

A fake OpenAI-compatible server and a fake Anthropic server (tests/fakes/llm_server.py,
their real wire formats) play the model. The run is stopped with each cause at each kind
of boundary (streaming, a call running, a call committed, a question waiting, inside a
subagent); then the task is resumed (or, after a user-cancel, the session gets its next
message) and the body of the next model request is read: a tool result for every call of
the interrupted round, one note placed where the provider takes it, every claim in it true.

Calls that run until the test lets them go are two tools added for these tests: ``hold``
(records no start, as a read has none) and ``hold_effect`` (records its start before its
effect, as a write or a command does).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from collections.abc import Awaitable
from collections.abc import Callable
from pathlib import Path
from typing import Any
from typing import ClassVar

import attrs
import pytest
import trio

from agentrt import Cause
from agentrt import Event
from agentrt import Runtime
from agentrt import open_runtime
from agentrt.agent.tools import TOOLS
from agentrt.agent.tools.base import Tool
from agentrt.agent.tools.base import ToolRun
from agentrt.models.anthropic import AnthropicModel
from agentrt.models.messages import ToolCall
from agentrt.models.openai import OpenAIModel
from agentrt.models.providers import RetryPolicy
from agentrt.store.ledger import appended
from agentrt.store.ledger import note_text
from agentrt.store.record import TaskRecord
from agentrt.vocab.clamp import MARKER_RE
from agentrt.vocab.events import RunEnded
from agentrt.vocab.events import TaskStarted
from agentrt.vocab.events import TextEvent
from agentrt.vocab.events import ToolCallEvent
from agentrt.vocab.events import ToolResultEvent
from agentrt.vocab.reprs import record
from agentrt.vocab.stops import CallState
from agentrt.vocab.stops import Interruption
from agentrt.vocab.stops import LedgerCall
from agentrt.vocab.stops import StopKind
from agentrt.vocab.terms import TaskStatus

from .fakes.llm_server import OA_DONE
from .fakes.llm_server import Handler
from .fakes.llm_server import LLMServer
from .fakes.llm_server import an_end
from .fakes.llm_server import an_event
from .fakes.llm_server import an_start
from .fakes.llm_server import an_text_block
from .fakes.llm_server import an_tool_block
from .fakes.llm_server import oa_finish
from .fakes.llm_server import oa_text
from .fakes.llm_server import oa_tool
from .fakes.llm_server import sse
from .fakes.llm_server import stall

SESSION = "cli-ledger"
#: A token no process has: what a record left running by a process that died names.
DEAD_RUNNER = "999999999:0"
FAST = RetryPolicy(max_attempts=1, base_delay=0.001, max_delay=0.01)


# -- the tools the test holds --------------------------------------------------------------


@attrs.define(eq=False)
class Gate:
    """Where held calls wait: the test sees each enter and lets it go (or makes it fail)."""

    entered: dict[str, trio.Event] = attrs.field(factory=dict)
    released: dict[str, trio.Event] = attrs.field(factory=dict)
    fail: set[str] = attrs.field(factory=set)

    def _event(self, table: dict[str, trio.Event], call_id: str) -> trio.Event:
        return table.setdefault(call_id, trio.Event())

    async def hold(self, call_id: str) -> str:
        self._event(self.entered, call_id).set()
        await self._event(self.released, call_id).wait()
        if call_id in self.fail:
            raise RuntimeError(f"{call_id} broke")
        return f"{call_id} held"

    async def wait_entered(self, call_id: str) -> None:
        await self._event(self.entered, call_id).wait()

    def release(self, call_id: str) -> None:
        self._event(self.released, call_id).set()

    def rearm(self) -> None:
        """For the next run: calls enter and wait again."""
        self.entered.clear()
        self.released.clear()


GATE = Gate()


@record
class Hold(Tool):
    NAME: ClassVar = "hold"
    DESCRIPTION: ClassVar = "Wait until the test lets go."
    TESTING: ClassVar = True

    async def run(self, agent: ToolRun, call: ToolCall) -> str:
        agent.asks_nothing()
        return await GATE.hold(call.id)


@record
class HoldEffect(Tool):
    NAME: ClassVar = "hold_effect"
    DESCRIPTION: ClassVar = "Record a start, then wait until the test lets go."
    TESTING: ClassVar = True
    RECORDS_START: ClassVar = True

    async def run(self, agent: ToolRun, call: ToolCall) -> str:
        await agent.begin_effect(call)
        return await GATE.hold(call.id)


@pytest.fixture(autouse=True)
def held_tools(monkeypatch: pytest.MonkeyPatch) -> Gate:
    monkeypatch.setitem(TOOLS, "hold", Hold)
    monkeypatch.setitem(TOOLS, "hold_effect", HoldEffect)
    GATE.rearm()
    GATE.fail.clear()
    return GATE


# -- the two wire formats ------------------------------------------------------------------


@attrs.frozen
class Wire:
    name: str
    build: Callable[[LLMServer], Any]
    #: A reply of plain text.
    text: Callable[[str], list[bytes]]
    #: A reply of tool calls [(id, name, arguments)].
    calls: Callable[[list[tuple[str, str, dict[str, Any]]]], list[bytes]]
    #: The start of a reply, streaming "partial", that never ends.
    partial: list[bytes]
    #: A reply that streams "partial" and then fails.
    fails: list[bytes]

    def reply(self, body: list[bytes]) -> Handler:
        return sse(body)


def _an_calls(calls: list[tuple[str, str, dict[str, Any]]]) -> list[bytes]:
    out = [an_start()]
    for n, (call_id, name, arguments) in enumerate(calls):
        out += an_tool_block(n, call_id, name, [json.dumps(arguments)])
    return out + an_end("tool_use")


def _oa_calls(calls: list[tuple[str, str, dict[str, Any]]]) -> list[bytes]:
    out = []
    for n, (call_id, name, arguments) in enumerate(calls):
        out.append(oa_tool(n, id=call_id, name=name, arguments=json.dumps(arguments)))
    return [*out, oa_finish("tool_calls"), OA_DONE]


ANTHROPIC = Wire(
    "anthropic",
    lambda server: AnthropicModel("claude-test", server.base_url, api_key="k", retry=FAST),
    lambda text: [an_start(), *an_text_block(0, [text]), *an_end()],
    _an_calls,
    [an_start(), *an_text_block(0, ["partial"])[:2]],
    [
        an_start(),
        *an_text_block(0, ["partial"])[:2],
        an_event("error", error={"type": "invalid_request_error", "message": "it broke"}),
    ],
)
OPENAI = Wire(
    "openai",
    lambda server: OpenAIModel("test-model", server.base_url + "/v1", api_key="k", retry=FAST),
    lambda text: [oa_text(text), oa_finish(), OA_DONE],
    _oa_calls,
    [oa_text("partial")],
    [oa_text("partial"), b'data: {"error": {"message": "it broke", "type": "x"}}\n\n'],
)


@pytest.fixture(params=[OPENAI, ANTHROPIC], ids=lambda wire: wire.name)
def wire(request: pytest.FixtureRequest) -> Wire:
    chosen: Wire = request.param
    return chosen


@pytest.fixture
async def runtime(tmp_path: Path, llm_server: LLMServer, wire: Wire) -> AsyncIterator[Runtime]:
    work = tmp_path / "work"
    work.mkdir()
    async with open_runtime(
        tmp_path / "state", model=wire.build(llm_server), workdir=work, restricted_paths=()
    ) as rt:
        yield rt


# -- driving a run to a boundary -------------------------------------------------------------


@attrs.define(eq=False)
class Run:
    """One run of the session, its events, and a way to wait for one."""

    runtime: Runtime
    events: list[Event] = attrs.field(factory=list)
    _changed: trio.Event = attrs.field(factory=trio.Event)
    task_hash: str = ""

    async def emit(self, event: Event) -> None:
        self.events.append(event)
        if isinstance(event, TaskStarted):
            self.task_hash = event.task_hash
        self._changed.set()
        self._changed = trio.Event()

    async def wait_for(self, test: Callable[[Event], bool]) -> Event:
        while True:
            for event in self.events:
                if test(event):
                    return event
            await self._changed.wait()


def text_came(event: Event) -> bool:
    return isinstance(event, TextEvent)


def result_of(call_id: str) -> Callable[[Event], bool]:
    return lambda e: isinstance(e, ToolResultEvent) and e.call_id == call_id


def call_of(call_id: str) -> Callable[[Event], bool]:
    return lambda e: isinstance(e, ToolCallEvent) and e.call_id == call_id


def held(*call_ids: str) -> Callable[[Run], Awaitable[None]]:
    """A boundary: every one of `call_ids` is inside its tool, waiting to be let go."""

    async def at(run: Run) -> None:
        for call_id in call_ids:
            await GATE.wait_entered(call_id)
        await trio.testing.wait_all_tasks_blocked()

    return at


def released(*call_ids: str) -> Callable[[Run], Awaitable[None]]:
    """After the resume: let each of `call_ids` go as it enters its tool again."""

    async def let_go(run: Run) -> None:
        for call_id in call_ids:
            await GATE.wait_entered(call_id)
            GATE.release(call_id)

    return let_go


async def answer_questions(runtime: Runtime, answers: dict[str, str], task_status: Any) -> None:
    """A listener for the session's questions: answers those in `answers`, leaves the rest."""
    with runtime.registry.listen("", name="test") as listener:
        task_status.started()
        while True:
            entry = await listener.claim()
            if entry.request.prompt in answers:
                entry.answer(answers[entry.request.prompt])


CAUSES = ("user_cancel", "pause", "disconnect", "shutdown", "crash")
_CAUSE = {
    "user_cancel": Cause.USER_CANCEL,
    "pause": Cause.PAUSE,
    "disconnect": Cause.DISCONNECT,
    "shutdown": Cause.SHUTDOWN,
    "crash": Cause.PAUSE,  # then the record is made what a crash at that point leaves
}
_STOPPED_BY = {
    "user_cancel": "This task was stopped by the user at ",
    "pause": "This task was stopped by a pause at ",
    "disconnect": "This task was stopped by a disconnect (the window or connection that ran "
    "it went away) at ",
    "shutdown": "This task was stopped by a shutdown of agentrt at ",
    "crash": "This task was stopped by a crash (the process running it died) after ",
    "failure": "This task was stopped by an error at ",
}


async def as_crashed(runtime: Runtime) -> None:
    """Make the kept task what a process that died at the same point leaves: running, with
    a runner that is gone, and no word of the stop."""

    def crashed(record: TaskRecord) -> TaskRecord:
        subagents = {k: attrs.evolve(j, interruptions=()) for k, j in record.subagents.items()}
        return record.evolve(
            status=TaskStatus.RUNNING,
            cause=None,
            interruptions=(),
            subagents=subagents,
            runner=DEAD_RUNNER,
        )

    assert await runtime.store.update(SESSION, crashed) is not None


@attrs.define(eq=False)
class Scenario:
    """A conversation with the fake model, stopped at one point and then carried on."""

    runtime: Runtime
    llm_server: LLMServer
    wire: Wire
    answers: dict[str, str] = attrs.field(factory=dict)
    #: Done to the kept task after the stop, before it is taken up again.
    after_stop: Callable[[], Awaitable[None]] | None = None

    async def stop_and_continue(
        self,
        nursery: trio.Nursery,
        first: list[Handler],
        at: Callable[[Run], Any],
        cause: str,
        then: list[Handler],
        after_resume: Callable[[Run], Any] | None = None,
    ) -> list[Any]:
        """Run to `at`, stop with `cause`, then resume (or, after a user-cancel, send the next
        message); the bodies of the model requests made after the stop."""
        await nursery.start(answer_questions, self.runtime, self.answers)
        self.llm_server.script(*first, *then)
        executor = self.runtime.executor
        run = Run(self.runtime)
        with trio.CancelScope() as scope:

            async def drive() -> None:
                await executor.run(SESSION, "go", owner=self, emit=run.emit)
                scope.cancel()

            nursery.start_soon(drive)
            await at(run)
            executor.cancel(run.task_hash, _CAUSE[cause])
            await trio.sleep_forever()
        before = len(self.llm_server.requests)
        if cause == "crash":
            await as_crashed(self.runtime)
        if self.after_stop is not None:
            await self.after_stop()
        GATE.rearm()
        again = Run(self.runtime)
        async with trio.open_nursery() as inner:
            if after_resume is not None and cause != "user_cancel":
                inner.start_soon(after_resume, again)
            if cause == "user_cancel":
                ended = await executor.run(SESSION, "next", owner=self, emit=again.emit)
            else:
                ended = await executor.resume(SESSION, owner=self, emit=again.emit)
        assert ended.outcome.value == "finished", ended
        return [r.json() for r in self.llm_server.requests[before:]]


@pytest.fixture
def scenario(runtime: Runtime, llm_server: LLMServer, wire: Wire) -> Scenario:
    return Scenario(runtime, llm_server, wire)


# -- reading what the model received ---------------------------------------------------------


@attrs.frozen
class Received:
    """The conversation of one request, read the same way for both wire formats."""

    #: (role, kind, text): kind is "text", "call ID NAME", or "result ID".
    items: tuple[tuple[str, str, str], ...]
    system: str

    @classmethod
    def of(cls, wire: Wire, body: Any) -> Received:
        items: list[tuple[str, str, str]] = []
        system = ""
        if wire is OPENAI:
            for m in body["messages"]:
                if m["role"] == "system":
                    system += m["content"]
                elif m["role"] == "tool":
                    items.append(("tool", f"result {m['tool_call_id']}", m["content"]))
                else:
                    if m.get("content"):
                        items.append((m["role"], "text", m["content"]))
                    for c in m.get("tool_calls") or []:
                        items.append((m["role"], f"call {c['id']} {c['function']['name']}", ""))
        else:
            system = body.get("system") or ""
            if isinstance(system, list):
                system = "".join(b["text"] for b in system)
            for m in body["messages"]:
                for b in m["content"]:
                    if b["type"] == "text":
                        items.append((m["role"], "text", b["text"]))
                    elif b["type"] == "tool_use":
                        items.append((m["role"], f"call {b['id']} {b['name']}", ""))
                    elif b["type"] == "tool_result":
                        content = b["content"]
                        if isinstance(content, list):
                            content = "".join(x["text"] for x in content)
                        items.append(("tool", f"result {b['tool_use_id']}", content))
        return cls(tuple(items), system)

    def notes(self) -> list[str]:
        return [text for _, kind, text in self.items if text.startswith("agentrt: ")]

    def note(self) -> str:
        notes = self.notes()
        assert len(notes) == 1, self.items
        return notes[0]

    def result(self, call_id: str) -> str:
        found = [text for _, kind, text in self.items if kind == f"result {call_id}"]
        assert len(found) == 1, (call_id, self.items)
        return found[0]

    def position(self, predicate: Callable[[tuple[str, str, str]], bool]) -> int:
        return next(i for i, item in enumerate(self.items) if predicate(item))


def check_placement(wire: Wire, body: Any, received: Received) -> None:
    """The note is a user turn (OpenAI) or a text block of the user turn (Anthropic), after
    the tool results it speaks of; never a system message."""
    assert "agentrt:" not in received.system
    note = received.note()
    at = received.position(lambda item: item[2] == note)
    assert received.items[at][0] == "user"
    results = [i for i, item in enumerate(received.items) if item[0] == "tool"]
    assert all(i < at for i in results), "the note comes after every tool result"
    if wire is OPENAI:
        message = next(m for m in body["messages"] if m.get("content") == note)
        assert message == {"role": "user", "content": note}
    else:
        turn = next(m for m in body["messages"] if any(b.get("text") == note for b in m["content"]))
        assert turn["role"] == "user"
        kinds = [b["type"] for b in turn["content"]]
        assert kinds == sorted(kinds, key=lambda k: k != "tool_result"), "tool_result blocks first"
        at = next(i for i, b in enumerate(turn["content"]) if b.get("text") == note)
        # After it, only the next message the person sent (when the task was thrown away).
        assert [b.get("text") for b in turn["content"][at + 1 :]] in ([], ["next"])


def check_true(note: str, cause: str) -> None:
    assert note.startswith("agentrt: " + _STOPPED_BY[cause]), note
    assert "rejected" not in note
    assert "shortened" not in note, "nothing was shortened"
    if cause == "user_cancel":
        assert note.endswith("It was not resumed: this is the record of what had happened.")
    else:
        assert "It has been resumed" in note


# -- the boundaries ------------------------------------------------------------------------------


@pytest.mark.parametrize("cause", [*CAUSES, "failure"])
async def test_stopped_while_streaming(
    scenario: Scenario, wire: Wire, nursery: trio.Nursery, cause: str
) -> None:
    first = [stall(wire.partial)] if cause != "failure" else [sse(wire.fails)]

    async def at(run: Run) -> None:
        await run.wait_for(text_came)
        if cause == "failure":
            await run.wait_for(lambda e: isinstance(e, RunEnded))

    if cause == "failure":
        bodies = await _fail_then_resume(scenario, nursery, first, [sse(wire.text("ok"))])
    else:
        bodies = await scenario.stop_and_continue(nursery, first, at, cause, [sse(wire.text("ok"))])
    assert len(bodies) == 1
    received = Received.of(wire, bodies[0])
    note = received.note()
    check_placement(wire, bodies[0], received)
    check_true(note, cause)
    assert "The reply you were writing (about 1 words) was not saved." in note
    assert "The calls of the round it stopped" not in note, "no call was interrupted"
    texts = [text for role, kind, text in received.items if kind == "text" and role == "user"]
    expected = ["go", note, "next"] if cause == "user_cancel" else ["go", note]
    assert texts == expected


async def _fail_then_resume(
    scenario: Scenario, nursery: trio.Nursery, first: list[Handler], then: list[Handler]
) -> list[Any]:
    """A run the model's error ends (the task is kept, failed), then its resume."""
    scenario.llm_server.script(*first, *then)
    executor = scenario.runtime.executor
    await nursery.start(answer_questions, scenario.runtime, scenario.answers)
    ended = await executor.run(SESSION, "go", owner=scenario, emit=Run(scenario.runtime).emit)
    assert ended.outcome.value == "failed" and ended.pending_kept, ended
    before = len(scenario.llm_server.requests)
    GATE.rearm()
    for call_id in list(GATE.fail):
        GATE.fail.discard(call_id)
    resume_run = Run(scenario.runtime)

    async def let_go(call_id: str) -> None:
        await GATE.wait_entered(call_id)
        GATE.release(call_id)

    async with trio.open_nursery() as inner:
        for call_id in ("h1", "h2"):  # whichever runs again
            inner.start_soon(let_go, call_id)
        again = await executor.resume(SESSION, owner=scenario, emit=resume_run.emit)
        inner.cancel_scope.cancel()
    assert again.outcome.value == "finished", again
    return [r.json() for r in scenario.llm_server.requests[before:]]


@pytest.mark.parametrize("cause", CAUSES)
async def test_stopped_while_calls_run(
    scenario: Scenario, wire: Wire, nursery: trio.Nursery, cause: str
) -> None:
    first = [sse(wire.calls([("h1", "hold_effect", {}), ("h2", "hold", {})]))]

    bodies = await scenario.stop_and_continue(
        nursery, first, held("h1", "h2"), cause, [sse(wire.text("ok"))], released("h1", "h2")
    )
    received = Received.of(wire, bodies[-1])
    note = received.note()
    check_placement(wire, bodies[-1], received)
    check_true(note, cause)
    if cause == "user_cancel":
        # Nothing ran again: each call has the result that says what became of it.
        assert received.result("h1") == (
            "stopped by the user while running: its process was killed, so it may have done "
            "part of its work; it was not run again"
        )
        assert received.result("h2") == received.result("h1")
        assert (
            "hold_effect call h1: stopped while running (its process was killed: it may have "
            "done part of its work); it was not run again" in note
        )
        assert received.items[-1] == ("user", "text", "next")
        assert GATE.entered == {}, "no call ran again"
        return
    assert received.result("h1") == "h1 held"
    assert received.result("h2") == "h2 held"
    if cause == "crash":
        # The run died: a call that recorded its start, and one whose tool records none,
        # may have run; nobody saw them stopped.
        for name, call_id in (("hold_effect", "h1"), ("hold", "h2")):
            assert (
                f"{name} call {call_id}: may have run (it started and its result was never "
                "saved); it was run again after the resume, and its result above is from that "
                "run" in note
            )
    else:
        for name, call_id in (("hold_effect", "h1"), ("hold", "h2")):
            assert (
                f"{name} call {call_id}: stopped while running (its process was killed: it may "
                "have done part of its work); it was run again after the resume, and its result "
                "above is from that run" in note
            )


@pytest.mark.parametrize("cause", [*CAUSES, "failure"])
async def test_stopped_after_a_call_committed(
    scenario: Scenario, wire: Wire, nursery: trio.Nursery, cause: str
) -> None:
    first = [sse(wire.calls([("h1", "hold", {}), ("h2", "hold_effect", {})]))]
    if cause == "failure":
        GATE.fail.add("h2")

    async def at(run: Run) -> None:
        GATE.release("h1")
        await run.wait_for(result_of("h1"))
        await GATE.wait_entered("h2")
        await trio.testing.wait_all_tasks_blocked()

    if cause == "failure":

        async def fail_h2() -> None:
            await GATE.wait_entered("h1")
            GATE.release("h1")
            await GATE.wait_entered("h2")
            GATE.release("h2")

        nursery.start_soon(fail_h2)
        bodies = await _fail_then_resume(scenario, nursery, first, [sse(wire.text("ok"))])
    else:
        bodies = await scenario.stop_and_continue(
            nursery, first, at, cause, [sse(wire.text("ok"))], released("h2")
        )
    received = Received.of(wire, bodies[-1])
    note = received.note()
    check_placement(wire, bodies[-1], received)
    check_true(note, cause)
    assert received.result("h1") == "h1 held"
    assert "hold call h1: done (its result was saved)" in note
    assert "hold call h1: done (its result was saved);" not in note.replace(
        "hold call h1: done (its result was saved); hold_effect", ""
    ), "nothing is said to have become of a call that was done"
    if cause == "user_cancel":
        assert received.result("h2").startswith("stopped by the user while running")
        return
    assert received.result("h2") == "h2 held"
    states = {
        "crash": "may have run (it started and its result was never saved)",
        "failure": "may have run (it started and its result was never saved)",
    }
    state = states.get(
        cause, "stopped while running (its process was killed: it may have done part of its work)"
    )
    assert (
        f"hold_effect call h2: {state}; it was run again after the resume, and its result "
        "above is from that run" in note
    ), note
    if cause == "failure":
        assert "(RuntimeError: h2 broke)" in note


@pytest.mark.parametrize("cause", CAUSES)
async def test_stopped_while_a_question_waits(
    scenario: Scenario, wire: Wire, nursery: trio.Nursery, cause: str
) -> None:
    first = [sse(wire.calls([("q1", "ask_user", {"question": "Colour?"})]))]
    scenario.answers.clear()

    async def at(run: Run) -> None:
        # Nobody answers it in the first run: the question waits when the stop comes.
        while not scenario.runtime.registry.waiting_for(SESSION):
            await trio.testing.wait_all_tasks_blocked()
        scenario.answers["Colour?"] = "blue"  # for the question asked again after the stop

    bodies = await scenario.stop_and_continue(nursery, first, at, cause, [sse(wire.text("ok"))])
    received = Received.of(wire, bodies[-1])
    note = received.note()
    check_placement(wire, bodies[-1], received)
    check_true(note, cause)
    if cause == "user_cancel":
        assert received.result("q1") == (
            "not run: the user stopped the task before this call started"
        )
        assert "ask_user call q1: not started; it was not run again" in note
        return
    assert received.result("q1") == "blue"
    if cause == "crash":
        assert (
            "ask_user call q1: may have run (it started and its result was never saved); it "
            "was run again after the resume" in note
        )
    else:
        assert "ask_user call q1: not started; it ran after the resume" in note


@pytest.mark.parametrize("cause", CAUSES)
async def test_stopped_inside_a_subagent(
    scenario: Scenario, wire: Wire, nursery: trio.Nursery, cause: str
) -> None:
    first = [
        sse(wire.calls([("s1", "spawn", {"task": "sub task"})])),
        sse(wire.calls([("c1", "hold_effect", {})])),
    ]

    then = [sse(wire.text("sub done")), sse(wire.text("ok"))]
    if cause == "user_cancel":
        then = [sse(wire.text("ok"))]
    bodies = await scenario.stop_and_continue(
        nursery, first, held("c1"), cause, then, released("c1")
    )
    top = Received.of(wire, bodies[-1])
    note = top.note()
    check_placement(wire, bodies[-1], top)
    check_true(note, cause)
    if cause == "user_cancel":
        assert top.result("s1").startswith("stopped by the user while running")
        # The subagent's own call is told too, by its agent.
        assert "sub1's hold_effect call c1: stopped while running" in note
        return
    assert top.result("s1") == "sub done"
    spawn_state = "may have run" if cause == "crash" else "stopped while running"
    assert f"spawn call s1: {spawn_state}" in note
    assert "it was run again after the resume" in note
    # The subagent's model got the ledger of its own round, in its own conversation.
    sub = Received.of(wire, bodies[0])
    sub_note = sub.note()
    check_placement(wire, bodies[0], sub)
    check_true(sub_note, cause)
    assert sub.result("c1") == "c1 held"
    c1_state = (
        "may have run (it started and its result was never saved)"
        if cause == "crash"
        else "stopped while running (its process was killed: it may have done part of its work)"
    )
    assert (
        f"hold_effect call c1: {c1_state}; it was run again after the resume, and its result "
        "above is from that run" in sub_note
    ), sub_note
    assert next(t for r, k, t in sub.items if r == "user" and k == "text") == "sub task"


async def test_the_note_says_shortened_only_when_a_saved_value_was(
    scenario: Scenario, wire: Wire, nursery: trio.Nursery
) -> None:
    # A 50,000-byte result is committed, then the round is paused: the resumed model reads
    # its saved form, cut to 32 KiB with a marker, and the note says so.
    first = [sse(wire.calls([("b1", "big", {"size": 50000}), ("h1", "hold", {})]))]

    async def at(run: Run) -> None:
        await run.wait_for(result_of("b1"))
        await held("h1")(run)

    bodies = await scenario.stop_and_continue(
        nursery, first, at, "pause", [sse(wire.text("ok"))], released("h1")
    )
    received = Received.of(wire, bodies[-1])
    note = received.note()
    saved = received.result("b1")
    marker = MARKER_RE.search(saved)
    assert marker is not None and len(saved.encode()) == 32 * 1024
    assert int(marker.group(1)) == 50000 - (32 * 1024 - len(marker.group(0)))
    assert note.endswith(
        "Some saved values were shortened: a '...[N bytes elided]...' marker shows where N "
        "bytes were removed. If an elided part matters, run that call again."
    )
    assert "big call b1: done (its result was saved)" in note


async def test_a_stop_nobody_saw_is_told_as_one_whose_calls_may_have_run(
    scenario: Scenario, wire: Wire, nursery: trio.Nursery
) -> None:
    # A fleet member whose lease ran out: another member marked its task interrupted
    # (disconnect) with no entry of the stop, as nobody saw its calls. The ledger does not
    # claim more than the record shows.
    first = [sse(wire.calls([("h1", "hold_effect", {})]))]

    async def fence() -> None:
        def unseen(record: TaskRecord) -> TaskRecord:
            return record.evolve(
                status=TaskStatus.INTERRUPTED, cause=Cause.DISCONNECT, interruptions=()
            )

        assert await scenario.runtime.store.update(SESSION, unseen) is not None

    scenario.after_stop = fence
    bodies = await scenario.stop_and_continue(
        nursery, first, held("h1"), "pause", [sse(wire.text("ok"))], released("h1")
    )
    note = Received.of(wire, bodies[-1]).note()
    assert note.startswith(
        "agentrt: This task was stopped by a disconnect (the window or connection that ran it "
        "went away) after "
    )
    assert (
        "hold_effect call h1: may have run (it started and its result was never saved); it was "
        "run again after the resume" in note
    )


# -- a round paused again and again ----------------------------------------------------------


def _stop(state: CallState, at: float, **more: Any) -> Interruption:
    return Interruption(
        StopKind.PAUSE, at, (LedgerCall("c1", "sleep", state, attempts=int(at)),), **more
    )


def test_a_stop_that_repeats_the_last_one_is_folded_into_it() -> None:
    first = _stop(CallState.STOPPED, 100.0)
    kept = appended(
        appended(appended((), first), _stop(CallState.STOPPED, 200.0)),
        _stop(CallState.STOPPED, 300.0),
    )
    assert kept == (_stop(CallState.STOPPED, 300.0, repeats=2, first_at=100.0),)
    # Another state, words lost or an error are stops of their own.
    assert len(appended(kept, _stop(CallState.NOT_STARTED, 400.0))) == 2
    assert len(appended(kept, _stop(CallState.STOPPED, 400.0, lost_words=3))) == 2
    assert len(appended(kept, _stop(CallState.STOPPED, 400.0, error="boom"))) == 2
    shutdown = attrs.evolve(_stop(CallState.STOPPED, 400.0), stop=StopKind.SHUTDOWN)
    assert len(appended(kept, shutdown)) == 2
    note = note_text(kept, {}, resumed=True, shortened=False)
    assert (
        "This task was stopped by a pause at 1970-01-01 00:05:00 UTC, the last of 3 such stops "
        "since 1970-01-01 00:01:40 UTC, each leaving its calls as told here." in note
    )
    assert note.count("The calls of the round it stopped") == 1

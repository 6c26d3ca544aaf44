"""Each run event is declared once; its frame and its JSON use the declaration's field names."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import get_args

import attrs
import pytest

from agentrt.present.shapes import EVENT_TYPES
from agentrt.present.shapes import event_to_json
from agentrt.protocol.frames import EVENT_FRAMES
from agentrt.protocol.frames import DaemonFrame
from agentrt.protocol.frames import frame_of
from agentrt.protocol.frames import from_wire
from agentrt.protocol.frames import to_wire
from agentrt.vocab.events import CompactionEvent
from agentrt.vocab.events import Event
from agentrt.vocab.events import ReasoningEvent
from agentrt.vocab.events import RunEnded
from agentrt.vocab.events import TaskStarted
from agentrt.vocab.events import TextEvent
from agentrt.vocab.events import ToolCallDeltaEvent
from agentrt.vocab.events import ToolCallEvent
from agentrt.vocab.events import ToolProgressEvent
from agentrt.vocab.events import ToolResultEvent
from agentrt.vocab.events import UsageEvent
from agentrt.vocab.events import VerifyEvent
from agentrt.vocab.terms import Cause
from agentrt.vocab.terms import Outcome

SRC = Path(__file__).resolve().parent.parent / "src"

#: One event of each class, every field set.
EXAMPLES: tuple[Event, ...] = (
    TaskStarted("t1", "cli-1", True, 3, 1, 40),
    TextEvent("t1", "hello", "sub1"),
    ReasoningEvent("t1", "hmm", ""),
    ToolCallDeltaEvent("t1", 0, "call_1", "write_file", '{"pa', ""),
    ToolCallEvent("t1", "call_1", "write_file", {"path": "a.txt"}, "", 2),
    ToolResultEvent("t1", "call_1", "write_file", "wrote 5 bytes", False, "sub1"),
    ToolProgressEvent("t1", "call_1", "git__clone", 2.0, 5.0, "receiving objects", "sub1"),
    VerifyEvent("t1", False, 2, "wrong password"),
    UsageEvent("t1", 10, 5, 4, 1),
    CompactionEvent("t1", 312, "sub1"),
    RunEnded("t1", "cli-1", Outcome.CANCELLED, Cause.PAUSE, "e", "q", True, "done"),
)

EVENT_CLASSES: tuple[type, ...] = get_args(Event)


def names(cls: type) -> list[str]:
    return [field.name for field in attrs.fields(cls)]


def test_the_examples_cover_every_event() -> None:
    assert [type(e) for e in EXAMPLES] == list(EVENT_CLASSES)
    assert set(EVENT_TYPES) == set(EVENT_CLASSES)


def test_each_event_has_one_frame_that_declares_nothing_of_its_own() -> None:
    bases = [frame.__mro__[1] for frame in EVENT_FRAMES]
    assert sorted(bases, key=lambda c: c.__name__) == sorted(
        EVENT_CLASSES, key=lambda c: c.__name__
    )
    for frame in EVENT_FRAMES:
        assert frame in get_args(DaemonFrame)
        # No fields of its own: the attrs fields and their annotations are the event's.
        assert "__attrs_attrs__" not in vars(frame)
        assert set(vars(frame).get("__annotations__", {})) == {"TYPE"}
        assert names(frame) == names(frame.__mro__[1])


def _declared_fields() -> dict[str, list[list[str]]]:
    """For each class in src, the annotated field names of its body (ClassVars left out)."""
    found: dict[str, list[list[str]]] = {}
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text("utf-8"), str(path))):
            if not isinstance(node, ast.ClassDef):
                continue
            fields = [
                item.target.id
                for item in node.body
                if isinstance(item, ast.AnnAssign)
                and isinstance(item.target, ast.Name)
                and "ClassVar" not in ast.unparse(item.annotation)
            ]
            if fields:
                found.setdefault(f"{path.relative_to(SRC)}:{node.name}", []).append(fields)
    return found


@pytest.mark.parametrize("cls", EVENT_CLASSES, ids=lambda cls: cls.__name__)
def test_every_event_is_declared_exactly_once(cls: type) -> None:
    # A second class with the same fields, in these names or the ones frames once used
    # (`task`, `session`), would be a second declaration of the event.
    spellings = {"task": "task_hash", "session": "session_id"}
    wanted = names(cls)
    copies = [
        where
        for where, bodies in _declared_fields().items()
        for fields in bodies
        if [spellings.get(name, name) for name in fields] == wanted
    ]
    assert f"agentrt/vocab/events.py:{cls.__name__}" in copies
    # (`TextEvent` and `ReasoningEvent` have the same fields, so both are found for each.)
    assert [where for where in copies if not where.startswith("agentrt/vocab/events.py:")] == []


@pytest.mark.parametrize("event", EXAMPLES, ids=lambda e: type(e).__name__)
def test_frame_and_json_field_names_are_the_declarations(event: Event) -> None:
    declared = names(type(event))
    frame = frame_of(event)
    wire = to_wire(frame)
    assert list(wire) == ["type", *declared]
    assert from_wire(wire, DaemonFrame) == frame
    assert [getattr(frame, name) for name in declared] == [
        getattr(event, name) for name in declared
    ]

    shown = event_to_json("cli-1", event)
    extra = {"type", "session_id"} | ({"summary"} if isinstance(event, RunEnded) else set())
    assert set(shown) == set(declared) | extra
    # The daemon's frame of an event shows as the event itself.
    assert event_to_json("cli-1", frame) == shown


@pytest.mark.parametrize("event", EXAMPLES, ids=lambda e: type(e).__name__)
def test_an_older_daemons_names_are_still_read(event: Event) -> None:
    wire = to_wire(frame_of(event))
    old = {{"task_hash": "task", "session_id": "session"}.get(k, k): v for k, v in wire.items()}
    assert from_wire(old, DaemonFrame) == frame_of(event)

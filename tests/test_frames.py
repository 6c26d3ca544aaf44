"""Frames: the tagged unions, strict structuring, and readable errors."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import attrs
import pytest

from agentrt import Cause
from agentrt import Event
from agentrt import Outcome
from agentrt import ReasoningEvent
from agentrt import Registry
from agentrt import Request
from agentrt import RequestContext
from agentrt import RequestKind
from agentrt import RunEnded
from agentrt import TaskStarted
from agentrt import TextEvent
from agentrt import ToolCallEvent
from agentrt import ToolResultEvent
from agentrt import UsageEvent
from agentrt import VerifyEvent
from agentrt.frontends.terminal.framing import ask_frame
from agentrt.present.shapes import event_to_json
from agentrt.protocol.codec import encode
from agentrt.protocol.frames import CLIENT_FRAMES
from agentrt.protocol.frames import DAEMON_FRAMES
from agentrt.protocol.frames import Ack
from agentrt.protocol.frames import AnswerFrame
from agentrt.protocol.frames import AskFrame
from agentrt.protocol.frames import AskWithdrawn
from agentrt.protocol.frames import Cancel
from agentrt.protocol.frames import ClientFrame
from agentrt.protocol.frames import CompactionFrame
from agentrt.protocol.frames import DaemonAction
from agentrt.protocol.frames import DaemonFrame
from agentrt.protocol.frames import DaemonRequest
from agentrt.protocol.frames import DaemonStatus
from agentrt.protocol.frames import EndedFrame
from agentrt.protocol.frames import ErrorCode
from agentrt.protocol.frames import ErrorFrame
from agentrt.protocol.frames import Frame
from agentrt.protocol.frames import FrameError
from agentrt.protocol.frames import Hello
from agentrt.protocol.frames import ModelItem
from agentrt.protocol.frames import ModelList
from agentrt.protocol.frames import ModelsAction
from agentrt.protocol.frames import ModelsRequest
from agentrt.protocol.frames import PendingAction
from agentrt.protocol.frames import PendingDetail
from agentrt.protocol.frames import PendingLines
from agentrt.protocol.frames import PendingList
from agentrt.protocol.frames import PendingPreview
from agentrt.protocol.frames import PendingRequest
from agentrt.protocol.frames import PendingTask
from agentrt.protocol.frames import ReasoningFrame
from agentrt.protocol.frames import Run
from agentrt.protocol.frames import Scope
from agentrt.protocol.frames import SessionItem
from agentrt.protocol.frames import SessionList
from agentrt.protocol.frames import SessionMessage
from agentrt.protocol.frames import SessionMessages
from agentrt.protocol.frames import SessionsAction
from agentrt.protocol.frames import SessionsRequest
from agentrt.protocol.frames import TaskFrame
from agentrt.protocol.frames import TextFrame
from agentrt.protocol.frames import ToolCallDeltaFrame
from agentrt.protocol.frames import ToolCallFrame
from agentrt.protocol.frames import ToolProgressFrame
from agentrt.protocol.frames import ToolResultFrame
from agentrt.protocol.frames import TurnItem
from agentrt.protocol.frames import TurnList
from agentrt.protocol.frames import Undone
from agentrt.protocol.frames import UsageFrame
from agentrt.protocol.frames import VerifyFrame
from agentrt.protocol.frames import Welcome
from agentrt.protocol.frames import frame_of
from agentrt.protocol.frames import from_wire
from agentrt.protocol.frames import from_wire_slow
from agentrt.protocol.frames import to_wire
from agentrt.protocol.frames import to_wire_slow
from agentrt.vocab.stops import CallState
from agentrt.vocab.stops import PreviewCall
from agentrt.vocab.stops import ResumePreview
from agentrt.vocab.stops import StopKind

CLIENT_SAMPLES: list[ClientFrame] = [
    Hello(1, "w-1"),
    Hello(1, "w-2", Scope.ALL),
    Run("hello there"),
    Run("again", session="cli-abc"),
    Run("here", session="chat-1", cwd="/home/ada/project"),
    AnswerFrame("q1", "allow"),
    AnswerFrame("q2", "", secret="hunter2"),
    Cancel("t-1"),
    Cancel("t-1", Cause.PAUSE),
    PendingRequest(PendingAction.LIST),
    PendingRequest(PendingAction.RESUME, session="cli-1", answer="blue"),
    PendingRequest(PendingAction.DISCARD, session="cli-1"),
    PendingRequest(PendingAction.LIST, prefix="chat-"),
    PendingRequest(PendingAction.LIST, all_pages=True, lines=True),
    PendingRequest(PendingAction.SHOW, session="chat-1"),
    PendingRequest(PendingAction.PREVIEW, session="cli-1"),
    PendingRequest(PendingAction.RESUME, session="chat-1", cwd="/home/ada"),
    SessionsRequest(SessionsAction.LIST),
    SessionsRequest(SessionsAction.LIST, prefix="chat-", limit=20, cursor="12.5:cli-1"),
    SessionsRequest(SessionsAction.SHOW, session="cli-1", after=9, limit=50),
    SessionsRequest(SessionsAction.RM, session="cli-1"),
    SessionsRequest(SessionsAction.UNDO, session="cli-1"),
    SessionsRequest(SessionsAction.UNDO, session="cli-1", turn=4, force=True),
    SessionsRequest(SessionsAction.UNDO, session="cli-1", task="abc", dry_run=True),
    SessionsRequest(SessionsAction.TURNS, session="cli-1"),
    DaemonRequest(DaemonAction.STATUS),
    DaemonRequest(DaemonAction.STOP),
    ModelsRequest(ModelsAction.LIST),
    ModelsRequest(ModelsAction.SET, session="cli-1", model="openai:gpt-4o"),
]

DAEMON_SAMPLES: list[DaemonFrame] = [
    Welcome(1, "0.1.0", "w-1"),
    TaskFrame("t-1", "cli-1"),
    TextFrame("t-1", "Hi", agent="sub"),
    ReasoningFrame("t-1", "The user wants a file.", agent=""),
    ToolCallDeltaFrame("t-1", 0, "c1", "write", '{"pa'),
    ToolCallFrame("t-1", "c1", "write", {"path": "/tmp/x", "n": [1, 2]}),
    ToolResultFrame("t-1", "c1", "write", "ok", ok=False),
    ToolProgressFrame("t-1", "c1", "git__clone", 2.0, 5.0, "receiving objects"),
    UsageFrame("t-1", 10, 20),
    CompactionFrame("t-1", 312),
    UsageFrame("t-1", 1200, 20, cache_read_tokens=1024, cache_creation_tokens=150),
    VerifyFrame("t-1", False, 2, "wrong password"),
    EndedFrame("t-1", "cli-1", Outcome.CANCELLED, Cause.PAUSE, pending_kept=True),
    AskFrame("q1", "t-1", "cli-1", RequestKind.CONFIRM, "Allow?", ("allow", "deny")),
    AskFrame(
        "q2",
        "t-1",
        "cli-1",
        RequestKind.CONFIRM,
        "edit /w/a (1 replacement)",
        ("allow", "deny"),
        tool="edit_file",
        diff="--- a/a\n+++ b/a\n@@ -1 +1 @@\n-x\n+y",
    ),
    AskWithdrawn("q1", "the run was cancelled"),
    PendingList((PendingTask("cli-1", "interrupted", "do it", 12.5, Cause.PAUSE, "Why?", "t"),)),
    PendingLines(("cli-1                interrupted (pause)          \x1f  do it",), (12,), "c"),
    PendingList((PendingTask("chat-9", "unreadable", "", 0.0, error="bad JSON; discard it"),)),
    PendingDetail(
        PendingTask("chat-1", "awaiting_answer", "ask x", 1.0, question="x", messages=2, runs=1),
        ({"role": "user", "content": "ask x"},),
    ),
    PendingDetail(
        PendingTask("chat-1", "awaiting_answer", "ask x", 1.0, question="x", messages=2, runs=1),
        ({"role": "user", "content": "ask x"},),
        ResumePreview(
            to_run=(PreviewCall("call_0_0", "ask_user", CallState.NOT_STARTED),),
            questions=("x",),
        ),
    ),
    PendingPreview(
        "cli-1",
        ResumePreview(
            kept=(PreviewCall("call_0_0", "read_file", CallState.DONE),),
            to_run=(PreviewCall("call_0_1", "shell", CallState.STOPPED, "sub1", attempt=2),),
            regenerated_words=40,
            stop=StopKind.PAUSE,
        ),
    ),
    SessionList(
        (SessionItem("cli-1", "hello", 1.0, 2.5, 4), SessionItem("cli-2", "", 0, 0, 0, "failed"))
    ),
    SessionList(next="2.5:cli-1"),
    ModelList(
        (ModelItem("scripted", True), ModelItem("openai:o3", usable=False, why="no API key")),
        "cli-1",
        "scripted",
    ),
    SessionMessages(
        SessionItem("cli-1", "read it", 1.0, 2.5, 3),
        (
            SessionMessage(0, "user", "read it", 1.0),
            SessionMessage(
                1, "assistant", "", 1.5, ({"id": "c1", "name": "read_file", "arguments": {}},)
            ),
            SessionMessage(2, "tool", "text", 2.0, tool_call_id="c1", name="read_file"),
        ),
        next=2,
    ),
    TurnList("cli-1", (TurnItem(0, "write a.txt hi", 2), TurnItem(4, "sh ls", 0))),
    Undone("cli-1", True, ("/w/a.txt",), ("/w/a.txt",), {"/w/a.txt": "/w/a.txt.agentrt-undo-1"}),
    Undone("cli-1", False, ("/w/a.txt",), ("/w/a.txt",), skipped={"c1": "over the limit"}),
    Undone("cli-1", False, ("/w/a.txt",), dry_run=True, task="abc"),
    DaemonStatus(41, "/run/d.sock", "0.1.0", "scripted", "ask", 12.5, 2, 1),
    DaemonStatus(
        41,
        "/run/d.sock",
        "0.1.0",
        "openai:gpt-4o",
        "auto-edit",
        3.0,
        1,
        0,
        http_error="127.0.0.1:8765 is in use (Address already in use)",
        stopping=True,
    ),
    Ack("cancel", "paused", task="t-1"),
    ErrorFrame(ErrorCode.NOT_FOUND, "no such task", ref="cancel"),
]


def test_every_frame_type_has_a_sample() -> None:
    assert {type(f) for f in CLIENT_SAMPLES} == set(CLIENT_FRAMES)
    assert {type(f) for f in DAEMON_SAMPLES} == set(DAEMON_FRAMES)


def test_frame_types_are_unique_per_direction() -> None:
    assert len({c.TYPE for c in CLIENT_FRAMES}) == len(CLIENT_FRAMES)
    assert len({c.TYPE for c in DAEMON_FRAMES}) == len(DAEMON_FRAMES)


@pytest.mark.parametrize("frame", CLIENT_SAMPLES, ids=repr)
def test_client_frames_round_trip(frame: ClientFrame) -> None:
    wire = to_wire(frame)
    assert next(iter(wire)) == "type"
    assert wire["type"] == frame.TYPE
    assert from_wire(wire, ClientFrame) == frame


@pytest.mark.parametrize("frame", DAEMON_SAMPLES, ids=repr)
def test_daemon_frames_round_trip(frame: DaemonFrame) -> None:
    assert from_wire(to_wire(frame), DaemonFrame) == frame


def test_same_type_name_means_different_frames_per_direction() -> None:
    assert isinstance(from_wire({"type": "hello", "version": 1, "window": "w"}, ClientFrame), Hello)
    welcome = {"type": "hello", "version": 1, "daemon_version": "x", "window": "w"}
    assert isinstance(from_wire(welcome, DaemonFrame), Welcome)
    assert isinstance(from_wire({"type": "pending", "action": "list"}, ClientFrame), PendingRequest)
    assert isinstance(from_wire({"type": "pending", "tasks": []}, DaemonFrame), PendingList)


def _error(data: Any, union: Any = ClientFrame) -> FrameError:
    with pytest.raises(FrameError) as info:
        from_wire(data, union)
    return info.value


def test_mistyped_field_names_type_and_path() -> None:
    err = _error({"type": "cancel", "task": 5})
    assert err.code is ErrorCode.INVALID
    assert err.ref == "cancel"
    assert str(err) == "invalid 'cancel' frame: expected string, got int @ $.task"


def test_strings_are_not_numbers_and_ints_are_not_booleans() -> None:
    assert "expected int, got str @ $.version" in str(
        _error({"type": "hello", "version": "1", "window": "w"})
    )
    assert "expected boolean, got int @ $.pause" in str(
        _error({"type": "cancel", "task": "t", "pause": 1})
    )
    assert "expected int, got bool @ $.version" in str(
        _error({"type": "hello", "version": True, "window": "w"})
    )


def test_missing_field_is_named() -> None:
    assert "required field missing @ $.window" in str(_error({"type": "hello", "version": 1}))


def test_unknown_field_is_refused() -> None:
    assert "unknown field paus" in str(_error({"type": "cancel", "task": "t", "paus": True}))


def test_bad_enum_lists_the_choices() -> None:
    err = _error({"type": "pending", "action": "frob"})
    assert "expected one of 'list', 'resume', 'discard', 'show', 'preview' @ $.action" in str(err)
    err = _error({"type": "ended", "task": "t", "session": "s", "outcome": "x"}, DaemonFrame)
    assert "@ $.outcome" in str(err)


def test_a_string_is_not_a_list() -> None:
    data: dict[str, Any] = {
        "type": "ask",
        "id": "q",
        "task": None,
        "session": "s",
        "kind": "confirm",
        "prompt": "p",
        "choices": "ab",
    }
    assert "expected list, got str @ $.choices" in str(_error(data, DaemonFrame))
    data["choices"] = ["a", 1]
    assert "expected string, got int @ $.choices[1]" in str(_error(data, DaemonFrame))


def test_nested_errors_have_paths() -> None:
    data = {"type": "pending", "tasks": [{"session": "s", "status": "x", "input": "i"}]}
    assert "required field missing @ $.tasks[0].updated_at" in str(_error(data, DaemonFrame))


def test_unknown_and_missing_type() -> None:
    err = _error({"type": "nope"})
    assert err.code is ErrorCode.UNKNOWN_TYPE
    assert (
        str(err)
        == "unknown frame type 'nope'; expected one of: answer, cancel, daemon, hello, models, pending, run, sessions"
    )
    assert str(_error({"task": "t"})).startswith('missing "type" field')
    # A daemon frame is not a client frame.
    assert _error({"type": "ack", "ref": "x", "detail": ""}).code is ErrorCode.UNKNOWN_TYPE


def test_non_object_is_malformed() -> None:
    err = _error([1, 2])
    assert err.code is ErrorCode.MALFORMED
    assert "got an array" in str(err)


def test_a_cancel_sends_its_cause_and_still_reads_the_older_pause_flag() -> None:
    assert to_wire(Cancel("t", cause=Cause.PAUSE)) == {
        "type": "cancel",
        "task": "t",
        "cause": "pause",
    }
    assert to_wire(Cancel("t")) == {"type": "cancel", "task": "t", "cause": "user_cancel"}
    older = from_wire({"type": "cancel", "task": "t", "pause": True}, ClientFrame)
    assert older == Cancel("t", cause=Cause.PAUSE)
    assert older.cause is Cause.PAUSE
    assert from_wire({"type": "cancel", "task": "t", "pause": False}, ClientFrame).cause is (
        Cause.USER_CANCEL
    )
    assert from_wire(
        {"type": "cancel", "task": "t", "pause": False, "cause": "pause"}, ClientFrame
    ) == Cancel("t", Cause.PAUSE)


def test_the_older_pause_flag_lives_only_in_the_decode_hook() -> None:
    # The frame has no such field: it cannot be built with one, nor does it send one.
    assert [field.name for field in attrs.fields(Cancel)] == ["task", "cause"]
    with pytest.raises(TypeError):
        Cancel("t", pause=True)  # type: ignore[call-arg]
    for cancel in (Cancel("t"), Cancel("t", Cause.PAUSE), from_wire_slow(_OLDER, ClientFrame)):
        assert "pause" not in to_wire(cancel)
        assert "pause" not in to_wire_slow(cancel)
    # The compiled decoder leaves the older spelling to the converter, whose hook reads it.
    assert from_wire(_OLDER, ClientFrame) == from_wire_slow(_OLDER, ClientFrame)
    assert from_wire(_OLDER, ClientFrame) == Cancel("t", Cause.PAUSE)


_OLDER: dict[str, Any] = {"type": "cancel", "task": "t", "pause": True}


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        ({"cause": "disconnect"}, "a cancel's cause is 'user_cancel' or 'pause', not 'disconnect'"),
        ({"cause": "user_cancel", "pause": True}, "'pause' is true but 'cause' is not 'pause'"),
    ],
)
def test_a_cancel_names_only_a_clients_cause_and_never_two(
    data: dict[str, Any], problem: str
) -> None:
    with pytest.raises(FrameError, match=re.escape(problem)) as caught:
        from_wire({"type": "cancel", "task": "t", **data}, ClientFrame)
    assert caught.value.code is ErrorCode.INVALID


def test_secret_is_not_in_repr() -> None:
    assert "hunter2" not in repr(AnswerFrame("q", "", secret="hunter2"))


def test_every_event_has_a_frame() -> None:
    events: list[Event] = [
        TaskStarted("t", "cli-1", resumed=True),
        TextEvent("t", "x"),
        ReasoningEvent("t", "hmm", "sub"),
        ToolCallEvent("t", "c", "sh", {"command": "ls"}),
        ToolResultEvent("t", "c", "sh", "out"),
        UsageEvent("t", 1, 2, cache_read_tokens=3, cache_creation_tokens=4),
        VerifyEvent("t", True, 3, "ok"),
        RunEnded("t", "cli-1", Outcome.FINISHED, text="done"),
    ]
    frames: list[Frame] = [frame_of(e) for e in events]
    assert [f.TYPE for f in frames] == [
        "task",
        "text",
        "reasoning",
        "tool_call",
        "tool_result",
        "usage",
        "verify",
        "ended",
    ]
    assert frames[0] == TaskFrame("t", "cli-1", resumed=True)
    assert frames[2] == ReasoningFrame("t", "hmm", "sub")
    assert frames[5] == UsageFrame("t", 1, 2, 3, 4)
    # The HTTP API and `agentrt run --json` show them in the runtime's words.
    assert event_to_json("cli-1", events[2]) == {
        "type": "reasoning",
        "task_hash": "t",
        "text": "hmm",
        "agent": "sub",
        "session_id": "cli-1",
    }
    usage = event_to_json("cli-1", events[5])
    assert (usage["cache_read_tokens"], usage["cache_creation_tokens"]) == (3, 4)
    assert frames[-1] == EndedFrame("t", "cli-1", Outcome.FINISHED, text="done")


async def test_ask_frame_of_an_entry() -> None:
    registry = Registry()
    ctx = RequestContext("cli-1", window_hash="w", task_hash="t-9")
    request = Request(
        RequestKind.PASSWORD,
        "Password for /etc",
        ("allow", "deny"),
        tool="write",
        error="wrong",
        diff="--- a/x\n+++ b/x",
    )
    entry = registry.post(request, ctx)
    assert ask_frame(entry) == AskFrame(
        entry.id,
        "t-9",
        "cli-1",
        RequestKind.PASSWORD,
        "Password for /etc",
        ("allow", "deny"),
        True,
        "write",
        "wrong",
        "--- a/x\n+++ b/x",
    )
    assert to_wire(ask_frame(entry))["kind"] == "password"
    assert ask_frame(entry).request == request


PROTOCOL_DOC = Path(__file__).resolve().parent.parent / "docs" / "protocol.md"


def _documented(section_title: str, union: Any) -> dict[str, Frame]:
    """The `json` examples under one section of docs/protocol.md, parsed as frames, by type."""
    text = PROTOCOL_DOC.read_text("utf-8")
    start = text.index(f"\n## {section_title}\n")
    end = text.find("\n## ", start + 1)
    section = text[start : end if end >= 0 else None]
    examples = re.findall(r"```json\n(.*?)\n```", section, flags=re.DOTALL)
    frames: dict[str, Frame] = {}
    for example in examples:
        frame = from_wire(json.loads(example), union)
        assert encode(frame).decode().rstrip("\n") == example, "examples are in wire form"
        frames[frame.TYPE] = frame
    return frames


def test_every_client_frame_is_documented_with_a_valid_example() -> None:
    documented = _documented("Client → daemon", ClientFrame)
    assert set(documented) == {cls.TYPE for cls in CLIENT_FRAMES}


def test_every_daemon_frame_is_documented_with_a_valid_example() -> None:
    documented = _documented("Daemon → client", DaemonFrame)
    assert set(documented) == {cls.TYPE for cls in DAEMON_FRAMES}


def test_every_error_code_is_documented() -> None:
    text = PROTOCOL_DOC.read_text("utf-8")
    for code in ErrorCode:
        assert f"`{code.value}`" in text, code


def test_the_order_of_frames_is_documented() -> None:
    text = PROTOCOL_DOC.read_text("utf-8")
    for title in ("A run", "A question", "A cancel (Ctrl+C)", "A pause", "A resume"):
        assert f"\n### {title}\n" in text

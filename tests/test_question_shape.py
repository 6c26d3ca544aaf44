"""One question shape: the frame, the JSON and the saved question are built from `Request`."""

from __future__ import annotations

import attrs
import pytest

from agentrt import Registry
from agentrt import RequestContext
from agentrt import RequestKind
from agentrt.frontends.terminal.framing import ask_frame
from agentrt.present.shapes import question_to_json
from agentrt.protocol.frames import AskFrame
from agentrt.protocol.frames import DaemonFrame
from agentrt.protocol.frames import from_wire
from agentrt.protocol.frames import to_wire
from agentrt.vocab.request import Request

REQUESTS = (
    Request.confirm("write_file", "write 5 bytes to notes.txt"),
    Request.question("Deploy where?"),
    Request.secret("API_KEY"),
    Request(RequestKind.PASSWORD, "Password for /etc", ("allow", "deny"), tool="sh", error="no"),
)


def names(cls: type) -> list[str]:
    return [field.name for field in attrs.fields(cls)]


def test_masked_follows_the_kind_and_is_never_given() -> None:
    assert [r.masked for r in REQUESTS] == [False, False, True, True]
    assert (
        "masked" not in attrs.fields_dict(Request) or not attrs.fields_dict(Request)["masked"].init
    )
    assert attrs.evolve(REQUESTS[2], kind=RequestKind.QUESTION).masked is False


@pytest.mark.parametrize("request_", REQUESTS, ids=lambda r: r.kind.value)
def test_the_frame_and_the_json_are_the_requests_fields(request_: Request) -> None:
    entry = Registry().post(request_, RequestContext("cli-1", window_hash="w", task_hash="t-9"))

    frame = ask_frame(entry)
    assert names(AskFrame) == ["id", "task", "session", *names(Request)]
    assert list(to_wire(frame)) == ["type", "id", "task", "session", *names(Request)]
    assert frame.request == request_
    assert frame.masked is request_.masked
    assert from_wire(to_wire(frame), DaemonFrame) == frame

    shown = question_to_json(entry)
    assert list(shown) == ["id", "session_id", "task_hash", "agent", *names(Request)]
    assert shown["kind"] == request_.kind.value
    assert shown["choices"] == list(request_.choices)
    assert shown["masked"] is request_.masked

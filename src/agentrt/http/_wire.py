"""What crosses the HTTP edge: request bodies in, events and tasks out, as JSON objects."""

from __future__ import annotations

import json
from typing import Any, TypeVar

import attrs
import cattrs

from .._events import (
    Event,
    RunEnded,
    TaskStarted,
    TextEvent,
    ToolCallDeltaEvent,
    ToolCallEvent,
    ToolResultEvent,
    UsageEvent,
    VerifyEvent,
)
from .._json import JsonNumberError, loads
from .._messages import Role
from .._pending import Entry
from .._present import describe_end
from .._record import TaskRecord
from .._store import UnreadableTask

#: Longest string of a tool call's arguments shown in an event (a file's content can be large).
EVENT_ARGUMENT_CHARS = 1000
#: How much of each transcript message a task summary shows.
SUMMARY_CHARS = 200


T = TypeVar("T")


class ApiError(Exception):
    """A request the HTTP API refuses: answered with `status` and ``{"error": {"code", "message"}}``.

    The runtime's own refusals (`agentrt.ExecutorError`) carry their status and
    code themselves; this is for what only the HTTP edge can refuse.
    """

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


class BadBodyError(ApiError, ValueError):
    """A request body that does not fit its route; the message says where and why."""

    def __init__(self, message: str) -> None:
        super().__init__(400, "bad_body", message)


@attrs.frozen
class RunBody:
    """`POST /v1/session/{id}/run`."""

    text: str


@attrs.frozen
class ResumeBody:
    """`POST /v1/session/{id}/task/resume`: the answer to the saved question, if any."""

    answer: str | None = None


@attrs.frozen
class CancelBody:
    """`POST /v1/task/{hash}/cancel`: pause keeps the pending task, otherwise it is dropped."""

    pause: bool = False


@attrs.frozen
class AnswerBody:
    """`POST /v1/questions/{id}/answer`: a choice or text, and masked input in `secret`."""

    value: str
    secret: str | None = attrs.field(default=None, repr=False)


def _strict(kind: type) -> Any:
    def structure(value: Any, _: Any) -> Any:
        # cattrs would turn 5 into "5" and "no" into True; a client sending those has a bug.
        if type(value) is not kind:
            raise TypeError(f"expected {kind.__name__}")
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                # JSON can escape half a surrogate pair; such text cannot be stored or sent.
                raise TypeError(f"expected {kind.__name__} without lone surrogates") from None
        return value

    return structure


#: The one converter for the HTTP edge.
converter = cattrs.Converter(forbid_extra_keys=True)
converter.register_structure_hook(str, _strict(str))
converter.register_structure_hook(bool, _strict(bool))


def parse_body(raw: bytes, cls: type[T]) -> T:
    """Structure a JSON body into `cls`; an empty body is ``{}``.

    Raises `BadBodyError` with a message such as ``expected str @ $.text`` that
    never quotes the submitted values (they may be secrets).
    """
    if not raw.strip():
        data: Any = {}
    else:
        try:
            data = loads(raw)
        except JsonNumberError as exc:
            raise BadBodyError(f"the body cannot be read: {exc}") from None
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise BadBodyError(f"the body is not valid JSON: {_json_problem(exc)}") from None
        except RecursionError:
            raise BadBodyError("the body is not valid JSON: it is nested too deeply") from None
    if not isinstance(data, dict):
        raise BadBodyError("the body must be a JSON object")
    try:
        return converter.structure(data, cls)
    except cattrs.BaseValidationError as exc:
        problems = "; ".join(_clean(m) for m in cattrs.transform_error(exc))
        raise BadBodyError(f"the body does not fit: {problems}") from None


def _json_problem(exc: ValueError) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return f"{exc.msg} at line {exc.lineno} column {exc.colno}"
    return "it is not UTF-8"


def _clean(message: str) -> str:
    # transform_error's wording for a missing field is "required field missing @ $.text".
    return message.replace("invalid value for type, ", "")


_EVENT_TYPES: dict[type, str] = {
    TaskStarted: "task_started",
    TextEvent: "text",
    ToolCallDeltaEvent: "tool_call_delta",
    ToolCallEvent: "tool_call",
    ToolResultEvent: "tool_result",
    VerifyEvent: "verify",
    UsageEvent: "usage",
    RunEnded: "run_ended",
}


def event_to_json(session_id: str, event: Event) -> dict[str, Any]:
    """A run event as sent on `/v1/events`: its fields plus ``type`` and ``session_id``.

    ``run_ended`` also carries ``summary``, how the run ended in words (`describe_end`).
    """
    obj: dict[str, Any] = converter.unstructure(event)
    if isinstance(event, ToolCallEvent):
        obj["arguments"] = {k: _shorten(v) for k, v in event.arguments.items()}
    obj["type"] = _EVENT_TYPES[type(event)]
    obj["session_id"] = session_id
    if isinstance(event, RunEnded):
        # The words every front-end uses for this end, so the page need not make its own.
        obj["summary"] = describe_end(event).status
    return obj


def _shorten(value: Any) -> Any:
    if isinstance(value, str) and len(value) > EVENT_ARGUMENT_CHARS:
        return value[:EVENT_ARGUMENT_CHARS] + f"... ({len(value)} characters)"
    return value


def question_to_json(entry: Entry) -> dict[str, Any]:
    """A claimed question as the page and `/v1/questions` show it (no answer, no secret)."""
    request = entry.request
    return {
        "id": entry.id,
        "session_id": entry.context.session_id,
        "task_hash": entry.context.task_hash,
        "agent": entry.context.agent_path,
        "kind": request.kind.value,
        "prompt": request.prompt,
        "choices": list(request.choices),
        "masked": request.masked,
        "tool": request.tool,
        "error": request.error,
    }


def task_to_json(record: TaskRecord, *, running: bool) -> dict[str, Any]:
    """A pending task: its state, saved question, and a summary of its clamped transcript."""
    question = record.question
    return {
        "session_id": record.session_id,
        "status": record.status.value,
        "running": running,
        "cause": record.cause.value if record.cause else None,
        "error": record.error,
        "input": record.input,
        "question": None
        if question is None
        else {
            "call_id": question.call_id,
            "prompt": question.prompt,
            "kind": question.kind.value,
        },
        "task_hash": record.task_hash,
        "runs": record.runs,
        "created_at": record.created_at,
        "updated_at": record.updated_at,
        "transcript": summarise(record),
    }


def unreadable_to_json(record: UnreadableTask, *, running: bool) -> dict[str, Any]:
    """A stored task that cannot be decoded: the fields of `task_to_json`, mostly null.

    `error` says what is wrong and how to discard it (``DELETE .../task``).
    """
    return {
        "session_id": record.session_id,
        "status": record.status,
        "running": running,
        "cause": None,
        "error": record.error,
        "input": None,
        "question": None,
        "task_hash": None,
        "runs": None,
        "created_at": None,
        "updated_at": record.updated_at,
    }


def summarise(record: TaskRecord) -> dict[str, Any]:
    """Counts and a short line per message of a record's (already clamped) transcript."""
    items: list[dict[str, Any]] = []
    calls = results = 0
    for message in record.transcript:
        item: dict[str, Any] = {"role": message.role.value, "text": _preview(message.content)}
        if message.tool_calls:
            calls += len(message.tool_calls)
            item["tool_calls"] = [call.name for call in message.tool_calls]
        if message.role is Role.TOOL:
            results += 1
            item["tool"] = message.name
        items.append(item)
    return {
        "messages": len(record.transcript),
        "tool_calls": calls,
        "tool_results": results,
        "unanswered_calls": [call.name for call in record.unanswered_calls()],
        "elided": record.has_elisions(),
        "items": items,
    }


def _preview(text: str) -> str:
    return text if len(text) <= SUMMARY_CHARS else text[:SUMMARY_CHARS] + "..."


def error_body(code: str, message: str) -> dict[str, Any]:
    """The one shape of every error the API returns."""
    return {"error": {"code": code, "message": message}}

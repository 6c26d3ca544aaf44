"""The JSON shape of an event, a question, a task, a resume's preview and a stored message,
wherever one is shown as JSON.

The HTTP API (`/v1/events`, `/v1/questions`, `/v1/session/{id}/task`) and
``agentrt run --json`` print these same objects, in the runtime's own words
(``task_hash``, ``session_id``, ``task_started``, ``run_ended``, ``question``).
An event's fields are those of its declaration (`agentrt.vocab.events`), as in its
daemon frame; docs/protocol.md says where the two shapes differ.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any
from typing import Final

import attrs
import cattrs

from ..core.pending import Entry
from ..models.messages import Role
from ..models.messages import ToolCall
from ..store import StoredMessage
from ..store import UnreadableTask
from ..store.record import TaskRecord
from ..store.record import TaskSummary
from ..vocab.events import CompactionEvent
from ..vocab.events import Event
from ..vocab.events import ReasoningEvent
from ..vocab.events import RunEnded
from ..vocab.events import TaskStarted
from ..vocab.events import TextEvent
from ..vocab.events import ToolCallDeltaEvent
from ..vocab.events import ToolCallEvent
from ..vocab.events import ToolProgressEvent
from ..vocab.events import ToolResultEvent
from ..vocab.events import UsageEvent
from ..vocab.events import VerifyEvent
from ..vocab.request import Request
from ..vocab.stops import PreviewCall
from ..vocab.stops import ResumePreview
from ..vocab.usage import RunTokens
from ..vocab.usage import TokenCount
from .ends import describe_end
from .preview import preview_lines

#: The version of these shapes. ``agentrt --json`` puts it in every line as ``"v"``; the HTTP
#: API carries it in its paths (``/v1/``). A change a reader could trip on raises it.
SCHEMA_VERSION: Final = 1
#: Longest string of a tool call's arguments shown in an event (a file's content can be large).
EVENT_ARGUMENT_CHARS = 1000
#: How much of each transcript message a task summary shows.
SUMMARY_CHARS = 200

_converter = cattrs.Converter()

#: The ``type`` of each event.
EVENT_TYPES: dict[type, str] = {
    TaskStarted: "task_started",
    TextEvent: "text",
    ReasoningEvent: "reasoning",
    ToolCallDeltaEvent: "tool_call_delta",
    ToolCallEvent: "tool_call",
    ToolResultEvent: "tool_result",
    ToolProgressEvent: "tool_progress",
    VerifyEvent: "verify",
    UsageEvent: "usage",
    CompactionEvent: "compaction",
    RunEnded: "run_ended",
}


def event_to_json(session_id: str, event: Event) -> dict[str, Any]:
    """A run event as `/v1/events` and ``agentrt run --json`` show it.

    Its fields plus ``type`` and ``session_id``; a tool call's long argument
    strings are shortened. The event may come as its daemon frame (`agentrt.frames`),
    which is the event under another class.

    ``run_ended`` also carries ``summary``, how the run ended in words (`describe_end`).
    """
    obj: dict[str, Any] = _converter.unstructure(event)
    if isinstance(event, ToolCallEvent):
        obj["arguments"] = {k: _shorten(v) for k, v in event.arguments.items()}
    obj["type"] = next(EVENT_TYPES[cls] for cls in type(event).__mro__ if cls in EVENT_TYPES)
    obj["session_id"] = session_id
    if isinstance(event, RunEnded):
        # The words every front-end uses for this end, so the page need not make its own.
        obj["summary"] = describe_end(event).status
    return obj


def _shorten(value: Any) -> Any:
    if isinstance(value, str) and len(value) > EVENT_ARGUMENT_CHARS:
        return value[:EVENT_ARGUMENT_CHARS] + f"... ({len(value)} characters)"
    return value


def question_json(
    question_id: str,
    session_id: str,
    task_hash: str | None,
    agent: str | None,
    request: Request,
) -> dict[str, Any]:
    """A question for a person (no answer, no secret): `/v1/questions`, and ``agentrt --json``.

    `agent` names the subagent that asks (``""`` for the main agent), None when
    it is not known (a question that came over the daemon socket).
    """
    return {
        "id": question_id,
        "session_id": session_id,
        "task_hash": task_hash,
        "agent": agent,
        **{
            field.name: _json_value(getattr(request, field.name)) for field in attrs.fields(Request)
        },
    }


def _json_value(value: object) -> object:
    if isinstance(value, enum.Enum):
        return value.value
    return list(value) if isinstance(value, tuple) else value


def question_to_json(entry: Entry) -> dict[str, Any]:
    """A claimed question in the shape of `question_json`."""
    ctx = entry.context
    return question_json(entry.id, ctx.session_id, ctx.task_hash, ctx.agent_path, entry.request)


def task_to_json(record: TaskRecord | TaskSummary, *, running: bool) -> dict[str, Any]:
    """A pending task: its state, saved question, and a summary of its clamped transcript.

    A `TaskSummary` (a listing's) has no transcript, and so no ``transcript`` key.
    """
    question = record.question
    obj = {
        "session_id": record.session_id,
        "status": record.status.value,
        "running": running,
        "cause": record.cause.value if record.cause else None,
        "error": record.error,
        "input": record.input,
        "question": None
        if question is None
        else {
            "id": question.id,
            "call_id": question.call_id,
            "prompt": question.prompt,
            "kind": question.kind.value,
            "state": question.state.value,
        },
        "task_hash": record.task_hash,
        "runs": record.runs,
        "created_at": record.created_at,
        "updated_at": record.updated_at,
    }
    if isinstance(record, TaskRecord):
        obj["transcript"] = summarise(record)
    return obj


def preview_call_json(call: PreviewCall) -> dict[str, Any]:
    """One call of a resume preview: its id, tool, agent path, state and the attempt it runs as."""
    return {
        "call_id": call.call_id,
        "name": call.name,
        "agent": call.agent,
        "state": call.state.value,
        "attempt": call.attempt,
        "may_have_run": call.may_have_run,
    }


def preview_json(preview: ResumePreview) -> dict[str, Any]:
    """What resuming a kept task will do, as ``agentrt pending show --json`` and
    `GET /v1/session/{id}/task` (its ``preview``) show it.

    ``kept`` are the calls whose results are saved, ``to_run`` those that will
    run (``may_have_run`` says which an earlier run began), ``reissue`` those
    the model must issue again, ``questions`` the prompts asked again,
    ``regenerated_words`` the words of an unsaved reply said again, ``stop``
    why the task stopped last; ``lines`` says it all in the words every
    front-end shows (`agentrt.present.preview.preview_lines`).
    """
    return {
        "stop": preview.stop.value if preview.stop is not None else None,
        "kept": [preview_call_json(call) for call in preview.kept],
        "to_run": [preview_call_json(call) for call in preview.to_run],
        "reissue": [preview_call_json(call) for call in preview.reissue],
        "questions": list(preview.questions),
        "regenerated_words": preview.regenerated_words,
        "lines": preview_lines(preview),
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


def message_json(
    seq: int,
    role: str,
    content: str,
    created_at: float,
    tool_calls: Sequence[Mapping[str, Any]] = (),
    tool_call_id: str | None = None,
    name: str | None = None,
    summarised: int = 0,
) -> dict[str, Any]:
    """A stored message as `GET /v1/sessions/{id}/messages` and ``agentrt sessions show
    --json`` show it: ``tool_calls`` only on a message that has some, ``tool_call_id``
    and ``name`` only on a tool's result."""
    obj: dict[str, Any] = {"seq": seq, "role": role, "content": content}
    if tool_calls:
        obj["tool_calls"] = [dict(call) for call in tool_calls]
    if tool_call_id is not None:
        obj["tool_call_id"] = tool_call_id
    if name is not None:
        obj["name"] = name
    if summarised:
        obj["summarised"] = summarised
    obj["created_at"] = created_at
    return obj


def tool_call_json(call: ToolCall) -> dict[str, Any]:
    """A stored tool call: its id, the tool's name and its (clamped) arguments."""
    return {"id": call.id, "name": call.name, "arguments": dict(call.arguments)}


def stored_message_to_json(stored: StoredMessage) -> dict[str, Any]:
    """One stored message of a session in the shape of `message_json`."""
    message = stored.message
    return message_json(
        stored.seq,
        message.role.value,
        message.content,
        stored.created_at,
        [tool_call_json(call) for call in message.tool_calls],
        message.tool_call_id,
        message.name,
        message.compaction.summarised if message.compaction else 0,
    )


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


def usage_json(runs: Sequence[RunTokens]) -> dict[str, Any]:
    """A session's tokens as JSON: the total (``rounds``, ``input_tokens``, ...), its
    ``cost`` (null when a model's price is not known) and each run's (``runs``)."""
    total = TokenCount.total(run.tokens for run in runs)
    known = all(run.cost is not None for run in runs)
    return {
        **attrs.asdict(total),
        "cost": sum(run.cost or 0.0 for run in runs) if known else None,
        "runs": [attrs.asdict(run) for run in runs],
    }

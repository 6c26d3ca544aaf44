"""What crosses the socket: questions, pending tasks and sessions as frames.

The frames themselves (`agentrt.frames`) know nothing of the runtime; these
adapters are where a runtime value becomes the frame that carries it (a run
event needs none: its frame is the event, `agentrt.frames.frame_of`). The
`agentrt` command uses them too, so that it prints the same in-process as
through a daemon.
"""

from __future__ import annotations

from ...agent.preview import resume_preview
from ...core.pending import Entry
from ...models.catalog import ModelEntry
from ...present.shapes import tool_call_json
from ...protocol.frames import AskFrame
from ...protocol.frames import ModelItem
from ...protocol.frames import PendingDetail
from ...protocol.frames import PendingPreview
from ...protocol.frames import PendingTask
from ...protocol.frames import SessionItem
from ...protocol.frames import SessionMessage
from ...store import SessionInfo
from ...store import StoredMessage
from ...store import StoredTask
from ...store import UnreadableTask
from ...store.record import TaskRecord
from ...store.record import TaskSummary
from ...store.record import converter as record_converter


def ask_frame(entry: Entry) -> AskFrame:
    """The frame that forwards a claimed registry entry."""
    return AskFrame.of(entry.id, entry.context.task_hash, entry.context.session_id, entry.request)


def model_items(entries: list[ModelEntry]) -> tuple[ModelItem, ...]:
    """The configured models as a `ModelList` lists them."""
    return tuple(ModelItem(e.name, e.default, e.usable, e.why) for e in entries)


def pending_task(stored: StoredTask | TaskSummary) -> PendingTask:
    """How a stored pending task is listed (by the daemon, and by `agentrt pending`)."""
    if isinstance(stored, UnreadableTask):
        return PendingTask(
            session=stored.session_id,
            status=stored.status,
            input="",
            updated_at=stored.updated_at or 0.0,
            error=stored.error,
        )
    question = stored.question
    return PendingTask(
        session=stored.session_id,
        status=stored.status.value,
        input=stored.input,
        updated_at=stored.updated_at,
        cause=stored.cause,
        question=question.prompt if question is not None else None,
        task=stored.task_hash,
        error=stored.error,
        question_kind=question.kind if question is not None else None,
        messages=stored.messages if isinstance(stored, TaskSummary) else len(stored.transcript),
        runs=stored.runs,
        crashed=stored.crashed,
        question_id=question.id if question is not None else None,
    )


def pending_detail(record: TaskRecord) -> PendingDetail:
    """A pending task in full, as ``pending show`` gives it: what resuming it will do too."""
    return PendingDetail(
        pending_task(record),
        tuple(record_converter.unstructure(m) for m in record.transcript),
        resume_preview(record),
    )


def pending_preview(record: TaskRecord) -> PendingPreview:
    """What resuming a pending task will do, as ``pending preview`` gives it."""
    return PendingPreview(record.session_id, resume_preview(record))


def session_item(info: SessionInfo) -> SessionItem:
    """How a stored session is listed (by the daemon, and by `agentrt sessions`)."""
    return SessionItem(
        session=info.session_id,
        title=info.title,
        created_at=info.created_at,
        updated_at=info.updated_at,
        messages=info.messages,
        status=info.status,
    )


def session_message(stored: StoredMessage) -> SessionMessage:
    """One stored message of a session, as ``sessions show`` gives it."""
    message = stored.message
    return SessionMessage(
        seq=stored.seq,
        role=message.role.value,
        content=message.content,
        created_at=stored.created_at,
        tool_calls=tuple(tool_call_json(call) for call in message.tool_calls),
        tool_call_id=message.tool_call_id,
        name=message.name,
        summarised=message.compaction.summarised if message.compaction else 0,
    )

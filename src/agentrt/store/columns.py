"""A task's record as the columns of its row, and back; a message as its row's JSON body.

Both backends write the same columns (`FIELDS`) with the same values: free
text as JSON, enums by value. Reading them back is the hot path of every
listing, so the common values are read without the JSON parser.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from collections.abc import Sequence
from typing import Any

import cattrs

from ..core.cause import Cause
from ..models.messages import Message
from ..models.messages import Redaction
from ..models.messages import ToolCall
from ..vocab.questions import QuestionTrace
from ..vocab.stops import Interruption
from ..vocab.terms import TaskStatus
from .record import SavedQuestion
from .record import SubagentJournal
from .record import TaskRecord
from .record import converter

#: The columns of `tasks` that hold a record's fields, in the order `fields_of` gives them.
FIELDS = (
    "status",
    "cause",
    "error",
    "question",
    "window_hash",
    "task_hash",
    "runs",
    "created_at",
    "updated_at",
    "input",
    "runner",
    "attempts",
    "workdir",
    "lost_words",
    "journal",
)

#: How many characters of a session's first message its title keeps.
TITLE_CHARS = 80


#: `json.dumps` with the arguments `dumps` gives it, made once: `json.dumps` makes an
#: encoder at each call its arguments are not the defaults (a store write makes five).
_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
_ENCODE_ASCII = json.JSONEncoder(ensure_ascii=True, separators=(",", ":")).encode


def dumps(value: Any) -> str:
    """JSON text for SQLite, UTF-8 where possible."""
    if value is None:  # an error or a question a record has not: most of them
        return "null"
    text = _ENCODE(value)
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate (a model's or a chat's JSON may carry one) has no UTF-8 form;
        # escaped, it is plain ASCII and reads back as the same string.
        text = _ENCODE_ASCII(value)
    return text


def _plain(text: str) -> str:
    """`text` as SQLite can hold it as plain UTF-8 (a lone surrogate becomes U+FFFD)."""
    return text.encode("utf-8", "replace").decode("utf-8")


def title_of(text: str) -> str:
    """A session's title: the first line of its first message, shortened."""
    line = _plain(text).strip().split("\n", 1)[0]
    return line if len(line) <= TITLE_CHARS else line[: TITLE_CHARS - 3] + "..."


#: Where `fields_of` puts the columns it writes as JSON text, in `FIELDS`.
_QUESTION, _INPUT, _ATTEMPTS, _JOURNAL = (
    FIELDS.index(name) for name in ("question", "input", "attempts", "journal")
)

#: An earlier record of a task and the field columns written for it (`fields_of`'s `before`).
Written = tuple[tuple[Any, ...], TaskRecord]


def fields_of(record: TaskRecord, before: Written | None = None) -> tuple[Any, ...]:
    """The column values of `record` but its transcript. Free text is stored as JSON.

    `before` (the field columns written for an earlier record of the same task,
    and that record) lends its JSON text to each of those columns whose values
    `record` holds as the very same objects: a record is never changed in place
    (`TaskRecord` is frozen, its mappings read-only), and a record evolved from
    another keeps the values it does not change. A resume's claim, written
    right after the stop it resumes, then encodes none of them again (its
    journal, one stop entry, took 14 us to encode).
    """
    written: tuple[Any, ...] = ()
    old: TaskRecord | None = None
    if before is not None:
        written, old = before
    if old is not None and record.question is old.question:
        question = written[_QUESTION]
    else:
        question = dumps(converter.unstructure(record.question) if record.question else None)
    said = written[_INPUT] if old is not None and record.input is old.input else dumps(record.input)
    if old is not None and record.attempts is old.attempts:
        attempts = written[_ATTEMPTS]
    else:
        attempts = dumps(dict(record.attempts))
    if old is not None and _same_journal(record, old):
        journal = written[_JOURNAL]
    else:
        journal = _journal_json(record)
    return (
        record.status.value,
        record.cause.value if record.cause else None,
        dumps(record.error),
        question,
        record.window_hash,
        record.task_hash,
        record.runs,
        record.created_at,
        record.updated_at,
        said,
        record.runner,
        attempts,
        record.workdir,
        record.lost_words,
        journal,
    )


def _same_journal(record: TaskRecord, old: TaskRecord) -> bool:
    """Whether `record` holds every value of the ``journal`` column as `old` does (the same
    objects)."""
    return (
        record.arguments is old.arguments
        and record.subagents is old.subagents
        and record.interruptions is old.interruptions
        and record.questions is old.questions
    )


def _journal_json(record: TaskRecord) -> str:
    """The ``journal`` column: a record's kept full arguments, its subagents' journals,
    the stops not told to the model yet (`TaskRecord.interruptions`) and its recent
    questions' states (`TaskRecord.questions`).

    All are usually empty, and the column then holds ``{}``.
    """
    journal: dict[str, Any] = {}
    if record.arguments:
        journal["arguments"] = dict(record.arguments)
    if record.subagents:
        journal["subagents"] = {
            key: converter.unstructure(sub, SubagentJournal)
            for key, sub in record.subagents.items()
        }
    if record.interruptions:
        journal["interruptions"] = converter.unstructure(
            record.interruptions, tuple[Interruption, ...]
        )
    if record.questions:
        journal["questions"] = converter.unstructure(record.questions, tuple[QuestionTrace, ...])
    return dumps(journal)


def journal_fields(text: str) -> dict[str, Any]:
    """The record fields the ``journal`` column holds (see `_journal_json`)."""
    if text == "{}":
        return {}
    data = json.loads(text)
    return {
        "arguments": {str(k): dict(v) for k, v in data.get("arguments", {}).items()},
        "subagents": {
            str(k): converter.structure(v, SubagentJournal)
            for k, v in data.get("subagents", {}).items()
        },
        "interruptions": converter.structure(
            data.get("interruptions", []), tuple[Interruption, ...]
        ),
        "questions": converter.structure(data.get("questions", []), tuple[QuestionTrace, ...]),
    }


_STATUSES = {s.value: s for s in TaskStatus}
_CAUSES = {c.value: c for c in Cause}


def task_fields(
    status: str,
    cause: str | None,
    error: str,
    question: str,
    window: str | None,
    task: str | None,
    runs: int,
    created: float,
    updated: float,
    text: str,
    runner: str | None,
    workdir: str | None,
    lost_words: int,
) -> dict[str, Any]:
    """The fields a record and a listing's summary share, read from their columns.

    Listings decode thousands of these: the common values (a null, a plain
    string) are read without the JSON parser, and enums by a dict lookup.
    """
    saved = None if question == "null" else json.loads(question)
    return {
        "input": json_text(text),
        "status": _STATUSES.get(status) or TaskStatus(status),
        "cause": None if cause is None else (_CAUSES.get(cause) or Cause(cause)),
        "error": None if error == "null" else json.loads(error),
        "question": converter.structure(saved, SavedQuestion) if saved else None,
        "window_hash": window,
        "task_hash": task,
        "created_at": float(created),
        "updated_at": float(updated),
        "runs": int(runs),
        "runner": runner,
        "workdir": workdir,
        "lost_words": int(lost_words),
    }


def prompt_of(question: str | None, error: str | None) -> str | None:
    """The prompt of a saved question from its column (None for ``null``), or None.

    Raises, as `task_fields` would, if the question or the error column (None for
    ``null``) cannot be read.
    """
    if error is not None:
        json.loads(error)
    saved = None if question is None else json.loads(question)
    return converter.structure(saved, SavedQuestion).prompt if saved else None


def json_text(text: str) -> str:
    """A JSON string's value; one with no escapes is read without the JSON parser."""
    if len(text) >= 2 and text[0] == '"' and text[-1] == '"' and "\\" not in text:
        return text[1:-1]
    value = json.loads(text)
    if not isinstance(value, str):
        raise ValueError(f"not a string: {text[:40]!r}")
    return value


def encode_message(message: Message) -> tuple[str, str]:
    """A (clamped) message's role and JSON body, as its row holds them."""
    return message.role.value, dumps(message_object(message))


def message_object(message: Message) -> dict[str, Any]:
    """The JSON object of `message`: the converter's (`agentrt.store.record.converter`), key
    for key, made without it.

    The converter makes its functions for a message when the first one is written: some
    25 compiled snippets (its hooks, the classes' type hints), 2-3 ms of every command
    that writes one, more than the rest of ``agentrt run hello``'s first write. The
    fields left out when they hold their default are the ones `record` registers
    (`_omit_defaults`); `tests/test_store_messages.py` holds the two equal for every field.
    """
    body: dict[str, Any] = {
        "role": message.role.value,
        "content": message.content,
        "tool_calls": [_call_object(call) for call in message.tool_calls],
        "tool_call_id": message.tool_call_id,
        "name": message.name,
    }
    if message.thinking:
        body["thinking"] = [
            {"text": block.text, "signature": block.signature, "redacted": block.redacted}
            for block in message.thinking
        ]
    if message.call_state is not None:
        body["call_state"] = message.call_state.value
    if message.rewinds is not None:
        body["rewinds"] = message.rewinds
    if message.compaction is not None:
        compaction = message.compaction
        body["compaction"] = {"summarised": compaction.summarised, "kept": compaction.kept}
    return body


def _call_object(call: ToolCall) -> dict[str, Any]:
    body = {"id": call.id, "name": call.name, "arguments": dict(call.arguments)}
    if call.redaction is not Redaction.NONE:
        body["redaction"] = call.redaction.value
    return body


def decode_message(body: str) -> Message:
    """The message a row's JSON `body` holds; raises if it holds none."""
    return _structured(json.loads(body))


def message_values(bodies: Sequence[str]) -> list[Any] | None:
    """The JSON values of `bodies`, parsed as one array; None when any body is not one
    JSON value (it fails to parse or counts otherwise). Each is made a message by
    `message_of`."""
    try:
        values = json.loads(f"[{','.join(bodies)}]")
    except ValueError:
        return None
    return values if type(values) is list and len(values) == len(bodies) else None


def message_of(value: Any) -> Message:
    """The message a body's JSON value holds; raises if it holds none."""
    return _structured(value)


def decode_messages(bodies: Sequence[str]) -> list[Message]:
    """`decode_message` of each body: a long history is parsed as one JSON array.

    Raises if any body holds no message (`decode_message` of each tells which).
    """
    values = message_values(bodies)
    if values is None:
        return [decode_message(body) for body in bodies]
    return [_structured(value) for value in values]


@functools.cache
def _fast_message() -> Callable[[dict[str, Any]], Any]:
    """A message for a plainly valid body's JSON (`agentrt.protocol.wirecode`), else None.

    Compiled on first use: a command that reads no message pays nothing for it.
    """
    from ..protocol.wirecode import compile_decoder

    return compile_decoder(Message, lambda: converter, tagged=False)


def _structured(value: Any) -> Message:
    """The message of a body's JSON value: the compiled fast path, else the converter,
    which decides (and words the error) for anything out of the ordinary."""
    if type(value) is dict:
        message = _fast_message()(value)
        if message is not None:
            return message  # type: ignore[no-any-return]
    return converter.structure(value, Message)


def error_detail(exc: Exception) -> str:
    if isinstance(exc, cattrs.BaseValidationError):
        return "; ".join(cattrs.transform_error(exc))
    return str(exc)

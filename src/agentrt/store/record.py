"""The persisted pending task of a session, and its (de)serialisation."""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable
from collections.abc import Collection
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

import attrs
import cattrs
from cattrs.gen import make_dict_unstructure_fn
from cattrs.gen import override

from ..core.cause import Cause
from ..core.errors import BadAnswerError
from ..core.errors import LateAnswerError
from ..core.process import token_alive
from ..models.messages import Message
from ..models.messages import Role
from ..models.messages import ToolCall
from ..vocab.clamp import ARGUMENT_LIMIT
from ..vocab.clamp import TOOL_RESULT_LIMIT
from ..vocab.clamp import clamp
from ..vocab.clamp import clamp_arguments
from ..vocab.clamp import was_clamped
from ..vocab.questions import QuestionState
from ..vocab.questions import QuestionTrace
from ..vocab.questions import late_answer
from ..vocab.questions import legacy_question_id
from ..vocab.questions import new_question_id
from ..vocab.questions import noted
from ..vocab.reprs import record
from ..vocab.stops import Interruption
from ..vocab.terms import ALLOW_ONCE
from ..vocab.terms import ALLOW_SESSION
from ..vocab.terms import DENY
from ..vocab.terms import RequestKind
from ..vocab.terms import TaskStatus


@record
class SavedQuestion:
    """A question saved with its task: the tool call it answers and what to show the human.

    `id` is the question's one id (`agentrt.vocab.questions`): the registry
    entry that asks it live has it too, and so does the same question asked
    again when the task resumes, so an answer naming it lands on it. `task` is
    the hash of the run that asked it (its owner run), `origin` the front-end
    its session belongs to, and `state` where it stands: `QuestionState.WAITING`
    while nothing happened to it but being saved; ``withdrawn`` or ``expired``
    once its live asking ended so (the kept task still waits for it: a resume
    asks it again, or takes an answer given ahead).
    """

    call_id: str
    prompt: str
    kind: RequestKind = RequestKind.QUESTION
    id: str = attrs.field(factory=new_question_id)
    task: str | None = None
    origin: str = ""
    state: QuestionState = QuestionState.WAITING


#: The most bytes (JSON) of full arguments a task keeps for its calls that have not run.
ARGUMENTS_BOUND = 8 * 1024 * 1024


@record
class SubagentJournal:
    """What one subagent of a task has committed, kept in the task's record.

    A subagent journals its calls as a top-level run does: its `transcript`
    (clamped as the snapshot is), the `attempts` of its side-effecting calls,
    and the full `arguments` of its calls that have not run. It is keyed in
    `TaskRecord.subagents` by the chain of spawn call ids that leads to it
    (``call_0_0``, ``call_0_0/call_1_0`` for a subagent of that subagent),
    and written in the same store transaction as the rest of the record. It
    goes once the spawn's own result is committed.
    """

    #: The subagent's path as events show it (``sub1``, ``sub1/sub1``).
    agent: str
    transcript: tuple[Message, ...] = ()
    attempts: Mapping[str, int] = attrs.field(factory=dict)
    arguments: Mapping[str, dict[str, Any]] = attrs.field(factory=dict)
    #: Stops of the subagent's run not told to its model yet (see `TaskRecord.interruptions`).
    interruptions: tuple[Interruption, ...] = ()


@record
class TaskRecord:
    """A session's unfinished task, as saved: everything needed to resume it without redoing work.

    This is the *snapshot*: `transcript` holds the committed conversation with
    every value clamped to the snapshot limits (see `clamp_message`). A live run
    never takes its tool calls from here; it keeps the full values in its own
    live transcript (`AgentRun.live`). An assistant message's tool calls are
    followed by the results of those calls that have completed. A call with no
    result has not been committed and runs on resume; one with a result never
    runs again. `attempts` counts, per call id, how often a call with side
    effects was started: a call that started but never committed may already
    have run, and says so on resume.
    """

    session_id: str
    input: str
    transcript: tuple[Message, ...]
    status: TaskStatus = TaskStatus.RUNNING
    cause: Cause | None = None
    error: str | None = None
    question: SavedQuestion | None = None
    window_hash: str | None = None
    task_hash: str | None = None
    created_at: float = attrs.field(factory=time.time)
    updated_at: float = attrs.field(factory=time.time)
    #: How many runs worked on this task (1 for a task never resumed).
    runs: int = 1
    #: The process running it while RUNNING (see `agentrt.core.process`), else of its last run.
    runner: str | None = None
    #: How many times each side-effecting call (by id) was started; see `TaskRecord`.
    attempts: Mapping[str, int] = attrs.field(factory=dict)
    #: The folder the task's tools work in (None: the runtime's default), kept for a resume.
    workdir: str | None = None
    #: Words of a reply the model was streaming when the run stopped, never saved: a resume
    #: makes the model say them again.
    lost_words: int = 0
    #: Full arguments of clamped calls that have not run, by call id; see `TaskRecord`.
    arguments: Mapping[str, dict[str, Any]] = attrs.field(factory=dict)
    #: What the task's subagents committed, by spawn call chain; see `SubagentJournal`.
    subagents: Mapping[str, SubagentJournal] = attrs.field(factory=dict)
    #: The stops of this task not told to the model yet, oldest first: the interrupt ledger
    #: (`agentrt.store.ledger`). Told with the next model call, then part of the transcript.
    interruptions: tuple[Interruption, ...] = ()
    #: The recent questions of this task and their states, oldest first (at most
    #: `agentrt.vocab.questions.RECENT_QUESTIONS`): what a late answer is told.
    questions: tuple[QuestionTrace, ...] = ()

    @property
    def crashed(self) -> bool:
        """True for a record left RUNNING by a process that is no longer running it.

        A task that a live process (this one or another) is running is not crashed.
        """
        return _crashed(self.status, self.runner)

    def unanswered_calls(self) -> list[ToolCall]:
        """The tool calls of the last assistant message that have no committed result."""
        return unanswered_calls(self.transcript)

    def attempts_of(self, call_id: str) -> int:
        """How many times the call `call_id` was started without its result being committed."""
        return self.attempts.get(call_id, 0)

    def has_elisions(self) -> bool:
        """Whether any committed value was clamped (the resume prompt then says so)."""
        for message in self.transcript:
            if was_clamped(message.content):
                return True
            if any(call_was_clamped(call) for call in message.tool_calls):
                return True
        return False

    def evolve(self, **changes: Any) -> TaskRecord:
        """A copy with `changes` applied and `updated_at` set to now."""
        changes.setdefault("updated_at", time.time())
        return attrs.evolve(self, **changes)

    def noting(self, trace: QuestionTrace, **changes: Any) -> TaskRecord:
        """`evolve` with `trace` as its question's newest state.

        The saved question, when it is that question and stays, takes its state.
        """
        question = changes.get("question", self.question)
        if question is not None and question.id == trace.id and question.state is not trace.state:
            changes["question"] = attrs.evolve(question, state=trace.state)
        return self.evolve(questions=noted(self.questions, trace), **changes)


@record
class TaskSummary:
    """A pending task as listed: every field of its record but the transcript and attempts.

    Listings read these from the store's summary columns, so listing thousands
    of tasks never decodes a transcript. `messages` counts the transcript's
    messages.
    """

    session_id: str
    input: str
    messages: int
    status: TaskStatus = TaskStatus.RUNNING
    cause: Cause | None = None
    error: str | None = None
    question: SavedQuestion | None = None
    window_hash: str | None = None
    task_hash: str | None = None
    created_at: float = 0.0
    updated_at: float = 0.0
    runs: int = 1
    runner: str | None = None
    workdir: str | None = None
    lost_words: int = 0

    @property
    def crashed(self) -> bool:
        """As `TaskRecord.crashed`."""
        return _crashed(self.status, self.runner)

    @classmethod
    def of(cls, record: TaskRecord) -> TaskSummary:
        """The summary of a whole record: its fields, and the length of its transcript."""
        kept = {f.name: getattr(record, f.name) for f in attrs.fields(cls) if f.name != "messages"}
        return cls(messages=len(record.transcript), **kept)


def _crashed(status: TaskStatus, runner: str | None) -> bool:
    return status is TaskStatus.RUNNING and runner_gone(runner)


def runner_gone(runner: str | None) -> bool:
    """Whether no process runs a task recorded with `runner` (None: no runner was recorded).

    A task left RUNNING by such a runner is crashed (`TaskRecord.crashed`).
    """
    return runner is None or not token_alive(runner)


def unanswered_calls(transcript: Sequence[Message]) -> list[ToolCall]:
    """The tool calls of the last assistant message of `transcript` that have no result."""
    for index in range(len(transcript) - 1, -1, -1):
        message = transcript[index]
        if message.role is Role.ASSISTANT:
            done = {m.tool_call_id for m in transcript[index + 1 :] if m.role is Role.TOOL}
            return [call for call in message.tool_calls if call.id not in done]
    return []


def call_was_clamped(call: ToolCall) -> bool:
    """Whether an argument of `call` was shortened when a snapshot was saved."""
    return _holds_clamped(call.arguments)


def _holds_clamped(value: Any) -> bool:
    """Whether a string in `value` (its dicts' values and lists' items, all the way down)
    carries an elision marker; stops at the first."""
    if isinstance(value, str):
        return was_clamped(value)
    if isinstance(value, dict):
        return any(_holds_clamped(v) for v in value.values())
    if isinstance(value, list):
        return any(_holds_clamped(v) for v in value)
    return False


def arguments_size(arguments: Mapping[str, dict[str, Any]]) -> int:
    """The bytes (UTF-8 JSON) that kept full arguments take."""
    return sum(len(json.dumps(a, ensure_ascii=False).encode("utf-8")) for a in arguments.values())


def kept_size(record: TaskRecord) -> int:
    """The bytes of full arguments `record` keeps, its subagents' included."""
    return arguments_size(record.arguments) + sum(
        arguments_size(j.arguments) for j in record.subagents.values()
    )


def keep_arguments(
    arguments: Mapping[str, dict[str, Any]], message: Message, room: int
) -> dict[str, dict[str, Any]]:
    """The full arguments kept once `message` is committed, within `room` more bytes.

    A committed result ends the keeping of its call's arguments; an assistant
    message's calls whose snapshot form is clamped have theirs kept, while they
    fit. A call that does not fit has only its clamped form saved: a resume
    refuses to run it and the model is asked to issue it again.
    """
    kept = dict(arguments)
    if message.role is Role.TOOL:
        kept.pop(message.tool_call_id or "", None)
        return kept
    for call in message.tool_calls:
        if clamp_arguments(call.arguments, ARGUMENT_LIMIT) == call.arguments:
            continue
        size = arguments_size({call.id: call.arguments})
        if size <= room:
            kept[call.id] = call.arguments
            room -= size
    return kept


def restore_arguments(
    transcript: Sequence[Message],
    arguments: Mapping[str, dict[str, Any]],
    unanswered: Collection[str],
) -> list[Message]:
    """`transcript` with its calls of ids `unanswered` given back their kept full arguments."""
    if not unanswered or not arguments:
        return list(transcript)
    restored: list[Message] = []
    for message in transcript:
        if any(call.id in unanswered and call.id in arguments for call in message.tool_calls):
            calls = tuple(
                attrs.evolve(call, arguments=arguments[call.id])
                if call.id in unanswered and call.id in arguments
                else call
                for call in message.tool_calls
            )
            message = attrs.evolve(message, tool_calls=calls)
        restored.append(message)
    return restored


def shortened_calls(record: TaskRecord) -> list[tuple[str, ToolCall]]:
    """The calls of `record` not run yet whose full arguments it could not keep.

    Each as (agent path, call): ``""`` for the task's own calls.
    """
    found = [("", c) for c in record.unanswered_calls() if _lost(c, record.arguments)]
    for journal in record.subagents.values():
        found += [
            (journal.agent, c)
            for c in unanswered_calls(journal.transcript)
            if _lost(c, journal.arguments)
        ]
    return found


def _lost(call: ToolCall, arguments: Mapping[str, dict[str, Any]]) -> bool:
    return call.id not in arguments and call_was_clamped(call)


def reissue_note(record: TaskRecord) -> str | None:
    """What a stop must say of calls that will have to be issued again, or None."""
    lost = shortened_calls(record)
    if not lost:
        return None
    names = ", ".join(f"{call.name} {call.id}" + (f" ({a})" if a else "") for a, call in lost)
    return (
        f"the full arguments of {names} were past the {ARGUMENTS_BOUND // (1024 * 1024)} MiB a "
        "task keeps; on resume the model will have to issue that call again"
    )


def clamp_message(message: Message) -> Message:
    """The snapshot form of a message: tool results to 32 KiB, argument strings to 4 KiB."""
    if message.role is Role.TOOL:
        clamped = clamp(message.content, TOOL_RESULT_LIMIT)
        return message if clamped is message.content else attrs.evolve(message, content=clamped)
    if message.tool_calls:
        calls = tuple(
            attrs.evolve(call, arguments=clamp_arguments(call.arguments, ARGUMENT_LIMIT))
            for call in message.tool_calls
        )
        return attrs.evolve(message, tool_calls=calls)
    return message


@record
class AnswerEffects:
    """What answering a saved question changes in the run that resumes the task."""

    #: Call ids whose confirmation the answer gave (they run without asking again).
    approved: frozenset[str] = frozenset()
    #: A tool the answer allowed for the rest of the session.
    allow: str | None = None
    #: Answers to a subagent's questions, by prompt (its spawn runs again and finds them).
    prefilled: Mapping[str, str] = attrs.field(factory=dict)


def apply_answer(
    record: TaskRecord, answer: str, question_id: str | None = None
) -> tuple[TaskRecord, AnswerEffects]:
    """Answer a record's saved question: the new record and what the resumed run must know.

    With `question_id`, the answer is for that question only: one the task
    does not wait for now (answered already, withdrawn, expired, or another)
    is refused with `LateAnswerError` saying why, never taken as the answer to
    the question that waits. Without it, the answer goes to the one question
    the task waits for. The question is noted answered in the record.
    """
    question = record.question
    if question_id is not None and (question is None or question.id != question_id):
        waiting = question.id if question is not None else None
        raise LateAnswerError(late_answer(question_id, record.questions, waiting))
    if question is None:
        raise BadAnswerError(
            f"session {record.session_id} has no saved question to answer; resume it without one"
        )
    call = next((c for c in record.unanswered_calls() if c.id == question.call_id), None)
    if call is None:
        raise BadAnswerError(f"the saved question of session {record.session_id} is stale")
    answered = QuestionTrace(question.id, QuestionState.ANSWERED, time.time())
    if question.kind is RequestKind.QUESTION:
        if call.name == "spawn":
            # A subagent asked: its spawn runs again and takes the answer when it asks again.
            return record.noting(answered, question=None), AnswerEffects(
                prefilled={question.prompt: answer}
            )
        result = Message.tool_result(call, answer)
        return record.noting(
            answered, transcript=(*record.transcript, result), question=None
        ), AnswerEffects()
    if question.kind is RequestKind.CONFIRM:
        if answer == DENY:
            result = Message.tool_result(call, "denied by the user")
            return (
                record.noting(answered, transcript=(*record.transcript, result), question=None),
                AnswerEffects(),
            )
        if answer in (ALLOW_ONCE, ALLOW_SESSION):
            allow = call.name if answer == ALLOW_SESSION else None
            return record.noting(answered, question=None), AnswerEffects(
                frozenset({call.id}), allow
            )
        raise BadAnswerError(f"a confirmation takes one of: {ALLOW_ONCE}, {ALLOW_SESSION}, {DENY}")
    if question.kind is RequestKind.SECRET:
        raise BadAnswerError(
            "this question asks for a secret value, which is typed into a masked field; resume "
            "the task from the terminal or the web page without an answer and type it there"
        )
    raise BadAnswerError(
        "this question needs the system password; resume the task from the terminal "
        "or the web page without an answer and type it there"
    )


#: The one converter for records on disk.
converter = cattrs.Converter(forbid_extra_keys=False, detailed_validation=False)


def _omit_defaults(cls: type[Any], *fields: str) -> None:
    """Write records of `cls` without those of `fields` that hold their default.

    The hook is made when a record of `cls` is first written, not at import: most
    commands write no question and no stop, and making a hook is about a millisecond
    of every start.
    """
    omitted: dict[str, Any] = {name: override(omit_if_default=True) for name in fields}
    converter.register_unstructure_hook_factory(
        lambda kind: kind is cls, lambda kind: make_dict_unstructure_fn(kind, converter, **omitted)
    )


# A call with nothing redacted from its arguments is written without the field (a message's
# hook, made when the first message is written, takes this one for its calls).
_omit_defaults(ToolCall, "redaction")
# Most messages have no kept thinking: they are written without the field, as before it existed.
_omit_defaults(Message, "thinking", "call_state", "rewinds", "compaction")


def _structure_saved_question(data: Mapping[str, Any], _: object) -> SavedQuestion:
    """A saved question as stored; one saved before questions had ids gets a stable one."""
    if "id" not in data:
        data = {**data, "id": legacy_question_id(str(data["call_id"]), str(data["prompt"]))}
    return _saved_question_fields()(data, SavedQuestion)


@functools.cache
def _saved_question_fields() -> Callable[[Mapping[str, Any], Any], SavedQuestion]:
    """The structuring of a saved question's fields, made when the first one is read."""
    return converter.gen_structure_attrs_fromdict(SavedQuestion)


converter.register_structure_hook(SavedQuestion, _structure_saved_question)
# The fields a question had before it had an id and a state are all an older agentrt reads.
_omit_defaults(SavedQuestion, "task", "origin", "state")
# A stop that stands for no earlier ones is written as before stops were folded.
_omit_defaults(Interruption, "repeats", "first_at")

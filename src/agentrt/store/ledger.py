"""The interrupt ledger of a task, and the preview of what resuming it will do.

A stop is told from what the record and the run know, never guessed: a call
with a committed result is *done* (or *denied*, *refused*, as its result
says); a call the run saw running when it stopped was *stopped while
running*; a call that recorded its start and never committed, in a run that
died, *may have run*; a call that never began is *not started*. A tool that
does not record its start (it has no effect to record) cannot be known not to
have started after a crash: it is said to have maybe run, which is true.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Collection
from collections.abc import Iterator
from collections.abc import Mapping
from collections.abc import Sequence

from ..models.messages import Message
from ..models.messages import Role
from ..models.messages import ToolCall
from ..vocab.stops import CallState
from ..vocab.stops import Interruption
from ..vocab.stops import LedgerCall
from ..vocab.stops import PreviewCall
from ..vocab.stops import ResumePreview
from ..vocab.stops import StopKind
from ..vocab.terms import TaskStatus
from .record import TaskRecord
from .record import call_was_clamped
from .record import unanswered_calls

#: Whether a tool records its start before it takes effect (`AgentRun.begin_effect`): for
#: such a tool, no recorded start means it did not begin.
RecordsStart = Callable[[str], bool]


def _never(name: str) -> bool:
    return False


def last_round(transcript: Sequence[Message]) -> tuple[tuple[ToolCall, ...], dict[str, Message]]:
    """The calls of the last assistant message of `transcript`, and their results by call id."""
    for index in range(len(transcript) - 1, -1, -1):
        message = transcript[index]
        if message.role is Role.ASSISTANT:
            results = {
                m.tool_call_id or "": m for m in transcript[index + 1 :] if m.role is Role.TOOL
            }
            return message.tool_calls, results
    return (), {}


_Scope = tuple[str, Sequence[Message], Mapping[str, int], Mapping[str, object]]


def _scopes(record: TaskRecord) -> Iterator[_Scope]:
    """(agent, transcript, attempts, kept arguments) of the task's own run, then of each of
    its subagents."""
    yield "", record.transcript, record.attempts, record.arguments
    for journal in record.subagents.values():
        yield journal.agent, journal.transcript, journal.attempts, journal.arguments


def round_ledger(
    agent: str,
    transcript: Sequence[Message],
    attempts: Mapping[str, int],
    *,
    running: Collection[str] = (),
    died: bool = False,
    records_start: RecordsStart = _never,
) -> tuple[LedgerCall, ...]:
    """The state of each call of the last round of `transcript` (one run's scope).

    `running` are the ids of the calls the run saw running when it stopped;
    `died` says the run could not see (a crash): then a call that recorded its
    start, or whose tool does not record one, may have run.
    """
    calls, results = last_round(transcript)
    entries: list[LedgerCall] = []
    for call in calls:
        started = attempts.get(call.id, 0)
        result = results.get(call.id)
        if result is not None:
            state = result.call_state or CallState.DONE
        elif call.id in running:
            state = CallState.STOPPED
        elif died and (started > 0 or not records_start(call.name)):
            state = CallState.MAY_HAVE_RUN
        elif started > 0:
            # Began in an earlier run that stopped it, and did not begin again in this one.
            state = CallState.MAY_HAVE_RUN
        else:
            state = CallState.NOT_STARTED
        entries.append(LedgerCall(call.id, call.name, state, agent, started))
    return tuple(entries)


def crash_interruptions(
    record: TaskRecord, records_start: RecordsStart = _never
) -> dict[str, Interruption]:
    """The entries of a crash, found when its task is resumed: one per scope with a round.

    Keyed by agent ("" for the task's own run). When it died is not known; the
    record's last write is the latest it can have been alive.
    """
    found: dict[str, Interruption] = {}
    for agent, transcript, attempts, _ in _scopes(record):
        calls = round_ledger(agent, transcript, attempts, died=True, records_start=records_start)
        lost = record.lost_words if not agent else 0
        found[agent] = Interruption(StopKind.CRASH, record.updated_at, calls, lost)
    return found


def latest_states(record: TaskRecord) -> dict[tuple[str, str], CallState]:
    """The state each call of an interrupted round was last told to be in, by (agent, call id)."""
    states: dict[tuple[str, str], CallState] = {}
    entries = [*record.interruptions]
    for journal in record.subagents.values():
        entries += journal.interruptions
    for entry in sorted(entries, key=lambda e: e.at):
        for call in entry.calls:
            states[(call.agent, call.call_id)] = call.state
    return states


def preview_of(record: TaskRecord, records_start: RecordsStart = _never) -> ResumePreview:
    """What resuming `record` will do: the calls kept, those that will run, what is asked again.

    A record left running by a process that died is read as a crash.
    """
    told = latest_states(record)
    crashed = record.status is TaskStatus.RUNNING and record.crashed
    kept: list[PreviewCall] = []
    to_run: list[PreviewCall] = []
    reissue: list[PreviewCall] = []
    for agent, transcript, attempts, arguments in _scopes(record):
        ledger = {
            c.call_id: c.state
            for c in round_ledger(
                agent, transcript, attempts, died=crashed, records_start=records_start
            )
        }
        for message in transcript:
            if message.role is not Role.TOOL:
                continue
            call_id = message.tool_call_id or ""
            kept.append(
                PreviewCall(
                    call_id, message.name or "", message.call_state or CallState.DONE, agent
                )
            )
        for call in unanswered_calls(transcript):
            state = told.get((agent, call.id)) or ledger.get(call.id, CallState.NOT_STARTED)
            entry = PreviewCall(call.id, call.name, state, agent, attempts.get(call.id, 0) + 1)
            if call.id not in arguments and call_was_clamped(call):
                reissue.append(entry)
            else:
                to_run.append(entry)
    questions = (record.question.prompt,) if record.question is not None else ()
    stop: StopKind | None = None
    if crashed:
        stop = StopKind.CRASH
    elif record.status is TaskStatus.FAILED:
        stop = StopKind.FAILURE
    elif record.cause is not None:
        stop = StopKind.of(record.cause)
    return ResumePreview(
        tuple(kept), tuple(to_run), tuple(reissue), questions, record.lost_words, stop
    )

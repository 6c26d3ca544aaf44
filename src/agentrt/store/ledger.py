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

import time
from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Mapping
from collections.abc import Sequence

import attrs

from ..models.messages import Message
from ..models.messages import Role
from ..models.messages import ToolCall
from ..vocab.clamp import was_clamped
from ..vocab.stops import CallState
from ..vocab.stops import Interruption
from ..vocab.stops import LedgerCall
from ..vocab.stops import PreviewCall
from ..vocab.stops import ResumePreview
from ..vocab.stops import StopKind
from ..vocab.terms import RequestKind
from ..vocab.terms import TaskStatus
from .record import TaskRecord
from .record import call_was_clamped
from .record import unanswered_calls

#: Whether a tool records its start before it takes effect (`AgentRun.begin_effect`): for
#: such a tool, no recorded start means it did not begin.
RecordsStart = Callable[[str], bool]


def _never(name: str) -> bool:
    return False


_NOTHING_SEEN: Mapping[str, CallState] = {}


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


Attempts = Mapping[str, int]
_Scope = tuple[str, Sequence[Message], Attempts, Mapping[str, object]]


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
    seen: Mapping[str, CallState] = _NOTHING_SEEN,
    died: bool = False,
    records_start: RecordsStart = _never,
) -> tuple[LedgerCall, ...]:
    """The state of each call of the last round of `transcript` (one run's scope).

    `seen` gives the states the run saw its calls in flight in when it
    stopped (stopped while running, not started, may have run); `died` says
    the run could not see (a crash): then a call that recorded its start, or
    whose tool does not record one, may have run. A round whose calls all have
    results was over before the stop: the stop interrupted no call of it.
    """
    calls, results = last_round(transcript)
    if all(call.id in results for call in calls):
        return ()
    entries: list[LedgerCall] = []
    for call in calls:
        started = attempts.get(call.id, 0)
        result = results.get(call.id)
        if result is not None:
            state = result.call_state or CallState.DONE
        elif call.id in seen:
            state = seen[call.id]
        elif started > 0 or (died and not records_start(call.name)):
            # It began (in a run that died, or an earlier one), or nobody can say it did not.
            state = CallState.MAY_HAVE_RUN
        else:
            state = CallState.NOT_STARTED
        entries.append(LedgerCall(call.id, call.name, state, agent, started))
    return tuple(entries)


def unseen_stop(record: TaskRecord) -> StopKind | None:
    """How `record`'s run stopped if nobody saw it stop, or None if it was seen (or did not).

    A record found running, with nobody running it, is a crash. One stopped with
    no entry of it (a fleet member whose lease ran out, whose tasks another
    marked interrupted; a record of an older agentrt) while a round or a reply
    was unfinished is a stop nobody saw, with the cause it was given.
    """
    if record.status is TaskStatus.RUNNING:
        return StopKind.CRASH
    if record.interruptions or record.status is TaskStatus.AWAITING_ANSWER:
        return None
    if not (record.unanswered_calls() or record.lost_words):
        return None
    return StopKind.of(record.cause) if record.cause is not None else StopKind.FAILURE


def entries_of(record: TaskRecord) -> list[Interruption]:
    """The stops `record` holds that its model was not told of yet, its subagents' included."""
    entries = [*record.interruptions]
    for journal in record.subagents.values():
        entries += journal.interruptions
    return entries


def latest_states(record: TaskRecord) -> dict[tuple[str, str], CallState]:
    """The state each call of an interrupted round was last told to be in, by (agent, call id)."""
    states: dict[tuple[str, str], CallState] = {}
    for entry in sorted(entries_of(record), key=lambda e: e.at):
        for call in entry.calls:
            states[(call.agent, call.call_id)] = call.state
    return states


def preview_of(
    record: TaskRecord, records_start: RecordsStart = _never, *, resuming: bool = False
) -> ResumePreview:
    """What resuming `record` will do: the calls kept, those that will run, what is asked again.

    A call's state is the one the ledger told of it; a stop nobody saw (a crash)
    is read from the record as resuming it would (see `unseen_stop`). With
    `resuming`, `record` is the one a resume took up, its entries added already.
    """
    unseen = None if resuming else unseen_stop(record)
    kept = [
        PreviewCall(m.tool_call_id or "", m.name or "", m.call_state or CallState.DONE, agent)
        for agent, transcript, _, _ in _scopes(record)
        for m in transcript
        if m.role is Role.TOOL
    ]
    to_run, reissue = _unanswered(record, records_start, unseen)
    questions = (record.question.prompt,) if record.question is not None else ()
    stop: StopKind | None = None
    if record.interruptions:
        stop = record.interruptions[-1].stop
    elif unseen is not None:
        stop = unseen
    elif record.status is TaskStatus.FAILED:
        stop = StopKind.FAILURE
    elif record.cause is not None:
        stop = StopKind.of(record.cause)
    return ResumePreview(
        tuple(kept), tuple(to_run), tuple(reissue), questions, record.lost_words, stop
    )


def resume_counts(record: TaskRecord, records_start: RecordsStart = _never) -> tuple[int, int]:
    """How many calls resuming `record` (taken up, as `preview_of`'s `resuming`) keeps, and
    how many of those it runs had begun before: ``len(preview.kept)`` and
    ``len(preview.rerun)``, counted without making a `PreviewCall` of every kept call (a
    resume's first event says them): 0.18 ms against 5.4 ms for a task of 10,000 messages.
    """
    # A list's own count: a sixth of the time of a generator's sum, at 10,000 messages.
    kept = sum(
        [m.role for m in transcript].count(Role.TOOL) for _, transcript, _, _ in _scopes(record)
    )
    to_run, _ = _unanswered(record, records_start, None)
    return kept, sum(call.may_have_run for call in to_run)


def _unanswered(
    record: TaskRecord, records_start: RecordsStart, unseen: StopKind | None
) -> tuple[list[PreviewCall], list[PreviewCall]]:
    """The calls of `record` not run yet (see `preview_of`): those that will run, and those
    that cannot run as saved (an argument was shortened: the model issues them again).

    `unseen` is how the record's last run stopped if nobody saw it (`unseen_stop`).
    """
    told = latest_states(record)
    question = record.question
    # A saved question of `ask_user` is its call: asking it again is all the call does.
    asked = question.call_id if question and question.kind is RequestKind.QUESTION else None
    to_run: list[PreviewCall] = []
    reissue: list[PreviewCall] = []
    for agent, transcript, attempts, arguments in _scopes(record):
        # The question asked again is listed as such: its call does nothing else.
        calls = [c for c in unanswered_calls(transcript) if agent or c.id != asked]
        # The round's own ledger, read only for a call no stop told the state of.
        ledger: dict[str, CallState] = {}
        if any((agent, call.id) not in told for call in calls):
            died = unseen is not None
            ledger = {
                c.call_id: c.state
                for c in round_ledger(
                    agent, transcript, attempts, died=died, records_start=records_start
                )
            }
        for call in calls:
            state = told.get((agent, call.id)) or ledger.get(call.id, CallState.NOT_STARTED)
            entry = PreviewCall(call.id, call.name, state, agent, attempts.get(call.id, 0) + 1)
            if call.id not in arguments and call_was_clamped(call):
                reissue.append(entry)
            else:
                to_run.append(entry)
    return to_run, reissue


# -- what a stop is told as ----------------------------------------------------------------


def stop_entries(
    record: TaskRecord,
    stop: StopKind,
    at: float,
    seen: Mapping[str, Mapping[str, CallState]],
    lost_words: int,
    *,
    error: str | None = None,
    records_start: RecordsStart = _never,
) -> TaskRecord:
    """`record` with the entry of a stop the run saw added to each of its scopes.

    `seen` gives, by journal key ("" for the task's own run), the states the
    run saw its calls in flight in when it stopped (see `round_ledger`).
    """

    def entry(
        key: str, agent: str, transcript: Sequence[Message], attempts: Attempts
    ) -> Interruption:
        calls = round_ledger(
            agent,
            transcript,
            attempts,
            seen=seen.get(key, _NOTHING_SEEN),
            records_start=records_start,
        )
        if key:  # a subagent's: the words lost and the error are the task's to tell
            return Interruption(stop, at, calls)
        return Interruption(stop, at, calls, lost_words, error)

    return _with_entries(record, entry)


def with_unseen_entries(record: TaskRecord, records_start: RecordsStart = _never) -> TaskRecord:
    """`record` with the entries of a stop nobody saw added (see `unseen_stop`), if it had one."""
    stop = unseen_stop(record)
    if stop is None:
        return record

    def entry(
        key: str, agent: str, transcript: Sequence[Message], attempts: Attempts
    ) -> Interruption:
        # When it came is not known: the record's last write is the latest it can have been.
        calls = round_ledger(agent, transcript, attempts, died=True, records_start=records_start)
        lost = record.lost_words if not key else 0
        return Interruption(stop, record.updated_at, calls, lost, unseen=True)

    return _with_entries(record, entry)


def _with_entries(
    record: TaskRecord, entry: Callable[[str, str, Sequence[Message], Attempts], Interruption]
) -> TaskRecord:
    """`record` with one more entry in each scope's ledger: ``entry(key, agent, transcript,
    attempts)``, its key "" for the task's own run, else its subagent's journal key."""
    subagents = {
        key: attrs.evolve(
            journal,
            interruptions=appended(
                journal.interruptions,
                entry(key, journal.agent, journal.transcript, journal.attempts),
            ),
        )
        for key, journal in record.subagents.items()
    }
    top = entry("", "", record.transcript, record.attempts)
    return record.evolve(interruptions=appended(record.interruptions, top), subagents=subagents)


def appended(entries: tuple[Interruption, ...], new: Interruption) -> tuple[Interruption, ...]:
    """`entries` with `new` after them; a stop that repeats the last one is folded into it.

    A round paused and resumed again and again (a long command paused at each
    look) keeps one entry that counts its stops, not one entry a pause: the
    task's record stays the same size, and the model is told it once.
    """
    if entries and entries[-1].repeated_by(new):
        last = entries[-1]
        first = last.first_at if last.first_at is not None else last.at
        return (*entries[:-1], attrs.evolve(new, repeats=last.repeats + 1, first_at=first))
    return (*entries, new)


def _when(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at))


def _call_words(call: LedgerCall) -> str:
    who = f"{call.agent}'s " if call.agent else ""
    return f"{who}{call.name} call {call.call_id}"


def _since(call: LedgerCall, result: Message | None, resumed: bool) -> str:
    """What became of an interrupted call after its stop, as far as this conversation knows."""
    if call.state in (CallState.DONE, CallState.DENIED, CallState.REFUSED):
        return ""
    if not resumed:
        return "; it was not run again"
    if result is None:
        return ""
    if result.call_state is CallState.DENIED:
        return "; asked again after the resume, the user denied it"
    if result.call_state is not None:
        return "; it could not run after the resume (its result says why)"
    if call.state.began:
        return "; it was run again after the resume, and its result above is from that run"
    return "; it ran after the resume"


def note_text(
    entries: Sequence[Interruption],
    results: Mapping[str, Message],
    *,
    resumed: bool,
    shortened: bool,
) -> str:
    """The one short note the model gets with the tool results of interrupted rounds.

    `results` are the tool results now in the conversation, by call id;
    `resumed` says the task was resumed (else it was thrown away, and this is
    the record of it the session keeps). Every claim is one the record
    supports: "shortened" only when something was.
    """
    sentences: list[str] = []
    for entry in entries:
        how = (
            "stopped by the user"
            if entry.stop is StopKind.USER_CANCEL
            else (f"stopped by {entry.stop.words}")
        )
        when = (
            f"after {_when(entry.at)} (its last saved step)"
            if entry.unseen
            else f"at {_when(entry.at)}"
        )
        sentence = f"This task was {how} {when}"
        if entry.repeats:
            since = _when(entry.first_at if entry.first_at is not None else entry.at)
            sentence += (
                f", the last of {entry.repeats + 1} such stops since {since}, each leaving "
                "its calls as told here"
            )
        if entry.error:
            sentence += f" ({entry.error})"
        sentences.append(sentence + ".")
        if entry.calls:
            parts = [
                f"{_call_words(c)}: {c.state.words}{_since(c, results.get(c.call_id), resumed)}"
                for c in entry.calls
            ]
            sentences.append("The calls of the round it stopped: " + "; ".join(parts) + ".")
        if entry.lost_words:
            sentences.append(
                f"The reply you were writing (about {entry.lost_words} words) was not saved."
            )
        elif not entry.calls:
            sentences.append("It stopped before you had replied.")
    if resumed and entries:
        sentences.append(
            "It has been resumed: calls with saved results did not run again. A call that was "
            "stopped or may have run may have taken effect twice; check before relying on it."
        )
    elif resumed:
        sentences.append("This task was resumed from its saved form.")
    else:
        sentences.append("It was not resumed: this is the record of what had happened.")
    if shortened:
        sentences.append(
            "Some saved values were shortened: a '...[N bytes elided]...' marker shows where N "
            "bytes were removed. If an elided part matters, run that call again."
        )
    return "agentrt: " + " ".join(sentences)


_CANCELLED_RESULTS = {
    CallState.STOPPED: "stopped by the user while running: its process was killed, so it may "
    "have done part of its work; it was not run again",
    CallState.NOT_STARTED: "not run: the user stopped the task before this call started",
    CallState.MAY_HAVE_RUN: "may have run: it started and its result was never saved; it was "
    "not run again",
}


def thrown_away(record: TaskRecord, entries: Sequence[Interruption]) -> list[Message]:
    """What the session keeps of a task thrown away: a result for each call left without one
    (saying what became of it, never that it was rejected), then the note."""
    calls, results = last_round(record.transcript)
    states = {c.call_id: c.state for e in entries for c in e.calls if not c.agent}
    added: list[Message] = []
    for call in calls:
        if call.id in results:
            continue
        state = states.get(call.id, CallState.NOT_STARTED)
        if state not in _CANCELLED_RESULTS:
            state = CallState.MAY_HAVE_RUN
        added.append(Message.tool_result(call, _CANCELLED_RESULTS[state], state))
    told = {**results, **{m.tool_call_id or "": m for m in added}}
    note = note_text(entries, told, resumed=False, shortened=has_elisions(record.transcript))
    return [*added, Message.note(note)]


def has_elisions(transcript: Sequence[Message]) -> bool:
    """Whether a value of `transcript` holds a '...[N bytes elided]...' marker."""
    return any(
        was_clamped(m.content) or any(call_was_clamped(c) for c in m.tool_calls) for m in transcript
    )

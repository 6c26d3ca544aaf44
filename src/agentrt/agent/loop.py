"""The agent loop: model rounds, parallel tool calls, confirmations, questions, subagents.

One `AgentRun` drives one run of a session's task. Each round asks the model
for a response, commits it (so a resumed task replays the same tool calls
instead of asking the model again), then runs the round's tool calls
concurrently in a nursery; each result is committed to the task store as soon
as it exists, so a committed call never runs twice.
"""

from __future__ import annotations

import contextvars
import logging
import os
import time
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import trio

from ..core.cause import Cause
from ..core.cause import stop_cause
from ..core.context import RequestContext
from ..core.context import bind_context
from ..core.context import current_context
from ..core.pending import ALLOW_ONCE
from ..core.pending import ALLOW_SESSION
from ..core.pending import DENY
from ..core.pending import Answer
from ..core.pending import NoAnswerComingError
from ..core.pending import QuestionExpiredError
from ..core.pending import Registry
from ..core.pending import RequestKind
from ..core.policy import origin_rules
from ..core.tracing import Attribute
from ..core.tracing import span
from ..models.messages import Message
from ..models.messages import Model
from ..models.messages import ModelDelta
from ..models.messages import ReasoningDelta
from ..models.messages import Redaction
from ..models.messages import Role
from ..models.messages import TextDelta
from ..models.messages import ToolCall
from ..models.messages import ToolCallDelta
from ..models.messages import ToolSpec
from ..models.messages import Usage
from ..models.messages import model_view
from ..store import Queued
from ..store import Store
from ..store import StoreError
from ..store.ledger import has_elisions
from ..store.ledger import last_round
from ..store.ledger import note_text
from ..store.ledger import stop_entries
from ..store.record import ARGUMENTS_BOUND
from ..store.record import SavedQuestion
from ..store.record import SubagentJournal
from ..store.record import TaskRecord
from ..store.record import call_was_clamped
from ..store.record import clamp_message
from ..store.record import keep_arguments
from ..store.record import kept_size
from ..store.record import restore_arguments
from ..store.record import unanswered_calls
from ..vocab.clamp import ARGUMENT_LIMIT
from ..vocab.clamp import clamp
from ..vocab.clamp import clamp_arguments
from ..vocab.clamp import preview
from ..vocab.events import CompactionEvent
from ..vocab.events import Event
from ..vocab.events import ReasoningEvent
from ..vocab.events import TextEvent
from ..vocab.events import ToolCallDeltaEvent
from ..vocab.events import ToolCallEvent
from ..vocab.events import ToolProgressEvent
from ..vocab.events import ToolResultEvent
from ..vocab.events import UsageEvent
from ..vocab.events import VerifyEvent
from ..vocab.questions import QuestionState
from ..vocab.questions import QuestionTrace
from ..vocab.questions import Timeout
from ..vocab.questions import TimeoutAction
from ..vocab.questions import format_duration
from ..vocab.questions import new_question_id
from ..vocab.questions import withdrawn_because
from ..vocab.reprs import mutable
from ..vocab.request import Request
from ..vocab.stops import CallState
from ..vocab.stops import StopKind
from ..vocab.terms import TaskStatus
from ..vocab.usage import TokenCount
from .compaction import Joined
from .compaction import compaction_of
from .compaction import prompt_of
from .config import AgentConfig as AgentConfig
from .guard import SecretGoneError
from .guard import command_touches
from .guard import inside
from .guard import touched_roots
from .prompt import SystemPrompt
from .prompt import build_prompt
from .tools import QuestionParked
from .tools import ToolDenied
from .tools import ToolError as ToolError
from .tools import ToolRefused
from .tools import find
from .tools import offered_to
from .tools import records_start
from .tools.base import DENIED

Emit = Callable[[Event], Awaitable[None]]

_log = logging.getLogger("agentrt.agent")

#: How many wrong passwords a restricted-path confirmation allows.
PASSWORD_TRIES = 3
#: How long a write shielded from cancellation may take before it is given up (the store
#: is stuck): the call then counts as started and not committed.
SHIELDED_WRITE_SECONDS = 10.0
#: Longest string (UTF-8 bytes) of a tool call's arguments carried by an event.
EVENT_STRING_LIMIT = ARGUMENT_LIMIT
#: Longest text piece of one `TextEvent`; a longer model delta is split.
TEXT_EVENT_LIMIT = 16 * 1024


def event_pieces(text: str) -> list[str]:
    """`text` cut into `TEXT_EVENT_LIMIT`-character pieces, one per event (none when empty)."""
    if len(text) <= TEXT_EVENT_LIMIT:  # nearly every streamed piece: one event, no cutting
        return [text] if text else []
    return [text[i : i + TEXT_EVENT_LIMIT] for i in range(0, len(text), TEXT_EVENT_LIMIT)]


@mutable(eq=False)
class _Turns:
    """The calls of one round in the order the model issued them, for their questions.

    The calls run at once, so without this their questions would reach the
    registry in whatever order the scheduler ran them, and a person answering
    from a pipe (`agentrt run`) would answer the wrong one. A call's question
    is posted only once every call before it in its round has *passed*: posted
    its own first question, begun its effect, said it will ask nothing
    (`AgentRun.asks_nothing`) or ended. A call that forgets to say so only
    holds the questions after it until it ends; the order is kept either way.
    Waiting calls are woken one at a time, in order (the one whose turn came),
    so the scheduler never has two of them to choose between.
    """

    passed: list[bool]
    #: ``ready[n]`` is set once every call before the n-th has passed.
    ready: list[trio.Event]
    #: How many calls from the first on have passed.
    _prefix: int = 0

    @classmethod
    def of(cls, count: int) -> _Turns:
        """The turns of a round of `count` calls; the first call's turn has come."""
        turns = cls([False] * count, [trio.Event() for _ in range(count)])
        turns.ready[0].set()
        return turns

    def pass_(self, index: int) -> None:
        """The `index`-th call has passed: the turn of the next one that has not may come."""
        self.passed[index] = True
        while self._prefix < len(self.passed) and self.passed[self._prefix]:
            self._prefix += 1
            if self._prefix < len(self.ready):
                self.ready[self._prefix].set()

    async def wait_for_those_before(self, index: int) -> None:
        """Return once every call before the `index`-th has passed (no checkpoint if so)."""
        if not self.ready[index].is_set():
            await self.ready[index].wait()


#: Where a call in flight stands (`AgentRun._inflight`), and what a stop then says of it:
#: it began and will record its start before its effect (not started yet); it works, its
#: tool recording no start (stopped while running); it waits on its question (not
#: started); it began its recorded effect (stopped while running); it failed with an error
#: that is not a tool's result, the run failing with it (may have run).
_BEGUN = CallState.NOT_STARTED
_RUNNING = CallState.STOPPED
_ASKING = CallState.NOT_STARTED
_EFFECT = CallState.STOPPED
_FAILED = CallState.MAY_HAVE_RUN

#: Where the running tool call stands: its round's `_Turns` and its index there, from the
#: top-level round down to the subagent round it runs in (Trio copies it into the call's task).
_position: contextvars.ContextVar[tuple[tuple[_Turns, int], ...]] = contextvars.ContextVar(
    "agentrt_call_position", default=()
)


@mutable(eq=False)
class AgentRun:
    """One run of a session's task, or of one of its subagents (then `root` is the task's run).

    A subagent journals its calls in the task's record, as the task's own run
    does: its snapshot is a view of its `SubagentJournal` there (keyed by
    `journal_key`), and every write it makes goes through `root`, in the
    same store transactions as the rest of the task.

    Two transcripts are kept apart on purpose. `live` is this run's working
    transcript with every value whole: the model reads it and tool calls are
    taken from it. `snapshot` is the record as saved, with values clamped to the
    snapshot limits and secret values in tool calls' arguments replaced by
    ``[secret NAME]`` (see `saved_form`); it is what a later resume starts
    from, and nothing in a live run reads its calls or arguments.
    """

    model: Model
    registry: Registry
    config: AgentConfig
    emit: Emit
    task_hash: str
    #: The saved record (clamped); starting point of a resume, never the source of a call.
    snapshot: TaskRecord
    store: Store | None
    history: Sequence[Message] = ()
    #: Tools the user allowed for the rest of this session.
    session_allow: set[str] = attrs.field(factory=set)
    #: Call ids confirmed ahead (an answered saved confirmation).
    preapproved: set[str] = attrs.field(factory=set)
    #: Answers given ahead to a subagent's parked question, by its prompt.
    prefilled: dict[str, str] = attrs.field(factory=dict)
    resumed: bool = False
    agent: str = ""
    #: The full transcript of this run (see the class docstring).
    live: list[Message] = attrs.field(factory=list)
    #: The run of the task a subagent belongs to (None for the task's own run).
    root: AgentRun | None = None
    #: Where a subagent's journal is kept in the task's record (its spawn call chain).
    journal_key: str = ""
    #: A subagent's journal as it starts, before anything of it is in the record.
    journal_start: SubagentJournal | None = None
    #: Stops the task's run with a cause (its executor's cancel): a question whose timeout
    #: says ``pause`` stops it so. Without it, such a question parks the run instead.
    stop: Callable[[Cause], None] | None = attrs.field(default=None, repr=False)
    #: When this run started, in local time: the date its system prompt gives.
    started: datetime = attrs.field(factory=lambda: datetime.now().astimezone())
    #: The system prompt every model request of this run sends (`agentrt.agent.prompt`); built
    #: at the first request, unless given (a subagent's is its parent's, see `spawn`).
    prompt: SystemPrompt | None = attrs.field(default=None, repr=False)
    #: The tools the model is offered in this run, the same at every request.
    tools: tuple[ToolSpec, ...] = attrs.field(init=False, repr=False)
    #: The text the model has streamed of a reply not saved yet, piece by piece.
    _unsaid: list[str] = attrs.field(factory=list, init=False, repr=False)
    #: The end of the streamed text held back from its events: it may begin a secret
    #: (`Redactor.redact_piece`); sent with the next piece, or once the response is in.
    _held: str = attrs.field(default="", init=False, repr=False)
    #: The messages of `history` the model sees (`model_view`), once read.
    _seen: Sequence[Message] | None = attrs.field(default=None, init=False, repr=False)
    _commit_lock: trio.Lock = attrs.field(factory=trio.Lock, init=False)
    #: Field writes queued by `set_record_soon`, not yet waited for.
    _behind: list[Queued[bool]] = attrs.field(factory=list, init=False)
    _subagents: int = attrs.field(default=0, init=False)
    #: Questions waiting for an answer, oldest first (see `ask_inline` and `park`).
    _asking: dict[object, SavedQuestion] = attrs.field(factory=dict, init=False)
    #: Ids of the calls this run took over from the snapshot (see `_restored_call`).
    _restored: set[str] = attrs.field(factory=set, init=False)
    #: The calls of this run that began and have not ended, by id, with the state a stop now
    #: would leave each in (`_BEGUN`, `_RUNNING`, `_ASKING`, `_EFFECT`, `_FAILED`).
    _inflight: dict[str, CallState] = attrs.field(factory=dict, init=False)
    #: The calls in flight whose recorded effect has begun (`begin_effect`).
    _effects: set[str] = attrs.field(factory=set, init=False)
    #: The subagent runs of this task's run going on now, by journal key (see `stopped`).
    _children: dict[str, AgentRun] = attrs.field(factory=dict, init=False)

    def __attrs_post_init__(self) -> None:
        # The calls not run yet get their full arguments back from the record (as saved:
        # `_restored_call` puts their secret values back, and refuses one still clamped).
        transcript = self.snapshot.transcript
        self._restored = {call.id for call in unanswered_calls(transcript)}
        if not self.live:
            self.live = restore_arguments(transcript, self.snapshot.arguments, self._restored)
        self.tools = offered_to(self.model)

    @property
    def turn_start(self) -> int:
        """Where the task's messages begin among its session's (its user message's index)."""
        return len((self.root or self).history)

    @property
    def context(self) -> RequestContext:
        ctx = current_context()
        assert ctx is not None, "AgentRun.drive must run inside bind_context()"
        return ctx

    async def drive(self) -> tuple[str | None, SavedQuestion | None]:
        """Run rounds until the model answers without tool calls or the run parks.

        Returns ``(final text, None)`` when finished, ``(None, question)`` when parked.
        """
        answered = self._committed_final_answer()
        if answered is not None:
            # The run stopped after the model's final answer was saved: it is not asked
            # again; the saved answer is shown once more and the task finishes.
            for piece in event_pieces(answered):
                await self.emit(TextEvent(self.task_hash, piece, self.agent))
            return answered, None
        rounds = 0
        while True:
            calls = unanswered_calls(self.live)
            if calls:  # the calls of the round (of the response just committed, or saved)
                phase: dict[str, Attribute | None] = {
                    "agentrt.round": rounds,
                    "agentrt.round.phase": "tools",
                }
                with span("agentrt.round", self._traced(phase)):
                    parked = await self._run_round(calls)
                if parked is not None:
                    return None, parked
                continue
            if rounds >= self.config.max_rounds:
                raise ToolError(
                    f"the model asked for more than {self.config.max_rounds} rounds of tool calls"
                )
            rounds += 1
            phase = {"agentrt.round": rounds, "agentrt.round.phase": "model"}
            round_span = span("agentrt.round", self._traced(phase))
            with round_span, span(f"chat {self.model.name}", self._chat_attributes()) as chat:
                await self._tell_stops()
                await self.compact()
                self._held = ""
                response = await self.model.complete(
                    self._model_messages(), self._offered(), self._on_delta
                )
                await self._send_held()
                if response.usage is not None:
                    chat.set("gen_ai.usage.input_tokens", response.usage.input_tokens)
                    chat.set("gen_ai.usage.output_tokens", response.usage.output_tokens)
                    chat.set("agentrt.usage.cached_tokens", response.usage.cache_read_tokens)
                    chat.set("agentrt.usage.reasoning_tokens", response.usage.reasoning_tokens)
            if response.usage is not None:
                usage = response.usage
                await self.emit(
                    UsageEvent(
                        self.task_hash,
                        usage.input_tokens,
                        usage.output_tokens,
                        usage.cache_read_tokens,
                        usage.cache_creation_tokens,
                        usage.reasoning_tokens,
                    )
                )
            message = response.as_message()
            text = self.config.redactor.redact(message.content)
            # A secret in the model's reasoning is scrubbed too; the block then loses its
            # signature, and the provider no longer sends it back.
            thinking = tuple(b.scrubbed(self.config.redactor.redact) for b in message.thinking)
            await self.commit(attrs.evolve(message, content=text, thinking=thinking))
            if response.usage is not None:
                await self._count(response.usage)
            if not response.tool_calls:
                return text, None

    async def _count(self, usage: Usage) -> None:
        """Add a response's tokens to the run's in the store (a subagent's to its task's),
        once the response is committed.

        Not a step of the run: a store that fails here loses the count, not the run.
        """
        store = (self.root or self).store
        if store is None:
            return
        count = TokenCount(
            1,
            usage.input_tokens,
            usage.output_tokens,
            usage.cache_read_tokens,
            usage.reasoning_tokens,
        )
        try:
            # The tokens were spent: a stop arriving now does not lose their count.
            with trio.CancelScope(shield=True), trio.move_on_after(SHIELDED_WRITE_SECONDS):
                await store.add_usage(
                    self.snapshot.session_id, self.task_hash, self.model.name, count
                )
        except StoreError as exc:
            _log.warning(
                "the tokens of a response of run %s were not saved: %s", self.task_hash, exc
            )

    def _traced(self, attributes: Mapping[str, Attribute | None]) -> dict[str, Attribute | None]:
        """`attributes` with this run's session, task and agent (`agentrt.core.tracing`)."""
        return {
            "agentrt.session.id": self.snapshot.session_id,
            "agentrt.task.hash": self.task_hash,
            "agentrt.agent": self.agent or None,
            **attributes,
        }

    def _chat_attributes(self) -> dict[str, Attribute | None]:
        provider, _, model = self.model.name.partition(":")
        return self._traced(
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": provider if model else None,
                "gen_ai.request.model": model or provider,
                "gen_ai.conversation.id": self.snapshot.session_id,
            }
        )

    def _committed_final_answer(self) -> str | None:
        """The saved final answer of a resumed task that has one (its last message)."""
        if not self.resumed or not self.live:
            return None
        last = self.live[-1]
        if last.role is Role.ASSISTANT and not last.tool_calls:
            return last.content
        return None

    def system_prompt(self) -> SystemPrompt:
        """The run's system prompt, built once (it reads the project's AGENTS.md files)."""
        if self.prompt is None:
            self.prompt = build_prompt(self.config, self._offered(), self.started)
        return self.prompt

    def _model_messages(self) -> Sequence[Message]:
        """What the model reads: the system prompt first, then the conversation from its last
        compaction on (`prompt_of`). The prompt is never part of the conversation: no
        transcript or store holds it, and no compaction summarises it."""
        return prompt_of(self._conversation())

    def _conversation(self) -> Sequence[Message]:
        """The system prompt, the session's messages the model sees (`model_view`: less what
        a rewind left out) and the run's, joined without a copy (read from the end)."""
        if self._seen is None:
            self._seen = model_view(self.history)  # the history stays as it is for the run
        system = (Message.system(self.system_prompt().text),)
        return Joined(system, Joined(self._seen, self.live))

    async def compact(self, *, force: bool = False) -> Message | None:
        """Compact the conversation if the next request would pass its share of the model's
        context window (or, with `force`, anyway); the compaction entry committed, if any.

        A step of the run like a tool call: the entry is committed in one transaction, so a
        run stopped before it has none, and its resume compacts again.
        """
        spent: list[Usage] = []
        entry = await compaction_of(
            self.model,
            self.config.context,
            self._conversation(),
            self._offered(),
            force=force,
            spent=spent,
        )
        for usage in spent:  # the summary's request cost tokens, kept or not
            await self._count(usage)
        if entry is None or entry.compaction is None:
            return None
        summarised = entry.compaction.summarised
        entry = attrs.evolve(entry, content=self.config.redactor.redact(entry.content))
        await self.commit(entry)
        await self.emit(CompactionEvent(self.task_hash, summarised, self.agent))
        return entry

    async def _tell_stops(self) -> None:
        """Before the model is asked again: the note of what it has not been told yet.

        Each stop of this run's scope (the task's, or a subagent's journal) was
        saved with the state of every call of the round it interrupted. By now
        every call of that round has a result (from before the stop, or from this
        run); the note says what each one's state was and what became of it,
        and goes into the transcript, told once. A resumed run whose saved values
        were shortened since the last note says so too, stop or none.
        """
        entries = self.snapshot.interruptions
        last_note = max(
            (i for i, m in enumerate(self.live) if m.role is Role.NOTE and m.compaction is None),
            default=-1,
        )
        shortened = self.resumed and has_elisions(self.live[last_note + 1 :])
        if not entries and not shortened:
            return
        _, results = last_round(self.live)
        note = note_text(entries, results, resumed=True, shortened=shortened)
        await self.commit(Message.note(note), told=True)

    def stopped(self, stop: StopKind, at: float, error: str | None = None) -> TaskRecord:
        """The task's record with this stop's entry in the ledger (a method of the task's run).

        The calls still in flight are the ones the stop interrupted: a call that
        had begun its effect, or (a tool that records no start) was running, was
        stopped while running; one waiting on its question had not started; one
        whose tool failed with an error of its own may have run.
        """

        return stop_entries(
            self.snapshot,
            stop,
            at,
            self._seen_in_flight(),
            self.uncommitted_words,
            error=error,
            records_start=self._records_start,
        )

    def stopped_later(self, stop: StopKind, at: float) -> Callable[[], TaskRecord]:
        """`stopped`, made when called: what it reads of the run is copied now.

        For the store's thread (`Store.stop_nowait`): a stop's final event
        waits for the copies only, not for the ledger's entry.
        """
        return partial(
            stop_entries,
            self.snapshot,
            stop,
            at,
            self._seen_in_flight(),
            self.uncommitted_words,
            records_start=self._records_start,
        )

    def _seen_in_flight(self) -> dict[str, dict[str, CallState]]:
        """The states of the calls in flight, by journal key ("" for the run's own)."""
        scopes = {"": dict(self._inflight)}
        scopes.update({key: dict(child._inflight) for key, child in self._children.items()})
        return scopes

    @property
    def uncommitted_words(self) -> int:
        """Words the model has streamed of a reply not saved yet (lost if the run stops now)."""
        return len("".join(self._unsaid).split())

    async def _on_delta(self, delta: ModelDelta) -> None:
        if isinstance(delta, TextDelta):
            # Kept whole, its words counted only if the run stops before the reply is saved.
            self._unsaid.append(delta.text)
            # Redacted with what was held back before it, so a secret cut across two pieces
            # is found whole; an end that may begin one is held back in turn.
            text, self._held = self.config.redactor.redact_piece(delta.text, self._held)
            if len(text) <= TEXT_EVENT_LIMIT:  # nearly every streamed piece: one event
                if text:
                    await self.emit(TextEvent(self.task_hash, text, self.agent))
                return
            # A model may hand over a long text in one piece; events stay small.
            for piece in event_pieces(text):
                await self.emit(TextEvent(self.task_hash, piece, self.agent))
            return
        if self._held:  # the text before this delta goes first
            await self._send_held()
        if isinstance(delta, ReasoningDelta):
            for piece in event_pieces(self.config.redactor.redact(delta.text)):
                await self.emit(ReasoningEvent(self.task_hash, piece, self.agent))
        elif isinstance(delta, ToolCallDelta):
            await self.emit(
                ToolCallDeltaEvent(
                    self.task_hash,
                    delta.index,
                    delta.id,
                    delta.name,
                    # Redacted before it is clamped, so no cut leaves a piece of a value.
                    clamp(self.config.redactor.redact(delta.arguments), EVENT_STRING_LIMIT),
                    self.agent,
                )
            )

    async def _send_held(self) -> None:
        """Emit the text held back from the events, redacted: nothing more comes to complete it."""
        held, self._held = self._held, ""
        for piece in event_pieces(self.config.redactor.redact(held)):
            await self.emit(TextEvent(self.task_hash, piece, self.agent))

    async def commit(self, message: Message, *, told: bool = False, **changes: Any) -> None:
        """Append `message` to the live transcript and persist the snapshot (one transaction).

        With `told`, the message is the note of this scope's stops: they leave the ledger.
        """
        async with self._commit_lock:
            self.live.append(message)
            if message.role is Role.ASSISTANT:
                self._unsaid.clear()
            if self.root is not None:
                await self.root._change(lambda task: self._committed(task, message, told))
                self.snapshot = self._view(self.root.snapshot)
                return
            record = self._committed(self.snapshot, message, told).evolve(**changes)
            if self.store is not None:
                record = await self.store.save(record)
            self.snapshot = record
            await self._behind_written()

    def saved_form(self, message: Message) -> Message:
        """`message` as the snapshot keeps it: secret values in its calls' arguments replaced.

        Each call records how (`Redaction`), so a resume can put whole values
        back (`_restored_call`) and refuses a call whose values cannot be.
        """
        if not message.tool_calls:
            return message
        calls: list[ToolCall] = []
        for call in message.tool_calls:
            arguments, redaction = self.config.redactor.seal_arguments(call.arguments)
            if redaction is not Redaction.NONE:
                call = attrs.evolve(call, arguments=arguments, redaction=redaction)
            calls.append(call)
        return attrs.evolve(message, tool_calls=tuple(calls))

    def _committed(self, task: TaskRecord, message: Message, told: bool = False) -> TaskRecord:
        """The task's record once this run's `message` is committed.

        The message is saved in its `saved_form`. The full arguments of its
        calls that the snapshot clamps are kept in that form too (secret values
        sealed), within `ARGUMENTS_BOUND` a task; those of a call whose result
        it is are let go; a spawn's result ends the journals of its subagents.
        """
        message = self.saved_form(message)
        room = ARGUMENTS_BOUND - kept_size(task)
        subagents = dict(task.subagents)
        if message.role is Role.TOOL and message.name == "spawn":
            done = self._key_of(message.tool_call_id or "")
            subagents = {
                k: j for k, j in subagents.items() if k != done and not k.startswith(done + "/")
            }
        if self.root is None:
            return task.evolve(
                transcript=(*task.transcript, message),
                arguments=keep_arguments(task.arguments, message, room),
                subagents=subagents,
                interruptions=() if told else task.interruptions,
            )
        journal = subagents.get(self.journal_key) or self._journal_start()
        subagents[self.journal_key] = attrs.evolve(
            journal,
            transcript=(*journal.transcript, clamp_message(message)),
            arguments=keep_arguments(journal.arguments, message, room),
            interruptions=() if told else journal.interruptions,
        )
        return task.evolve(subagents=subagents)

    def _key_of(self, spawn_id: str) -> str:
        """The journal key of the subagent this run's spawn call `spawn_id` runs."""
        return f"{self.journal_key}/{spawn_id}" if self.journal_key else spawn_id

    def _journal_start(self) -> SubagentJournal:
        assert self.journal_start is not None, "a subagent's run is given its journal_start"
        return self.journal_start

    def _view(self, task: TaskRecord) -> TaskRecord:
        """A subagent's snapshot: its journal in the task's record `task`."""
        journal = task.subagents.get(self.journal_key) or self._journal_start()
        return attrs.evolve(
            self.snapshot,
            transcript=journal.transcript,
            attempts=journal.attempts,
            arguments=journal.arguments,
            interruptions=journal.interruptions,
        )

    def _lifted(
        self, change: Callable[[TaskRecord], TaskRecord]
    ) -> Callable[[TaskRecord], TaskRecord]:
        """A change of this subagent's snapshot as a change of the task's record.

        Only what a journal holds is kept (attempts, transcript, arguments): a
        subagent's status and questions are its parent's to record.
        """

        def lifted(task: TaskRecord) -> TaskRecord:
            view = self._view(task)
            new = change(view)
            if (new.attempts, new.arguments) == (view.attempts, view.arguments):
                return task
            journal = task.subagents.get(self.journal_key) or self._journal_start()
            journal = attrs.evolve(journal, attempts=new.attempts, arguments=new.arguments)
            return task.evolve(subagents={**task.subagents, self.journal_key: journal})

        return lifted

    async def set_record(self, *, note: QuestionTrace | None = None, **changes: Any) -> None:
        """Persist a change to the snapshot that adds no message.

        With `note`, the record notes that question state too (`TaskRecord.noting`).
        """
        if note is not None:
            await self._change(lambda record: record.noting(note, **changes))
        else:
            await self._change(lambda record: record.evolve(**changes))

    async def _change(self, change: Callable[[TaskRecord], TaskRecord]) -> None:
        """Persist `change` applied to the snapshot as it is once the commit lock is held."""
        if self.root is not None:
            await self.root._change(self._lifted(change))
            self.snapshot = self._view(self.root.snapshot)
            return
        async with self._commit_lock:
            record = change(self.snapshot)
            if _unchanged(record, self.snapshot):
                return  # (a question shown already; a subagent's change of what it does not journal)
            if self.store is not None and not await self.store.save_fields(record):
                record = await self.store.save(record)
            self.snapshot = record
            await self._behind_written()

    async def set_record_soon(self, **changes: Any) -> None:
        """Like `set_record`, but the write is queued, not waited for.

        For a change whose loss in a crash costs nothing (the record would
        only say a little less); it reaches the disk with the next write that
        is waited for, in the same transaction, and that write checks it.
        """
        await self._change_soon(lambda record: record.evolve(**changes))

    async def _change_soon(self, change: Callable[[TaskRecord], TaskRecord]) -> None:
        """`set_record_soon` of `change` applied to the snapshot (a method of the task's run)."""
        async with self._commit_lock:
            record = change(self.snapshot)
            if _unchanged(record, self.snapshot):
                return
            if self.store is not None:
                self._behind.append(self.store.save_fields_nowait(record))
            self.snapshot = record

    async def _behind_written(self) -> None:
        """Wait for the writes `set_record_soon` queued (done by now or with the last write)."""
        while self._behind:
            await self._behind.pop(0).wait()

    async def begin_effect(self, call: ToolCall) -> None:
        """Record that `call` is about to take effect, before it does.

        If the run dies before the call's result is committed, the saved task
        knows the call may already have run, and says so when it is resumed.
        The count is taken under the commit lock, so calls of one round that
        start together never overwrite each other's.
        """

        def started(record: TaskRecord) -> TaskRecord:
            count = record.attempts_of(call.id) + 1
            return record.evolve(attempts={**record.attempts, call.id: count})

        self.asks_nothing()
        await self._change(started)
        if call.id in self._inflight:
            self._inflight[call.id] = _EFFECT
            self._effects.add(call.id)

    def attempt(self, call: ToolCall) -> int:
        """Which attempt at `call` this is: 1 unless an earlier run started it already."""
        return self.snapshot.attempts_of(call.id) + 1

    async def progress(
        self, call: ToolCall, progress: float, total: float | None, message: str
    ) -> None:
        """Tell the run's front-ends how far `call` has got (its message redacted and clamped)."""
        said = clamp(self.config.redactor.redact(message), EVENT_STRING_LIMIT)
        await self.emit(
            ToolProgressEvent(self.task_hash, call.id, call.name, progress, total, said, self.agent)
        )

    def describe(self, call: ToolCall, prompt: str) -> str:
        """`prompt` with a warning when an earlier attempt at `call` may already have run."""
        attempt = self.attempt(call)
        if attempt == 1:
            return prompt
        return f"{prompt} [may already have run (attempt {attempt})]"

    async def _run_round(self, calls: Sequence[ToolCall]) -> SavedQuestion | None:
        parked: list[SavedQuestion] = []
        order = {call.id: n for n, call in enumerate(calls)}
        turns = _Turns.of(len(calls))
        if len(calls) == 1:
            # One call: run here, without a task of its own to start and to wait for.
            await self._run_call(calls[0], parked, order, turns)
        else:
            async with trio.open_nursery() as nursery:
                for call in calls:
                    nursery.start_soon(self._run_call, call, parked, order, turns)
        if not parked:
            return None
        # The round's other results are committed by now; save the question and stop.
        question = min(parked, key=lambda q: order[q.call_id])
        saved = QuestionTrace(question.id, QuestionState.WAITING, time.time())
        await self.set_record(status=TaskStatus.AWAITING_ANSWER, question=question, note=saved)
        return question

    async def _run_call(
        self, call: ToolCall, parked: list[SavedQuestion], order: dict[str, int], turns: _Turns
    ) -> None:
        token = _position.set((*_position.get(), (turns, order[call.id])))
        traced: dict[str, Attribute | None] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": call.name,
            "gen_ai.tool.call.id": call.id,
            "agentrt.attempt": self.attempt(call),
        }
        try:
            with span(f"execute_tool {call.name}", self._traced(traced)):
                await self._run_call_in_turn(call, parked, order)
        except Exception:
            if call.id in self._inflight:
                self._inflight[call.id] = _FAILED
            raise
        finally:
            self.asks_nothing()
            _position.reset(token)

    async def _run_call_in_turn(
        self, call: ToolCall, parked: list[SavedQuestion], order: dict[str, int]
    ) -> None:
        redactor = self.config.redactor
        await self.emit(
            ToolCallEvent(
                self.task_hash,
                call.id,
                call.name,
                # Redacted before it is clamped, so no cut leaves a piece of a value.
                clamp_arguments(redactor.redact_arguments(call.arguments), EVENT_STRING_LIMIT),
                self.agent,
                attempt=self.attempt(call),
            )
        )
        ok = True
        state: CallState | None = None
        self._inflight[call.id] = _BEGUN if self._records_start(call.name) else _RUNNING
        try:
            if call.id in self._restored:
                call = self._restored_call(call)
            result = await self._dispatch(call)
            if result == DENIED:
                state = CallState.DENIED
        except QuestionParked as park:
            self._ended(call)
            parked.append(self._saved(call.id, redactor.redact(park.prompt), park.kind))
            # Saved at once: if the run stops before the round ends, the kept task still
            # shows (and accepts an answer to) the question it waits for.
            first = min(parked, key=lambda q: order[q.call_id])
            with trio.CancelScope(shield=True), trio.move_on_after(SHIELDED_WRITE_SECONDS):
                await self.set_record(question=first)
            return
        except ToolError as exc:
            ok = False
            result = f"error: {exc}"
            if isinstance(exc, ToolRefused):
                state = CallState.REFUSED
            elif isinstance(exc, ToolDenied):
                state = CallState.DENIED
        result = self.config.redactor.redact(result)
        # The call has happened: its result is committed even if a cancel arrives now, so
        # a resume never runs it again.
        with (
            trio.CancelScope(shield=True),
            trio.move_on_after(SHIELDED_WRITE_SECONDS) as stuck,
        ):
            await self.commit(Message.tool_result(call, result, state))
        if not stuck.cancelled_caught:
            self._ended(call)
        if stuck.cancelled_caught:
            # Never report a result that is not saved: a resume would run the call again.
            raise StoreError(
                f"the result of {call.name} could not be saved within "
                f"{SHIELDED_WRITE_SECONDS:g}s; the task store is stuck"
            )
        shown = preview(result, self.config.preview_bytes)
        await self.emit(ToolResultEvent(self.task_hash, call.id, call.name, shown, ok, self.agent))

    def _ended(self, call: ToolCall) -> None:
        """`call` ended (its result committed, or it parked): no stop interrupts it any more."""
        self._inflight.pop(call.id, None)
        self._effects.discard(call.id)

    def _restored_call(self, call: ToolCall) -> ToolCall:
        """A call taken over from the snapshot, with the values its arguments stand for.

        Raises `ToolError` when they cannot all be had: an argument was clamped,
        a secret's value was saved from another spelling of it, or a secret it
        names is no longer stored.
        """
        if call_was_clamped(call):
            raise ToolRefused(
                "not run: an argument of this call was shortened when the task was saved "
                "(it holds a '...[N bytes elided]...' marker), so running it now would use "
                "the wrong value; issue the call again with its full arguments"
            )
        if call.redaction is Redaction.LOST:
            raise ToolRefused(
                "not run: an argument of this call held a secret in an encoded or wrapped "
                "form, saved as '[secret NAME]', so running it now would use the wrong value; "
                "issue the call again with its full arguments"
            )
        if call.redaction is Redaction.NONE:
            return call
        try:
            arguments = self.config.redactor.restore_arguments(call.arguments)
        except SecretGoneError as gone:
            raise ToolRefused(
                f"not run: an argument of this call holds secret {gone.args[0]!r}, which is "
                "no longer stored; store it again (store_secret) or issue the call without it"
            ) from None
        return attrs.evolve(call, arguments=arguments, redaction=Redaction.NONE)

    async def _dispatch(self, call: ToolCall) -> str:
        mcp = self.config.mcp
        if mcp is not None and mcp.owns(call.name):
            from .tools.mcpcall import call_mcp_tool

            return await call_mcp_tool(self, call, mcp)
        tool = find(call.name)
        return await tool.parse(call).run(self, call)

    def _offered(self) -> tuple[ToolSpec, ...]:
        """The tools the model is offered: the built-in ones, then the MCP servers' ready ones."""
        mcp = self.config.mcp
        return offered_to(self.model) + (mcp.specs() if mcp is not None else ())

    def _records_start(self, name: str) -> bool:
        """Whether the tool `name` records its start before its effect (an MCP tool does)."""
        mcp = self.config.mcp
        return (mcp is not None and mcp.owns(name)) or records_start(name)

    # -- asking the human --------------------------------------------------

    async def ask_inline(self, call_id: str, request: Request) -> Answer:
        """Ask through the registry while the question is saved with the task (for `call_id`).

        If the run stops before the answer, the kept task shows the question.
        With several inline questions open in one round, the record shows the
        oldest one still waiting, so answering one never hides another.
        Secret values in the prompt and the diff are shown (and saved) as ``[secret NAME]``.
        """
        redact = self.config.redactor.redact
        diff = None if request.diff is None else redact(request.diff)
        request = attrs.evolve(request, prompt=redact(request.prompt), diff=diff)
        # The task's record shows a subagent's question as its spawn's (the first call of
        # the chain): a resume runs that spawn, and the subagent asks again.
        shown_call = self.journal_key.split("/", 1)[0] if self.root is not None else call_id
        shown = self._saved(shown_call, request.prompt, request.kind)
        saved = attrs.evolve(shown, call_id=call_id)
        # Posted in the order the calls were issued: after the questions of the calls before.
        for turns, index in _position.get():
            await turns.wait_for_those_before(index)
        before = self._inflight.get(call_id)
        if before is not None and call_id not in self._effects:
            # (A question asked once the call's effect began, an MCP server's, leaves it so.)
            self._inflight[call_id] = _ASKING
        try:
            answer = await (self.root or self)._ask_recorded(shown, request)
        except NoAnswerComingError:
            raise self._nobody_to_answer(saved) from None
        if before is not None:
            self._inflight[call_id] = before
        return answer

    def _saved(self, call_id: str, prompt: str, kind: RequestKind) -> SavedQuestion:
        """The question `call_id` asks, as the task saves it.

        The same question the task saved, asked again (on resume), keeps its id,
        so an answer naming it lands on it; any other gets a fresh one.
        """
        kept = (self.root or self).snapshot.question
        if kept is not None and (kept.call_id, kept.prompt, kept.kind) == (call_id, prompt, kind):
            question_id = kept.id
        else:
            question_id = new_question_id()
        return SavedQuestion(
            call_id, prompt, kind, id=question_id, task=self.task_hash, origin=self.context.origin
        )

    async def _ask_recorded(self, saved: SavedQuestion, request: Request) -> Answer:
        """Ask `request` while `saved` is the task's question (a method of the task's run).

        The question's states go to the record as they come (`TaskRecord.questions`):
        waiting, then answered, withdrawn (the run stopped) or expired (its
        timeout in `AgentConfig.timeouts` fired; then its action is done).
        """
        token = object()  # (the questions of one subagent share their spawn's call id)
        self._asking[token] = saved
        asked = QuestionTrace(saved.id, QuestionState.WAITING, time.time())
        await self.set_record(question=self._oldest_waiting(), note=asked)
        timeout = self.config.timeouts.of(request.kind)
        # No checkpoint from here until `ask` has posted the entry: the calls after this
        # one, woken now, post theirs after it.
        self.asks_nothing()
        traced: dict[str, Attribute | None] = {
            "agentrt.question.id": saved.id,
            "agentrt.question.kind": saved.kind.value,
        }
        try:
            with span("agentrt.question", self._traced(traced)):
                answer = await self.registry.ask(
                    request,
                    entry_id=saved.id,
                    expires_after=timeout.seconds if timeout.fires else None,
                )
        except NoAnswerComingError:
            del self._asking[token]
            raise
        except QuestionExpiredError:
            return await self._expired(token, saved, timeout)
        except BaseException as exc:
            await self._withdrawn(saved, exc)
            raise
        del self._asking[token]
        answered = QuestionTrace(saved.id, QuestionState.ANSWERED, time.time())
        oldest = self._oldest_waiting()
        # Not waited for: if it is lost, the kept task shows a question that was answered,
        # and a resume asks it again, as if the answer had come a moment later.
        await self._change_soon(lambda r: r.noting(answered, question=oldest))
        return answer

    async def _expired(self, token: object, saved: SavedQuestion, limit: Timeout) -> Answer:
        """Do what the timeout of a question that expired says (`TimeoutAction`)."""
        assert limit.seconds is not None
        expired = QuestionTrace(saved.id, QuestionState.EXPIRED, time.time(), waited=limit.seconds)
        within = format_duration(limit.seconds)
        if limit.action is TimeoutAction.PAUSE:
            # Stopped as a Pause stops it: the task is kept, the question saved with it.
            await self.set_record(note=expired)
            if self.stop is None:
                raise QuestionParked(saved.prompt, saved.kind)
            self.stop(Cause.PAUSE)
            await trio.lowlevel.checkpoint()
            raise AssertionError("a run stopped with a pause goes on")  # pragma: no cover
        del self._asking[token]
        oldest = self._oldest_waiting()
        await self._change_soon(lambda r: r.noting(expired, question=oldest))
        if saved.kind in (RequestKind.CONFIRM, RequestKind.PASSWORD):
            # Not "denied by the user": nobody said no, the time ran out.
            raise ToolDenied(f"denied: nobody answered its confirmation within {within}")
        if saved.kind is RequestKind.QUESTION:
            return Answer(f"nobody answered within {within}")
        raise ToolError(f"nobody typed the secret within {within}")

    async def _withdrawn(self, saved: SavedQuestion, exc: BaseException) -> None:
        """Note that `saved` was withdrawn as its run stopped (`exc`), in the kept task.

        A user-cancel deletes the task: nothing to note there.
        """
        cause = await stop_cause(exc)
        if cause is Cause.USER_CANCEL:
            return
        reason = withdrawn_because(cause) if isinstance(exc, trio.Cancelled) else str(exc)
        gone = QuestionTrace(saved.id, QuestionState.WITHDRAWN, time.time(), reason=reason)
        # Queued, in the stopping run's own turn: it reaches the store before the stop's
        # own status, which the executor writes once the run has unwound.
        with trio.CancelScope(shield=True), trio.move_on_after(SHIELDED_WRITE_SECONDS):
            await self._change_soon(lambda r: r.noting(gone))

    def _nobody_to_answer(self, saved: SavedQuestion) -> Exception:
        """What a question that will get no answer becomes: as if nobody had been connected.

        A question parks the run (saved with the task, asked again on resume);
        so does a confirmation of the top-level run. A subagent's confirmation
        and a secret fail their call, as they do with nobody connected.
        """
        if saved.kind is RequestKind.SECRET:
            return ToolError("cannot ask for the secret: nobody is left to type it")
        if saved.kind is RequestKind.QUESTION or not self.agent:
            return QuestionParked(saved.prompt, saved.kind)
        return ToolError("needs a confirmation, and nobody is left to answer it")

    def asks_nothing(self) -> None:
        """Say that the running call asks no question (any more) before it takes effect.

        The questions of the calls after it in its round, held back to keep the
        order in which the calls were issued, may then be posted (see `_Turns`).
        """
        for turns, index in _position.get():
            turns.pass_(index)

    def _oldest_waiting(self) -> SavedQuestion | None:
        return next(iter(self._asking.values()), None)

    def has_listener(self) -> bool:
        """Whether anyone could answer a question of this run now."""
        ctx = self.context
        return self.registry.has_listener(ctx.origin, ctx)

    async def nobody_to_answer(self) -> bool:
        """Whether nobody can answer a question of this run, asked after a checkpoint.

        A window that goes away stops its runs in the same moment. The checkpoint
        lets that stop reach this run first, so that a run being stopped stops here
        instead of taking "nobody is connected" as its call's result and committing it.
        """
        if self.has_listener():
            return False
        await trio.lowlevel.checkpoint()
        return not self.has_listener()

    async def confirm(self, call: ToolCall, prompt: str, diff: str | None = None) -> bool:
        """Ask whether `call` may run; True to run it. Parks when nobody can answer.

        `diff`, the file change a write or an edit makes, is shown with the question.

        A call that may already have run (an earlier attempt started but never
        committed) is always asked about, even for a tool allowed for the session.
        Secret values in `prompt` are shown and saved as ``[secret NAME]`` (by
        `ask_inline`, or by `_run_call` when the run parks).
        """
        prompt = self.describe(call, prompt)
        if call.id in self.preapproved:
            return True
        if call.name in self.session_allow and self.attempt(call) == 1:
            return True
        if await self.nobody_to_answer():
            if self.agent:
                raise ToolError("needs a confirmation, and nobody is connected to answer it")
            raise QuestionParked(prompt, RequestKind.CONFIRM)
        answer = await self.ask_inline(call.id, Request.confirm(call.name, prompt, diff))
        if answer.value == ALLOW_SESSION:
            self.session_allow.add(call.name)
            return True
        return answer.value == ALLOW_ONCE

    async def confirm_restricted(
        self, call: ToolCall, prompt: str, diff: str | None = None
    ) -> bool:
        """Confirm a call that touches a restricted path: needs the system password."""
        ctx = self.context
        prompt = self.describe(call, prompt)
        if not origin_rules(ctx.origin).takes_secrets:
            raise ToolRefused(
                "refused: a restricted-path confirmation needs the system password, which "
                "never travels through a chat service; answer it in the terminal (agenttui) "
                "or the web page"
            )
        if call.id in self.preapproved and await self.config.verifier.cached():
            return True
        if await self.nobody_to_answer():
            if self.agent:
                raise ToolError("needs a password confirmation, and nobody is connected")
            raise QuestionParked(prompt, RequestKind.PASSWORD)
        verifier = self.config.verifier
        if await verifier.cached():
            answer = await self.ask_inline(
                call.id,
                Request(RequestKind.CONFIRM, prompt, (ALLOW_ONCE, DENY), tool=call.name, diff=diff),
            )
            return answer.value == ALLOW_ONCE
        error: str | None = None
        for attempt in range(1, PASSWORD_TRIES + 1):
            answer = await self.ask_inline(
                call.id,
                Request(
                    RequestKind.PASSWORD,
                    prompt,
                    (ALLOW_ONCE, DENY),
                    tool=call.name,
                    error=error,
                    diff=diff,
                ),
            )
            if answer.value == DENY:
                return False
            ok = await verifier.verify(answer.secret or "")
            left = PASSWORD_TRIES - attempt
            message = "password accepted" if ok else f"wrong password, {left} tries left"
            await self.emit(VerifyEvent(self.task_hash, ok, left, message))
            if ok:
                return True
            error = message
        raise ToolError(f"denied: {PASSWORD_TRIES} wrong passwords")

    # -- paths -----------------------------------------------------------

    def resolve(self, path: str) -> Path:
        """A tool's path argument, resolved against the working directory.

        With the text guard on, refuses (`ToolError`) a path inside the agent's
        own state, however spelled; the sandbox hides that state either way.
        """
        resolved = (self.config.workdir / os.path.expanduser(path)).resolve()
        if self.config.text_guard and inside(resolved, self.config.protected_paths) is not None:
            raise ToolRefused(_protected_message(path))
        return resolved

    def is_restricted(self, path: Path) -> bool:
        """Whether `path` lies inside a configured restricted path."""
        return inside(path, self.config.restricted_paths) is not None

    def restricted_roots(self, command: str) -> tuple[Path, ...]:
        """The restricted roots a shell command names: the ones a password makes writable.

        Empty with the text guard off: the command then runs in the ordinary
        sandbox, where every restricted path is read-only.
        """
        if not self.config.text_guard:
            return ()
        return touched_roots(command, self.config.workdir, self.config.restricted_paths)

    def check_command(self, command: str) -> None:
        """Refuse (`ToolError`) a shell command that names the agent's own state."""
        hit = command_touches(command, self.config.workdir, self.config.protected_paths)
        if hit is not None:
            raise ToolRefused(_protected_message(str(hit)))

    async def spawn(self, task: str, call: ToolCall) -> str:
        """Run `task` in an in-process subagent that shares the registry and context.

        The subagent journals its calls in the task's record under the chain
        of spawn call ids leading to it; a spawn that runs again (on resume)
        takes up that journal, so the subagent's committed calls never run
        again and a call it started says it may already have run.
        """
        root = self.root or self
        key = self._key_of(call.id)
        journal = root.snapshot.subagents.get(key)
        if journal is None:
            taken = {j.agent for j in root.snapshot.subagents.values()}
            while True:
                self._subagents += 1
                name = (
                    f"{self.agent}/sub{self._subagents}" if self.agent else f"sub{self._subagents}"
                )
                if name not in taken:
                    break
            # Saved as the record keeps any text: no secret value reaches the store.
            start = SubagentJournal(name, (Message.user(self.config.redactor.redact(task)),))
        else:
            name, start = journal.agent, journal
        child_record = TaskRecord(
            self.snapshot.session_id,
            task,
            start.transcript,
            attempts=start.attempts,
            arguments=start.arguments,
        )
        child = AgentRun(
            model=self.model,
            registry=self.registry,
            config=self.config,
            emit=self.emit,
            task_hash=self.task_hash,
            snapshot=child_record,
            store=None,
            session_allow=self.session_allow,
            prefilled=self.prefilled,
            resumed=journal is not None,
            agent=name,
            root=root,
            journal_key=key,
            journal_start=start,
            started=self.started,
            prompt=self.system_prompt().for_subagent(name),
        )
        root._children[key] = child
        with bind_context(attrs.evolve(self.context, agent_path=name)):
            text, parked = await child.drive()
        # Ended (finished or parked): no stop interrupts it any more.
        del root._children[key]
        if parked is not None:
            # Parks the parent on the subagent's question; the answer re-runs the spawn with
            # the answer given ahead (`prefilled`).
            raise QuestionParked(parked.prompt, parked.kind)
        return text or ""


# -- the tools ------------------------------------------------------------


def _unchanged(record: TaskRecord, before: TaskRecord) -> bool:
    """Whether `record` says nothing `before` did not (its time of update aside)."""
    return record is before or attrs.evolve(record, updated_at=before.updated_at) == before


def _protected_message(path: str) -> str:
    return (
        f"refused: {path} is part of agentrt's own state (its task store, secrets, token or "
        "socket); no tool may read or write there"
    )

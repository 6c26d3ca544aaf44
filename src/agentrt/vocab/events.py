"""What a run tells the world while it runs, ending with exactly one `RunEnded`.

Each event is declared here once, in the vocabulary layer: the daemon's frame
for it (`agentrt.frames`) is this class with its wire ``type``, and its JSON
shape (`agentrt.present.shapes.event_to_json`) is its fields, so a field has one name
wherever the event goes.
"""

from __future__ import annotations

from typing import Any

import attrs

from .reprs import quick_init
from .reprs import record
from .terms import Cause
from .terms import Outcome as Outcome


@record
class TaskStarted:
    """The first event of every run: it carries the task hash a cancel must name."""

    task_hash: str
    session_id: str
    resumed: bool = False
    #: On a resume, what the stop cost: calls whose committed results are kept,
    kept_calls: int = 0
    #: calls that had started and may run again,
    rerun_calls: int = 0
    #: and words of an unsaved reply the model will say again.
    regenerated_words: int = 0


@quick_init
@record
class TextEvent:
    """Streamed assistant text (`agent` names a subagent, "" for the main one)."""

    task_hash: str
    text: str
    agent: str = ""


@quick_init
@record
class ReasoningEvent:
    """Streamed reasoning ("thinking") of the model: shown apart from its answer, dimmed.

    Not part of the reply: a front-end that shows only answers may ignore it.
    """

    task_hash: str
    text: str
    agent: str = ""


@record
class ToolCallEvent:
    """A tool call is about to run.

    `arguments` are for showing: long strings are shortened (the call itself runs
    with its full values). `attempt` is 1 for a call never started before; more
    means an earlier run started this call and stopped before its result was
    committed, so it may already have run.
    """

    task_hash: str
    call_id: str
    name: str
    arguments: dict[str, Any] = attrs.field(factory=dict)
    agent: str = ""
    attempt: int = 1

    @property
    def may_have_run(self) -> str | None:
        """The warning to show when an earlier attempt may already have run, else None."""
        return may_have_run(self.attempt)


def describe_resume(kept_calls: int, rerun_calls: int, regenerated_words: int) -> str:
    """What a pause cost, in one line: ``resumed: 3 calls kept, 1 run again, 40 words regenerated``."""

    def count(n: int, one: str, many: str) -> str:
        return f"{n} {one if n == 1 else many}"

    return (
        f"resumed: {count(kept_calls, 'call', 'calls')} kept, {rerun_calls} run again, "
        f"{count(regenerated_words, 'word', 'words')} regenerated"
    )


def may_have_run(attempt: int) -> str | None:
    """``"may already have run (attempt N)"`` for an attempt after the first, else None."""
    return f"may already have run (attempt {attempt})" if attempt > 1 else None


@record
class ToolCallDeltaEvent:
    """A piece of a tool call the model is still streaming: its name first, then argument text.

    The call runs (and `ToolCallEvent` follows) only once the whole response is in.
    """

    task_hash: str
    index: int
    #: The call's id and the tool's name come with the first piece of call `index`;
    call_id: str | None = None
    name: str | None = None
    #: each piece carries the next part of its JSON argument text.
    arguments: str = ""
    agent: str = ""


@record
class ToolResultEvent:
    """A tool call finished; `preview` is the start of its result."""

    task_hash: str
    call_id: str
    name: str
    preview: str
    ok: bool = True
    agent: str = ""


@record
class ToolProgressEvent:
    """A tool call in flight says how far it has got (an MCP server's progress notification)."""

    task_hash: str
    call_id: str
    name: str
    progress: float
    #: The progress at the end, when the tool knows it.
    total: float | None = None
    message: str = ""
    agent: str = ""


@record
class VerifyEvent:
    """The result of checking a password typed for a restricted path."""

    task_hash: str
    ok: bool
    attempts_left: int
    message: str


@record
class UsageEvent:
    """Token usage reported by the model for one response.

    `input_tokens` counts every prompt token, cached or not; of them,
    `cache_read_tokens` were read from the provider's prompt cache and
    `cache_creation_tokens` written to it.
    """

    task_hash: str
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int = 0
    cache_creation_tokens: int = 0
    #: Of `output_tokens`, those spent reasoning (0 when the provider does not say).
    reasoning_tokens: int = 0


@record
class CompactionEvent:
    """The conversation was compacted: a summary now stands for its `summarised` earlier
    messages in what the model is given (the store keeps every one of them)."""

    task_hash: str
    summarised: int
    agent: str = ""


def describe_compaction(summarised: int) -> str:
    """How a compaction reads in every front-end: ``312 earlier messages summarised``."""
    noun = "message" if summarised == 1 else "messages"
    return f"{summarised} earlier {noun} summarised"


@quick_init
@record
class RunEnded:
    """The last event of every run, saying how it ended."""

    task_hash: str
    session_id: str
    outcome: Outcome
    cause: Cause | None = None
    #: What made a failed run fail; on a kept stop, a call its resume cannot run as it was.
    error: str | None = None
    #: The saved question, when the run parked on one.
    question: str | None = None
    #: True when the session's pending task still exists after this run.
    pending_kept: bool = False
    #: The final assistant text, when the run finished.
    text: str | None = None
    #: The id of the saved question, when the run parked on one: an answer names it.
    question_id: str | None = None


Event = (
    TaskStarted
    | TextEvent
    | ReasoningEvent
    | ToolCallDeltaEvent
    | ToolCallEvent
    | ToolResultEvent
    | ToolProgressEvent
    | VerifyEvent
    | UsageEvent
    | CompactionEvent
    | RunEnded
)

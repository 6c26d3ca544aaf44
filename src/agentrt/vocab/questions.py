"""A question's life: its id, its state, why a late answer is refused, and how long it may wait.

Every confirmation and question a run asks, live (the registry's entry) or
saved with its task (`agentrt.store.record.SavedQuestion`), has one id, made
here (`new_question_id`): the frames, the HTTP API and the bots name it, and
a saved question asked again on resume keeps it. It is in one of four states
(`QuestionState`); a `QuestionTrace` says which and since when, and a late
answer (to a question that is no longer the one waiting) is refused with the
words of `late_answer`, never applied to another question.

How long a question waits for its person, and what happens then, is set per
kind of question (`Timeouts`, the ``[timeouts]`` table of the configuration
file): `TimeoutAction.PAUSE` stops the run as a Pause does, `DENY` answers
for the person (a confirmation is denied), `WAIT` (the default) waits for ever.
"""

from __future__ import annotations

import enum
import hashlib
import re
import time
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Final

from .reprs import record
from .terms import Cause
from .terms import RequestKind
from .unique import random_hex

#: How every question id starts.
QUESTION_ID_PREFIX: Final = "q-"
#: How many recent questions a task's record remembers (their ids and states).
RECENT_QUESTIONS: Final = 64


def new_question_id() -> str:
    """A fresh question id: ``q-`` and 12 hex digits, unique across daemons and restarts."""
    return QUESTION_ID_PREFIX + random_hex(6)


def legacy_question_id(call_id: str, prompt: str) -> str:
    """The id of a question saved before questions had ids: the same at every read."""
    digest = hashlib.sha256(f"{call_id}\0{prompt}".encode("utf-8", "replace")).hexdigest()
    return QUESTION_ID_PREFIX + digest[:12]


class QuestionState(enum.Enum):
    """Where a question is in its life."""

    #: Asked and not answered yet (live, or saved with its task).
    WAITING = "waiting"
    #: Answered: a second answer is refused.
    ANSWERED = "answered"
    #: Its run stopped (a pause, a cancel, a closed window), or its call no longer needs it.
    WITHDRAWN = "withdrawn"
    #: Its timeout fired (`Timeouts`) before anyone answered.
    EXPIRED = "expired"


#: Why a question was withdrawn, by the cause that stopped its run (None: no cause known).
WITHDRAWN_BECAUSE: Final[Mapping[Cause | None, str]] = {
    Cause.PAUSE: "its run was paused",
    Cause.USER_CANCEL: "its run was cancelled",
    Cause.DISCONNECT: "the window or connection that ran it went away",
    Cause.SHUTDOWN: "agentrt shut down",
    None: "its run was stopped before the answer arrived",
}


def withdrawn_because(cause: Cause | None) -> str:
    """Why a question whose run stopped for `cause` was withdrawn (`WITHDRAWN_BECAUSE`)."""
    return WITHDRAWN_BECAUSE[cause]


def clock_time(stamp: float, now: float | None = None) -> str:
    """``12:03`` for a time today (local time), ``2024-05-01 12:03`` for another day."""
    when = time.localtime(stamp)
    today = time.localtime(time.time() if now is None else now)
    if when[:3] == today[:3]:
        return time.strftime("%H:%M", when)
    return time.strftime("%Y-%m-%d %H:%M", when)


@record
class QuestionTrace:
    """One question's state and since when: what a late answer to it is told."""

    id: str
    state: QuestionState
    #: When it came to this state (seconds since the epoch).
    at: float
    #: Why it was withdrawn (`withdrawn_because`), when it was.
    reason: str | None = None
    #: How long it waited before it expired, in seconds, when it did.
    waited: float | None = None

    def refusal(self) -> str:
        """Why an answer to this question is refused now (one that is waiting takes it)."""
        if self.state is QuestionState.ANSWERED:
            return f"question {self.id} was answered already at {clock_time(self.at)}"
        if self.state is QuestionState.WITHDRAWN:
            return f"question {self.id} was withdrawn: {self.reason or withdrawn_because(None)}"
        if self.state is QuestionState.EXPIRED:
            waited = format_duration(self.waited) if self.waited is not None else "its timeout"
            return f"question {self.id} expired after {waited}"
        return f"question {self.id} is waiting for its answer"


def noted(traces: Sequence[QuestionTrace], trace: QuestionTrace) -> tuple[QuestionTrace, ...]:
    """`traces` with `trace` as its question's newest state; the last `RECENT_QUESTIONS` kept."""
    kept = [t for t in traces if t.id != trace.id]
    kept.append(trace)
    return tuple(kept[-RECENT_QUESTIONS:])


def trace_of(traces: Sequence[QuestionTrace], question_id: str) -> QuestionTrace | None:
    """The newest state `traces` know of question `question_id`, or None."""
    return next((t for t in reversed(traces) if t.id == question_id), None)


def late_answer(question_id: str, traces: Sequence[QuestionTrace], waiting_for: str | None) -> str:
    """Why an answer naming `question_id` is refused by a task that waits for `waiting_for`.

    The question's own end when the task remembers it (answered, withdrawn,
    expired); otherwise that it is not the one the task waits for, and which
    one is.
    """
    trace = trace_of(traces, question_id)
    if trace is not None and trace.state is not QuestionState.WAITING:
        return trace.refusal()
    waits = (
        f"it waits for {waiting_for}"
        if waiting_for is not None
        else "it waits for no answer; resume it without one"
    )
    return f"question {question_id} is not the question this task waits for: {waits}"


# -- how long a question waits -------------------------------------------------------


class TimeoutAction(enum.Enum):
    """What happens when a question's timeout fires."""

    #: Stop the run with the pause cause: the task is kept with its question saved.
    PAUSE = "pause"
    #: Answer for the person: a confirmation is denied, a question told nobody answered.
    DENY = "deny"
    #: Never time out (the default).
    WAIT = "wait"

    @classmethod
    def parse(cls, text: str) -> TimeoutAction:
        """Read an action from its name; ValueError naming the choices."""
        try:
            return cls(text)
        except ValueError:
            choices = ", ".join(repr(a.value) for a in cls)
            raise ValueError(f"unknown action {text!r}; expected one of: {choices}") from None


@record
class Timeout:
    """How long one kind of question waits (None: for ever), and what happens then."""

    seconds: float | None = None
    action: TimeoutAction = TimeoutAction.WAIT

    @property
    def fires(self) -> bool:
        """Whether it ever fires (a duration and an action other than `WAIT`)."""
        return self.seconds is not None and self.action is not TimeoutAction.WAIT


#: What every kind waits by default: for ever.
NO_TIMEOUT: Final = Timeout()


@record
class Timeouts:
    """The `Timeout` of each kind of question: each field is named as its `RequestKind`."""

    confirm: Timeout = NO_TIMEOUT
    question: Timeout = NO_TIMEOUT
    secret: Timeout = NO_TIMEOUT
    password: Timeout = NO_TIMEOUT

    def of(self, kind: RequestKind) -> Timeout:
        """The timeout of questions of `kind`."""
        found: Timeout = getattr(self, kind.value)
        return found


_UNITS: Final = (("d", 86400), ("h", 3600), ("m", 60), ("s", 1))
_DURATION = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")


def parse_duration(text: str) -> float:
    """Seconds of a duration such as ``"90s"``, ``"30m"``, ``"2h"``, ``"1d"`` or ``"1h30m"``.

    Raises ValueError saying the form for anything else, and for zero.
    """
    found = _DURATION.match(text.strip())
    if found is None or not any(found.groups()):
        raise ValueError(
            f'{text!r} is not a duration; write one such as "90s", "30m", "2h" or "1d"'
        )
    seconds = sum(
        int(part) * size for part, (_, size) in zip(found.groups(), _UNITS, strict=True) if part
    )
    if seconds == 0:
        raise ValueError(f"{text!r} is no time at all; a timeout must be longer than 0s")
    return float(seconds)


def format_duration(seconds: float) -> str:
    """A duration as `parse_duration` reads it: ``1800`` is ``"30m"``, ``5400`` ``"1h30m"``."""
    left = round(seconds)
    if left <= 0:
        return "0s"
    parts = []
    for unit, size in _UNITS:
        count, left = divmod(left, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)

"""What a stop did, call by call (the interrupt ledger), and what a resume will do.

Every stop of a run is an `Interruption`: why it stopped (`StopKind`), when,
and the state (`CallState`) of each call of the round it interrupted. The model
is told it when the task resumes, or when the session gets its next message
(see `agentrt.store.ledger`); a person is shown a `ResumePreview` before a
kept task resumes.
"""

from __future__ import annotations

import enum

from .reprs import record
from .terms import Cause


class StopKind(enum.Enum):
    """Why a run stopped: its `Cause`, or a crash or a failure, which have none."""

    USER_CANCEL = "user_cancel"
    PAUSE = "pause"
    DISCONNECT = "disconnect"
    SHUTDOWN = "shutdown"
    #: The process running the task died (it was found running with no runner).
    CRASH = "crash"
    #: An error ended the run.
    FAILURE = "failure"

    @classmethod
    def of(cls, cause: Cause) -> StopKind:
        """The stop a cancel with `cause` is."""
        return _STOP_OF[cause]

    @property
    def words(self) -> str:
        """How a sentence names it: ``"a pause"``, ``"the user's cancel"``..."""
        return _STOP_WORDS[self]


#: The stop of each cause: a lookup where ``StopKind(cause.value)`` takes the enum's call.
_STOP_OF = {cause: StopKind(cause.value) for cause in Cause}

_STOP_WORDS = {
    StopKind.USER_CANCEL: "the user's cancel",
    StopKind.PAUSE: "a pause",
    StopKind.DISCONNECT: "a disconnect (the window or connection that ran it went away)",
    StopKind.SHUTDOWN: "a shutdown of agentrt",
    StopKind.CRASH: "a crash (the process running it died)",
    StopKind.FAILURE: "an error",
}


class CallState(enum.Enum):
    """Where one call of an interrupted round stood when its run stopped."""

    #: Its result was committed: it is kept and never runs again.
    DONE = "done"
    #: It had not begun: nothing of it happened.
    NOT_STARTED = "not_started"
    #: It was running and was stopped (its process killed): it may have done part of its work.
    STOPPED = "stopped"
    #: It had begun and its result was never committed (the run died): it may have run, wholly
    #: or in part.
    MAY_HAVE_RUN = "may_have_run"
    #: A person said no to it.
    DENIED = "denied"
    #: agentrt refused to run it (outside the sandbox's reach, a value it could not restore...).
    REFUSED = "refused"

    @property
    def words(self) -> str:
        """The state as a ledger line says it."""
        return _STATE_WORDS[self]

    @property
    def began(self) -> bool:
        """Whether the call had begun: running it again is running it a second time."""
        return self in (CallState.STOPPED, CallState.MAY_HAVE_RUN)


_STATE_WORDS = {
    CallState.DONE: "done (its result was saved)",
    CallState.NOT_STARTED: "not started",
    CallState.STOPPED: "stopped while running (its process was killed: it may have done part "
    "of its work)",
    CallState.MAY_HAVE_RUN: "may have run (it started and its result was never saved)",
    CallState.DENIED: "denied by the user",
    CallState.REFUSED: "refused by agentrt",
}


@record
class LedgerCall:
    """One call of an interrupted round and its state."""

    call_id: str
    name: str
    state: CallState
    #: The subagent that made the call (``sub1``, ``sub1/sub2``), "" for the task's own.
    agent: str = ""
    #: How many times it was started with side effects (see `TaskRecord.attempts`).
    attempts: int = 0


@record
class Interruption:
    """One stop of a task's run: the entry the conversation gets for it."""

    stop: StopKind
    #: When it stopped (seconds since the epoch).
    at: float
    calls: tuple[LedgerCall, ...] = ()
    #: Words of a reply the model was streaming, never saved.
    lost_words: int = 0
    #: What failed, for a failure.
    error: str | None = None
    #: Nobody saw it stop (a crash; a fleet member whose lease ran out): `at` is its last
    #: saved step, the latest it can have been.
    unseen: bool = False
    #: How many earlier stops this entry stands for: stops of the same kind that left the
    #: same calls in the same states (a round paused again and again), told as one.
    repeats: int = 0
    #: When the first of those earlier stops was (with `repeats`).
    first_at: float | None = None

    def repeated_by(self, later: Interruption) -> bool:
        """Whether `later` is this stop again: same kind, same calls in the same states, no
        words lost and no error (each of those is told for itself)."""
        return (
            (later.stop, later.unseen) == (self.stop, self.unseen)
            and not (self.lost_words or later.lost_words or self.error or later.error)
            and [(c.call_id, c.name, c.state, c.agent) for c in later.calls]
            == [(c.call_id, c.name, c.state, c.agent) for c in self.calls]
        )


@record
class PreviewCall:
    """A call as a resume preview lists it."""

    call_id: str
    name: str
    state: CallState
    agent: str = ""
    #: Which attempt running it now is (1 for a call never started before).
    attempt: int = 1

    @property
    def may_have_run(self) -> bool:
        """Whether an earlier run began it: running it now may run it a second time."""
        return self.state.began


@record
class ResumePreview:
    """What resuming a kept task will do, shown before a person resumes it."""

    #: Calls whose results are committed: kept, never run again.
    kept: tuple[PreviewCall, ...] = ()
    #: Calls that will run; `PreviewCall.may_have_run` says which had begun already.
    to_run: tuple[PreviewCall, ...] = ()
    #: Calls that cannot run as saved (an argument was shortened): the model issues them again.
    reissue: tuple[PreviewCall, ...] = ()
    #: Questions that will be asked again.
    questions: tuple[str, ...] = ()
    #: Words of an unsaved reply the model will say again.
    regenerated_words: int = 0
    #: Why the task stopped last, if it did.
    stop: StopKind | None = None

    @property
    def rerun(self) -> tuple[PreviewCall, ...]:
        """The calls that will run a second time (an earlier run began them)."""
        return tuple(c for c in self.to_run if c.may_have_run)

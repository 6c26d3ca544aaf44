"""How the end of a run reads to a person: one table for every front-end.

The terminal client, the `agentrt` command, the bots and the web page all say
how a run ended from the same (outcome, cause) table here. Each front-end adds
only what is its own: how to go on there (``/pending``, ``agentrt pending
resume ID``, a button).
"""

from __future__ import annotations

from typing import Protocol

from ..core.cause import Cause
from ..vocab.events import Outcome
from ..vocab.reprs import record


class Ending(Protocol):
    """What a run's last event or frame says: `RunEnded` and the ``ended`` frame alike."""

    @property
    def outcome(self) -> Outcome:
        """How the run ended."""
        ...

    @property
    def cause(self) -> Cause | None:
        """Why it was stopped, for a cancelled run."""
        ...

    @property
    def pending_kept(self) -> bool:
        """Whether the session's pending task is still there to resume."""
        ...

    @property
    def question(self) -> str | None:
        """The saved question of a parked run."""
        ...

    @property
    def error(self) -> str | None:
        """What made a failed run fail; for a kept stop, what its resume will not do."""
        ...


@record
class EndWords:
    """How a run ended, in the words of each kind of front-end.

    `title` heads a notice in a terminal window ("Paused", "Done"); `status` is
    a line of a log or a transcript, and says what became of the pending task
    ("stopped (pause); the task is kept", "finished"); `chat` is a message in a
    chat service ("⏸ Paused."). A front-end adds how to go on there.
    """

    title: str
    status: str
    chat: str


def describe_end(ended: Ending) -> EndWords:
    """The words for how `ended` (a `RunEnded` or an ``ended`` frame) ended."""
    kept = "the task is kept" if ended.pending_kept else "the task was discarded"
    if ended.outcome is Outcome.FINISHED:
        return EndWords("Done", "finished", "Done.")
    if ended.outcome is Outcome.AWAITING_ANSWER:
        q = ended.question or "?"
        return EndWords(f"Waiting for an answer: {q}", f"waiting for your answer: {q}", f"❓ {q}")
    if ended.outcome is Outcome.FAILED:
        e = ended.error or "unknown error"
        return EndWords(f"Failed: {e}", f"failed: {e}; {kept}", f"❌ The task failed: {e}")
    cause = ended.cause.value if ended.cause is not None else "cancelled"
    status = f"stopped ({cause}); {kept}"
    if ended.cause is Cause.USER_CANCEL:
        return EndWords(
            "Stopped; the task was discarded", status, "⏹ Stopped. The task was thrown away."
        )
    # A kept stop's `error` is a warning for the resume (a call that must be issued again).
    note = f": {ended.error}" if ended.error else ""
    if ended.cause is Cause.PAUSE:
        return EndWords(f"Paused{note}", status + note, f"⏸ Paused{note}.")
    return EndWords(f"Stopped ({cause}){note}", status + note, f"⏸ Interrupted ({cause}){note}.")

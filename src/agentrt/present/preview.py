"""How the preview of a resume reads: the lines shown before a kept task resumes.

The `agentrt pending show` command, the terminal's ``/pending`` list, the
bots' ``/pending`` and the web page (through the ``lines`` of the preview's
JSON, `agentrt.present.shapes.preview_json`) all say what a resume will do
with these words::

    resume will keep 3 calls (their results are saved, they do not run again)
    resume will run 2 calls:
      shell call_1_0 (attempt 2: may already have run; stopped while running at the pause)
      read_file call_1_1 (not started)
    the model will have to issue again: write_file call_1_2 (an argument was shortened)
    asked again: "Colour?"
    about 40 words of the reply will be regenerated

A subagent's call is named with its agent path first (``[sub1] shell call_0_0``).
This module reads the vocabulary only, so a client of the daemon (agenttui)
loads nothing more for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from ..vocab.stops import CallState
from ..vocab.stops import PreviewCall
from ..vocab.stops import ResumePreview
from ..vocab.stops import StopKind

#: How many characters of a question asked again a line shows.
QUESTION_CHARS: Final = 200

#: Where a call was stopped, as "stopped while running ..." ends.
_AT: Final = {
    StopKind.USER_CANCEL: "at the cancel",
    StopKind.PAUSE: "at the pause",
    StopKind.DISCONNECT: "at the disconnect",
    StopKind.SHUTDOWN: "at the shutdown",
    StopKind.CRASH: "in the crash",
    StopKind.FAILURE: "at the error",
}


def _count(n: int, one: str) -> str:
    return f"{n} {one}{'' if n == 1 else 's'}"


def call_name(call: PreviewCall) -> str:
    """A call as a preview line names it: ``shell call_1_0``, ``[sub1] shell call_0_0``."""
    who = f"[{call.agent}] " if call.agent else ""
    return f"{who}{call.name} {call.call_id}"


def call_state(call: PreviewCall, stop: StopKind | None) -> str:
    """What a call that will run was left at, in the words of a preview line's parentheses."""
    state = call.state
    if state is CallState.NOT_STARTED:
        said = "not started"
    elif state is CallState.STOPPED:
        said = "stopped while running" + (f" {_AT[stop]}" if stop is not None else "")
    elif state is CallState.MAY_HAVE_RUN:
        said = "its result was never saved"
    else:
        said = state.words
    if call.attempt > 1:
        return f"attempt {call.attempt}: may already have run; {said}"
    if state is CallState.MAY_HAVE_RUN:
        # It recorded no start (its tool records none), so it is the first attempt that counts.
        return f"may already have run; {said}"
    return said


def _question(prompt: str) -> str:
    shown = " ".join(prompt.split())
    if len(shown) > QUESTION_CHARS:
        shown = shown[: QUESTION_CHARS - 3] + "..."
    return shown


def _names(calls: Sequence[PreviewCall]) -> str:
    return ", ".join(call_name(call) for call in calls)


def preview_lines(preview: ResumePreview) -> list[str]:
    """What resuming will do, a line each: kept, run, issued again, asked again, regenerated.

    Never empty: a task with nothing to redo says so.
    """
    lines: list[str] = []
    kept = len(preview.kept)
    if kept == 1:
        lines.append("resume will keep 1 call (its result is saved, it does not run again)")
    elif kept:
        lines.append(
            f"resume will keep {kept} calls (their results are saved, they do not run again)"
        )
    if preview.to_run:
        lines.append(f"resume will run {_count(len(preview.to_run), 'call')}:")
        lines += [f"  {call_name(c)} ({call_state(c, preview.stop)})" for c in preview.to_run]
    if preview.reissue:
        why = (
            "an argument was shortened"
            if len(preview.reissue) == 1
            else ("an argument of each was shortened")
        )
        lines.append(f"the model will have to issue again: {_names(preview.reissue)} ({why})")
    lines += [f'asked again: "{_question(prompt)}"' for prompt in preview.questions]
    words = preview.regenerated_words
    if words:
        lines.append(f"about {_count(words, 'word')} of the reply will be regenerated")
    if not (preview.to_run or preview.reissue or preview.questions or words):
        lines.append("nothing is redone: the model goes on from what was saved")
    return lines

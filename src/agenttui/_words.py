"""What the window says: the commands and popup choices, the help text, and the lines
that describe a pending task or an earlier conversation."""

from __future__ import annotations

import os

from agentrt import Cause
from agentrt import TaskStatus
from agentrt.present.preview import preview_lines
from agentrt.protocol.frames import ModelItem
from agentrt.protocol.frames import PendingTask
from agentrt.protocol.frames import SessionItem
from agentrt.vocab.stops import ResumePreview

#: The `/` commands, with the line the picker shows for each.
COMMANDS: tuple[tuple[str, str], ...] = (
    ("/pending", "list this window's paused and interrupted tasks: resume or discard one"),
    ("/new", "start a new conversation in this window"),
    ("/model", "the configured models: pick the one this conversation uses"),
    ("/sessions", "earlier conversations: pick one to continue it"),
    ("/undo", "put back the files the last run changed"),
    ("/rewind", "list this session's turns; /rewind N goes back to turn N, files and words"),
    ("/compact", "summarise this session's older messages now (the store keeps them all)"),
    ("/help", "keys and commands"),
    ("/quit", "quit (the daemon keeps running; during a run, asks first)"),
)

#: The choices of the cancel popup, in display order, with the cause each stops the run
#: for (None: it keeps running).
POPUP_CAUSES: dict[str, Cause | None] = {
    "Yes": Cause.USER_CANCEL,
    "Undo": Cause.USER_CANCEL,
    "Pause": Cause.PAUSE,
    "No": None,
}
POPUP_CHOICES: tuple[str, ...] = tuple(POPUP_CAUSES)
#: The choices that also put back the files the run changed, once it has stopped.
POPUP_UNDOES: frozenset[str] = frozenset({"Undo"})
#: The choice the popup opens on: stopping without losing anything.
POPUP_DEFAULT = POPUP_CHOICES.index("Pause")


def files_text(count: int | None) -> str:
    """What the stop popup's Undo puts back: ``"the 3 files it changed"``."""
    if not count:
        return "its files (none so far)"
    return f"the {count} file{'' if count == 1 else 's'} it changed"


#: The choices of the popup `/quit` opens during a run, in display order, with the cause
#: each stops the run for before quitting (None: neither stop nor quit).
QUIT_CAUSES: dict[str, Cause | None] = {
    "Pause and quit": Cause.PAUSE,
    "Stop and quit": Cause.USER_CANCEL,
    "Cancel": None,
}
QUIT_CHOICES: tuple[str, ...] = tuple(QUIT_CAUSES)
#: The choice it opens on: quitting without losing anything.
QUIT_DEFAULT = 0

#: What the window says while a cancel of each cause a window sends is on its way.
STOPPING_WORDS: dict[Cause, str] = {Cause.PAUSE: "Pausing", Cause.USER_CANCEL: "Stopping"}

#: How the confirmation choices of the daemon are shown.
CHOICE_LABELS: dict[str, str] = {
    "allow": "Allow once",
    "allow_session": "Allow for this session",
    "deny": "Deny",
}

#: The most transcript entries kept; older ones scroll away for good.

HELP_TEXT = """\
Keys
  Enter              send the message; answer the question; pick in a list or popup
  Alt+Enter, Ctrl+J  start a new line in the message
  Up / Down          earlier messages (kept across restarts); move in a list or picker
  Ctrl+R             search earlier messages: type, Ctrl+R again for older, Enter takes it
  Left / Right       move between the choices of a confirmation or a popup
  Tab                complete the highlighted / command, or the file after @
  PageUp / PageDown  scroll the transcript back and forth (so does the mouse wheel);
                     new output does not move it, and back at the end it follows again
  Esc                close the / picker, then the notice, then stop the run (at once if
                     nothing of it was shown yet, else ask: Yes / Pause / No), then
                     clear the input; Esc once more brings the cleared text back
  Ctrl+_             bring back the text Esc cleared (otherwise: undo)
  Ctrl+C             stop the run and discard its task (once it changed files, asks
                     first: Yes keeps the files as they are, Undo puts them back);
                     with no run, twice quits
  Ctrl+D             quit (on an empty input)
  1 2 3              pick a confirmation choice
  y / u / p / n      Yes / Undo / Pause / No in the stop popup
  p / s / c          Pause and quit / Stop and quit / Cancel in the quit popup
  d, Delete          discard the highlighted task in the /pending list
Commands
  /pending           this window's paused and interrupted tasks, with their age and
                     why they stopped, and under them what resuming the highlighted
                     one will do: Enter resumes it here, d discards it
  /new               start a new conversation: an empty transcript, a new session
  /model [NAME]      the configured models, this conversation's highlighted: Enter
                     switches to one (from the next message on); /model NAME at once
  @path              in a message: attach that file (its text goes to the model with
                     the message, at most 256 KiB; the transcript shows its name)
  /sessions          earlier conversations (yesterday's too): Enter continues one here,
                     its last messages shown; the next message goes there with its history
  /undo              put back the files the last run changed (write_file, edit_file,
                     shell), as they were before it; a file changed since is listed
                     and left alone: /undo force puts it back, its newer text kept beside
  /rewind            this session's turns, with how many files going back to each
                     puts back; /rewind N goes back to turn N: the files the later
                     turns changed, and what was said after it (/rewind N force, too)
  /compact           summarise this session's older messages now (the store keeps them);
                     a run does it by itself before the model's context window fills
  /help              this text
  /quit              quit; during a run, asks: Pause and quit / Stop and quit / Cancel
The daemon keeps running after you quit. If it goes away, the window says so in
the status line and reconnects, starting a daemon if none answers; nothing typed
is lost, and an interrupted run's task waits in /pending."""


def short_path(path: str, home: str | None = None) -> str:
    """`path` with the home folder written ``~``."""
    home = os.path.expanduser("~") if home is None else home
    if home and home != "/" and (path == home or path.startswith(home + "/")):
        return "~" + path[len(home) :]
    return path


def age_text(seconds: float) -> str:
    """How long ago, in words a person reads at a glance: ``"12 s ago"``, ``"3 h ago"``."""
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{int(seconds)} s ago"
    if seconds < 3600:
        return f"{int(seconds // 60)} min ago"
    if seconds < 86400:
        return f"{int(seconds // 3600)} h ago"
    days = int(seconds // 86400)
    return f"{days} day{'s' if days != 1 else ''} ago"


_CAUSE_WORDS: dict[Cause, str] = {
    Cause.PAUSE: "paused",
    Cause.DISCONNECT: "window closed",
    Cause.SHUTDOWN: "daemon stopped",
    Cause.USER_CANCEL: "cancelled",
}


def pending_reason(task: PendingTask) -> str:
    """Why a listed task stopped, in words."""
    if task.status == TaskStatus.AWAITING_ANSWER.value:
        return "waiting for an answer"
    if task.status == TaskStatus.FAILED.value:
        return "failed"
    if task.cause is not None:
        return _CAUSE_WORDS.get(task.cause, task.cause.value)
    if task.status == TaskStatus.RUNNING.value:
        # Listed as running although nothing runs it: the process running it died.
        return "daemon died"
    return task.status


def pending_line(task: PendingTask, wall_now: float) -> str:
    """One task of the `/pending` list: session, why it stopped and when, and what it is."""
    what = f"asks: {task.question}" if task.question else task.input
    what = " ".join(what.split())
    if len(what) > 60:
        what = what[:59] + "…"
    when = age_text(wall_now - task.updated_at)
    return f"{task.session}  {pending_reason(task)}, {when}: {what}"


#: What the `/pending` list shows under its tasks while the selected one's preview is asked for.
PREVIEW_ASKED = "If resumed: (asking the daemon what a resume would do...)"


def preview_text(preview: ResumePreview) -> str:
    """What resuming the selected task of the `/pending` list will do, under the list."""
    return "\n".join(["If resumed:", *(f"  {line}" for line in preview_lines(preview))])


def size_text(size: int) -> str:
    """A file's size as a person reads it: ``812 bytes``, ``3.4 KiB``."""
    if size < 1024:
        return f"{size} byte{'' if size == 1 else 's'}"
    return f"{size / 1024:.1f} KiB"


def model_line(item: ModelItem, current: str) -> str:
    """One model of the `/model` picker: its name, whether it is the default or in use, or
    why it cannot be used."""
    marks = [m for m, on in (("in use", item.name == current), ("default", item.default)) if on]
    line = item.name + (f"  ({', '.join(marks)})" if marks else "")
    return line if item.usable else f"{line}  cannot be used: {item.why}"


def session_line(item: SessionItem, wall_now: float) -> str:
    """One conversation of the `/sessions` picker: its title, when, how long, and its id."""
    title = " ".join(item.title.split()) or "(no title)"
    if len(title) > 60:
        title = title[:59] + "…"
    count = f"{item.messages} message{'' if item.messages == 1 else 's'}"
    pending = f", {item.status.replace('_', ' ')}: Enter resumes it" if item.status else ""
    return f"{title}  ({age_text(wall_now - item.updated_at)}, {count}{pending})  {item.session}"

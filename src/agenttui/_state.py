"""The terminal client's state and the transitions that change it.

Everything the window knows lives in one `TuiState`: the link to the daemon,
the run in progress, the transcript and how far it is scrolled back, the notice
box, the `/` picker, the popups, the question being answered, the `/pending`
list and the `/sessions` picker. Key presses and daemon frames are handled by the transition functions of
this module. They do no I/O and read no clock of their
own (the time is passed in): each one updates the state and returns the
`Action` values the shell must carry out (send a frame, set the input text,
quit). Widgets only render the state, so the whole behaviour, the Esc cascade
included, is tested here by feeding keys and frames, without a terminal.
"""

from __future__ import annotations

import bisect
import enum
import os
from collections.abc import Callable
from typing import Any

import attrs

from agentrt import (
    ALLOW_ONCE,
    DENY,
    Cause,
    Outcome,
    RequestKind,
    describe_end,
    describe_resume,
    may_have_run,
)
from agentrt.frames import (
    Ack,
    AnswerFrame,
    AskFrame,
    AskWithdrawn,
    Cancel,
    ClientFrame,
    DaemonFrame,
    EndedFrame,
    ErrorFrame,
    PendingAction,
    PendingList,
    PendingRequest,
    PendingTask,
    ReasoningFrame,
    Run,
    SessionItem,
    SessionList,
    SessionMessage,
    SessionMessages,
    SessionsAction,
    SessionsRequest,
    TaskFrame,
    TextFrame,
    ToolCallDeltaFrame,
    ToolCallFrame,
    ToolResultFrame,
    UsageFrame,
    VerifyFrame,
    Welcome,
)

#: The `/` commands, with the line the picker shows for each.
COMMANDS: tuple[tuple[str, str], ...] = (
    ("/pending", "list this window's paused and interrupted tasks: resume or discard one"),
    ("/new", "start a new session"),
    ("/sessions", "earlier conversations: pick one to continue it"),
    ("/help", "keys and commands"),
    ("/quit", "quit (the daemon keeps running; during a run, asks first)"),
)

#: The choices of the cancel popup, in display order.
POPUP_CHOICES: tuple[str, ...] = ("Yes", "Pause", "No")
#: The choice the popup opens on: stopping without losing anything.
POPUP_DEFAULT = 1

#: The choices of the popup `/quit` opens during a run, in display order.
QUIT_CHOICES: tuple[str, ...] = ("Pause and quit", "Stop and quit", "Cancel")
#: The choice it opens on: quitting without losing anything.
QUIT_DEFAULT = 0

#: How the confirmation choices of the daemon are shown.
CHOICE_LABELS: dict[str, str] = {
    "allow": "Allow once",
    "allow_session": "Allow for this session",
    "deny": "Deny",
}

#: The most transcript entries kept; older ones scroll away for good.
TRANSCRIPT_LIMIT = 2000

#: Lines one step of the mouse wheel scrolls the transcript.
WHEEL_LINES = 3

#: Sessions asked for per page by `/sessions`, and the most its picker shows.
SESSIONS_PAGE = 100
SESSIONS_SHOWN = 100
#: The last messages of a conversation shown when `/sessions` continues it.
HISTORY_SHOWN = 20

HELP_TEXT = """\
Keys
  Enter              send the message; answer the question; pick in a list or popup
  Alt+Enter, Ctrl+J  start a new line in the message
  Up / Down          earlier messages (kept across restarts); move in a list or picker
  Ctrl+R             search earlier messages: type, Ctrl+R again for older, Enter takes it
  Left / Right       move between the choices of a confirmation or a popup
  Tab                complete the highlighted / command
  PageUp / PageDown  scroll the transcript back and forth (so does the mouse wheel);
                     new output does not move it, and back at the end it follows again
  Esc                close the / picker, then the notice, then stop the run (at once if
                     nothing of it was shown yet, else ask: Yes / Pause / No), then
                     clear the input; Esc once more brings the cleared text back
  Ctrl+_             bring back the text Esc cleared (otherwise: undo)
  Ctrl+C             stop the run and discard its task; with no run, twice quits
  Ctrl+D             quit (on an empty input)
  1 2 3              pick a confirmation choice
  y / p / n          Yes / Pause / No in the stop popup
  p / s / c          Pause and quit / Stop and quit / Cancel in the quit popup
  d, Delete          discard the highlighted task in the /pending list
Commands
  /pending           this window's paused and interrupted tasks, with their age and
                     why they stopped: Enter resumes one here, d discards it
  /new               start a new session with the next message
  /sessions          earlier conversations (yesterday's too): Enter continues one here,
                     its last messages shown; the next message goes there with its history
  /help              this text
  /quit              quit; during a run, asks: Pause and quit / Stop and quit / Cancel
The daemon keeps running after you quit. If it goes away, the window says so in
the status line and reconnects, starting a daemon if none answers; nothing typed
is lost, and an interrupted run's task waits in /pending."""


class NoticeLevel(enum.Enum):
    """How a notice is shown."""

    INFO = "info"
    ERROR = "error"


class RunPhase(enum.Enum):
    """Where the run of this window is."""

    #: The `run` (or resume) was sent; no task hash yet.
    STARTING = "starting"
    #: The task hash is known; output streams in.
    RUNNING = "running"
    #: A cancel was sent; waiting for the run's `ended`.
    STOPPING = "stopping"


class EntryKind(enum.Enum):
    """What a transcript entry is."""

    USER = "user"
    ASSISTANT = "assistant"
    #: The model's streamed reasoning ("thinking"), shown dimmed.
    REASONING = "reasoning"
    TOOL_CALL = "tool_call"
    TOOL_RESULT = "tool_result"
    INFO = "info"
    ERROR = "error"
    #: The `/help` text.
    HELP = "help"


# -- values ------------------------------------------------------------------------------


@attrs.frozen
class Notice:
    """The notice box: an error or a piece of information the user can close with Esc."""

    text: str
    level: NoticeLevel = NoticeLevel.INFO


def is_masked(ask: AskFrame) -> bool:
    """True when the answer to `ask` is typed into a masked field."""
    return ask.masked or ask.kind in (RequestKind.SECRET, RequestKind.PASSWORD)


def has_choices(ask: AskFrame) -> bool:
    """True when the answer to `ask` is picked from its choices rather than typed."""
    return ask.kind is RequestKind.CONFIRM and bool(ask.choices)


# -- actions -----------------------------------------------------------------------------


@attrs.frozen
class Send:
    """Send a frame to the daemon."""

    frame: ClientFrame


@attrs.frozen
class SetInput:
    """Replace the text of the input box."""

    text: str


@attrs.frozen
class RememberInput:
    """Add a sent message to the input history (never an answer: answers may be secret)."""

    text: str


@attrs.frozen
class Quit:
    """Leave the application; the connection closes and the daemon keeps the pending task."""


Action = Send | SetInput | RememberInput | Quit


# -- the state ---------------------------------------------------------------------------


@attrs.define
class TranscriptEntry:
    """One block of the transcript; streamed assistant text grows its `parts`."""

    kind: EntryKind
    parts: list[str]
    task: str | None = None
    #: The subagent that wrote it ("" for the main agent).
    agent: str = ""
    #: Its number in the window, counting from 0: never reused, so it names the entry.
    serial: int = 0

    @property
    def text(self) -> str:
        """The entry's whole text."""
        return "".join(self.parts)


@attrs.define
class RunState:
    """The run this window started and has not seen end."""

    started_at: float
    session: str | None
    task: str | None = None
    phase: RunPhase = RunPhase.STARTING
    #: True once anything of this run was shown (text, a tool call, a question).
    shown: bool = False
    #: A cancel asked for before the task hash arrived: its `pause` flag.
    held_cancel: bool | None = None
    #: The `pause` flag of the cancel that was sent, if any.
    sent_cancel: bool | None = None
    resumed: bool = False
    #: The message that started the run (None for a resume).
    text: str | None = None

    @property
    def stopping(self) -> bool:
        """True once a cancel was sent or is held for the task hash."""
        return self.sent_cancel is not None or self.held_cancel is not None


@attrs.frozen
class Anchor:
    """A line of the transcript: line `line` of the entry numbered `serial`."""

    serial: int
    line: int


@attrs.frozen
class EndedPopup:
    """What a popup turns into when its run ends before a choice was made."""

    text: str
    #: True when it was the quit popup: Enter then quits.
    quitting: bool = False


@attrs.define
class TuiState:
    """Everything the window knows. Transition functions change it; widgets render it."""

    window: str = ""
    #: The folder the window was opened in: its runs' tools work there.
    cwd: str = ""
    connected: bool = False
    #: Why the connection is down, once it went down (None while connecting).
    link_error: str | None = None
    #: True once the daemon answered a hello: losing it later means reconnecting.
    was_connected: bool = False
    #: True while a daemon is being started for this window.
    starting_daemon: bool = False
    #: When the next connection attempt is due (the clock of `now`), while waiting for it.
    retry_at: float | None = None
    #: The session the next message continues; None starts a new one.
    session: str | None = None
    run: RunState | None = None
    transcript: list[TranscriptEntry] = attrs.field(factory=list)
    #: The serial the next transcript entry gets.
    next_serial: int = 0
    #: The first line shown while reading back; None follows the end of the transcript.
    scroll: Anchor | None = None
    notice: Notice | None = None
    #: The text of the input box, mirrored here by `input_changed`.
    input: str = ""
    #: What the last Esc cleared from the input box, until something else is typed.
    cleared_input: str | None = None
    #: The input text the `/` picker was closed for (it reopens when the text changes).
    picker_dismissed: str | None = None
    picker_index: int = 0
    #: The cancel popup's highlighted choice, or None when it is closed.
    popup: int | None = None
    #: The quit popup's highlighted choice, or None when it is closed.
    quit_popup: int | None = None
    #: A popup whose run ended before a choice was made, saying so.
    ended_popup: EndedPopup | None = None
    #: True once the user chose to quit when the run ends.
    quit_after_run: bool = False
    #: Questions waiting, the one on screen first.
    asks: list[AskFrame] = attrs.field(factory=list)
    choice_index: int = 0
    #: What the user had typed when a question took over the input box.
    draft: str | None = None
    #: The `/pending` list when open.
    pending: list[PendingTask] | None = None
    pending_index: int = 0
    #: The pages of a `/pending` list received so far, while more are on their way.
    pending_pages: list[PendingTask] = attrs.field(factory=list)
    #: True while a `pending list` asked for after reconnecting is on its way: it is
    #: summed up in the notice box instead of opening the list.
    quiet_pending: bool = False
    #: The `/sessions` picker when open: this window's user's earlier conversations.
    sessions: list[SessionItem] | None = None
    sessions_index: int = 0
    #: The pages of a `/sessions` list received so far, while more are on their way.
    sessions_pages: list[SessionItem] = attrs.field(factory=list)
    #: The session whose last messages were asked for, to be shown when they come.
    history_for: str | None = None
    #: True after a first Ctrl+C with no run: a second one quits.
    quit_armed: bool = False
    input_tokens: int = 0
    output_tokens: int = 0
    #: Of the input tokens, those read from the provider's prompt cache.
    cached_tokens: int = 0

    @property
    def ask(self) -> AskFrame | None:
        """The question on screen."""
        return self.asks[0] if self.asks else None

    @property
    def picker_items(self) -> list[tuple[str, str]]:
        """The `/` commands matching the input."""
        text = self.input
        if not text.startswith("/") or any(c.isspace() for c in text):
            return []
        return [(name, about) for name, about in COMMANDS if name.startswith(text)]

    @property
    def picker_open(self) -> bool:
        """True when the `/` command picker is showing."""
        return (
            self.ask is None
            and not self.list_open
            and not self.any_popup_open
            and self.picker_dismissed != self.input
            and bool(self.picker_items)
        )

    @property
    def popup_open(self) -> bool:
        """True when the cancel popup is showing."""
        return self.popup is not None

    @property
    def quit_popup_open(self) -> bool:
        """True when the popup of `/quit` during a run is showing."""
        return self.quit_popup is not None

    @property
    def ended_popup_open(self) -> bool:
        """True when a popup is showing that its run ended."""
        return self.ended_popup is not None

    @property
    def any_popup_open(self) -> bool:
        """True when any popup is showing."""
        return self.popup_open or self.quit_popup_open or self.ended_popup_open

    @property
    def pending_open(self) -> bool:
        """True when the `/pending` list is showing."""
        return self.pending is not None

    @property
    def sessions_open(self) -> bool:
        """True when the `/sessions` picker is showing."""
        return self.sessions is not None

    @property
    def list_open(self) -> bool:
        """True when a list over the input box (`/pending`, `/sessions`) has the keys."""
        return self.pending_open or self.sessions_open

    @property
    def choosing(self) -> bool:
        """True when a confirmation's choices take the keys (no popup or list above them)."""
        ask = self.ask
        return (
            ask is not None and has_choices(ask) and not self.any_popup_open and not self.list_open
        )

    @property
    def masked(self) -> bool:
        """True when the input box is a masked field."""
        ask = self.ask
        return ask is not None and is_masked(ask)

    @property
    def input_locked(self) -> bool:
        """True when typing must not change the input box (a list or choices have the keys)."""
        return self.any_popup_open or self.list_open or self.choosing

    @property
    def can_restore_input(self) -> bool:
        """True when Esc or Ctrl+_ would bring back the text the last Esc cleared."""
        return (
            self.cleared_input is not None
            and not self.input
            and self.ask is None
            and not self.input_locked
        )

    @property
    def running(self) -> bool:
        """True while this window has a run in progress."""
        return self.run is not None


# -- helpers -----------------------------------------------------------------------------


def _info(state: TuiState, text: str) -> None:
    state.notice = Notice(text, NoticeLevel.INFO)


def _error(state: TuiState, text: str) -> None:
    state.notice = Notice(text, NoticeLevel.ERROR)


def _add(state: TuiState, kind: EntryKind, text: str, task: str | None = None) -> None:
    state.transcript.append(TranscriptEntry(kind, [text], task, serial=state.next_serial))
    state.next_serial += 1
    if len(state.transcript) > TRANSCRIPT_LIMIT:
        del state.transcript[: len(state.transcript) - TRANSCRIPT_LIMIT]


def _mark_shown(state: TuiState) -> None:
    if state.run is not None:
        state.run.shown = True


def _push_ask(state: TuiState, ask: AskFrame) -> list[Action]:
    """Queue a question; when it is the first, it takes over the input box."""
    state.asks.append(ask)
    if len(state.asks) > 1:
        return []
    state.choice_index = 0
    state.quit_armed = False
    if state.draft is None:
        state.draft = state.input
    if state.input:
        state.input = ""
        return [SetInput("")]
    return []


def _pop_ask(state: TuiState, index: int = 0) -> list[Action]:
    """Remove a question; the next one takes over, or the saved draft comes back."""
    del state.asks[index]
    if index != 0:
        return []
    state.choice_index = 0
    if state.asks:
        state.input = ""
        return [SetInput("")]
    draft, state.draft = state.draft or "", None
    state.input = draft
    return [SetInput(draft)]


def _request_cancel(state: TuiState, *, pause: bool) -> list[Action]:
    """Stop the run: at once when its task hash is known, else once it arrives."""
    run = state.run
    state.popup = None
    state.quit_popup = None
    if run is None or run.stopping:
        return []
    what = "Pausing" if pause else "Stopping"
    if run.task is None:
        run.held_cancel = pause
        _info(state, f"{what} the run as soon as it starts...")
        return []
    run.sent_cancel = pause
    run.phase = RunPhase.STOPPING
    _info(state, f"{what} the run...")
    return [Send(Cancel(run.task, pause))]


# -- keys --------------------------------------------------------------------------------


class EscapeStep(enum.Enum):
    """What Esc does outside a popup, in the order the cascade tries them."""

    CLOSE_PICKER = "close_picker"
    CLOSE_NOTICE = "close_notice"
    CANCEL_RUN = "cancel_run"
    OPEN_POPUP = "open_popup"
    CLEAR_INPUT = "clear_input"
    RESTORE_INPUT = "restore_input"


def escape_step(state: TuiState) -> EscapeStep:
    """The step of the Esc cascade that applies now (outside any popup or list)."""
    if state.picker_open:
        return EscapeStep.CLOSE_PICKER
    if state.notice is not None:
        return EscapeStep.CLOSE_NOTICE
    run = state.run
    if run is not None and not run.stopping:
        # A resumed task has work to lose even before it shows anything: always ask.
        return EscapeStep.OPEN_POPUP if run.shown or run.resumed else EscapeStep.CANCEL_RUN
    if state.can_restore_input:
        return EscapeStep.RESTORE_INPUT
    return EscapeStep.CLEAR_INPUT


def press_escape(state: TuiState) -> list[Action]:
    """Esc: close a popup or the `/pending` list if open, else take one step of the cascade."""
    if state.ended_popup is not None:
        state.ended_popup = None
        return []
    if state.quit_popup is not None:
        state.quit_popup = None
        return []
    if state.popup_open:
        state.popup = None
        return []
    if state.pending_open:
        state.pending = None
        return []
    if state.sessions_open:
        state.sessions = None
        return []
    step = escape_step(state)
    if step is EscapeStep.CLOSE_PICKER:
        state.picker_dismissed = state.input
        return []
    if step is EscapeStep.CLOSE_NOTICE:
        state.notice = None
        state.quit_armed = False
        return []
    if step is EscapeStep.CANCEL_RUN:
        # Nothing was shown, so nothing is lost: a plain user-cancel.
        return _request_cancel(state, pause=False)
    if step is EscapeStep.OPEN_POPUP:
        state.popup = POPUP_DEFAULT
        return []
    if step is EscapeStep.RESTORE_INPUT:
        return restore_input(state)
    if state.input:
        # A masked field's value is not kept: it would come back unmasked.
        state.cleared_input = None if state.masked else state.input
        state.input = ""
        return [SetInput("")]
    return []


def restore_input(state: TuiState) -> list[Action]:
    """Esc again or Ctrl+_: bring back the text the last Esc cleared."""
    if not state.can_restore_input or state.cleared_input is None:
        return []
    text, state.cleared_input = state.cleared_input, None
    state.input = text
    return [SetInput(text)]


def choose_popup(state: TuiState, choice: str) -> list[Action]:
    """A popup choice: ``"Yes"`` user-cancels, ``"Pause"`` pauses, ``"No"`` keeps running."""
    if choice not in POPUP_CHOICES:
        raise ValueError(f"unknown popup choice {choice!r}; expected one of {POPUP_CHOICES}")
    state.popup = None
    if choice == "No":
        return []
    return _request_cancel(state, pause=choice == "Pause")


def choose_quit(state: TuiState, choice: str) -> list[Action]:
    """A choice of the quit popup: stop the run (pausing or discarding it), then quit."""
    if choice not in QUIT_CHOICES:
        raise ValueError(f"unknown quit choice {choice!r}; expected one of {QUIT_CHOICES}")
    state.quit_popup = None
    if choice == "Cancel":
        return []
    run = state.run
    if run is None:
        return [Quit()]
    # Quitting at once would only disconnect; the window stays until the run has ended.
    state.quit_after_run = True
    if run.stopping:
        return []
    pause = choice == "Pause and quit"
    actions = _request_cancel(state, pause=pause)
    _info(state, f"{'Pausing' if pause else 'Stopping'} the run, then quitting...")
    return actions


def press_ctrl_c(state: TuiState) -> list[Action]:
    """Ctrl+C: user-cancel the run; with no run, arm (then confirm) quitting."""
    state.ended_popup = None
    if state.run is not None:
        if state.run.stopping:
            state.popup = None
            state.quit_popup = None
            _info(state, "Already stopping; Ctrl+D quits")
            return []
        state.pending = None
        state.sessions = None
        return _request_cancel(state, pause=False)
    if state.quit_armed:
        return [Quit()]
    state.quit_armed = True
    state.popup = None
    state.quit_popup = None
    state.pending = None
    state.sessions = None
    _info(state, "Press Ctrl+C again to quit (or Ctrl+D, or /quit)")
    return []


def press_ctrl_d(state: TuiState) -> list[Action]:
    """Ctrl+D on an empty input quits."""
    if state.input:
        return []
    return [Quit()]


def _move(index: int, delta: int, size: int) -> int:
    return (index + delta) % size if size else 0


def press_up(state: TuiState) -> bool:
    """Up in a list (popup, `/pending`, picker, choices): move; False means 'history'."""
    return _move_selection(state, -1)


def press_down(state: TuiState) -> bool:
    """Down in a list: move; False means the input box's history handles it."""
    return _move_selection(state, +1)


def press_left(state: TuiState) -> bool:
    """Left among choices laid out left to right (a popup, a confirmation): move."""
    return _move_sideways(state, -1)


def press_right(state: TuiState) -> bool:
    """Right among choices laid out left to right: move; False means the cursor moves."""
    return _move_sideways(state, +1)


def _move_sideways(state: TuiState, delta: int) -> bool:
    if state.popup is not None:
        state.popup = _move(state.popup, delta, len(POPUP_CHOICES))
    elif state.quit_popup is not None:
        state.quit_popup = _move(state.quit_popup, delta, len(QUIT_CHOICES))
    elif state.choosing and state.ask is not None:
        state.choice_index = _move(state.choice_index, delta, len(state.ask.choices))
    else:
        return False
    return True


def _move_selection(state: TuiState, delta: int) -> bool:
    if state.popup is not None or state.quit_popup is not None:
        return _move_sideways(state, delta)
    if state.pending is not None:
        state.pending_index = _move(state.pending_index, delta, len(state.pending))
    elif state.sessions is not None:
        state.sessions_index = _move(state.sessions_index, delta, len(state.sessions))
    elif state.picker_open:
        state.picker_index = _move(state.picker_index, delta, len(state.picker_items))
    elif state.choosing and state.ask is not None:
        state.choice_index = _move(state.choice_index, delta, len(state.ask.choices))
    else:
        return False
    return True


def press_tab(state: TuiState) -> list[Action]:
    """Tab: complete the highlighted `/` command into the input box."""
    if not state.picker_open:
        return []
    name = _picked(state)
    state.input = name
    state.picker_dismissed = name
    return [SetInput(name)]


def _picked(state: TuiState) -> str:
    items = state.picker_items
    return items[min(state.picker_index, len(items) - 1)][0]


def press_hotkey(state: TuiState, key: str) -> list[Action]:
    """A key that acts in a popup, list or choice (``y``/``p``/``n``, ``d``, ``1``...)."""
    if state.quit_popup is not None:
        for choice in QUIT_CHOICES:
            if choice[0].lower() == key.lower():
                return choose_quit(state, choice)
        return []
    if state.popup is not None:
        for choice in POPUP_CHOICES:
            if choice[0].lower() == key.lower():
                return choose_popup(state, choice)
        return []
    if state.pending is not None:
        if key.lower() == "d" and state.pending:
            return discard_pending(state, state.pending_index)
        return []
    ask = state.ask
    if state.choosing and ask is not None and key.isdigit():
        index = int(key) - 1
        if 0 <= index < len(ask.choices):
            state.choice_index = index
            return _answer(state, ask.choices[index], None)
    return []


def input_changed(state: TuiState, text: str) -> list[Action]:
    """The input box's text changed (typing, history, or a `SetInput`)."""
    if text != state.input:
        state.input = text
        state.picker_index = 0
        # Any change of the text makes a closed picker eligible again: typing `/` anew
        # after Esc closed it must reopen it.
        state.picker_dismissed = None
        if text:
            state.cleared_input = None
    return []


def press_enter(state: TuiState, now: float) -> list[Action]:
    """Enter: choose in a popup or list, answer the question, run a command or send a message."""
    if state.ended_popup is not None:
        quitting = state.ended_popup.quitting
        state.ended_popup = None
        return [Quit()] if quitting else []
    if state.quit_popup is not None:
        return choose_quit(state, QUIT_CHOICES[state.quit_popup])
    if state.popup is not None:
        return choose_popup(state, POPUP_CHOICES[state.popup])
    if state.pending is not None:
        if not state.pending:
            state.pending = None
            return []
        return resume_pending(state, state.pending_index, now)
    if state.sessions is not None:
        if not state.sessions:
            state.sessions = None
            return []
        return continue_session(state, state.sessions_index, now)
    if state.picker_open:
        name = _picked(state)
        state.input = ""
        return [SetInput(""), *run_command(state, name)]
    ask = state.ask
    if ask is not None:
        return _enter_answer(state, ask)
    text = state.input.strip()
    if not text:
        return []
    if text.startswith("/"):
        state.input = ""
        return [SetInput(""), *run_command(state, text)]
    if not state.connected:
        # The message stays in the input box: nothing typed is lost while the link is down.
        _error(state, "Not connected to the daemon: your message stays here until it is")
        return []
    if state.run is not None:
        _info(state, "A run is in progress: wait for it, or press Esc to stop it")
        return []
    state.input = ""
    state.quit_armed = False
    state.notice = None
    state.scroll = None
    _add(state, EntryKind.USER, text)
    state.run = RunState(started_at=now, session=state.session, text=text)
    return [SetInput(""), RememberInput(text), Send(Run(text, state.session, state.cwd or None))]


def _enter_answer(state: TuiState, ask: AskFrame) -> list[Action]:
    if has_choices(ask):
        return _answer(state, ask.choices[state.choice_index], None)
    typed = state.input
    if ask.kind is RequestKind.PASSWORD:
        # An empty password field denies; the password itself only travels as `secret`.
        if typed:
            return _answer(state, ALLOW_ONCE, typed)
        return _answer(state, DENY, None)
    if is_masked(ask):
        return _answer(state, "", typed)
    return _answer(state, typed, None)


def _answer(state: TuiState, value: str, secret: str | None) -> list[Action]:
    ask = state.ask
    assert ask is not None
    shown = "(hidden)" if secret is not None else CHOICE_LABELS.get(value, value)
    _add(state, EntryKind.INFO, f"{ask.prompt} -> {shown}", ask.task)
    state.notice = None
    return [Send(AnswerFrame(ask.id, value, secret)), *_pop_ask(state)]


def run_command(state: TuiState, text: str) -> list[Action]:
    """A `/` command typed or picked."""
    name = text.split()[0]
    if name == "/quit":
        if state.run is None:
            return [Quit()]
        state.quit_popup = QUIT_DEFAULT
        return []
    if name == "/help":
        _add(state, EntryKind.HELP, HELP_TEXT)
        # Read from its first line; the view follows the end again once that is in sight.
        state.scroll = Anchor(state.transcript[-1].serial, 0)
        return []
    if name == "/new":
        state.session = None
        _info(state, "New session: the next message starts it")
        return []
    if name == "/pending":
        if not state.connected:
            _error(state, "Not connected to the daemon: /pending works once it is")
            return []
        state.notice = None
        return [Send(PendingRequest(PendingAction.LIST))]
    if name == "/sessions":
        if not state.connected:
            _error(state, "Not connected to the daemon: /sessions works once it is")
            return []
        state.notice = None
        state.sessions_pages = []
        return [Send(SessionsRequest(SessionsAction.LIST, limit=SESSIONS_PAGE))]
    _error(state, f"Unknown command {name}; type / to see the commands")
    return []


def resume_pending(state: TuiState, index: int, now: float) -> list[Action]:
    """Resume a task from the `/pending` list; the daemon asks its saved question inline."""
    assert state.pending is not None
    task = state.pending[index]
    state.pending = None
    return _resume(state, task.session, task.input, now)


def _resume(state: TuiState, session: str, what: str, now: float) -> list[Action]:
    if state.run is not None:
        _error(state, "A run is in progress: stop it or wait before resuming another task")
        return []
    state.session = session
    state.notice = None
    state.scroll = None
    state.run = RunState(started_at=now, session=session, resumed=True)
    _add(state, EntryKind.INFO, f"Resuming {session}: {what}")
    return [Send(PendingRequest(PendingAction.RESUME, session))]


def continue_session(state: TuiState, index: int, now: float) -> list[Action]:
    """Continue a conversation from the `/sessions` picker.

    Its last messages are asked for and shown, and the next message goes to
    that session, whose whole history the model is given. A session with a
    pending task is resumed instead, as `/pending` would.
    """
    assert state.sessions is not None
    item = state.sessions[index]
    state.sessions = None
    if item.status is not None:
        return _resume(state, item.session, item.title, now)
    if state.run is not None:
        _error(state, "A run is in progress: wait for it, or stop it, before switching")
        return []
    state.session = item.session
    state.scroll = None
    state.history_for = item.session
    count = f"{item.messages} message{'' if item.messages == 1 else 's'}"
    _add(state, EntryKind.INFO, f"Continuing {item.session}: {item.title} ({count})")
    _info(state, f"Continuing {item.title!r}: your next message goes there, with its history")
    after = max(-1, item.messages - 1 - HISTORY_SHOWN)
    return [
        Send(SessionsRequest(SessionsAction.SHOW, item.session, after=after, limit=HISTORY_SHOWN))
    ]


def discard_pending(state: TuiState, index: int) -> list[Action]:
    """Discard a task from the `/pending` list (a user-cancel of the stored task)."""
    assert state.pending is not None
    task = state.pending.pop(index)
    state.pending_index = max(0, min(state.pending_index, len(state.pending) - 1))
    if not state.pending:
        state.pending = None
    _info(state, f"Discarded {task.session}")
    return [Send(PendingRequest(PendingAction.DISCARD, task.session))]


# -- scrolling the transcript ------------------------------------------------------------

#: How many screen lines an entry takes at the current width (the view knows; state asks).
LineCount = Callable[[TranscriptEntry], int]


def _position(state: TuiState, anchor: Anchor, count: LineCount) -> tuple[int, int]:
    """The (entry index, line) of `anchor`; the first line kept when its entry is gone."""
    entries = state.transcript
    index = bisect.bisect_left(entries, anchor.serial, key=lambda entry: entry.serial)
    if index >= len(entries):
        return len(entries) - 1, max(0, count(entries[-1]) - 1)
    if entries[index].serial != anchor.serial:
        return index, 0
    return index, max(0, min(anchor.line, count(entries[index]) - 1))


def _up(state: TuiState, count: LineCount, index: int, line: int, n: int) -> tuple[int, int]:
    """`n` lines above (index, line), stopping at the first line."""
    while n > line:
        if index == 0:
            return 0, 0
        n -= line + 1
        index -= 1
        line = max(0, count(state.transcript[index]) - 1)
    return index, line - n


def _down(state: TuiState, count: LineCount, index: int, line: int, n: int) -> tuple[int, int]:
    """`n` lines below (index, line), stopping at the last line."""
    entries = state.transcript
    while True:
        left = max(0, count(entries[index]) - 1) - line
        if n <= left:
            return index, line + n
        if index == len(entries) - 1:
            return index, line + left
        n -= left + 1
        index += 1
        line = 0


def _lines_from(state: TuiState, count: LineCount, index: int, line: int, limit: int) -> int:
    """How many lines there are from (index, line) to the end, counting up to `limit`."""
    entries = state.transcript
    total = count(entries[index]) - line
    index += 1
    while total < limit and index < len(entries):
        total += count(entries[index])
        index += 1
    return total


def scroll_top(state: TuiState, count: LineCount, height: int) -> tuple[int, int] | None:
    """The (entry index, line) the view starts at while reading back, or None when it
    follows the end: everything from the anchor on fits in `height` lines (the anchor is
    then dropped, so new output is followed again)."""
    if state.scroll is None or not state.transcript:
        state.scroll = None
        return None
    index, line = _position(state, state.scroll, count)
    if _lines_from(state, count, index, line, height + 1) <= height:
        state.scroll = None
        return None
    return index, line


def scroll_by(state: TuiState, lines: int, count: LineCount, height: int) -> None:
    """Scroll the transcript `lines` lines down (up when negative) in a view `height` high."""
    entries = state.transcript
    if not entries or lines == 0:
        return
    top = scroll_top(state, count, height)
    if top is None:
        if lines > 0:
            return
        last = len(entries) - 1
        top = _up(state, count, last, max(0, count(entries[last]) - 1), height - 1)
    index, line = top
    if lines < 0:
        index, line = _up(state, count, index, line, -lines)
    else:
        index, line = _down(state, count, index, line, lines)
    state.scroll = Anchor(entries[index].serial, line)
    scroll_top(state, count, height)


def scroll_pages(state: TuiState, pages: int, count: LineCount, height: int) -> None:
    """PageUp (negative) / PageDown: a screenful less two lines, so some context stays."""
    scroll_by(state, pages * max(1, height - 2), count, height)


# -- the connection and frames from the daemon ----------------------------------------------


def connected(state: TuiState, welcome: Welcome) -> list[Action]:
    """The daemon answered `hello`; after a lost connection, ask what was left pending."""
    again = state.was_connected
    state.connected = True
    state.was_connected = True
    state.link_error = None
    state.starting_daemon = False
    state.retry_at = None
    state.window = welcome.window
    if not again:
        return []
    _info(state, "Reconnected to the daemon")
    state.quiet_pending = True
    return [Send(PendingRequest(PendingAction.LIST))]


def starting_daemon(state: TuiState, where: str) -> list[Action]:
    """No daemon answered: one is being started for this window."""
    state.starting_daemon = True
    state.retry_at = None
    starting = f"Starting the daemon on {where}..."
    notice = state.notice
    if state.was_connected and notice is not None and notice.text.startswith("Lost the daemon"):
        # What was lost, and what is kept, stays on screen while the daemon starts.
        state.notice = Notice(f"{notice.text} {starting}", notice.level)
    else:
        _info(state, starting)
    return []


def daemon_started(state: TuiState, text: str) -> list[Action]:
    """A daemon was started for this window: said in the notice box and kept in the transcript."""
    state.starting_daemon = False
    _add(state, EntryKind.INFO, text)
    _info(state, text)
    return []


def connect_failed(state: TuiState, reason: str, retry_at: float) -> list[Action]:
    """A connection attempt failed; the next one is due at `retry_at`."""
    state.connected = False
    state.starting_daemon = False
    state.link_error = reason
    state.retry_at = retry_at
    what = "Still cannot reach the daemon" if state.was_connected else "Cannot reach the daemon"
    _error(state, f"{what}: {reason}")
    return []


def disconnected(state: TuiState, reason: str, retry_at: float | None = None) -> list[Action]:
    """The connection to the daemon is gone: the run (if any) is over for this window.

    Nothing typed is lost: a message the daemon may not have received, the draft a
    question had put aside, and a typed (unmasked) answer all come back to the input box.
    """
    state.connected = False
    state.link_error = reason
    state.retry_at = retry_at
    run, state.run = state.run, None
    state.popup = None
    state.quit_popup = None
    state.ended_popup = None
    state.pending = None
    state.quiet_pending = False
    state.sessions = None
    state.sessions_pages = []
    state.history_for = None
    pieces: list[str] = []
    unsent = run.text if run is not None and run.task is None else None
    if unsent:
        pieces.append(unsent)
    if state.asks:
        pieces += [state.draft or "", "" if state.masked else state.input]
        state.asks.clear()
        state.draft = None
    else:
        pieces.append(state.input)
    text = "\n".join(piece for piece in pieces if piece)
    actions: list[Action] = []
    if text != state.input:
        state.input = text
        actions.append(SetInput(text))
    words = [f"Lost the daemon: {reason}. Reconnecting..."]
    if run is not None and run.task is not None:
        # The daemon keeps an interrupted task; its session must be resumed, not continued.
        state.session = None
        _add(state, EntryKind.ERROR, "Interrupted: lost the daemon; the task is kept", run.task)
        words.append("The run's task is kept: /pending resumes it once reconnected.")
    elif unsent:
        words.append("Your message may not have reached it: it is back in the input box.")
    _error(state, " ".join(words))
    if state.quit_after_run:
        state.quit_after_run = False
        actions.append(Quit())
    return actions


def _ours(state: TuiState, task: str | None) -> bool:
    current = state.run.task if state.run is not None else None
    return task is None or current is None or task == current


def on_task(state: TuiState, frame: TaskFrame) -> list[Action]:
    """A `task` frame: the run's hash; a cancel held until now is sent."""
    run = state.run
    if run is None or run.task is not None:
        return []
    run.task = frame.task
    run.session = frame.session
    state.session = frame.session
    if frame.resumed:
        _add(
            state,
            EntryKind.INFO,
            describe_resume(frame.kept_calls, frame.rerun_calls, frame.regenerated_words),
            frame.task,
        )
    if run.held_cancel is not None:
        pause = run.held_cancel
        run.held_cancel = None
        run.sent_cancel = pause
        run.phase = RunPhase.STOPPING
        return [Send(Cancel(frame.task, pause))]
    run.phase = RunPhase.RUNNING
    return []


def on_text(state: TuiState, frame: TextFrame) -> list[Action]:
    """Streamed assistant text."""
    if not frame.text or not _ours(state, frame.task):
        return []
    _mark_shown(state)
    last = state.transcript[-1] if state.transcript else None
    if (
        last is not None
        and last.kind is EntryKind.ASSISTANT
        and last.task == frame.task
        and last.agent == frame.agent
    ):
        last.parts.append(frame.text)
        return []
    # A subagent's text gets its own block, labelled when shown, so it never runs into
    # the main reply.
    _add(state, EntryKind.ASSISTANT, frame.text, frame.task)
    state.transcript[-1].agent = frame.agent
    return []


def on_reasoning(state: TuiState, frame: ReasoningFrame) -> list[Action]:
    """Streamed reasoning of the model: a dimmed block of its own, apart from the reply."""
    if not frame.text or not _ours(state, frame.task):
        return []
    _mark_shown(state)
    last = state.transcript[-1] if state.transcript else None
    if (
        last is not None
        and last.kind is EntryKind.REASONING
        and last.task == frame.task
        and last.agent == frame.agent
    ):
        last.parts.append(frame.text)
        return []
    _add(state, EntryKind.REASONING, frame.text, frame.task)
    state.transcript[-1].agent = frame.agent
    return []


def _short(arguments: dict[str, Any]) -> str:
    text = " ".join(f"{key}={value!r}" for key, value in arguments.items())
    return text if len(text) <= 200 else text[:197] + "..."


def on_tool_call(state: TuiState, frame: ToolCallFrame) -> list[Action]:
    """A tool call is about to run."""
    if not _ours(state, frame.task):
        return []
    _mark_shown(state)
    who = f"[{frame.agent}] " if frame.agent else ""
    warning = may_have_run(frame.attempt)
    note = f" ({warning})" if warning else ""
    _add(
        state,
        EntryKind.TOOL_CALL,
        f"{who}{frame.name} {_short(frame.arguments)}{note}",
        frame.task,
    )
    return []


def on_tool_call_delta(state: TuiState, frame: ToolCallDeltaFrame) -> list[Action]:
    """The model is still writing a tool call: the call is shown when it runs."""
    return []


def on_tool_result(state: TuiState, frame: ToolResultFrame) -> list[Action]:
    """A tool call finished."""
    if not _ours(state, frame.task):
        return []
    _mark_shown(state)
    kind = EntryKind.TOOL_RESULT if frame.ok else EntryKind.ERROR
    _add(state, kind, f"{frame.name}: {frame.preview}".rstrip(), frame.task)
    return []


def on_usage(state: TuiState, frame: UsageFrame) -> list[Action]:
    """Token usage of one model response."""
    state.input_tokens += frame.input_tokens
    state.output_tokens += frame.output_tokens
    state.cached_tokens += frame.cache_read_tokens
    return []


def on_verify(state: TuiState, frame: VerifyFrame) -> list[Action]:
    """The result of checking a typed password, in the notice box."""
    if frame.ok:
        _info(state, "Password accepted")
        return []
    # The daemon's own words only when they say more than "wrong password".
    message = frame.message.strip()
    what = "Wrong password" if not message or "wrong password" in message.lower() else message
    if frame.attempts_left > 0:
        tries = "try" if frame.attempts_left == 1 else "tries"
        _error(state, f"{what} ({frame.attempts_left} {tries} left)")
    else:
        _error(state, f"{what}: no tries left, the operation was denied")
    return []


def on_ask(state: TuiState, frame: AskFrame) -> list[Action]:
    """A question for this window: a confirmation, a question, a secret or a password."""
    _mark_shown(state)
    return _push_ask(state, frame)


def on_ask_withdrawn(state: TuiState, frame: AskWithdrawn) -> list[Action]:
    """The daemon took a question back (its run stopped)."""
    for index, ask in enumerate(state.asks):
        if ask.id == frame.id:
            reason = frame.reason
            _info(state, f"Question withdrawn: {reason}" if reason else "Question withdrawn")
            return _pop_ask(state, index)
    return []


def on_ended(state: TuiState, frame: EndedFrame) -> list[Action]:
    """The run ended: say how, and what became of its pending task."""
    run = state.run
    if run is None or (run.task is not None and frame.task != run.task):
        return []
    state.run = None
    quitting = state.quit_popup is not None
    interrupted_choice = state.popup is not None or quitting
    state.popup = None
    state.quit_popup = None
    actions: list[Action] = []
    for index in reversed(range(len(state.asks))):
        if state.asks[index].task in (None, frame.task):
            actions += _pop_ask(state, index)
    line, level = _ended_line(frame)
    _add(state, EntryKind.ERROR if level is NoticeLevel.ERROR else EntryKind.INFO, line, frame.task)
    if interrupted_choice:
        # The popup does not just vanish under the user's hand: it says why.
        state.ended_popup = EndedPopup(f"The run ended before you chose: {line}", quitting)
    if frame.pending_kept:
        # The task stays resumable; the next message must not continue its session.
        state.session = None
        state.notice = Notice(
            f"{line}. Its task is kept: type /pending to resume it "
            "(the next message starts a new session)",
            level,
        )
    elif level is NoticeLevel.ERROR:
        state.notice = Notice(line, level)
    elif run.stopping:
        state.notice = None
    if state.quit_after_run:
        state.quit_after_run = False
        actions.append(Quit())
    return actions


def _ended_line(frame: EndedFrame) -> tuple[str, NoticeLevel]:
    level = NoticeLevel.ERROR if frame.outcome is Outcome.FAILED else NoticeLevel.INFO
    return describe_end(frame).title, level


def _is_current_run(state: TuiState, task: PendingTask) -> bool:
    run = state.run
    if run is None:
        return False
    return (run.session is not None and task.session == run.session) or (
        run.task is not None and task.task == run.task
    )


def on_pending(state: TuiState, frame: PendingList) -> list[Action]:
    """A page of the `/pending` list arrived; the list is shown once the last one has.

    The run in progress is not one of its tasks.
    """
    state.pending_pages += [task for task in frame.tasks if not _is_current_run(state, task)]
    if frame.next is not None:
        return [Send(PendingRequest(PendingAction.LIST, cursor=frame.next))]
    tasks, state.pending_pages = state.pending_pages, []
    if state.quiet_pending:
        state.quiet_pending = False
        if tasks:
            some = "1 interrupted task is" if len(tasks) == 1 else f"{len(tasks)} tasks are"
            _info(state, f"Reconnected to the daemon. {some} kept: type /pending to resume")
        return []
    if not tasks:
        state.pending = None
        _info(state, "No paused tasks in this window")
        return []
    state.pending = tasks
    state.pending_index = 0
    return []


def on_sessions(state: TuiState, frame: SessionList) -> list[Action]:
    """A page of the `/sessions` list; the picker opens once enough (or all) have come.

    The session of the run in progress is not one of them.
    """
    running = state.run.session if state.run is not None else None
    state.sessions_pages += [item for item in frame.sessions if item.session != running]
    if frame.next is not None and len(state.sessions_pages) < SESSIONS_SHOWN:
        return [Send(SessionsRequest(SessionsAction.LIST, limit=SESSIONS_PAGE, cursor=frame.next))]
    items, state.sessions_pages = state.sessions_pages[:SESSIONS_SHOWN], []
    if not items:
        state.sessions = None
        _info(state, "No earlier conversations yet: the next message starts one")
        return []
    state.sessions = items
    state.sessions_index = 0
    return []


def on_session_messages(state: TuiState, frame: SessionMessages) -> list[Action]:
    """The last messages of the conversation being continued: shown in the transcript."""
    if frame.session.session != state.history_for:
        return []
    state.history_for = None
    if frame.messages and frame.messages[0].seq > 0:
        _add(state, EntryKind.INFO, f"(the {frame.messages[0].seq} earlier messages are not shown)")
    for message in frame.messages:
        for kind, text in _history_entries(message):
            _add(state, kind, text)
    return []


def _history_entries(message: SessionMessage) -> list[tuple[EntryKind, str]]:
    """A stored message as the entries a live run would have shown."""
    if message.role == "user":
        return [(EntryKind.USER, message.content)]
    if message.role == "tool":
        return [(EntryKind.TOOL_RESULT, f"{message.name or 'result'}: {message.content}".rstrip())]
    if message.role != "assistant":
        return []
    entries = [(EntryKind.ASSISTANT, message.content)] if message.content.strip() else []
    for call in message.tool_calls:
        arguments = call.get("arguments")
        shown = _short(arguments) if isinstance(arguments, dict) else ""
        entries.append((EntryKind.TOOL_CALL, f"{call.get('name', 'tool')} {shown}".rstrip()))
    return entries


def on_error(state: TuiState, frame: ErrorFrame) -> list[Action]:
    """An `error` frame: shown in the notice box; a run refused before it started is forgotten."""
    run = state.run
    if run is not None and run.task is None and frame.ref in ("run", "pending"):
        state.run = None
    if frame.ref == "sessions" and state.history_for is not None:
        # The conversation to continue is gone (removed meanwhile): start afresh instead.
        state.session = state.history_for = None
    _error(state, frame.message)
    return []


def on_ack(state: TuiState, frame: Ack) -> list[Action]:
    """A request was carried out; nothing to show."""
    return []


_HANDLERS: dict[type[Any], Callable[[TuiState, Any], list[Action]]] = {
    Welcome: connected,
    TaskFrame: on_task,
    TextFrame: on_text,
    ReasoningFrame: on_reasoning,
    ToolCallDeltaFrame: on_tool_call_delta,
    ToolCallFrame: on_tool_call,
    ToolResultFrame: on_tool_result,
    UsageFrame: on_usage,
    VerifyFrame: on_verify,
    EndedFrame: on_ended,
    AskFrame: on_ask,
    AskWithdrawn: on_ask_withdrawn,
    PendingList: on_pending,
    SessionList: on_sessions,
    SessionMessages: on_session_messages,
    Ack: on_ack,
    ErrorFrame: on_error,
}


def on_frame(state: TuiState, frame: DaemonFrame) -> list[Action]:
    """Any frame from the daemon, dispatched by its type."""
    return _HANDLERS[type(frame)](state, frame)


# -- rendering helpers (pure) -----------------------------------------------------------

SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"


def _link_text(state: TuiState, now: float) -> str:
    if state.starting_daemon:
        return "starting the daemon…"
    if state.link_error is None:
        return "connecting…"
    lost = "lost the daemon" if state.was_connected else "no daemon"
    if state.retry_at is not None and state.retry_at > now:
        return f"{lost}: reconnecting in {state.retry_at - now:.0f}s"
    return f"{lost}: reconnecting…"


def status_text(state: TuiState, now: float) -> str:
    """The status line: the link, the run's state, task hash and elapsed time, the tokens."""
    parts: list[str] = []
    run = state.run
    if not state.connected:
        parts.append(_link_text(state, now))
    elif run is None:
        parts.append("idle")
        if state.session:
            parts.append(f"session {state.session}")
    else:
        elapsed = max(0.0, now - run.started_at)
        spin = SPINNER[int(elapsed * 10) % len(SPINNER)]
        label = run.phase.value
        if state.ask is not None:
            label = "waiting for your answer"
        parts.append(f"{spin} {label}")
        parts.append(f"task {run.task[:12]}" if run.task else "task ...")
        parts.append(f"{elapsed:.1f}s")
    if state.cwd:
        parts.append(f"in {short_path(state.cwd)}")
    if state.input_tokens or state.output_tokens:
        cached = f" ({state.cached_tokens} cached)" if state.cached_tokens else ""
        parts.append(f"tokens in {state.input_tokens}{cached} / out {state.output_tokens}")
    if state.can_restore_input:
        parts.append("Esc brings back the cleared text")
    return "  |  ".join(parts)


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
    if task.status == "awaiting_answer":
        return "waiting for an answer"
    if task.status == "failed":
        return "failed"
    if task.cause is not None:
        return _CAUSE_WORDS.get(task.cause, task.cause.value)
    if task.status == "running":
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


def session_line(item: SessionItem, wall_now: float) -> str:
    """One conversation of the `/sessions` picker: its title, when, how long, and its id."""
    title = " ".join(item.title.split()) or "(no title)"
    if len(title) > 60:
        title = title[:59] + "…"
    count = f"{item.messages} message{'' if item.messages == 1 else 's'}"
    pending = f", {item.status.replace('_', ' ')}: Enter resumes it" if item.status else ""
    return f"{title}  ({age_text(wall_now - item.updated_at)}, {count}{pending})  {item.session}"

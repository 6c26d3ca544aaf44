"""The terminal client's state and the transitions that change it.

Everything the window knows lives in one `TuiState`: the run in progress, the
transcript, the notice box, the `/` picker, the cancel popup, the question being
answered, the `/pending` list. Key presses and daemon frames are handled by the
transition functions of this module. They do no I/O and read no clock of their
own (the time is passed in): each one updates the state and returns the
`Action` values the shell must carry out (send a frame, set the input text,
quit). Widgets only render the state, so the whole behaviour, the Esc cascade
included, is tested here by feeding keys and frames, without a terminal.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

import attrs

#: The `/` commands, with the line the picker shows for each.
COMMANDS: tuple[tuple[str, str], ...] = (
    ("/pending", "list this window's paused tasks: resume or discard one"),
    ("/new", "start a new session"),
    ("/help", "keys and commands"),
    ("/quit", "quit (the daemon keeps running)"),
)

#: The choices of the cancel popup, in display order.
POPUP_CHOICES: tuple[str, ...] = ("Yes", "Pause", "No")
#: The choice the popup opens on: stopping without losing anything.
POPUP_DEFAULT = 1

#: How the confirmation choices of the daemon are shown.
CHOICE_LABELS: dict[str, str] = {
    "allow": "Allow once",
    "allow_session": "Allow for this session",
    "deny": "Deny",
}

#: The most transcript entries kept; older ones scroll away for good.
TRANSCRIPT_LIMIT = 2000

HELP_TEXT = """Keys
  Enter        send the message (or answer the question)
  Up / Down    input history; move in a list or the / picker
  Tab          complete a / command
  Esc          close the / picker, then the notice, then stop the run
               (at once if nothing was shown yet, else ask: Yes / Pause / No),
               then clear the input
  Ctrl+C       stop the run and discard its task; with no run, press twice to quit
  Ctrl+D       quit (on an empty input)
Commands
  /pending     list paused tasks: Enter resumes, d discards
  /new         start a new session
  /help        this text
  /quit        quit (the daemon keeps running)"""


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
    TOOL_CALL = "tool_call"
    TOOL_RESULT = "tool_result"
    INFO = "info"
    ERROR = "error"


class AskKind(enum.Enum):
    """What a question from the daemon wants (the `kind` of an `ask` frame)."""

    CONFIRM = "confirm"
    QUESTION = "question"
    SECRET = "secret"
    PASSWORD = "password"


# -- values ------------------------------------------------------------------------------


@attrs.frozen
class Notice:
    """The notice box: an error or a piece of information the user can close with Esc."""

    text: str
    level: NoticeLevel = NoticeLevel.INFO


@attrs.frozen
class Ask:
    """A question on screen: from the daemon (`ask_id` set) or a resumed task's saved one."""

    ask_id: str | None
    kind: AskKind
    prompt: str
    task: str | None = None
    session: str | None = None
    choices: tuple[str, ...] = ()
    masked: bool = False
    tool: str | None = None
    error: str | None = None
    #: For a saved question: the session to resume with the answer.
    resume_session: str | None = None

    @property
    def is_masked(self) -> bool:
        """True when the answer is typed into a masked field."""
        return self.masked or self.kind in (AskKind.SECRET, AskKind.PASSWORD)

    @property
    def has_choices(self) -> bool:
        """True when the answer is picked from `choices` rather than typed."""
        return self.kind is AskKind.CONFIRM and bool(self.choices)


@attrs.frozen
class PendingTask:
    """One resumable task of this window, as the `/pending` list shows it."""

    session: str
    status: str
    input: str = ""
    question: str | None = None
    cause: str | None = None
    updated_at: float | None = None


# -- actions -----------------------------------------------------------------------------


@attrs.frozen
class SendRun:
    """Send a `run` frame (`session` None starts a new session)."""

    text: str
    session: str | None


@attrs.frozen
class SendAnswer:
    """Send an `answer` frame for the daemon's question `ask`."""

    ask: str
    value: str
    secret: str | None = None


@attrs.frozen
class SendCancel:
    """Send a `cancel` frame: `pause` False is a user-cancel (the task is deleted)."""

    task: str
    pause: bool


@attrs.frozen
class SendPending:
    """Send a `pending` frame: `list`, `resume` (with the saved question's answer) or `discard`."""

    action: str
    session: str | None = None
    answer: str | None = None


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


Action = SendRun | SendAnswer | SendCancel | SendPending | SetInput | RememberInput | Quit


# -- the state ---------------------------------------------------------------------------


@attrs.define
class TranscriptEntry:
    """One block of the transcript; streamed assistant text grows its `parts`."""

    kind: EntryKind
    parts: list[str]
    task: str | None = None

    @property
    def text(self) -> str:
        """The entry's whole text."""
        return "".join(self.parts)


@attrs.define
class Run:
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


@attrs.define
class TuiState:
    """Everything the window knows. Transition functions change it; widgets render it."""

    window: str = ""
    connected: bool = False
    #: The session the next message continues; None starts a new one.
    session: str | None = None
    run: Run | None = None
    transcript: list[TranscriptEntry] = attrs.field(factory=list)
    notice: Notice | None = None
    #: The text of the input box, mirrored here by `input_changed`.
    input: str = ""
    #: The input text the `/` picker was closed for (it reopens when the text changes).
    picker_dismissed: str | None = None
    picker_index: int = 0
    #: The cancel popup's highlighted choice, or None when it is closed.
    popup: int | None = None
    #: Questions waiting, the one on screen first.
    asks: list[Ask] = attrs.field(factory=list)
    choice_index: int = 0
    #: What the user had typed when a question took over the input box.
    draft: str | None = None
    #: The `/pending` list when open.
    pending: list[PendingTask] | None = None
    pending_index: int = 0
    #: True after a first Ctrl+C with no run: a second one quits.
    quit_armed: bool = False
    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def ask(self) -> Ask | None:
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
            and self.pending is None
            and self.popup is None
            and self.picker_dismissed != self.input
            and bool(self.picker_items)
        )

    @property
    def popup_open(self) -> bool:
        """True when the cancel popup is showing."""
        return self.popup is not None

    @property
    def pending_open(self) -> bool:
        """True when the `/pending` list is showing."""
        return self.pending is not None

    @property
    def choosing(self) -> bool:
        """True when a confirmation's choices take the keys (no popup or list above them)."""
        ask = self.ask
        return ask is not None and ask.has_choices and not self.popup_open and not self.pending_open

    @property
    def masked(self) -> bool:
        """True when the input box is a masked field."""
        ask = self.ask
        return ask is not None and ask.is_masked

    @property
    def input_locked(self) -> bool:
        """True when typing must not change the input box (a list or choices have the keys)."""
        return self.popup_open or self.pending_open or self.choosing

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
    state.transcript.append(TranscriptEntry(kind, [text], task))
    if len(state.transcript) > TRANSCRIPT_LIMIT:
        del state.transcript[: len(state.transcript) - TRANSCRIPT_LIMIT]


def _current_task(state: TuiState) -> str | None:
    return state.run.task if state.run is not None else None


def _mark_shown(state: TuiState) -> None:
    if state.run is not None:
        state.run.shown = True


def _push_ask(state: TuiState, ask: Ask) -> list[Action]:
    """Queue a question; when it is the first, it takes over the input box."""
    state.asks.append(ask)
    if len(state.asks) > 1:
        return []
    return _ask_took_over(state)


def _ask_took_over(state: TuiState) -> list[Action]:
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
    if state.asks:
        state.choice_index = 0
        state.input = ""
        return [SetInput("")]
    draft, state.draft = state.draft or "", None
    state.input = draft
    return [SetInput(draft)]


def _request_cancel(state: TuiState, *, pause: bool) -> list[Action]:
    """Stop the run: at once when its task hash is known, else once it arrives."""
    run = state.run
    if run is None:
        return []
    state.popup = None
    if run.sent_cancel is not None or run.held_cancel is not None:
        return []
    what = "Pausing" if pause else "Stopping"
    if run.task is None:
        run.held_cancel = pause
        _info(state, f"{what} the run as soon as it starts...")
        return []
    run.sent_cancel = pause
    run.phase = RunPhase.STOPPING
    _info(state, f"{what} the run...")
    return [SendCancel(run.task, pause)]


# -- keys --------------------------------------------------------------------------------


class EscapeStep(enum.Enum):
    """What Esc does, outside a popup, in the order the cascade tries them."""

    CLOSE_PICKER = "close_picker"
    CLOSE_NOTICE = "close_notice"
    CANCEL_RUN = "cancel_run"
    OPEN_POPUP = "open_popup"
    CLEAR_INPUT = "clear_input"


def escape_step(state: TuiState) -> EscapeStep:
    """The step of the Esc cascade that applies now (the state outside any popup or list)."""
    if state.picker_open:
        return EscapeStep.CLOSE_PICKER
    if state.notice is not None:
        return EscapeStep.CLOSE_NOTICE
    run = state.run
    if run is not None and run.sent_cancel is None and run.held_cancel is None:
        return EscapeStep.OPEN_POPUP if run.shown else EscapeStep.CANCEL_RUN
    return EscapeStep.CLEAR_INPUT


def press_escape(state: TuiState) -> list[Action]:
    """Esc: close the popup or the `/pending` list if open, else take one step of the cascade."""
    if state.popup_open:
        state.popup = None
        return []
    if state.pending_open:
        state.pending = None
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
    if state.input:
        state.input = ""
        return [SetInput("")]
    return []


def choose_popup(state: TuiState, choice: str) -> list[Action]:
    """A popup choice: ``"Yes"`` user-cancels, ``"Pause"`` pauses, ``"No"`` keeps running."""
    if choice not in POPUP_CHOICES:
        raise ValueError(f"unknown popup choice {choice!r}; expected one of {POPUP_CHOICES}")
    state.popup = None
    if choice == "No":
        return []
    return _request_cancel(state, pause=choice == "Pause")


def press_ctrl_c(state: TuiState) -> list[Action]:
    """Ctrl+C: user-cancel the run; with no run, arm (then confirm) quitting."""
    if state.run is not None:
        if state.run.sent_cancel is not None or state.run.held_cancel is not None:
            _info(state, "Already stopping; press Ctrl+D to quit")
            return []
        state.pending = None
        return _request_cancel(state, pause=False)
    if state.quit_armed:
        return [Quit()]
    state.quit_armed = True
    state.popup = None
    state.pending = None
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


def _move_selection(state: TuiState, delta: int) -> bool:
    if state.popup is not None:
        state.popup = _move(state.popup, delta, len(POPUP_CHOICES))
    elif state.pending is not None:
        state.pending_index = _move(state.pending_index, delta, len(state.pending))
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
    items = state.picker_items
    name = items[min(state.picker_index, len(items) - 1)][0]
    state.input = name
    state.picker_dismissed = name
    return [SetInput(name)]


def press_hotkey(state: TuiState, key: str) -> list[Action]:
    """A letter or digit that acts in a popup, list or choice (``y``/``p``/``n``, ``d``, ``1``...)."""
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
    return []


def press_enter(state: TuiState, now: float) -> list[Action]:
    """Enter: choose in a popup or list, answer the question, run a command or send a message."""
    if state.popup is not None:
        return choose_popup(state, POPUP_CHOICES[state.popup])
    if state.pending is not None:
        if not state.pending:
            state.pending = None
            return []
        return resume_pending(state, state.pending_index, now)
    if state.picker_open:
        items = state.picker_items
        name = items[min(state.picker_index, len(items) - 1)][0]
        state.input = ""
        return [SetInput(""), *run_command(state, name, now)]
    ask = state.ask
    if ask is not None:
        return _enter_answer(state, ask, now)
    text = state.input.strip()
    if not text:
        return []
    if text.startswith("/"):
        state.input = ""
        return [SetInput(""), *run_command(state, text, now)]
    if state.run is not None:
        _info(state, "A run is in progress: wait for it, or press Esc to stop it")
        return []
    state.input = ""
    state.quit_armed = False
    state.notice = None
    _add(state, EntryKind.USER, text)
    state.run = Run(started_at=now, session=state.session)
    return [SetInput(""), RememberInput(text), SendRun(text, state.session)]


def _enter_answer(state: TuiState, ask: Ask, now: float) -> list[Action]:
    if ask.has_choices:
        return _answer(state, ask.choices[state.choice_index], None)
    typed = state.input
    if ask.kind is AskKind.PASSWORD:
        # An empty password field denies; the password itself only travels as `secret`.
        if typed:
            return _answer(state, "allow", typed)
        return _answer(state, "deny", None)
    if ask.is_masked:
        return _answer(state, "", typed)
    if ask.resume_session is not None:
        return _resume_with_answer(state, ask, typed, now)
    return _answer(state, typed, None)


def _answer(state: TuiState, value: str, secret: str | None) -> list[Action]:
    ask = state.ask
    assert ask is not None
    assert ask.ask_id is not None
    shown = "(hidden)" if secret is not None else CHOICE_LABELS.get(value, value)
    _add(state, EntryKind.INFO, f"{ask.prompt} -> {shown}", ask.task)
    state.notice = None
    return [SendAnswer(ask.ask_id, value, secret), *_pop_ask(state)]


def run_command(state: TuiState, text: str, now: float) -> list[Action]:
    """A `/` command typed or picked."""
    name = text.split()[0]
    if name == "/quit":
        return [Quit()]
    if name == "/help":
        _info(state, HELP_TEXT)
        return []
    if name == "/new":
        state.session = None
        _info(state, "New session: the next message starts it")
        return []
    if name == "/pending":
        state.notice = None
        return [SendPending("list")]
    _error(state, f"Unknown command {name}; type / to see the commands")
    return []


def resume_pending(state: TuiState, index: int, now: float) -> list[Action]:
    """Resume a task from the `/pending` list: ask its saved question first, if it has one."""
    assert state.pending is not None
    task = state.pending[index]
    state.pending = None
    if state.run is not None:
        _error(state, "A run is in progress: stop it or wait before resuming another task")
        return []
    if task.question:
        return _push_ask(
            state,
            Ask(None, AskKind.QUESTION, task.question, resume_session=task.session),
        )
    return _start_resume(state, task.session, None, now)


def _resume_with_answer(state: TuiState, ask: Ask, answer: str, now: float) -> list[Action]:
    assert ask.resume_session is not None
    _add(state, EntryKind.INFO, f"{ask.prompt} -> {answer}")
    actions = _pop_ask(state)
    return [*actions, *_start_resume(state, ask.resume_session, answer, now)]


def _start_resume(state: TuiState, session: str, answer: str | None, now: float) -> list[Action]:
    state.session = session
    state.notice = None
    state.run = Run(started_at=now, session=session, resumed=True)
    _add(state, EntryKind.INFO, f"Resuming {session}")
    return [SendPending("resume", session, answer)]


def discard_pending(state: TuiState, index: int) -> list[Action]:
    """Discard a task from the `/pending` list (a user-cancel of the stored task)."""
    assert state.pending is not None
    task = state.pending.pop(index)
    state.pending_index = max(0, min(state.pending_index, len(state.pending) - 1))
    _info(state, f"Discarded {task.session}")
    return [SendPending("discard", task.session)]


# -- frames from the daemon ----------------------------------------------------------------


def connected(state: TuiState, window: str) -> list[Action]:
    """The daemon answered `hello`."""
    state.connected = True
    state.window = window
    return []


def disconnected(state: TuiState, reason: str) -> list[Action]:
    """The connection to the daemon is gone: the run (if any) is over for this window."""
    state.connected = False
    state.run = None
    state.popup = None
    state.asks.clear()
    state.draft = None
    _error(state, f"Disconnected from the daemon: {reason}")
    return []


def on_task(state: TuiState, task: str, session: str | None) -> list[Action]:
    """A `task` frame: the run's hash; a cancel held until now is sent."""
    run = state.run
    if run is None or run.task is not None:
        return []
    run.task = task
    if session:
        run.session = session
        state.session = session
    if run.held_cancel is not None:
        pause = run.held_cancel
        run.held_cancel = None
        run.sent_cancel = pause
        run.phase = RunPhase.STOPPING
        return [SendCancel(task, pause)]
    run.phase = RunPhase.RUNNING
    return []


def _ours(state: TuiState, task: str | None) -> bool:
    current = _current_task(state)
    return task is None or current is None or task == current


def on_text(state: TuiState, task: str | None, text: str) -> list[Action]:
    """Streamed assistant text."""
    if not text or not _ours(state, task):
        return []
    _mark_shown(state)
    last = state.transcript[-1] if state.transcript else None
    if last is not None and last.kind is EntryKind.ASSISTANT and last.task == task:
        last.parts.append(text)
    else:
        _add(state, EntryKind.ASSISTANT, text, task)
    return []


def on_tool_call(state: TuiState, task: str | None, name: str, arguments: str) -> list[Action]:
    """A tool call is about to run."""
    if not _ours(state, task):
        return []
    _mark_shown(state)
    _add(state, EntryKind.TOOL_CALL, f"{name} {arguments}".rstrip(), task)
    return []


def on_tool_result(
    state: TuiState, task: str | None, name: str, preview: str, ok: bool
) -> list[Action]:
    """A tool call finished."""
    if not _ours(state, task):
        return []
    _mark_shown(state)
    kind = EntryKind.TOOL_RESULT if ok else EntryKind.ERROR
    _add(state, kind, f"{name}: {preview}".rstrip(), task)
    return []


def on_usage(state: TuiState, input_tokens: int, output_tokens: int) -> list[Action]:
    """Token usage of one model response."""
    state.input_tokens += input_tokens
    state.output_tokens += output_tokens
    return []


def on_verify(state: TuiState, ok: bool, attempts_left: int, message: str) -> list[Action]:
    """The result of checking a typed password."""
    if ok:
        _info(state, message or "Password accepted")
    elif attempts_left > 0:
        tries = "try" if attempts_left == 1 else "tries"
        _error(state, f"{message or 'Wrong password'} ({attempts_left} {tries} left)")
    else:
        _error(state, f"{message or 'Wrong password'}: no tries left, the operation was denied")
    return []


def on_ask(state: TuiState, ask: Ask) -> list[Action]:
    """A question for this window: a confirmation, a question, a secret or a password."""
    _mark_shown(state)
    if ask.error:
        _error(state, ask.error)
    return _push_ask(state, ask)


def on_ask_withdrawn(state: TuiState, ask_id: str, reason: str) -> list[Action]:
    """The daemon took a question back (its run stopped, or it was answered elsewhere)."""
    for index, ask in enumerate(state.asks):
        if ask.ask_id == ask_id:
            _info(state, f"Question withdrawn: {reason}" if reason else "Question withdrawn")
            return _pop_ask(state, index)
    return []


def on_ended(
    state: TuiState,
    task: str | None,
    outcome: str,
    *,
    cause: str | None = None,
    error: str | None = None,
    question: str | None = None,
    pending_kept: bool = False,
) -> list[Action]:
    """The run ended: say how, and what became of its pending task."""
    run = state.run
    if run is None or (task is not None and run.task is not None and task != run.task):
        return []
    state.run = None
    state.popup = None
    actions: list[Action] = []
    for index in reversed(range(len(state.asks))):
        ask = state.asks[index]
        if ask.ask_id is not None and (task is None or ask.task in (None, task)):
            actions += _pop_ask(state, index)
    line, level = _ended_line(outcome, cause, error, question, pending_kept)
    _add(state, EntryKind.ERROR if level is NoticeLevel.ERROR else EntryKind.INFO, line, task)
    if pending_kept:
        # The paused task stays resumable; the next message must not continue it.
        state.session = None
        kept = run.session or "the task"
        state.notice = Notice(
            f"{line}. {kept} is kept: type /pending to resume it; "
            "the next message starts a new session",
            level,
        )
    elif level is NoticeLevel.ERROR:
        state.notice = Notice(line, level)
    elif run.sent_cancel is not None and state.notice is not None:
        state.notice = None
    return actions


def _ended_line(
    outcome: str, cause: str | None, error: str | None, question: str | None, kept: bool
) -> tuple[str, NoticeLevel]:
    if outcome == "finished":
        return "Done", NoticeLevel.INFO
    if outcome == "cancelled":
        if cause == "user_cancel":
            return "Stopped; the task was discarded", NoticeLevel.INFO
        if cause == "pause":
            return "Paused", NoticeLevel.INFO
        return f"Stopped ({cause or 'cancelled'})", NoticeLevel.INFO
    if outcome == "awaiting_answer":
        return f"Waiting for an answer: {question or '?'}", NoticeLevel.INFO
    return f"Failed: {error or 'unknown error'}", NoticeLevel.ERROR


def on_pending(state: TuiState, tasks: Sequence[PendingTask]) -> list[Action]:
    """The `/pending` list arrived."""
    if not tasks:
        state.pending = None
        _info(state, "No paused tasks in this window")
        return []
    state.pending = list(tasks)
    state.pending_index = 0
    return []


def on_error(state: TuiState, code: str, message: str) -> list[Action]:
    """An `error` frame: shown in the notice box; a run that never started is forgotten."""
    run = state.run
    if run is not None and run.task is None:
        state.run = None
    _error(state, f"{message} ({code})" if code else message)
    return []


# -- rendering helpers (pure) -----------------------------------------------------------

SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"


def status_text(state: TuiState, now: float) -> str:
    """The status line: task hash, state, elapsed time and a spinner while running."""
    parts: list[str] = []
    run = state.run
    if not state.connected:
        parts.append("disconnected")
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
    if state.input_tokens or state.output_tokens:
        parts.append(f"tokens {state.input_tokens}/{state.output_tokens}")
    return "  |  ".join(parts)

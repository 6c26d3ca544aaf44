"""The terminal client's state: what the window knows, and the actions transitions return.

Everything the window knows lives in one `TuiState`: the link to the daemon,
the run in progress, the transcript and how far it is scrolled back, the notice
box, the `/` picker, the question being answered, and the one overlay over the
input box: a popup, the `/pending` list or the `/sessions` picker. Being one
field of a union, two overlays cannot be open at once.

Key presses, commands and daemon frames are handled by the transition functions
of `_transitions_keys`, `_transitions_commands` and `_transitions_daemon`. They do
no I/O and read no clock of their own (the time is passed in): each one updates the
state and returns the `Action` values the shell must carry out (send a frame, set
the input text, quit). Widgets only render the state, so the whole behaviour, the
Esc cascade included, is tested by feeding keys and frames, without a terminal.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

import attrs

from agentrt import Cause
from agentrt import RequestKind
from agentrt.protocol.frames import AskFrame
from agentrt.protocol.frames import ClientFrame
from agentrt.protocol.frames import ModelItem
from agentrt.protocol.frames import ModelsAction
from agentrt.protocol.frames import PendingTask
from agentrt.protocol.frames import SessionItem
from agentrt.vocab.reprs import mutable
from agentrt.vocab.reprs import record
from agentrt.vocab.stops import ResumePreview
from agentrt.vocab.usage import RunTokens
from agentrt.vocab.usage import TokenCount

from ._words import COMMANDS
from ._words import POPUP_DEFAULT
from ._words import QUIT_DEFAULT

#: The most transcript entries kept; older ones scroll away for good.
TRANSCRIPT_LIMIT = 2000

#: Lines one step of the mouse wheel scrolls the transcript.
WHEEL_LINES = 3

#: Sessions asked for per page by `/sessions`, and the most its picker shows.
SESSIONS_PAGE = 100
SESSIONS_SHOWN = 100
#: The last messages of a conversation shown when `/sessions` continues it.
HISTORY_SHOWN = 20


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
    #: A file attached to the message above it (``@path``): its name and size, not its text.
    ATTACHMENT = "attachment"
    #: The unified diff of a file change a confirmation asks about: + green, - red, @@ cyan.
    DIFF = "diff"


# -- values ------------------------------------------------------------------------------


@record
class Notice:
    """The notice box: an error or a piece of information the user can close with Esc."""

    text: str
    level: NoticeLevel = NoticeLevel.INFO


def is_masked(ask: AskFrame) -> bool:
    """True when the answer to `ask` is typed into a masked field."""
    return ask.request.masked


def has_choices(ask: AskFrame) -> bool:
    """True when the answer to `ask` is picked from its choices rather than typed."""
    return ask.kind is RequestKind.CONFIRM and bool(ask.choices)


# -- actions -----------------------------------------------------------------------------


@record
class Send:
    """Send a frame to the daemon."""

    frame: ClientFrame


@record
class SetInput:
    """Replace the text of the input box."""

    text: str


@record
class RememberInput:
    """Add a sent message to the input history (never an answer: answers may be secret)."""

    text: str


@record
class Quit:
    """Leave the application; the connection closes and the daemon keeps the pending task."""


Action = Send | SetInput | RememberInput | Quit


# -- the state ---------------------------------------------------------------------------


@mutable
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


@mutable
class RunState:
    """The run this window started and has not seen end."""

    started_at: float
    session: str | None
    task: str | None = None
    phase: RunPhase = RunPhase.STARTING
    #: True once anything of this run was shown (text, a tool call, a question).
    shown: bool = False
    #: A cancel asked for before the task hash arrived: its cause.
    held_cancel: Cause | None = None
    #: The cause of the cancel that was sent, if any.
    sent_cancel: Cause | None = None
    resumed: bool = False
    #: The message that started the run (None for a resume).
    text: str | None = None
    #: How many files the run changed so far, as the daemon last said (None: not asked).
    files: int | None = None
    #: True once the person chose to stop the run and put back its files.
    undo_after: bool = False

    @property
    def stopping(self) -> bool:
        """True once a cancel was sent or is held for the task hash."""
        return self.sent_cancel is not None or self.held_cancel is not None


@record
class Anchor:
    """A line of the transcript: line `line` of the entry numbered `serial`."""

    serial: int
    line: int


# -- the overlays: what covers the input box and takes the keys, one at a time ------------


@record
class StopPopup:
    """The popup Esc opens during a run that showed something: Yes / Pause / No."""

    #: The highlighted choice, an index into `POPUP_CHOICES`.
    highlighted: int = POPUP_DEFAULT


@record
class QuitPopup:
    """The popup `/quit` opens during a run: Pause and quit / Stop and quit / Cancel."""

    #: The highlighted choice, an index into `QUIT_CHOICES`.
    highlighted: int = QUIT_DEFAULT


@record
class EndedPopup:
    """What a popup turns into when its run ends before a choice was made."""

    text: str
    #: True when it was the quit popup: Enter then quits.
    quitting: bool = False


@record
class PendingPicker:
    """The `/pending` list: this window's paused and interrupted tasks (never empty)."""

    tasks: tuple[PendingTask, ...] = attrs.field(validator=attrs.validators.min_len(1))
    index: int = 0


@record
class SessionsPicker:
    """The `/sessions` picker: this window's user's earlier conversations (never empty)."""

    items: tuple[SessionItem, ...] = attrs.field(validator=attrs.validators.min_len(1))
    index: int = 0


@record
class ModelPicker:
    """The `/model` picker: the configured models (never empty), the session's highlighted."""

    models: tuple[ModelItem, ...] = attrs.field(validator=attrs.validators.min_len(1))
    index: int = 0
    #: The model the window's session runs with now.
    current: str = ""


#: The popups: a choice about the run (or its end) the user has to make first.
Popup = StopPopup | QuitPopup | EndedPopup
#: The lists a command opens over the input box.
Picker = PendingPicker | SessionsPicker | ModelPicker
#: What covers the input box and takes the keys. The `/` picker is not one: it shows
#: while the input starts with ``/`` and no overlay is open.
Overlay = StopPopup | QuitPopup | EndedPopup | PendingPicker | SessionsPicker | ModelPicker


@mutable
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
    #: True once the daemon failed to start too often: the window only looks for one.
    gave_up: bool = False
    #: The daemon whose HTTP API failure was said (its pid), so it is said once.
    http_error_of: int | None = None
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
    #: The input Enter was pressed for while the daemon was not connected: sent on
    #: connecting, unless the input box was changed meanwhile.
    send_when_connected: str | None = None
    #: What the last Esc cleared from the input box, until something else is typed.
    cleared_input: str | None = None
    #: The input text the `/` picker was closed for (it reopens when the text changes).
    picker_dismissed: str | None = None
    picker_index: int = 0
    #: The popup or list over the input box, if any: only ever one.
    overlay: Overlay | None = None
    #: True once the user chose to quit when the run ends.
    quit_after_run: bool = False
    #: Questions waiting, the one on screen first.
    asks: list[AskFrame] = attrs.field(factory=list)
    choice_index: int = 0
    #: What the user had typed when a question took over the input box.
    draft: str | None = None
    #: The pages of a `/pending` list received so far, while more are on their way.
    pending_pages: list[PendingTask] = attrs.field(factory=list)
    #: True while a `pending list` asked for after reconnecting is on its way: it is
    #: summed up in the notice box instead of opening the list.
    quiet_pending: bool = False
    #: What resuming each task of the `/pending` list will do, by session, as the daemon said;
    #: None while it is asked for. Asked for as the selection reaches a task.
    previews: dict[str, ResumePreview | None] = attrs.field(factory=dict)
    #: The pages of a `/sessions` list received so far, while more are on their way.
    sessions_pages: list[SessionItem] = attrs.field(factory=list)
    #: The session whose last messages were asked for, to be shown when they come.
    history_for: str | None = None
    #: The `models` request on its way, if any: its reply lists them or says what was set.
    models_asked: ModelsAction | None = None
    #: The model the window's session runs with, once the daemon said.
    model: str | None = None
    #: The turns `/rewind` listed last (their seqs, oldest first), for `/rewind N`.
    turns: tuple[int, ...] = ()
    #: The session a `/compact` was sent for, until the daemon says how it went.
    compacting: str | None = None
    #: True after a first Ctrl+C with no run: a second one quits.
    quit_armed: bool = False
    input_tokens: int = 0
    output_tokens: int = 0
    #: Of the input tokens, those read from the provider's prompt cache.
    cached_tokens: int = 0
    #: Of the output tokens, those the model spent reasoning.
    reasoning_tokens: int = 0
    #: What the session's tokens cost, as the daemon last said (None: not known).
    cost: float | None = None

    def count_tokens(self, usage: Sequence[RunTokens]) -> None:
        """The session's tokens as the store keeps them: they replace the counts so far."""
        total = TokenCount.total(run.tokens for run in usage)
        self.input_tokens = total.input_tokens
        self.output_tokens = total.output_tokens
        self.cached_tokens = total.cached_tokens
        self.reasoning_tokens = total.reasoning_tokens
        known = all(run.cost is not None for run in usage)
        self.cost = sum(run.cost or 0.0 for run in usage) if usage and known else None

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
            and self.overlay is None
            and self.picker_dismissed != self.input
            and bool(self.picker_items)
        )

    @property
    def popup_open(self) -> bool:
        """True when the cancel popup is showing."""
        return isinstance(self.overlay, StopPopup)

    @property
    def quit_popup_open(self) -> bool:
        """True when the popup of `/quit` during a run is showing."""
        return isinstance(self.overlay, QuitPopup)

    @property
    def ended_popup_open(self) -> bool:
        """True when a popup is showing that its run ended."""
        return isinstance(self.overlay, EndedPopup)

    @property
    def pending_open(self) -> bool:
        """True when the `/pending` list is showing."""
        return isinstance(self.overlay, PendingPicker)

    @property
    def sessions_open(self) -> bool:
        """True when the `/sessions` picker is showing."""
        return isinstance(self.overlay, SessionsPicker)

    @property
    def models_open(self) -> bool:
        """True when the `/model` picker is showing."""
        return isinstance(self.overlay, ModelPicker)

    @property
    def choosing(self) -> bool:
        """True when a confirmation's choices take the keys (no overlay above them)."""
        ask = self.ask
        return ask is not None and has_choices(ask) and self.overlay is None

    @property
    def masked(self) -> bool:
        """True when the input box is a masked field."""
        ask = self.ask
        return ask is not None and is_masked(ask)

    @property
    def input_locked(self) -> bool:
        """True when typing must not change the input box (a list or choices have the keys)."""
        return self.overlay is not None or self.choosing

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

    # -- small steps the transitions share ------------------------------------------------

    def close(self, *kinds: type[Overlay]) -> None:
        """Close the overlay when it is one of `kinds` (whichever it is when none are named)."""
        if self.overlay is not None and (not kinds or isinstance(self.overlay, kinds)):
            self.overlay = None

    def info(self, text: str) -> None:
        """Say `text` in the notice box."""
        self.notice = Notice(text, NoticeLevel.INFO)

    def error(self, text: str) -> None:
        """Say `text` in the notice box, as an error."""
        self.notice = Notice(text, NoticeLevel.ERROR)

    def add(self, kind: EntryKind, text: str, task: str | None = None) -> None:
        """Append an entry to the transcript, forgetting the oldest beyond the limit."""
        self.transcript.append(TranscriptEntry(kind, [text], task, serial=self.next_serial))
        self.next_serial += 1
        if len(self.transcript) > TRANSCRIPT_LIMIT:
            del self.transcript[: len(self.transcript) - TRANSCRIPT_LIMIT]

    def mark_shown(self) -> None:
        """Something of the run was shown: stopping it now asks first."""
        if self.run is not None:
            self.run.shown = True

    def push_ask(self, ask: AskFrame) -> list[Action]:
        """Queue a question; when it is the first, it takes over the input box."""
        self.asks.append(ask)
        if len(self.asks) > 1:
            return []
        self.choice_index = 0
        self.quit_armed = False
        if self.draft is None:
            self.draft = self.input
        if self.input:
            self.input = ""
            return [SetInput("")]
        return []

    def pop_ask(self, index: int = 0) -> list[Action]:
        """Remove a question; the next one takes over, or the saved draft comes back."""
        del self.asks[index]
        if index != 0:
            return []
        self.choice_index = 0
        if self.asks:
            self.input = ""
            return [SetInput("")]
        draft, self.draft = self.draft or "", None
        self.input = draft
        return [SetInput(draft)]

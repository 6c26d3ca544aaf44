"""The full-screen window: widgets that render `TuiState`, and the shell that runs its actions."""

from __future__ import annotations

import time
from collections.abc import Callable

import attrs
from prompt_toolkit.application import Application
from prompt_toolkit.buffer import Buffer
from prompt_toolkit.document import Document
from prompt_toolkit.filters import Condition
from prompt_toolkit.formatted_text import StyleAndTextTuples
from prompt_toolkit.history import InMemoryHistory
from prompt_toolkit.key_binding import merge_key_bindings
from prompt_toolkit.key_binding.defaults import load_key_bindings
from prompt_toolkit.layout import (
    ConditionalContainer,
    Dimension,
    Float,
    FloatContainer,
    HSplit,
    Layout,
    Window,
)
from prompt_toolkit.layout.controls import BufferControl, FormattedTextControl
from prompt_toolkit.layout.processors import (
    BeforeInput,
    ConditionalProcessor,
    PasswordProcessor,
)
from prompt_toolkit.styles import Style
from prompt_toolkit.widgets import Frame

from agentrt.frames import ClientFrame, DaemonFrame

from . import _state as st
from ._keys import load_tui_bindings
from ._state import (
    CHOICE_LABELS,
    POPUP_CHOICES,
    Action,
    EntryKind,
    NoticeLevel,
    Quit,
    RememberInput,
    Send,
    SetInput,
    TuiState,
)

STYLE = Style.from_dict(
    {
        "user": "bold ansicyan",
        "tool": "ansiyellow",
        "tool-result": "ansibrightblack",
        "info": "ansigreen",
        "error": "ansired",
        "notice": "bg:ansiblack",
        "notice.error": "bg:ansiblack ansired",
        "notice.info": "bg:ansiblack ansiwhite",
        "status": "reverse",
        "ask": "bold ansimagenta",
        "ask.error": "ansired",
        "picker": "bg:ansiblack ansiwhite",
        "picker.selected": "bg:ansiblue ansiwhite bold",
        "choice": "",
        "choice.selected": "reverse bold",
        "popup": "bg:ansiblack ansiwhite",
        "prompt": "bold",
    }
)

_PREFIX: dict[EntryKind, tuple[str, str]] = {
    EntryKind.USER: ("class:user", "> "),
    EntryKind.ASSISTANT: ("", ""),
    EntryKind.TOOL_CALL: ("class:tool", "* "),
    EntryKind.TOOL_RESULT: ("class:tool-result", "  = "),
    EntryKind.INFO: ("class:info", "-- "),
    EntryKind.ERROR: ("class:error", "!! "),
}


@attrs.define(eq=False)
class TuiApp:
    """The application shell: owns the widgets, carries out actions, receives frames.

    `send` hands a frame to the connection (it must not block); the clock is
    injectable for tests.
    """

    state: TuiState
    send: Callable[[ClientFrame], None]
    clock: Callable[[], float] = time.monotonic
    buffer: Buffer = attrs.field(init=False)
    application: Application[None] = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        state = self.state
        self.buffer = Buffer(
            history=InMemoryHistory(),
            multiline=False,
            read_only=Condition(lambda: state.input_locked),
            on_text_changed=lambda buf: self.apply(st.input_changed(state, buf.text)),
        )
        self.application = Application(
            layout=Layout(_build_layout(state, self.buffer, self.clock), focused_element=None),
            key_bindings=merge_key_bindings([load_key_bindings(), load_tui_bindings(state, self)]),
            style=STYLE,
            full_screen=True,
            mouse_support=False,
        )
        self.application.layout.focus(self.buffer)
        # A lone Esc is told from the start of a key sequence by this pause.
        self.application.ttimeoutlen = 0.05
        self.application.timeoutlen = 0.3

    def now(self) -> float:
        """The current time, as transitions record it."""
        return self.clock()

    def apply(self, actions: list[Action]) -> None:
        """Carry out the actions a transition returned, then redraw."""
        for action in actions:
            if isinstance(action, Send):
                self.send(action.frame)
            elif isinstance(action, SetInput):
                self.buffer.set_document(
                    Document(action.text, len(action.text)), bypass_readonly=True
                )
            elif isinstance(action, RememberInput):
                self.buffer.history.append_string(action.text)
            elif isinstance(action, Quit):
                future = self.application.future
                if future is not None and not future.done():
                    self.application.exit()
        self.application.invalidate()

    def receive(self, frame: DaemonFrame) -> None:
        """A frame from the daemon."""
        self.apply(st.on_frame(self.state, frame))

    def disconnected(self, reason: str) -> None:
        """The connection ended."""
        self.apply(st.disconnected(self.state, reason))

    def notify(self, text: str, *, error: bool = False) -> None:
        """Show a notice that does not come from a frame or key."""
        level = NoticeLevel.ERROR if error else NoticeLevel.INFO
        self.state.notice = st.Notice(text, level)
        self.application.invalidate()


# -- widgets -------------------------------------------------------------------------------


def _transcript(state: TuiState) -> StyleAndTextTuples:
    fragments: StyleAndTextTuples = []
    for entry in state.transcript:
        style, prefix = _PREFIX[entry.kind]
        fragments.append((style, prefix + entry.text + "\n"))
    # Keeps the newest line in view: the window scrolls to its cursor.
    fragments.append(("[SetCursorPosition]", ""))
    return fragments


def _notice(state: TuiState) -> StyleAndTextTuples:
    notice = state.notice
    if notice is None:
        return []
    style = "class:notice.error" if notice.level is NoticeLevel.ERROR else "class:notice.info"
    return [(style, notice.text), ("class:notice", "  (Esc closes)")]


def _ask(state: TuiState) -> StyleAndTextTuples:
    ask = state.ask
    if ask is None:
        return []
    waiting = f"  (+{len(state.asks) - 1} more)" if len(state.asks) > 1 else ""
    fragments: StyleAndTextTuples = [("class:ask", f"? {ask.prompt}{waiting}\n")]
    if ask.error:
        fragments.append(("class:ask.error", f"  ({ask.error})\n"))
    if st.has_choices(ask):
        for index, choice in enumerate(ask.choices):
            selected = index == state.choice_index
            style = "class:choice.selected" if selected else "class:choice"
            label = CHOICE_LABELS.get(choice, choice)
            fragments.append((style, _mark(f"{index + 1}. {label}", selected)))
            fragments.append(("", "  "))
        fragments.append(("", "\n(Up/Down or 1-3, Enter)"))
    elif ask.kind.value == "password":
        fragments.append(("", "Type the password and Enter; Enter on an empty field denies"))
    elif st.is_masked(ask):
        fragments.append(("", "The value is hidden as you type; Enter sends it"))
    else:
        fragments.append(("", "Type the answer and Enter"))
    return fragments


def _mark(label: str, selected: bool) -> str:
    """A choice, bracketed when highlighted (so it shows without colours too)."""
    return f"[{label}]" if selected else f" {label} "


def _picker(state: TuiState) -> StyleAndTextTuples:
    fragments: StyleAndTextTuples = []
    for index, (name, about) in enumerate(state.picker_items):
        selected = index == state.picker_index
        style = "class:picker.selected" if selected else "class:picker"
        fragments.append((style, f"{'>' if selected else ' '} {name:<10} {about} \n"))
    return fragments


def _popup(state: TuiState) -> StyleAndTextTuples:
    fragments: StyleAndTextTuples = [
        ("", "Stop this run?\n\n"),
        ("", "Yes: stop and discard the task\nPause: stop and keep it for /pending\n"),
        ("", "No: keep running\n\n"),
    ]
    for index, choice in enumerate(POPUP_CHOICES):
        selected = index == state.popup
        style = "class:choice.selected" if selected else "class:choice"
        fragments.append((style, _mark(choice, selected)))
        fragments.append(("", "  "))
    return fragments


def _pending(state: TuiState) -> StyleAndTextTuples:
    tasks = state.pending or []
    fragments: StyleAndTextTuples = [
        ("", "Paused tasks (Enter resumes, d discards, Esc closes)\n\n")
    ]
    for index, task in enumerate(tasks):
        selected = index == state.pending_index
        style = "class:choice.selected" if selected else "class:choice"
        what = f"asks: {task.question}" if task.question else task.input
        cause = f" ({task.cause.value})" if task.cause is not None else ""
        pointer = ">" if selected else " "
        fragments.append((style, f"{pointer} {task.session} {task.status}{cause}: {what[:60]} \n"))
    return fragments


def _status(state: TuiState, clock: Callable[[], float]) -> StyleAndTextTuples:
    return [("class:status", " " + st.status_text(state, clock()) + "  |  Esc stop  /help ")]


def _build_layout(state: TuiState, buffer: Buffer, clock: Callable[[], float]) -> FloatContainer:
    def text(get: Callable[[], StyleAndTextTuples]) -> FormattedTextControl:
        return FormattedTextControl(get, focusable=False)

    transcript = Window(text(lambda: _transcript(state)), wrap_lines=True, always_hide_cursor=True)
    notice = ConditionalContainer(
        Window(text(lambda: _notice(state)), wrap_lines=True, height=Dimension(max=12)),
        filter=Condition(lambda: state.notice is not None),
    )
    ask = ConditionalContainer(
        Window(text(lambda: _ask(state)), wrap_lines=True, height=Dimension(max=8)),
        filter=Condition(lambda: state.ask is not None),
    )
    picker = ConditionalContainer(
        Window(text(lambda: _picker(state)), height=Dimension(max=8)),
        filter=Condition(lambda: state.picker_open),
    )

    def prompt() -> StyleAndTextTuples:
        if state.ask is not None:
            return [("class:prompt", "answer> " if not state.masked else "hidden> ")]
        return [("class:prompt", "> ")]

    input_box = Window(
        BufferControl(
            buffer,
            input_processors=[
                ConditionalProcessor(PasswordProcessor(), Condition(lambda: state.masked)),
                BeforeInput(prompt),
            ],
        ),
        height=Dimension(min=1, max=5),
        wrap_lines=True,
    )
    status = Window(text(lambda: _status(state, clock)), height=1, style="class:status")
    body = HSplit([transcript, notice, ask, picker, input_box, status])
    popup = Float(
        ConditionalContainer(
            Frame(
                Window(text(lambda: _popup(state)), width=44),
                title="Stop the run",
                style="class:popup",
            ),
            filter=Condition(lambda: state.popup_open),
        )
    )
    pending = Float(
        ConditionalContainer(
            Frame(
                Window(text(lambda: _pending(state)), width=Dimension(min=40, max=100)),
                title="/pending",
                style="class:popup",
            ),
            filter=Condition(lambda: state.pending_open),
        )
    )
    return FloatContainer(body, floats=[popup, pending])

"""The full-screen window: widgets that render `TuiState`, and the shell that runs its actions."""

from __future__ import annotations

import asyncio
import math
import os
import time
from collections import defaultdict
from collections.abc import Callable
from collections.abc import Sequence
from typing import TYPE_CHECKING
from typing import TypeVar
from typing import cast

import attrs
from prompt_toolkit.application import Application
from prompt_toolkit.application.current import get_app
from prompt_toolkit.buffer import Buffer
from prompt_toolkit.document import Document
from prompt_toolkit.filters import Condition
from prompt_toolkit.formatted_text import StyleAndTextTuples
from prompt_toolkit.history import History
from prompt_toolkit.history import InMemoryHistory
from prompt_toolkit.key_binding import merge_key_bindings
from prompt_toolkit.key_binding.defaults import load_key_bindings
from prompt_toolkit.layout import CompletionsMenu
from prompt_toolkit.layout import ConditionalContainer
from prompt_toolkit.layout import Dimension
from prompt_toolkit.layout import Float
from prompt_toolkit.layout import FloatContainer
from prompt_toolkit.layout import HSplit
from prompt_toolkit.layout import Layout
from prompt_toolkit.layout import Window
from prompt_toolkit.layout.containers import Container
from prompt_toolkit.layout.controls import BufferControl
from prompt_toolkit.layout.controls import FormattedTextControl
from prompt_toolkit.layout.controls import UIContent
from prompt_toolkit.layout.controls import UIControl
from prompt_toolkit.layout.mouse_handlers import MouseHandlers
from prompt_toolkit.layout.processors import ConditionalProcessor
from prompt_toolkit.layout.processors import PasswordProcessor
from prompt_toolkit.layout.screen import _CHAR_CACHE
from prompt_toolkit.layout.screen import Char
from prompt_toolkit.layout.screen import Screen
from prompt_toolkit.layout.screen import WritePosition
from prompt_toolkit.mouse_events import MouseEvent
from prompt_toolkit.mouse_events import MouseEventType
from prompt_toolkit.styles import Style
from prompt_toolkit.widgets import Frame
from prompt_toolkit.widgets import SearchToolbar

from agentrt.protocol.frames import ClientFrame
from agentrt.protocol.frames import DaemonFrame
from agentrt.protocol.frames import ReasoningFrame
from agentrt.protocol.frames import TextFrame
from agentrt.protocol.frames import ToolCallDeltaFrame
from agentrt.protocol.frames import UsageFrame
from agentrt.protocol.frames import Welcome
from agentrt.vocab.reprs import mutable

from . import _paint
from . import _scroll
from . import _transitions_daemon
from . import _words
from ._attach import AttachCompleter
from ._attach import Attached
from ._attach import attach
from ._bindings import load_tui_bindings
from ._render import Line
from ._render import LineCache
from ._render import wrap_text
from ._state import WHEEL_LINES
from ._state import Action
from ._state import EndedPopup
from ._state import ModelPicker
from ._state import Notice
from ._state import NoticeLevel
from ._state import PendingPicker
from ._state import Quit
from ._state import QuitPopup
from ._state import RememberInput
from ._state import Send
from ._state import SessionsPicker
from ._state import SetInput
from ._state import StopPopup
from ._state import TranscriptEntry
from ._state import TuiState
from ._state import has_choices
from ._state import is_masked
from ._status import status_text
from ._transitions_keys import input_changed
from ._transitions_keys import send_when_connected
from ._words import CHOICE_LABELS
from ._words import POPUP_CHOICES
from ._words import QUIT_CHOICES
from ._words import files_text

if TYPE_CHECKING:
    from prompt_toolkit.key_binding.key_bindings import NotImplementedOrNone
    from prompt_toolkit.layout.controls import GetLinePrefixCallable

STYLE = Style.from_dict(
    {
        "user": "bold ansicyan",
        "agent": "ansimagenta",
        # The model's reasoning: dimmed, so the reply stands out.
        "reasoning": "ansibrightblack italic",
        "tool": "ansiyellow",
        "tool-result": "ansibrightblack",
        "info": "ansigreen",
        "error": "ansired",
        "help": "",
        "diff": "",
        "diff.file": "bold",
        "diff.hunk": "ansicyan",
        "diff.add": "ansigreen",
        "diff.remove": "ansired",
        "md.h1": "bold underline",
        "md.heading": "bold",
        "md.strong": "bold",
        "md.em": "italic",
        "md.strike": "strike",
        "md.code": "ansicyan",
        "md.code-block": "",
        "md.link": "underline",
        "md.url": "ansibrightblack",
        "md.quote": "ansibrightblack",
        "md.rule": "ansibrightblack",
        "md.bullet": "bold",
        "more": "reverse",
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

#: The last line of the transcript while reading back.
MORE_BELOW = " ↓ more below: PageDown or the mouse wheel "

#: What streams in (pieces of a reply or of reasoning, token counts) and the status line's
#: spinner and time while a run goes are drawn together, a redraw at most every so often:
#: `REDRAW_SHARE` times what the last redraw cost (so redrawing takes at most a 75th
#: of a core), and between `STREAM_INTERVAL` (30 a second) and `STREAM_INTERVAL_MAX`.
#: Keys are drawn at once.
REDRAW_SHARE = 75
STREAM_INTERVAL = 1 / 30
STREAM_INTERVAL_MAX = 0.5
#: How often the countdown to the next connection attempt moves while the link is down.
LINK_TICK = 1.0
#: The frames that only add to what streams in: drawn together, at most every
#: `interval`.
_STREAMED = (TextFrame, ReasoningFrame, ToolCallDeltaFrame, UsageFrame)


@mutable(eq=False)
class TuiApp:
    """The application shell: owns the widgets, carries out actions, receives frames.

    `send` hands a frame to the connection (it must not block); `history` keeps
    the sent messages (in memory unless given a file-backed one); the clocks are
    injectable for tests: `clock` for timings, `wall_clock` for the age of tasks.
    """

    state: TuiState
    send: Callable[[ClientFrame], None]
    clock: Callable[[], float] = time.monotonic
    wall_clock: Callable[[], float] = time.time
    history: History = attrs.field(factory=InMemoryHistory)
    buffer: Buffer = attrs.field(init=False)
    transcript: TranscriptControl = attrs.field(init=False)
    application: Application[None] = attrs.field(init=False)
    _history_warned: bool = attrs.field(default=False, init=False)
    #: The next move of the status line, while something goes on; None when idle.
    _ticking: asyncio.TimerHandle | None = attrs.field(default=None, init=False)
    #: The redraw due for what streamed in since the last one, if any.
    _redraw_due: asyncio.TimerHandle | None = attrs.field(default=None, init=False)
    #: When the screen was last drawn (the event loop's clock).
    _drawn_at: float = attrs.field(default=-math.inf, init=False)
    #: The time between two redraws of what streams in, from what the last one cost.
    interval: float = attrs.field(default=STREAM_INTERVAL, init=False)
    _drawing: float = attrs.field(default=0.0, init=False)

    def __attrs_post_init__(self) -> None:
        state = self.state
        self.buffer = Buffer(
            history=self.history,
            multiline=True,
            # Paths after @, as they are typed (see `agenttui._attach`).
            completer=AttachCompleter(lambda: state.cwd),
            complete_while_typing=Condition(lambda: not state.input_locked and not state.masked),
            read_only=Condition(lambda: state.input_locked),
            on_text_changed=lambda buf: self.apply(input_changed(state, buf.text)),
        )
        self.transcript = TranscriptControl(state)
        self.application = Application(
            layout=Layout(_build_layout(self), focused_element=None),
            key_bindings=merge_key_bindings([load_key_bindings(), load_tui_bindings(state, self)]),
            style=STYLE,
            full_screen=True,
            # For the mouse wheel; most terminals still select text with Shift held.
            mouse_support=True,
            # The window runs in the main thread, so SIGWINCH says when its size changes:
            # no polling for it (an idle window does no work at all).
            terminal_size_polling_interval=None,
        )
        self.application.layout.focus(self.buffer)
        # Keys are read as the terminal sends them: a lone Esc arrives alone and acts at
        # once, while Alt+Enter (Esc and Enter in one read) is one key. No pause is spent
        # waiting for a longer key sequence that a person could not type anyway.
        self.application.ttimeoutlen = 0
        self.application.timeoutlen = 0
        # A redraw compares only the rows that changed with the screen before (a key typed
        # leaves the transcript's rows as they were).
        _paint.install()
        self.application.before_render += self._drawing_starts
        self.application.after_render += self._drawn

    def now(self) -> float:
        """The current time, as transitions record it."""
        return self.clock()

    def apply(self, actions: list[Action], *, soon: bool = False) -> None:
        """Carry out the actions a transition returned, then redraw (`soon`: with what else
        streams in, at most every `interval`)."""
        for action in actions:
            if isinstance(action, Send):
                self.send(action.frame)
            elif isinstance(action, SetInput):
                self.buffer.set_document(
                    Document(action.text, len(action.text)), bypass_readonly=True
                )
            elif isinstance(action, RememberInput):
                self._remember(action.text)
            elif isinstance(action, Quit):
                future = self.application.future
                if future is not None and not future.done():
                    self.application.exit()
        if soon:
            self._redraw_soon()
        else:
            # Drawn now: a redraw due for what streamed in has nothing left to do.
            if self._redraw_due is not None:
                self._redraw_due.cancel()
                self._redraw_due = None
            self.application.invalidate()
        self._animate()

    def _drawing_starts(self, _: object) -> None:
        self._drawing = time.thread_time()

    def _drawn(self, _: object) -> None:
        cost = time.thread_time() - self._drawing
        self.interval = min(max(cost * REDRAW_SHARE, STREAM_INTERVAL), STREAM_INTERVAL_MAX)
        loop = self.application.loop
        if loop is not None:
            self._drawn_at = loop.time()

    def _redraw_soon(self) -> None:
        """Redraw once `interval` has passed since the last redraw."""
        loop = self.application.loop
        if loop is None or loop.is_closed():
            self.application.invalidate()
            return
        if self._redraw_due is None:
            delay = max(0.0, self._drawn_at + self.interval - loop.time())
            self._redraw_due = loop.call_later(delay, self._redraw_now)

    def _redraw_now(self) -> None:
        self._redraw_due = None
        self.application.invalidate()

    def _tick_pause(self) -> float | None:
        """How often the status line changes by itself now; None when it does not."""
        state = self.state
        if state.run is not None:
            return self.interval
        if not state.connected and state.retry_at is not None:
            return LINK_TICK
        return None

    def _animate(self) -> None:
        """Keep the status line moving while a run goes or a reconnection is counted down.

        Nothing is scheduled otherwise: an idle window does no work until a key or a
        frame comes.
        """
        pause = self._tick_pause()
        if pause is None and self._ticking is not None:
            self._ticking.cancel()
            self._ticking = None
        loop = self.application.loop
        if self._ticking is not None or loop is None or loop.is_closed():
            return
        if pause is not None:
            self._ticking = loop.call_later(pause, self._tick)

    def _tick(self) -> None:
        self._ticking = None
        if self._tick_pause() is not None:
            self._redraw_soon()
            self._animate()

    @property
    def scheduled(self) -> int:
        """How many redraws or status line moves are scheduled (none when idle)."""
        return (self._ticking is not None) + (self._redraw_due is not None)

    def _remember(self, text: str) -> None:
        strings = self.history.get_strings()
        if not strings or strings[-1] != text:
            self.history.append_string(text)
        # The input box reads the history again, the new message included, for Up.
        self.buffer.reset()
        error = getattr(self.history, "error", None)
        if error and not self._history_warned:
            self._history_warned = True
            self.notify(f"The input history is not saved: {error}", error=True)

    def scroll(self, *, lines: int = 0, pages: int = 0) -> None:
        """Scroll the transcript (negative: back)."""
        self.transcript.scroll(lines=lines, pages=pages)
        self.application.invalidate()

    def attach(self, text: str) -> Attached:
        """`text` with the files it names (``@path``) attached, from the window's folder."""
        return attach(text, self.state.cwd or os.getcwd())

    @staticmethod
    def streamed(frame: DaemonFrame) -> bool:
        """True for a frame that only adds to what streams in (drawn with others, later)."""
        return isinstance(frame, _STREAMED)

    def receive(self, frame: DaemonFrame) -> None:
        """A frame from the daemon; what streams in is drawn a few times a second.

        On the `Welcome`, a message held for it is sent.
        """
        self.apply(_transitions_daemon.on_frame(self.state, frame), soon=self.streamed(frame))
        if isinstance(frame, Welcome) and self.state.send_when_connected is not None:
            self.apply(send_when_connected(self.state, self.now(), self.attach))

    def disconnected(self, reason: str, retry_at: float | None = None) -> None:
        """The connection ended; the next attempt is due at `retry_at` (on `clock`)."""
        self.apply(_transitions_daemon.disconnected(self.state, reason, retry_at))

    def connect_failed(self, reason: str, retry_at: float) -> None:
        """A connection attempt failed; the next is due at `retry_at` (on `clock`)."""
        self.apply(_transitions_daemon.connect_failed(self.state, reason, retry_at))

    def gave_up(self, text: str, retry_at: float) -> None:
        """The daemon failed to start too often: no more starts; `text` says why and what to do."""
        self.apply(_transitions_daemon.gave_up_starting(self.state, text, retry_at))

    def starting_daemon(self, where: str) -> None:
        """No daemon answered: one is being started."""
        self.apply(_transitions_daemon.starting_daemon(self.state, where))

    def daemon_started(self, text: str) -> None:
        """A daemon was started for this window; `text` says which and where its log is."""
        self.apply(_transitions_daemon.daemon_started(self.state, text))

    def notify(self, text: str, *, error: bool = False) -> None:
        """Show a notice that does not come from a frame or key."""
        level = NoticeLevel.ERROR if error else NoticeLevel.INFO
        self.state.notice = Notice(text, level)
        self.application.invalidate()

    def fail(self, error: BaseException) -> None:
        """End the window with `error` (raised from `Application.run`)."""
        future = self.application.future
        if future is not None and not future.done():
            self.application.exit(exception=error)


class TranscriptControl(UIControl):
    """The transcript: entries laid out as lines, the newest in view unless reading back."""

    def __init__(self, state: TuiState) -> None:
        self.state = state
        self.cache = LineCache()
        self.width = 80
        self.height = 24

    def lines(self, entry: TranscriptEntry) -> list[Line]:
        """The screen lines of `entry` at the current width.

        The last entry grows while a run goes (its reply streams in): it is laid out
        a piece at a time until then, and whole once.
        """
        entries = self.state.transcript
        growing = self.state.run is not None and entry is entries[-1]
        return self.cache.lines(entry, self.width, growing=growing)

    def last(self, entry: TranscriptEntry, count: int) -> list[Line]:
        """The last `count` screen lines of `entry` (see `lines`): a long reply lays out
        only what they show."""
        entries = self.state.transcript
        growing = self.state.run is not None and entry is entries[-1]
        return self.cache.last(entry, self.width, count, growing=growing)

    def count(self, entry: TranscriptEntry) -> int:
        """Screen lines of `entry` at the current width."""
        return len(self.lines(entry))

    def create_content(self, width: int, height: int) -> UIContent:
        """The visible lines; remembers the size for scrolling."""
        self.width, self.height = max(width, 1), max(height, 1)
        rows = cast(list[StyleAndTextTuples], self.rows())
        return UIContent(get_line=rows.__getitem__, line_count=len(rows), show_cursor=False)

    def rows(self) -> list[Line]:
        """The lines on screen: the last screenful, or the screenful read back to."""
        entries = self.state.transcript
        if not entries:
            return []
        self.cache.forget_before(entries[0].serial)
        height = self.height
        top = _scroll.scroll_top(self.state, self.count, height)
        rows: list[Line] = []
        if top is None:
            index = len(entries) - 1
            while index >= 0 and len(rows) < height:
                rows[:0] = self.last(entries[index], height - len(rows))
                index -= 1
            return rows[-height:]
        index, line = top
        while index < len(entries) and len(rows) < height - 1:
            rows += self.lines(entries[index])[line:]
            index += 1
            line = 0
        rows = rows[: height - 1]
        marker = MORE_BELOW[: self.width].ljust(self.width)
        rows.append([("class:more", marker)])
        return rows

    def scroll(self, *, lines: int = 0, pages: int = 0) -> None:
        """Scroll by lines or pages (negative: back)."""
        if pages:
            _scroll.scroll_pages(self.state, pages, self.count, self.height)
        if lines:
            _scroll.scroll_by(self.state, lines, self.count, self.height)

    def mouse_handler(self, mouse_event: MouseEvent) -> NotImplementedOrNone:
        """The mouse wheel scrolls the transcript."""
        if mouse_event.event_type is MouseEventType.SCROLL_UP:
            self.scroll(lines=-WHEEL_LINES)
        elif mouse_event.event_type is MouseEventType.SCROLL_DOWN:
            self.scroll(lines=WHEEL_LINES)
        else:
            return NotImplemented
        get_app().invalidate()
        return None

    def is_focusable(self) -> bool:
        """The keys stay with the input box."""
        return False


class TranscriptView(Container):
    """The transcript drawn straight into the screen, each line's cells made once.

    A `Window` would copy every character of every visible line into the screen at
    each redraw; the lines of the transcript rarely change, so their cells are kept
    (for the lines on screen) and a redraw copies each line's cells in one step.
    """

    def __init__(self, control: TranscriptControl) -> None:
        self.control = control
        self._cells: dict[int, tuple[Line, int, dict[int, Char]]] = {}

    def reset(self) -> None:
        """Nothing to reset."""

    def preferred_width(self, max_available_width: int) -> Dimension:
        """Any width."""
        return Dimension()

    def preferred_height(self, width: int, max_available_height: int) -> Dimension:
        """Every line the other parts leave."""
        return Dimension(min=1, preferred=10**6)

    def write_to_screen(
        self,
        screen: Screen,
        mouse_handlers: MouseHandlers,
        write_position: WritePosition,
        parent_style: str,
        erase_bg: bool,
        z_index: int | None,
    ) -> None:
        """The visible lines of the transcript (see `TranscriptControl.rows`)."""
        where = write_position
        control = self.control
        control.width, control.height = max(where.width, 1), max(where.height, 1)
        cells: dict[int, tuple[Line, int, dict[int, Char]]] = {}
        rows = screen.data_buffer
        # A row nothing was drawn on yet is made with its cells in one step, with the
        # screen's own default for the cells it leaves empty.
        make_row = rows.default_factory
        empty = make_row().default_factory if make_row is not None else None
        for y, line in enumerate(control.rows()[: where.height]):
            known = self._cells.get(id(line))
            if known is None or known[0] is not line or known[1] != where.xpos:
                known = (line, where.xpos, _cells(line, where.xpos, where.width))
            cells[id(line)] = known
            if empty is not None and where.ypos + y not in rows:
                rows[where.ypos + y] = defaultdict(empty, known[2])
            else:
                rows[where.ypos + y].update(known[2])
        self._cells = cells
        screen.height = max(screen.height, where.ypos + where.height)
        # The whole view takes the mouse: one row of handlers, copied to each row in one
        # step (`MouseHandlers.set_mouse_handler_for_range` sets them a cell at a time, a
        # tenth of a redraw with the transcript filling the window).
        handlers = dict.fromkeys(range(where.xpos, where.xpos + where.width), control.mouse_handler)
        by_row = mouse_handlers.mouse_handlers
        for y in range(where.ypos, where.ypos + where.height):
            by_row[y].update(handlers)

    def get_children(self) -> list[Container]:
        """None."""
        return []


def _cells(line: Line, xpos: int, width: int) -> dict[int, Char]:
    """The screen cells of `line` from column `xpos`, as prompt_toolkit's `Window` makes them."""
    cells: dict[int, Char] = {}
    x = 0
    last: Char | None = None
    for style, text in line:
        for c in text:
            char = _CHAR_CACHE[c, style]
            if char.width == 0 and last is not None:
                # A combining character joins the one before it.
                last = cells[xpos + x - 1] = Char(last.char + c, last.style)
                continue
            if x + char.width > width:
                return cells
            cells[xpos + x] = last = char
            for i in range(1, char.width):
                cells[xpos + x + i] = _CHAR_CACHE["", style]
            x += char.width
    return cells


# -- widgets -------------------------------------------------------------------------------


class WrappedText(UIControl):
    """Formatted text wrapped between words at the width it is given (notices, questions)."""

    def __init__(self, get: Callable[[], StyleAndTextTuples]) -> None:
        self.get = get

    def _lines(self, width: int) -> list[StyleAndTextTuples]:
        fragments = [(fragment[0], fragment[1]) for fragment in self.get()]
        return cast(list[StyleAndTextTuples], wrap_text(fragments, max(width, 1)))

    def preferred_height(
        self,
        width: int,
        max_available_height: int,
        wrap_lines: bool,
        get_line_prefix: GetLinePrefixCallable | None,
    ) -> int | None:
        """As many lines as the wrapped text takes."""
        return len(self._lines(width))

    def create_content(self, width: int, height: int | None) -> UIContent:
        """The wrapped lines."""
        lines = self._lines(width)
        return UIContent(get_line=lines.__getitem__, line_count=len(lines), show_cursor=False)


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
    if ask.diff:
        fragments.append(("", _diff_summary(ask.diff)))
    if ask.error:
        fragments.append(("class:ask.error", f"  ({ask.error})\n"))
    if has_choices(ask):
        for index, choice in enumerate(ask.choices):
            selected = index == state.choice_index
            style = "class:choice.selected" if selected else "class:choice"
            label = CHOICE_LABELS.get(choice, choice)
            fragments.append((style, _mark(f"{index + 1}. {label}", selected)))
            fragments.append(("", "  "))
        digits = f"1-{len(ask.choices)}" if len(ask.choices) > 1 else "1"
        fragments.append(("", f"\n(Left/Right or {digits}, Enter)"))
    elif ask.kind.value == "password":
        fragments.append(("", "Type the password and Enter; Enter on an empty field denies"))
    elif is_masked(ask):
        fragments.append(("", "The value is hidden as you type; Enter sends it"))
    else:
        fragments.append(("", "Type the answer and Enter"))
    return fragments


def _diff_summary(diff: str) -> str:
    """What the question says of its diff, which is in the transcript above it."""
    lines = diff.split("\n")
    added = sum(1 for line in lines if line.startswith("+") and not line.startswith("+++ "))
    removed = sum(1 for line in lines if line.startswith("-") and not line.startswith("--- "))
    return f"  (the change, +{added} -{removed} lines, is shown above)\n"


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


def _choices(choices: tuple[str, ...], highlighted: int | None) -> StyleAndTextTuples:
    fragments: StyleAndTextTuples = []
    for index, choice in enumerate(choices):
        selected = index == highlighted
        style = "class:choice.selected" if selected else "class:choice"
        fragments.append((style, _mark(choice, selected)))
        fragments.append(("", "  "))
    return fragments


def _popup(state: TuiState) -> StyleAndTextTuples:
    changed = files_text(state.run.files if state.run is not None else None)
    return [
        ("", "Stop this run?\n\n"),
        ("", "Yes: stop and discard the task\n"),
        ("", f"Undo: also put back {changed}\n"),
        ("", "Pause: stop and keep it for /pending\n"),
        ("", "No: keep running\n\n"),
        *_choices(POPUP_CHOICES, _highlighted(state, StopPopup)),
    ]


def _quit_popup(state: TuiState) -> StyleAndTextTuples:
    return [
        ("", "A run is in progress. Quit anyway?\n\n"),
        ("", "Pause and quit: keep its task for /pending\n"),
        ("", "Stop and quit: discard its task\nCancel: stay here\n\n"),
        *_choices(QUIT_CHOICES, _highlighted(state, QuitPopup)),
    ]


def _highlighted(state: TuiState, kind: type[StopPopup | QuitPopup]) -> int | None:
    overlay = state.overlay
    return overlay.highlighted if isinstance(overlay, kind) else None


def _ended_popup(state: TuiState) -> StyleAndTextTuples:
    ended = state.overlay
    if not isinstance(ended, EndedPopup):
        return []
    if ended.quitting:
        return [("", ended.text + "\n\n"), ("class:choice.selected", "[Quit]"), ("", "  Esc stays")]
    return [("", ended.text + "\n\n"), ("class:choice.selected", "[OK]")]


_Picked = TypeVar("_Picked", PendingPicker, SessionsPicker, ModelPicker)


def _picker_list(
    state: TuiState,
    kind: type[_Picked],
    title: str,
    lines: Callable[[_Picked], list[str]],
    *,
    follow: bool = False,
) -> StyleAndTextTuples:
    """The list of a picker of `kind` (see `_list`); only its title while none is open."""
    picker = state.overlay
    if not isinstance(picker, kind):
        return _list(title, [], -1)
    return _list(title, lines(picker), picker.index, follow=follow)


def _pending(state: TuiState, wall_now: float) -> StyleAndTextTuples:
    fragments = _picker_list(
        state,
        PendingPicker,
        "Paused tasks (Enter resumes, d discards, Esc closes)",
        lambda picker: [_words.pending_line(task, wall_now) for task in picker.tasks],
    )
    picker = state.overlay
    if not isinstance(picker, PendingPicker):
        return fragments
    # What resuming the selected task will do, in the words every front-end uses.
    session = picker.tasks[picker.index].session
    if session in state.previews:
        preview = state.previews[session]
        said = _words.preview_text(preview) if preview is not None else _words.PREVIEW_ASKED
        fragments.append(("class:preview", "\n" + said))
    return fragments


def _sessions(state: TuiState, wall_now: float) -> StyleAndTextTuples:
    # The window scrolls to keep the selected item in view: a long list stays usable.
    return _picker_list(
        state,
        SessionsPicker,
        "Earlier conversations (Enter continues one here, Esc closes)",
        lambda picker: [_words.session_line(item, wall_now) for item in picker.items],
        follow=True,
    )


def _models(state: TuiState) -> StyleAndTextTuples:
    return _picker_list(
        state,
        ModelPicker,
        "Models (Enter switches this conversation to one, Esc closes)",
        lambda picker: [_words.model_line(item, picker.current) for item in picker.models],
        follow=True,
    )


def _list(
    title: str, lines: Sequence[str], index: int, *, follow: bool = False
) -> StyleAndTextTuples:
    """`title`, then `lines` one a row, the one at `index` highlighted (with the cursor: `follow`)."""
    fragments: StyleAndTextTuples = [("", title + "\n\n")]
    for n, line in enumerate(lines):
        selected = n == index
        if selected and follow:
            fragments.append(("[SetCursorPosition]", ""))
        style = "class:choice.selected" if selected else "class:choice"
        fragments.append((style, f"{'>' if selected else ' '} {line} \n"))
    return fragments


def _status(state: TuiState, clock: Callable[[], float]) -> StyleAndTextTuples:
    return [("class:status", " " + status_text(state, clock()) + "  |  Esc stop  /help ")]


def _float(
    body: Callable[[], StyleAndTextTuples],
    title: str,
    shown: Callable[[], bool],
    width: int | Dimension,
    *,
    height: Dimension | None = None,
    wrap_lines: bool = True,
    always_hide_cursor: bool = False,
) -> Float:
    """A framed popup of `body`, shown while `shown` says so."""
    return Float(
        ConditionalContainer(
            Frame(
                Window(
                    FormattedTextControl(body, focusable=False),
                    width=width,
                    height=height,
                    wrap_lines=wrap_lines,
                    always_hide_cursor=always_hide_cursor,
                ),
                title=title,
                style="class:popup",
            ),
            filter=Condition(shown),
        )
    )


def _build_layout(app: TuiApp) -> FloatContainer:
    state, buffer = app.state, app.buffer

    def text(get: Callable[[], StyleAndTextTuples]) -> FormattedTextControl:
        return FormattedTextControl(get, focusable=False)

    # It takes every line the other parts leave: its preferred height is "all of them".
    transcript = TranscriptView(app.transcript)
    notice = ConditionalContainer(
        Window(WrappedText(lambda: _notice(state)), height=Dimension(max=12)),
        filter=Condition(lambda: state.notice is not None),
    )
    ask = ConditionalContainer(
        Window(WrappedText(lambda: _ask(state)), height=Dimension(max=8)),
        filter=Condition(lambda: state.ask is not None),
    )
    picker = ConditionalContainer(
        Window(text(lambda: _picker(state)), height=Dimension(max=8)),
        filter=Condition(lambda: state.picker_open),
    )

    def prompt(line: int, wrapped: int) -> StyleAndTextTuples:
        if line or wrapped:
            return [("class:prompt", "  ")]
        if state.ask is not None:
            return [("class:prompt", "answer> " if not state.masked else "hidden> ")]
        return [("class:prompt", "> ")]

    search = SearchToolbar(
        forward_search_prompt="search history: ",
        backward_search_prompt="search history (Ctrl+R: older, Enter: take it): ",
        ignore_case=True,
    )
    input_box = Window(
        BufferControl(
            buffer,
            input_processors=[
                ConditionalProcessor(PasswordProcessor(), Condition(lambda: state.masked)),
            ],
            search_buffer_control=search.control,
            # While Ctrl+R searches, the input box shows the message found so far.
            preview_search=True,
        ),
        height=Dimension(min=1, max=8),
        wrap_lines=True,
        get_line_prefix=prompt,
    )
    status = Window(text(lambda: _status(state, app.clock)), height=1, style="class:status")
    body = HSplit([transcript, notice, ask, picker, input_box, search, status])
    floats = [
        _float(lambda: _popup(state), "Stop the run", lambda: state.popup_open, 44),
        _float(lambda: _quit_popup(state), "Quit", lambda: state.quit_popup_open, 56),
        _float(lambda: _ended_popup(state), "The run ended", lambda: state.ended_popup_open, 50),
        _float(
            lambda: _pending(state, app.wall_clock()),
            "/pending",
            lambda: state.pending_open,
            Dimension(min=40, max=110),
        ),
        _float(
            lambda: _sessions(state, app.wall_clock()),
            "/sessions",
            lambda: state.sessions_open,
            Dimension(min=40, max=110),
            height=Dimension(max=24),
            wrap_lines=False,
            always_hide_cursor=True,
        ),
        _float(
            lambda: _models(state),
            "/model",
            lambda: state.models_open,
            Dimension(min=40, max=110),
            height=Dimension(max=24),
            always_hide_cursor=True,
        ),
    ]
    # The paths that complete the @ word being typed, under the cursor.
    floats.append(Float(xcursor=True, ycursor=True, content=CompletionsMenu(max_height=8)))
    return FloatContainer(body, floats=floats)

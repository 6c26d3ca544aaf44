"""The window's key bindings: thin handlers that feed keys to the state's transitions."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from prompt_toolkit.filters import Condition
from prompt_toolkit.filters import is_searching
from prompt_toolkit.key_binding import ConditionalKeyBindings
from prompt_toolkit.key_binding import KeyBindings
from prompt_toolkit.key_binding import KeyPressEvent

from . import _transitions_keys as on_key
from ._attach import Attached
from ._state import Action
from ._state import TuiState
from ._transitions_commands import want_preview


class Dispatcher(Protocol):
    """What the bindings need from the shell: carry out actions, read the clock, scroll."""

    def apply(self, actions: list[Action]) -> None:
        """Carry out the actions a transition returned."""

    def now(self) -> float:
        """The current time, for transitions that record it."""

    def scroll(self, *, lines: int = 0, pages: int = 0) -> None:
        """Scroll the transcript (negative: back)."""

    def attach(self, text: str) -> Attached:
        """`text` with the files it names (``@path``) attached; `AttachError` if one cannot be."""


def load_tui_bindings(state: TuiState, dispatcher: Dispatcher) -> ConditionalKeyBindings:
    """The bindings of the window. Every filter reads `state`; every handler calls a transition.

    While Ctrl+R searches the history, the search has the keys (Enter takes the
    match, Esc or Ctrl+C leaves the search), so these bindings step aside.
    """
    kb = KeyBindings()

    popup = Condition(lambda: state.popup_open)
    quit_popup = Condition(lambda: state.quit_popup_open)
    pending = Condition(lambda: state.pending_open)
    sessions = Condition(lambda: state.sessions_open)
    models = Condition(lambda: state.models_open)
    picker = Condition(lambda: state.picker_open)
    choosing = Condition(lambda: state.choosing)
    in_list = popup | quit_popup | pending | sessions | models | picker | choosing
    sideways = popup | quit_popup | choosing
    empty_input = Condition(lambda: not state.input)
    editable = Condition(lambda: not state.input_locked and not state.masked)
    restorable = Condition(lambda: state.can_restore_input)

    def run(transition: Callable[[TuiState], list[Action]]) -> Callable[[KeyPressEvent], None]:
        def handler(event: KeyPressEvent) -> None:
            dispatcher.apply(transition(state))

        return handler

    # Not eager: Esc followed by Enter in the same read is Alt+Enter. A lone Esc still acts
    # at once, because the application waits no time for a longer sequence.
    kb.add("escape")(run(on_key.press_escape))
    kb.add("c-c")(run(on_key.press_ctrl_c))
    kb.add("c-d", filter=empty_input)(run(on_key.press_ctrl_d))
    kb.add("tab", filter=picker)(run(on_key.press_tab))
    kb.add("c-_", filter=restorable)(run(on_key.restore_input))

    @kb.add("enter")
    def _enter(event: KeyPressEvent) -> None:
        completing = event.current_buffer.complete_state
        if completing is not None and completing.current_completion is not None:
            # Enter takes the path highlighted in the @ completions; the next one sends.
            event.current_buffer.apply_completion(completing.current_completion)
            return
        dispatcher.apply(on_key.press_enter(state, dispatcher.now(), dispatcher.attach))

    @kb.add("escape", "enter", filter=editable)
    @kb.add("c-j", filter=editable)
    def _newline(event: KeyPressEvent) -> None:
        event.current_buffer.insert_text("\n")

    @kb.add("up", filter=in_list)
    def _up(event: KeyPressEvent) -> None:
        on_key.press_up(state)
        # A move in the /pending list asks what resuming the task it reaches will do.
        dispatcher.apply(want_preview(state))

    @kb.add("down", filter=in_list)
    def _down(event: KeyPressEvent) -> None:
        on_key.press_down(state)
        dispatcher.apply(want_preview(state))

    @kb.add("left", filter=sideways)
    def _left(event: KeyPressEvent) -> None:
        on_key.press_left(state)

    @kb.add("right", filter=sideways)
    def _right(event: KeyPressEvent) -> None:
        on_key.press_right(state)

    @kb.add("pageup")
    def _page_up(event: KeyPressEvent) -> None:
        dispatcher.scroll(pages=-1)

    @kb.add("pagedown")
    def _page_down(event: KeyPressEvent) -> None:
        dispatcher.scroll(pages=1)

    def hotkey(key: str) -> Callable[[KeyPressEvent], None]:
        def handler(event: KeyPressEvent) -> None:
            dispatcher.apply(on_key.press_hotkey(state, key))

        return handler

    for key in ("y", "u", "p", "n", "Y", "U", "P", "N"):
        kb.add(key, filter=popup)(hotkey(key))
    for key in ("p", "s", "c", "P", "S", "C"):
        kb.add(key, filter=quit_popup)(hotkey(key))
    for key in ("d", "delete"):
        kb.add(key, filter=pending)(hotkey("d"))
    for digit in "123456789":
        kb.add(digit, filter=choosing)(hotkey(digit))
    return ConditionalKeyBindings(kb, ~is_searching)

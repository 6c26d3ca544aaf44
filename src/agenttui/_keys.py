"""The window's key bindings: thin handlers that feed keys to the state's transitions."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from prompt_toolkit.filters import Condition
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent

from . import _state as st
from ._state import Action, TuiState


class Dispatcher(Protocol):
    """What the bindings need from the shell: carry out actions, read the clock."""

    def apply(self, actions: list[Action]) -> None:
        """Carry out the actions a transition returned."""

    def now(self) -> float:
        """The current time, for transitions that record it."""


def load_tui_bindings(state: TuiState, dispatcher: Dispatcher) -> KeyBindings:
    """The bindings of the window. Every filter reads `state`; every handler calls a transition."""
    kb = KeyBindings()

    popup = Condition(lambda: state.popup_open)
    pending = Condition(lambda: state.pending_open)
    picker = Condition(lambda: state.picker_open)
    choosing = Condition(lambda: state.choosing)
    in_list = popup | pending | picker | choosing
    empty_input = Condition(lambda: not state.input)

    def run(transition: Callable[[TuiState], list[Action]]) -> Callable[[KeyPressEvent], None]:
        def handler(event: KeyPressEvent) -> None:
            dispatcher.apply(transition(state))

        return handler

    # Eager: a lone Esc must act as soon as it is read, not wait for a longer key sequence.
    kb.add("escape", eager=True)(run(st.press_escape))
    kb.add("c-c")(run(st.press_ctrl_c))
    kb.add("c-d", filter=empty_input)(run(st.press_ctrl_d))
    kb.add("tab", filter=picker)(run(st.press_tab))

    @kb.add("enter")
    def _enter(event: KeyPressEvent) -> None:
        dispatcher.apply(st.press_enter(state, dispatcher.now()))

    @kb.add("up", filter=in_list)
    @kb.add("left", filter=popup)
    def _up(event: KeyPressEvent) -> None:
        st.press_up(state)

    @kb.add("down", filter=in_list)
    @kb.add("right", filter=popup)
    def _down(event: KeyPressEvent) -> None:
        st.press_down(state)

    def hotkey(key: str) -> Callable[[KeyPressEvent], None]:
        def handler(event: KeyPressEvent) -> None:
            dispatcher.apply(st.press_hotkey(state, key))

        return handler

    for key in ("y", "p", "n", "Y", "P", "N"):
        kb.add(key, filter=popup)(hotkey(key))
    for key in ("d", "delete"):
        kb.add(key, filter=pending)(hotkey("d"))
    for digit in "123456789":
        kb.add(digit, filter=choosing)(hotkey(digit))
    return kb

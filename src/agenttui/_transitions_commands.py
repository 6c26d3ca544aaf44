"""Transitions for the `/` commands and for what is picked in the lists they open."""

from __future__ import annotations

from agentrt.protocol.frames import ModelsAction
from agentrt.protocol.frames import ModelsRequest
from agentrt.protocol.frames import PendingAction
from agentrt.protocol.frames import PendingRequest
from agentrt.protocol.frames import SessionsAction
from agentrt.protocol.frames import SessionsRequest

from ._state import HISTORY_SHOWN
from ._state import SESSIONS_PAGE
from ._state import Action
from ._state import Anchor
from ._state import EntryKind
from ._state import ModelPicker
from ._state import PendingPicker
from ._state import Quit
from ._state import QuitPopup
from ._state import RunState
from ._state import Send
from ._state import SessionsPicker
from ._state import TuiState
from ._words import HELP_TEXT


def run_command(state: TuiState, text: str) -> list[Action]:
    """A `/` command typed or picked."""
    name = text.split()[0]
    if name == "/quit":
        if state.run is None:
            return [Quit()]
        state.overlay = QuitPopup()
        return []
    if name == "/help":
        state.add(EntryKind.HELP, HELP_TEXT)
        # Read from its first line; the view follows the end again once that is in sight.
        state.scroll = Anchor(state.transcript[-1].serial, 0)
        return []
    if name == "/new":
        if state.run is not None:
            state.error("A run is in progress: wait for it, or stop it (Esc), before /new")
            return []
        state.session = None
        state.model = None
        state.history_for = None
        state.count_tokens(())
        state.transcript.clear()
        state.scroll = None
        state.info("New conversation: the next message starts it")
        return []
    if name == "/model":
        if not state.connected:
            state.error("Not connected to the daemon: /model works once it is")
            return []
        state.notice = None
        chosen = text[len(name) :].strip()
        if chosen:
            return choose_model(state, chosen)
        state.models_asked = ModelsAction.LIST
        return [Send(ModelsRequest(ModelsAction.LIST, state.session))]
    if name == "/pending":
        if not state.connected:
            state.error("Not connected to the daemon: /pending works once it is")
            return []
        state.notice = None
        return [Send(PendingRequest(PendingAction.LIST))]
    if name == "/sessions":
        if not state.connected:
            state.error("Not connected to the daemon: /sessions works once it is")
            return []
        state.notice = None
        state.sessions_pages = []
        return [Send(SessionsRequest(SessionsAction.LIST, limit=SESSIONS_PAGE))]
    if name in ("/undo", "/rewind"):
        return _undo(state, name, text.split()[1:])
    if name == "/compact":
        if not state.connected:
            state.error("Not connected to the daemon: /compact works once it is")
            return []
        if state.session is None:
            state.error("No conversation yet: /compact works once this session has messages")
            return []
        if state.run is not None:
            state.error("A run is in progress: a run compacts as it needs; /compact after it")
            return []
        state.compacting = state.session
        return [Send(SessionsRequest(SessionsAction.COMPACT, state.session))]
    state.error(f"Unknown command {name}; type / to see the commands")
    return []


def choose_model(state: TuiState, name: str) -> list[Action]:
    """Switch the window's conversation to the model `name` (the daemon says if it may)."""
    state.close(ModelPicker)
    if state.session is None and state.run is not None:
        state.error("The run is starting: choose the model once it has started")
        return []
    state.models_asked = ModelsAction.SET
    return [Send(ModelsRequest(ModelsAction.SET, state.session, name))]


def pick_model(state: TuiState, index: int) -> list[Action]:
    """Enter in the `/model` picker."""
    overlay = state.overlay
    assert isinstance(overlay, ModelPicker)
    return choose_model(state, overlay.models[index].name)


def _undo(state: TuiState, name: str, args: list[str]) -> list[Action]:
    """``/undo [force]``, ``/rewind``, ``/rewind N [force]``: put a run's files back."""
    if not state.connected:
        state.error(f"Not connected to the daemon: {name} works once it is")
        return []
    if state.session is None:
        state.error(f"No session yet: {name} puts back what this session's runs changed")
        return []
    if state.run is not None:
        state.error(f"A run is in progress: stop it or wait before {name}")
        return []
    force = "force" in args
    rest = [a for a in args if a != "force"]
    state.notice = None
    if name == "/undo":
        return [Send(SessionsRequest(SessionsAction.UNDO, state.session, force=force))]
    if not rest:
        return [Send(SessionsRequest(SessionsAction.TURNS, state.session))]
    if not rest[0].isdigit() or not 1 <= int(rest[0]) <= len(state.turns):
        state.error("Type /rewind to list the turns, then /rewind N with one of their numbers")
        return []
    turn = state.turns[int(rest[0]) - 1]
    return [Send(SessionsRequest(SessionsAction.UNDO, state.session, turn=turn, force=force))]


def want_preview(state: TuiState) -> list[Action]:
    """Ask what resuming the task selected in the `/pending` list will do, unless asked already.

    Called when the list opens and whenever its selection moves: the preview
    shows under the list for the selected task only.
    """
    overlay = state.overlay
    if not isinstance(overlay, PendingPicker) or not state.connected:
        return []
    session = overlay.tasks[overlay.index].session
    if session in state.previews:
        return []
    state.previews[session] = None
    return [Send(PendingRequest(PendingAction.PREVIEW, session))]


def resume_pending(state: TuiState, index: int, now: float) -> list[Action]:
    """Resume a task from the `/pending` list; the daemon asks its saved question inline."""
    overlay = state.overlay
    assert isinstance(overlay, PendingPicker)
    task = overlay.tasks[index]
    state.overlay = None
    return _resume(state, task.session, task.input, now)


def _resume(state: TuiState, session: str, what: str, now: float) -> list[Action]:
    if state.run is not None:
        state.error("A run is in progress: stop it or wait before resuming another task")
        return []
    state.session = session
    state.model = None
    state.notice = None
    state.scroll = None
    state.run = RunState(started_at=now, session=session, resumed=True)
    state.add(EntryKind.INFO, f"Resuming {session}: {what}")
    return [Send(PendingRequest(PendingAction.RESUME, session))]


def continue_session(state: TuiState, index: int, now: float) -> list[Action]:
    """Continue a conversation from the `/sessions` picker.

    Its last messages are asked for and shown, and the next message goes to
    that session, whose whole history the model is given. A session with a
    pending task is resumed instead, as `/pending` would.
    """
    overlay = state.overlay
    assert isinstance(overlay, SessionsPicker)
    item = overlay.items[index]
    state.overlay = None
    if item.status is not None:
        return _resume(state, item.session, item.title, now)
    if state.run is not None:
        state.error("A run is in progress: wait for it, or stop it, before switching")
        return []
    state.session = item.session
    state.model = None
    state.scroll = None
    state.history_for = item.session
    count = f"{item.messages} message{'' if item.messages == 1 else 's'}"
    state.add(EntryKind.INFO, f"Continuing {item.session}: {item.title} ({count})")
    state.info(f"Continuing {item.title!r}: your next message goes there, with its history")
    after = max(-1, item.messages - 1 - HISTORY_SHOWN)
    return [
        Send(SessionsRequest(SessionsAction.SHOW, item.session, after=after, limit=HISTORY_SHOWN))
    ]


def discard_pending(state: TuiState, index: int) -> list[Action]:
    """Discard a task from the `/pending` list (a user-cancel of the stored task)."""
    overlay = state.overlay
    assert isinstance(overlay, PendingPicker)
    task = overlay.tasks[index]
    left = overlay.tasks[:index] + overlay.tasks[index + 1 :]
    state.overlay = PendingPicker(left, max(0, min(overlay.index, len(left) - 1))) if left else None
    state.info(f"Discarded {task.session}")
    return [Send(PendingRequest(PendingAction.DISCARD, task.session)), *want_preview(state)]

"""Transitions for the `/` commands and for what is picked in the lists they open."""

from __future__ import annotations

from agentrt.protocol.frames import PendingAction
from agentrt.protocol.frames import PendingRequest
from agentrt.protocol.frames import SessionsAction
from agentrt.protocol.frames import SessionsRequest

from ._state import HISTORY_SHOWN
from ._state import SESSIONS_PAGE
from ._state import Action
from ._state import Anchor
from ._state import EntryKind
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
        state.session = None
        state.count_tokens(())
        state.info("New session: the next message starts it")
        return []
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

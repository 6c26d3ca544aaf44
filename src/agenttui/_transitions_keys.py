"""Transitions for what the keyboard does: Esc, Enter, Ctrl+C, the arrows, the hotkeys.

Each takes the state (and the time, where it records one), changes it, and returns
the actions the shell carries out. An overlay is opened or closed by replacing the
state's one `overlay` field, so no key can leave two of them open.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from collections.abc import Mapping

import attrs

from agentrt import ALLOW_ONCE
from agentrt import DENY
from agentrt import Cause
from agentrt import RequestKind
from agentrt.protocol.frames import AnswerFrame
from agentrt.protocol.frames import AskFrame
from agentrt.protocol.frames import Cancel
from agentrt.protocol.frames import Run

from ._attach import Attached
from ._attach import AttachError
from ._state import Action
from ._state import EndedPopup
from ._state import EntryKind
from ._state import ModelPicker
from ._state import PendingPicker
from ._state import Quit
from ._state import QuitPopup
from ._state import RememberInput
from ._state import RunPhase
from ._state import RunState
from ._state import Send
from ._state import SessionsPicker
from ._state import SetInput
from ._state import StopPopup
from ._state import TuiState
from ._state import has_choices
from ._state import is_masked
from ._transitions_commands import continue_session
from ._transitions_commands import discard_pending
from ._transitions_commands import pick_model
from ._transitions_commands import resume_pending
from ._transitions_commands import run_command
from ._words import CHOICE_LABELS
from ._words import POPUP_CAUSES
from ._words import POPUP_CHOICES
from ._words import POPUP_UNDOES
from ._words import QUIT_CAUSES
from ._words import QUIT_CHOICES
from ._words import STOPPING_WORDS
from ._words import size_text


def _request_cancel(state: TuiState, cause: Cause) -> list[Action]:
    """Stop the run for `cause`: at once when its task hash is known, else once it arrives."""
    run = state.run
    state.close(StopPopup, QuitPopup)
    if run is None or run.stopping:
        return []
    what = STOPPING_WORDS[cause]
    if run.task is None:
        run.held_cancel = cause
        state.info(f"{what} the run as soon as it starts...")
        return []
    run.sent_cancel = cause
    run.phase = RunPhase.STOPPING
    state.info(f"{what} the run...")
    return [Send(Cancel(run.task, cause))]


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
    """Esc: close the popup or list if one is open, else take one step of the cascade."""
    if state.overlay is not None:
        state.overlay = None
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
        return _request_cancel(state, Cause.USER_CANCEL)
    if step is EscapeStep.OPEN_POPUP:
        state.overlay = StopPopup()
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


def _chosen(
    state: TuiState,
    popup: type[StopPopup | QuitPopup],
    what: str,
    causes: Mapping[str, Cause | None],
    choice: str,
) -> Cause | None:
    """Close `popup` and give the cause `causes` names for `choice` (None: the run goes on)."""
    if choice not in causes:
        raise ValueError(f"unknown {what} choice {choice!r}; expected one of {tuple(causes)}")
    state.close(popup)
    return causes[choice]


def choose_popup(state: TuiState, choice: str) -> list[Action]:
    """A popup choice: ``"Yes"`` user-cancels, ``"Pause"`` pauses, ``"No"`` keeps running."""
    cause = _chosen(state, StopPopup, "popup", POPUP_CAUSES, choice)
    if cause is None:
        return []
    if choice in POPUP_UNDOES and state.run is not None and not state.run.stopping:
        # The files are put back once the run has ended (`on_ended`).
        state.run.undo_after = True
    return _request_cancel(state, cause)


def choose_quit(state: TuiState, choice: str) -> list[Action]:
    """A choice of the quit popup: stop the run (pausing or discarding it), then quit."""
    cause = _chosen(state, QuitPopup, "quit", QUIT_CAUSES, choice)
    if cause is None:
        return []
    run = state.run
    if run is None:
        return [Quit()]
    # Quitting at once would only disconnect; the window stays until the run has ended.
    state.quit_after_run = True
    if run.stopping:
        return []
    actions = _request_cancel(state, cause)
    state.info(f"{STOPPING_WORDS[cause]} the run, then quitting...")
    return actions


def press_ctrl_c(state: TuiState) -> list[Action]:
    """Ctrl+C: user-cancel the run; with no run, arm (then confirm) quitting."""
    if state.run is not None:
        if state.run.stopping:
            # The popups go; a list asked for meanwhile stays.
            state.close(StopPopup, QuitPopup, EndedPopup)
            state.info("Already stopping; Ctrl+D quits")
            return []
        run = state.run
        if run.files and not isinstance(state.overlay, StopPopup):
            # It changed files: ask whether they stay (Yes) or go back (Undo); Ctrl+C again
            # is Yes.
            state.close()
            state.overlay = StopPopup(POPUP_CHOICES.index("Yes"))
            return []
        state.close()
        return _request_cancel(state, Cause.USER_CANCEL)
    state.close()
    if state.quit_armed:
        return [Quit()]
    state.quit_armed = True
    state.info("Press Ctrl+C again to quit (or Ctrl+D, or /quit)")
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
    overlay = state.overlay
    if isinstance(overlay, StopPopup):
        moved = _move(overlay.highlighted, delta, len(POPUP_CHOICES))
        state.overlay = attrs.evolve(overlay, highlighted=moved)
    elif isinstance(overlay, QuitPopup):
        moved = _move(overlay.highlighted, delta, len(QUIT_CHOICES))
        state.overlay = attrs.evolve(overlay, highlighted=moved)
    elif state.choosing and state.ask is not None:
        state.choice_index = _move(state.choice_index, delta, len(state.ask.choices))
    else:
        return False
    return True


def _move_selection(state: TuiState, delta: int) -> bool:
    overlay = state.overlay
    if isinstance(overlay, StopPopup | QuitPopup):
        return _move_sideways(state, delta)
    if isinstance(overlay, PendingPicker):
        state.overlay = attrs.evolve(overlay, index=_move(overlay.index, delta, len(overlay.tasks)))
    elif isinstance(overlay, SessionsPicker):
        state.overlay = attrs.evolve(overlay, index=_move(overlay.index, delta, len(overlay.items)))
    elif isinstance(overlay, ModelPicker):
        state.overlay = attrs.evolve(
            overlay, index=_move(overlay.index, delta, len(overlay.models))
        )
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
    overlay = state.overlay
    if isinstance(overlay, QuitPopup):
        for choice in QUIT_CHOICES:
            if choice[0].lower() == key.lower():
                return choose_quit(state, choice)
        return []
    if isinstance(overlay, StopPopup):
        for choice in POPUP_CHOICES:
            if choice[0].lower() == key.lower():
                return choose_popup(state, choice)
        return []
    if isinstance(overlay, PendingPicker):
        if key.lower() == "d":
            return discard_pending(state, overlay.index)
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
        # A message held for the connection is no longer the one Enter was pressed for.
        state.send_when_connected = None
        state.picker_index = 0
        # Any change of the text makes a closed picker eligible again: typing `/` anew
        # after Esc closed it must reopen it.
        state.picker_dismissed = None
        if text:
            state.cleared_input = None
    return []


def press_enter(
    state: TuiState, now: float, attach: Callable[[str], Attached] | None = None
) -> list[Action]:
    """Enter: choose in a popup or list, answer the question, run a command or send a message.

    `attach` adds the text of the files a message names (``@path``) to it, or
    raises `AttachError` saying why it cannot: the message is then not sent.
    """
    overlay = state.overlay
    if isinstance(overlay, EndedPopup):
        state.overlay = None
        return [Quit()] if overlay.quitting else []
    if isinstance(overlay, QuitPopup):
        return choose_quit(state, QUIT_CHOICES[overlay.highlighted])
    if isinstance(overlay, StopPopup):
        return choose_popup(state, POPUP_CHOICES[overlay.highlighted])
    if isinstance(overlay, PendingPicker):
        return resume_pending(state, overlay.index, now)
    if isinstance(overlay, SessionsPicker):
        return continue_session(state, overlay.index, now)
    if isinstance(overlay, ModelPicker):
        return pick_model(state, overlay.index)
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
        # The message stays in the input box, and goes as soon as the window is connected
        # (unless it is changed meanwhile): the Enter is not lost to the reconnection.
        state.send_when_connected = state.input
        state.info(
            "Not connected to the daemon yet: your message is sent as soon as it is "
            "(change it to keep it here)"
        )
        return []
    if state.run is not None:
        state.info("A run is in progress: wait for it, or press Esc to stop it")
        return []
    return _send(state, text, now, attach)


def send_when_connected(
    state: TuiState, now: float, attach: Callable[[str], Attached] | None = None
) -> list[Action]:
    """The window is connected: send the message Enter was pressed for while it was not."""
    held, state.send_when_connected = state.send_when_connected, None
    text = held.strip() if held is not None else ""
    if not text or held != state.input or not state.connected:
        return []
    if state.run is not None or state.ask is not None or state.overlay is not None:
        state.info("Connected: your message is still in the input box; Enter sends it")
        return []
    actions = _send(state, text, now, attach)
    if actions:
        state.info("Connected: your message was sent")
    return actions


def _send(
    state: TuiState, text: str, now: float, attach: Callable[[str], Attached] | None
) -> list[Action]:
    """Send `text` as the next message, its ``@path`` files attached: shown, remembered, run."""
    try:
        attached = attach(text) if attach is not None else Attached(text)
    except AttachError as exc:
        # The message stays in the input box, to fix the path or drop the file.
        state.error(f"{exc}; the message was not sent")
        return []
    state.input = ""
    state.quit_armed = False
    state.notice = None
    state.scroll = None
    state.add(EntryKind.USER, text)
    for name, size in attached.files:
        state.add(EntryKind.ATTACHMENT, f"attached {name} ({size_text(size)})")
    state.run = RunState(started_at=now, session=state.session, text=text)
    run = Run(attached.text, state.session, state.cwd or None)
    return [SetInput(""), RememberInput(text), Send(run)]


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
    state.add(EntryKind.INFO, f"{ask.prompt} -> {shown}", ask.task)
    state.notice = None
    return [Send(AnswerFrame(ask.id, value, secret)), *state.pop_ask()]

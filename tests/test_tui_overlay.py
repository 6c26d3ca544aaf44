"""The overlays over the input box: one field, so never two at once, whatever the order of events."""

from __future__ import annotations

import typing

import attrs
import pytest

from agentrt import Cause
from agentrt import Outcome
from agentrt.protocol.frames import Cancel
from agentrt.protocol.frames import EndedFrame
from agentrt.protocol.frames import ModelItem
from agentrt.protocol.frames import PendingList
from agentrt.protocol.frames import PendingTask
from agentrt.protocol.frames import SessionItem
from agentrt.protocol.frames import SessionList
from agentrt.protocol.frames import SessionsAction
from agentrt.protocol.frames import SessionsRequest
from agentrt.protocol.frames import TaskFrame
from agentrt.protocol.frames import TextFrame
from agentrt.protocol.frames import ToolResultFrame
from agentrt.protocol.frames import Undone
from agenttui._state import EndedPopup
from agenttui._state import ModelPicker
from agenttui._state import Overlay
from agenttui._state import PendingPicker
from agenttui._state import QuitPopup
from agenttui._state import Send
from agenttui._state import SessionsPicker
from agenttui._state import StopPopup
from agenttui._state import TuiState
from agenttui._transitions_commands import run_command
from agenttui._transitions_daemon import disconnected
from agenttui._transitions_daemon import on_frame
from agenttui._transitions_keys import input_changed
from agenttui._transitions_keys import press_ctrl_c
from agenttui._transitions_keys import press_enter
from agenttui._transitions_keys import press_escape
from agenttui._transitions_keys import press_hotkey
from agenttui._words import POPUP_CHOICES

#: Every overlay the window has, and the flag that says it is open.
FLAGS: dict[type[Overlay], str] = {
    StopPopup: "popup_open",
    QuitPopup: "quit_popup_open",
    EndedPopup: "ended_popup_open",
    PendingPicker: "pending_open",
    SessionsPicker: "sessions_open",
    ModelPicker: "models_open",
}


def task(session: str) -> PendingTask:
    return PendingTask(session, "interrupted", "stream 5", 0.0)


def conversation(session: str) -> SessionItem:
    return SessionItem(session, "a talk", 100.0, 200.0, 4, None)


def shown_run() -> TuiState:
    """A window whose run has its task hash and has shown some text (Esc asks first)."""
    state = TuiState(connected=True)
    input_changed(state, "hello")
    press_enter(state, now=0.0)
    on_frame(state, TaskFrame("t1", "cli-s1"))
    on_frame(state, TextFrame("t1", "some text"))
    return state


def shown(state: TuiState) -> Overlay | None:
    """The overlay, read through a call so that the type checker does not narrow it."""
    return state.overlay


def open_flags(state: TuiState) -> list[str]:
    return [flag for flag in FLAGS.values() if getattr(state, flag)]


def test_the_state_has_one_overlay_field_and_the_union_names_every_overlay() -> None:
    hints = typing.get_type_hints(TuiState)
    overlay_types = set(FLAGS)
    holding = [
        field.name
        for field in attrs.fields(TuiState)
        if overlay_types & set(typing.get_args(hints[field.name]))
    ]
    assert holding == ["overlay"]
    assert set(typing.get_args(hints["overlay"])) == {*overlay_types, type(None)}
    # Each is a value: moving in a list replaces the overlay, it does not change it.
    examples: list[Overlay] = [
        StopPopup(),
        QuitPopup(),
        EndedPopup("ended"),
        PendingPicker((task("cli-a"),)),
        SessionsPicker((conversation("cli-a"),)),
        ModelPicker((ModelItem("scripted", True),)),
    ]
    assert {type(example) for example in examples} == overlay_types
    for example in examples:
        name = attrs.fields(type(example))[0].name
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            setattr(example, name, None)


def test_a_sequence_that_used_to_need_clearing_by_hand_shows_one_overlay_at_each_step() -> None:
    state = shown_run()
    # /pending and /sessions are asked for; both answers come back later.
    for command in ("/pending", "/sessions"):
        run_command(state, command)
    on_frame(state, PendingList((task("cli-a"), task("cli-b"))))
    assert shown(state) == PendingPicker((task("cli-a"), task("cli-b")))
    # The list asked for last takes the place of the first.
    on_frame(state, SessionList((conversation("cli-old"),)))
    assert shown(state) == SessionsPicker((conversation("cli-old"),))
    assert open_flags(state) == ["sessions_open"]
    press_escape(state)
    assert shown(state) is None
    # Esc opens the stop popup; a list that arrives now does not open under it.
    press_escape(state)
    assert shown(state) == StopPopup()
    on_frame(state, PendingList((task("cli-c"),)))
    assert shown(state) == StopPopup()
    assert state.notice is not None
    assert state.notice.text == (
        "The /pending list came while a popup was open: type /pending again to see it"
    )
    on_frame(state, SessionList((conversation("cli-old"),)))
    assert open_flags(state) == ["popup_open"]
    # The run ends with the popup open: the popup becomes the one saying so.
    on_frame(state, EndedFrame("t1", "cli-s1", Outcome.FINISHED))
    assert shown(state) == EndedPopup("The run ended before you chose: Done")
    assert open_flags(state) == ["ended_popup_open"]
    on_frame(state, PendingList((task("cli-d"),)))
    assert open_flags(state) == ["ended_popup_open"]
    press_enter(state, now=1.0)
    assert shown(state) is None
    # With no run, Ctrl+C closes a list before arming quit.
    run_command(state, "/pending")
    on_frame(state, PendingList((task("cli-d"),)))
    assert open_flags(state) == ["pending_open"]
    press_ctrl_c(state)
    assert shown(state) is None


def test_quit_popup_then_the_daemon_goes_away_leaves_no_overlay() -> None:
    state = shown_run()
    run_command(state, "/quit")
    assert shown(state) == QuitPopup()
    disconnected(state, "gone")
    assert shown(state) is None
    assert open_flags(state) == []


def test_ctrl_c_while_stopping_closes_the_popups_and_keeps_a_list() -> None:
    state = shown_run()
    press_ctrl_c(state)
    assert state.run is not None and state.run.stopping
    run_command(state, "/quit")
    assert open_flags(state) == ["quit_popup_open"]
    press_ctrl_c(state)
    assert shown(state) is None
    run_command(state, "/pending")
    on_frame(state, PendingList((task("cli-a"),)))
    press_ctrl_c(state)
    assert shown(state) == PendingPicker((task("cli-a"),))


@pytest.mark.parametrize("kind", [PendingPicker, SessionsPicker, ModelPicker])
def test_an_empty_list_cannot_be_made(
    kind: type[PendingPicker | SessionsPicker | ModelPicker],
) -> None:
    with pytest.raises(ValueError, match="Length of"):
        kind(())


# -- the stop popup's undo ---------------------------------------------------------------


def _changed_a_file(state: TuiState) -> None:
    """The run's write_file ended; the daemon says the run changed one file so far."""
    asked = on_frame(state, ToolResultFrame("t1", "c1", "write_file", "wrote 2 bytes"))
    assert asked == [Send(SessionsRequest(SessionsAction.UNDO, "cli-s1", task="t1", dry_run=True))]
    on_frame(state, Undone("cli-s1", False, ("/w/a.txt",), dry_run=True, task="t1"))
    assert state.run is not None and state.run.files == 1


def test_ctrl_c_after_a_file_change_asks_and_undo_puts_the_files_back_once_stopped() -> None:
    state = shown_run()
    _changed_a_file(state)
    assert press_ctrl_c(state) == []
    assert shown(state) == StopPopup(POPUP_CHOICES.index("Yes"))
    assert press_hotkey(state, "u") == [Send(Cancel("t1", Cause.USER_CANCEL))]
    ended = EndedFrame("t1", "cli-s1", Outcome.CANCELLED, cause=Cause.USER_CANCEL)
    assert on_frame(state, ended)[-1] == Send(
        SessionsRequest(SessionsAction.UNDO, "cli-s1", task="t1")
    )


def test_ctrl_c_twice_discards_and_keeps_the_files_and_pause_never_undoes() -> None:
    state = shown_run()
    _changed_a_file(state)
    press_ctrl_c(state)
    assert press_ctrl_c(state) == [Send(Cancel("t1", Cause.USER_CANCEL))]
    ended = EndedFrame("t1", "cli-s1", Outcome.CANCELLED, cause=Cause.USER_CANCEL)
    assert not any(isinstance(a, Send) for a in on_frame(state, ended))

    paused = shown_run()
    _changed_a_file(paused)
    press_escape(paused)
    assert press_hotkey(paused, "p") == [Send(Cancel("t1", Cause.PAUSE))]
    stopped = EndedFrame("t1", "cli-s1", Outcome.CANCELLED, cause=Cause.PAUSE, pending_kept=True)
    assert not any(isinstance(a, Send) for a in on_frame(paused, stopped))


def test_ctrl_c_with_no_file_changed_discards_at_once() -> None:
    state = shown_run()
    on_frame(state, Undone("cli-s1", False, (), dry_run=True, task="t1"))
    assert press_ctrl_c(state) == [Send(Cancel("t1", Cause.USER_CANCEL))]

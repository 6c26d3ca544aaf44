"""The terminal client's state machine, driven by keys and frames without a terminal."""

from __future__ import annotations

from typing import Any

import pytest

from agentrt._cause import Cause
from agentrt._events import Outcome
from agentrt._pending import CONFIRM_CHOICES, RequestKind
from agentrt.frames import (
    AnswerFrame,
    AskFrame,
    AskWithdrawn,
    Cancel,
    EndedFrame,
    ErrorCode,
    ErrorFrame,
    PendingAction,
    PendingList,
    PendingRequest,
    PendingTask,
    Run,
    TaskFrame,
    TextFrame,
    ToolCallFrame,
    VerifyFrame,
)
from agenttui._state import (
    POPUP_CHOICES,
    EntryKind,
    EscapeStep,
    Notice,
    NoticeLevel,
    Quit,
    RememberInput,
    RunPhase,
    Send,
    SetInput,
    TuiState,
    choose_popup,
    escape_step,
    input_changed,
    on_ask,
    on_ask_withdrawn,
    on_ended,
    on_error,
    on_pending,
    on_task,
    on_text,
    on_tool_call,
    on_verify,
    press_ctrl_c,
    press_ctrl_d,
    press_down,
    press_enter,
    press_escape,
    press_hotkey,
    press_tab,
    press_up,
    status_text,
)


def is_(flag: str, state: TuiState) -> bool:
    """Read a flag through a call, so that the type checker does not narrow it across steps."""
    return bool(getattr(state, flag))


def typed(state: TuiState, text: str) -> None:
    input_changed(state, text)


def started(text: str = "hello", task: str = "t1", session: str = "cli-s1") -> TuiState:
    """A state with a run whose task hash has arrived."""
    state = TuiState(connected=True)
    typed(state, text)
    press_enter(state, now=0.0)
    on_task(state, TaskFrame(task, session))
    return state


def asking(ask_id: str, kind: RequestKind, prompt: str, task: str, **extra: Any) -> AskFrame:
    return AskFrame(ask_id, task, "cli-s1", kind, prompt, **extra)


def ended(state: TuiState, outcome: Outcome, task: str = "t1", **extra: Any) -> None:
    on_ended(state, EndedFrame(task, "cli-s1", outcome, **extra))


def listed(*tasks: PendingTask) -> PendingList:
    return PendingList(tuple(tasks))


def task_record(session: str, question: str | None = None) -> PendingTask:
    return PendingTask(session, "interrupted", "stream 5", 0.0, question=question)


def confirm_ask(ask_id: str = "a1", task: str = "t1") -> AskFrame:
    return asking(ask_id, RequestKind.CONFIRM, "write x?", task, choices=CONFIRM_CHOICES)


# -- sending ------------------------------------------------------------------------------


def test_enter_sends_a_run_and_remembers_the_message() -> None:
    state = TuiState(connected=True)
    typed(state, "hi there")
    actions = press_enter(state, now=5.0)
    assert actions == [SetInput(""), RememberInput("hi there"), Send(Run("hi there", None))]
    assert state.run is not None
    assert state.run.phase is RunPhase.STARTING
    assert state.transcript[-1].kind is EntryKind.USER


def test_task_frame_sets_the_session_the_next_message_continues() -> None:
    state = started(session="cli-abc")
    ended(state, Outcome.FINISHED)
    assert state.run is None
    typed(state, "more")
    assert press_enter(state, now=1.0)[-1] == Send(Run("more", "cli-abc"))


def test_a_message_while_running_is_refused_with_a_notice() -> None:
    state = started()
    typed(state, "another")
    assert press_enter(state, now=1.0) == []
    assert state.notice is not None
    assert "in progress" in state.notice.text


def test_streamed_text_grows_one_entry() -> None:
    state = started()
    on_text(state, TextFrame("t1", "Hello "))
    on_text(state, TextFrame("t1", "world"))
    assert state.transcript[-1].text == "Hello world"
    assert state.run is not None
    assert state.run.shown


def test_subagent_text_gets_its_own_labelled_block() -> None:
    state = started()
    on_text(state, TextFrame("t1", "main "))
    on_text(state, TextFrame("t1", "sub text", agent="sub1"))
    on_text(state, TextFrame("t1", "more", agent="sub1"))
    on_text(state, TextFrame("t1", "main again"))
    assert [e.text for e in state.transcript[-3:]] == ["main ", "[sub1] sub textmore", "main again"]


# -- the Esc cascade -------------------------------------------------------------------------


def test_escape_cascade_every_step_in_order() -> None:
    state = started()
    on_text(state, TextFrame("t1", "output"))
    state.notice = None
    typed(state, "/p")
    state.notice = None
    # An error notice appears while the picker is open.
    on_error(state, ErrorFrame(ErrorCode.FAILED, "something failed", ref="run"))
    assert escape_step(state) is EscapeStep.CLOSE_PICKER
    assert press_escape(state) == []
    assert not is_("picker_open", state)
    assert state.input == "/p"
    assert escape_step(state) is EscapeStep.CLOSE_NOTICE
    assert press_escape(state) == []
    assert state.notice is None
    assert escape_step(state) is EscapeStep.OPEN_POPUP
    assert press_escape(state) == []
    assert is_("popup_open", state)
    # Esc in the popup is "No": the run keeps going.
    assert press_escape(state) == []
    assert not is_("popup_open", state)
    assert state.run is not None
    # Pick "No" then the cascade would open the popup again; cancel through it instead.
    press_escape(state)
    assert choose_popup(state, "Yes") == [Send(Cancel("t1", pause=False))]
    assert escape_step(state) is EscapeStep.CLOSE_NOTICE  # "Stopping the run..."
    press_escape(state)
    assert escape_step(state) is EscapeStep.CLEAR_INPUT
    assert press_escape(state) == [SetInput("")]
    assert state.input == ""


def test_escape_before_anything_is_shown_cancels_at_once() -> None:
    state = started()
    assert escape_step(state) is EscapeStep.CANCEL_RUN
    assert press_escape(state) == [Send(Cancel("t1", pause=False))]
    assert not is_("popup_open", state)
    assert state.run is not None
    assert state.run.phase is RunPhase.STOPPING


def test_escape_with_no_run_clears_the_input() -> None:
    state = TuiState(connected=True)
    typed(state, "draft text")
    assert press_escape(state) == [SetInput("")]
    assert press_escape(state) == []


def test_picker_reopens_when_the_text_changes() -> None:
    state = TuiState()
    typed(state, "/")
    assert is_("picker_open", state)
    press_escape(state)
    assert not is_("picker_open", state)
    typed(state, "/n")
    assert is_("picker_open", state)
    assert state.picker_items == [("/new", "start a new session")]


# -- the buffered early cancel -----------------------------------------------------------


def test_cancel_before_the_task_hash_is_held_and_sent_with_the_first_task_frame() -> None:
    state = TuiState(connected=True)
    typed(state, "go")
    press_enter(state, now=0.0)
    assert press_escape(state) == []  # nothing shown, no hash yet: held
    assert state.run is not None
    assert state.run.held_cancel is False
    assert on_task(state, TaskFrame("t9", "cli-x")) == [Send(Cancel("t9", pause=False))]
    assert on_task(state, TaskFrame("t9", "cli-x")) == []  # sent once


def test_ctrl_c_before_the_task_hash_is_held_too() -> None:
    state = TuiState(connected=True)
    typed(state, "go")
    press_enter(state, now=0.0)
    assert press_ctrl_c(state) == []
    assert press_ctrl_c(state) == []  # already held: not twice
    assert on_task(state, TaskFrame("t2", "cli-x")) == [Send(Cancel("t2", pause=False))]


# -- the popup ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ("Yes", [Send(Cancel("t1", pause=False))]),
        ("Pause", [Send(Cancel("t1", pause=True))]),
        ("No", []),
    ],
)
def test_popup_choices(choice: str, expected: list[Send]) -> None:
    state = started()
    on_text(state, TextFrame("t1", "x"))
    press_escape(state)
    assert is_("popup_open", state)
    assert choose_popup(state, choice) == expected
    assert not is_("popup_open", state)
    assert state.run is not None


def test_popup_keys_move_and_choose() -> None:
    state = started()
    on_text(state, TextFrame("t1", "x"))
    press_escape(state)
    assert POPUP_CHOICES[state.popup or 0] == "Pause"
    assert press_up(state)
    assert press_enter(state, now=1.0) == [Send(Cancel("t1", pause=False))]


def test_popup_hotkey_p_pauses() -> None:
    state = started()
    on_text(state, TextFrame("t1", "x"))
    press_escape(state)
    assert press_hotkey(state, "p") == [Send(Cancel("t1", pause=True))]


def test_unknown_popup_choice_names_the_choices() -> None:
    with pytest.raises(ValueError, match="expected one of"):
        choose_popup(TuiState(), "Maybe")


def test_pause_end_keeps_the_task_and_the_next_message_starts_a_new_session() -> None:
    state = started(session="cli-p")
    on_text(state, TextFrame("t1", "x"))
    press_escape(state)
    choose_popup(state, "Pause")
    ended(state, Outcome.CANCELLED, cause=Cause.PAUSE, pending_kept=True)
    assert state.run is None
    assert state.notice is not None
    assert "/pending" in state.notice.text
    typed(state, "next")
    assert press_enter(state, now=2.0)[-1] == Send(Run("next", None))


# -- Ctrl+C / Ctrl+D ---------------------------------------------------------------------


def test_ctrl_c_with_a_run_is_a_user_cancel() -> None:
    state = started()
    on_text(state, TextFrame("t1", "x"))
    assert press_ctrl_c(state) == [Send(Cancel("t1", pause=False))]
    assert not is_("popup_open", state)


def test_ctrl_c_with_no_run_warns_then_quits() -> None:
    state = TuiState(connected=True)
    assert press_ctrl_c(state) == []
    assert state.notice is not None
    assert "Ctrl+C again" in state.notice.text
    assert press_ctrl_c(state) == [Quit()]


def test_closing_the_ctrl_c_notice_disarms_quitting() -> None:
    state = TuiState(connected=True)
    press_ctrl_c(state)
    press_escape(state)
    assert press_ctrl_c(state) == []


def test_ctrl_d_quits_on_an_empty_input_only() -> None:
    state = TuiState()
    typed(state, "x")
    assert press_ctrl_d(state) == []
    typed(state, "")
    assert press_ctrl_d(state) == [Quit()]


# -- questions ----------------------------------------------------------------------------


def test_confirmation_choices_by_arrows_and_enter() -> None:
    state = started()
    on_ask(state, confirm_ask())
    assert is_("choosing", state)
    assert is_("input_locked", state)
    assert press_down(state)
    assert press_enter(state, now=1.0)[0] == Send(AnswerFrame("a1", "allow_session"))
    assert state.ask is None


def test_confirmation_by_digit() -> None:
    state = started()
    on_ask(state, confirm_ask())
    assert press_hotkey(state, "3")[0] == Send(AnswerFrame("a1", "deny"))


def test_question_takes_over_the_input_and_gives_the_draft_back() -> None:
    state = started()
    typed(state, "half-typed")
    actions = on_ask(state, asking("q1", RequestKind.QUESTION, "Your name?", "t1"))
    assert actions == [SetInput("")]
    typed(state, "Ada")
    actions = press_enter(state, now=1.0)
    assert actions == [Send(AnswerFrame("q1", "Ada")), SetInput("half-typed")]


def test_secret_is_masked_and_sent_as_secret_only() -> None:
    state = started()
    on_ask(state, asking("s1", RequestKind.SECRET, "value of API_KEY", "t1", masked=True))
    assert is_("masked", state)
    typed(state, "hunter2")
    actions = press_enter(state, now=1.0)
    assert actions[0] == Send(AnswerFrame("s1", "", secret="hunter2"))
    assert all("hunter2" not in entry.text for entry in state.transcript)
    assert not any(isinstance(a, RememberInput) for a in actions)


def test_password_retries_show_tries_left_then_deny() -> None:
    state = started()
    ask = asking("p1", RequestKind.PASSWORD, "password for /etc/x", "t1", choices=("allow", "deny"))
    on_ask(state, ask)
    assert is_("masked", state)
    assert not is_("choosing", state)
    typed(state, "wrong")
    assert press_enter(state, now=1.0)[0] == Send(AnswerFrame("p1", "allow", secret="wrong"))
    on_verify(state, VerifyFrame("t1", False, 2, "Wrong password"))
    assert state.notice is not None
    assert "2 tries left" in state.notice.text
    on_ask(state, asking("p2", RequestKind.PASSWORD, ask.prompt, "t1", error="Wrong password"))
    typed(state, "wrong again")
    press_enter(state, now=2.0)
    on_verify(state, VerifyFrame("t1", False, 1, "Wrong password"))
    assert state.notice is not None
    assert "1 try left" in state.notice.text
    on_ask(state, asking("p3", RequestKind.PASSWORD, ask.prompt, "t1", error="Wrong password"))
    typed(state, "still wrong")
    press_enter(state, now=3.0)
    on_verify(state, VerifyFrame("t1", False, 0, "Wrong password"))
    assert state.notice is not None
    assert "no tries left" in state.notice.text
    assert state.notice.level is NoticeLevel.ERROR


def test_verify_keeps_a_message_that_says_more() -> None:
    state = TuiState()
    on_verify(state, VerifyFrame("t1", False, 1, "sudo is not installed"))
    assert state.notice == Notice("sudo is not installed (1 try left)", NoticeLevel.ERROR)


def test_password_enter_on_empty_field_denies() -> None:
    state = started()
    on_ask(state, asking("p1", RequestKind.PASSWORD, "password", "t1", choices=("allow", "deny")))
    assert press_enter(state, now=1.0)[0] == Send(AnswerFrame("p1", "deny"))


def test_password_accepted() -> None:
    state = TuiState()
    on_verify(state, VerifyFrame("t1", True, 2, "password accepted"))
    assert state.notice is not None
    assert state.notice.level is NoticeLevel.INFO


def test_withdrawn_question_leaves_the_input() -> None:
    state = started()
    on_ask(state, asking("q1", RequestKind.QUESTION, "?", "t1"))
    on_ask_withdrawn(state, AskWithdrawn("q1", "the run stopped"))
    assert state.ask is None
    assert state.notice is not None
    assert "withdrawn" in state.notice.text


def test_ended_run_drops_its_questions() -> None:
    state = started()
    on_ask(state, confirm_ask())
    ended(state, Outcome.CANCELLED, cause=Cause.USER_CANCEL)
    assert state.ask is None
    assert state.run is None


def test_escape_during_a_question_opens_the_popup() -> None:
    state = started()
    on_ask(state, confirm_ask())
    press_escape(state)
    assert is_("popup_open", state)
    assert not is_("choosing", state)


# -- commands and /pending ---------------------------------------------------------------


def test_picker_tab_completes_and_enter_runs_the_command() -> None:
    state = TuiState()
    typed(state, "/pe")
    assert press_tab(state) == [SetInput("/pending")]
    typed(state, "/")
    assert press_down(state)  # /new
    actions = press_enter(state, now=0.0)
    assert actions == [SetInput("")]
    assert state.notice is not None
    assert "New session" in state.notice.text


def test_slash_pending_lists_then_resumes_and_the_daemon_asks_the_saved_question() -> None:
    state = TuiState(connected=True)
    typed(state, "/pending")
    state.picker_dismissed = "/pending"
    assert press_enter(state, now=0.0) == [SetInput(""), Send(PendingRequest(PendingAction.LIST))]
    on_pending(state, listed(task_record("cli-a"), task_record("cli-b", question="Colour?")))
    assert is_("pending_open", state)
    assert is_("input_locked", state)
    press_down(state)
    assert press_enter(state, now=1.0) == [Send(PendingRequest(PendingAction.RESUME, "cli-b"))]
    assert state.run is not None
    assert state.run.resumed
    on_task(state, TaskFrame("t7", "cli-b", resumed=True))
    assert state.session == "cli-b"
    on_ask(state, asking("q9", RequestKind.QUESTION, "Colour?", "t7"))
    typed(state, "blue")
    assert press_enter(state, now=2.0)[0] == Send(AnswerFrame("q9", "blue"))


def test_pending_discard_with_d() -> None:
    state = TuiState(connected=True)
    on_pending(state, listed(task_record("cli-a"), task_record("cli-b")))
    assert press_hotkey(state, "d") == [Send(PendingRequest(PendingAction.DISCARD, "cli-a"))]
    assert state.pending == [task_record("cli-b")]
    press_hotkey(state, "d")
    assert not is_("pending_open", state)


def test_empty_pending_list_says_so() -> None:
    state = TuiState()
    on_pending(state, listed())
    assert not is_("pending_open", state)
    assert state.notice is not None
    assert "No paused tasks" in state.notice.text


def test_resume_while_running_is_refused() -> None:
    state = started()
    on_pending(state, listed(task_record("cli-a")))
    assert press_enter(state, now=1.0) == []
    assert state.notice is not None
    assert state.notice.level is NoticeLevel.ERROR


def test_unknown_command_is_an_error_notice() -> None:
    state = TuiState()
    typed(state, "/frobnicate now")
    press_enter(state, now=0.0)
    assert state.notice is not None
    assert state.notice.level is NoticeLevel.ERROR


def test_quit_command() -> None:
    state = TuiState()
    typed(state, "/quit")
    assert Quit() in press_enter(state, now=0.0)


def test_error_before_the_task_forgets_the_run() -> None:
    state = TuiState(connected=True)
    typed(state, "x")
    press_enter(state, now=0.0)
    on_error(state, ErrorFrame(ErrorCode.FAILED, "that session is running", ref="run"))
    assert state.run is None


def test_tool_call_marks_the_run_as_shown() -> None:
    state = started()
    on_tool_call(state, ToolCallFrame("t1", "c1", "write", {"path": "x"}))
    assert escape_step(state) is EscapeStep.OPEN_POPUP


def test_status_line_shows_task_state_elapsed() -> None:
    state = started(task="abcdef0123456789")
    text = status_text(state, now=2.5)
    assert "running" in text
    assert "abcdef012345" in text
    assert "2.5s" in text
    ended(state, Outcome.FINISHED, task="abcdef0123456789")
    assert "idle" in status_text(state, now=3.0)

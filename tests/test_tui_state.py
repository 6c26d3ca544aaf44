"""The terminal client's state machine, driven by keys and frames without a terminal."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from agentrt import CONFIRM_CHOICES
from agentrt import Cause
from agentrt import Outcome
from agentrt import RequestKind
from agentrt.protocol.frames import AnswerFrame
from agentrt.protocol.frames import AskFrame
from agentrt.protocol.frames import AskWithdrawn
from agentrt.protocol.frames import Cancel
from agentrt.protocol.frames import CompactionFrame
from agentrt.protocol.frames import DaemonAction
from agentrt.protocol.frames import DaemonRequest
from agentrt.protocol.frames import DaemonStatus
from agentrt.protocol.frames import EndedFrame
from agentrt.protocol.frames import ErrorCode
from agentrt.protocol.frames import ErrorFrame
from agentrt.protocol.frames import PendingAction
from agentrt.protocol.frames import PendingList
from agentrt.protocol.frames import PendingRequest
from agentrt.protocol.frames import PendingTask
from agentrt.protocol.frames import ReasoningFrame
from agentrt.protocol.frames import Run
from agentrt.protocol.frames import SessionItem
from agentrt.protocol.frames import SessionMessages
from agentrt.protocol.frames import SessionsAction
from agentrt.protocol.frames import SessionsRequest
from agentrt.protocol.frames import TaskFrame
from agentrt.protocol.frames import TextFrame
from agentrt.protocol.frames import ToolCallFrame
from agentrt.protocol.frames import UsageFrame
from agentrt.protocol.frames import VerifyFrame
from agentrt.protocol.frames import Welcome
from agentrt.vocab.usage import RunTokens
from agentrt.vocab.usage import TokenCount
from agenttui._scroll import scroll_by
from agenttui._scroll import scroll_pages
from agenttui._scroll import scroll_top
from agenttui._state import EndedPopup
from agenttui._state import EntryKind
from agenttui._state import Notice
from agenttui._state import NoticeLevel
from agenttui._state import PendingPicker
from agenttui._state import Quit
from agenttui._state import QuitPopup
from agenttui._state import RememberInput
from agenttui._state import RunPhase
from agenttui._state import RunState
from agenttui._state import Send
from agenttui._state import SetInput
from agenttui._state import StopPopup
from agenttui._state import TranscriptEntry
from agenttui._state import TuiState
from agenttui._status import status_text
from agenttui._transitions_commands import run_command
from agenttui._transitions_daemon import connect_failed
from agenttui._transitions_daemon import connected
from agenttui._transitions_daemon import disconnected
from agenttui._transitions_daemon import gave_up_starting
from agenttui._transitions_daemon import on_ask
from agenttui._transitions_daemon import on_ask_withdrawn
from agenttui._transitions_daemon import on_compaction
from agenttui._transitions_daemon import on_ended
from agenttui._transitions_daemon import on_error
from agenttui._transitions_daemon import on_frame
from agenttui._transitions_daemon import on_pending
from agenttui._transitions_daemon import on_reasoning
from agenttui._transitions_daemon import on_session_messages
from agenttui._transitions_daemon import on_task
from agenttui._transitions_daemon import on_text
from agenttui._transitions_daemon import on_tool_call
from agenttui._transitions_daemon import on_usage
from agenttui._transitions_daemon import on_verify
from agenttui._transitions_daemon import starting_daemon
from agenttui._transitions_keys import EscapeStep
from agenttui._transitions_keys import choose_popup
from agenttui._transitions_keys import escape_step
from agenttui._transitions_keys import input_changed
from agenttui._transitions_keys import press_ctrl_c
from agenttui._transitions_keys import press_ctrl_d
from agenttui._transitions_keys import press_down
from agenttui._transitions_keys import press_enter
from agenttui._transitions_keys import press_escape
from agenttui._transitions_keys import press_hotkey
from agenttui._transitions_keys import press_left
from agenttui._transitions_keys import press_right
from agenttui._transitions_keys import press_tab
from agenttui._transitions_keys import press_up
from agenttui._transitions_keys import restore_input
from agenttui._transitions_keys import send_when_connected
from agenttui._words import COMMANDS
from agenttui._words import POPUP_CHOICES
from agenttui._words import QUIT_CHOICES
from agenttui._words import pending_line
from agenttui._words import short_path


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


def test_subagent_text_gets_its_own_block() -> None:
    state = started()
    on_text(state, TextFrame("t1", "main "))
    on_text(state, TextFrame("t1", "sub text", agent="sub1"))
    on_text(state, TextFrame("t1", "more", agent="sub1"))
    on_text(state, TextFrame("t1", "main again"))
    assert [(e.agent, e.text) for e in state.transcript[-3:]] == [
        ("", "main "),
        ("sub1", "sub textmore"),
        ("", "main again"),
    ]


def test_reasoning_is_a_block_of_its_own_before_the_reply() -> None:
    state = started()
    on_reasoning(state, ReasoningFrame("t1", "The user "))
    on_reasoning(state, ReasoningFrame("t1", "wants a poem."))
    on_text(state, TextFrame("t1", "Roses"))
    on_reasoning(state, ReasoningFrame("t1", "Next verse."))
    assert [(e.kind, e.text) for e in state.transcript[-3:]] == [
        (EntryKind.REASONING, "The user wants a poem."),
        (EntryKind.ASSISTANT, "Roses"),
        (EntryKind.REASONING, "Next verse."),
    ]
    assert state.run is not None
    assert state.run.shown  # Esc now asks first: the reasoning was work that would be lost


def test_reasoning_of_another_window_is_not_shown() -> None:
    state = started()
    on_reasoning(state, ReasoningFrame("t-other", "not mine"))
    assert all(e.kind is not EntryKind.REASONING for e in state.transcript)


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
    assert choose_popup(state, "Yes") == [Send(Cancel("t1", Cause.USER_CANCEL))]
    assert escape_step(state) is EscapeStep.CLOSE_NOTICE  # "Stopping the run..."
    press_escape(state)
    assert escape_step(state) is EscapeStep.CLEAR_INPUT
    assert press_escape(state) == [SetInput("")]
    assert state.input == ""


def test_escape_before_anything_is_shown_cancels_at_once() -> None:
    state = started()
    assert escape_step(state) is EscapeStep.CANCEL_RUN
    assert press_escape(state) == [Send(Cancel("t1", Cause.USER_CANCEL))]
    assert not is_("popup_open", state)
    assert state.run is not None
    assert state.run.phase is RunPhase.STOPPING


def test_escape_with_no_run_clears_the_input() -> None:
    state = TuiState(connected=True)
    typed(state, "draft text")
    assert press_escape(state) == [SetInput("")]
    assert state.input == ""


def test_picker_reopens_when_the_text_changes() -> None:
    state = TuiState()
    typed(state, "/")
    assert is_("picker_open", state)
    press_escape(state)
    assert not is_("picker_open", state)
    typed(state, "/n")
    assert is_("picker_open", state)
    assert state.picker_items == [("/new", "start a new conversation in this window")]


# -- the buffered early cancel -----------------------------------------------------------


def test_cancel_before_the_task_hash_is_held_and_sent_with_the_first_task_frame() -> None:
    state = TuiState(connected=True)
    typed(state, "go")
    press_enter(state, now=0.0)
    assert press_escape(state) == []  # nothing shown, no hash yet: held
    assert state.run is not None
    assert state.run.held_cancel is Cause.USER_CANCEL
    assert on_task(state, TaskFrame("t9", "cli-x")) == [Send(Cancel("t9", Cause.USER_CANCEL))]
    assert on_task(state, TaskFrame("t9", "cli-x")) == []  # sent once


def test_ctrl_c_before_the_task_hash_is_held_too() -> None:
    state = TuiState(connected=True)
    typed(state, "go")
    press_enter(state, now=0.0)
    assert press_ctrl_c(state) == []
    assert press_ctrl_c(state) == []  # already held: not twice
    assert on_task(state, TaskFrame("t2", "cli-x")) == [Send(Cancel("t2", Cause.USER_CANCEL))]


# -- the popup ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ("Yes", [Send(Cancel("t1", Cause.USER_CANCEL))]),
        ("Pause", [Send(Cancel("t1", Cause.PAUSE))]),
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
    assert state.overlay == StopPopup(POPUP_CHOICES.index("Pause"))
    assert press_up(state)
    assert press_enter(state, now=1.0) == [Send(Cancel("t1", Cause.USER_CANCEL))]


def test_popup_hotkey_p_pauses() -> None:
    state = started()
    on_text(state, TextFrame("t1", "x"))
    press_escape(state)
    assert press_hotkey(state, "p") == [Send(Cancel("t1", Cause.PAUSE))]


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
    assert press_ctrl_c(state) == [Send(Cancel("t1", Cause.USER_CANCEL))]
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
    tries = [
        ("wrong", "2 tries left"),
        ("wrong again", "1 try left"),
        ("still wrong", "no tries left"),
    ]
    for n, (secret, said) in enumerate(tries, start=1):
        if n > 1:
            again = asking(f"p{n}", RequestKind.PASSWORD, ask.prompt, "t1", error="Wrong password")
            on_ask(state, again)
        typed(state, secret)
        sent = press_enter(state, now=float(n))[0]
        assert sent == Send(AnswerFrame(f"p{n}", "allow", secret=secret))
        on_verify(state, VerifyFrame("t1", False, len(tries) - n, "Wrong password"))
        assert state.notice is not None
        assert said in state.notice.text
    assert state.notice is not None
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
    on_ask_withdrawn(state, AskWithdrawn("q1", "question q1 was withdrawn: its run was paused"))
    assert state.ask is None
    assert state.notice is not None
    assert state.notice.text == "Question q1 was withdrawn: its run was paused"


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
    assert "New conversation" in state.notice.text


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
    # The selection moves to cli-b, whose preview is asked for then.
    assert press_hotkey(state, "d") == [
        Send(PendingRequest(PendingAction.DISCARD, "cli-a")),
        Send(PendingRequest(PendingAction.PREVIEW, "cli-b")),
    ]
    assert isinstance(state.overlay, PendingPicker)
    assert state.overlay.tasks == (task_record("cli-b"),)
    press_hotkey(state, "d")
    assert not is_("pending_open", state)


def test_a_refused_preview_is_not_taken_for_the_refusal_of_the_resume_sent_after_it() -> None:
    state = TuiState(connected=True)
    on_pending(state, listed(task_record("cli-a"), task_record("cli-b")))
    assert press_enter(state, now=1.0) == [Send(PendingRequest(PendingAction.RESUME, "cli-a"))]
    gone = "no pending task of session 'cli-a' is visible to this window"
    on_error(state, ErrorFrame(ErrorCode.NOT_FOUND, gone, ref="pending"))
    # The preview asked for when the list opened was refused; the resume is still starting.
    assert state.run is not None and state.run.session == "cli-a"
    assert "cli-a" not in state.previews
    assert state.notice == Notice(gone, NoticeLevel.ERROR)
    # The resume's own refusal, after it, forgets the run.
    on_error(state, ErrorFrame(ErrorCode.NOT_FOUND, gone, ref="pending"))
    assert state.run is None


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


# -- the link to the daemon --------------------------------------------------------------


def test_enter_while_disconnected_keeps_the_message_in_the_input() -> None:
    state = TuiState(connected=False, link_error="the daemon closed the connection")
    typed(state, "important words")
    assert press_enter(state, now=0.0) == []
    assert state.input == "important words"
    assert state.run is None
    assert state.notice is not None
    assert "your message is sent as soon as it is" in state.notice.text
    # The daemon answers: the message held for it goes, once.
    connected(state, Welcome(1, "0.1.0", "w1"))
    actions = send_when_connected(state, now=1.0)
    assert actions == [
        SetInput(""),
        RememberInput("important words"),
        Send(Run("important words", None, None)),
    ]
    assert state.input == ""
    assert is_("running", state)
    assert state.notice == Notice("Connected: your message was sent", NoticeLevel.INFO)
    assert state.transcript[-1].text == "important words"
    assert send_when_connected(state, now=1.0) == []


def test_a_held_message_changed_before_the_connection_is_not_sent() -> None:
    state = TuiState(connected=False, link_error="the daemon closed the connection")
    typed(state, "first thought")
    press_enter(state, now=0.0)
    typed(state, "first thought, better")
    connected(state, Welcome(1, "0.1.0", "w1"))
    assert send_when_connected(state, now=1.0) == []
    assert state.input == "first thought, better"
    assert state.run is None


def test_a_held_message_waits_while_a_run_is_in_progress() -> None:
    state = TuiState(connected=False, link_error="gone")
    typed(state, "next")
    press_enter(state, now=0.0)
    connected(state, Welcome(1, "0.1.0", "w1"))
    state.run = RunState(started_at=0.0, session=None, text="resumed")  # asked for meanwhile
    assert send_when_connected(state, now=1.0) == []
    assert state.input == "next"
    assert state.notice is not None
    assert "Enter sends it" in state.notice.text


def test_reconnecting_with_text_in_the_input_box_says_enter_sends_it() -> None:
    state = TuiState(connected=True, was_connected=True)
    typed(state, "lost message")
    press_enter(state, now=0.0)
    disconnected(state, "the daemon closed the connection")
    assert state.input == "lost message"
    connected(state, Welcome(1, "0.1.0", "w1"))
    assert state.notice is not None
    assert state.notice.text == (
        "Reconnected to the daemon. Your message is still in the input box: Enter sends it"
    )
    assert press_enter(state, now=2.0)[-1] == Send(Run("lost message", None, None))


def test_a_message_the_daemon_may_not_have_received_comes_back_to_the_input() -> None:
    state = TuiState(connected=True)
    typed(state, "lost message")
    press_enter(state, now=0.0)
    typed(state, "and more")
    actions = disconnected(state, "the daemon closed the connection")
    assert actions == [SetInput("lost message\nand more")]
    assert state.run is None
    assert state.notice is not None
    assert "back in the input box" in state.notice.text


def test_a_lost_run_is_kept_for_pending_and_its_session_is_not_continued() -> None:
    state = started(session="cli-lost")
    on_text(state, TextFrame("t1", "partial"))
    typed(state, "draft")
    assert disconnected(state, "the daemon closed the connection") == []
    assert state.input == "draft"
    assert state.run is None
    assert state.session is None
    assert state.notice is not None
    assert "/pending" in state.notice.text
    assert "Interrupted" in state.transcript[-1].text


def test_a_lost_question_gives_back_the_draft_and_the_typed_answer_but_never_a_secret() -> None:
    state = started()
    typed(state, "my draft")
    on_ask(state, asking("q1", RequestKind.QUESTION, "Name?", "t1"))
    typed(state, "Ada")
    assert disconnected(state, "gone") == [SetInput("my draft\nAda")]
    assert state.ask is None
    state = started()
    typed(state, "my draft")
    on_ask(state, asking("s1", RequestKind.SECRET, "TOKEN", "t1", masked=True))
    typed(state, "hunter2")
    assert disconnected(state, "gone") == [SetInput("my draft")]


def test_ctrl_c_after_the_daemon_is_lost_is_not_stuck_on_a_run() -> None:
    state = started()
    disconnected(state, "gone")
    typed(state, "next")
    press_enter(state, now=1.0)  # refused while disconnected: no run is started
    assert state.run is None
    assert press_ctrl_c(state) == []
    assert state.notice is not None
    assert "Ctrl+C again" in state.notice.text


def test_reconnecting_counts_the_kept_tasks_without_opening_the_list() -> None:
    state = TuiState()
    # The first connection asks only how the daemon is (an HTTP API it could not serve).
    status = Send(DaemonRequest(DaemonAction.STATUS))
    assert connected(state, Welcome(1, "0.1.0", "w1")) == [status]
    disconnected(state, "gone", retry_at=3.0)
    assert "reconnecting in 2s" in status_text(state, now=1.0)
    actions = connected(state, Welcome(1, "0.1.0", "w1"))
    assert actions == [status, Send(PendingRequest(PendingAction.LIST))]
    on_pending(state, listed(task_record("cli-a")))
    assert not is_("pending_open", state)
    assert state.notice is not None
    assert "1 interrupted task is kept: type /pending" in state.notice.text
    # The next /pending opens the list as usual.
    on_pending(state, listed(task_record("cli-a")))
    assert is_("pending_open", state)


def test_status_line_while_the_daemon_starts_and_when_it_cannot_be_reached() -> None:
    state = TuiState()
    assert "connecting" in status_text(state, now=0.0)
    starting_daemon(state, "/tmp/d.sock")
    assert "starting the daemon" in status_text(state, now=0.0)
    assert state.notice is not None
    assert "Starting the daemon on /tmp/d.sock" in state.notice.text
    connect_failed(state, "the hello was refused", retry_at=5.0)
    assert "no daemon: reconnecting in 5s" in status_text(state, now=0.0)
    assert state.notice is not None
    assert "Cannot reach the daemon: the hello was refused" in state.notice.text


def test_a_daemon_without_its_http_api_is_said_once() -> None:
    state = TuiState()
    connected(state, Welcome(1, "0.1.0", "w1"))
    said = "127.0.0.1:8765 is in use (Address already in use)"
    failed = DaemonStatus(7, "/d.sock", "0.1.0", "scripted", "ask", 1.0, 1, 0, http_error=said)
    assert on_frame(state, failed) == []
    assert state.notice is not None
    assert state.notice.level is NoticeLevel.ERROR
    assert state.notice.text.startswith(f"HTTP API not started: {said}; the socket is served")
    assert state.transcript[-1].text == state.notice.text
    state.notice = None
    on_frame(state, failed)  # asked again on reconnecting to the same daemon: said already
    assert state.notice is None
    on_frame(state, attrs.evolve(failed, pid=8))  # another daemon, the same trouble: said
    assert is_("notice", state)
    state.notice = None
    on_frame(state, attrs.evolve(failed, pid=9, http_error=None, http="http://127.0.0.1:8765/"))
    assert state.notice is None


def test_giving_up_starting_the_daemon_keeps_saying_why() -> None:
    state = TuiState()
    gave_up_starting(state, "The daemon failed to start 2 times: ...", retry_at=4.0)
    assert state.notice is not None
    assert state.notice.text == "The daemon failed to start 2 times: ..."
    assert state.transcript[-1].text == state.notice.text
    assert "no daemon, not starting one (see above): looking again in 4s" in status_text(state, 0.0)
    # Each later attempt to find one leaves the notice alone.
    connect_failed(state, "no daemon answers on /d.sock", retry_at=8.0)
    assert state.notice.text == "The daemon failed to start 2 times: ..."
    assert "looking again in 4s" in status_text(state, 4.0)
    connected(state, Welcome(1, "0.1.0", "w1"))
    assert not state.gave_up
    assert "idle" in status_text(state, 5.0)


def test_status_line_labels_the_token_counts() -> None:
    state = started()
    on_usage(state, UsageFrame("t1", 3, 0))
    assert "tokens in 3 / out 0" in status_text(state, now=1.0)
    on_usage(state, UsageFrame("t1", 1200, 10, cache_read_tokens=1024, cache_creation_tokens=100))
    assert "tokens in 1203 (1024 cached) / out 10" in status_text(state, now=1.0)


# -- scrolling the transcript ------------------------------------------------------------


def lines_of(entry: TranscriptEntry) -> int:
    """A stand-in layout: one screen line per line of text."""
    return entry.text.count("\n") + 1


def filled(entries: int) -> TuiState:
    state = started()
    for n in range(entries):
        on_tool_call(state, ToolCallFrame("t1", f"c{n}", f"tool{n}", {}))
    return state


def top_line(state: TuiState, height: int) -> str | None:
    top = scroll_top(state, lines_of, height)
    return None if top is None else state.transcript[top[0]].text


def test_page_up_reads_back_and_new_output_does_not_move_the_view() -> None:
    state = filled(30)  # 31 entries of one line: "> hello", then tool0..tool29
    scroll_pages(state, -1, lines_of, height=10)
    # The last screenful started at tool20; a page back is 8 lines (two stay for context).
    assert top_line(state, 10) == "tool12 "
    for n in range(5):
        on_text(state, TextFrame("t1", f"new {n}\n"))
    assert top_line(state, 10) == "tool12 "
    scroll_by(state, -100, lines_of, height=10)
    assert top_line(state, 10) == "hello"
    assert state.transcript[0].kind is EntryKind.USER


def test_page_down_back_to_the_end_follows_the_output_again() -> None:
    state = filled(30)
    scroll_pages(state, -2, lines_of, height=10)
    assert is_("scroll", state)
    scroll_pages(state, 1, lines_of, height=10)
    assert is_("scroll", state)
    scroll_pages(state, 1, lines_of, height=10)
    assert not is_("scroll", state)
    assert top_line(state, 10) is None


def test_nothing_to_scroll_when_everything_fits() -> None:
    state = filled(3)
    scroll_pages(state, -1, lines_of, height=10)
    assert state.scroll is None


def test_sending_a_message_returns_to_the_end() -> None:
    state = filled(30)
    ended(state, Outcome.FINISHED)
    scroll_pages(state, -1, lines_of, height=10)
    assert state.scroll is not None
    typed(state, "again")
    press_enter(state, now=1.0)
    assert state.scroll is None


def test_help_is_read_from_its_first_line_and_names_every_command() -> None:
    state = filled(30)
    ended(state, Outcome.FINISHED)
    typed(state, "/help")
    state.picker_dismissed = "/help"
    press_enter(state, now=1.0)
    help_entry = state.transcript[-1]
    assert help_entry.kind is EntryKind.HELP
    assert top_line(state, 10) == help_entry.text
    for name, _about in COMMANDS:
        assert name in help_entry.text
    for key in ("Alt+Enter", "Ctrl+R", "PageUp", "Left / Right", "Ctrl+_", "Ctrl+D", "Tab"):
        assert key in help_entry.text
    # A help shorter than the view is simply shown at the end.
    state = TuiState(connected=True)
    typed(state, "/help")
    state.picker_dismissed = "/help"
    press_enter(state, now=1.0)
    assert top_line(state, 100) is None


# -- editing -----------------------------------------------------------------------------


def test_a_second_escape_brings_back_what_the_first_cleared() -> None:
    state = TuiState(connected=True)
    typed(state, "long draft")
    assert press_escape(state) == [SetInput("")]
    assert "Esc brings back" in status_text(state, now=0.0)
    assert escape_step(state) is EscapeStep.RESTORE_INPUT
    assert press_escape(state) == [SetInput("long draft")]
    assert state.input == "long draft"


def test_ctrl_underscore_brings_back_what_escape_cleared_until_something_is_typed() -> None:
    state = TuiState(connected=True)
    typed(state, "long draft")
    press_escape(state)
    assert restore_input(state) == [SetInput("long draft")]
    press_escape(state)
    typed(state, "x")
    assert restore_input(state) == []
    assert not is_("can_restore_input", state)


def test_a_cleared_masked_field_is_not_kept() -> None:
    state = TuiState(connected=True)
    on_ask(state, asking("s1", RequestKind.SECRET, "TOKEN", "t1", masked=True))
    typed(state, "hunter2")
    assert escape_step(state) is EscapeStep.CLEAR_INPUT
    assert press_escape(state) == [SetInput("")]
    assert state.cleared_input is None


def test_left_and_right_move_between_confirmation_choices() -> None:
    state = started()
    on_ask(state, confirm_ask())
    assert press_right(state)
    assert state.choice_index == 1
    assert press_right(state)
    assert press_left(state)
    assert press_enter(state, now=1.0)[0] == Send(AnswerFrame("a1", "allow_session"))
    assert not press_left(state)  # no choices: the cursor moves instead


# -- small things ------------------------------------------------------------------------


def test_pending_list_lines_show_age_and_why_each_task_stopped() -> None:
    paused = PendingTask("cli-a", "interrupted", "stream 300", 1000.0, cause=Cause.PAUSE)
    crashed = PendingTask("cli-b", "running", "sleep 30", 1000.0)
    closed = PendingTask("cli-c", "interrupted", "x", 1000.0, cause=Cause.DISCONNECT)
    asked = PendingTask("cli-d", "awaiting_answer", "ask Colour?", 1000.0, question="Colour?")
    assert pending_line(paused, 1012.0) == "cli-a  paused, 12 s ago: stream 300"
    assert pending_line(crashed, 1000.0 + 180) == "cli-b  daemon died, 3 min ago: sleep 30"
    assert pending_line(closed, 1000.0 + 7200) == "cli-c  window closed, 2 h ago: x"
    assert pending_line(asked, 1000.0 + 86400 * 3) == (
        "cli-d  waiting for an answer, 3 days ago: asks: Colour?"
    )


def test_pending_during_a_run_does_not_list_the_run_itself() -> None:
    state = started(session="cli-running")
    running = PendingTask("cli-running", "running", "hello", 0.0, task="t1")
    on_pending(state, listed(running, task_record("cli-old")))
    assert isinstance(state.overlay, PendingPicker)
    assert state.overlay.tasks == (task_record("cli-old"),)
    on_pending(state, listed(running))
    assert not is_("pending_open", state)
    assert state.notice is not None
    assert "No paused tasks" in state.notice.text


def test_quit_during_a_run_asks_first() -> None:
    state = started()
    typed(state, "/quit")
    state.picker_dismissed = "/quit"
    assert Quit() not in press_enter(state, now=1.0)
    assert is_("quit_popup_open", state)
    assert is_("input_locked", state)
    assert state.overlay == QuitPopup(QUIT_CHOICES.index("Pause and quit"))
    assert press_escape(state) == []
    assert not is_("quit_popup_open", state)
    assert state.run is not None


def test_pause_and_quit_pauses_then_quits_when_the_run_has_ended() -> None:
    state = started()
    run_command(state, "/quit")
    assert press_enter(state, now=1.0) == [Send(Cancel("t1", Cause.PAUSE))]
    assert state.notice is not None
    assert "then quitting" in state.notice.text
    actions = on_ended(
        state, EndedFrame("t1", "cli-s1", Outcome.CANCELLED, cause=Cause.PAUSE, pending_kept=True)
    )
    assert actions == [Quit()]


def test_stop_and_quit_and_cancel_in_the_quit_popup() -> None:
    state = started()
    run_command(state, "/quit")
    assert press_right(state)
    assert press_enter(state, now=1.0) == [Send(Cancel("t1", Cause.USER_CANCEL))]
    assert on_ended(
        state, EndedFrame("t1", "cli-s1", Outcome.CANCELLED, cause=Cause.USER_CANCEL)
    ) == [Quit()]
    state = started()
    run_command(state, "/quit")
    assert press_hotkey(state, "c") == []
    assert state.run is not None
    assert not state.quit_after_run


def test_quit_when_the_daemon_is_lost_while_stopping() -> None:
    state = started()
    run_command(state, "/quit")
    press_hotkey(state, "p")
    assert Quit() in disconnected(state, "gone")


def test_a_popup_open_when_its_run_ends_says_the_run_ended() -> None:
    state = started()
    on_text(state, TextFrame("t1", "x"))
    press_escape(state)
    assert is_("popup_open", state)
    ended(state, Outcome.FINISHED)
    assert not is_("popup_open", state)
    assert state.overlay == EndedPopup("The run ended before you chose: Done")
    assert is_("input_locked", state)
    assert press_enter(state, now=2.0) == []
    assert not is_("ended_popup_open", state)
    # The quit popup says so too, and Enter then quits.
    state = started()
    run_command(state, "/quit")
    ended(state, Outcome.FINISHED)
    assert state.overlay == EndedPopup("The run ended before you chose: Done", quitting=True)
    assert press_enter(state, now=2.0) == [Quit()]


# -- cascade edge cases ------------------------------------------------------------------


def test_escape_right_after_a_resume_always_asks() -> None:
    state = TuiState(connected=True)
    on_pending(state, listed(task_record("cli-a")))
    press_enter(state, now=0.0)
    assert state.run is not None
    assert state.run.resumed
    # Before its first frame, even before its task hash: a resumed task has work to lose.
    assert escape_step(state) is EscapeStep.OPEN_POPUP
    assert press_escape(state) == []
    assert is_("popup_open", state)
    on_task(state, TaskFrame("t3", "cli-a", resumed=True))
    assert escape_step(state) is EscapeStep.OPEN_POPUP


def test_slash_reopens_the_picker_after_escape_closed_it() -> None:
    state = TuiState(connected=True)
    typed(state, "/")
    press_escape(state)
    assert not is_("picker_open", state)
    typed(state, "")
    typed(state, "/")
    assert is_("picker_open", state)
    # And after Esc closed it and another Esc cleared the input.
    press_escape(state)
    press_escape(state)
    assert state.input == ""
    typed(state, "/")
    assert is_("picker_open", state)


def test_a_run_carries_the_windows_folder_and_the_status_line_shows_it() -> None:
    state = TuiState(connected=True, cwd="/home/ada/project")
    input_changed(state, "write a.txt hi")
    actions = press_enter(state, 0.0)
    (send,) = [a for a in actions if isinstance(a, Send)]
    assert isinstance(send.frame, Run)
    assert send.frame.cwd == "/home/ada/project"
    assert "in /home/ada/project" in status_text(state, 0.0)
    assert short_path("/home/ada/project", home="/home/ada") == "~/project"
    assert short_path("/srv/x", home="/home/ada") == "/srv/x"


def test_a_resumed_run_says_what_the_pause_cost() -> None:
    state = TuiState(connected=True)
    state.run = RunState(started_at=0.0, session="cli-1", text="stream 40")
    on_task(state, TaskFrame("t1", "cli-1", True, 3, 1, 40))
    assert state.transcript[-1].kind is EntryKind.INFO
    assert state.transcript[-1].text == "resumed: 3 calls kept, 1 run again, 40 words regenerated"


def test_a_new_run_has_no_cost_line() -> None:
    state = TuiState(connected=True)
    state.run = RunState(started_at=0.0, session=None, text="hi")
    on_task(state, TaskFrame("t1", "cli-1"))
    assert all("resumed:" not in e.text for e in state.transcript)


def test_after_a_reconnect_the_sessions_tokens_come_from_the_store() -> None:
    state = TuiState()
    connected(state, Welcome(1, "0.1.0", "w1"))
    state.session = "cli-a"
    on_usage(state, UsageFrame("t1", 100, 5))
    disconnected(state, "gone", retry_at=3.0)
    actions = connected(state, Welcome(1, "0.1.0", "w1"))
    assert actions == [
        Send(DaemonRequest(DaemonAction.STATUS)),
        Send(PendingRequest(PendingAction.LIST)),
        Send(SessionsRequest(SessionsAction.SHOW, "cli-a", limit=1)),
    ]
    kept = (
        RunTokens("t0", "openai:gpt-4o", TokenCount(2, 900, 40, 512, 8), cost=0.0021),
        RunTokens("t1", "openai:gpt-4o", TokenCount(1, 100, 5), cost=0.0003),
    )
    item = SessionItem("cli-a", "hello", 1.0, 2.0, 5)
    on_session_messages(state, SessionMessages(item, (), None, kept))
    assert "tokens in 1000 (512 cached) / out 45 (8 reasoning) $0.0024" in status_text(state, 1.0)
    # Another session's page changes nothing; /new starts from nothing.
    other = SessionMessages(SessionItem("cli-b", "x", 1.0, 2.0, 1), (), None, kept[:1])
    on_session_messages(state, other)
    assert "tokens in 1000 " in status_text(state, 1.0)
    run_command(state, "/new")
    assert "tokens" not in status_text(state, 1.0)


def test_a_compaction_is_said_where_it_happened() -> None:
    state = started()
    on_compaction(state, CompactionFrame("t1", 312))
    on_compaction(state, CompactionFrame("t1", 1, "sub1"))
    texts = [(e.kind, e.text) for e in state.transcript[-2:]]
    assert texts == [
        (EntryKind.INFO, "(312 earlier messages summarised)"),
        (EntryKind.INFO, "(sub1: 1 earlier message summarised)"),
    ]

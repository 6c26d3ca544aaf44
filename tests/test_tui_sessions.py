"""`/sessions` in the terminal client: pick an earlier conversation and continue it (state level)."""

from __future__ import annotations

from agentrt import Outcome
from agentrt.protocol.frames import EndedFrame
from agentrt.protocol.frames import ErrorCode
from agentrt.protocol.frames import ErrorFrame
from agentrt.protocol.frames import PendingAction
from agentrt.protocol.frames import PendingRequest
from agentrt.protocol.frames import Run
from agentrt.protocol.frames import SessionItem
from agentrt.protocol.frames import SessionList
from agentrt.protocol.frames import SessionMessage
from agentrt.protocol.frames import SessionMessages
from agentrt.protocol.frames import SessionsAction
from agentrt.protocol.frames import SessionsRequest
from agentrt.protocol.frames import TaskFrame
from agentrt.protocol.frames import ToolResultFrame
from agentrt.vocab.clamp import PREVIEW_BYTES
from agentrt.vocab.clamp import preview
from agenttui._render import entry_lines
from agenttui._state import HISTORY_SHOWN
from agenttui._state import SESSIONS_PAGE
from agenttui._state import EntryKind
from agenttui._state import RememberInput
from agenttui._state import Send
from agenttui._state import SessionsPicker
from agenttui._state import SetInput
from agenttui._state import TuiState
from agenttui._transitions_daemon import disconnected
from agenttui._transitions_daemon import on_error
from agenttui._transitions_daemon import on_frame
from agenttui._transitions_daemon import on_task
from agenttui._transitions_keys import input_changed
from agenttui._transitions_keys import press_down
from agenttui._transitions_keys import press_enter
from agenttui._transitions_keys import press_escape
from agenttui._transitions_keys import press_up
from agenttui._words import session_line

LIST = Send(SessionsRequest(SessionsAction.LIST, limit=SESSIONS_PAGE))


def is_(flag: str, state: TuiState) -> bool:
    """Read a flag through a call, so that the type checker does not narrow it across steps."""
    return bool(getattr(state, flag))


def item(session: str, title: str, messages: int = 4, status: str | None = None) -> SessionItem:
    return SessionItem(session, title, 100.0, 200.0, messages, status)


def opened(*items: SessionItem) -> TuiState:
    """A connected window whose `/sessions` picker shows `items`."""
    state = TuiState(connected=True)
    assert _command(state, "/sessions") == [SetInput(""), LIST]
    on_frame(state, SessionList(items))
    return state


def _command(state: TuiState, text: str) -> list[object]:
    input_changed(state, text)
    state.picker_dismissed = text  # typed in full: Enter runs it
    return list(press_enter(state, now=0.0))


def test_sessions_opens_a_picker_and_enter_continues_the_chosen_conversation() -> None:
    state = opened(item("cli-new", "today's talk", 2), item("cli-old", "yesterday's talk", 30))
    assert is_("sessions_open", state) and is_("input_locked", state)
    press_down(state)
    actions = press_enter(state, now=1.0)
    # The last messages are asked for: seq 10 .. 29 of 30.
    assert actions == [
        Send(SessionsRequest(SessionsAction.SHOW, "cli-old", after=9, limit=HISTORY_SHOWN))
    ]
    assert not is_("sessions_open", state)
    assert state.session == "cli-old"
    assert state.notice is not None and "yesterday's talk" in state.notice.text
    on_frame(
        state,
        SessionMessages(
            item("cli-old", "yesterday's talk", 30),
            (
                SessionMessage(27, "user", "read notes.txt", 1.0),
                SessionMessage(
                    28,
                    "assistant",
                    "",
                    1.0,
                    ({"id": "c1", "name": "read_file", "arguments": {"path": "notes.txt"}},),
                ),
                SessionMessage(
                    29, "tool", "remember this", 1.0, tool_call_id="c1", name="read_file"
                ),
            ),
        ),
    )
    shown = [(e.kind, e.text) for e in state.transcript]
    assert shown == [
        (EntryKind.INFO, "Continuing cli-old: yesterday's talk (30 messages)"),
        (EntryKind.INFO, "(the 27 earlier messages are not shown)"),
        (EntryKind.USER, "read notes.txt"),
        (EntryKind.TOOL_CALL, "read_file path='notes.txt'"),
        (EntryKind.TOOL_RESULT, "read_file: remember this"),
    ]
    # The next message goes to that session: the daemon gives the model its history.
    input_changed(state, "what did it say?")
    assert press_enter(state, now=2.0)[-1] == Send(Run("what did it say?", "cli-old"))
    on_task(state, TaskFrame("t1", "cli-old"))
    on_frame(state, EndedFrame("t1", "cli-old", Outcome.FINISHED))
    assert state.session == "cli-old"  # and the one after it too


def test_a_long_list_is_fetched_page_by_page_before_the_picker_opens() -> None:
    state = TuiState(connected=True)
    _command(state, "/sessions")
    first = SessionList(tuple(item(f"cli-{n}", f"talk {n}") for n in range(3)), next="c1")
    assert on_frame(state, first) == [
        Send(SessionsRequest(SessionsAction.LIST, limit=SESSIONS_PAGE, cursor="c1"))
    ]
    assert not is_("sessions_open", state)
    assert on_frame(state, SessionList((item("cli-9", "talk 9"),))) == []
    assert isinstance(state.overlay, SessionsPicker)
    assert [i.session for i in state.overlay.items] == ["cli-0", "cli-1", "cli-2", "cli-9"]
    press_up(state)
    assert isinstance(state.overlay, SessionsPicker)
    assert state.overlay.index == 3  # wraps round to the last


def test_a_conversation_with_a_pending_task_is_resumed_instead() -> None:
    state = opened(item("cli-p", "stream 300", 1, status="interrupted"))
    assert press_enter(state, now=1.0) == [Send(PendingRequest(PendingAction.RESUME, "cli-p"))]
    assert state.run is not None and state.run.resumed
    assert state.session == "cli-p"


def test_esc_closes_the_picker_and_an_empty_list_says_so() -> None:
    state = opened(item("cli-a", "a"))
    assert press_escape(state) == []
    assert not is_("sessions_open", state) and state.session is None
    empty = opened()
    assert not is_("sessions_open", empty)
    assert empty.notice is not None and "No earlier conversations" in empty.notice.text


def test_the_running_session_is_not_listed_and_switching_waits_for_the_run() -> None:
    state = TuiState(connected=True)
    input_changed(state, "stream 50")
    assert press_enter(state, now=0.0)[1] == RememberInput("stream 50")
    on_task(state, TaskFrame("t1", "cli-now"))
    _command(state, "/sessions")
    on_frame(state, SessionList((item("cli-now", "stream 50"), item("cli-old", "old"))))
    assert isinstance(state.overlay, SessionsPicker)
    assert state.overlay.items == (item("cli-old", "old"),)
    assert press_enter(state, now=1.0) == []
    assert state.session == "cli-now"
    assert state.notice is not None and "A run is in progress" in state.notice.text


def test_a_conversation_removed_meanwhile_is_not_continued() -> None:
    state = opened(item("cli-gone", "gone"))
    press_enter(state, now=1.0)
    on_error(state, ErrorFrame(ErrorCode.NOT_FOUND, "no session 'cli-gone'", "sessions"))
    assert state.session is None
    assert state.notice is not None and "no session" in state.notice.text


def test_losing_the_daemon_closes_the_picker_and_sessions_needs_a_connection() -> None:
    state = opened(item("cli-a", "a"))
    disconnected(state, "gone")
    assert not is_("sessions_open", state)
    assert _command(state, "/sessions") == [SetInput("")]
    assert state.notice is not None and "/sessions works once it is" in state.notice.text


def test_a_picker_line_shows_title_age_size_and_id() -> None:
    line = session_line(item("cli-3fa9", "hello   there", 1), wall_now=200.0 + 7200)
    assert line == "hello there  (2 h ago, 1 message)  cli-3fa9"
    pending = session_line(item("cli-p", "x" * 80, 3, "awaiting_answer"), wall_now=260.0)
    assert pending == (
        "x" * 59 + "…  (1 min ago, 3 messages, awaiting answer: Enter resumes it)  cli-p"
    )


def test_a_continued_conversation_shows_a_saved_result_as_its_live_preview() -> None:
    # A 32 KiB result (what `big 32768` returns), saved whole with the conversation.
    result = ("0123456789abcdef" * 2048)[:32768]
    live = TuiState(connected=True)
    assert _command(live, "big 32768")[-1] == Send(Run("big 32768"))
    on_task(live, TaskFrame("t1", "cli-old"))
    on_frame(live, ToolResultFrame("t1", "c1", "big", preview(result)))
    live_entry = live.transcript[-1]

    state = opened(item("cli-old", "big", 3))
    press_enter(state, now=1.0)
    on_frame(
        state,
        SessionMessages(
            item("cli-old", "big", 3),
            (
                SessionMessage(0, "user", "big 32768", 1.0),
                SessionMessage(
                    1, "assistant", "", 1.0, ({"id": "c1", "name": "big", "arguments": {}},)
                ),
                SessionMessage(2, "tool", result, 1.0, tool_call_id="c1", name="big"),
            ),
        ),
    )
    continued = state.transcript[-1]
    assert (continued.kind, continued.text) == (live_entry.kind, live_entry.text)
    assert continued.text == "big: " + result[:PREVIEW_BYTES]
    # Three lines at 120 columns, as live, not the 280 of the whole result.
    assert len(entry_lines(continued, 120)) == len(entry_lines(live_entry, 120)) == 3

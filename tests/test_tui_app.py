"""The full-screen application, driven through a pipe input with a dummy output."""

from __future__ import annotations

import asyncio
import stat
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Iterator
from pathlib import Path

import pytest
from prompt_toolkit.application import create_app_session
from prompt_toolkit.history import History
from prompt_toolkit.history import InMemoryHistory
from prompt_toolkit.input import PipeInput
from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output import DummyOutput

from agentrt import CONFIRM_CHOICES
from agentrt import Cause
from agentrt import Outcome
from agentrt import RequestKind
from agentrt.protocol.frames import AnswerFrame
from agentrt.protocol.frames import AskFrame
from agentrt.protocol.frames import Cancel
from agentrt.protocol.frames import ClientFrame
from agentrt.protocol.frames import EndedFrame
from agentrt.protocol.frames import PendingAction
from agentrt.protocol.frames import PendingList
from agentrt.protocol.frames import PendingPreview
from agentrt.protocol.frames import PendingRequest
from agentrt.protocol.frames import PendingTask
from agentrt.protocol.frames import Run
from agentrt.protocol.frames import TaskFrame
from agentrt.protocol.frames import TextFrame
from agentrt.vocab.stops import CallState
from agentrt.vocab.stops import PreviewCall
from agentrt.vocab.stops import ResumePreview
from agentrt.vocab.stops import StopKind
from agenttui._app import TuiApp
from agenttui._app import _pending
from agenttui._history import FileHistory
from agenttui._history import history_path
from agenttui._state import TuiState

ESC = "\x1b"
ENTER = "\r"
CTRL_C = "\x03"
DOWN = "\x1b[B"
UP = "\x1b[A"
CTRL_D = "\x04"


@pytest.fixture
def pipe() -> Iterator[PipeInput]:
    with create_pipe_input() as pipe_input:
        yield pipe_input


#: Bound on every wait for the application to react.
REACT_TIMEOUT = 5.0


async def until(app: TuiApp, condition: Callable[[], bool], what: str) -> None:
    """Wait until `condition` holds, re-checking each time the application redraws."""
    redrawn = asyncio.Event()

    def wake(_: object) -> None:
        redrawn.set()

    app.application.after_render += wake
    try:
        async with asyncio.timeout(REACT_TIMEOUT):
            while not condition():
                await redrawn.wait()
                redrawn.clear()
    except TimeoutError:
        raise AssertionError(f"timed out waiting: {what}") from None
    finally:
        app.application.after_render -= wake


async def press(app: TuiApp, pipe: PipeInput, keys: str, text: str, what: str) -> None:
    """Send `keys` and wait until the input holds `text`."""
    pipe.send_text(keys)
    await until(app, lambda: app.buffer.text == text, what)


def drive(
    pipe: PipeInput,
    scenario: Callable[[TuiApp, list[ClientFrame]], Awaitable[None]],
    history: History | None = None,
) -> None:
    """Run the application with `scenario` feeding it keys and frames; it must quit by itself."""

    async def main() -> None:
        sent: list[ClientFrame] = []
        with create_app_session(input=pipe, output=DummyOutput()):
            app = TuiApp(
                TuiState(connected=True), sent.append, history=history or InMemoryHistory()
            )
            started = asyncio.Event()
            running = asyncio.ensure_future(app.application.run_async(pre_run=started.set))
            async with asyncio.timeout(REACT_TIMEOUT):
                await started.wait()
            await scenario(app, sent)
            async with asyncio.timeout(5):
                await running

    asyncio.run(main())


def test_message_escape_popup_pause_and_quit(pipe: PipeInput) -> None:
    async def scenario(app: TuiApp, sent: list[ClientFrame]) -> None:
        state = app.state
        pipe.send_text("hello" + ENTER)
        await until(app, lambda: sent == [Run("hello", None)], "the run frame was sent")
        assert app.buffer.text == ""
        app.receive(TaskFrame("t1", "cli-1"))
        app.receive(TextFrame("t1", "Hi "))
        app.receive(TextFrame("t1", "there"))
        assert state.transcript[-1].text == "Hi there"
        pipe.send_text(ESC)
        await until(app, lambda: state.popup_open, "Esc opened the popup")
        pipe.send_text("p")
        await until(app, lambda: sent[-1] == Cancel("t1", Cause.PAUSE), "Pause sent a cancel")
        app.receive(
            EndedFrame("t1", "cli-1", Outcome.CANCELLED, cause=Cause.PAUSE, pending_kept=True)
        )
        assert state.notice is not None
        assert "/pending" in state.notice.text
        pipe.send_text(CTRL_C)
        await until(app, lambda: state.quit_armed, "a first Ctrl+C arms quitting")
        pipe.send_text(CTRL_C)

    drive(pipe, scenario)


def test_escape_cascade_through_the_keyboard(pipe: PipeInput) -> None:
    async def scenario(app: TuiApp, sent: list[ClientFrame]) -> None:
        state = app.state
        app.notify("something to read")
        pipe.send_text("/")
        await until(app, lambda: state.picker_open, "typing / opens the picker")
        pipe.send_text(ESC)
        await until(app, lambda: not state.picker_open, "Esc closed the picker")
        assert state.notice is not None
        pipe.send_text(ESC)
        await until(app, lambda: state.notice is None, "Esc closed the notice")
        assert app.buffer.text == "/"
        await press(app, pipe, ESC, "", "Esc cleared the input")
        await press(app, pipe, "/q\t", "/quit", "Tab completed the command")
        pipe.send_text(ENTER)

    drive(pipe, scenario)


def test_escape_before_the_first_event_is_held_then_sent(pipe: PipeInput) -> None:
    async def scenario(app: TuiApp, sent: list[ClientFrame]) -> None:
        pipe.send_text("go" + ENTER)
        await until(app, lambda: len(sent) == 1, "the run was sent")
        pipe.send_text(ESC)
        await until(app, lambda: app.state.notice is not None, "the cancel is held")
        assert len(sent) == 1
        app.receive(TaskFrame("t5", "cli-5"))
        assert sent[-1] == Cancel("t5", Cause.USER_CANCEL)
        app.receive(EndedFrame("t5", "cli-5", Outcome.CANCELLED, cause=Cause.USER_CANCEL))
        pipe.send_text("\x04")  # Ctrl+D

    drive(pipe, scenario)


def test_confirmation_and_masked_secret_from_the_keyboard(pipe: PipeInput) -> None:
    async def scenario(app: TuiApp, sent: list[ClientFrame]) -> None:
        state = app.state
        pipe.send_text("draft")
        await until(app, lambda: state.input == "draft", "typed")
        app.receive(AskFrame("a1", "t1", "cli-1", RequestKind.CONFIRM, "write f?", CONFIRM_CHOICES))
        assert app.buffer.text == ""
        pipe.send_text("zz")  # the choices have the keys: the input box stays read-only
        pipe.send_text(DOWN + ENTER)
        await until(app, lambda: bool(sent), "the confirmation was answered")
        assert sent == [AnswerFrame("a1", "allow_session")]
        assert app.buffer.text == "draft"
        app.receive(AskFrame("s1", "t1", "cli-1", RequestKind.SECRET, "TOKEN", masked=True))
        pipe.send_text("hunter2" + ENTER)
        await until(app, lambda: len(sent) == 2, "the secret was sent")
        assert sent[-1] == AnswerFrame("s1", "", secret="hunter2")
        assert "hunter2" not in app.buffer.history.get_strings()
        assert app.buffer.text == "draft"
        await press(app, pipe, ESC, "", "Esc cleared the draft")
        pipe.send_text("/quit")
        await until(app, lambda: state.picker_open, "the picker opened")
        # Esc and Enter arriving together are Alt+Enter: a person presses them apart.
        pipe.send_text(ESC)
        await until(app, lambda: not state.picker_open, "Esc closed the picker")
        pipe.send_text(ENTER)

    drive(pipe, scenario)


CTRL_D = "\x04"
CTRL_J = "\n"
CTRL_R = "\x12"
CTRL_UNDERSCORE = "\x1f"
UP = "\x1b[A"
RIGHT = "\x1b[C"
PAGE_UP = "\x1b[5~"
PAGE_DOWN = "\x1b[6~"
ALT_ENTER = ESC + ENTER


def wheel(up: bool, x: int = 5, y: int = 5) -> str:
    """A mouse wheel step in the SGR encoding terminals use."""
    return f"\x1b[<{64 if up else 65};{x};{y}M"


def finish(app: TuiApp, task: str, session: str = "cli-1") -> None:
    app.receive(TaskFrame(task, session))
    app.receive(EndedFrame(task, session, Outcome.FINISHED))


def test_up_recalls_sent_messages_and_they_survive_a_restart(
    pipe: PipeInput, tmp_path: Path
) -> None:
    path = history_path(tmp_path / "state")

    async def first(app: TuiApp, sent: list[ClientFrame]) -> None:
        pipe.send_text("first message" + ENTER)
        await until(app, lambda: len(sent) == 1, "the first run was sent")
        finish(app, "t1")
        pipe.send_text("second message" + ENTER)
        await until(app, lambda: len(sent) == 2, "the second run was sent")
        finish(app, "t2")
        await press(app, pipe, UP, "second message", "Up recalled the last")
        await press(app, pipe, UP, "first message", "Up recalled the first")
        await press(app, pipe, ESC, "", "Esc cleared it")
        pipe.send_text(CTRL_D)

    drive(pipe, first, FileHistory(path))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600

    async def again(app: TuiApp, sent: list[ClientFrame]) -> None:
        await press(app, pipe, UP, "second message", "Up after a restart")
        await press(app, pipe, UP, "first message", "and further back")
        await press(app, pipe, ESC, "", "Esc cleared it")
        pipe.send_text(CTRL_D)

    with create_pipe_input() as second_pipe:
        pipe = second_pipe
        drive(second_pipe, again, FileHistory(path))


def test_ctrl_r_searches_earlier_messages(pipe: PipeInput) -> None:
    history = InMemoryHistory()
    for text in ("deploy to staging", "hello there", "write notes.txt hi"):
        history.append_string(text)

    async def scenario(app: TuiApp, sent: list[ClientFrame]) -> None:
        layout = app.application.layout
        pipe.send_text(CTRL_R + "hel")
        await until(app, lambda: layout.is_searching, "the search opened")
        pipe.send_text(CTRL_C)
        await until(app, lambda: not layout.is_searching, "Ctrl+C left the search")
        assert app.buffer.text == ""
        assert not app.state.quit_armed  # it did not reach the window's own Ctrl+C
        pipe.send_text(CTRL_R)
        await until(app, lambda: layout.is_searching, "the search opened again")
        pipe.send_text("deplo")
        await until(
            app,
            lambda: layout.current_buffer is not None and layout.current_buffer.text == "deplo",
            "typed into the search",
        )
        pipe.send_text(ENTER)
        await until(app, lambda: not layout.is_searching, "Enter took the match")
        assert app.buffer.text == "deploy to staging"
        assert sent == []
        pipe.send_text(ENTER)
        await until(app, lambda: sent == [Run("deploy to staging", None)], "and sent it")
        finish(app, "t1")
        pipe.send_text(CTRL_D)

    drive(pipe, scenario, history)


def test_alt_enter_and_ctrl_j_start_new_lines(pipe: PipeInput) -> None:
    async def scenario(app: TuiApp, sent: list[ClientFrame]) -> None:
        await press(
            app,
            pipe,
            "one" + ALT_ENTER + "two" + CTRL_J + "three",
            "one\ntwo\nthree",
            "three lines typed",
        )
        assert sent == []
        pipe.send_text(ENTER)
        await until(app, lambda: sent == [Run("one\ntwo\nthree", None)], "sent as one message")
        finish(app, "t1")
        pipe.send_text(CTRL_D)

    drive(pipe, scenario)


def test_escape_clears_and_ctrl_underscore_or_escape_brings_it_back(pipe: PipeInput) -> None:
    async def scenario(app: TuiApp, sent: list[ClientFrame]) -> None:
        await press(app, pipe, "a long draft", "a long draft", "typed")
        await press(app, pipe, ESC, "", "Esc cleared it")
        await press(app, pipe, CTRL_UNDERSCORE, "a long draft", "Ctrl+_ brought it back")
        await press(app, pipe, ESC, "", "Esc cleared it again")
        await press(app, pipe, ESC, "a long draft", "a second Esc restored it")
        await press(app, pipe, ESC, "", "cleared")
        pipe.send_text(CTRL_D)

    drive(pipe, scenario)


def test_right_moves_between_confirmation_choices(pipe: PipeInput) -> None:
    async def scenario(app: TuiApp, sent: list[ClientFrame]) -> None:
        app.receive(AskFrame("a1", "t1", "cli-1", RequestKind.CONFIRM, "write f?", CONFIRM_CHOICES))
        pipe.send_text(RIGHT + RIGHT)
        await until(app, lambda: app.state.choice_index == 2, "Right moved twice")
        pipe.send_text("\x1b[D")  # Left
        await until(app, lambda: app.state.choice_index == 1, "Left moved back")
        pipe.send_text(ENTER)
        await until(app, lambda: bool(sent), "answered")
        assert sent == [AnswerFrame("a1", "allow_session")]
        pipe.send_text(CTRL_D)

    drive(pipe, scenario)


def test_page_keys_and_the_mouse_wheel_scroll_the_transcript(pipe: PipeInput) -> None:
    async def scenario(app: TuiApp, sent: list[ClientFrame]) -> None:
        state = app.state
        pipe.send_text("go" + ENTER)
        await until(app, lambda: bool(sent), "the run was sent")
        app.receive(TaskFrame("t1", "cli-1"))
        app.receive(TextFrame("t1", "\n".join(f"line {n}" for n in range(100))))
        pipe.send_text(PAGE_UP)
        await until(app, lambda: state.scroll is not None, "PageUp read back")
        before = state.scroll
        assert before is not None
        # New output does not move the view.
        app.receive(TextFrame("t1", "\nmore output"))
        assert state.scroll == before
        assert any("more below" in text for text in screen_text(app))
        pipe.send_text(wheel(up=True))
        await until(
            app,
            lambda: state.scroll is not None and state.scroll.line == before.line - 3,
            "the wheel scrolled back three lines",
        )
        pipe.send_text(wheel(up=False))
        await until(app, lambda: state.scroll == before, "and forward again")
        pipe.send_text(PAGE_DOWN + PAGE_DOWN)
        await until(app, lambda: state.scroll is None, "PageDown back to the end follows again")
        assert not any("more below" in text for text in screen_text(app))
        app.receive(EndedFrame("t1", "cli-1", Outcome.FINISHED))
        pipe.send_text(CTRL_D)

    drive(pipe, scenario)


def screen_text(app: TuiApp) -> list[str]:
    """The transcript's visible lines, as text."""
    return ["".join(t for _, t in line) for line in app.transcript.rows()]


def test_quit_during_a_run_asks_and_pause_and_quit_waits_for_the_end(pipe: PipeInput) -> None:
    async def scenario(app: TuiApp, sent: list[ClientFrame]) -> None:
        state = app.state
        pipe.send_text("go" + ENTER)
        await until(app, lambda: bool(sent), "the run was sent")
        app.receive(TaskFrame("t1", "cli-1"))
        app.receive(TextFrame("t1", "working"))
        pipe.send_text("/quit")
        await until(app, lambda: state.picker_open, "the picker")
        pipe.send_text(ENTER)
        await until(app, lambda: state.quit_popup_open, "the quit popup")
        pipe.send_text("c")
        await until(app, lambda: not state.quit_popup_open, "Cancel closed it")
        pipe.send_text("/quit")
        await until(app, lambda: state.picker_open, "the picker again")
        pipe.send_text(ENTER)
        await until(app, lambda: state.quit_popup_open, "the quit popup again")
        pipe.send_text("p")
        await until(app, lambda: sent[-1] == Cancel("t1", Cause.PAUSE), "Pause and quit pauses")
        assert app.application.is_running
        app.receive(
            EndedFrame("t1", "cli-1", Outcome.CANCELLED, cause=Cause.PAUSE, pending_kept=True)
        )

    drive(pipe, scenario)


def pending_text(app: TuiApp) -> str:
    """The `/pending` list as drawn, as text."""
    return "".join(fragment[1] for fragment in _pending(app.state, 0.0))


def test_the_pending_list_shows_what_resuming_the_selected_task_will_do(pipe: PipeInput) -> None:
    paused = PendingTask("cli-a", "interrupted", "sleep 30", 0.0, Cause.PAUSE)
    other = PendingTask("cli-b", "interrupted", "hello", 0.0, Cause.DISCONNECT)
    stopped = PreviewCall("call_1_0", "sleep", CallState.STOPPED)

    async def scenario(app: TuiApp, sent: list[ClientFrame]) -> None:
        state = app.state
        app.receive(PendingList((paused, other)))
        assert state.pending_open
        # Opening the list asks about its selected task, and says it is asking.
        assert sent == [PendingRequest(PendingAction.PREVIEW, "cli-a")]
        assert pending_text(app).endswith(
            "\nIf resumed: (asking the daemon what a resume would do...)"
        )
        app.receive(PendingPreview("cli-a", ResumePreview(to_run=(stopped,), stop=StopKind.PAUSE)))
        assert pending_text(app).endswith(
            "\nIf resumed:\n  resume will run 1 call:\n"
            "    sleep call_1_0 (stopped while running at the pause)"
        )
        pipe.send_text(DOWN)
        await until(app, lambda: len(sent) == 2, "Down asked about the task it reached")
        assert sent[-1] == PendingRequest(PendingAction.PREVIEW, "cli-b")
        app.receive(PendingPreview("cli-b", ResumePreview()))
        shown = pending_text(app)
        assert shown.endswith(
            "\nIf resumed:\n  nothing is redone: the model goes on from what was saved"
        )
        assert "sleep call_1_0" not in shown
        pipe.send_text(UP)
        await until(app, lambda: "sleep call_1_0" in pending_text(app), "Up shows cli-a's again")
        assert len(sent) == 2, "a preview already known is not asked again"
        pipe.send_text(ESC)
        await until(app, lambda: not state.pending_open, "Esc closed the list")
        pipe.send_text(CTRL_D)

    drive(pipe, scenario)


class FrozenClockLoop(asyncio.SelectorEventLoop):
    """An event loop whose clock never moves: no timer ever fires."""

    def time(self) -> float:
        return 1000.0


def test_escape_acts_without_waiting_for_a_timer(pipe: PipeInput) -> None:
    """A lone Esc is handled within a few turns of the loop: no pause decides it is alone."""

    async def turns(condition: Callable[[], bool], limit: int = 500) -> bool:
        for _ in range(limit):
            if condition():
                return True
            await asyncio.sleep(0)
        return condition()

    async def main() -> None:
        sent: list[ClientFrame] = []
        with create_app_session(input=pipe, output=DummyOutput()):
            app = TuiApp(TuiState(connected=True), sent.append)
            running = asyncio.ensure_future(app.application.run_async())
            try:
                pipe.send_text("go" + ENTER)
                assert await turns(lambda: bool(sent)), "Enter was not handled"
                pipe.send_text(ESC)
                handled = await turns(lambda: app.state.run is not None and app.state.run.stopping)
                assert handled, "Esc waited for a timer before acting"
            finally:
                app.application.exit()
                await running

    loop = FrozenClockLoop()
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()


def _timers() -> list[asyncio.TimerHandle]:
    """The timers the event loop holds (none cancelled): every wake-up scheduled ahead."""
    loop = asyncio.get_running_loop()
    scheduled: list[asyncio.TimerHandle] = getattr(loop, "_scheduled")  # noqa: B009
    return [timer for timer in scheduled if not timer.cancelled()]


def test_a_run_moves_the_status_line_and_an_idle_window_schedules_nothing(pipe: PipeInput) -> None:
    async def scenario(app: TuiApp, sent: list[ClientFrame]) -> None:
        state = app.state
        await until(app, lambda: app.application.render_counter > 0, "the first screen")
        # Idle from the start: no redraw, no timer, no task is waiting to wake it.
        assert app.scheduled == 0 and _timers() == []
        pipe.send_text("go" + ENTER)
        await until(app, lambda: bool(sent), "the run was sent")
        # While a run goes, the status line's spinner and time move by themselves.
        assert app.scheduled == 1 and len(_timers()) == 1
        app.receive(TaskFrame("t1", "cli-1"))
        for n in range(500):
            app.receive(TextFrame("t1", f"word{n} "))
        # The pieces are drawn together: one redraw is due for all of them.
        assert app.scheduled == 2
        await until(app, lambda: app.scheduled == 1, "the pieces drawn (the spinner goes on)")
        drawn = app.application.render_counter
        app.receive(EndedFrame("t1", "cli-1", Outcome.FINISHED))
        await until(app, lambda: app.application.render_counter > drawn, "the end drawn")
        assert "Done" in "".join(screen_text(app))
        assert not app.application.invalidated
        drawn = app.application.render_counter
        assert state.run is None
        assert app.scheduled == 0 and _timers() == []
        # The loop turns with nothing to do: no redraw comes by itself.
        for _ in range(50):
            await asyncio.sleep(0)
        assert app.application.render_counter == drawn
        assert all(task.done() for task in getattr(app.application, "_background_tasks"))  # noqa: B009
        pipe.send_text(CTRL_D)

    drive(pipe, scenario)

"""The full-screen application, driven through a pipe input with a dummy output."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator

import pytest
from prompt_toolkit.application import create_app_session
from prompt_toolkit.input import PipeInput, create_pipe_input
from prompt_toolkit.output import DummyOutput

from agentrt._cause import Cause
from agentrt._events import Outcome
from agentrt._pending import CONFIRM_CHOICES, RequestKind
from agentrt.frames import (
    AnswerFrame,
    AskFrame,
    Cancel,
    ClientFrame,
    EndedFrame,
    Run,
    TaskFrame,
    TextFrame,
)
from agenttui._app import TuiApp
from agenttui._state import TuiState

ESC = "\x1b"
ENTER = "\r"
CTRL_C = "\x03"
DOWN = "\x1b[B"


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


def drive(
    pipe: PipeInput, scenario: Callable[[TuiApp, list[ClientFrame]], Awaitable[None]]
) -> None:
    """Run the application with `scenario` feeding it keys and frames; it must quit by itself."""

    async def main() -> None:
        sent: list[ClientFrame] = []
        with create_app_session(input=pipe, output=DummyOutput()):
            app = TuiApp(TuiState(connected=True), sent.append)
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
        await until(app, lambda: sent[-1] == Cancel("t1", pause=True), "Pause sent a cancel")
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
        pipe.send_text(ESC)
        await until(app, lambda: app.buffer.text == "", "Esc cleared the input")
        pipe.send_text("/q\t")
        await until(app, lambda: app.buffer.text == "/quit", "Tab completed the command")
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
        assert sent[-1] == Cancel("t5", pause=False)
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
        pipe.send_text(ESC)
        await until(app, lambda: app.buffer.text == "", "Esc cleared the draft")
        pipe.send_text("/quit" + ESC + ENTER)

    drive(pipe, scenario)

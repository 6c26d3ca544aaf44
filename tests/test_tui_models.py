"""`/model`, `/new` and ``@path`` attachments in the window's state, and the attaching itself."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from prompt_toolkit.completion import CompleteEvent
from prompt_toolkit.document import Document

from agentrt.protocol.codec import MAX_FRAME_SIZE
from agentrt.protocol.frames import EndedFrame
from agentrt.protocol.frames import ErrorCode
from agentrt.protocol.frames import ErrorFrame
from agentrt.protocol.frames import ModelItem
from agentrt.protocol.frames import ModelList
from agentrt.protocol.frames import ModelsAction
from agentrt.protocol.frames import ModelsRequest
from agentrt.protocol.frames import Run
from agentrt.protocol.frames import TaskFrame
from agentrt.vocab.events import Outcome
from agenttui._attach import ATTACH_LIMIT
from agenttui._attach import AttachCompleter
from agenttui._attach import Attached
from agenttui._attach import AttachError
from agenttui._attach import attach
from agenttui._state import EntryKind
from agenttui._state import ModelPicker
from agenttui._state import Send
from agenttui._state import TuiState
from agenttui._status import status_text
from agenttui._transitions_commands import run_command
from agenttui._transitions_daemon import on_frame
from agenttui._transitions_keys import input_changed
from agenttui._transitions_keys import press_down
from agenttui._transitions_keys import press_enter

MODELS = (
    ModelItem("scripted", True),
    ModelItem("openai:m1"),
    ModelItem("openai:o3", usable=False, why="no API key for the OpenAI API"),
)


def overlay(state: TuiState) -> object:
    """The overlay, read through a call so that the type checker does not narrow it."""
    return state.overlay


def model(state: TuiState) -> str | None:
    """The window's model, read through a call (see `overlay`)."""
    return state.model


def session(state: TuiState) -> str | None:
    """The window's session, read through a call (see `overlay`)."""
    return state.session


def test_slash_model_lists_the_models_with_the_sessions_highlighted_and_switches() -> None:
    state = TuiState(connected=True, session="cli-s1")
    assert run_command(state, "/model") == [Send(ModelsRequest(ModelsAction.LIST, "cli-s1"))]
    on_frame(state, ModelList(MODELS, "cli-s1", "openai:m1"))
    assert state.overlay == ModelPicker(MODELS, 1, "openai:m1")
    assert state.model == "openai:m1"
    press_down(state)
    actions = press_enter(state, now=0.0)
    assert actions == [Send(ModelsRequest(ModelsAction.SET, "cli-s1", "openai:o3"))]
    assert overlay(state) is None
    # The daemon refuses a model that cannot be used: said in the notice box.
    on_frame(state, ErrorFrame(ErrorCode.STATE, "no API key for the OpenAI API", "models"))
    assert state.notice is not None and "no API key" in state.notice.text
    assert state.model == "openai:m1"


def test_slash_model_name_in_a_new_window_adopts_the_session_the_daemon_made() -> None:
    state = TuiState(connected=True)
    assert run_command(state, "/model openai:m1") == [
        Send(ModelsRequest(ModelsAction.SET, None, "openai:m1"))
    ]
    on_frame(state, ModelList(MODELS, "cli-new", "openai:m1"))
    assert state.session == "cli-new" and state.model == "openai:m1"
    assert state.overlay is None
    assert "model openai:m1" in status_text(state, 0.0)
    input_changed(state, "hello")
    actions = press_enter(state, now=0.0)
    assert Send(Run("hello", "cli-new", None)) in actions


def test_slash_model_needs_the_daemon() -> None:
    state = TuiState()
    assert run_command(state, "/model") == []
    assert state.notice is not None and "Not connected" in state.notice.text


def test_slash_new_starts_an_empty_conversation_and_is_refused_during_a_run() -> None:
    state = TuiState(connected=True)
    input_changed(state, "hello")
    press_enter(state, now=0.0)
    on_frame(state, TaskFrame("t1", "cli-s1"))
    run_command(state, "/new")
    assert state.notice is not None and "A run is in progress" in state.notice.text
    on_frame(state, EndedFrame("t1", "cli-s1", Outcome.FINISHED, text="hi"))
    assert state.session == "cli-s1" and state.transcript
    state.model = "openai:m1"
    assert run_command(state, "/new") == []
    assert (session(state), model(state)) == (None, None)
    assert state.transcript == []
    input_changed(state, "again")
    assert Send(Run("again", None, None)) in press_enter(state, now=0.0)


# -- @path -------------------------------------------------------------------------------


def test_a_message_naming_a_file_sends_its_text_and_shows_one_line(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("the word is plum\n", "utf-8")
    state = TuiState(connected=True, cwd=str(tmp_path))
    input_changed(state, "what does @notes.txt say?")
    actions = press_enter(state, 0.0, lambda text: attach(text, str(tmp_path)))
    [run] = [a.frame for a in actions if isinstance(a, Send)]
    assert isinstance(run, Run)
    assert run.text.startswith("what does @notes.txt say?\n\n")
    assert '<file path="notes.txt">\nthe word is plum\n\n</file>' in run.text
    user, attached = state.transcript
    assert (user.kind, user.text) == (EntryKind.USER, "what does @notes.txt say?")
    assert (attached.kind, attached.text) == (EntryKind.ATTACHMENT, "attached notes.txt (17 bytes)")


@pytest.mark.parametrize(
    ("name", "content", "said"),
    [
        ("big.txt", b"x" * (ATTACH_LIMIT + 1), "it is larger than 256 KiB"),
        ("blob.bin", b"PK\x03\x04\x00\x00", "it is a binary file"),
        ("latin.txt", "caf\xe9".encode("latin-1"), "it is a binary file"),
        ("missing.txt", None, "there is no such file in"),
        ("folder", b"", "it is a folder"),
    ],
)
def test_a_file_that_cannot_be_attached_keeps_the_message_and_says_why(
    tmp_path: Path, name: str, content: bytes | None, said: str
) -> None:
    if name == "folder":
        (tmp_path / name).mkdir()
    elif content is not None:
        (tmp_path / name).write_bytes(content)
    state = TuiState(connected=True, cwd=str(tmp_path))
    input_changed(state, f"see @{name}")
    assert press_enter(state, 0.0, lambda text: attach(text, str(tmp_path))) == []
    assert state.notice is not None
    assert f"cannot attach @{name}: {said}" in state.notice.text
    assert "the message was not sent" in state.notice.text
    assert state.input == f"see @{name}" and state.run is None and state.transcript == []


def test_a_file_of_exactly_the_limit_is_attached_and_punctuation_after_a_name_is_not_part_of_it(
    tmp_path: Path,
) -> None:
    (tmp_path / "full.txt").write_bytes(b"y" * ATTACH_LIMIT)
    attached = attach("read @full.txt.", str(tmp_path))
    assert attached.files == (("full.txt", ATTACH_LIMIT),)
    assert attach("no files here, mail me@example.com", str(tmp_path)).files == ()


def test_files_together_too_large_for_one_frame_are_refused(tmp_path: Path) -> None:
    # Quotes are escaped as sent: each file counts twice its size on the wire.
    for n in range(3):
        (tmp_path / f"q{n}.txt").write_text('"' * (ATTACH_LIMIT - 10), "utf-8")
    with pytest.raises(AttachError, match="together too large to send"):
        attach("@q0.txt @q1.txt @q2.txt", str(tmp_path))
    small = attach("@q0.txt", str(tmp_path))
    assert len(json.dumps(small.text)) < MAX_FRAME_SIZE


def test_the_completer_offers_paths_after_an_at_only(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("x", "utf-8")
    (tmp_path / "notebook").mkdir()
    (tmp_path / "notebook" / "page.md").write_text("x", "utf-8")
    (tmp_path / ".hidden").write_text("x", "utf-8")
    completer = AttachCompleter(lambda: str(tmp_path))

    def offered(text: str) -> list[tuple[str, str]]:
        found = completer.get_completions(Document(text, len(text)), CompleteEvent())
        return [(c.text, c.display_text) for c in found]

    assert offered("read @no") == [("tebook/", "notebook/"), ("tes.txt", "notes.txt")]
    assert offered("read @notebook/") == [("page.md", "page.md")]
    assert offered("read @") == [("notebook/", "notebook/"), ("notes.txt", "notes.txt")]
    assert offered("read @.h") == [("idden", ".hidden")]
    assert offered("read no") == []
    assert offered("read @nothing/") == []


def test_handles_decorators_and_code_are_text_and_a_missing_path_is_refused(
    tmp_path: Path,
) -> None:
    (tmp_path / "notes.txt").write_text("plum", "utf-8")
    (tmp_path / "README").write_text("read me", "utf-8")
    plain = "thanks @alice, use @dataclass here: `@notes.txt` and\n```\n@notes.txt\n```"
    assert attach(plain, str(tmp_path)) == Attached(plain)
    # A name with no extension is a file when there is one by that name.
    assert attach("see @README", str(tmp_path)).files == (("README", 7),)
    for missing in ("@src/app", "@nothing.py"):
        with pytest.raises(AttachError, match=f"cannot attach {missing}: there is no such file"):
            attach(f"look at {missing}", str(tmp_path))

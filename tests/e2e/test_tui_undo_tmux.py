"""`/undo` and `/rewind` in the real ``agenttui``, in tmux: a run's files put back, a file
changed since left alone until asked again with force, and a rewind across three turns."""

from __future__ import annotations

from .test_tui_tmux import Terminal
from .test_tui_tmux import World
from .test_tui_tmux import daemon  # noqa: F401  (fixtures)
from .test_tui_tmux import world  # noqa: F401  (fixtures)


def _run(term: Terminal, text: str, asked: str, done: str) -> None:
    """Send `text`, allow the confirmation whose prompt matches `asked`, wait for `done`."""
    term.send(text, rf"\? {asked}", "the confirmation")
    term.keys("1")
    term.wait_for(done, "the call's result")
    term.wait_for(r"idle\s+\|\s+session", "the run to end")


def test_undo_puts_back_the_last_run_and_asks_again_about_a_changed_file(
    daemon: World,  # noqa: F811
) -> None:
    project = daemon.root / "project"
    project.mkdir()
    (project / "a.txt").write_text("before\n")
    term = daemon.open_window(cwd=project)
    _run(term, "write a.txt after", r"write 5 bytes to .*a\.txt", r"wrote 5 bytes")
    assert (project / "a.txt").read_text() == "after"
    (project / "a.txt").write_text("mine\n")
    term.send("/undo", r"1 file\(s\) changed since the run; nothing was put back", "the conflict")
    assert (project / "a.txt").read_text() == "mine\n"
    term.send(
        "/undo force", r"a\.txt \(its newer content kept in .*a\.txt\.agentrt-undo-1\)", "the undo"
    )
    assert (project / "a.txt").read_text() == "before\n"
    assert (project / "a.txt.agentrt-undo-1").read_text() == "mine\n"


def test_rewind_across_three_turns_goes_back_to_the_first(daemon: World) -> None:  # noqa: F811
    project = daemon.root / "project"
    project.mkdir()
    term = daemon.open_window(cwd=project)
    _run(term, "write one.txt 1", r"write 1 bytes to .*one\.txt", r"wrote 1 bytes to .*one")
    _run(term, "write two.txt 2", r"write 1 bytes to .*two\.txt", r"wrote 1 bytes to .*two")
    _run(term, "sh mkdir three && echo 3 > three/t.txt", r"run: mkdir three", r"exit status 0")
    term.send("/rewind", r"1\. write one\.txt 1  \(3 files to put back\)", "the first turn")
    term.wait_for(r"2\. write two\.txt 2  \(2 files to put back\)", "the second turn")
    term.wait_for(r"3\. sh mkdir three.*\(0 files to put back\)", "the third turn")
    term.send("/rewind 1", r"Put back 3 file\(s\)", "the rewind")
    assert sorted(p.name for p in project.iterdir()) == ["one.txt"]
    # The turns after the first are gone from what the model sees, and from the list.
    screen = term.send(
        "/rewind", r"1\. write one\.txt 1  \(0 files to put back\)", "the list again"
    )
    assert "2. write two.txt" not in screen.split("1. write one.txt 1  (0 files")[-1]


def test_ctrl_c_then_undo_stops_the_run_and_puts_back_its_files(daemon: World) -> None:  # noqa: F811
    project = daemon.root / "project"
    project.mkdir()
    (project / "kept.txt").write_text("as it was\n")
    term = daemon.open_window(cwd=project)
    # Both calls run side by side: the write ends, the sleep goes on until the stop.
    term.send(
        "write kept.txt changed; sleep 60", r"\? write 7 bytes to .*kept\.txt", "the confirmation"
    )
    term.keys("1")
    term.wait_for(r"write_file: wrote 7 bytes", "the write's result")
    assert (project / "kept.txt").read_text() == "changed"
    # Esc's popup counts the run's file changes once the daemon has said them.
    term.keys("Escape")
    term.wait_for(r"Undo: also put back", "the stop popup")
    while "Undo: also put back the 1 file it changed" not in term.screen():
        term.keys("Escape", "Escape")  # closed and opened again: counted anew
        term.wait_for(r"Undo: also put back", "the stop popup again")
    term.keys("Escape")
    # Ctrl+C asks too, now that the run changed a file; u is Undo.
    term.keys("C-c")
    term.wait_for(r"Undo: also put back the 1 file it changed", "Ctrl+C's popup")
    term.keys("u")
    term.wait_for(r"Put back 1 file\(s\)", "the undo after the stop")
    assert (project / "kept.txt").read_text() == "as it was\n"

"""The README's tour, walked in a real terminal at a person's pace.

The tour is read from the README itself, so a step the README changes without
this walk changing with it fails here. Where the tour has the person read
something before pressing a key (the stop popup, the `/pending` list), the walk
waits as long as a person reading it would (`READ`): that wait is the point of
the test, not a way to wait for the program. The tour's first step was once a
race a reader lost ("The run ended before you chose").
"""

from __future__ import annotations

import re
import stat
import time
from pathlib import Path

from .test_tui_tmux import Terminal
from .test_tui_tmux import World
from .test_tui_tmux import daemon  # noqa: F401  (fixtures)
from .test_tui_tmux import wait_until
from .test_tui_tmux import world  # noqa: F401  (fixtures)

README = Path(__file__).resolve().parents[2] / "README.md"

#: How long a person takes to read a popup or a short list before pressing a key.
READ = 3.0

#: The line each step of the tour has the person type, in order.
TOUR = [
    "hello there; stream 300",
    "/pending",
    "stream 300",
    "write hello.txt hi there; ask What is your name?",
    "sleep 30; big 100000",
    "secret api_token",
]


def tour_lines() -> list[str]:
    """The first command of each numbered step of the README's tour."""
    text = README.read_text("utf-8")
    start = text.index("## A 60-second tour")
    section = text[start : text.index("\n## ", start + 1)]
    return re.findall(r"^\d+\. `([^`]+)`", section, flags=re.MULTILINE)


def flat(screen: str) -> str:
    """The screen's words in one line, the borders of frames left out."""
    return " ".join(screen.replace("│", " ").split())


def read_then(term: Terminal, *keys: str) -> None:
    """A person reads what is on the screen, then presses `keys`."""
    time.sleep(READ)
    term.keys(*keys)


def test_the_readme_tour_has_the_steps_this_walk_takes() -> None:
    assert tour_lines() == TOUR


def test_the_readme_tour_walked_at_a_persons_pace(daemon: World) -> None:  # noqa: F811
    term = daemon.open_window()

    # 1. The stream runs long enough for a person to read the popup and choose Pause.
    term.send(TOUR[0], r"word3 ", "the stream to start")
    read_then(term, "Escape")
    term.wait_for(r"Stop this run\?", "the stop popup")
    read_then(term, "p")
    screen = term.wait_for(r"-- Paused|ended before you chose", "the pause")
    assert "ended before you chose" not in screen
    wait_until(
        lambda: [t["cause"] for t in daemon.pending_for(TOUR[0])] == ["pause"],
        "the task to be kept with cause 'pause'",
    )

    # 2. /pending lists it and says what a resume regenerates; Enter resumes it here.
    term.send(TOUR[1], r"Paused tasks", "the /pending list")
    wait_until(
        lambda: (
            re.search(r"about \d+ words of the reply will be regenerated", flat(term.screen()))
            is not None
        ),
        "the preview of what resuming regenerates",
    )
    read_then(term, "Enter")
    term.wait_for(r"-- Resuming cli-\w+: hello there; stream 300", "the resume")
    term.wait_for(r"-- Done", "the resumed stream to finish", timeout=90)
    wait_until(lambda: daemon.pending_for(TOUR[0]) == [], "the finished task to be gone")

    # 3. Ctrl+C throws the task away: /pending shows nothing.
    term.send(TOUR[2], r"word3 ", "the second stream to start")
    read_then(term, "C-c")
    term.wait_for(r"Stopped; the task was discarded", "the user-cancel")
    wait_until(lambda: daemon.pending_for(TOUR[2]) == [], "the task to be deleted")
    term.send(TOUR[1], r"No paused tasks in this window", "an empty /pending")

    # 4. A confirmation and a question, both answered in the window.
    term.send(TOUR[3], r"Allow once", "the confirmation")
    read_then(term, "1")
    term.wait_for(r"\? What is your name\?", "the question")
    term.type("Ada")
    read_then(term, "Enter")
    term.wait_for(r"-- Done", "the calls to finish")
    term.wait_for(r"You answered: Ada", "the answer to reach the run")
    assert (daemon.root / "hello.txt").read_text() == "hi there"

    # 5. A paused task survives the window: only the sleep runs again.
    term.send(TOUR[4], r"big:\s+0123456789abcdef", "the big result to be committed")
    read_then(term, "Escape")
    term.wait_for(r"Stop this run\?", "the stop popup")
    read_then(term, "p")
    term.wait_for(r"-- Paused", "the pause")
    term.send("/quit")
    wait_until(term.dead, "the window to quit")
    again = daemon.open_window()
    again.send(TOUR[1], r"Paused tasks", "the /pending list in a new window")
    wait_until(
        lambda: (
            "resume will keep 1 call" in flat(again.screen())
            and "resume will run 1 call: sleep" in flat(again.screen())
        ),
        "the preview: the big result kept, the sleep run again",
    )
    read_then(again, "Escape")
    wait_until(lambda: "Paused tasks" not in again.screen(), "Esc to close the list")

    # 6. A secret: a masked field; the value is stored 0600 and never shown.
    again.send(TOUR[5], r"hidden>", "the masked field")
    again.type("tour-value-7f3a")
    screen = again.wait_for(r"hidden> \*{15}", "the masked value")
    assert "tour-value-7f3a" not in screen
    again.keys("Enter")
    again.wait_for(r"-- Done", "the secret to be stored")
    stored = daemon.state / "secrets" / "api_token"
    assert stored.read_text() == "tour-value-7f3a"
    assert stat.S_IMODE(stored.stat().st_mode) == 0o600
    assert "tour-value-7f3a" not in again.screen()

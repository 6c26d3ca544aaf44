"""`/pending` in the real ``agenttui``, in tmux: what resuming the highlighted task will do."""

from __future__ import annotations

import re

from .test_tui_tmux import Terminal
from .test_tui_tmux import World
from .test_tui_tmux import daemon  # noqa: F401  (fixtures)
from .test_tui_tmux import wait_until
from .test_tui_tmux import world  # noqa: F401  (fixtures)


def pause(daemon: World, term: Terminal, text: str, shown: str) -> None:  # noqa: F811
    """Run `text`, and once `shown` is on screen, Esc -> Pause it; its task is kept."""
    term.send(text, shown, f"{text!r} to show {shown!r}")
    term.keys("Escape")
    term.wait_for(r"Stop this run\?", "the popup")
    term.keys("p")
    term.wait_for(r"-- Paused", "the run to pause")
    wait_until(lambda: len(daemon.pending_for(text)) == 1, f"{text!r} to be kept")


def flat(screen: str) -> str:
    """The screen's words in one line, the borders of the list's frame left out."""
    return " ".join(screen.replace("│", " ").split())


def test_the_pending_list_shows_what_resuming_the_highlighted_task_will_do(
    daemon: World,  # noqa: F811
) -> None:
    term = daemon.open_window()
    pause(daemon, term, "sleep 30", r"sleep seconds=30")
    # The second task's big result is committed before the pause: a resume keeps it.
    pause(daemon, term, "big 100; sleep 31", r"big: 0123456789abcdef")
    term.send("/pending")
    # The newest task is highlighted first, and its preview is under the list.
    newer = (
        "If resumed: resume will keep 1 call (its result is saved, it does not run again) "
        "resume will run 1 call: sleep call_1_1 ("
    )
    wait_until(lambda: newer in flat(term.screen()), "the newer task's preview")
    assert re.search(r"> cli-\w+  paused, \d+ s ago: big 100; sleep 31", term.screen())
    # Down highlights the older task: the preview follows it.
    term.keys("Down")
    term.wait_for(r"> cli-\w+  paused, \d+ s ago: sleep 30\s", "the older task highlighted")
    older = "If resumed: resume will run 1 call: sleep call_1_0 ("
    wait_until(lambda: older in flat(term.screen()), "the older task's preview")
    assert "resume will keep" not in term.screen()
    term.keys("Up")
    wait_until(lambda: newer in flat(term.screen()), "the newer task's preview again")
    term.keys("Escape")
    wait_until(lambda: "If resumed:" not in term.screen(), "Esc to close the list")

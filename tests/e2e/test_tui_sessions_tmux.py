"""`/sessions` in the real ``agenttui``, in tmux: yesterday's conversation, continued in a new window."""

from __future__ import annotations

import json
import re
import subprocess

from .test_tui_tmux import AGENTRT
from .test_tui_tmux import World
from .test_tui_tmux import daemon  # noqa: F401  (fixtures)
from .test_tui_tmux import wait_until
from .test_tui_tmux import world  # noqa: F401  (fixtures)


def test_a_new_window_lists_an_earlier_conversation_and_continues_it(daemon: World) -> None:  # noqa: F811
    yesterday = daemon.open_window()
    yesterday.send("hello from yesterday", r"-- Done", "the first run to finish")
    yesterday.keys("C-d")
    wait_until(yesterday.dead, "the first window to quit")

    today = daemon.open_window()
    screen = today.send("/sessions", r"Earlier conversations", "the /sessions picker")
    found = re.search(r"> hello from yesterday  \(\d+ s ago, 2 messages\)  (cli-\w+)", screen)
    assert found, screen
    session = found.group(1)
    today.keys("Enter")
    screen = today.wait_for(rf"Continuing {session}: hello from yesterday", "the continue line")
    # Its last messages are shown, as they were.
    today.wait_for(r"> hello from yesterday", "the earlier message in the transcript")
    today.send("and today", r"> and today", "the new message")
    today.wait_for(rf"idle\s+\|\s+session {session}", "the run to end in the same session")

    shown = subprocess.run(
        [str(AGENTRT), "sessions", "show", "--json", "--state-dir", str(daemon.state), session],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    data = json.loads(shown.stdout)
    assert [(m["role"], m["content"]) for m in data["messages"] if m["role"] == "user"] == [
        ("user", "hello from yesterday"),
        ("user", "and today"),
    ]
    assert data["session"]["messages"] == 4


def _result_lines(screen: str) -> list[str]:
    """The lines of the `big` tool result on `screen`: its "= big:" line and those under it."""
    lines = screen.split("\n")
    start = next(n for n, line in enumerate(lines) if line.startswith("  = big:"))
    end = start + 1
    while end < len(lines) and lines[end].startswith("    "):
        end += 1
    return lines[start:end]


def test_a_continued_conversation_shows_a_big_result_as_the_live_run_did(daemon: World) -> None:  # noqa: F811
    live = daemon.open_window()
    live.send("big 32768")
    shown_live = _result_lines(live.wait_for(r"-- Done", "the run to finish"))
    live.keys("C-d")
    wait_until(live.dead, "the first window to quit")

    today = daemon.open_window()
    today.send("/sessions", r"> big 32768", "the /sessions picker")
    today.keys("Enter")
    screen = today.wait_for(r"(?s)Continuing cli-\w+: big 32768.*= big:", "the saved result")
    # The same short preview the live run showed (3 lines), not the 32 KiB result.
    assert _result_lines(screen) == shown_live
    assert len(shown_live) <= 3
    assert "> big 32768" in screen


def test_compact_summarises_the_conversation_and_the_window_says_how_many(daemon: World) -> None:  # noqa: F811
    term = daemon.open_window()
    term.type("/compact")
    term.keys("Enter")
    term.wait_for(r"No conversation yet: /compact works", "the refusal before any message")
    term.keys("Escape")
    for done, text in enumerate(("hello one", "hello two"), start=1):
        term.type(text)
        term.keys("Enter")

        def ended(count: int = done) -> bool:
            return term.screen().count("-- Done") == count

        wait_until(ended, "the run to end")
    term.type("/compact")
    term.keys("Enter")
    screen = term.wait_for(r"\(3 earlier messages summarised\)", "what /compact did")
    found = re.search(r"session (cli-\w+)", screen)
    assert found, screen
    shown = subprocess.run(
        [str(AGENTRT), "sessions", "show", "--json", "--state-dir", str(daemon.state), found[1]],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    data = json.loads(shown.stdout)
    assert [m["role"] for m in data["messages"]] == ["user", "assistant"] * 2 + ["note"]
    assert data["messages"][-1]["summarised"] == 3

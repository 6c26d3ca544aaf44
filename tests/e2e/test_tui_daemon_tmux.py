"""The window and the life of its daemon, in a real terminal: a daemon that cannot start is
started twice, no more; a daemon without its HTTP API is said once; the first message after
a replaced daemon is sent and answered."""

from __future__ import annotations

import re

import pytest

from agenttui._launch import is_answering

from .test_tui_tmux import Terminal
from .test_tui_tmux import World
from .test_tui_tmux import daemon  # noqa: F401  (fixtures)
from .test_tui_tmux import slow_daemon
from .test_tui_tmux import wait_until
from .test_tui_tmux import world  # noqa: F401  (fixtures)

pytestmark = pytest.mark.e2e

#: What every daemon that cannot start says in the log of the state folder.
BOT_ERROR = "the Telegram bot needs AGENTRT_TELEGRAM_TOKEN"


def said_in_log(where: World, text: str) -> int:
    """How many times the daemons the window started wrote `text` in their log."""
    log = where.state / "daemon.log"
    return log.read_text().count(text) if log.exists() else 0


def test_a_daemon_that_fails_to_start_is_started_twice_then_the_window_says_why(
    daemon: World,  # noqa: F811
) -> None:
    # The window's daemons read a configuration that asks for a bot without its token: each
    # answers on the socket for a moment, then exits with status 1.
    term = daemon.open_window(env=daemon.configured("[telegram]\nenabled = true\n"))
    daemon.stop_daemon()
    screen = term.wait_for(r"The daemon failed to start 2 times", "the window to give up")
    words = " ".join(screen.split())
    assert "this window starts it no more. Its last error: the daemon" in words
    assert BOT_ERROR in words
    assert f"'agentrt daemon --socket {daemon.socket} --state-dir {daemon.state}'" in words
    assert re.search(r"no daemon, not starting one \(see above\): looking again", screen)
    assert said_in_log(daemon, BOT_ERROR) == 2
    # It goes on looking for a daemon: two more looks, and still no third start.
    term.wait_for(r"looking again in 4s", "the window to look again")
    term.wait_for(r"looking again in [0-3]s", "the window to wait")
    term.wait_for(r"looking again in 4s", "the window to look once more")
    assert said_in_log(daemon, BOT_ERROR) == 2
    assert not is_answering(daemon.socket)
    # A daemon started by hand, once the cause is fixed, is found.
    daemon.start_daemon()
    term.wait_for(r"Reconnected to the daemon", "the window to find the new daemon")
    term.send("stream 2", r"(?s)> stream 2\s+word1 word2\s+-- Done", "the run on the new daemon")


def test_a_daemon_whose_http_port_is_taken_is_said_once_and_the_window_works(
    world: World,  # noqa: F811
    taken_port: int,
) -> None:
    env = world.configured(f'[http]\nlisten = "127.0.0.1:{taken_port}"\n')
    term = world.open_window(env=env, wait=False)
    line = (
        f"HTTP API not started: 127.0.0.1:{taken_port} is in use (Address already in use); "
        "the socket is served, so this window works"
    )
    screen = term.wait_for(r"the socket is served, so this window works", "the HTTP failure")
    assert line in " ".join(screen.split())
    assert re.search(r"idle", screen)
    screen = term.send("stream 2", r"(?s)> stream 2\s+word1 word2\s+-- Done", "the run")
    # Said once: in the transcript, not again.
    assert " ".join(screen.split()).count("HTTP API not started") == 1
    assert said_in_log(world, "agentrt daemon: HTTP API not started") == 1


def send_after_the_daemon_is_stopped(term: Terminal, shown: str, what: str) -> None:
    """A first run in `term`, then its daemon stopped; once the screen matches `shown`, the
    message "stream 3" typed, seen in the input box, and Enter pressed."""
    term.send("stream 2", r"-- Done", "the first run")
    term.world.stop_daemon()
    term.wait_for(shown, what)
    term.type("stream 3")
    wait_until(lambda: term.input_line() == "> stream 3", "the typed message")
    term.keys("Enter")


def test_the_first_message_after_a_replaced_daemon_is_sent_and_answered(
    daemon: World,  # noqa: F811
) -> None:
    term = daemon.open_window()
    send_after_the_daemon_is_stopped(
        term, r"Reconnected to the daemon  \(Esc closes\)", "the window to reconnect"
    )
    screen = term.wait_for(r"(?s)> stream 3\s+word1 word2 word3\s+-- Done", "the reply")
    assert term.input_line() == ">"
    assert "Reconnected to the daemon" not in screen


def test_enter_pressed_while_the_window_reconnects_sends_the_message_once_it_has(
    daemon: World,  # noqa: F811
) -> None:
    # The daemon the window starts again is slow to start: the message is typed meanwhile.
    term = daemon.open_window(env=slow_daemon(daemon))
    send_after_the_daemon_is_stopped(term, r"starting the daemon…", "the window to start a daemon")
    screen = term.wait_for(r"your message is sent as soon as it is", "the window to hold it")
    assert term.input_line() == "> stream 3"
    assert "word3" not in screen
    screen = term.wait_for(r"(?s)> stream 3\s+word1 word2 word3\s+-- Done", "the reply")
    assert term.input_line() == ">"
    assert screen.count("> stream 3") == 1

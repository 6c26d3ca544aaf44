"""The window and the life of its daemon, in a real terminal: a daemon that cannot start is
started twice, no more; a daemon without its HTTP API is said once; the first message after
a replaced daemon is sent and answered."""

from __future__ import annotations

import re
import signal
import socket
from collections.abc import Iterator

import pytest

from agenttui._launch import is_answering

from .test_tui_tmux import World
from .test_tui_tmux import daemon  # noqa: F401  (fixtures)
from .test_tui_tmux import slow_daemon
from .test_tui_tmux import wait_until
from .test_tui_tmux import world  # noqa: F401  (fixtures)

pytestmark = pytest.mark.e2e

#: What every daemon that cannot start says in the log of the state folder.
BOT_ERROR = "the Telegram bot needs AGENTRT_TELEGRAM_TOKEN"


def configured(where: World, text: str) -> dict[str, str]:
    """The environment of a process that reads `text` as its configuration file."""
    home = where.root / "config"
    (home / "agentrt").mkdir(parents=True, exist_ok=True)
    (home / "agentrt" / "config.toml").write_text(text)
    return {"XDG_CONFIG_HOME": str(home)}


def said_in_log(where: World, text: str) -> int:
    """How many times the daemons the window started wrote `text` in their log."""
    log = where.state / "daemon.log"
    return log.read_text().count(text) if log.exists() else 0


def test_a_daemon_that_fails_to_start_is_started_twice_then_the_window_says_why(
    daemon: World,  # noqa: F811
) -> None:
    # The window's daemons read a configuration that asks for a bot without its token: each
    # answers on the socket for a moment, then exits with status 1.
    term = daemon.open_window(env=configured(daemon, "[telegram]\nenabled = true\n"))
    assert daemon.daemon is not None
    daemon.daemon.send_signal(signal.SIGTERM)
    assert daemon.daemon.wait(timeout=20) == 0
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
    term.type("stream 2")
    term.keys("Enter")
    term.wait_for(r"(?s)> stream 2\s+word1 word2\s+-- Done", "the run on the new daemon")


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A loopback port something else listens on."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


def test_a_daemon_whose_http_port_is_taken_is_said_once_and_the_window_works(
    world: World,  # noqa: F811
    taken_port: int,
) -> None:
    env = configured(world, f'[http]\nlisten = "127.0.0.1:{taken_port}"\n')
    term = world.open_window(env=env, wait=False)
    line = (
        f"HTTP API not started: 127.0.0.1:{taken_port} is in use (Address already in use); "
        "the socket is served, so this window works"
    )
    screen = term.wait_for(r"the socket is served, so this window works", "the HTTP failure")
    assert line in " ".join(screen.split())
    assert re.search(r"idle", screen)
    term.type("stream 2")
    term.keys("Enter")
    screen = term.wait_for(r"(?s)> stream 2\s+word1 word2\s+-- Done", "the run")
    # Said once: in the transcript, not again.
    assert " ".join(screen.split()).count("HTTP API not started") == 1
    assert said_in_log(world, "agentrt daemon: HTTP API not started") == 1


def test_the_first_message_after_a_replaced_daemon_is_sent_and_answered(
    daemon: World,  # noqa: F811
) -> None:
    term = daemon.open_window()
    term.type("stream 2")
    term.keys("Enter")
    term.wait_for(r"-- Done", "the first run")
    assert daemon.daemon is not None
    daemon.daemon.send_signal(signal.SIGTERM)
    assert daemon.daemon.wait(timeout=20) == 0
    term.wait_for(r"Reconnected to the daemon  \(Esc closes\)", "the window to reconnect")
    term.type("stream 3")
    wait_until(lambda: term.input_line() == "> stream 3", "the typed message")
    term.keys("Enter")
    screen = term.wait_for(r"(?s)> stream 3\s+word1 word2 word3\s+-- Done", "the reply")
    assert term.input_line() == ">"
    assert "Reconnected to the daemon" not in screen


def test_enter_pressed_while_the_window_reconnects_sends_the_message_once_it_has(
    daemon: World,  # noqa: F811
) -> None:
    # The daemon the window starts again is slow to start: the message is typed meanwhile.
    term = daemon.open_window(env=slow_daemon(daemon))
    term.type("stream 2")
    term.keys("Enter")
    term.wait_for(r"-- Done", "the first run")
    assert daemon.daemon is not None
    daemon.daemon.send_signal(signal.SIGTERM)
    assert daemon.daemon.wait(timeout=20) == 0
    term.wait_for(r"starting the daemon…", "the window to start a daemon")
    term.type("stream 3")
    wait_until(lambda: term.input_line() == "> stream 3", "the typed message")
    term.keys("Enter")
    screen = term.wait_for(r"your message is sent as soon as it is", "the window to hold it")
    assert term.input_line() == "> stream 3"
    assert "word3" not in screen
    screen = term.wait_for(r"(?s)> stream 3\s+word1 word2 word3\s+-- Done", "the reply")
    assert term.input_line() == ">"
    assert screen.count("> stream 3") == 1

"""The real ``agenttui`` in a real terminal (tmux), against a real daemon.

Each test gets its own daemon on a temporary socket and state folder and its
own tmux server. The tests type keys with ``send-keys`` and read the screen
with ``capture-pane``, polled under a deadline: a terminal's screen has no
event to wait on. What the daemon kept is checked independently with
``agentrt pending list --json`` on the same state folder.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from agenttui._launch import is_answering

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]

#: Bound on every wait for the screen or the daemon.
DEADLINE = 20.0
POLL = 0.05
AGENTRT = Path(sys.executable).with_name("agentrt")


def wait_until(check: Callable[[], bool], what: str, timeout: float = DEADLINE) -> None:
    """Poll `check` until it holds; fail naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(POLL)


@attrs.define
class World:
    """A daemon, its state folder, and a private tmux server to open windows in."""

    root: Path
    socket: Path
    state: Path
    tmux_socket: Path
    daemon: subprocess.Popen[bytes] | None = None
    windows: int = 0

    def start_daemon(self, env: dict[str, str] | None = None) -> None:
        """Start a daemon on the world's socket and wait until it answers."""
        log = open(self.root / "daemon.log", "ab")  # noqa: SIM115 - closed right after the spawn
        with log:
            self.daemon = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "agentrt.daemon",
                    "--socket",
                    str(self.socket),
                    "--state-dir",
                    str(self.state),
                    "--workdir",
                    str(self.root),
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **(env or {})},
            )
        wait_until(lambda: is_answering(self.socket), "the daemon to answer")

    def stop_daemon(self) -> None:
        """Stop the daemon `start_daemon` started with a SIGTERM; it exits with status 0."""
        assert self.daemon is not None
        self.daemon.send_signal(signal.SIGTERM)
        assert self.daemon.wait(timeout=20) == 0

    def configured(self, text: str) -> dict[str, str]:
        """The environment of a process that reads `text` as its configuration file."""
        home = self.root / "config"
        (home / "agentrt").mkdir(parents=True, exist_ok=True)
        (home / "agentrt" / "config.toml").write_text(text)
        return {"XDG_CONFIG_HOME": str(home)}

    def tmux(self, *args: str) -> str:
        """Run a tmux command on the world's server; its output."""
        result = subprocess.run(
            ["tmux", "-S", str(self.tmux_socket), *args],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        )
        return result.stdout

    def open_window(
        self,
        *args: str,
        wait: bool = True,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
        say_status: bool = False,
    ) -> Terminal:
        """Start ``agenttui`` (with `args`) in a new 120x40 tmux session; `wait` until connected."""
        self.windows += 1
        name = f"w{self.windows}"
        command = " ".join(
            [
                f"{'' if say_status else 'exec '}{sys.executable} -m agenttui",
                f"--socket {self.socket}",
                f"--state-dir {self.state}",
                *args,
            ]
        )
        if say_status:
            # The shell prints the exit status into the pane once agenttui has ended.
            command += '; echo "agenttui ended with status $?"'

        extra = [arg for key, value in (env or {}).items() for arg in ("-e", f"{key}={value}")]
        self.tmux(
            "new-session",
            "-d",
            "-x",
            "120",
            "-y",
            "40",
            "-s",
            name,
            "-c",
            str(cwd or self.root),
            *extra,
            command,
        )
        self.tmux("set-option", "-t", name, "remain-on-exit", "on")
        terminal = Terminal(self, name)
        if wait:
            terminal.wait_for("idle", "the window to connect")
        return terminal

    def answering_pid(self) -> int | None:
        """The pid of the daemon answering on the world's socket (read with SO_PEERCRED)."""
        if not is_answering(self.socket):
            return None
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            try:
                probe.connect(str(self.socket))
            except OSError:
                return None
            raw = probe.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        pid, _uid, _gid = struct.unpack("3i", raw)
        # 0 would be a peer in another pid namespace; signalling it would hit our own group.
        return int(pid) if pid > 0 else None

    def pending(self) -> list[dict[str, Any]]:
        """The daemon's pending tasks, read from its state folder."""
        result = subprocess.run(
            [str(AGENTRT), "pending", "list", "--state-dir", str(self.state), "--json"],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        )
        return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]

    def pending_for(self, text: str) -> list[dict[str, Any]]:
        """The pending tasks whose input was `text`."""
        return [task for task in self.pending() if task["input"] == text]

    def close(self) -> None:
        """Stop everything this world started."""
        if self.tmux_socket.exists():
            subprocess.run(
                ["tmux", "-S", str(self.tmux_socket), "kill-server"],
                capture_output=True,
                timeout=10,
            )
        if self.daemon is not None and self.daemon.poll() is None:
            self.daemon.send_signal(signal.SIGTERM)
            try:
                self.daemon.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.daemon.kill()
                self.daemon.wait()
        # A daemon a window started (passing or failing test alike) is stopped too.
        pid = self.answering_pid()
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            wait_until(lambda: not is_answering(self.socket), "the started daemon to stop")


@attrs.define
class Terminal:
    """One tmux session running ``agenttui``."""

    world: World
    name: str

    def screen(self) -> str:
        """The visible screen, as text."""
        return self.world.tmux("capture-pane", "-p", "-t", self.name)

    def keys(self, *keys: str) -> None:
        """Press tmux keys (``Enter``, ``Escape``, ``C-c``...)."""
        self.world.tmux("send-keys", "-t", self.name, *keys)

    def type(self, text: str) -> None:
        """Type `text` literally."""
        self.world.tmux("send-keys", "-t", self.name, "-l", text)

    def send(
        self, text: str, until: str | None = None, what: str = "", timeout: float = DEADLINE
    ) -> str:
        """Type `text` and press Enter (a message or a command sent); then, given `until`, wait
        until the screen matches it. The screen then, or "" when not waiting."""
        self.type(text)
        self.keys("Enter")
        return "" if until is None else self.wait_for(until, what, timeout)

    def wait_for(self, pattern: str, what: str = "", timeout: float = DEADLINE) -> str:
        """Wait until the screen matches the regex `pattern`; the screen then."""
        seen = ""

        def matches() -> bool:
            nonlocal seen
            seen = self.screen()
            return re.search(pattern, seen) is not None

        try:
            wait_until(matches, what or repr(pattern), timeout)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n--- screen ---\n{seen}") from None
        return seen

    def pid(self) -> int:
        """The pid of the program in the pane (``agenttui`` itself: it was exec'd)."""
        return int(self.world.tmux("display-message", "-p", "-t", self.name, "#{pane_pid}"))

    def lines(self) -> list[str]:
        """The visible screen, line by line."""
        return self.screen().split("\n")

    def input_line(self) -> str:
        """The input box's first line (right above the status line when it is one line)."""
        lines = self.screen().rstrip("\n").split("\n")
        return lines[-2]

    def paste(self, text: str) -> None:
        """Paste `text` as a terminal does (bracketed), newlines and all."""
        self.world.tmux("set-buffer", "-b", "paste", text)
        self.world.tmux("paste-buffer", "-p", "-d", "-b", "paste", "-t", self.name)

    def dead(self) -> bool:
        """True once the program in the pane exited."""
        return (
            self.world.tmux("display-message", "-p", "-t", self.name, "#{pane_dead}").strip() == "1"
        )


@pytest.fixture
def world() -> Iterator[World]:
    # A short folder: Unix socket paths are limited to about 100 bytes.
    root = Path(tempfile.mkdtemp(prefix="tui-e2e-", dir="/tmp"))
    # The socket's folder is the agent's own state, which no tool may touch: it is kept apart
    # from the folder the runs work in.
    w = World(root, root / "sock" / "d.sock", root / "state", root / "tmux.sock")
    try:
        yield w
    finally:
        w.close()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def daemon(world: World) -> World:
    world.start_daemon()
    return world


def test_streams_text_and_quits_with_ctrl_d(daemon: World) -> None:
    term = daemon.open_window()
    term.send("stream 6", r"word1 word2", "the first words")
    screen = term.wait_for(r"-- Done", "the run to finish")
    assert "word6" in screen
    assert re.search(r"idle\s+\|\s+session cli-", screen)
    term.keys("C-d")
    wait_until(term.dead, "agenttui to quit on Ctrl+D")


def test_escape_popup_pause_then_pending_resumes_in_the_same_window(daemon: World) -> None:
    term = daemon.open_window()
    term.send("stream 300", r"word3 ", "the run to show output")
    term.keys("Escape")
    screen = term.wait_for(r"Stop this run\?", "the popup")
    assert "[Pause]" in screen
    term.keys("p")
    term.wait_for(r"-- Paused", "the run to pause")
    wait_until(
        lambda: [t["cause"] for t in daemon.pending_for("stream 300")] == ["pause"],
        "the paused task to be kept with cause 'pause'",
    )
    screen = term.send("/pending", r"Paused tasks", "the /pending list")
    assert re.search(r"> cli-\w+  paused, \d+ s ago: stream 300", screen)
    term.keys("Enter")
    term.wait_for(r"-- Resuming cli-\w+: stream 300", "the resume")
    # One line says what the pause cost: the words of the unsaved reply come again.
    term.wait_for(
        r"resumed: 0 calls kept, 0 run again, [1-9]\d* words regenerated", "the cost line"
    )
    # The resumed run streams back into this window.
    term.wait_for(r"(?s)Resuming.*word2 ", "resumed output", timeout=DEADLINE)
    term.wait_for(r"running\s+\|\s+task \w+", "the status line of the resumed run")
    # Ctrl+C is a user-cancel: the pending task is deleted.
    term.keys("C-c")
    term.wait_for(r"Stopped; the task was discarded", "the user-cancel")
    wait_until(lambda: daemon.pending_for("stream 300") == [], "the pending task to be deleted")


def test_ctrl_c_deletes_the_pending_task(daemon: World) -> None:
    term = daemon.open_window()
    term.send("stream 301", r"word2 ", "output")
    wait_until(lambda: len(daemon.pending_for("stream 301")) == 1, "the running task's record")
    term.keys("C-c")
    term.wait_for(r"Stopped; the task was discarded", "the user-cancel")
    assert "Stop this run?" not in term.screen()
    wait_until(lambda: daemon.pending_for("stream 301") == [], "the pending task to be deleted")
    # With no run, a first Ctrl+C only warns; a second one quits.
    term.keys("C-c")
    term.wait_for(r"Press Ctrl\+C again to quit", "the quit warning")
    assert not term.dead()
    term.keys("C-c")
    wait_until(term.dead, "agenttui to quit on a second Ctrl+C")


def test_escape_before_the_first_output_cancels_at_once(daemon: World) -> None:
    term = daemon.open_window()
    # Enter and Esc in one burst: the Esc is read before the run can show anything.
    term.type("stream 302")
    term.keys("Enter", "Escape")
    screen = term.wait_for(r"Stopped; the task was discarded", "the immediate user-cancel")
    assert "Stop this run?" not in screen
    assert "word1" not in screen
    wait_until(lambda: daemon.pending_for("stream 302") == [], "no pending task left")


def test_confirmation_and_question_answered_from_the_window(daemon: World) -> None:
    term = daemon.open_window()
    target = daemon.root / "note.txt"
    screen = term.send(f"write {target} hello", r"Allow once", "the confirmation")
    assert "[1. Allow once]" in screen
    assert "Allow for this session" in screen
    term.keys("1")
    term.wait_for(r"-- Done", "the write to finish")
    assert target.read_text() == "hello"
    term.send("ask What colour is the sky?", r"\? What colour is the sky\?", "the question")
    term.send("blue", r"You answered: blue", "the answer to reach the run")


def test_tools_work_in_the_windows_folder_not_the_daemons(daemon: World) -> None:
    project = daemon.root / "project"
    project.mkdir()
    term = daemon.open_window(cwd=project)
    assert f"in {project}" in term.screen()  # the status line shows where tools work
    term.send("write hello.txt hi there", r"Allow once", "the confirmation")
    term.keys("1")
    term.wait_for(r"-- Done", "the write to finish")
    assert (project / "hello.txt").read_text() == "hi there"
    assert not (daemon.root / "hello.txt").exists()


def test_a_second_window_never_sees_the_first_ones_questions(daemon: World) -> None:
    first = daemon.open_window()
    second = daemon.open_window()
    first.send(
        "ask Only for the first window?",
        r"\? Only for the first window\?",
        "the question in the first window",
    )
    # A full run in the second window after the question was sent: its frames are all in.
    screen = second.send("hello there", r"-- Done", "a run in the second window")
    assert "Only for the first window" not in screen
    assert "answer>" not in screen
    first.send("yes", r"You answered: yes", "the first window's answer")
    assert "Only for the first window" not in second.screen()


def test_killing_the_window_keeps_the_pending_task(daemon: World) -> None:
    term = daemon.open_window()
    term.send("stream 303", r"word2 ", "output")
    os.kill(term.pid(), signal.SIGKILL)
    wait_until(term.dead, "the window to die")
    wait_until(
        lambda: [t["cause"] for t in daemon.pending_for("stream 303")] == ["disconnect"],
        "the task to be kept with cause 'disconnect'",
    )
    # A new window lists it and can resume it.
    again = daemon.open_window()
    again.send(
        "/pending", r"cli-\w+  window closed, \d+ s ago: stream 303", "the kept task in /pending"
    )
    again.keys("Escape")


def test_starts_a_daemon_when_none_answers(world: World) -> None:
    assert not is_answering(world.socket)
    term = world.open_window()
    screen = term.wait_for(r"Started a daemon \(pid \d+\)", "the start notice")
    match = re.search(r"pid (\d+)", screen)
    assert match is not None
    pid = int(match.group(1))
    try:
        assert world.answering_pid() == pid
        assert (world.state / "daemon.log").exists()
        term.send("stream 3", r"-- Done", "a run on the started daemon")
    finally:
        os.kill(pid, signal.SIGTERM)
    wait_until(lambda: not is_answering(world.socket), "the started daemon to stop")


FAKE_SUDO = """#!/bin/sh
# Stands in for sudo: never cached, one password, commands run as they are.
if [ "$1" = "-n" ] && [ "$2" = "-v" ]; then exit 1; fi
if [ "$1" = "-S" ] && [ "$2" = "-v" ]; then
    read -r password
    [ "$password" = "open sesame" ] && exit 0
    exit 1
fi
while [ "$#" -gt 0 ] && [ "${1#-}" != "$1" ]; do shift; done
exec "$@"
"""


def test_password_field_shows_wrong_tries_then_accepts(world: World) -> None:
    bin_dir = world.root / "bin"
    bin_dir.mkdir()
    sudo = bin_dir / "sudo"
    sudo.write_text(FAKE_SUDO)
    sudo.chmod(0o755)
    restricted = world.root / "restricted"
    restricted.mkdir()
    world.start_daemon(
        env={
            "PATH": f"{bin_dir}:{os.environ['PATH']}",
            "AGENTRT_RESTRICTED": str(restricted),
        }
    )
    term = world.open_window()
    target = restricted / "conf"
    term.send(f"write {target} secret-setting", r"hidden>", "the password field")
    term.type("wrong one")
    screen = term.wait_for(r"hidden> \*{9}", "the masked password")
    assert "wrong one" not in screen
    term.keys("Enter")
    term.wait_for(r"Wrong password \(2 tries left\)", "the first wrong password reported")
    term.wait_for(r"\(wrong password, 2 tries left\)", "the retried question says why")
    term.wait_for(r"hidden>", "the password asked again")
    term.send("open sesame", r"-- Done", "the write to finish")
    assert target.read_text() == "secret-setting"
    assert "open sesame" not in term.screen()


# -- everyday use ------------------------------------------------------------------------

#: Where the screens of the Markdown, scrollback and reconnect tests are saved, when set.
SCREENS = os.environ.get("AGENTTUI_SCREENS")


def keep_screen(name: str, screen: str) -> None:
    """Save a screen for people to look at (``AGENTTUI_SCREENS=/some/folder``)."""
    if SCREENS:
        Path(SCREENS).mkdir(parents=True, exist_ok=True)
        (Path(SCREENS) / name).write_text(screen)


def test_up_recalls_messages_across_restarts_and_ctrl_r_searches_them(daemon: World) -> None:
    term = daemon.open_window()
    for runs, message in enumerate(("deploy to staging", "hello history"), start=1):
        term.send(message)

        def finished(n: int = runs) -> bool:
            return term.screen().count("-- Done") == n

        wait_until(finished, f"run {runs} to finish")
    term.keys("Up")
    wait_until(lambda: term.input_line() == "> hello history", "Up to recall the last message")
    term.keys("Up")
    wait_until(lambda: term.input_line() == "> deploy to staging", "Up to go further back")
    history = daemon.state / "tui_history"
    assert stat.S_IMODE(history.stat().st_mode) == 0o600
    term.keys("C-d")  # the input is not empty: Ctrl+D does nothing
    term.keys("Escape")
    wait_until(lambda: term.input_line() == ">", "Esc to clear the input")
    term.keys("C-d")
    wait_until(term.dead, "agenttui to quit")

    again = daemon.open_window()
    again.keys("Up")
    wait_until(lambda: again.input_line() == "> hello history", "the history after a restart")
    again.keys("Escape")
    wait_until(lambda: again.input_line() == ">", "Esc to clear the input")
    again.keys("C-r")
    again.wait_for(r"search history", "the history search")
    again.type("deplo")
    again.wait_for(r"deploy to staging", "the match")
    again.keys("Enter")
    wait_until(lambda: again.input_line() == "> deploy to staging", "Enter to take the match")
    again.keys("Enter")
    again.wait_for(r"(?s)> deploy to staging.*-- Done", "the recalled message to run")


def test_page_up_and_the_wheel_read_back_while_new_output_arrives(daemon: World) -> None:
    term = daemon.open_window()
    term.paste("\n".join(f"row {n:02}" for n in range(1, 61)))
    term.keys("Enter")
    term.wait_for(r"-- Done", "the long echo to finish")
    term.send("stream 30", r"word2 ", "the stream to start")
    term.keys("PPage")
    screen = term.wait_for(r"more below", "the marker that there is more below")
    top = screen.split("\n")[0]
    first = re.search(r"\brow (\d\d)$", top)
    assert first is not None, screen
    # The stream goes on below; the view stays where the reader is.
    term.wait_for(r"idle", "the stream to finish", timeout=DEADLINE)
    screen = term.screen()
    assert screen.split("\n")[0] == top
    assert "more below" in screen
    assert "word30" not in screen
    keep_screen("scrollback.txt", screen)
    # One step of the wheel up moves three lines back (the SGR mouse report of a terminal).
    term.type("\x1b[<64;10;5M")
    row = int(first.group(1))
    wait_until(lambda: term.lines()[0].endswith(f"row {row - 3:02}"), "the wheel to scroll back")
    for _ in range(10):
        term.keys("NPage")
    screen = term.wait_for(r"word30", "PageDown back to the end")
    assert "more below" not in screen
    assert "-- Done" in screen


def slow_daemon(world: World, seconds: float = 3.0) -> dict[str, str]:
    """The environment of a window whose daemons start `seconds` late, as on a slow machine."""
    folder = world.root / "slow"
    folder.mkdir(exist_ok=True)
    (folder / "sitecustomize.py").write_text(
        f"import sys, time\nif 'agentrt.daemon' in sys.orig_argv:\n    time.sleep({seconds})\n"
    )
    return {"PYTHONPATH": str(folder)}


def test_a_lost_daemon_is_said_and_the_window_reconnects_losing_nothing(daemon: World) -> None:
    # The daemon the window starts again is slow to start: the screen meanwhile can be read.
    term = daemon.open_window(env=slow_daemon(daemon))
    term.send("stream 300", r"word3 ", "the run to show output")
    term.type("typed while it ran")
    wait_until(lambda: term.input_line() == "> typed while it ran", "the typed text")
    assert daemon.daemon is not None
    daemon.daemon.kill()
    daemon.daemon.wait()
    screen = term.wait_for(
        r"(?s)Interrupted: lost the daemon; the task is kept.*starting the daemon…",
        "the window to say the daemon was lost, in the transcript and the status line",
    )
    keep_screen("reconnect-lost.txt", screen)
    words = " ".join(screen.split())
    assert (
        "Lost the daemon: the daemon closed the connection. Reconnecting... The run's task is "
        "kept: /pending resumes it once reconnected. Starting the daemon on"
    ) in words
    assert term.input_line() == "> typed while it ran"
    screen = term.wait_for(
        r"Reconnected to the daemon\. 1 interrupted task is kept: type /pending",
        "the window to reconnect, starting a daemon",
    )
    keep_screen("reconnect.txt", screen)
    assert re.search(r"Started a daemon \(pid \d+\)", screen)
    assert re.search(r"idle", screen)
    assert term.input_line() == "> typed while it ran"
    term.keys("Enter")
    term.wait_for(r"(?s)> typed while it ran.*-- Done", "the kept message to run")
    term.send(
        "/pending", r"> cli-\w+  daemon died, \d+ s ago: stream 300", "the lost run in /pending"
    )
    term.keys("Enter")
    term.wait_for(r"-- Resuming cli-\w+: stream 300", "the resume")
    term.wait_for(r"running\s+\|\s+task \w+", "the resumed run")
    term.keys("C-c")
    term.wait_for(r"Stopped; the task was discarded", "the user-cancel")


def test_the_first_screen_is_drawn_while_the_daemon_starts(world: World) -> None:
    term = world.open_window(wait=False, env=slow_daemon(world))
    screen = term.wait_for(r"starting the daemon…", "the first screen", timeout=2.5)
    assert not is_answering(world.socket)
    assert re.search(r"^>", screen, re.MULTILINE)
    term.wait_for(r"Started a daemon \(pid \d+\)", "the window to say it started the daemon")
    term.wait_for(r"idle", "the window to connect once the daemon answers")


def test_a_daemon_that_cannot_start_ends_the_window_with_the_reason(world: World) -> None:
    # A replay file is read by the daemon only: agenttui's own check lets it through.
    missing = world.root / "no-such-replay.json"
    term = world.open_window(f"--model replay:{missing}", wait=False, say_status=True)
    wait_until(term.dead, "agenttui to give up")
    # What the program printed once it left the full screen, scrolled-off lines included.
    shown = world.tmux("capture-pane", "-p", "-J", "-S", "-", "-t", term.name)
    screen = " ".join(shown.split())
    assert "agenttui: the daemon exited with status 1 before answering on" in screen
    assert f"cannot read replay file {missing}" in screen
    assert "agenttui ended with status 1" in screen


def test_a_bad_model_is_refused_before_a_daemon_is_started(world: World) -> None:
    term = world.open_window("--model nosuch:model", wait=False, say_status=True)
    wait_until(term.dead, "agenttui to give up")
    shown = world.tmux("capture-pane", "-p", "-J", "-S", "-", "-t", term.name)
    screen = " ".join(shown.split())
    assert "agenttui: flag --model: unknown model 'nosuch:model'" in screen
    assert "agenttui ended with status 2" in screen
    assert not is_answering(world.socket)


MARKDOWN = """\
# Deploy steps

Run it **now**, with `make deploy`.

- first step
- second step

```python
def greet(name):
    return "hi " + name
```

""" + " ".join(f"alpha{n:02}" for n in range(1, 41))


def test_alt_enter_multi_line_message_and_a_markdown_reply(daemon: World) -> None:
    term = daemon.open_window()
    term.type("line one")
    term.keys("M-Enter")
    term.type("line two")
    term.keys("C-j")
    term.type("line three")
    wait_until(lambda: "line three" in term.screen(), "three lines typed")
    assert "-- Done" not in term.screen()
    term.keys("Enter")
    term.wait_for(r"> line one\n  line two\n  line three", "the multi-line message")
    term.wait_for(r"-- Done", "its echo")
    term.paste(MARKDOWN)
    term.keys("Enter")
    screen = term.wait_for(r"(?s)alpha40.*-- Done", "the Markdown reply")
    keep_screen("markdown.txt", screen)
    reply = screen.split("\n")
    done = max(i for i, line in enumerate(reply) if line.startswith("-- Done"))
    start = max(i for i, line in enumerate(reply[:done]) if line == "Deploy steps")
    shown = reply[start:done]
    assert "Run it now, with make deploy." in shown
    assert "• first step" in shown
    assert "  def greet(name):" in shown
    assert not any("```" in line for line in shown)
    # Long lines break between words.
    words = [line for line in shown if line.startswith("alpha")]
    assert len(words) > 1
    assert all(re.fullmatch(r"(alpha\d\d ?)+", line.rstrip()) for line in words)
    # The code is coloured: Pygments styles "def" as a keyword, in bold green.
    coloured = term.world.tmux("capture-pane", "-p", "-e", "-t", term.name)
    assert re.search(r"\n {2}\x1b\[1m\x1b\[38;5;28mdef\x1b", coloured), coloured


def test_quit_during_a_run_asks_and_pause_and_quit_keeps_the_task(daemon: World) -> None:
    term = daemon.open_window()
    term.send("stream 304", r"word2 ", "output")
    screen = term.send("/quit", r"Quit anyway\?", "the quit popup")
    assert "[Pause and quit]" in screen
    assert "Stop and quit" in screen
    assert "Cancel" in screen
    term.keys("p")
    wait_until(term.dead, "agenttui to quit once the run is paused")
    wait_until(
        lambda: [t["cause"] for t in daemon.pending_for("stream 304")] == ["pause"],
        "the task to be kept with cause 'pause'",
    )


def test_escape_right_after_a_resume_asks_and_slash_reopens_the_picker(daemon: World) -> None:
    term = daemon.open_window()
    term.type("/")
    term.wait_for(r"/pending\s+list this window", "the picker")
    term.keys("Escape")
    wait_until(lambda: "list this window" not in term.screen(), "Esc to close the picker")
    term.keys("BSpace")
    term.type("/")
    term.wait_for(r"/pending\s+list this window", "typing / to reopen the picker")
    term.keys("Escape")
    wait_until(lambda: "list this window" not in term.screen(), "Esc to close the picker")
    term.keys("Escape")
    wait_until(lambda: term.input_line() == ">", "Esc to clear the input")
    term.send("stream 305", r"word2 ", "output")
    term.keys("Escape")
    term.wait_for(r"Stop this run\?", "the popup")
    term.keys("p")
    term.wait_for(r"-- Paused", "the pause")
    term.send("/pending", r"Paused tasks", "the /pending list")
    # Enter and Esc in one burst: the Esc comes before anything of the resumed run is shown.
    term.keys("Enter", "Escape")
    screen = term.wait_for(r"Stop this run\?", "the popup for the resumed task")
    assert "Stopped; the task was discarded" not in screen
    assert len(daemon.pending_for("stream 305")) == 1
    term.keys("n")
    term.wait_for(r"running\s+\|\s+task \w+", "the resumed run to keep going")
    term.keys("C-c")
    term.wait_for(r"Stopped; the task was discarded", "the user-cancel")


def test_an_edit_confirmation_shows_the_coloured_diff(daemon: World) -> None:
    project = daemon.root / "project"
    project.mkdir()
    (project / "app.cfg").write_text("name = demo\nport = 80\ndebug = off\n")
    term = daemon.open_window(cwd=project)
    screen = term.send("edit app.cfg 'port = 80' 'port = 8080'", r"Allow once", "the confirmation")
    assert "(the change, +1 -1 lines, is shown above)" in screen
    lines = [line.strip() for line in screen.split("\n")]
    start = lines.index("--- a/app.cfg")
    assert lines[start : start + 7] == [
        "--- a/app.cfg",
        "+++ b/app.cfg",
        "@@ -1,3 +1,3 @@",
        "name = demo",
        "-port = 80",
        "+port = 8080",
        "debug = off",
    ]
    coloured = term.world.tmux("capture-pane", "-p", "-e", "-t", term.name)
    # Removed in red, added in green, the hunk in cyan (SGR 31, 32, 36).
    assert re.search(r"\x1b\[31m-port = 80", coloured), coloured
    assert re.search(r"\x1b\[32m\+port = 8080", coloured), coloured
    assert re.search(r"\x1b\[36m@@ -1,3 \+1,3 @@", coloured), coloured
    term.keys("1")
    term.wait_for(r"-- Done", "the edit to finish")
    assert (project / "app.cfg").read_text() == "name = demo\nport = 8080\ndebug = off\n"

"""The terminal client with a long reply: what streaming it costs, and what it costs after.

A daemon runs the scripted model, which echoes a message back word by word (20 ms
a word). The message is a reply-like Markdown text of about 20 KB; each window
runs in a tmux pane of 120x40, and its CPU time is read from ``/proc/PID/stat``.

=========================  ============================================  ==========
benchmark                  subject vs baseline                           target
=========================  ============================================  ==========
``tui_stream_20k``         ``agenttui``'s CPU time from Enter until the   <= 2x
                           20 KB reply has streamed in, vs ``agentrt
                           run`` of the same message into a pane alike
                           (the whole process: start, run, print, exit)
``tui_idle_after_20k``     the same window's CPU-seconds per minute,      <= 0.6 s
                           idle for 10 s after the reply (times 6), vs
                           the same measured before the message
=========================  ============================================  ==========
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import attrs

from ._harness import Result
from ._processes import STEP_TIMEOUT
from ._processes import isolated_env
from ._processes import script
from ._processes import start_daemon
from ._processes import stop_daemon

#: The size of the reply streamed, in bytes.
REPLY_BYTES = 20_000
#: How long the idle window is watched (its CPU time is scaled to a minute).
IDLE_SECONDS = 10.0
#: Bound on the wait for the reply to stream in (about a minute at 20 ms a word).
STREAM_TIMEOUT = 240.0
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
CPU_OF = Path(__file__).with_name("cpu_of.py")

_PARAGRAPH = (
    "The scheduler keeps every task in a nursery of its own, so that a cancelled run "
    "never leaves a child behind and each result is written before the next step begins."
)
_ITEMS = (
    "- a **paused** task keeps its question and its pending calls",
    "- an `interrupted` task is resumed by the next window that asks",
    "- a finished task leaves only its *session* behind",
)


def reply_text(size: int = REPLY_BYTES) -> str:
    """A Markdown reply of about `size` bytes: headings, paragraphs, lists, inline code.

    It has no ``;`` (which would split it into statements for the scripted model) and
    starts with no statement verb, so the model echoes it whole.
    """
    sections: list[str] = []
    number = 0
    while sum(len(s) + 2 for s in sections) < size:
        number += 1
        sections.append(f"## Part {number}")
        sections.append(f"{_PARAGRAPH}\n{_PARAGRAPH}")
        sections.append("\n".join(_ITEMS))
    return "\n\n".join(sections)


def cpu_seconds(pid: int) -> float:
    """The user and system CPU seconds process `pid` has used (``/proc/PID/stat``)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


@attrs.define
class _Tmux:
    """A private tmux server for the benchmark's panes; they inherit `env`."""

    socket: Path
    env: dict[str, str]

    def __call__(self, *args: str) -> str:
        done = subprocess.run(
            ["tmux", "-S", os.fspath(self.socket), *args],
            capture_output=True,
            text=True,
            timeout=30,
            env=self.env,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"tmux {args[0]} failed: {done.stderr.strip()}")
        return done.stdout

    def open(self, name: str, command: list[str], cwd: Path) -> int:
        """Start `command` (exec'd, no shell) in a new 120x40 pane; its pid."""
        self("new-session", "-d", "-x", "120", "-y", "40", "-s", name, "-c", os.fspath(cwd))
        self("set-option", "-t", name, "remain-on-exit", "on")
        self("respawn-pane", "-k", "-t", name, *command)
        return int(self("display-message", "-p", "-t", name, "#{pane_pid}"))

    def screen(self, name: str) -> str:
        return self("capture-pane", "-p", "-t", name)

    def wait_for(self, name: str, pattern: str, timeout: float = STEP_TIMEOUT) -> str:
        deadline = time.monotonic() + timeout
        while True:
            screen = self.screen(name)
            if re.search(pattern, screen):
                return screen
            if time.monotonic() > deadline:
                raise RuntimeError(f"{pattern!r} never showed; the screen: {screen[-600:]!r}")
            time.sleep(0.2)

    def dead(self, name: str) -> bool:
        return self("display-message", "-p", "-t", name, "#{pane_dead}").strip() == "1"

    def close(self) -> None:
        subprocess.run(
            ["tmux", "-S", os.fspath(self.socket), "kill-server"], capture_output=True, timeout=30
        )


def _idle_per_minute(pid: int, seconds: float) -> float:
    """CPU-seconds per minute process `pid` uses over the next `seconds`."""
    before = cpu_seconds(pid)
    time.sleep(seconds)
    return (cpu_seconds(pid) - before) * 60.0 / seconds


def run_all(root: Path, size: int = REPLY_BYTES, idle: float = IDLE_SECONDS) -> list[Result]:
    """Both rows, from one window and one ``agentrt run`` on one daemon."""
    if shutil.which("tmux") is None:
        reason = "tmux is not installed"
        return [
            Result.failed("tui_stream_20k", reason, 0.0, 2.0, 1),
            Result.failed("tui_idle_after_20k", reason, 0.0, 0.6, 1),
        ]
    env = isolated_env(root)
    text = reply_text(size)
    last_words = re.escape(text.split()[-1])
    daemon, socket_path, state = start_daemon(root, env, "tui-cost")
    tmux = _Tmux(root / "tui-cost.tmux", env)
    message = root / "message.txt"
    message.write_text(text)
    where = ["--socket", os.fspath(socket_path), "--state-dir", os.fspath(state)]
    try:
        # The baseline: the same message, its reply printed by `agentrt run` in a pane alike.
        cpu_file = root / "run-cpu.txt"
        run = [sys.executable, os.fspath(CPU_OF), os.fspath(cpu_file), os.fspath(message)]
        run += [os.fspath(script("agentrt")), "run", *where[2:], "-"]
        tmux.open("run", run, root)
        deadline = time.monotonic() + STREAM_TIMEOUT
        while not tmux.dead("run"):
            if time.monotonic() > deadline:
                raise RuntimeError(f"agentrt run did not end: {tmux.screen('run')[-600:]!r}")
            time.sleep(0.2)
        baseline = float(cpu_file.read_text())

        window = [os.fspath(script("agenttui")), *where]
        pid = tmux.open("tui", window, root)
        tmux.wait_for("tui", r"idle")
        idle_before = _idle_per_minute(pid, idle)
        tmux("load-buffer", "-b", "reply", os.fspath(message))
        tmux("paste-buffer", "-p", "-d", "-b", "reply", "-t", "tui")
        _settle(pid)
        start = cpu_seconds(pid)
        tmux("send-keys", "-t", "tui", "Enter")
        tmux.wait_for("tui", r"-- Done", STREAM_TIMEOUT)
        subject = cpu_seconds(pid) - start
        screen = tmux.screen("tui")
        problems: tuple[str, ...] = ()
        if not re.search(last_words, screen):
            problems = (f"the reply's last words are not on the screen: {screen[-400:]!r}",)
        _settle(pid)
        idle_after = _idle_per_minute(pid, idle)
    finally:
        tmux.close()
        stop_daemon(daemon)
    return [
        Result(
            "tui_stream_20k",
            subject,
            baseline,
            "ratio",
            2.0,
            1,
            problems,
            (
                f"CPU seconds of agenttui from Enter until the {len(text.encode())}-byte reply "
                "(echoed by the scripted model, 20 ms a word) shows, vs the whole agentrt run "
                "process printing the same reply; both on one daemon, in 120x40 tmux panes",
            ),
        ),
        Result(
            "tui_idle_after_20k",
            idle_after,
            idle_before,
            "absolute",
            0.6,
            1,
            notes=(
                f"agenttui's CPU seconds per minute while idle, measured over {idle:g} s right "
                f"after the reply and scaled by {60 / idle:g} (printed as a time); baseline: "
                "the same window before the message",
            ),
        ),
    ]


def _settle(pid: int, quiet: float = 0.5, timeout: float = 20.0) -> None:
    """Wait until process `pid` used no CPU for `quiet` seconds (a paste laid out, say)."""
    deadline = time.monotonic() + timeout
    used = cpu_seconds(pid)
    while time.monotonic() < deadline:
        time.sleep(quiet)
        now = cpu_seconds(pid)
        if now == used:
            return
        used = now

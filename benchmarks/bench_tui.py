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
``tui_reply_5000``         ``agenttui``'s CPU time from Enter until a     <= 1.5x
                           5,000-line Markdown reply (a replay model,
                           one word a frame, no pause) has streamed in,
                           vs ``agentrt run`` printing the same reply
``tui_piece_5000``         the same window's CPU time per streamed        <= 1.3x
                           piece (word) at 5,000 lines, vs per piece
                           at 500 lines (a window and daemon each)
``tui_echo_5000``          CPU time of one keystroke's echo with the      <= 1.1x
                           5,000-line reply in scrollback, vs the same
                           window before it (an empty transcript)
=========================  ============================================  ==========
"""

from __future__ import annotations

import json
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
from ._processes import peak_rss_mib
from ._processes import script
from ._processes import start_daemon
from ._processes import stop_daemon

#: The size of the reply streamed, in bytes.
REPLY_BYTES = 20_000
#: How long the idle window is watched (its CPU time is scaled to a minute).
IDLE_SECONDS = 10.0
#: Bound on the wait for the reply to stream in (about a minute at 20 ms a word).
STREAM_TIMEOUT = 240.0
#: The lines of the two long replies (the per-piece row compares the second with the first).
LONG_REPLY_LINES = (500, 5000)
#: Keys typed one at a time, each waited for on the screen, for the echo row.
ECHO_KEYS = 40
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


def run_seconds(pid: int) -> float:
    """The CPU seconds process `pid`'s threads have run, to the nanosecond
    (``/proc/PID/task/*/schedstat``: finer than `cpu_seconds`' clock ticks)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError):
            continue  # a thread that ended meanwhile
    return total / 1e9


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


def run_all(
    root: Path,
    size: int = REPLY_BYTES,
    idle: float = IDLE_SECONDS,
    lines: tuple[int, int] = LONG_REPLY_LINES,
    keys: int = ECHO_KEYS,
) -> list[Result]:
    """Every row: the 20 KB reply's two, then the long replies' three."""
    if shutil.which("tmux") is None:
        reason = "tmux is not installed"
        return [
            Result.failed(name, reason, 0.0, target, 1)
            for name, target in (
                ("tui_stream_20k", 2.0),
                ("tui_idle_after_20k", 0.6),
                ("tui_reply_5000", 1.5),
                ("tui_piece_5000", 1.3),
                ("tui_echo_5000", 1.1),
            )
        ]
    return [*_run_20k(root / "20k", size, idle), *_run_long(root / "long", lines, keys)]


def _run_20k(root: Path, size: int, idle: float) -> list[Result]:
    """The 20 KB rows, from one window and one ``agentrt run`` on one daemon."""
    root.mkdir(parents=True, exist_ok=True)
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
        baseline = _run_cpu(tmux, root, message, where)

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


def _run_cpu(tmux: _Tmux, root: Path, message: Path, where: list[str]) -> float:
    """CPU seconds of a whole `agentrt run` of `message` on the daemon `where` names, in a
    tmux pane ("run") of its own; its screen stays for the caller to read."""
    cpu_file = root / "run-cpu.txt"
    run = [sys.executable, os.fspath(CPU_OF), os.fspath(cpu_file), os.fspath(message)]
    run += [os.fspath(script("agentrt")), "run", *where[2:], "-"]
    tmux.open("run", run, root)
    deadline = time.monotonic() + STREAM_TIMEOUT
    while not tmux.dead("run"):
        if time.monotonic() > deadline:
            raise RuntimeError(f"agentrt run did not end: {tmux.screen('run')[-600:]!r}")
        time.sleep(0.2)
    return float(cpu_file.read_text())


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


def long_reply(lines: int) -> str:
    """A Markdown reply of `lines` lines: headings, paragraphs, lists, numbered steps, code.

    Every block is a few lines long, as a model's reply is; its last line says
    ``end-of-reply`` so the window is seen to show it.
    """
    out: list[str] = []
    for n in range(lines - 1):
        kind = (n // 10) % 5
        if n % 10 == 0:
            out.append(f"## Part {n // 10}" if kind != 4 else "```python")
        elif n % 10 == 1 and kind != 4:
            out.append("")
        elif kind in (0, 3):
            out.append(f"Line {n} of a paragraph with **bold** words and `code` in it, said")
        elif kind == 1:
            out.append(f"- item {n}, a point made in the *list* of points")
        elif kind == 2:
            out.append(f"{n % 10}. a numbered step with *emphasis* and a [link](https://e.org)")
        else:
            out.append(f"value_{n} = compute({n}, 'text') + 1" if n % 10 != 9 else "```")
        if n % 10 == 9 and kind != 4:
            out.append("")
    out.append("end-of-reply")
    return "\n".join(out)


def _replay_file(root: Path, text: str) -> Path:
    path = root / "reply.json"
    path.write_text(json.dumps({"turns": [{"text": text, "delay": 0.0}]}))
    return path


def _type_keys(tmux: _Tmux, pid: int, count: int) -> float:
    """CPU seconds of process `pid` per key, `count` keys typed one at a time into the
    input box, each waited for on the screen before the next; the box is emptied after."""
    typed = ""
    start = run_seconds(pid)
    for n in range(count):
        key = "abcdefghijklmnopqrstuvwxyz"[n % 26]
        typed += key
        tmux("send-keys", "-t", "tui", "-l", key)
        deadline = time.monotonic() + STEP_TIMEOUT
        while not re.search(rf"^> {typed}\s*$", tmux.screen("tui"), re.MULTILINE):
            if time.monotonic() > deadline:
                raise RuntimeError(f"key {n} never echoed: {tmux.screen('tui')[-400:]!r}")
            time.sleep(0.005)
    used = run_seconds(pid) - start
    tmux("send-keys", "-t", "tui", *(["BSpace"] * count))
    tmux.wait_for("tui", r"(?m)^>\s*$")
    return used / count


@attrs.frozen
class _Long:
    lines: int
    pieces: int
    window: float
    run: float
    echo_before: float
    echo_after: float
    rss_mib: float | None
    problems: tuple[str, ...]


def _long_reply(root: Path, lines: int, keys: int) -> _Long:
    """One daemon replaying a `lines`-line reply: ``agentrt run`` prints it, then a window
    types `keys` keys, streams it in and types them again."""
    root.mkdir(parents=True, exist_ok=True)
    env = isolated_env(root)
    text = long_reply(lines)
    env["AGENTRT_MODEL"] = f"replay:{_replay_file(root, text)}"
    daemon, socket_path, state = start_daemon(root, env, "tui-long")
    tmux = _Tmux(root / "tui-long.tmux", env)
    message = root / "message.txt"
    message.write_text("go")
    where = ["--socket", os.fspath(socket_path), "--state-dir", os.fspath(state)]
    try:
        baseline = _run_cpu(tmux, root, message, where)
        problems: tuple[str, ...] = ()
        if "end-of-reply" not in tmux.screen("run"):
            problems = (f"agentrt run did not print the reply: {tmux.screen('run')[-400:]!r}",)

        pid = tmux.open("tui", [os.fspath(script("agenttui")), *where], root)
        tmux.wait_for("tui", r"idle")
        _settle(pid)
        echo_before = _type_keys(tmux, pid, keys)
        tmux("send-keys", "-t", "tui", "-l", "go")
        tmux.wait_for("tui", r"(?m)^> go\s*$")
        _settle(pid)
        start = cpu_seconds(pid)
        tmux("send-keys", "-t", "tui", "Enter")
        tmux.wait_for("tui", r"-- Done", STREAM_TIMEOUT)
        window = cpu_seconds(pid) - start
        if "end-of-reply" not in tmux.screen("tui"):
            problems += (f"the reply's end is not on the screen: {tmux.screen('tui')[-400:]!r}",)
        _settle(pid)
        echo_after = _type_keys(tmux, pid, keys)
        rss = peak_rss_mib(pid)
    finally:
        tmux.close()
        stop_daemon(daemon)
    pieces = len(text.split(" "))
    return _Long(lines, pieces, window, baseline, echo_before, echo_after, rss, problems)


def _run_long(root: Path, sizes: tuple[int, int], keys: int) -> list[Result]:
    """The long-reply rows: the smaller reply first, then the larger."""
    small, large = (_long_reply(root / str(n), n, keys) for n in sizes)
    per_piece = (large.window / large.pieces, small.window / small.pieces)
    rss = f"{large.rss_mib:.0f} MiB" if large.rss_mib is not None else "unknown"
    return [
        Result(
            f"tui_reply_{large.lines}",
            large.window,
            large.run,
            "ratio",
            1.5,
            1,
            large.problems,
            (
                f"CPU seconds of agenttui from Enter until a {large.lines}-line Markdown reply "
                f"({large.pieces} words, each a frame, replayed without pause) shows, vs the "
                "whole agentrt run process printing it; both on one daemon, 120x40 tmux panes",
            ),
        ),
        Result(
            f"tui_piece_{large.lines}",
            per_piece[0],
            per_piece[1],
            "ratio",
            1.3,
            1,
            small.problems,
            (
                f"agenttui's CPU seconds per streamed word of the {large.lines}-line reply, vs "
                f"per word of a {small.lines}-line reply ({small.pieces} words) in a window "
                "of its own",
            ),
        ),
        Result(
            f"tui_echo_{large.lines}",
            large.echo_after,
            large.echo_before,
            "ratio",
            1.1,
            keys,
            notes=(
                f"agenttui's CPU seconds per key typed (each waited for on the screen) with the "
                f"{large.lines}-line reply in scrollback, vs the same window before it; "
                f"peak memory {rss}",
            ),
        ),
    ]

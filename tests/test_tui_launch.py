"""Starting a background daemon when none answers on the socket."""

from __future__ import annotations

import gc
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import attr._make
import pytest

import agentrt
from agenttui._launch import DaemonStartError
from agenttui._launch import daemon_command
from agenttui._launch import ensure_daemon
from agenttui._launch import is_answering


def test_starts_a_daemon_once_and_then_finds_it(short_dir: Path) -> None:
    sock = short_dir / "d.sock"
    state = short_dir / "state"
    started = ensure_daemon(sock, state_dir=state, model="scripted")
    assert started is not None
    try:
        assert is_answering(sock)
        assert started.log == state / "daemon.log"
        assert ensure_daemon(sock, state_dir=state) is None
        # The socket answers a moment before the daemon's main task says so in its log.
        deadline = time.monotonic() + 20
        while "listening on" not in started.log.read_text():
            assert time.monotonic() < deadline, "the daemon never logged 'listening on'"
            time.sleep(0.05)
    finally:
        started.process.send_signal(signal.SIGTERM)
        started.process.wait(timeout=30)
    assert "listening on" in started.log.read_text()


def test_a_daemon_that_exits_is_reported_with_its_log(short_dir: Path) -> None:
    with pytest.raises(DaemonStartError, match=r"exited with status \d+ before answering"):
        ensure_daemon(short_dir / "d.sock", state_dir=short_dir / "state", model="nosuch:model")


def test_a_daemon_that_does_not_answer_in_time_is_stopped(short_dir: Path) -> None:
    with pytest.raises(DaemonStartError, match=r"did not answer .* within 0 s"):
        ensure_daemon(short_dir / "d.sock", state_dir=short_dir / "state", timeout=0.0)
    assert not is_answering(short_dir / "d.sock")


def test_the_command_passes_only_what_was_given() -> None:
    command = daemon_command(Path("/s.sock"), None, None)
    assert command[1:] == ["-m", "agentrt.daemon", "--socket", "/s.sock"]
    command = daemon_command(Path("/s.sock"), Path("/st"), "scripted")
    assert command[-4:] == ["--state-dir", "/st", "--model", "scripted"]
    command = daemon_command(Path("/s.sock"), None, "openai:m", "http://localhost:11434/v1")
    assert command[-4:] == ["--model", "openai:m", "--base-url", "http://localhost:11434/v1"]
    command = daemon_command(Path("/s.sock"), None, None, options=["--approval", "ask"])
    assert command[-2:] == ["--approval", "ask"]


def test_the_shared_options_read_alike_in_every_command() -> None:
    from agentrt.apps.cli import build_parser
    from agentrt.daemon import _parser as daemon_parser
    from agenttui.__main__ import _parser as tui_parser

    model = ["--model", "openai:m", "--base-url", "u", "--api-key-env", "K"]
    model += ["--approval", "auto-edit", "--config", "c.toml"]
    run = build_parser().parse_args(["run", "hi", *model])
    daemon = daemon_parser().parse_args([*model, "--socket", "s"])
    tui = tui_parser().parse_args([*model, "--socket", "s"])
    shown = build_parser().parse_args(["config", "show", *model])
    for args in (run, daemon, tui, shown):
        assert (args.model, args.base_url, args.state_dir) == ("openai:m", "u", None)
        assert (args.api_key_env, args.approval, args.config) == ("K", "auto-edit", Path("c.toml"))
    assert daemon.socket == tui.socket == Path("s")


def test_version_is_printed_without_starting_anything(short_dir: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "agenttui", "--version", "--socket", str(short_dir / "d.sock")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0
    assert result.stdout.strip() == f"agenttui {agentrt.__version__}"
    assert not (short_dir / "d.sock").exists()


def test_the_collector_waits_for_the_first_screen_then_skips_what_the_start_made(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from agenttui import __main__ as entry

    seen: list[tuple[bool, int]] = []
    attrs_own = attr._make._compile_and_eval
    compiling: list[bool] = []  # whether attrs compiles for itself, before and after

    def run(argv: object = None, *, on_first_screen: Callable[[], None] | None = None) -> int:
        seen.append((gc.isenabled(), gc.get_freeze_count()))
        compiling.append(attr._make._compile_and_eval is attrs_own)
        assert on_first_screen is not None
        on_first_screen()
        seen.append((gc.isenabled(), gc.get_freeze_count()))
        compiling.append(attr._make._compile_and_eval is attrs_own)
        return 3

    monkeypatch.setattr(entry, "run", run)
    try:
        with pytest.raises(SystemExit) as exited:
            entry.main()
    finally:
        gc.unfreeze()
    assert exited.value.code == 3
    (paused, _), (collecting, frozen) = seen
    assert (paused, collecting) == (False, True)
    assert frozen > 0
    assert gc.isenabled()
    # Until the first screen, the window's classes take their methods from the last
    # start's (`agentrt.apps.codecache`); then attrs compiles for itself again.
    assert compiling == [False, True]


def test_the_collector_runs_again_when_the_window_fails_before_its_first_screen(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from agenttui import __main__ as entry

    def run(argv: object = None, *, on_first_screen: Callable[[], None] | None = None) -> int:
        assert not gc.isenabled()
        raise OSError("no terminal")

    monkeypatch.setattr(entry, "run", run)
    with pytest.raises(OSError, match="no terminal"):
        entry.main()
    assert gc.isenabled()

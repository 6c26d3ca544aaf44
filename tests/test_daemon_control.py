"""``agentrt daemon status`` and ``agentrt daemon stop`` against real daemon processes, and a
daemon whose HTTP port is taken: it says so in one line and goes on serving its socket."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
import trio
import trio.testing

from agentrt.daemon import Daemon
from agentrt.protocol.client import Client
from agentrt.protocol.frames import DaemonAction
from agentrt.protocol.frames import DaemonRequest
from agentrt.protocol.frames import DaemonStatus
from agentrt.protocol.frames import ErrorCode
from agentrt.protocol.frames import ErrorFrame
from agentrt.protocol.frames import Scope

from .cli_process import AGENTRT
from .cli_process import env_for
from .cli_process import run
from .cli_process import running_daemon

pytestmark = pytest.mark.deadline(90)

#: Bound on every wait for a process to say or do something.
WAIT = 20.0


def wait_until(check: object, what: str, timeout: float = WAIT) -> None:
    """Poll `check` (a callable) until it holds; fail naming `what` after `timeout` s."""
    assert callable(check)
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out after {timeout:g} s waiting for {what}"
        time.sleep(0.05)


def status_json(state: Path, cwd: Path) -> tuple[int, dict[str, object]]:
    result = run(["daemon", "status", "--json"], state, cwd)
    return result.returncode, json.loads(result.stdout)


def test_with_no_daemon_status_and_stop_say_so_and_exit_3(tmp_path: Path) -> None:
    state = tmp_path / "state"
    status = run(["daemon", "status"], state, tmp_path)
    assert (status.returncode, status.stdout.strip()) == (
        3,
        f"no daemon holds the state dir {state}",
    )
    assert status_json(state, tmp_path) == (3, {"running": False, "state_dir": str(state)})
    stop = run(["daemon", "stop"], state, tmp_path)
    assert (stop.returncode, stop.stdout.strip()) == (3, f"no daemon holds the state dir {state}")


def test_status_names_the_daemon_that_holds_the_state_dir(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with running_daemon(state, tmp_path / "work") as process:
        code, data = status_json(state, tmp_path)
        assert code == 0
        assert data["running"] is True
        assert data["pid"] == process.pid
        assert data["state_dir"] == str(state)
        assert str(data["socket"]).endswith("/d.sock")
        assert (data["model"], data["approval"], data["http"], data["http_error"]) == (
            "scripted",
            "ask",
            None,
            None,
        )
        # The status request's own connection is the only one; no run is in flight.
        assert (data["connections"], data["runs"], data["stopping"]) == (1, 0, False)
        assert isinstance(data["uptime"], float) and data["uptime"] >= 0

        text = run(["daemon", "status"], state, tmp_path)
        assert text.returncode == 0
        lines = text.stdout.splitlines()
        assert lines[0] == f"daemon {process.pid} holds the state dir {state}"
        assert re.search(r"^  HTTP API\s+off$", text.stdout, re.MULTILINE)
        assert re.search(r"^  model\s+scripted$", text.stdout, re.MULTILINE)
        assert re.search(r"^  runs\s+0 in flight$", text.stdout, re.MULTILINE)


def test_stop_ends_a_run_in_flight_with_its_task_kept_and_the_daemon_exits(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    work = tmp_path / "work"
    with running_daemon(state, work) as process:
        runner = subprocess.Popen(
            [*AGENTRT, "run", "sleep 30"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env_for(state),
            cwd=work,
        )
        try:
            wait_until(lambda: status_json(state, tmp_path)[1].get("runs") == 1, "the run")
            stop = run(["daemon", "stop"], state, tmp_path)
            assert stop.returncode == 0, stop.stderr
            assert stop.stdout.strip() == (
                f"stopped daemon {process.pid}; 1 run stopped (cause shutdown), its task "
                "kept: 'agentrt pending list' shows it"
            )
            # stop returns once the process is gone: it was the daemon's graceful exit.
            assert process.poll() == 0
            _out, err = runner.communicate(timeout=WAIT)
            assert runner.returncode == 3, err
        finally:
            if runner.poll() is None:
                runner.kill()
                runner.wait()
    # No daemon holds the state dir any more: the command reads the store itself.
    assert run(["daemon", "status"], state, tmp_path).returncode == 3
    listed = run(["pending", "list", "--json"], state, tmp_path)
    [task] = [json.loads(line) for line in listed.stdout.splitlines()]
    assert (task["input"], task["cause"]) == ("sleep 30", "shutdown")


def test_stop_says_when_the_daemon_will_not_exit(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with running_daemon(state, tmp_path / "work") as process:
        # A stopped process answers nothing and handles no signal until it is continued.
        process.send_signal(signal.SIGSTOP)
        try:
            stop = run(["daemon", "stop", "--timeout", "1"], state, tmp_path)
            assert stop.returncode == 1
            assert stop.stderr.strip() == (
                f"daemon {process.pid} is still running after 1 s and a SIGTERM; "
                f"'kill -KILL {process.pid}' ends it at once (its runs' tasks are kept, "
                "marked crashed)"
            )
            assert process.poll() is None
        finally:
            process.send_signal(signal.SIGCONT)
        # The SIGTERM it was sent is handled once it runs again: a graceful exit.
        assert process.wait(timeout=WAIT) == 0


def test_stop_refuses_bad_timeouts(tmp_path: Path) -> None:
    result = run(["daemon", "stop", "--timeout", "0"], tmp_path / "state", tmp_path)
    assert result.returncode == 2
    assert "give a number of seconds above 0 and at most 3600" in result.stderr


def test_a_taken_http_port_is_said_and_the_socket_is_still_served(
    short_dir: Path, taken_port: int
) -> None:
    state = short_dir / "state"
    said = bytearray()
    line = (
        f"agentrt daemon: HTTP API not started: 127.0.0.1:{taken_port} is in use "
        "(Address already in use); the socket is served\n"
    ).encode()
    http = ("--http", f"127.0.0.1:{taken_port}")
    with running_daemon(state, short_dir, *http, until=line, said=said) as process:
        assert said.count(b"HTTP API") == 1
        code, data = status_json(state, short_dir)
        assert (code, data["http"], data["http_error"]) == (
            0,
            None,
            f"127.0.0.1:{taken_port} is in use (Address already in use)",
        )
        text = run(["daemon", "status"], state, short_dir).stdout
        assert re.search(
            rf"^  HTTP API\s+not started: 127\.0\.0\.1:{taken_port} is in use", text, re.MULTILINE
        )
        # A run through the socket works as ever.
        result = run(["run", "stream 3"], state, short_dir)
        assert result.returncode == 0, result.stderr
        assert "word1 word2 word3" in result.stdout
        assert process.poll() is None


async def test_a_window_may_ask_the_status_but_not_stop_the_daemon(
    daemon: Daemon, sock_path: Path
) -> None:
    with trio.fail_after(10):
        async with await Client.connect(sock_path) as window:
            await window.send(DaemonRequest(DaemonAction.STATUS))
            status = await window.wait_for(DaemonStatus)
            assert (status.pid, status.connections, status.stopping) == (os.getpid(), 1, False)
            await window.send(DaemonRequest(DaemonAction.STOP))
            refused = await window.receive()
            assert refused == ErrorFrame(
                ErrorCode.FORBIDDEN,
                "a window cannot stop the daemon; run 'agentrt daemon stop'",
                "daemon",
            )
            assert not daemon.stopping
        async with await Client.connect(sock_path, scope=Scope.ALL) as command:
            await command.send(DaemonRequest(DaemonAction.STOP))
            stopping = await command.wait_for(DaemonStatus)
            assert stopping.stopping
        await trio.testing.wait_all_tasks_blocked()
        assert daemon.status().stopping
        assert not daemon.socket_path.exists()

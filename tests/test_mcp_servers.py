"""Two MCP servers this project did not write, from PyPI, through a real daemon.

``mcp-server-time`` and ``mcp-server-git`` live in a virtualenv of their own
(``make .venv-mcp-servers/.installed``, pinned by ``constraints-mcp-servers.txt``).
Each runs as the daemon runs any stdio server (in the sandbox), and a replay
model calls its tools through ``agentrt run``; what the servers answered is
read from the run's output and from the session's stored conversation.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from . import cli_process
from .conftest import write_config
from .test_mcp import replay

ROOT = Path(__file__).resolve().parent.parent
SERVERS = Path(os.environ.get("AGENTRT_MCP_SERVERS", ROOT / ".venv-mcp-servers" / "bin"))

pytestmark = [pytest.mark.e2e, pytest.mark.deadline(90)]


def installed(program: str) -> str:
    exe = SERVERS / program
    if not exe.exists():
        pytest.fail(
            f"{program} is not installed at {exe}: run `make .venv-mcp-servers/.installed`"
            " (`make test` and `make unit` do it too)",
            pytrace=False,
        )
    return str(exe)


@pytest.fixture
def config_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    return dict(os.environ)


def run_through_a_daemon(
    tmp_path: Path, workdir: Path, env: dict[str, str], config: str, stdin: str = ""
) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    """Write `config`, start a daemon on it, wait for its servers, run one task; the run, and
    the messages its session kept."""
    write_config(env, config)
    state = tmp_path / "state"
    with cli_process.running_daemon(state, workdir):
        waited = cli_process.run(["mcp", "list", "--json"], state, workdir)
        for _ in range(300):  # each look is a process of its own; bounded
            listed = json.loads(waited.stdout)
            if all(s["state"] != "starting" for s in listed["servers"]):
                break
            waited = cli_process.run(["mcp", "list", "--json"], state, workdir)
        assert [s["state"] for s in listed["servers"]] == ["ready"], listed
        ran = cli_process.run(["run", "--json", "go"], state, workdir, stdin=stdin)
        session = events(ran, "task_started")[0]["session_id"]
        shown = cli_process.run(["sessions", "show", "--json", session], state, workdir)
    assert shown.returncode == 0, shown.stderr
    messages: list[dict[str, Any]] = json.loads(shown.stdout)["messages"]
    return ran, messages


def tool_results(messages: list[dict[str, Any]]) -> list[str]:
    """The whole results of the session's tool calls, as the store kept them."""
    return [m["content"] for m in messages if m.get("role") == "tool"]


def events(ran: subprocess.CompletedProcess[str], kind: str) -> list[dict[str, Any]]:
    """The events of type `kind` that ``agentrt run --json`` printed."""
    lines = [json.loads(line) for line in ran.stdout.splitlines() if line.strip()]
    return [e for e in lines if e.get("type") == kind]


def test_mcp_server_time_answers_through_the_daemon(
    tmp_path: Path, workdir: Path, config_home: dict[str, str]
) -> None:
    model = replay(
        tmp_path,
        ("time__get_current_time", {"timezone": "Asia/Tokyo"}),
        (
            "time__convert_time",
            {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"},
        ),
    )
    config = (
        f'model = "{model.source}"\n'
        "[mcp.servers.time]\n"
        f'command = "{installed("mcp-server-time")}"\n'
        'args = ["--local-timezone", "UTC"]\n'
        "trust = true\n"
    )
    ran, messages = run_through_a_daemon(tmp_path, workdir, config_home, config)
    assert ran.returncode == 0, ran.stderr
    current, converted = (json.loads(result) for result in tool_results(messages))
    assert current["timezone"] == "Asia/Tokyo"
    assert current["datetime"].endswith("+09:00")
    # Tokyo keeps no summer time: noon UTC is 21:00 there, whatever the date.
    assert converted["target"]["datetime"].endswith("T21:00:00+09:00")


def test_mcp_server_git_reads_a_repository_and_asks_before_an_untrusted_tool(
    tmp_path: Path, workdir: Path, config_home: dict[str, str]
) -> None:
    git = ["git", "-C", str(workdir), "-c", "user.name=T", "-c", "user.email=t@example.org"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    (workdir / "a.txt").write_text("one\n")
    subprocess.run([*git, "add", "a.txt"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "the first commit"], check=True)
    (workdir / "b.txt").write_text("two\n")
    model = replay(
        tmp_path,
        ("git__git_status", {"repo_path": str(workdir)}),
        ("git__git_log", {"repo_path": str(workdir), "max_count": 1}),
    )
    config = (
        f'model = "{model.source}"\n'
        "[mcp.servers.git]\n"
        f'command = "{installed("mcp-server-git")}"\n'
        f'args = ["--repository", "{workdir}"]\n'
        'trusted_tools = ["git_status"]\n'
    )
    # git_status runs unasked; git_log is confirmed, answered y from standard input.
    ran, messages = run_through_a_daemon(tmp_path, workdir, config_home, config, stdin="y\n")
    assert ran.returncode == 0, ran.stderr
    asked = [q["prompt"] for q in events(ran, "question")]
    assert asked == [f'git: git_log {{"repo_path": "{workdir}", "max_count": 1}}']
    status, log = tool_results(messages)
    assert status.startswith("Repository status:") and "b.txt" in status
    assert log.startswith("Commit history:") and "the first commit" in log

"""MCP servers' tools through a real runtime: the FastMCP server of tests/fakes/mcp_server.py.

Each test starts the server as the runtime does (a real process over stdio,
inside the sandbox when one can be had), drives a run with a replay model that
calls its tools, and reads what the server recorded and what the run kept.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import AsyncIterator
from collections.abc import Awaitable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from agentrt import ALLOW_ONCE
from agentrt import DENY
from agentrt import Answer
from agentrt import Entry
from agentrt import Outcome
from agentrt import ReplayModel
from agentrt import RequestKind
from agentrt import Runtime
from agentrt import ScriptedModel
from agentrt import ToolResultEvent
from agentrt import open_runtime
from agentrt.agent.mcp import McpClients
from agentrt.agent.mcp import ServerState
from agentrt.config.settings import ConfigError
from agentrt.config.settings import load_settings

from . import cli_process
from .conftest import FakeVerifier
from .conftest import run_answering
from .conftest import write_config

FAKE = Path(__file__).parent / "fakes" / "mcp_server.py"
SESSION = "cli-mcp"


def server_table(name: str = "fake", *extra: str, fault: str | None = None) -> str:
    args = [str(FAKE)] + ([fault] if fault else [])
    lines = [
        f"[mcp.servers.{name}]",
        f"command = {json.dumps(sys.executable)}",
        f"args = {json.dumps(args)}",
        *extra,
    ]
    return "\n".join(lines) + "\n"


def replay(tmp_path: Path, *calls: tuple[str, dict[str, Any]], final: str = "done") -> ReplayModel:
    turns = [
        {"tool_calls": [{"id": f"c{n}", "name": name, "arguments": args}]}
        for n, (name, args) in enumerate(calls)
    ]
    path = tmp_path / "replay.json"
    path.write_text(json.dumps({"turns": [*turns, {"text": final}]}))
    return ReplayModel.from_file(path)


@asynccontextmanager
async def mcp_runtime(
    tmp_path: Path, workdir: Path, config: str, model: ReplayModel | None = None
) -> AsyncIterator[Runtime]:
    """A runtime whose configuration file holds `config`, its MCP servers settled."""
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    write_config(env, config)
    settings = load_settings(argparse.Namespace(), env)
    async with open_runtime(
        tmp_path / "state",
        model=model or ScriptedModel(word_delay=0),
        workdir=workdir,
        restricted_paths=[],
        verifier=FakeVerifier(),
        settings=settings,
    ) as rt:
        clients = rt.executor.config.mcp
        assert clients is not None
        with trio.fail_after(30):
            await clients.wait_settled()
        yield rt


def clients_of(rt: Runtime) -> McpClients:
    clients = rt.executor.config.mcp
    assert clients is not None
    return clients


def allow(entry: Entry) -> Awaitable[Answer]:
    async def answer() -> Answer:
        await trio.lowlevel.checkpoint()
        return Answer(ALLOW_ONCE)

    return answer()


def results(recorder: Any) -> list[str]:
    return [e.preview for e in recorder.of(ToolResultEvent)]


# -- configuration -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("table", "problem"),
    [
        ('[mcp.servers.x]\nargs = ["a"]\n', "give either command"),
        ('[mcp.servers.x]\ncommand = "a"\nurl = "http://h/"\n', "not both or neither"),
        ('[mcp.servers.x]\nurl = "ftp://h/"\n', "x.url must be an http:// or https:// URL"),
        ('[mcp.servers.x]\ncommand = "a"\nheaders = { A = "b" }\n', "only for a server at a url"),
        ('[mcp.servers.x]\ncommand = "a"\ncolour = 1\n', "x.colour: unknown key"),
        ('[mcp.servers."a__b"]\ncommand = "a"\n', "is not a server name"),
        ('[mcp.servers.x]\ncommand = "a"\ntrust = "yes"\n', "x.trust must be true or false"),
        ('[mcp.servers.x]\nurl = "https://h/"\nheaders = { A = "${no such}" }\n', "${no such}"),
    ],
)
def test_a_bad_server_table_is_refused_naming_the_key(
    tmp_path: Path, table: str, problem: str
) -> None:
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path)}
    write_config(env, table)
    with pytest.raises(ConfigError, match=r"config\.toml.*mcp\.servers") as caught:
        load_settings(argparse.Namespace(), env)
    assert problem in str(caught.value)


def test_a_server_table_is_read_with_its_defaults(tmp_path: Path) -> None:
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path)}
    write_config(
        env,
        '[mcp.servers.git]\ncommand = "uvx"\nargs = ["mcp-server-git"]\ntrusted_tools = ["git_status"]\n'
        '[mcp.servers.remote]\nurl = "https://example.org/mcp"\n'
        'headers = { Authorization = "Bearer ${REMOTE_TOKEN}" }\ntrust = true\n',
    )
    servers = load_settings(argparse.Namespace(), env).mcp_servers
    git, remote = servers["git"], servers["remote"]
    assert (git.transport, git.args, git.sandbox, git.timeout) == (
        "stdio",
        ("mcp-server-git",),
        True,
        300.0,
    )
    assert git.trusts("git_status") and not git.trusts("git_commit")
    assert (remote.transport, remote.trusts("anything")) == ("http", True)
    assert remote.headers == {"Authorization": "Bearer ${REMOTE_TOKEN}"}


# -- tools ---------------------------------------------------------------------------


async def test_a_servers_tools_are_offered_as_name__tool_with_their_schemas(
    tmp_path: Path, workdir: Path
) -> None:
    async with mcp_runtime(tmp_path, workdir, server_table()) as rt:
        specs = {spec.name: spec for spec in clients_of(rt).specs()}
        status = clients_of(rt).statuses()[0]
    assert status.state is ServerState.READY
    assert set(specs) == {
        f"fake__{t}" for t in ("echo", "greet", "login", "slow", "crash", "garbage")
    }
    echo = specs["fake__echo"]
    assert echo.description == "Say the text back."
    assert echo.parameters["properties"]["text"]["type"] == "string"
    assert echo.parameters["required"] == ["text"]


async def test_a_call_is_confirmed_by_default_and_its_result_committed(
    tmp_path: Path, workdir: Path
) -> None:
    model = replay(tmp_path, ("fake__echo", {"text": "hi"}))
    asked: list[Entry] = []

    async def answer(entry: Entry) -> Answer:
        asked.append(entry)
        await trio.lowlevel.checkpoint()
        return Answer(ALLOW_ONCE)

    async with mcp_runtime(tmp_path, workdir, server_table(), model) as rt:
        ended, recorder = await run_answering(rt, SESSION, "go", answer)
        messages = await rt.store.messages(SESSION)
    assert ended.outcome is Outcome.FINISHED
    assert [e.request.kind for e in asked] == [RequestKind.CONFIRM]
    assert asked[0].request.prompt == 'fake: echo {"text": "hi"}'
    assert results(recorder) == ["echo: hi"]
    assert any(m.message.content == "echo: hi" for m in messages.items)


async def test_a_denied_call_never_reaches_the_server(tmp_path: Path, workdir: Path) -> None:
    model = replay(tmp_path, ("fake__slow", {"seconds": 0}))

    async def deny(entry: Entry) -> Answer:
        await trio.lowlevel.checkpoint()
        return Answer(DENY)

    async with mcp_runtime(tmp_path, workdir, server_table(), model) as rt:
        _, recorder = await run_answering(rt, SESSION, "go", deny)
    assert results(recorder) == ["denied by the user"]
    assert not (workdir / "mcp-record.txt").exists()


@pytest.mark.parametrize("trust", ["trust = true", 'trusted_tools = ["echo"]'])
async def test_a_trusted_tool_runs_unasked(tmp_path: Path, workdir: Path, trust: str) -> None:
    model = replay(tmp_path, ("fake__echo", {"text": "x"}))
    asked: list[Entry] = []

    async def answer(entry: Entry) -> Answer:
        asked.append(entry)
        await trio.lowlevel.checkpoint()
        return Answer(DENY)

    async with mcp_runtime(tmp_path, workdir, server_table("fake", trust), model) as rt:
        _, recorder = await run_answering(rt, SESSION, "go", answer)
    assert asked == []
    assert results(recorder) == ["echo: x"]


# -- the daemon and `agentrt mcp list` ------------------------------------------------


@pytest.fixture
def config_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """An XDG_CONFIG_HOME of the test's own, for it and every process it starts."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    return dict(os.environ)


def test_mcp_list_without_a_daemon_starts_each_server_to_look(
    tmp_path: Path, workdir: Path, config_home: dict[str, str]
) -> None:
    write_config(
        config_home,
        server_table()
        + server_table("mute", "startup_timeout = 1", fault="no-init")
        + '[mcp.servers.gone]\ncommand = "/nonexistent/program"\n',
    )
    done = cli_process.run(["mcp", "list"], tmp_path / "state", workdir)
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "MCP servers (started here to look: no daemon is running):"
    assert lines[1].startswith("  fake  stdio  ready (")
    assert "fake__echo, fake__greet" in lines[2]
    assert lines[3] == "  mute  stdio  failed: it did not answer initialize within 1s"
    assert lines[4].startswith("  gone  stdio  failed: its connection closed (the server exited): ")
    assert "/nonexistent/program" in lines[4]
    assert done.stderr == ""
    assert "reading, never answering" in (tmp_path / "state" / "mcp" / "mute.log").read_text()


def test_mcp_list_says_where_to_configure_a_server(
    tmp_path: Path, workdir: Path, config_home: dict[str, str]
) -> None:
    done = cli_process.run(["mcp", "list"], tmp_path / "state", workdir)
    assert done.returncode == 0
    assert "no MCP servers are configured; add a [mcp.servers.NAME] table" in done.stdout


def test_the_daemon_starts_its_servers_and_a_run_calls_their_tools(
    tmp_path: Path, workdir: Path, config_home: dict[str, str]
) -> None:
    model = replay(tmp_path, ("fake__echo", {"text": "through the daemon"}))
    write_config(
        config_home,
        f'model = "{model.source}"\n' + server_table("fake", "trust = true"),
    )
    state = tmp_path / "state"
    with cli_process.running_daemon(state, workdir):
        deadline = time.monotonic() + 30
        while True:  # each look is a process of its own: no sleep needed between them
            done = cli_process.run(["mcp", "list", "--json"], state, workdir)
            listed = json.loads(done.stdout)
            if listed["servers"][0]["state"] != "starting":
                break
            assert time.monotonic() < deadline, "the server did not come up within 30s"
        assert listed["source"] == "as the daemon runs them"
        assert listed["servers"][0]["state"] == "ready"
        ran = cli_process.run(["run", "go"], state, workdir)
    assert ran.returncode == 0, ran.stderr
    assert "· fake__echo -> echo: through the daemon" in ran.stderr
    assert ran.stdout == "done\n"

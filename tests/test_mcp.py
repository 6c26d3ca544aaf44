"""MCP servers' tools through a real runtime: the FastMCP server of tests/fakes/mcp_server.py.

Each test starts the server as the runtime does (a real process over stdio,
inside the sandbox when one can be had), drives a run with a replay model that
calls its tools, and reads what the server recorded and what the run kept.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Sequence
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from jsonschema import Draft202012Validator

from agentrt import ALLOW_ONCE
from agentrt import DENY
from agentrt import Answer
from agentrt import Cause
from agentrt import Entry
from agentrt import Message
from agentrt import Outcome
from agentrt import ReplayModel
from agentrt import RequestKind
from agentrt import RunEnded
from agentrt import Runtime
from agentrt import ScriptedModel
from agentrt import ToolResultEvent
from agentrt import open_runtime
from agentrt.agent.mcp import McpCallError
from agentrt.agent.mcp import McpClients
from agentrt.agent.mcp import ServerState
from agentrt.agent.mcp import exposed_name
from agentrt.config.keystore import KeyStore
from agentrt.config.settings import ConfigError
from agentrt.config.settings import load_settings
from agentrt.models.messages import ModelResponse
from agentrt.models.messages import OnDelta
from agentrt.models.messages import Role
from agentrt.models.messages import ToolSpec
from agentrt.models.providers import AnthropicModel
from agentrt.models.providers import OpenAIModel
from agentrt.vocab.events import ToolProgressEvent

from . import cli_process
from .conftest import Collect
from .conftest import FakeVerifier
from .conftest import Recorder
from .conftest import questions_answered
from .conftest import run_answering
from .conftest import write_config
from .fakes.llm_server import OA_DONE
from .fakes.llm_server import LLMServer
from .fakes.llm_server import an_end
from .fakes.llm_server import an_start
from .fakes.llm_server import an_text_block
from .fakes.llm_server import oa_finish
from .fakes.llm_server import oa_text
from .fakes.llm_server import sse

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
        f"fake__{t}" for t in ("echo", "greet", "login", "slow", "touch", "connect", "crash")
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
    assert lines[2] == (
        "    7 tools: fake__echo, fake__greet, fake__login, fake__slow, fake__touch, "
        "fake__connect, fake__crash"
    )
    # (started again meanwhile, it may say how often)
    assert lines[3].startswith("  mute  stdio  failed: it did not answer initialize within 1s")
    assert lines[4].startswith("  gone  stdio  failed: its connection closed (the server exited): ")
    assert "/nonexistent/program" in lines[4]
    assert done.stderr == ""
    # Each server's standard error went to its log.
    assert "fake MCP server: up" in (tmp_path / "state" / "mcp" / "fake.log").read_text()


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


# -- what the providers are sent -------------------------------------------------------


async def test_both_providers_send_the_servers_schemas_as_they_came(
    tmp_path: Path, workdir: Path, llm_server: LLMServer
) -> None:
    async with mcp_runtime(tmp_path, workdir, server_table()) as rt:
        specs = clients_of(rt).specs()
        listed = {t.name: t.input_schema for t in clients_of(rt).servers["fake"].tools.values()}
    llm_server.script(
        sse([an_start(), *an_text_block(0, ["ok"]), *an_end()]),
        sse([oa_text("ok"), oa_finish(), OA_DONE]),
    )
    anthropic = AnthropicModel("claude-test", llm_server.base_url, api_key="k")
    openai = OpenAIModel("test-model", llm_server.base_url + "/v1", api_key="k")
    for model in (anthropic, openai):
        await model.complete([Message.user("hi")], specs, Collect())
    an_body, oa_body = (request.json() for request in llm_server.requests)
    sent_an = {t["name"]: t["input_schema"] for t in an_body["tools"]}
    sent_oa = {t["function"]["name"]: t["function"]["parameters"] for t in oa_body["tools"]}
    for sent in (sent_an, sent_oa):
        assert set(sent) == {f"fake__{name}" for name in listed}
        for name, schema in listed.items():
            assert sent[f"fake__{name}"] == schema
            Draft202012Validator.check_schema(sent[f"fake__{name}"])


def test_a_tool_name_models_refuse_is_offered_in_a_form_they_take() -> None:
    assert exposed_name("git", "git.status") == "git__git_status"
    assert len(exposed_name("s", "x" * 100)) == 64


# -- cancellation -----------------------------------------------------------------------


async def wait_for_line(path: Path, prefix: str, seconds: float = 20) -> str:
    """The first line of `path` that starts with `prefix`, once the server has written it."""
    file = trio.Path(path)
    with trio.fail_after(seconds):
        while True:
            if await file.exists():
                for line in (await file.read_text()).splitlines():
                    if line.startswith(prefix):
                        return line
            await trio.sleep(0.02)


@pytest.mark.parametrize("cause", [Cause.PAUSE, Cause.USER_CANCEL])
async def test_a_stop_sends_notifications_cancelled_and_a_resume_is_attempt_2(
    tmp_path: Path, workdir: Path, cause: Cause
) -> None:
    # Long enough to be stopped in flight; the resumed attempt waits it out.
    model = replay(tmp_path, ("fake__slow", {"seconds": 2}))
    record = workdir / "mcp-record.txt"
    asked: list[Entry] = []

    async def answer(entry: Entry) -> Answer:
        asked.append(entry)
        await trio.lowlevel.checkpoint()
        return Answer(ALLOW_ONCE)

    async with mcp_runtime(tmp_path, workdir, server_table("fake", "trust = true"), model) as rt:
        recorder = Recorder()
        async with trio.open_nursery() as nursery:
            info = await nursery.start(
                partial(rt.executor.run, SESSION, "go", owner="t", emit=recorder)
            )
            started = await wait_for_line(record, "started ")
            rt.executor.cancel(info.task_hash, cause)
        # The server heard of it: its handler was cancelled, for that very request.
        request = started.removeprefix("started ")
        assert await wait_for_line(record, "cancelled ") == f"cancelled {request}"
        ended = recorder.of(RunEnded)[0]
        assert (ended.outcome, ended.cause) == (Outcome.CANCELLED, cause)
        task = await rt.store.load(SESSION)
        if cause is Cause.USER_CANCEL:
            assert task is None
            return
        assert task is not None and task.attempts_of("c0") == 1
        # On resume the call may already have run: it is confirmed, trusted or not.
        record.unlink()
        resumed, _ = await resume_answering(rt, answer)
    assert resumed.outcome is Outcome.FINISHED
    assert [e.request.prompt for e in asked] == [
        'fake: slow {"seconds": 2} [may already have run (attempt 2)]'
    ]
    assert (await wait_for_line(record, "finished ")).startswith("finished ")


async def resume_answering(
    rt: Runtime, answer: Callable[[Entry], Awaitable[Answer]]
) -> tuple[RunEnded, Recorder]:
    recorder = Recorder()
    async with questions_answered(rt, answer):
        with trio.fail_after(30):
            ended = await rt.executor.resume(SESSION, owner="t", emit=recorder)
    return ended, recorder


# -- faults -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fault", "says"),
    [
        (None, "its connection closed (the server exited)"),
        ("garbage", "it wrote something that is not MCP: 'this is not json-rpc'"),
    ],
)
async def test_a_server_that_breaks_mid_call_fails_the_call_and_is_started_again(
    tmp_path: Path, workdir: Path, fault: str | None, says: str
) -> None:
    tool = "garbage" if fault else "crash"
    model = replay(tmp_path, (f"fake__{tool}", {}), ("other__echo", {"text": "on"}))
    config = server_table("fake", "trust = true", fault=fault) + server_table(
        "other", "trust = true"
    )
    async with mcp_runtime(tmp_path, workdir, config, model) as rt:
        ended, recorder = await run_answering(rt, SESSION, "go", allow, limit=30)
        other = clients_of(rt).servers["other"]
        assert other.state is ServerState.READY and other.restarts == 0
        fake = clients_of(rt).servers["fake"]
        with trio.fail_after(10):
            while fake.restarts == 0 or fake.state is not ServerState.READY:
                await clients_of(rt).wait_changed()
    first, second = results(recorder)
    assert first.startswith(f"error: MCP server 'fake' broke during the call ({says}"), first
    assert "it may have run in part" in first
    # The other server and the run went on.
    assert second == "echo: on"
    assert ended.outcome is Outcome.FINISHED


async def test_a_call_to_a_server_back_from_a_crash_goes_through(
    tmp_path: Path, workdir: Path
) -> None:
    model = replay(tmp_path, ("fake__crash", {}), ("fake__echo", {"text": "again"}))
    async with mcp_runtime(tmp_path, workdir, server_table("fake", "trust = true"), model) as rt:
        _, recorder = await run_answering(rt, SESSION, "go", allow, limit=30)
        assert clients_of(rt).servers["fake"].restarts == 1
    assert results(recorder)[1] == "echo: again"


async def test_a_call_waits_for_a_server_whose_connection_broke_rather_than_use_it(
    tmp_path: Path, workdir: Path
) -> None:
    """Right after a call broke with its server's connection, the server is not marked failed
    yet: the next call must wait for it to start again, not go to the broken session."""
    async with mcp_runtime(tmp_path, workdir, server_table("fake", "trust = true")) as rt:
        clients = clients_of(rt)
        fake = clients.servers["fake"]
        assert fake.state is ServerState.READY
        fake.config = attrs.evolve(fake.config, startup_timeout=0.2)  # how long a call waits
        fake.why = "its connection closed"
        fake.gone.set()  # what the server's `broke` does first, before it is marked failed

        async def no_questions(elicitation: Any) -> Any:
            raise AssertionError(f"nothing is asked: {elicitation!r}")

        # The session still answers (the server lives on): a call sent to it would succeed.
        with pytest.raises(McpCallError) as refused:
            await clients.call("fake__echo", {"text": "x"}, ask=no_questions)
    # Broken while the session is being closed; failed once it is (how long that takes is
    # the machine's): either way the call waited for the server and was not made.
    assert re.fullmatch(
        r"MCP server 'fake' is not ready \((broken|failed): its connection closed\); "
        r"the call was not made",
        str(refused.value),
    ), refused.value


async def test_a_server_that_never_answers_initialize_fails_its_calls_clearly(
    tmp_path: Path, workdir: Path
) -> None:
    model = replay(tmp_path, ("mute__echo", {"text": "x"}), ("fake__echo", {"text": "y"}))
    config = server_table("mute", "startup_timeout = 0.5", fault="no-init") + server_table(
        "fake", "trust = true"
    )
    async with mcp_runtime(tmp_path, workdir, config, model) as rt:
        mute = clients_of(rt).servers["mute"]
        # (mcp_runtime waited until no server was starting: this one had failed once)
        assert mute.why == "it did not answer initialize within 0.5s"
        ended, recorder = await run_answering(rt, SESSION, "go", allow, limit=30)
    # Whether it was failed or starting again when the call gave up waiting for it:
    assert results(recorder)[0].startswith("error: MCP server 'mute' is not ready (")
    assert results(recorder)[0].endswith("; the call was not made")
    assert results(recorder)[1] == "echo: y"
    assert ended.outcome is Outcome.FINISHED


async def test_a_slow_call_is_cancelled_at_its_timeout_with_a_clear_error(
    tmp_path: Path, workdir: Path
) -> None:
    model = replay(tmp_path, ("fake__slow", {"seconds": 600}))
    config = server_table("fake", "trust = true", "timeout = 0.5")
    async with mcp_runtime(tmp_path, workdir, config, model) as rt:
        ended, recorder = await run_answering(rt, SESSION, "go", allow, limit=30)
        assert clients_of(rt).servers["fake"].state is ServerState.READY
    assert results(recorder) == [
        "error: MCP server 'fake' did not answer within 0.5s (its timeout); the call was cancelled"
    ]
    assert (await wait_for_line(workdir / "mcp-record.txt", "cancelled ")).startswith("cancelled")
    assert ended.outcome is Outcome.FINISHED


# -- elicitation --------------------------------------------------------------------------


def answering(*replies: str) -> tuple[Callable[[Entry], Awaitable[Answer]], list[Entry]]:
    """An answerer giving `replies` in turn (a secret's reply in `Answer.secret`), and what it saw."""
    seen: list[Entry] = []
    left = list(replies)

    async def answer(entry: Entry) -> Answer:
        seen.append(entry)
        await trio.lowlevel.checkpoint()
        reply = left.pop(0)
        if entry.request.kind is RequestKind.SECRET:
            return Answer("ok", secret=reply)
        return Answer(reply)

    return answer, seen


async def test_an_elicitation_is_asked_field_by_field_and_accepted(
    tmp_path: Path, workdir: Path
) -> None:
    model = replay(tmp_path, ("fake__greet", {}))
    answer, seen = answering("accept", "Ada", "thirty", "36", "green", "yes")
    async with mcp_runtime(tmp_path, workdir, server_table("fake", "trust = true"), model) as rt:
        ended, recorder = await run_answering(rt, SESSION, "go", answer)
    asked = [(e.request.kind, e.request.prompt, e.request.choices, e.request.error) for e in seen]
    assert asked == [
        (
            RequestKind.CONFIRM,
            "MCP server fake asks: Who are you?",
            ("accept", "decline", "cancel"),
            None,
        ),
        (RequestKind.QUESTION, "Name (your name)", (), None),
        (RequestKind.QUESTION, "Age", (), None),
        (RequestKind.QUESTION, "Age", (), "'thirty' is not a whole number"),
        (RequestKind.CONFIRM, "Colour", ("red", "green", "blue"), None),
        (RequestKind.CONFIRM, "Subscribe", ("yes", "no"), None),
    ]
    assert results(recorder) == ["hello Ada, 36, green, subscribed"]
    assert ended.outcome is Outcome.FINISHED


@pytest.mark.parametrize("action", ["decline", "cancel"])
async def test_an_elicitation_declined_or_cancelled_tells_the_server_so(
    tmp_path: Path, workdir: Path, action: str
) -> None:
    model = replay(tmp_path, ("fake__greet", {}))
    answer, seen = answering(action)
    async with mcp_runtime(tmp_path, workdir, server_table("fake", "trust = true"), model) as rt:
        _, recorder = await run_answering(rt, SESSION, "go", answer)
    assert len(seen) == 1
    assert results(recorder) == [f"greet: {action}"]


async def test_a_password_field_is_asked_masked_from_a_terminal(
    tmp_path: Path, workdir: Path
) -> None:
    model = replay(tmp_path, ("fake__login", {}))
    answer, seen = answering("accept", "hunter2")
    async with mcp_runtime(tmp_path, workdir, server_table("fake", "trust = true"), model) as rt:
        _, recorder = await run_answering(rt, SESSION, "go", answer)
        messages = await rt.store.messages(SESSION)
    assert [e.request.kind for e in seen] == [RequestKind.CONFIRM, RequestKind.SECRET]
    assert seen[1].request.masked
    assert results(recorder) == ["logged in with 7 characters"]
    assert not any("hunter2" in m.message.content for m in messages.items)


async def test_a_password_field_is_refused_over_a_chat_service(
    tmp_path: Path, workdir: Path
) -> None:
    model = replay(tmp_path, ("fake__login", {}))
    answer, seen = answering("accept")
    async with mcp_runtime(tmp_path, workdir, server_table("fake", "trust = true"), model) as rt:
        recorder = Recorder()
        async with questions_answered(rt, answer, "tg-"):
            with trio.fail_after(20):
                await rt.executor.run("tg-42", "go", owner="t", emit=recorder)
    assert [e.request.kind for e in seen] == [RequestKind.CONFIRM]
    assert results(recorder)[0].startswith(
        "error: refused: field 'Password' asks for a secret, which must not travel through a "
        "chat service"
    )


# -- the lab --------------------------------------------------------------------------------


@pytest.mark.deadline(240)
def test_the_lab_stops_an_mcp_call_during_its_elicitation_with_every_cause_keeping_every_rule(
    tmp_path: Path,
) -> None:
    model = replay(tmp_path, ("fake__greet", {}))
    from agentrt.apps.lab import Conversation
    from agentrt.apps.lab import Lab
    from agentrt.config.mcp import parse_server

    servers = {"fake": parse_server("fake", {"command": sys.executable, "args": [str(FAKE)]})}
    answers = {
        "MCP server fake asks: Who are you?": "accept",
        "Name (your name)": "Ada",
        "Age": "36",
        "Colour": "green",
        "Subscribe": "yes",
    }
    conversation = Conversation("hi", model.source, answers, mcp_servers=servers)
    # The baseline's boundaries: the point where the elicitation's first question is saved.
    boundaries = Lab(conversation, causes=("pause",), only=0).run().boundaries
    asked = [b.index for b in boundaries if "MCP server fake asks" in b.label[2]]
    assert asked, [b.label for b in boundaries]
    report = Lab(conversation, only=asked[0]).run()
    assert len(report.points) == len(report.causes) == 6  # every cause at that point
    assert report.violations == []


# -- streamable HTTP ----------------------------------------------------------------------


async def test_an_http_server_gets_its_headers_with_keys_from_the_key_store(
    tmp_path: Path, workdir: Path, nursery: trio.Nursery
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    token = "s3cret-token-4f1a"
    env = {**os.environ, "FAKE_MCP_TOKEN": token}
    server = await trio.lowlevel.open_process(
        [sys.executable, str(FAKE), "http", str(port)], env=env, stderr=subprocess.DEVNULL
    )
    try:
        KeyStore.for_state_dir(tmp_path / "state").put("TRACKER_TOKEN", token)
        model = replay(tmp_path, ("tracker__authorized", {}))
        config = (
            "[mcp.servers.tracker]\n"
            f'url = "http://127.0.0.1:{port}/mcp"\n'
            'headers = { Authorization = "Bearer ${TRACKER_TOKEN}" }\n'
            "trust = true\n"
        )
        async with mcp_runtime(tmp_path, workdir, config, model) as rt:
            tracker = clients_of(rt).servers["tracker"]
            with trio.fail_after(30):  # (started again until the server listens)
                while tracker.state is not ServerState.READY:
                    await clients_of(rt).wait_changed()
            assert clients_of(rt).statuses()[0].transport == "http"
            _, recorder = await run_answering(rt, SESSION, "go", allow)
        assert results(recorder) == ["authorized"]
    finally:
        server.kill()
        await server.wait()


# -- progress ------------------------------------------------------------------------------


async def test_a_servers_progress_notifications_become_progress_events(
    tmp_path: Path, workdir: Path
) -> None:
    model = replay(tmp_path, ("fake__slow", {"seconds": 0}))
    async with mcp_runtime(tmp_path, workdir, server_table("fake", "trust = true"), model) as rt:
        _, recorder = await run_answering(rt, SESSION, "go", allow)
    progress = [
        (e.call_id, e.name, e.progress, e.total, e.message) for e in recorder.of(ToolProgressEvent)
    ]
    assert progress == [("c0", "fake__slow", float(n), 3.0, f"step {n}") for n in range(3)]
    # Each before the call's result.
    kinds = [type(e) for e in recorder.events if isinstance(e, ToolProgressEvent | ToolResultEvent)]
    assert kinds == [ToolProgressEvent] * 3 + [ToolResultEvent]


# -- the sandbox ------------------------------------------------------------------------------


async def test_a_stdio_server_runs_in_the_sandbox_unless_its_entry_says_not(
    tmp_path: Path, workdir: Path
) -> None:
    # Outside the private /tmp a sandboxed process gets, so what it writes would be seen here.
    folder = Path(tempfile.mkdtemp(dir="/var/tmp"))
    try:
        await sandboxed_or_not(tmp_path, workdir, folder / "outside.txt")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


async def sandboxed_or_not(tmp_path: Path, workdir: Path, outside: Path) -> None:
    inside = workdir / "inside.txt"
    calls = (("fake__touch", {"path": str(outside)}), ("fake__touch", {"path": str(inside)}))
    async with mcp_runtime(
        tmp_path, workdir, server_table("fake", "trust = true"), replay(tmp_path, *calls)
    ) as rt:
        if not rt.executor.config.sandbox.enforced:
            pytest.fail(f"no sandbox here: {rt.executor.config.sandbox.why}")
        assert clients_of(rt).statuses()[0].sandboxed
        _, recorder = await run_answering(rt, SESSION, "go", allow)
    assert results(recorder) == ["cannot: Read-only file system", f"touched {inside}"]
    assert not await trio.Path(outside).exists()
    assert await trio.Path(inside).exists()
    # With sandbox = false it has the user's full access; a chat session may not use it.
    await trio.Path(inside).unlink()
    async with mcp_runtime(
        tmp_path,
        workdir,
        server_table("fake", "trust = true", "sandbox = false"),
        replay(tmp_path, *calls),
    ) as rt:
        assert not clients_of(rt).statuses()[0].sandboxed
        _, recorder = await run_answering(rt, "cli-unconfined", "go", allow)
        refused = Recorder()
        with trio.fail_after(20):
            await rt.executor.run("chat-1", "go", owner="t", emit=refused)
    assert results(recorder) == [f"touched {outside}", f"touched {inside}"]
    assert results(refused)[0].startswith(
        "error: refused: MCP server 'fake' runs outside the sandbox"
    )


async def test_a_stdio_server_without_the_network_reaches_no_unix_socket(
    tmp_path: Path, workdir: Path
) -> None:
    from stress.sandbox import Service

    # A service's socket outside the private /tmp, where /run's are.
    folder = Path(tempfile.mkdtemp(dir="/var/tmp"))
    service = Service((folder / "service.sock",))
    call = ("fake__connect", {"path": str(folder / "service.sock")})
    answers = []
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(service.serve)
            for n, extra in enumerate(((), ("network = true",))):
                config = server_table("fake", "trust = true", *extra)
                async with mcp_runtime(tmp_path, workdir, config, replay(tmp_path, call)) as rt:
                    assert clients_of(rt).statuses()[0].sandboxed
                    _, recorder = await run_answering(rt, f"cli-sock{n}", "go", allow)
                answers.append(results(recorder))
            nursery.cancel_scope.cancel()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    # Refused by the kernel (a seccomp program), not by a missing file: with the network
    # kept, the same server in the same sandbox reaches it.
    assert answers == [["cannot: Permission denied"], ["answered b'hello from the service\\n'"]]
    assert service.accepted == 1


async def test_without_the_sdk_every_server_says_how_to_install_it_and_runs_go_on(
    tmp_path: Path, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "mcp" else real(name, *a)
    )
    model = replay(tmp_path, ("fake__echo", {"text": "x"}))
    async with mcp_runtime(tmp_path, workdir, server_table("fake", "trust = true"), model) as rt:
        status = clients_of(rt).statuses()[0]
        # At once: no start is coming to wait for.
        ended, recorder = await run_answering(rt, SESSION, "go", allow, limit=5)
    why = "the MCP SDK is not installed: pip install 'agentrt[mcp]'"
    assert (status.state, status.why) == (ServerState.FAILED, why)
    assert results(recorder) == [
        f"error: MCP server 'fake' is not ready (failed: {why}); the call was not made"
    ]
    assert ended.outcome is Outcome.FINISHED


@attrs.define
class ByTask:
    """A model that plays the replay of each task's text (the first user message)."""

    models: dict[str, ReplayModel]

    @property
    def name(self) -> str:
        return "replay by task"

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], on_delta: OnDelta
    ) -> ModelResponse:
        task = next(m.content for m in messages if m.role is Role.USER)
        return await self.models[task].complete(messages, tools, on_delta)


async def test_a_crash_mid_call_leaves_a_run_on_another_server_and_one_on_the_same_going(
    tmp_path: Path, workdir: Path
) -> None:
    # Three runs: one whose call crashes its server and one at the same time on another
    # server, then one on the same server once it is back.
    plays: dict[str, list[tuple[str, dict[str, Any]]]] = {
        "crash": [("fake__crash", {})],
        "other": [("other__slow", {"seconds": 1})],
        "after": [("fake__echo", {"text": "back"})],
    }
    models: dict[str, ReplayModel] = {}
    for task, calls in plays.items():
        folder = tmp_path / task
        folder.mkdir()
        models[task] = replay(folder, *calls)
    config = server_table("fake", "trust = true") + server_table("other", "trust = true")
    async with mcp_runtime(tmp_path, workdir, config) as rt:
        rt.executor.model = ByTask(models)
        ended: dict[str, tuple[RunEnded, Recorder]] = {}

        async def run(task: str) -> None:
            ended[task] = await run_answering(rt, f"cli-{task}", task, allow, limit=30)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(run, "other")
            nursery.start_soon(run, "crash")
        await run("after")
    assert results(ended["crash"][1])[0].startswith("error: MCP server 'fake' broke during")
    assert results(ended["other"][1]) == ["slept 1s"]
    assert results(ended["after"][1]) == ["echo: back"]
    assert all(e.outcome is Outcome.FINISHED for e, _ in ended.values())


async def test_a_failing_server_is_started_again_after_1_2_4_seconds_up_to_a_minute(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    from agentrt.agent.sandbox import Sandbox
    from agentrt.config.mcp import parse_server

    servers = {"gone": parse_server("gone", {"command": str(tmp_path / "no-such-program")})}
    clients = McpClients(servers, tmp_path / "mcp", tmp_path, sandbox=Sandbox.off())
    failed_at: list[float] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(clients.run)
        gone = clients.servers["gone"]
        while len(failed_at) < 9:
            await clients.wait_changed()
            if gone.state is ServerState.FAILED:
                failed_at.append(trio.current_time())
        nursery.cancel_scope.cancel()
    start = failed_at[0]
    assert [round(t - start) for t in failed_at] == [0, 1, 3, 7, 15, 31, 63, 123, 183]
    assert gone.why.startswith("cannot start it: ")
    assert gone.restarts == 8


async def test_a_result_is_redacted_and_clamped_in_the_kept_task_as_a_built_in_tools(
    tmp_path: Path, workdir: Path
) -> None:
    secret = "canary-7f3a9b2e-mcp"
    big = "x" * (64 * 1024)
    # Two calls of one round: a secret echoed back, and a result over the 32 KiB limit; the
    # run is paused in its next round, so the task is kept with both results.
    path = tmp_path / "replay.json"
    calls = [
        {"id": "s", "name": "fake__echo", "arguments": {"text": secret}},
        {"id": "b", "name": "fake__echo", "arguments": {"text": big}},
    ]
    turns = [
        {"tool_calls": calls},
        {"tool_calls": [{"id": "w", "name": "fake__slow", "arguments": {"seconds": 600}}]},
    ]
    path.write_text(json.dumps({"turns": turns}))
    async with mcp_runtime(
        tmp_path, workdir, server_table("fake", "trust = true"), ReplayModel.from_file(path)
    ) as rt:
        rt.executor.config.secrets.put("mcp_token", secret)
        recorder = Recorder()
        async with trio.open_nursery() as nursery:
            info = await nursery.start(
                partial(rt.executor.run, SESSION, "go", owner="t", emit=recorder)
            )
            await wait_for_line(workdir / "mcp-record.txt", "started ")
            rt.executor.cancel(info.task_hash, Cause.PAUSE)
        task = await rt.store.load(SESSION)
    assert task is not None
    kept = {m.tool_call_id: m.content for m in task.transcript if m.role is Role.TOOL}
    assert kept["s"] == "echo: [secret mcp_token]"
    assert "elided" in kept["b"] and len(kept["b"].encode()) <= 32 * 1024
    assert all(secret not in e.preview for e in recorder.of(ToolResultEvent))

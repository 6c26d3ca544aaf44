"""The configuration reaching every entry point, as real processes.

A daemon configured only by the environment and the configuration file talks to
a local OpenAI-compatible server (the fake, on loopback) from its terminal
socket and its HTTP API; a key stored while it runs is sent with its next
request. A model that cannot be asked (no key for a hosted API, a bad base URL,
an unknown provider) is refused before any task exists, through the daemon and
through the command: no failed pending task is left behind, however often one
tries. `agentrt config show` and `agentrt keys` never print a key.
"""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
import trio

from agentrt.http import load_or_create_token
from agentrt.protocol.client import Client
from agentrt.protocol.frames import EndedFrame
from agentrt.protocol.frames import ErrorCode
from agentrt.protocol.frames import ErrorFrame
from agentrt.protocol.frames import PendingAction
from agentrt.protocol.frames import PendingList
from agentrt.protocol.frames import PendingRequest
from agentrt.protocol.frames import Run
from agenttui._launch import start_daemon

from .cli_process import AGENTRT
from .cli_process import DAEMON
from .cli_process import daemon_command
from .cli_process import read_past
from .cli_process import run_in
from .conftest import write_config
from .fakes.llm_server import OA_DONE
from .fakes.llm_server import LLMServer
from .fakes.llm_server import oa_finish
from .fakes.llm_server import oa_text
from .fakes.llm_server import sse

KEY = "sk-stored-while-running-4c5d6e"
LIMIT = 30


@pytest.fixture
def env(short_dir: Path) -> dict[str, str]:
    """An environment whose configuration and state live in `short_dir`."""
    environ = dict(os.environ)
    environ["XDG_CONFIG_HOME"] = str(short_dir / "xdg")
    environ["AGENTRT_STATE_DIR"] = str(short_dir / "state")
    return environ


def agentrt(
    args: list[str], env: dict[str, str], stdin: str = "", cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return run_in(args, env, cwd, stdin)


@asynccontextmanager
async def daemon(
    folder: Path, env: dict[str, str], *flags: str, http: bool = False
) -> AsyncIterator[tuple[trio.Process, bytes]]:
    """A daemon process on `folder`/run/d.sock; yields it and what it said while starting
    (until its HTTP API listens, with `http`)."""
    process = await trio.lowlevel.open_process(
        daemon_command(folder / "run" / "d.sock", None, folder, *flags, program=DAEMON),
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        env=env,
    )
    try:
        assert process.stderr is not None
        said = await read_past(process.stderr, b"listening on")
        if http and b"web chat on" not in said:
            said += await read_past(process.stderr, b"web chat on")
        yield process, said
    finally:
        if process.returncode is None:
            process.terminate()
        with trio.CancelScope(shield=True):
            await process.wait()


def http_client(said: bytes, state: Path) -> httpx.AsyncClient:
    """A client of the web API the daemon said it serves, with the token of `state`."""
    port = re.search(rb"http://127\.0\.0\.1:(\d+)/", said)
    assert port is not None, said
    return httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{int(port.group(1))}",
        headers={"Authorization": f"Bearer {load_or_create_token(state)}"},
    )


async def run_over_socket(socket: Path, text: str) -> EndedFrame | ErrorFrame:
    async with await Client.connect(socket) as client:
        await client.send(Run(text))
        while True:
            frame = await client.receive()
            if isinstance(frame, EndedFrame | ErrorFrame):
                return frame


async def pending_sessions(socket: Path) -> list[str]:
    async with await Client.connect(socket) as client:
        await client.send(PendingRequest(PendingAction.LIST))
        listed = await client.wait_for(PendingList)
        return [t.session for t in listed.tasks]


def reply(text: str) -> list[bytes]:
    return [oa_text(text), oa_finish(), OA_DONE]


async def test_a_daemon_configured_by_env_and_file_reaches_a_local_server(
    short_dir: Path, env: dict[str, str], nursery: trio.Nursery
) -> None:
    server = LLMServer()
    await nursery.start(server.run)
    server.script(sse(reply("over the socket")), sse(reply("over HTTP")), sse(reply("keyed")))
    # The base URL from the environment, as the OpenAI SDK reads it; the rest from the file.
    env["OPENAI_BASE_URL"] = f"{server.base_url}/v1"
    write_config(env, 'model = "openai:local-model"\n\n[http]\nlisten = "127.0.0.1:0"\n')
    socket = short_dir / "run" / "d.sock"
    with trio.fail_after(LIMIT):
        async with daemon(short_dir, env, http=True) as (_, said):
            ended = await run_over_socket(socket, "hi")
            assert isinstance(ended, EndedFrame), ended
            assert ended.text == "over the socket"
            request = server.requests[0]
            assert request.path == "/v1/chat/completions"
            assert request.json()["model"] == "local-model"
            assert "authorization" not in request.headers  # no key: a local server needs none

            async with http_client(said, short_dir / "state") as http:
                started = await http.post("/v1/session/w1/run", json={"text": "hi"})
                assert started.status_code == 202, started.text
                exchange = await server.wait_request(2)
                assert exchange.request.json()["model"] == "local-model"

            stored = await trio.to_thread.run_sync(
                lambda: agentrt(["keys", "set", "OPENAI_API_KEY"], env, stdin=KEY + "\n")
            )
            assert stored.returncode == 0, stored.stderr
            assert KEY not in stored.stdout + stored.stderr
            ended = await run_over_socket(socket, "again")
            assert isinstance(ended, EndedFrame) and ended.text == "keyed"
            assert server.requests[2].headers["authorization"] == f"Bearer {KEY}"


async def test_a_daemon_without_a_key_refuses_runs_and_keeps_no_failed_task(
    short_dir: Path, env: dict[str, str]
) -> None:
    socket = short_dir / "run" / "d.sock"
    with trio.fail_after(LIMIT):
        async with daemon(
            short_dir, env, "--model", "openai:gpt-4o", "--http", "127.0.0.1:0", http=True
        ) as (_, said):
            assert b"no API key for the OpenAI API" in said  # warned at start
            for _ in range(2):
                refused = await run_over_socket(socket, "hi")
                assert isinstance(refused, ErrorFrame), refused
                assert refused.code is ErrorCode.STATE
                assert "no API key for the OpenAI API (model openai:gpt-4o)" in refused.message
                assert "agentrt keys set OPENAI_API_KEY" in refused.message
            async with http_client(said, short_dir / "state") as http:
                answer = await http.post("/v1/session/k/run", json={"text": "hi"})
            assert answer.status_code == 503
            assert answer.json()["error"]["code"] == "model_not_configured"
            # Through the daemon, the command says the same and exits 1.
            done = await trio.to_thread.run_sync(lambda: agentrt(["run", "hi"], env))
            assert done.returncode == 1
            assert "no API key for the OpenAI API" in done.stderr
            assert await pending_sessions(socket) == []


def test_the_command_without_a_key_exits_before_any_task_exists(
    env: dict[str, str], tmp_path: Path
) -> None:
    for _ in range(2):
        done = agentrt(["run", "--model", "anthropic:claude-sonnet-4-5", "hi"], env, cwd=tmp_path)
        assert done.returncode == 1
        assert "agentrt: no API key for the Anthropic API" in done.stderr
        assert "ANTHROPIC_API_KEY" in done.stderr
    assert agentrt(["pending", "list"], env).stdout == "no pending tasks\n"


def test_a_bad_base_url_or_provider_is_refused_by_every_entry_point(
    env: dict[str, str], short_dir: Path, tmp_path: Path
) -> None:
    bad_url = agentrt(["run", "--model", "openai:m", "--base-url", "localhost:11434", "hi"], env)
    assert bad_url.returncode == 2
    assert "flag --base-url: 'localhost:11434' is not an http:// or https:// URL" in bad_url.stderr
    bad_env = agentrt(["run", "hi"], {**env, "AGENTRT_MODEL": "mistral:large"})
    assert bad_env.returncode == 2
    assert "env AGENTRT_MODEL: unknown model 'mistral:large'" in bad_env.stderr
    socket = ["--socket", str(short_dir / "d.sock")]
    for flags, said in (
        (["--model", "mistral:large"], "flag --model: unknown model 'mistral:large'"),
        (["--model", "openai:m", "--base-url", "nope"], "flag --base-url: 'nope' is not"),
    ):
        started = run_in([*socket, *flags], env, None, program=DAEMON)
        assert started.returncode == 2
        assert f"agentrt daemon: {said}" in started.stderr
    config = write_config(env, '[openai]\nbase_url = "localhost"\n')
    tui = run_in(socket, env, None, program=[sys.executable, "-m", "agenttui"])
    assert tui.returncode == 2
    assert f"agenttui: {config}:2: openai.base_url: 'localhost' is not" in tui.stderr
    assert not (short_dir / "d.sock").exists()
    assert agentrt(["pending", "list"], {**env, "XDG_CONFIG_HOME": str(tmp_path)}).stdout == (
        "no pending tasks\n"
    )


def test_config_show_says_where_each_value_came_from_and_hides_keys(
    env: dict[str, str],
) -> None:
    path = write_config(
        env,
        '# agentrt\nmodel = "openai:llama3.2"\n\n[openai]\nbase_url = "http://localhost:11434/v1"\n',
    )
    env["OPENAI_API_KEY"] = KEY
    env["AGENTRT_APPROVAL"] = "auto-edit"
    shown = agentrt(["config", "show"], env)
    assert shown.returncode == 0, shown.stderr
    rows = {line.split()[0]: line for line in shown.stdout.splitlines() if line.strip()}
    assert rows["model"].split()[1:] == ["openai:llama3.2", "file", f"{path}:2"]
    assert rows["openai.base_url"].split()[1:] == ["http://localhost:11434/v1", "file", f"{path}:5"]
    assert rows["approval"].split()[1:] == ["auto-edit", "env", "AGENTRT_APPROVAL"]
    assert rows["openai.api_key"].split()[-2:] == ["env", "OPENAI_API_KEY"]
    assert rows["config"].split()[1] == str(path)
    flagged = agentrt(["config", "show", "--json", "--approval", "full-auto"], env)
    data = json.loads(flagged.stdout)
    assert data["approval"] == {"value": "full-auto", "source": "flag", "where": "--approval"}
    assert data["openai.api_key"]["value"] is None and data["openai.api_key"]["set"] is True
    assert data["config"]["found"] is True
    assert KEY not in shown.stdout + shown.stderr + flagged.stdout + flagged.stderr


def test_config_show_refuses_a_bad_file_naming_file_line_and_key(env: dict[str, str]) -> None:
    path = write_config(env, 'model = "scripted"\n\n[telegram]\nenabled = "yes"\n')
    done = agentrt(["config", "show"], env)
    assert done.returncode == 2
    assert done.stderr == (
        f"agentrt: {path}:4: telegram.enabled: must be true or false, not 'yes'\n"
    )


def test_keys_set_list_rm_never_print_a_value(env: dict[str, str]) -> None:
    stored = agentrt(["keys", "set", "ANTHROPIC_API_KEY"], env, stdin=f"{KEY}\n")
    assert stored.returncode == 0, stored.stderr
    path = Path(env["AGENTRT_STATE_DIR"]) / "keys" / "ANTHROPIC_API_KEY"
    assert path.read_text() == KEY
    assert path.stat().st_mode & 0o777 == 0o600
    listed = agentrt(["keys", "list"], env)
    assert listed.stdout == "ANTHROPIC_API_KEY\n"
    assert json.loads(agentrt(["keys", "list", "--json"], env).stdout) == {
        "keys": ["ANTHROPIC_API_KEY"]
    }
    shown = agentrt(["config", "show", "--model", "anthropic:m"], env)
    assert re.search(
        r"anthropic\.api_key\s+\(set, \d+ characters\)\s+key store ANTHROPIC_API_KEY", shown.stdout
    )
    outputs = [stored, listed, shown]
    wrong = agentrt(["keys", "set", "openai"], env, stdin="x\n")
    assert wrong.returncode == 2
    assert "use OPENAI_API_KEY, not 'openai'" in wrong.stderr
    empty = agentrt(["keys", "set", "OPENAI_API_KEY"], env, stdin="\n")
    assert empty.returncode == 2
    assert "no value given for OPENAI_API_KEY; nothing was stored" in empty.stderr
    removed = agentrt(["keys", "rm", "ANTHROPIC_API_KEY"], env)
    assert removed.returncode == 0 and not path.exists()
    again = agentrt(["keys", "rm", "ANTHROPIC_API_KEY"], env)
    assert again.returncode == 1
    assert "no key ANTHROPIC_API_KEY is stored" in again.stderr
    assert agentrt(["keys", "list"], env).stdout.startswith("no keys stored")
    for done in [*outputs, wrong, empty, removed, again]:
        assert KEY not in done.stdout + done.stderr


def test_keys_set_at_a_terminal_asks_without_echo(env: dict[str, str]) -> None:
    pid, fd = pty.fork()
    if pid == 0:  # the child: a terminal of its own, as a person would have
        os.execvpe(AGENTRT[0], [*AGENTRT, "keys", "set", "OPENAI_API_KEY"], env)
    seen = b""
    try:
        while b"typing is not shown" not in seen:
            seen += os.read(fd, 1024)
        os.write(fd, KEY.encode() + b"\n")
        while True:
            try:
                chunk = os.read(fd, 1024)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            seen += chunk
    finally:
        _, status = os.waitpid(pid, 0)
        os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 0, seen
    assert KEY.encode() not in seen
    assert b"stored the key OPENAI_API_KEY" in seen
    stored = Path(env["AGENTRT_STATE_DIR"]) / "keys" / "OPENAI_API_KEY"
    assert stored.read_text() == KEY


async def test_agenttui_passes_its_options_to_the_daemon_it_starts(
    short_dir: Path, env: dict[str, str]
) -> None:
    from agenttui.__main__ import _parser
    from agenttui.__main__ import daemon_options

    args = _parser().parse_args(
        ["--approval", "full-auto", "--config", "/c.toml", "--api-key-env", "K"]
    )
    assert daemon_options(args) == [
        "--config",
        "/c.toml",
        "--api-key-env",
        "K",
        "--approval",
        "full-auto",
    ]
    state = short_dir / "state"
    socket = short_dir / "run" / "d.sock"
    with trio.fail_after(LIMIT):
        started = await start_daemon(socket, state_dir=state, options=["--approval", "full-auto"])
        try:
            info = json.loads((state / "daemon.lock").read_text())
            assert info["approval"] == "full-auto"
            refused = await trio.to_thread.run_sync(
                lambda: agentrt(["run", "--approval", "ask", "hi"], env)
            )
            assert refused.returncode == 2
            assert "approval policy (full-auto), not --approval ask" in refused.stderr
        finally:
            started.process.terminate()
            await trio.to_thread.run_sync(started.process.wait)


def test_config_show_names_the_settings_a_provider_does_not_take(env: dict[str, str]) -> None:
    import attrs

    from agentrt.models.providers import OpenAIModel

    write_config(env, 'model = "openai:m"\ntemperature = 0.2\nmax_tokens = 100\n')
    shown = agentrt(["config", "show"], env)
    assert shown.returncode == 0, shown.stderr
    taken = attrs.fields_dict(OpenAIModel)
    left_out = [name for name in ("max_tokens", "temperature") if name not in taken]
    if left_out:
        assert f"note: the openai provider takes no {', '.join(left_out)}" in shown.stdout
    else:
        assert "note:" not in shown.stdout


async def test_the_daemon_runs_a_bot_from_the_file_with_its_token_in_the_key_store(
    short_dir: Path, env: dict[str, str], nursery: trio.Nursery
) -> None:
    from agentrt.config.keystore import KeyStore

    from .fakes.telegram_server import TOKEN
    from .fakes.telegram_server import FakeTelegram

    server = FakeTelegram()
    await nursery.start(server.run)
    env["AGENTRT_TELEGRAM_API"] = server.base_url
    write_config(env, "[telegram]\nenabled = true\nallow = [42]\n")
    KeyStore.for_state_dir(Path(env["AGENTRT_STATE_DIR"])).put("AGENTRT_TELEGRAM_TOKEN", TOKEN)
    with trio.fail_after(LIMIT):
        async with daemon(short_dir, env):
            server.user_says(42, 42, "hello from the file")
            await server.wait_for(lambda: any("hello from the file" in t for t in server.texts(42)))

"""The system prompt a run sends, as the model's server receives it.

Real runs talk to the fake OpenAI-compatible and Anthropic servers (tests/fakes/llm_server.py),
which keep every request body; the runs work in a folder of a git repository whose root and
nested folder each hold an AGENTS.md. The system prompt must come first (a ``system``
message, or Anthropic's top-level ``system`` field), hold each of its parts, be the same at
every request of a run, and never enter the conversation or the store. `agentrt config show
--prompt` must print exactly what `agentrt run` sends.
"""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
from collections.abc import AsyncIterator
from datetime import date
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from agentrt import Runtime
from agentrt import open_runtime
from agentrt.agent.config import AgentConfig
from agentrt.agent.prompt import AGENTS_LIMIT
from agentrt.agent.prompt import build_prompt
from agentrt.agent.sandbox import Sandbox
from agentrt.agent.tools import offered_to
from agentrt.config.secrets import SecretStore
from agentrt.config.settings import ConfigError
from agentrt.config.settings import load_settings
from agentrt.models.anthropic import AnthropicModel
from agentrt.models.messages import Message
from agentrt.models.openai import OpenAIModel
from agentrt.models.providers import RetryPolicy
from agentrt.models.scripted import ScriptedModel
from agentrt.vocab.events import RunEnded
from agentrt.vocab.terms import Approval
from agentrt.vocab.terms import SandboxMode

from .cli_process import run_in
from .conftest import Recorder
from .conftest import write_config
from .fakes.llm_server import OA_DONE
from .fakes.llm_server import LLMServer
from .fakes.llm_server import an_end
from .fakes.llm_server import an_start
from .fakes.llm_server import an_text_block
from .fakes.llm_server import an_tool_block
from .fakes.llm_server import oa_finish
from .fakes.llm_server import oa_text
from .fakes.llm_server import oa_tool
from .fakes.llm_server import sse
from .test_configured_entry_points import daemon

FAST = RetryPolicy(max_attempts=1, base_delay=0.001, max_delay=0.01)
ROOT_RULE = "Root rule: indent with tabs, never spaces."
NEAR_RULE = "Nested rule: every change comes with its test."
INSTRUCTIONS = "Answer in the fewest words that say it all."


@attrs.frozen
class Wire:
    """One provider's dialect: the model, its replies, and where its body keeps the prompt."""

    name: str

    def model(self, server: LLMServer) -> OpenAIModel | AnthropicModel:
        if self.name == "openai":
            return OpenAIModel("m", server.base_url + "/v1", api_key="k", retry=FAST)
        return AnthropicModel("claude-test", server.base_url, api_key="k", retry=FAST)

    def text(self, words: str) -> list[bytes]:
        if self.name == "openai":
            return [oa_text(words), oa_finish(), OA_DONE]
        return [an_start(), *an_text_block(0, [words]), *an_end()]

    def call(self, call_id: str, name: str, arguments: dict[str, Any]) -> list[bytes]:
        if self.name == "openai":
            piece = oa_tool(0, id=call_id, name=name, arguments=json.dumps(arguments))
            return [piece, oa_finish("tool_calls"), OA_DONE]
        return [
            an_start(),
            *an_tool_block(0, call_id, name, [json.dumps(arguments)]),
            *an_end("tool_use"),
        ]

    def system(self, body: dict[str, Any]) -> str:
        """The system prompt of a request body, checked to be where the provider takes it."""
        if self.name == "openai":
            first, *rest = body["messages"]
            assert first["role"] == "system", "the system prompt is the first message"
            assert all(m["role"] != "system" for m in rest), "no system message in the talk"
            assert isinstance(first["content"], str)
            return first["content"]
        blocks = body["system"]
        assert [b["type"] for b in blocks] == ["text"], blocks
        assert all(m["role"] in ("user", "assistant") for m in body["messages"])
        text: str = blocks[0]["text"]
        return text

    def conversation(self, body: dict[str, Any]) -> str:
        """Every message of the conversation, as JSON text."""
        messages = body["messages"][1:] if self.name == "openai" else body["messages"]
        return json.dumps(messages)

    def tools(self, body: dict[str, Any]) -> list[str]:
        if self.name == "openai":
            return [t["function"]["name"] for t in body["tools"]]
        return [t["name"] for t in body["tools"]]


@pytest.fixture(params=["openai", "anthropic"])
def wire(request: pytest.FixtureRequest) -> Wire:
    return Wire(request.param)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A git repository whose root and nested folder hold an AGENTS.md; the nested folder."""
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    (root / "AGENTS.md").write_text(f"{ROOT_RULE}\n")
    nested = root / "pkg" / "core"
    nested.mkdir(parents=True)
    (root / "pkg" / "core" / "AGENTS.md").write_text(f"{NEAR_RULE}\n")
    (nested / "notes.txt").write_text("the notes\n")
    return nested.resolve()


@pytest.fixture
async def runtime(
    tmp_path: Path, project: Path, llm_server: LLMServer, wire: Wire
) -> AsyncIterator[Runtime]:
    async with open_runtime(
        tmp_path / "state",
        model=wire.model(llm_server),
        workdir=project,
        restricted_paths=[tmp_path / "restricted"],
        approval=Approval.AUTO_EDIT,
        instructions=INSTRUCTIONS,
    ) as rt:
        yield rt


def _today_between(before: date, text: str) -> str:
    """The date line's date, checked to be the run's day (the day may turn during the test)."""
    found = re.search(r"Today's date: (\d{4}-\d\d-\d\d), (\w+)", text)
    assert found is not None, text
    day = date.fromisoformat(found.group(1))
    assert before <= day <= date.today()
    assert found.group(2) == f"{day:%A}"
    return found.group(1)


async def test_every_request_of_a_run_sends_the_system_prompt_with_each_part(
    runtime: Runtime, llm_server: LLMServer, wire: Wire, project: Path, tmp_path: Path
) -> None:
    llm_server.script(
        sse(wire.call("c1", "read_file", {"path": "notes.txt"})), sse(wire.text("read it"))
    )
    before = date.today()
    ended = await runtime.executor.run("cli-p", "read the notes", owner="t", emit=Recorder())
    assert isinstance(ended, RunEnded) and ended.outcome.value == "finished", ended
    bodies = [r.json() for r in llm_server.requests]
    assert len(bodies) == 2
    first, second = (wire.system(b) for b in bodies)
    assert first == second, "one run, one prompt: the same at every request"
    prompt = first
    # agentrt's own part: the tools offered, by the names the request offers them.
    offered = wire.tools(bodies[0])
    listed = re.findall(r"^- (\w+): ", prompt.split("# Your tools", 1)[1], re.M)
    assert listed[: len(offered)] == offered
    assert "sleep" not in offered and "- sleep:" not in prompt, "testing tools are not offered"
    assert "# Approval policy: auto-edit" in prompt
    assert "File changes inside the working folder run at once" in prompt
    assert "# Sandbox: workspace-write" in prompt
    assert f"restricted path ({(tmp_path / 'restricted').resolve()})" in prompt
    assert "one note from agentrt, not from the person" in prompt
    # The environment.
    assert f"- Working folder: {project} " in prompt
    assert f"- Repository: {project.parents[1]} (git)" in prompt
    assert f"- Operating system: {platform.system()} {platform.release()}" in prompt
    assert "- Shell: each command of the shell tool runs with sh -c" in prompt
    _today_between(before, prompt)
    # The AGENTS.md files, root first, each under its path; then the configured instructions.
    root_at = prompt.index(f"## {project.parents[1] / 'AGENTS.md'}\n\n{ROOT_RULE}")
    near_at = prompt.index(f"## {project / 'AGENTS.md'}\n\n{NEAR_RULE}")
    words_at = prompt.index(f"# Instructions from the configuration\n\n{INSTRUCTIONS}")
    environment_at = prompt.index("# Environment")
    assert prompt.index("# Your tools") < environment_at < root_at < near_at < words_at
    # Nothing of it is in the conversation, nor kept with the session.
    for body in bodies:
        assert ROOT_RULE not in wire.conversation(body)
        assert "# Environment" not in wire.conversation(body)
    page = await runtime.store.messages("cli-p")
    history = await runtime.store.load_history("cli-p")
    for stored in ([s.message for s in page.items], history):
        assert [m.role.value for m in stored] == ["user", "assistant", "tool", "assistant"]
        assert not any(ROOT_RULE in m.content or "# Environment" in m.content for m in stored)


async def test_the_next_run_of_the_session_sends_the_prompt_once_before_the_history(
    runtime: Runtime, llm_server: LLMServer, wire: Wire
) -> None:
    llm_server.script(sse(wire.text("one")), sse(wire.text("two")))
    for text in ("first", "second"):
        ended = await runtime.executor.run("cli-h", text, owner="t", emit=Recorder())
        assert ended.outcome.value == "finished", ended
    first, second = (r.json() for r in llm_server.requests)
    assert wire.system(first) == wire.system(second)
    said = json.loads(wire.conversation(second))
    texts = [
        m["content"] if isinstance(m["content"], str) else m["content"][0]["text"] for m in said
    ]
    assert texts == ["first", "one", "second"]


async def test_a_subagent_gets_the_same_environment_and_is_told_it_is_one(
    runtime: Runtime, llm_server: LLMServer, wire: Wire
) -> None:
    llm_server.script(
        sse(wire.call("s1", "spawn", {"task": "look around"})),
        sse(wire.text("looked")),
        sse(wire.text("done")),
    )
    ended = await runtime.executor.run("cli-s", "delegate", owner="t", emit=Recorder())
    assert ended.outcome.value == "finished", ended
    parent, child, parent_again = (wire.system(r.json()) for r in llm_server.requests)
    assert parent == parent_again
    assert "You are a subagent" not in parent
    assert child.startswith(parent + "\n\n# You are a subagent\n\nYou are sub1, started by")


def _config(
    workdir: Path, approval: Approval = Approval.ASK, sandbox: Sandbox | None = None
) -> AgentConfig:
    return AgentConfig(
        workdir=workdir,
        secrets=SecretStore(workdir.parent / "secrets"),
        approval=approval,
        sandbox=sandbox or Sandbox.detect(),
    )


def test_agents_files_are_bounded_the_nearer_first_and_the_cut_is_said(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    middle = root / "a"
    work = middle / "b"
    work.mkdir(parents=True)
    (root / ".git").write_text("gitdir: elsewhere\n")  # a worktree's .git is a file
    (root / "AGENTS.md").write_text("root line\n" * 3000)  # 30,000 bytes
    (middle / "AGENTS.md").write_text("middle line\n" * 500)  # 6,000 bytes
    (work / "AGENTS.md").write_text("near line é\n" * 100)  # 1,300 bytes
    prompt = build_prompt(_config(work), offered_to(object()))
    root_file, middle_file, near_file = prompt.agents_files
    assert (near_file.size, near_file.sent) == (1300, 1300), "the nearest file is whole"
    assert (middle_file.size, middle_file.sent) == (6000, 6000)
    assert root_file.size == 30000 and root_file.cut
    # What is left of the 32 KiB, cut at the end of its last whole line.
    assert root_file.sent == (AGENTS_LIMIT - 7300) // 10 * 10 == 25460
    assert sum(f.sent for f in prompt.agents_files) <= AGENTS_LIMIT
    text = prompt.text
    assert f"[cut here: {root_file.sent} of its 30000 bytes are shown;" in text
    assert text.count("root line") == root_file.sent // len("root line\n")
    assert text.count("near line é") == 100
    assert text.index("root line") < text.index("middle line") < text.index("near line")


def test_without_a_repository_only_the_working_folders_agents_file_is_read(
    tmp_path: Path,
) -> None:
    outer = tmp_path / "outer"
    work = outer / "work"
    work.mkdir(parents=True)
    (outer / "AGENTS.md").write_text("outer words\n")
    (work / "AGENTS.md").write_text("work words\n")
    prompt = build_prompt(_config(work), offered_to(object()))
    assert [f.path for f in prompt.agents_files] == [work / "AGENTS.md"]
    assert "work words" in prompt.text and "outer words" not in prompt.text
    assert "- Repository: none" in prompt.text


def test_the_prompt_says_the_policy_and_the_sandbox_in_force(tmp_path: Path) -> None:
    work = tmp_path / "w"
    work.mkdir()
    off = build_prompt(
        _config(work, Approval.FULL_AUTO, sandbox=Sandbox.off()), offered_to(object())
    )
    assert "# Approval policy: full-auto\n\nFile changes and shell commands run at once" in off.text
    assert "# Sandbox: off\n\nThe sandbox is turned off" in off.text
    missing = Sandbox(SandboxMode.WORKSPACE_WRITE, None, why="bubblewrap is not installed")
    none = build_prompt(_config(work, sandbox=missing), offered_to(object()))
    assert "# Sandbox: none could be had" in none.text
    assert "(bubblewrap is not installed)" in none.text
    assert "# Approval policy: ask\n\nEvery file change and every shell command" in none.text


def test_instructions_and_instructions_file_are_settings_with_their_source(
    tmp_path: Path,
) -> None:
    env = {"XDG_CONFIG_HOME": str(tmp_path / "xdg"), "AGENTRT_STATE_DIR": str(tmp_path / "s")}
    config = write_config(env, f'model = "scripted"\ninstructions = "{INSTRUCTIONS}"\n')
    (config.parent / "words.md").write_text("from the file\n")
    config.write_text(config.read_text() + 'instructions_file = "words.md"\n')
    settings = load_settings(environ=env)
    assert settings.instructions.value == INSTRUCTIONS
    assert str(settings.instructions.source) == f"file {config}:2"
    assert settings.instructions_file.value == config.parent / "words.md"
    assert str(settings.instructions_file.source) == f"file {config}:3"
    rows = {key: (value, source) for key, value, source in settings.rows()}
    assert rows["instructions"][0] == f"{INSTRUCTIONS[:25]}... ({len(INSTRUCTIONS)} characters)"
    assert rows["instructions_file"] == (str(config.parent / "words.md"), f"file {config}:3")
    config.write_text('instructions_file = "gone.md"\n')
    with pytest.raises(ConfigError, match=rf"{config}:1: instructions_file: .*gone.md does not"):
        load_settings(environ=env)
    config.write_text(f'instructions = "{"x" * (32 * 1024 + 1)}"\n')
    with pytest.raises(ConfigError, match=r":1: instructions: is 32769 bytes; at most 32768"):
        load_settings(environ=env)


# -- agentrt config show --prompt, through the real command ----------------------------------


@pytest.mark.deadline(120)
async def test_config_show_prompt_prints_exactly_what_a_run_sends(
    llm_server: LLMServer, project: Path, tmp_path: Path, wire: Wire
) -> None:
    env = dict(os.environ)
    env.update(XDG_CONFIG_HOME=str(tmp_path / "xdg"), AGENTRT_STATE_DIR=str(tmp_path / "state"))
    env.pop("AGENTRT_MODEL", None)
    config = write_config(env, f'instructions = "{INSTRUCTIONS}"\ninstructions_file = "more.md"\n')
    (config.parent / "more.md").write_text("And from the file.\n")
    model = "openai:m" if wire.name == "openai" else "anthropic:claude-test"
    flags = ["--model", model, "--base-url", f"{llm_server.base_url}/v1"]
    flags += ["--approval", "auto-edit", "--workdir", str(project)]
    llm_server.script(sse(wire.text("hi")))
    before = date.today()

    def agentrt(args: list[str]) -> subprocess.CompletedProcess[str]:
        return run_in(args, env, tmp_path)

    ran = await trio.to_thread.run_sync(agentrt, ["run", *flags, "hello"])
    assert ran.returncode == 0, ran.stderr
    sent = wire.system(llm_server.requests[0].json())
    shown = await trio.to_thread.run_sync(agentrt, ["config", "show", *flags, "--prompt"])
    assert shown.returncode == 0, shown.stderr
    assert shown.stderr == ""
    day_sent, day_shown = _today_between(before, sent), _today_between(before, shown.stdout)
    assert shown.stdout == sent.replace(day_sent, day_shown) + "\n"
    assert shown.stdout.endswith(
        f"# Instructions from the configuration\n\n{INSTRUCTIONS}\n\n"
        f"# Instructions from {config.parent / 'more.md'}\n\nAnd from the file.\n"
    )
    as_json = await trio.to_thread.run_sync(
        agentrt, ["config", "show", *flags, "--prompt", "--json"]
    )
    assert as_json.returncode == 0, as_json.stderr
    data = json.loads(as_json.stdout)
    assert data["text"] + "\n" == shown.stdout
    assert data["date"] == day_shown
    assert data["tools"] == wire.tools(llm_server.requests[0].json())
    assert [p["kind"] for p in data["parts"]] == [
        "agentrt",
        "environment",
        "agents_md",
        "instructions",
        "instructions",
    ]
    assert "\n\n".join(p["text"] for p in data["parts"]) == data["text"]
    assert [(f["path"], f["cut"]) for f in data["agents_files"]] == [
        (str(project.parents[1] / "AGENTS.md"), False),
        (str(project / "AGENTS.md"), False),
    ]
    assert data["daemon"] is None
    # The settings themselves, with where they came from.
    settings = await trio.to_thread.run_sync(agentrt, ["config", "show", "--json"])
    listed = json.loads(settings.stdout)
    assert listed["instructions"] == {
        "value": INSTRUCTIONS,
        "source": "file",
        "where": f"{config}:1",
    }
    assert listed["instructions_file"] == {
        "value": str(config.parent / "more.md"),
        "source": "file",
        "where": f"{config}:2",
    }
    table = await trio.to_thread.run_sync(agentrt, ["config", "show"])
    assert re.search(
        rf"^instructions +{re.escape(INSTRUCTIONS[:20])}.* +file {config}:1$", table.stdout, re.M
    ), table.stdout
    assert re.search(
        rf"^instructions_file +{config.parent / 'more.md'} +file {config}:2$", table.stdout, re.M
    ), table.stdout


def test_config_show_prompt_says_what_it_cut_and_help_explains_it(
    tmp_path: Path, project: Path
) -> None:
    env = dict(os.environ)
    env.update(XDG_CONFIG_HOME=str(tmp_path / "xdg"), AGENTRT_STATE_DIR=str(tmp_path / "state"))
    env.pop("AGENTRT_MODEL", None)
    (project / "AGENTS.md").write_text("x" * (AGENTS_LIMIT + 10))
    shown = run_in(["config", "show", "--prompt", "--workdir", str(project)], env, tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "- sleep: Wait for a number of seconds." in shown.stdout, "the scripted model's tools"
    near = project / "AGENTS.md"
    assert shown.stderr == (
        f"note: {project.parents[1] / 'AGENTS.md'} is left out: none of its "
        f"{len(ROOT_RULE) + 1} bytes fit (AGENTS.md files may take 32 KiB in all, the nearer "
        "first)\n"
        f"note: {near} is cut to fit: {AGENTS_LIMIT} of its {AGENTS_LIMIT + 10} bytes are in "
        "the prompt (AGENTS.md files may take 32 KiB in all, the nearer first)\n"
    )
    assert f"[left out, all {len(ROOT_RULE) + 1} bytes:" in shown.stdout
    assert not (tmp_path / "state").exists(), "showing the prompt writes nothing"
    helped = run_in(["config", "show", "--help"], env, tmp_path)
    flat = " ".join(helped.stdout.split())
    assert "--prompt print the system prompt a run would send with these flags" in flat
    assert "AGENTS.md files from the repository's root down to the working folder" in flat


async def test_the_scripted_model_plays_the_same_with_a_system_prompt_or_none() -> None:
    async def ignore(delta: object) -> None:
        pass

    model = ScriptedModel(word_delay=0)
    talk = [Message.user("read a.txt; read b.txt")]
    bare = await model.complete(talk, offered_to(model), ignore)
    prompted = await model.complete([Message.system("the prompt"), *talk], (), ignore)
    assert [c.id for c in bare.tool_calls] == ["call_1_0", "call_1_1"]
    assert prompted == bare


@pytest.mark.deadline(120)
async def test_a_daemons_run_sends_the_prompt_of_the_folder_the_command_ran_in(
    llm_server: LLMServer, project: Path, short_dir: Path
) -> None:
    env = dict(os.environ)
    env.update(XDG_CONFIG_HOME=str(short_dir / "xdg"), AGENTRT_STATE_DIR=str(short_dir / "state"))
    env.pop("AGENTRT_MODEL", None)
    write_config(
        env,
        f'model = "openai:m"\ninstructions = "{INSTRUCTIONS}"\n\n'
        f'[openai]\nbase_url = "{llm_server.base_url}/v1"\n',
    )
    llm_server.script(sse(Wire("openai").text("hi")))
    before = date.today()

    def agentrt(args: list[str]) -> subprocess.CompletedProcess[str]:
        return run_in(args, env, short_dir)

    # The daemon works in short_dir; the command asks for the project's folder.
    async with daemon(short_dir, env) as (process, _):
        ran = await trio.to_thread.run_sync(agentrt, ["run", "--workdir", str(project), "hi"])
        assert ran.returncode == 0, ran.stderr
        sent = Wire("openai").system(llm_server.requests[0].json())
        shown = await trio.to_thread.run_sync(
            agentrt, ["config", "show", "--prompt", "--workdir", str(project)]
        )
    assert f"- Working folder: {project} " in sent
    assert NEAR_RULE in sent and ROOT_RULE in sent and sent.endswith(INSTRUCTIONS)
    day_sent, day_shown = _today_between(before, sent), _today_between(before, shown.stdout)
    assert shown.stdout == sent.replace(day_sent, day_shown) + "\n"
    assert shown.stderr == (
        f"note: a daemon (pid {process.pid}) holds the state dir: `agentrt run` goes through "
        "it, with its model (openai:m), its approval policy (ask) and the configuration it "
        "read when it started\n"
    )


async def test_an_agents_file_a_tool_links_to_agentrts_own_files_is_not_read(
    tmp_path: Path,
) -> None:
    work, state = tmp_path / "work", tmp_path / "state"
    work.mkdir()
    canary = "canary-3f9a1c-never-in-a-prompt"
    async with open_runtime(
        state, model=ScriptedModel(), workdir=work, approval=Approval.FULL_AUTO
    ) as rt:
        rt.secrets.put("api_token", canary)
        # The text guard off: a model that rephrases the command gets past it anyway.
        rt.executor.config = attrs.evolve(rt.executor.config, text_guard=False)
        (secret,) = [p for p in (state / "secrets").iterdir() if canary in p.read_text()]
        # The tool cannot read the file (the sandbox hides it), but can name it in a link.
        recorder = Recorder()
        with trio.fail_after(30):
            await rt.executor.run(
                "cli-link",
                f"sh ln -s {secret} AGENTS.md && cat AGENTS.md",
                owner="t",
                emit=recorder,
            )
        assert isinstance(recorder.events[-1], RunEnded)
        assert (work / "AGENTS.md").is_symlink()
        prompt = build_prompt(rt.executor.config, offered_to(rt.model))
        # As agentrt read it before: the person's access, outside the sandbox.
        bare = build_prompt(attrs.evolve(rt.executor.config, protected_paths=()), [])
        history = await rt.store.load_history("cli-link")
    assert canary not in prompt.text
    assert canary not in json.dumps([m.content for m in history])
    (found,) = prompt.agents_files
    assert (
        found.error == f"it leads to {secret}, among agentrt's own files, which tools may not see"
    )
    assert f"[not read: {found.error}]" in prompt.text
    assert canary in bare.text  # the check sees a leak where there is one


def test_an_agents_file_linked_to_another_file_of_the_project_is_read(tmp_path: Path) -> None:
    work = tmp_path / "w"
    work.mkdir()
    (work / "CLAUDE.md").write_text("shared rules\n")
    (work / "AGENTS.md").symlink_to("CLAUDE.md")
    config = attrs.evolve(_config(work), protected_paths=(tmp_path / "state",))
    prompt = build_prompt(config, offered_to(object()))
    assert "shared rules" in prompt.text and prompt.agents_files[0].error == ""


def test_an_agents_file_swapped_for_a_pipe_does_not_hold_the_run(tmp_path: Path) -> None:
    from agentrt.agent.prompt import _read_bounded

    pipe = tmp_path / "AGENTS.md"
    os.mkfifo(pipe)
    found, text = _read_bounded(pipe, 100)
    assert (found.error, text) == ("not a regular file", "")

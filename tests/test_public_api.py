"""The public surface of `agentrt`: what embedders may import, and what importing costs."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import agentrt

EXPECTED = {
    "ALLOW_ONCE",
    "ALLOW_SESSION",
    "CONFIRM_CHOICES",
    "DENY",
    "default_state_dir",
    "may_have_run",
    "describe_end",
    "describe_resume",
    "EndWords",
    "AgentConfig",
    "AlreadyAnsweredError",
    "Answer",
    "BadAnswerError",
    "BadSessionIdError",
    "BadWorkdirError",
    "Approval",
    "Cause",
    "CauseScope",
    "ClosedListenerError",
    "Entry",
    "EntryGoneError",
    "EntryState",
    "Event",
    "ReasoningEvent",
    "ReasoningDelta",
    "ThinkingBlock",
    "Executor",
    "ExecutorError",
    "Listener",
    "ListenerGoneError",
    "LateAnswerError",
    "QuestionExpiredError",
    "QuestionState",
    "QuestionTrace",
    "Timeout",
    "TimeoutAction",
    "Timeouts",
    "Message",
    "Model",
    "ModelError",
    "ModelResponse",
    "NoPendingTaskError",
    "NotOwnerError",
    "Outcome",
    "PendingTaskExistsError",
    "ModelNotConfiguredError",
    "Registry",
    "RegistryStatistics",
    "ReplayModel",
    "Request",
    "RequestContext",
    "RequestKind",
    "RunEnded",
    "Runtime",
    "SavedQuestion",
    "ScriptedModel",
    "SecretStore",
    "SessionBusyError",
    "StateDirError",
    "StoreError",
    "SudoVerifier",
    "TaskInfo",
    "TaskRecord",
    "TaskStarted",
    "TaskStatus",
    "TaskStore",
    "UnreadableTask",
    "TextDelta",
    "TextEvent",
    "ToolCall",
    "ToolCallDelta",
    "ToolCallDeltaEvent",
    "ToolCallEvent",
    "ToolError",
    "ToolResultEvent",
    "ToolSpec",
    "UnknownSessionError",
    "UnknownTaskError",
    "UsageEvent",
    "CompactionEvent",
    "Verifier",
    "VerifyEvent",
    "bind_context",
    "cause_of",
    "current_context",
    "make_model",
    "open_runtime",
    "origin_of",
    "stop_cause",
}


def test_public_names_are_exactly_the_documented_surface() -> None:
    # dir(), not vars(): the names are imported on first use (see agentrt.__init__).
    public = {name for name in dir(agentrt) if not name.startswith("_")}
    modules = {"cli", "codec", "frames", "client", "daemon", "http", "bots", "providers", "lab"}
    assert public - modules == EXPECTED


def test_public_names_are_reexported_from_private_modules_with_docstrings() -> None:
    constants = {"ALLOW_ONCE", "ALLOW_SESSION", "CONFIRM_CHOICES", "DENY"}
    assert agentrt.CONFIRM_CHOICES == (agentrt.ALLOW_ONCE, agentrt.ALLOW_SESSION, agentrt.DENY)
    for name in EXPECTED - {"Event"} - constants:  # Event is a type union, not a class
        obj = getattr(agentrt, name)
        module = getattr(obj, "__module__", "agentrt._x")
        # Defined in a module of a layer's folder (`agentrt/core/`, `agentrt/store/`, ...).
        assert module.startswith("agentrt.") and module.count(".") >= 2, name
        assert obj.__doc__, f"{name} has no docstring"


def test_the_lazy_table_and_the_type_checking_imports_name_the_same_places() -> None:
    source = Path(agentrt.__file__).read_text()
    typed = {
        alias.asname or alias.name: node.module
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module
        for alias in node.names
    }
    assert typed == agentrt._WHERE


#: Modules a program that only speaks the protocol must never load.
RUNTIME_ONLY = ("sqlite3", "agentrt.store", "agentrt.core.executor", "agentrt.agent.loop", "cattrs")


@pytest.mark.parametrize("module", ["agentrt.client", "agenttui", "agenttui.__main__"])
def test_importing_the_client_loads_no_store_executor_or_sqlite3(module: str) -> None:
    code = f"import json, sys; import {module}; print(json.dumps(sorted(m for m in sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    loaded = set(json.loads(out))
    assert module in loaded
    assert loaded.isdisjoint(RUNTIME_ONLY), sorted(loaded & set(RUNTIME_ONLY))


def test_importing_the_client_builds_only_the_handshake_frames() -> None:
    """The other frames (and the events they carry) load when the first frame is encoded."""
    code = (
        "import json, sys; import agentrt.client; before = sorted(sys.modules); "
        "from agentrt.protocol.codec import encode; "
        "from agentrt.protocol.handshake import Hello; "
        "line = encode(Hello(1, 'w')).decode(); "
        "print(json.dumps([before, sorted(sys.modules), line]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    before, after, line = json.loads(out)
    assert "agentrt.protocol.handshake" in before
    assert {"agentrt.protocol.frames", "agentrt.vocab.events"}.isdisjoint(before)
    assert {"agentrt.protocol.frames", "agentrt.vocab.events"} <= set(after)
    assert json.loads(line) == {"type": "hello", "version": 1, "window": "w", "scope": "window"}


#: What `agentrt run` with the embedded scripted model has no use for, and so never loads.
NOT_FOR_A_SCRIPTED_RUN = (
    "httpx",
    "agentrt.providers",
    "agentrt.client",
    "agentrt.frontends.terminal.server",
    "agentrt.protocol.frames",
    "importlib.metadata",
    "tomllib",
    "difflib",
)


def test_a_scripted_run_loads_no_http_client_and_no_config_parser(tmp_path: Path) -> None:
    """Start-up is part of every command's time: what a run does not need is not imported."""
    code = (
        "import json, sys; import agentrt.apps.cli; "
        f"sys.argv = ['agentrt', 'run', '--state-dir', {str(tmp_path / 'state')!r}, 'hello']; "
        "status = agentrt.apps.cli.main(); "
        "print(json.dumps([status, sorted(sys.modules)]))"
    )
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "no-config")}
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        env=env,
    ).stdout
    status, loaded = json.loads(out.splitlines()[-1])
    assert status == 0
    assert "agentrt.core.executor" in loaded  # it did run here, not through a daemon
    assert set(loaded).isdisjoint(NOT_FOR_A_SCRIPTED_RUN), sorted(
        set(loaded) & set(NOT_FOR_A_SCRIPTED_RUN)
    )


async def test_open_runtime_takes_its_paths_as_strings_too(tmp_path: Path) -> None:
    # An embedder writes workdir="/tmp/x" as readily as Path("/tmp/x"): both are a folder.
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("remember this")
    async with agentrt.open_runtime(
        str(tmp_path / "state"),
        workdir=str(work),
        restricted_paths=[str(tmp_path / "restricted")],
        protected_paths=[str(tmp_path / "private")],
    ) as runtime:
        config = runtime.executor.config
        assert config.workdir == work.resolve()
        assert config.restricted_paths == (tmp_path / "restricted",)
        assert tmp_path / "private" in config.protected_paths
        ended = await runtime.executor.run("cli-str", "read notes.txt", owner="me", emit=_ignore)
    assert ended.outcome is agentrt.Outcome.FINISHED
    assert ended.text == "Done.\nread_file: remember this"


async def _ignore(event: agentrt.Event) -> None:
    return None


class _Where(os.PathLike[str]):
    """A path-like that is neither a `str` nor a `Path`, as some embedders' own types are."""

    def __init__(self, path: Path) -> None:
        self._path = str(path)

    def __fspath__(self) -> str:
        return self._path


async def test_every_path_parameter_takes_any_path_like(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("remember this")
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("the other folder")
    async with agentrt.open_runtime(
        _Where(tmp_path / "state"),
        workdir=_Where(work),
        restricted_paths=[_Where(tmp_path / "restricted")],
        protected_paths=[_Where(tmp_path / "private")],
        store=_Where(tmp_path / "tasks.db"),
    ) as runtime:
        config = runtime.executor.config
        assert config.workdir == work.resolve()
        assert config.restricted_paths == (tmp_path / "restricted",)
        assert tmp_path / "private" in config.protected_paths
        assert (tmp_path / "tasks.db").is_file()
        ended = await runtime.executor.run(
            "cli-pl", "read notes.txt", owner="me", emit=_ignore, workdir=_Where(other)
        )
    assert ended.text == "Done.\nread_file: the other folder"
    secrets = agentrt.SecretStore(_Where(tmp_path / "secrets"))
    secrets.put("token", "s3cret")
    assert secrets.path == tmp_path / "secrets"
    assert (tmp_path / "secrets" / "token").read_text() == "s3cret"
    made = agentrt.AgentConfig(workdir=_Where(work), secrets=secrets)
    assert made.workdir == work
    replay = tmp_path / "replay.json"
    replay.write_text(json.dumps({"turns": [{"text": "hi"}]}))
    assert isinstance(agentrt.ReplayModel.from_file(_Where(replay)), agentrt.ReplayModel)
    store = await agentrt.TaskStore.open(_Where(tmp_path / "other.db"))
    await store.aclose()
    assert (tmp_path / "other.db").is_file()
    from agentrt.client import Client
    from agentrt.client import DaemonNotRunningError
    from agentrt.client import is_socket_answering
    from agentrt.http import load_or_create_token

    assert not is_socket_answering(_Where(tmp_path / "none.sock"))
    with pytest.raises(DaemonNotRunningError, match=r"none\.sock"):
        await Client.connect(_Where(tmp_path / "none.sock"))
    assert load_or_create_token(_Where(tmp_path / "state")) != ""

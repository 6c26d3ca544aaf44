"""The sandbox holds: every bypass attempt of `stress.sandbox`, under every policy, guard on and off.

Each attempt is a real shell call in a real runtime; the kernel (bubblewrap's
mounts and namespaces) is what refuses it. Redaction is off and the person
allows every plain confirmation, so nothing but the sandbox stands in the way.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
from stress.sandbox import ATTEMPTS
from stress.sandbox import SOCKET_ATTEMPTS
from stress.sandbox import STARTUP
from stress.sandbox import SUBMODULE
from stress.sandbox import Attempt
from stress.sandbox import _person as person
from stress.sandbox import attempt_once
from stress.sandbox import layout
from stress.sandbox import run_sandbox
from stress.sandbox import sandboxed_runtime
from stress.sandbox import service_for
from stress.sandbox import socket_attempt_once

from agentrt import Runtime
from agentrt import ToolResultEvent
from agentrt.agent import probe
from agentrt.agent.sandbox import Sandbox
from agentrt.agent.sandbox import refusal_note
from agentrt.agent.sandbox import tool_environment
from agentrt.agent.tools import search
from agentrt.apps.entry import runs_a_task
from agentrt.vocab.terms import Approval
from agentrt.vocab.terms import SandboxMode

from .cli_process import run_in
from .cli_process import run_python
from .conftest import Recorder
from .conftest import results_in_call_order
from .test_tool_processes import allow_everything
from .test_tool_processes import poll

pytestmark = pytest.mark.deadline(240)


def test_there_are_at_least_thirty_spellings_of_every_kind() -> None:
    kinds = {a.kind.split(",")[0] for a in ATTEMPTS}
    assert len(ATTEMPTS) >= 30
    assert kinds >= {
        "restricted",
        "restricted home",
        "configuration",
        "state",
        "secret",
        "key",
        "token",
        "environment",
    }


def test_the_sandbox_is_there_on_this_machine() -> None:
    # The suite below means nothing without it; CI installs bubblewrap (.ci/system-deps).
    sandbox = Sandbox.detect()
    assert sandbox.enforced, sandbox.why


@pytest.mark.parametrize("approval", list(Approval), ids=lambda a: a.value)
@pytest.mark.parametrize("guard", [True, False], ids=["text-guard-on", "text-guard-off"])
async def test_no_attempt_escapes(approval: Approval, guard: bool) -> None:
    result = await run_sandbox(policies=(approval,), guards=(guard,))
    # Unasked calls (full-auto) have no network: they try every way to a Unix socket too.
    unasked = len(SOCKET_ATTEMPTS) if approval is Approval.FULL_AUTO else 0
    assert result.done == len(ATTEMPTS) + unasked
    assert result.failures == []


async def test_every_way_to_a_unix_socket_gets_through_where_the_network_is_kept() -> None:
    # The checks can see an escape: with the network kept (sandbox_network = true), or for
    # a call the person confirmed, the same commands reach the service. A 32-bit system
    # call makes no socket on a kernel without that ABI, filter or not.
    import attrs

    reached: dict[str, list[str]] = {}
    for approval in (Approval.FULL_AUTO, Approval.ASK):
        with layout() as lay:
            async with (
                sandboxed_runtime(lay, approval, text_guard=False) as runtime,
                trio.open_nursery() as nursery,
            ):
                await nursery.start(person, runtime)
                if approval is Approval.FULL_AUTO:
                    config = runtime.executor.config
                    kept = attrs.evolve(config.sandbox, network=True)
                    runtime.executor.config = attrs.evolve(config, sandbox=kept)
                service = service_for(lay)
                await nursery.start(service.serve)
                for n, pair in enumerate(SOCKET_ATTEMPTS):
                    session = f"cli-{approval.value}{n}"
                    if await socket_attempt_once(runtime, lay, service, pair, session):
                        reached.setdefault(approval.value, []).append(pair[0])
                nursery.cancel_scope.cancel()
    every = [kind for kind, _ in SOCKET_ATTEMPTS if kind != "unix socket, 32-bit call"]
    assert reached == {"full-auto": every, "ask": every}


async def test_an_unsandboxed_run_lets_the_same_attempts_out() -> None:
    # The checks can see an escape: with the sandbox off, these get out.
    probes = [
        a
        for a in ATTEMPTS
        if a.kind
        in (
            "restricted home, cd",
            "configuration, sed",
            "secret, base64",
            "environment, env",
            "repository, hook",
            "repository, git config",
            "startup, append",
            "startup, git config --global",
        )
    ]
    assert len(probes) == 8
    with layout() as lay:
        async with sandboxed_runtime(lay, Approval.FULL_AUTO, text_guard=False) as runtime:
            import attrs

            runtime.executor.config = attrs.evolve(
                runtime.executor.config,
                sandbox=Sandbox.off(),
                # As an unfiltered environment would be.
                tool_env=dict(os.environ),
            )
            escaped = []
            for n, attempt in enumerate(probes):
                output = await attempt_once(runtime, lay, attempt, f"cli-off{n}")
                escaped.append(attempt.escaped(lay, output))
    assert all(escaped), escaped


async def test_a_refused_write_names_the_restricted_root_and_how_to_get_it_confirmed() -> None:
    with layout() as lay:
        async with sandboxed_runtime(lay, Approval.FULL_AUTO, text_guard=True) as runtime:
            attempt = Attempt("", "d=/et && echo x > ${{d}}c/{m}", lambda lay, out: None)
            output = await attempt_once(runtime, lay, attempt, "cli-note")
    assert "Read-only file system" in output
    assert "[sandbox: the write was refused: /etc is a restricted path" in output
    assert "confirmed with the system password" in output
    assert not await trio.Path(f"/etc/{lay.mark}").exists()


async def test_full_auto_cuts_the_network_of_unasked_calls(tmp_path: Path) -> None:
    listener = trio.socket.socket()
    await listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    probe = (
        'python3 -c "import socket,sys; s=socket.socket(); s.settimeout(5); '
        f"print('net', s.connect_ex(('127.0.0.1', {port})))\""
    )
    with layout() as lay:
        async with sandboxed_runtime(lay, Approval.FULL_AUTO, text_guard=True) as runtime:
            attempt = Attempt("", probe, lambda lay, out: None)
            cut = await attempt_once(runtime, lay, attempt, "cli-net1")
            import attrs

            runtime.executor.config = attrs.evolve(
                runtime.executor.config,
                sandbox=attrs.evolve(runtime.executor.config.sandbox, network=True),
            )
            kept = await attempt_once(runtime, lay, attempt, "cli-net2")
        async with (
            sandboxed_runtime(lay, Approval.ASK, text_guard=True) as runtime,
            trio.open_nursery() as nursery,
        ):
            # Confirmed by a person (who allows it here): the network is there.
            await nursery.start(person, runtime)
            asked = await attempt_once(runtime, lay, attempt, "cli-net3")
            nursery.cancel_scope.cancel()
    listener.close()
    assert "net 0" not in cut and "net " in cut
    assert "net 0" in kept
    assert "net 0" in asked


def test_a_tool_environment_holds_no_credential() -> None:
    env = tool_environment(
        {
            "PATH": "/usr/bin",
            "HOME": "/home/u",
            "LANG": "C.UTF-8",
            "EDITOR": "vi",
            "OPENAI_API_KEY": "k1",
            "OPENAI_BASE_URL": "http://x",
            "ANTHROPIC_API_KEY": "k2",
            "AGENTRT_ANYTHING": "a",
            "GITHUB_TOKEN": "t",
            "aws_secret_access_key": "s",
            "DB_PASSWORD": "p",
            "MY_LLM": "custom-key",
            "ELSEWHERE": "stored-key",
        },
        names=["MY_LLM"],
        values=["stored-key"],
    )
    assert env == {
        "PATH": "/usr/bin",
        "HOME": "/home/u",
        "LANG": "C.UTF-8",
        "EDITOR": "vi",
        "TMPDIR": "/tmp",
    }


def test_refusal_note_without_a_known_root_says_what_is_writable() -> None:
    note = refusal_note(
        "sh: 1: cannot create etc/f: Read-only file system",
        workdir=Path("/w"),
        restricted=(Path("/etc"),),
    )
    assert note is not None and "only /w and a private /tmp are writable" in note
    assert refusal_note("fine", workdir=Path("/w"), restricted=()) is None


def test_an_explicit_off_is_not_missing_and_a_missing_bwrap_is_said() -> None:
    off = Sandbox.detect(SandboxMode.OFF)
    assert not off.enforced and not off.missing
    gone = Sandbox.detect(environ={"AGENTRT_BWRAP": "/nonexistent/bwrap"})
    assert gone.missing and "is not installed" in gone.why


def test_a_bwrap_that_fails_here_is_said_with_its_own_words(tmp_path: Path) -> None:
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    # Started ahead of need (as `agentrt run` does before loading its modules), then read.
    probe.start(str(fake))
    failing = Sandbox.detect(environ={"AGENTRT_BWRAP": str(fake)})
    assert failing.missing
    assert failing.why == f"{fake} fails here: bwrap: No permissions to create new namespace"


def test_only_the_commands_that_run_a_task_start_the_probe_early() -> None:
    for args in (["run", "hi"], ["sessions", "continue", "s", "hi"], ["pending", "resume"]):
        assert runs_a_task(args), args
    for args in (["pending", "list"], ["sessions", "list"], [], ["--version"], ["daemon"]):
        assert not runs_a_task(args), args


#: The words the hooks of the test below print.
TOLD = (["start"], ["spawn"], ["verdict"])


def test_agentrt_run_starts_the_probe_before_its_modules_and_reads_that_one(
    tmp_path: Path,
) -> None:
    # The probe's wait overlaps the imports only if it starts before the command's modules
    # load, and it saves that wait only if the sandbox then reads that probe's answer.
    code = (
        "import sys\n"
        "from agentrt.agent import probe\n"
        "def told(what, call):\n"
        "    def hook(bwrap):\n"
        "        print(what, 'agentrt.apps.cli' in sys.modules, bwrap in probe._running,\n"
        "              file=sys.stderr, flush=True)\n"
        "        return call(bwrap)\n"
        "    return hook\n"
        "probe.start = told('start', probe.start)\n"
        "probe._spawn = told('spawn', probe._spawn)\n"
        "probe.verdict = told('verdict', probe.verdict)\n"
        "sys.argv = ['agentrt', 'run', 'hello', '--state-dir', sys.argv[1]]\n"
        "from agentrt.apps import entry\n"
        "entry.console_main()\n"
    )
    done = run_python(code, str(tmp_path / "state"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "hello" in done.stdout
    told = [words for line in done.stderr.splitlines() if (words := line.split())[:1] in TOLD]
    # Started and spawned before agentrt.apps.cli loaded, unread until the sandbox was
    # detected, which read that probe instead of spawning another.
    assert told == [
        ["start", "False", "False"],
        ["spawn", "False", "False"],
        ["verdict", "True", "True"],
    ], done.stderr


async def test_a_sandboxed_command_outlives_the_thread_that_started_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Trio starts processes from worker threads, which retire when idle: a sandbox tied to
    # its starting thread's life (bubblewrap's --die-with-parent) would be killed with it.
    from trio._core import _thread_cache

    from agentrt.agent.toolproc import run_tool

    monkeypatch.setattr(_thread_cache, "IDLE_TIMEOUT", 0.01)
    sandbox = Sandbox.detect()
    argv = sandbox.wrap(["sh", "-c", "sleep 0.5; echo done"], workdir=tmp_path, network=False)
    with trio.fail_after(20):
        out = await run_tool(argv, cwd=tmp_path)
    assert (out.returncode, out.output) == (0, b"done\n")


async def test_a_command_that_leaves_its_group_dies_with_the_sandbox(tmp_path: Path) -> None:
    from agentrt.agent.toolproc import run_tool

    tag = f"77.{os.getpid()}"
    sandbox = Sandbox.detect()
    argv = sandbox.wrap(
        ["sh", "-c", f"setsid sleep {tag} >/dev/null 2>&1 & echo started"],
        workdir=tmp_path,
        network=False,
    )
    with trio.fail_after(20):
        out = await run_tool(argv, cwd=tmp_path)
        assert out.output == b"started\n"

        def running() -> bool:
            for name in os.listdir("/proc"):
                try:
                    cmdline = Path(f"/proc/{name}/cmdline").read_bytes()
                except OSError:
                    continue
                if name.isdigit() and f"sleep\0{tag}".encode() in cmdline:
                    stat = Path(f"/proc/{name}/stat").read_bytes().rsplit(b")", 1)[-1]
                    if stat.split()[0] not in (b"Z", b"X"):
                        return True
            return False

        # The namespace's first process died with the call's group; the kernel then kills
        # every process left in the namespace (a real process: polled with a bound).
        assert await poll(lambda: not running())


def test_a_restricted_root_is_bound_again_only_where_something_writable_meets_it(
    tmp_path: Path,
) -> None:
    # The host's / is bound read-only with every mount under it: a restricted root that
    # no writable mount (the working folder, the private /tmp) is at, above or below is
    # read-only already, and is not bound again (a mount fewer at every call).
    work = tmp_path / "work"
    inside = work / "keys"
    inside.mkdir(parents=True)
    open_root = Path(tempfile.mkdtemp(prefix="agentrt-open-", dir="/var/tmp"))
    within_open = open_root / "kept"
    within_open.mkdir()
    try:
        argv = Sandbox.detect().wrap(
            ["true"],
            workdir=work,
            restricted=[Path("/etc"), Path("/usr"), inside, tmp_path, open_root, within_open],
            writable=[open_root],
            network=True,
        )
    finally:
        shutil.rmtree(open_root)
    binds = [(argv[i], argv[i + 1]) for i in range(len(argv) - 1) if argv[i].endswith("bind")]
    assert ("--ro-bind", "/etc") not in binds and ("--ro-bind", "/usr") not in binds
    # Below the working folder, and above it (under the private /tmp as well): bound again.
    assert ("--ro-bind", str(inside.resolve())) in binds
    assert ("--ro-bind", str(tmp_path.resolve())) in binds
    # A root made writable, and a restricted one inside it bound read-only after it.
    made_writable = binds.index(("--bind", str(open_root.resolve())))
    assert binds.index(("--ro-bind", str(within_open.resolve()))) > made_writable


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a file system needs root")
async def test_a_restricted_root_that_is_a_mount_of_its_own_stays_read_only(
    tmp_path: Path,
) -> None:
    from agentrt.agent.toolproc import run_tool

    mount = Path(tempfile.mkdtemp(prefix="agentrt-mnt-", dir="/var/tmp"))
    await trio.run_process(["mount", "-t", "tmpfs", "tmpfs", str(mount)])
    try:
        (mount / "kept").write_text("as it was")
        argv = Sandbox.detect().wrap(
            ["sh", "-c", f"echo x > {mount}/kept; echo x > {mount}/new; cat {mount}/kept"],
            workdir=tmp_path,
            restricted=[mount],
            network=False,
        )
        assert str(mount) not in argv[: argv.index("--")]  # read-only with the host's /
        with trio.fail_after(20):
            out = await run_tool(argv, cwd=tmp_path)
        assert out.output.count(b"Read-only file system") == 2, out.output
        assert out.output.endswith(b"as it was")
        assert (mount / "kept").read_text() == "as it was"
        assert not (mount / "new").exists()
    finally:
        await trio.run_process(["umount", str(mount)])
        os.rmdir(mount)


# -- the modes: missing, off, and what the configuration says ------------------------


def agentrt(args: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "AGENTRT_STATE_DIR": str(tmp_path / "state"), **env}
    environ.pop("AGENTRT_MODEL", None)
    environ.pop("AGENTRT_SOCKET", None)
    return run_in(args, environ, tmp_path)


def test_without_a_sandbox_full_auto_is_refused_at_start(tmp_path: Path) -> None:
    done = agentrt(
        ["run", "--approval", "full-auto", "sh echo hi"],
        tmp_path,
        AGENTRT_BWRAP="/nonexistent/bwrap",
    )
    assert done.returncode != 0
    assert "full-auto needs the sandbox, and there is none" in done.stderr
    assert "bubblewrap (/nonexistent/bwrap) is not installed" in done.stderr


def test_without_a_sandbox_it_says_so_once_and_confirms_every_write(tmp_path: Path) -> None:
    # auto-edit would write in the working folder unasked; with no sandbox it asks.
    done = agentrt(
        ["run", "--approval", "auto-edit", "write a.txt hi"],
        tmp_path,
        AGENTRT_BWRAP="/nonexistent/bwrap",
    )
    assert done.stderr.count("warning: no sandbox for tools") == 1, done.stderr
    assert f"? write 2 bytes to {tmp_path / 'a.txt'}" in done.stderr
    assert not (tmp_path / "a.txt").exists()


async def test_without_a_sandbox_a_chat_session_runs_no_tool(runtime: Runtime) -> None:
    import attrs

    missing = Sandbox.detect(environ={"AGENTRT_BWRAP": "/nonexistent/bwrap"})
    for sandbox in (missing, Sandbox.off()):
        runtime.executor.config = attrs.evolve(
            runtime.executor.config, sandbox=sandbox, approval=Approval.FULL_AUTO
        )
        recorder = Recorder()
        with trio.fail_after(20):
            await runtime.executor.run(
                "chat-nosbx", "sh echo ran > ran.txt", owner="t", emit=recorder
            )
        [result] = recorder.of(ToolResultEvent)
        assert not result.ok
        assert "tools never run unsandboxed for a chat or web session" in result.preview
        assert not (runtime.executor.config.workdir / "ran.txt").exists()


async def test_sandbox_off_runs_a_terminal_command_with_full_access(
    runtime: Runtime, tmp_path: Path
) -> None:
    import attrs

    outside = Path(tempfile.mkdtemp(dir="/var/tmp"))
    try:
        runtime.executor.config = attrs.evolve(
            runtime.executor.config, sandbox=Sandbox.off(), approval=Approval.FULL_AUTO
        )
        with trio.fail_after(20):
            await runtime.executor.run(
                "cli-off", f"sh echo ran > {outside}/ran.txt", owner="t", emit=Recorder()
            )
        assert (outside / "ran.txt").read_text() == "ran\n"
    finally:
        shutil.rmtree(outside)


def test_config_show_marks_sandbox_off_as_dangerous(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('sandbox = "off"\nsandbox_network = true\n')
    done = agentrt(["config", "show", "--config", str(config)], tmp_path)
    assert done.returncode == 0, done.stderr
    [line] = [line for line in done.stdout.splitlines() if line.startswith("sandbox ")]
    assert "off (DANGEROUS: tools run with your full access" in line
    assert f"{config}:1" in line
    as_json = agentrt(["config", "show", "--json", "--config", str(config)], tmp_path)
    data = json.loads(as_json.stdout)
    assert data["sandbox"]["value"] == "off" and data["sandbox"]["dangerous"] is True
    assert data["sandbox_network"]["value"] is True
    default = json.loads(agentrt(["config", "show", "--json"], tmp_path).stdout)
    assert default["sandbox"]["value"] == "workspace-write"
    assert default["sandbox"]["dangerous"] is False


def test_the_sandbox_flag_and_variable_are_read_and_checked(tmp_path: Path) -> None:
    flagged = agentrt(["config", "show", "--json", "--sandbox", "off"], tmp_path)
    assert json.loads(flagged.stdout)["sandbox"]["source"] == "flag"
    bad = agentrt(["config", "show"], tmp_path, AGENTRT_SANDBOX="loose")
    assert bad.returncode == 2
    assert "unknown sandbox mode 'loose'; expected one of: workspace-write, off" in bad.stderr


async def test_a_password_makes_exactly_the_named_root_writable(tmp_path: Path) -> None:
    # The command names one restricted root plainly and reaches another through a
    # variable: the password opens the first, and the kernel still refuses the second.
    with layout() as lay:
        opened = lay.home / "opened"
        opened.mkdir()
        async with sandboxed_runtime(lay, Approval.ASK, text_guard=True) as runtime:
            import attrs

            from .conftest import FakeVerifier

            verifier = FakeVerifier(is_cached=True)
            config = runtime.executor.config
            runtime.executor.config = attrs.evolve(
                config,
                verifier=verifier,
                restricted_paths=(*config.restricted_paths, opened),
            )
            # (Braces doubled twice: once for this f-string, once for the attempt's format.)
            command = f"echo x > {opened}/f && s=.s && echo KEY >> ~/${{{{s}}}}sh/authorized_keys"
            attempt = Attempt("", command, lambda lay, out: None)
            async with trio.open_nursery() as nursery:
                await nursery.start(allow_everything, runtime)
                output = await attempt_once(runtime, lay, attempt, "cli-pw")
                nursery.cancel_scope.cancel()
        assert (opened / "f").read_text() == "x\n"
        assert (lay.ssh / "authorized_keys").read_text() == "ssh-ed25519 AAAA the-owner\n"
        assert "Read-only file system" in output
        [argv] = verifier.commands
        binds = [argv[i + 1] for i, a in enumerate(argv) if a == "--bind"]
        # (The folders holding what is read-only in the home are bound onto themselves.)
        pinned = [
            str(lay.home / p) for p in (".config", ".git", ".local", ".git/modules", SUBMODULE)
        ]
        assert binds == [str(lay.home), *pinned, str(opened)]


@pytest.mark.parametrize("guard", [True, False], ids=["text-guard-on", "text-guard-off"])
async def test_the_file_tools_cannot_reach_agentrt_state(guard: bool) -> None:
    with layout() as lay:
        secret = lay.values["secret api_token"]
        target = lay.state / "secrets" / "api_token"
        async with (
            sandboxed_runtime(lay, Approval.FULL_AUTO, text_guard=guard) as runtime,
            trio.open_nursery() as nursery,
        ):
            await nursery.start(allow_everything, runtime)
            recorder = Recorder()
            with trio.fail_after(30):
                await runtime.executor.run(
                    "cli-files",
                    f"read {target}; write {target} overwritten; "
                    f"write {lay.state}/planted x; read {lay.config}",
                    owner="t",
                    emit=recorder,
                )
            nursery.cancel_scope.cancel()
            history = await runtime.store.load_history("cli-files")
        results = [m.content for m in history if m.role.value == "tool"]
        assert len(results) == 4
        assert all(r.startswith("error:") for r in results), results
        assert not any(secret in r or "approval" in r for r in results)
        assert target.read_text() == secret
        assert not (lay.state / "planted").exists()


@pytest.mark.parametrize("guard", [True, False], ids=["text-guard-on", "text-guard-off"])
async def test_the_search_tools_cannot_see_agentrt_state_in_the_working_folder(
    guard: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The working folder (the home) holds the state dir, its secrets and HTTP token, and
    agentrt's configuration: the kernel hides them from ``grep`` (ripgrep and its Python
    fallback), ``glob`` and ``list_dir`` alike, the text guard on or off."""
    with layout() as lay:
        secret = lay.values["secret api_token"]
        token = lay.values["http token"]
        (lay.home / "visible.txt").write_text("tok- starts a token\n")
        state = lay.state.relative_to(lay.home)
        statements = (
            f"grep tok-; grep {secret[4:]}; grep approval; glob '*'; glob '**/api_token'; "
            f"ls {state}; ls {state}/secrets; grep {token[:10]} {state}"
        )
        runs = {}
        async with (
            sandboxed_runtime(lay, Approval.ASK, text_guard=guard) as runtime,
            trio.open_nursery() as nursery,
        ):
            await nursery.start(allow_everything, runtime)
            for engine in ("ripgrep", "python"):
                if engine == "python":
                    monkeypatch.setattr(search, "ripgrep", lambda: None)
                else:
                    assert search.ripgrep() is not None
                with trio.fail_after(60):
                    await runtime.executor.run(
                        f"cli-search-{engine}", statements, owner="t", emit=Recorder()
                    )
                history = await runtime.store.load_history(f"cli-search-{engine}")
                runs[engine] = results_in_call_order(history)
            nursery.cancel_scope.cancel()
        # What the tools may see they find; the state, its secret and token, are not there.
        found = [
            "visible.txt:1:tok- starts a token",
            f"no match for {secret[4:]!r} in .",
            "no match for 'approval' in .",
            "\n".join(sorted([*STARTUP, ".ssh/authorized_keys", "visible.txt"])),
            "no file under . matches '**/api_token'",
        ]
        if guard:
            refused = "error: refused: {} is part of agentrt's own state"
            reached = [refused.format(state), refused.format(f"{state}/secrets")]
            reached.append(refused.format(state))
        else:
            # Named outright, the state dir is an empty folder and nothing is inside it.
            missing = lay.state / "secrets"
            reached = [
                f"{state} is empty",
                f"error: cannot list {missing}: No such file or directory",
                f"no match for {token[:10]!r} in {state}",
            ]
        for engine, results in runs.items():
            assert results[:5] == found, engine
            assert [r[: len(e)] for r, e in zip(results[5:], reached, strict=True)] == reached
            assert not any(secret in r or token in r for r in results)


@pytest.fixture
def install_under_tmp() -> Iterator[Path]:
    """A folder right under /tmp, as a virtualenv or a clone installed there is, with a script."""
    install = Path(os.path.realpath(tempfile.mkdtemp(prefix="agentrt-install-", dir="/tmp")))
    (install / "tool.py").write_text("print('ran from', __file__)\n")
    try:
        yield install
    finally:
        shutil.rmtree(install, ignore_errors=True)


async def test_a_python_installed_under_tmp_still_runs_tool_processes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, install_under_tmp: Path
) -> None:
    # /tmp is private inside the sandbox; agentrt and its Python (a virtualenv, a clone)
    # installed there are bound in again, read-only, or `write_file` could not start.
    from agentrt.agent import sandbox as module
    from agentrt.agent.toolproc import run_tool

    install = install_under_tmp
    # The roots of the Python running these tests stay bound too: a clone of the project
    # under /tmp runs the tool's interpreter from there.
    roots = module.runtime_roots()
    monkeypatch.setattr(module, "runtime_roots", lambda: (*roots, install))
    work = tmp_path / "work"
    work.mkdir()
    argv = Sandbox.detect().wrap(
        [sys.executable, str(install / "tool.py")], workdir=work, network=False
    )
    root = str(install)
    at = argv.index(root)
    assert argv[at - 1 : at + 2] == ["--ro-bind", root, root]
    assert argv.index("--bind") > at, "the work folder is bound after, and stays writable"
    with trio.fail_after(20):
        out = await run_tool(argv, cwd=work)
    assert (out.returncode, out.output) == (0, f"ran from {install}/tool.py\n".encode())
    with trio.fail_after(20):
        wrote = await run_tool(
            Sandbox.detect().wrap(
                ["sh", "-c", f"echo x > {install}/new.txt"], workdir=work, network=False
            ),
            cwd=work,
        )
    assert wrote.returncode != 0, "read-only"
    assert not (install / "new.txt").exists()

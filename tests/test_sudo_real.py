"""The real sudo path for restricted paths: a throwaway user with a known password.

Root never needs a password for sudo, so these tests create a user with a
password and sudo rights, and hand `SudoVerifier` a wrapper that runs the real
`sudo` as that user. Needs root (CI and the development machines run as root;
`.ci/system-deps` installs sudo).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from agentrt import Answer
from agentrt import Outcome
from agentrt import RequestKind
from agentrt import RunEnded
from agentrt import ScriptedModel
from agentrt import SudoVerifier
from agentrt import VerifyEvent
from agentrt import open_runtime

from .conftest import Recorder

USER = "agentrt-sudo-test"
PASSWORD = "canary-pw-5c8e1f"

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="creating a throwaway sudo user needs root"),
    # One machine-wide user and sudoers file: the module's tests run in one test process.
    pytest.mark.xdist_group("sudo-user"),
]


@pytest.fixture(scope="module")
def sudo_as_user(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    subprocess.run(["userdel", "-f", USER], capture_output=True, check=False)
    subprocess.run(["useradd", "-M", "-s", "/bin/sh", USER], check=True)
    subprocess.run(["chpasswd"], input=f"{USER}:{PASSWORD}", text=True, check=True)
    sudoers = Path("/etc/sudoers.d/agentrt-sudo-test")
    # A global timestamp, so the credentials cached by `sudo -S -v` in one process
    # are seen by the `sudo -n` of the next (each wrapper call has a new parent).
    sudoers.write_text(f"Defaults:{USER} timestamp_type=global\n{USER} ALL=(ALL) ALL\n")
    sudoers.chmod(0o440)
    wrapper = tmp_path_factory.mktemp("sudo") / "sudo-as-user"
    wrapper.write_text(f'#!/bin/sh\nexec runuser -u {USER} -- sudo "$@"\n')
    wrapper.chmod(0o755)
    subprocess.run([str(wrapper), "-K"], check=False)
    try:
        yield str(wrapper)
    finally:
        subprocess.run([str(wrapper), "-K"], check=False)
        sudoers.unlink()
        subprocess.run(["userdel", "-f", USER], capture_output=True, check=False)


async def test_real_sudo_verifies_the_password_on_stdin_and_then_runs_commands(
    sudo_as_user: str,
) -> None:
    await trio.run_process([sudo_as_user, "-K"], check=False)
    verifier = SudoVerifier(sudo=sudo_as_user)
    assert not await verifier.cached()
    assert not await verifier.verify("wrong password")
    assert await verifier.verify(PASSWORD)
    assert await verifier.cached()
    result = await verifier.run(["id", "-u"])
    assert (result.returncode, result.output) == (0, b"0\n")


async def test_a_restricted_write_goes_through_real_sudo_after_a_wrong_then_right_password(
    sudo_as_user: str, tmp_path: Path
) -> None:
    await trio.run_process([sudo_as_user, "-K"], check=False)
    restricted = tmp_path / "restricted"
    restricted.mkdir(mode=0o700)  # root's: the throwaway user cannot write here itself
    recorder = Recorder()
    async with open_runtime(
        tmp_path / "state",
        model=ScriptedModel(0, 0),
        workdir=tmp_path,
        restricted_paths=[restricted],
        verifier=SudoVerifier(sudo=sudo_as_user),
    ) as rt:
        async with trio.open_nursery() as nursery:

            async def run() -> None:
                await rt.executor.run(
                    "cli-sudo", f"write {restricted}/conf via sudo", owner="t", emit=recorder
                )

            nursery.start_soon(run)
            with rt.registry.listen("cli-") as listener:
                first = await listener.claim()
                assert first.request.kind is RequestKind.PASSWORD
                first.answer(Answer("allow", secret="not it"))
                second = await listener.claim()
                assert second.request.error == "wrong password, 2 tries left"
                second.answer(Answer("allow", secret=PASSWORD))
        assert recorder.of(RunEnded)[-1].outcome is Outcome.FINISHED
        stored = b"".join(p.read_bytes() for p in rt.state_dir.rglob("*") if p.is_file())
    assert (restricted / "conf").read_text() == "via sudo"
    assert [(v.ok, v.attempts_left) for v in recorder.of(VerifyEvent)] == [(False, 2), (True, 1)]
    assert PASSWORD not in repr(recorder.events)
    assert PASSWORD.encode() not in stored  # nor in tasks.db, its WAL, or anything else

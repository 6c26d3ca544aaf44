"""The daemon's pieces without a socket: lifecycle table, socket paths, folder checks."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from agentrt.daemon import ConnectionState
from agentrt.daemon import IllegalStepError
from agentrt.daemon import Lifecycle
from agentrt.daemon import SocketPathError
from agentrt.daemon import Step
from agentrt.daemon import default_socket_path
from agentrt.frontends.terminal.lifecycle import TRANSITIONS
from agentrt.frontends.terminal.paths import prepare_socket_dir
from agentrt.frontends.terminal.paths import remove_stale_socket


def test_lifecycle_happy_path() -> None:
    life = Lifecycle()
    assert life.state is ConnectionState.AWAIT_HELLO
    assert life.step(Step.HELLO) is ConnectionState.READY
    assert life.step(Step.REQUEST) is ConnectionState.READY
    assert life.step(Step.CLOSE) is ConnectionState.CLOSED
    assert life.step(Step.CLOSE) is ConnectionState.CLOSED


def test_request_before_hello_names_step_and_state() -> None:
    with pytest.raises(
        IllegalStepError,
        match=r"^request is not allowed in state AWAIT_HELLO: send a hello frame first$",
    ):
        Lifecycle().step(Step.REQUEST)


def test_second_hello_is_illegal() -> None:
    life = Lifecycle(ConnectionState.READY)
    with pytest.raises(IllegalStepError, match="'hello' frame is not allowed in state READY"):
        life.step(Step.HELLO, "a 'hello' frame")
    assert life.state is ConnectionState.READY


@pytest.mark.parametrize("step", [Step.HELLO, Step.REQUEST])
def test_everything_but_close_fails_fast_once_closed(step: Step) -> None:
    life = Lifecycle(ConnectionState.CLOSED)
    assert not life.allows(step)
    with pytest.raises(IllegalStepError, match="the connection is closed; open a new one"):
        life.step(step)


def test_table_covers_only_legal_steps() -> None:
    legal = {(s, e) for s in ConnectionState for e in Step if Lifecycle(s).allows(e)}
    assert legal == set(TRANSITIONS)
    assert len(legal) == 5


def test_default_socket_path() -> None:
    assert default_socket_path(
        {"AGENTRT_SOCKET": "/x/s.sock", "XDG_RUNTIME_DIR": "/run/user/7"}
    ) == Path("/x/s.sock")
    assert default_socket_path({"XDG_RUNTIME_DIR": "/run/user/7"}) == Path(
        "/run/user/7/agentrt/daemon.sock"
    )
    assert default_socket_path({}) == Path(f"/tmp/agentrt-{os.getuid()}/daemon.sock")


def test_socket_folder_is_created_0700_and_tightened(tmp_path: Path) -> None:
    made = prepare_socket_dir(tmp_path / "a" / "daemon.sock")
    assert stat.S_IMODE(os.stat(made).st_mode) == 0o700
    loose = tmp_path / "b"
    loose.mkdir(mode=0o755)
    os.chmod(loose, 0o755)
    prepare_socket_dir(loose / "daemon.sock")
    assert stat.S_IMODE(os.stat(loose).st_mode) == 0o700


def test_socket_folder_of_another_uid_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SocketPathError, match="pass --socket with a path in a folder of your own"):
        prepare_socket_dir(tmp_path / "daemon.sock", uid=os.getuid() + 1)


def test_a_file_in_the_way_is_not_removed(tmp_path: Path) -> None:
    path = tmp_path / "daemon.sock"
    path.write_text("keep me")
    with pytest.raises(SocketPathError, match="is not a socket"):
        remove_stale_socket(path)
    assert path.read_text() == "keep me"
    assert remove_stale_socket(tmp_path / "absent.sock") is False

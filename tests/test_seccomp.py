"""A call without the network makes no Unix socket: the seccomp program bubblewrap loads.

Each check runs a real Python inside a real bubblewrap, wrapped as every tool
call is (`Sandbox.wrap`), and once more with the network kept, where the same
thing goes through: what refuses it is the program, not the namespace.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from agentrt.agent import sandbox as sandbox_module
from agentrt.agent import seccomp
from agentrt.agent.sandbox import Sandbox
from agentrt.agent.toolproc import run_tool

pytestmark = pytest.mark.deadline(120)

#: Prints what each way to a socket gave: a descriptor, or the error's number.
PROBE = """
import ctypes, errno, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
def made(name, *args):
    fd = libc.syscall(*args)
    print(name, "fd" if fd >= 0 else errno.errorcode[ctypes.get_errno()], flush=True)
try:
    socket.socket(socket.AF_UNIX).connect(sys.argv[1])
    print("unix connected", flush=True)
except OSError as exc:
    print("unix", errno.errorcode[exc.errno], flush=True)
a, b = socket.socketpair()
a.send(b"x")
print("pair", b.recv(1).decode(), flush=True)
with socket.socket() as inet:
    inet.bind(("127.0.0.1", 0))
    print("inet bound", flush=True)
made("high bits", 41, 0x100000001, 1, 0)
made("vsock", 41, 40, 1, 0)
made("io_uring", 425, 8, 0)
made("x32", 0x40000000 | 41, 1, 1, 0)
"""


@pytest.fixture
def service() -> Iterator[Path]:
    """A listening Unix socket outside the sandbox's private /tmp, as the sockets in /run are."""
    import socket

    folder = Path(tempfile.mkdtemp(prefix="agentrt-sock-", dir="/var/tmp"))
    path = folder / "service.sock"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path))
    listener.listen(8)
    try:
        yield path
    finally:
        listener.close()
        shutil.rmtree(folder, ignore_errors=True)


async def probe(argv: list[str], cwd: Path, *, through_run_tool: bool = True) -> tuple[int, str]:
    with trio.fail_after(30):
        if through_run_tool:
            out = await run_tool(argv, cwd=cwd)
            return out.returncode, out.output.decode()
        done = await trio.run_process(argv, cwd=cwd, capture_stdout=True, check=False)
        return done.returncode, done.stdout.decode()


def wrapped(service: Path, workdir: Path, *, network: bool) -> list[str]:
    sandbox = Sandbox.detect()
    assert sandbox.enforced, sandbox.why
    return sandbox.wrap(
        [sys.executable, "-c", PROBE, str(service)], workdir=workdir, network=network
    )


@pytest.mark.parametrize("through_run_tool", [True, False], ids=["run_tool", "any-spawner"])
async def test_a_call_without_the_network_makes_no_unix_socket_and_keeps_its_pipes(
    service: Path, tmp_path: Path, through_run_tool: bool
) -> None:
    # `any-spawner` is how an MCP server's process is started (the SDK's own spawner).
    argv = wrapped(service, tmp_path, network=False)
    status, output = await probe(argv, tmp_path, through_run_tool=through_run_tool)
    assert output.splitlines() == [
        "unix EACCES",
        "pair x",
        "inet bound",
        "high bits EACCES",  # the domain's low 32 bits are what the kernel reads
        "vsock EACCES",
        "io_uring ENOSYS",
        # A system call of another ABI kills the process (SIGSYS), whatever it is; the
        # sandbox's first process says so on standard error (merged by `run_tool`).
        *(["Bad system call"] if through_run_tool else []),
    ], output
    assert status in (-signal.SIGSYS, 128 + signal.SIGSYS), (status, output)


async def test_with_the_network_kept_the_same_call_reaches_the_socket(
    service: Path, tmp_path: Path
) -> None:
    status, output = await probe(wrapped(service, tmp_path, network=True), tmp_path)
    lines = output.splitlines()
    assert lines[:5] == ["unix connected", "pair x", "inet bound", "high bits fd", "vsock fd"]
    assert status == 0, output


def test_the_program_is_sealed_and_each_call_reads_it_whole() -> None:
    path = seccomp.program()
    assert path is not None, seccomp.why_not()
    assert seccomp.program() == path
    assert path == f"/proc/{os.getpid()}/fd/{path.rsplit('/', 1)[1]}"
    first = Path(path).read_bytes()
    # Opened afresh each time: a reader before does not move the next one's offset.
    assert Path(path).read_bytes() == first
    assert len(first) % 8 == 0 and len(first) >= 8 * 8  # BPF instructions of 8 bytes
    fd = os.open(path, os.O_RDWR)
    try:
        with pytest.raises(PermissionError):
            os.write(fd, b"\0" * 8)
        with pytest.raises(PermissionError):
            os.ftruncate(fd, 0)
    finally:
        os.close(fd)
    assert Path(path).read_bytes() == first


def test_without_libseccomp_calls_run_and_it_is_said_once(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    def cannot() -> int:
        raise seccomp.ProgramError("libseccomp cannot be loaded (gone); install libseccomp2")

    monkeypatch.setattr(seccomp, "_build", cannot)
    monkeypatch.setattr(seccomp, "_built", {})
    monkeypatch.setattr(seccomp, "_why_not", None)
    monkeypatch.setattr(sandbox_module, "_told_open_sockets", False)
    sandbox = Sandbox.detect()
    first = sandbox.wrap(["true"], workdir=tmp_path, network=False)
    second = sandbox.wrap(["true"], workdir=tmp_path, network=False)
    assert first[0] == second[0] == sandbox.bwrap
    assert "--seccomp" not in first
    assert capsys.readouterr().err == (
        "agentrt: warning: calls without the network can still reach Unix sockets: "
        "libseccomp cannot be loaded (gone); install libseccomp2 (see docs/security.md)\n"
    )

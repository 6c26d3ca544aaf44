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
    # io_uring is there (its bad arguments say so); another ABI's call kills here too.
    assert lines[5:] == ["io_uring EFAULT", "Bad system call"], output
    assert status in (-signal.SIGSYS, 128 + signal.SIGSYS), (status, output)


#: Joins a new session keyring, puts a key of type "user" in it, and runs the command given
#: (the sandboxed probe below), which inherits that keyring as a tool call inherits agentrt's.
KEY_HOLDER = """
import ctypes, subprocess, sys
libc = ctypes.CDLL(None, use_errno=True)
assert libc.syscall(250, 1, None) > 0  # KEYCTL_JOIN_SESSION_KEYRING, a new anonymous one
key = libc.syscall(248, b"user", b"agentrt-canary", b"ticket-7d1e", 11, -3)
assert key > 0, ctypes.get_errno()
sys.exit(subprocess.run([*sys.argv[1:], str(key)]).returncode)
"""

#: Reads the key by its number, and searches the session keyring for it.
KEY_READER = """
import ctypes, errno, sys
libc = ctypes.CDLL(None, use_errno=True)
buf = ctypes.create_string_buffer(64)
got = libc.syscall(250, 11, int(sys.argv[1]), buf, 64)  # KEYCTL_READ
print("read", buf.raw[:got].decode() if got >= 0 else errno.errorcode[ctypes.get_errno()])
found = libc.syscall(250, 10, -3, b"user", b"agentrt-canary", 0)  # KEYCTL_SEARCH
print("search", "found" if found >= 0 else errno.errorcode[ctypes.get_errno()])
made = libc.syscall(248, b"user", b"planted", b"x", 1, -3)  # add_key
print("add", "made" if made >= 0 else errno.errorcode[ctypes.get_errno()])
"""


@pytest.mark.parametrize("network", [False, True], ids=["unasked", "confirmed"])
async def test_no_call_reaches_the_keyring_it_inherits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, network: bool
) -> None:
    sandbox = Sandbox.detect()
    assert sandbox.enforced, sandbox.why
    reader = [sys.executable, "-c", KEY_READER]
    argv = sandbox.wrap(reader, workdir=tmp_path, network=network)
    holder = [sys.executable, "-c", KEY_HOLDER]
    with trio.fail_after(30):
        done = await trio.run_process([*holder, *argv], capture_stdout=True, check=False)
    assert done.stdout.decode().splitlines() == ["read EPERM", "search EPERM", "add EPERM"]
    # Without the program, the same call reads the key: what refuses it is the program.
    monkeypatch.setattr(seccomp, "program", lambda network: None)
    monkeypatch.setattr(sandbox_module, "_told_no_seccomp", True)
    bare = sandbox.wrap(reader, workdir=tmp_path, network=network)
    assert "--seccomp" not in bare
    with trio.fail_after(30):
        done = await trio.run_process([*holder, *bare], capture_stdout=True, check=False)
    assert done.stdout.decode().splitlines()[:2] == ["read ticket-7d1e", "search found"]


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
    def cannot(*, network: bool) -> int:
        raise seccomp.ProgramError("libseccomp cannot be loaded (gone); install libseccomp2")

    monkeypatch.setattr(seccomp, "_build", cannot)
    monkeypatch.setattr(seccomp, "_built", {})
    monkeypatch.setattr(seccomp, "_why_not", None)
    monkeypatch.setattr(sandbox_module, "_told_no_seccomp", False)
    sandbox = Sandbox.detect()
    first = sandbox.wrap(["true"], workdir=tmp_path, network=False)
    second = sandbox.wrap(["true"], workdir=tmp_path, network=False)
    assert first[0] == second[0] == sandbox.bwrap
    assert "--seccomp" not in first
    third = sandbox.wrap(["true"], workdir=tmp_path, network=True)
    assert third[0] == sandbox.bwrap and "--seccomp" not in third
    assert capsys.readouterr().err == (
        "agentrt: warning: tool calls can reach the session's kernel keyring, and calls "
        "without the network can still reach Unix sockets: libseccomp cannot be loaded "
        "(gone); install libseccomp2 (see docs/security.md)\n"
    )

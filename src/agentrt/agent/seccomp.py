"""The seccomp programs bubblewrap loads into every tool call.

Every call, with the network or without, is refused the kernel's key
management (``keyctl``, ``add_key``, ``request_key``, with EPERM, as Docker's
default profile does): the sandbox's user namespace does not cut a process
off from the session keyring it inherits, and a key of type ``user`` there (a
Kerberos ticket cache kept in the keyring, say) could otherwise be read by
any command, unasked.

A call that runs without the network gets a network namespace of its own,
which cuts it off from every IP address and every abstract Unix socket; but a
Unix socket with a *path* is a file, and the file system is shared read-only.
``connect`` on a socket file needs no write access, so a read-only mount does
not stop it: without its program a call could talk to Docker's
``/var/run/docker.sock`` (root on the host), a database's socket, the session
bus. bubblewrap loads the program (``--seccomp FD``) into the command just
before it starts, and from then on the kernel refuses, for the command and all
it starts:

* ``socket(AF_UNIX, ...)`` with EACCES (a socket *pair*, which reaches nothing
  outside, is still allowed: pipes between a program's own processes go on
  working), and ``socket(AF_VSOCK, ...)``, which is not held in by a network
  namespace;
* ``io_uring_setup`` with ENOSYS (io_uring makes sockets without going through
  ``socket``; programs that use it fall back to plain system calls).

In both programs, any system call of another architecture (a 64-bit process
switching to the 32-bit one to reach ``socketcall`` or ``keyctl``) kills the
process: programs built for 32-bit x86 do not run in the sandbox.

The domain is compared on its low 32 bits, as the kernel reads it (an ``int``),
so high bits set in the register do not slip past.

The programs are built with libseccomp (through ctypes: the six functions it
takes do not call for a binding of their own), the library bubblewrap's own
users build theirs with; it knows each architecture's system call numbers and
checks. Each is built once per process, on first use, into a sealed memory
file that no one can change, and each call opens it afresh by its ``/proc``
path (bubblewrap reads the descriptor to its end, so calls must not share
one). Where libseccomp cannot be loaded, `program` says why, and calls run
without it (agentrt says so once).
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
import sys
import threading
from typing import TYPE_CHECKING
from typing import Final

if TYPE_CHECKING:
    import ctypes

#: The descriptor the program is given to bubblewrap on.
FD: Final = 3
#: Run as ``sh -c OPEN_PROGRAM PROGRAM COMMAND...``: `COMMAND` with `PROGRAM` open on `FD`.
OPEN_PROGRAM: Final = f'exec "$@" {FD}<"$0"'

_SCMP_ACT_ALLOW: Final = 0x7FFF0000
_SCMP_ACT_KILL_PROCESS: Final = 0x80000000
_SCMP_FLTATR_ACT_BADARCH: Final = 2
_SCMP_CMP_MASKED_EQ: Final = 7
#: Address families a namespace without the network does not hold in.
_REFUSED_FAMILIES: Final = (socket.AF_UNIX, 40)  # 40: AF_VSOCK
#: The kernel's key management: no call may reach the keyrings it inherits.
_KEYRING_CALLS: Final = ("keyctl", "add_key", "request_key")
_SEALS: Final = ("F_SEAL_SEAL", "F_SEAL_SHRINK", "F_SEAL_GROW", "F_SEAL_WRITE")


def _errno_action(code: int) -> int:
    return 0x00050000 | (code & 0xFFFF)


class ProgramError(Exception):
    """The program could not be built here (why, in a few words)."""


_lock = threading.Lock()
#: Each program's ``/proc`` path (which names its descriptor), by the process that built it
#: and whether it is for calls that keep the network.
_built: dict[tuple[int, bool], str] = {}
#: Why the programs cannot be had here, once found.
_why_not: str | None = None


def program(*, network: bool = False) -> str | None:
    """The ``/proc`` path of the program for calls with or without the network, built on
    first use; None where it cannot be had."""
    global _why_not
    key = (os.getpid(), network)
    with _lock:
        found = _built.get(key)
        if found is not None:
            return found
        if _why_not is not None:
            return None
        try:
            fd = _build(network=network)
        except ProgramError as exc:
            _why_not = str(exc)
            return None
        path = f"/proc/{key[0]}/fd/{fd}"
        _built[key] = path
        return path


def why_not() -> str:
    """Why `program` gave None ("" when it gave a path, or was not asked yet)."""
    return _why_not or ""


def _build(*, network: bool) -> int:
    """A sealed memory file holding the program (close-on-exec); `ProgramError` if it fails."""
    if not sys.platform.startswith("linux"):
        raise ProgramError(f"seccomp is Linux's; this is {sys.platform}")
    import ctypes  # only where a tool call is run

    class ArgCmp(ctypes.Structure):
        """libseccomp's ``struct scmp_arg_cmp``."""

        _fields_ = (
            ("arg", ctypes.c_uint),
            ("op", ctypes.c_int),
            ("datum_a", ctypes.c_uint64),
            ("datum_b", ctypes.c_uint64),
        )

    try:
        lib = ctypes.CDLL("libseccomp.so.2", use_errno=True)
    except OSError as exc:
        raise ProgramError(f"libseccomp cannot be loaded ({exc}); install libseccomp2") from exc
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = (ctypes.c_uint32,)
    lib.seccomp_release.argtypes = (ctypes.c_void_p,)
    lib.seccomp_attr_set.argtypes = (ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32)
    lib.seccomp_syscall_resolve_name.argtypes = (ctypes.c_char_p,)
    lib.seccomp_rule_add_array.argtypes = (
        ctypes.c_void_p,
        ctypes.c_uint32,
        ctypes.c_int,
        ctypes.c_uint,
        ctypes.POINTER(ArgCmp),
    )
    lib.seccomp_export_bpf.argtypes = (ctypes.c_void_p, ctypes.c_int)
    ctx = lib.seccomp_init(_SCMP_ACT_ALLOW)
    if not ctx:
        raise ProgramError("libseccomp could not start a filter")
    fd = -1
    try:
        _check(lib.seccomp_attr_set(ctx, _SCMP_FLTATR_ACT_BADARCH, _SCMP_ACT_KILL_PROCESS), "attr")
        for name in _KEYRING_CALLS:
            refused = _errno_action(errno.EPERM)
            _check(lib.seccomp_rule_add_array(ctx, refused, _syscall(lib, name), 0, None), "rule")
        if not network:
            sock = _syscall(lib, "socket")
            for family in _REFUSED_FAMILIES:
                domain = ArgCmp(0, _SCMP_CMP_MASKED_EQ, 0xFFFFFFFF, family)
                refused = _errno_action(errno.EACCES)
                _check(lib.seccomp_rule_add_array(ctx, refused, sock, 1, domain), "socket rule")
            uring = _syscall(lib, "io_uring_setup")
            refused = _errno_action(errno.ENOSYS)
            _check(lib.seccomp_rule_add_array(ctx, refused, uring, 0, None), "rule")
        flags = os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING
        fd = os.memfd_create("agentrt-seccomp", flags)
        _check(lib.seccomp_export_bpf(ctx, fd), "export")
        seals = 0
        for name in _SEALS:
            seals |= getattr(fcntl, name)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        raise
    finally:
        lib.seccomp_release(ctx)
    return fd


def _syscall(lib: ctypes.CDLL, name: str) -> int:
    number = int(lib.seccomp_syscall_resolve_name(name.encode()))
    if number < 0:
        raise ProgramError(f"this libseccomp does not know the system call {name}; update it")
    return number


def _check(result: int, step: str) -> None:
    if result < 0:
        raise ProgramError(f"libseccomp failed ({step}): {os.strerror(-result)}")

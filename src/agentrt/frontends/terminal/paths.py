"""Where the daemon's socket lives, who may own its folder, and who may connect.

The socket sits in a folder only its user can enter (mode 0700) and is itself
mode 0600; on top of that every connection's peer uid is read with
``SO_PEERCRED`` and compared with the daemon's, because file modes can be
loosened by mistake and a peer check cannot.
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
import stat
import struct
from pathlib import Path
from typing import Protocol

from ...vocab.locations import default_socket_path as default_socket_path
from ...vocab.locations import is_socket_answering as is_socket_answering
from ...vocab.reprs import record


class SocketPathError(Exception):
    """The socket's folder or path cannot be used safely; the message says what to change."""


class DaemonAlreadyRunningError(Exception):
    """Another daemon is serving the socket path."""


def prepare_socket_dir(socket_path: Path, *, uid: int | None = None) -> Path:
    """Make sure the socket's folder exists, belongs to `uid` and is mode 0700.

    A missing folder is created with mode 0700. An existing folder must be a
    real directory (not a symlink) owned by `uid`; if others may enter it, it
    is tightened to 0700. Raises `SocketPathError` otherwise.
    """
    uid = os.getuid() if uid is None else uid
    folder = socket_path.parent
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = os.lstat(folder)
    if not stat.S_ISDIR(info.st_mode):
        raise SocketPathError(
            f"{folder} is not a directory (a symlink?); remove it or pass --socket elsewhere"
        )
    if info.st_uid != uid:
        raise SocketPathError(
            f"{folder} belongs to uid {info.st_uid}, not {uid}; "
            "pass --socket with a path in a folder of your own"
        )
    if stat.S_IMODE(info.st_mode) != 0o700:
        os.chmod(folder, 0o700)
    return folder


@record
class PeerCredentials:
    """Who is at the other end of a Unix socket, as the kernel says."""

    pid: int
    uid: int
    gid: int


class _Socket(Protocol):
    def getsockopt(self, level: int, option: int, buflen: int, /) -> bytes: ...


def peer_credentials(sock: _Socket) -> PeerCredentials:
    """Read ``SO_PEERCRED`` of a connected Unix socket."""
    size = struct.calcsize("3i")
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, size)
    pid, uid, gid = struct.unpack("3i", raw)
    return PeerCredentials(pid, uid, gid)


def check_peer(peer: PeerCredentials, uid: int) -> str | None:
    """None when `peer` may talk to a daemon of `uid`; else the reason it may not."""
    if peer.uid == uid:
        return None
    return (
        f"this daemon belongs to uid {uid}; a client of uid {peer.uid} may not use it. "
        "Start your own daemon (agentrt daemon) and point AGENTRT_SOCKET at it"
    )


class SocketLock:
    """An exclusive lock on ``<socket>.lock``, held for the daemon's life.

    It tells a second daemon on the same path to stop before it touches the
    socket file, even when both start at the same moment. The kernel drops
    the lock when the process dies, so a crashed daemon leaves no stale lock.
    """

    def __init__(self, socket_path: Path) -> None:
        self.path = socket_path.with_name(socket_path.name + ".lock")
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock or raise `DaemonAlreadyRunningError`."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EACCES):
                raise DaemonAlreadyRunningError(already_running_message(self.path)) from None
            raise
        self._fd = fd

    def release(self) -> None:
        """Drop the lock (the lock file stays; it is reused)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def already_running_message(path: Path) -> str:
    """What to tell the user when a daemon already serves `path`."""
    socket_path = path.with_suffix("") if path.suffix == ".lock" else path
    return (
        f"a daemon is already running on {socket_path}; stop it first "
        "or pass --socket to start another one elsewhere"
    )


def remove_stale_socket(path: Path) -> bool:
    """Remove a socket file nobody answers on; True if one was removed.

    Raises `DaemonAlreadyRunningError` if someone answers and `SocketPathError`
    if the path is something other than a socket.
    """
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return False
    if not stat.S_ISSOCK(info.st_mode):
        raise SocketPathError(f"{path} exists and is not a socket; move it away or pass --socket")
    if is_socket_answering(path):
        raise DaemonAlreadyRunningError(already_running_message(path))
    path.unlink()
    return True

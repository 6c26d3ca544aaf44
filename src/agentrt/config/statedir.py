"""The state directory: who may use it, and which daemon holds it.

The state dir holds the task store, the secrets and the HTTP token, so it is
the owner's alone (mode 0700). A daemon holds an exclusive lock on
``daemon.lock`` in it for its whole life and records there how to reach it;
a second daemon on the same state dir refuses to start, and the `agentrt`
command sends its requests to the daemon instead of opening the store itself.
The kernel drops the lock when the daemon dies, so a crash leaves no stale
lock, only a stale record whose process is gone.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import stat
import time
from pathlib import Path
from typing import Final

import attrs

from ..core.process import process_token
from ..core.process import token_alive
from ..vocab.reprs import record

#: The lock file a daemon holds in its state dir.
LOCK_FILE: Final = "daemon.lock"
#: How long a starting daemon keeps trying for the lock: a command checking the lock
#: holds it for an instant (shared), which must not look like another daemon.
_ACQUIRE_SECONDS: Final = 1.0


class StateDirError(Exception):
    """The state dir cannot be used safely; the message says what to change."""


class StateDirBusyError(StateDirError):
    """Another daemon holds the state dir."""


def fsync_dir(folder: Path) -> None:
    """Make a rename or a new file in `folder` durable: the name lives in the folder."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_synced(path: Path, data: bytes, flags: int) -> None:
    """Write `data` to `path`, opened with `flags` (created 0600 if need be), and fsync it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | flags, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def prepare_state_dir(path: Path, *, uid: int | None = None) -> Path:
    """Make sure the state dir exists, belongs to `uid` and only its owner can enter it.

    A missing folder is created mode 0700. An existing one that others may
    enter is tightened to 0700. Raises `StateDirError` when it is not a folder
    or belongs to another user (it is then left alone).
    """
    uid = os.getuid() if uid is None else uid
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = os.stat(path)
    except OSError as exc:
        raise StateDirError(
            f"cannot use the state dir {path}: {exc.strerror or exc}; "
            "pass --state-dir (or set AGENTRT_STATE_DIR) to a folder of your own"
        ) from None
    if not stat.S_ISDIR(info.st_mode):
        raise StateDirError(
            f"the state dir {path} is not a folder; move it away, or pass --state-dir "
            "(or set AGENTRT_STATE_DIR) to a folder of your own"
        )
    if info.st_uid != uid:
        raise StateDirError(
            f"the state dir {path} belongs to uid {info.st_uid}, not to you (uid {uid}); "
            "pass --state-dir (or set AGENTRT_STATE_DIR) to a folder of your own"
        )
    if stat.S_IMODE(info.st_mode) & 0o077:
        os.chmod(path, 0o700)
    return path


@record
class DaemonInfo:
    """What a daemon records in its lock file: who it is and where it listens."""

    pid: int
    #: The daemon's process token (pid and start time), so a reused pid is not taken for it.
    token: str
    socket: str
    #: The model spec it runs tasks with.
    model: str
    #: True once its socket accepts connections.
    ready: bool = False
    #: Its approval policy (``ask``, ``auto-edit``, ``full-auto``).
    approval: str = "ask"

    def alive(self) -> bool:
        """Whether the daemon's process is still running."""
        return token_alive(self.token)


def read_daemon_info(state_dir: Path) -> DaemonInfo | None:
    """The record of the daemon holding `state_dir`, or None if none was ever written.

    The record may be stale (its daemon died): check `DaemonInfo.alive`.
    """
    try:
        raw = (state_dir / LOCK_FILE).read_text("utf-8")
    except (FileNotFoundError, NotADirectoryError, UnicodeDecodeError):
        return None
    try:
        data = json.loads(raw)
        return DaemonInfo(
            pid=int(data["pid"]),
            token=str(data["token"]),
            socket=str(data["socket"]),
            model=str(data["model"]),
            ready=bool(data["ready"]),
            approval=str(data.get("approval", "ask")),
        )
    except (ValueError, KeyError, TypeError):
        return None


def lock_is_held(state_dir: Path) -> bool:
    """Whether some daemon holds the lock of `state_dir` right now."""
    try:
        fd = os.open(state_dir / LOCK_FILE, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as exc:
        return exc.errno in (errno.EWOULDBLOCK, errno.EACCES)
    finally:
        os.close(fd)  # closing drops a shared lock we got
    return False


class DaemonLock:
    """The exclusive lock a daemon holds on its state dir for its whole life."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.path = state_dir / LOCK_FILE
        self._fd: int | None = None
        self._info: DaemonInfo | None = None

    def acquire(self, socket_path: Path, model: str, approval: str = "ask") -> None:
        """Take the lock and record this process; raise `StateDirBusyError` if another holds it."""
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        except OSError as exc:
            raise StateDirError(
                f"cannot lock {self.path}: {exc.strerror or exc}; check that the state dir "
                "is yours, or pass another --state-dir"
            ) from None
        deadline = time.monotonic() + _ACQUIRE_SECONDS
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EACCES):
                    os.close(fd)
                    raise
                if time.monotonic() >= deadline:
                    os.close(fd)
                    raise StateDirBusyError(self._busy_message(socket_path)) from None
                time.sleep(0.05)  # sync on purpose: this runs before the event loop starts
        os.fchmod(fd, 0o600)
        self._fd = fd
        self._info = DaemonInfo(
            pid=os.getpid(),
            token=process_token(),
            socket=os.fspath(socket_path.absolute()),
            model=model,
            approval=approval,
        )
        self._write()

    def mark_ready(self) -> None:
        """Record that the daemon's socket accepts connections."""
        if self._info is not None:
            self._info = attrs.evolve(self._info, ready=True)
            self._write()

    def release(self) -> None:
        """Drop the lock. The record stays: its process is gone, which readers check."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _write(self) -> None:
        assert self._fd is not None and self._info is not None
        data = (json.dumps(attrs.asdict(self._info)) + "\n").encode("utf-8")
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, data, 0)

    def _busy_message(self, socket_path: Path) -> str:
        other = read_daemon_info(self.state_dir)
        if other is not None and other.alive():
            if other.socket == os.fspath(socket_path.absolute()):
                return (
                    f"a daemon is already running on {other.socket} (pid {other.pid}) with the "
                    f"state dir {self.state_dir}; stop it first, or pass --socket and "
                    "--state-dir to start another one elsewhere"
                )
            who = f"(pid {other.pid}, socket {other.socket})"
        else:
            who = "(starting up)"
        return (
            f"another daemon {who} already uses the state dir {self.state_dir}; "
            "stop it first, or pass another --state-dir"
        )

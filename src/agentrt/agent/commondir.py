"""A ``commondir`` file a tool makes in a repository's git folder is removed as it appears.

git reads ``$GIT_DIR/commondir`` before anything else of a repository: a file
there naming another folder makes git take that folder's configuration and
hooks for the repository's own (it is how a linked worktree finds the main
repository). A tool that could make one, pointing at a bare repository it made
with a ``core.fsmonitor`` of its choosing, would run that program with the
person's full access, outside any sandbox, at their next ``git status``: past
the read-only hooks and configuration (`agentrt.agent.sandbox.repository_of`).

A mount cannot forbid a new name in a folder that stays writable, and the git
folder must stay writable (a commit makes ``index.lock`` and renames it over
``index`` there); nor can an empty file be put there beforehand (git refuses a
repository whose ``commondir`` it cannot read). So every git folder the sandbox
covers is watched, with inotify, from a thread of this process, from before the
first call that could reach it: a ``commondir`` made in one that had none when
its watch began is removed as soon as the kernel reports it (made, moved or
linked there), and agentrt says so on standard error. Should the kernel's
queue of events overflow (a tool making thousands of files to hide it), every
watched folder is looked at again. One that was there already is left as it
is, and read-only (`agentrt.agent.sandbox`).

inotify through ctypes: the three calls it takes (``inotify_init1``,
``inotify_add_watch``, and ``read`` on its descriptor) do not call for a
dependency of their own, as the sandbox's seccomp program does not.
"""

from __future__ import annotations

import array
import contextlib
import fcntl
import os
import select
import shutil
import struct
import sys
import termios
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Final

#: The file git reads first in a repository's git folder.
NAME: Final = "commondir"

_IN_MOVED_TO: Final = 0x00000080
_IN_CREATE: Final = 0x00000100
_IN_Q_OVERFLOW: Final = 0x00004000
_IN_IGNORED: Final = 0x00008000
_IN_ONLYDIR: Final = 0x01000000
_IN_DONT_FOLLOW: Final = 0x02000000
_IN_CLOEXEC: Final = 0o2000000
_EVENT: Final = struct.Struct("iIII")  # wd, mask, cookie, len; then the name


class _Watcher:
    """This process's inotify descriptor, the folders it watches, and the thread reading it."""

    def __init__(self) -> None:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        self._add = libc.inotify_add_watch
        self._add.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32)
        self._add.restype = ctypes.c_int
        fd = libc.inotify_init1(_IN_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed")
        os.set_blocking(fd, False)
        self.fd: int = fd
        self.pid = os.getpid()
        self._lock = threading.Lock()
        self._handled = threading.Condition()
        self._busy = False
        #: Each watch's folder, and whether it held a `NAME` when its watch began (a folder
        #: made anew at the same path gets a new watch: the old one's ends, `_IN_IGNORED`).
        self._folders: dict[int, tuple[Path, bool]] = {}
        #: How many a tool made that were removed (for the tests and the stress suite).
        self.removed = 0
        thread = threading.Thread(target=self._read, name="agentrt-commondir", daemon=True)
        thread.start()

    def watch(self, folder: Path) -> None:
        """Watch `folder` from now (again, should it be a new folder at the same path)."""
        import ctypes

        had = os.path.lexists(folder / NAME)
        mask = _IN_CREATE | _IN_MOVED_TO | _IN_ONLYDIR | _IN_DONT_FOLLOW
        with self._lock:
            wd = self._add(self.fd, os.fsencode(folder), mask)
            if wd < 0:
                # Not a folder any more, or out of watches: said, and the call goes on.
                _tell(f"cannot watch {folder} ({os.strerror(ctypes.get_errno())})")
                return
            if wd not in self._folders:
                self._folders[wd] = (folder, had)
            elif self._folders[wd][1] and not had:
                self._folders[wd] = (folder, False)  # the person's own went since
        if not had:
            # Made between the check above and the watch: looked at once more.
            self._sweep(wd)

    def _read(self) -> None:
        poller = select.poll()
        poller.register(self.fd, select.POLLIN)
        while True:
            poller.poll()
            with self._handled:
                self._busy = True  # (`settle` waits while events are read but not handled)
            try:
                data = os.read(self.fd, 65536)
            except (BlockingIOError, InterruptedError):
                data = b""
            try:
                self.handle(data)
            finally:
                with self._handled:
                    self._busy = False
                    self._handled.notify_all()

    def handle(self, data: bytes) -> None:
        """Act on the inotify events in `data` (as read from the descriptor)."""
        offset = 0
        while offset + _EVENT.size <= len(data):
            wd, mask, _, length = _EVENT.unpack_from(data, offset)
            name = data[offset + _EVENT.size : offset + _EVENT.size + length].rstrip(b"\0")
            offset += _EVENT.size + length
            if mask & _IN_Q_OVERFLOW:
                # Events were dropped: every folder is looked at again.
                with self._lock:
                    watched = list(self._folders)
                for each in watched:
                    self._sweep(each)
            elif mask & _IN_IGNORED:
                with self._lock:
                    self._folders.pop(wd, None)
            elif name == NAME.encode():
                self._sweep(wd)

    def settle(self, timeout: float = 10.0) -> None:
        """Return once every event the kernel has queued so far has been acted on."""
        deadline = time.monotonic() + timeout
        with self._handled:
            while self._busy or _queued(self.fd):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("the repository watch did not settle")
                # (woken as each read is handled; the first may not have begun yet)
                self._handled.wait(min(left, 0.05))

    def _sweep(self, wd: int) -> None:
        """Remove `NAME` from the folder of `wd` if it held none when its watch began."""
        with self._lock:
            found = self._folders.get(wd)
        if found is None or found[1]:
            return
        path = found[0] / NAME
        try:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
        except FileNotFoundError:
            return
        except OSError as exc:
            _tell(f"a tool made {path}, and it could not be removed ({exc.strerror})")
            return
        self.removed += 1
        _tell(
            f"a tool made {path} (it would have git take another folder's configuration "
            "and hooks for this repository); removed"
        )


def _queued(fd: int) -> int:
    """How many bytes of events wait on the inotify descriptor `fd`."""
    size = array.array("i", [0])
    fcntl.ioctl(fd, termios.FIONREAD, size)
    return size[0]


def _tell(text: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        print(f"agentrt: warning: {text}", file=sys.stderr)


_watcher: _Watcher | None = None
_failed = False
_made = threading.Lock()


def watcher() -> _Watcher | None:
    """This process's watcher, started on first use; None where inotify cannot be had."""
    global _watcher, _failed
    with _made:
        if _watcher is not None and _watcher.pid != os.getpid():
            _watcher = None  # a forked child: the thread that read the events is not here
        if _watcher is None and not _failed:
            try:
                _watcher = _Watcher()
            except (OSError, AttributeError) as exc:
                _failed = True
                _tell(f"a tool may make a repository's {NAME} file unseen: no inotify ({exc})")
        return _watcher


def watch(gitdirs: Iterable[Path]) -> None:
    """Watch each git folder in `gitdirs` for a `NAME` a tool makes (see the module)."""
    found = watcher()
    if found is None:
        return
    for folder in gitdirs:
        found.watch(folder)

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

inotify as `agentrt.agent.fswatch` reaches it (ctypes: ``inotify_init1``,
``inotify_add_watch``, and ``read`` on its descriptor), with its event layout.
"""

from __future__ import annotations

import array
import contextlib
import errno
import fcntl
import os
import select
import shutil
import sys
import termios
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Final

from . import fswatch

#: The file git reads first in a repository's git folder.
NAME: Final = "commondir"


class _Watcher:
    """This process's inotify descriptor, the folders it watches, and the thread reading it."""

    def __init__(self) -> None:
        import ctypes

        libc = fswatch.inotify_libc()
        if libc is None:
            raise OSError(errno.ENOSYS, "this system has no inotify")
        self._add = libc.inotify_add_watch
        fd = libc.inotify_init1(fswatch.IN_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed")
        os.set_blocking(fd, False)
        self.fd: int = fd
        self.pid = os.getpid()
        self._lock = threading.Lock()
        self._handled = threading.Condition()
        self._busy = False
        #: Each watch's folder, and whether it held a `NAME` when its watch began (a folder
        #: made anew at the same path gets a new watch; the old one's ends: IN_IGNORED).
        self._folders: dict[int, tuple[Path, bool]] = {}
        #: How many a tool made that were removed (for the tests and the stress suite).
        self.removed = 0
        thread = threading.Thread(target=self._read, name="agentrt-commondir", daemon=True)
        thread.start()

    def watch(self, folder: Path) -> None:
        """Watch `folder` from now (again, should it be a new folder at the same path)."""
        import ctypes

        had = os.path.lexists(folder / NAME)
        mask = fswatch.IN_CREATE | fswatch.IN_MOVED_TO | fswatch.IN_ONLYDIR | fswatch.IN_DONT_FOLLOW
        with self._lock:
            wd = self._add(self.fd, os.fsencode(folder), mask)
            if wd < 0:
                # Not a folder any more, or out of watches: said, and the call goes on.
                _tell(f"cannot watch {folder} ({os.strerror(ctypes.get_errno())})")
                return
            known = self._folders.get(wd)
            began = known is None or (known[1] and not had)  # (the person's own went since)
            if began:
                self._folders[wd] = (folder, had)
        if began and not had:
            # Made between the check above and the watch: looked at once more. (A watch that
            # was there already has had its events read.)
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
        size = fswatch.EVENT.size
        while offset + size <= len(data):
            wd, mask, _, length = fswatch.EVENT.unpack_from(data, offset)
            name = data[offset + size : offset + size + length].rstrip(b"\0")
            offset += size + length
            if mask & fswatch.IN_Q_OVERFLOW:
                # Events were dropped: every folder is looked at again.
                with self._lock:
                    watched = list(self._folders)
                for each in watched:
                    self._sweep(each)
            elif mask & fswatch.IN_IGNORED:
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

"""What changed in a folder tree since it was last walked: Linux's inotify.

A shell command's checkpoint compares the working folder before and after the
command (`agentrt.agent.checkpoint`). A walk stats every entry; once one is
made, the kernel can say what changed since (the command's writes, the
person's edits between calls), and the last walk, mended with a new stat of
just those files, stands for another.

A `FolderWatch` is one inotify instance. A walk arms it (`arm`) on each folder
before reading that folder's entries, so any change after the read is an event
on the instance. `drain` reads the events: any disarms it, and each names a
file (and its folder) in `changed`, unless it cannot (a folder made, moved or
gone, an overflow, too many paths: then `changed` is None and the caller
walks). It answers only where the kernel sees every change: on the local disk
file systems of `LOCAL`, a tree on one device. Elsewhere (NFS, FUSE, an
overlay, a mount inside the tree, no inotify, the watch limit reached) it is
never armed and the caller walks every time. What makes no event (a write
through a shared memory map, before it is closed; a write through a hard link
outside the tree, made since the walk) goes unseen until the next walk.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import functools
import os
import struct
import sys
import threading
import weakref
from typing import Any
from typing import Final

#: What makes an event: a change of content, metadata or names (not reads, not opens).
_IN_MODIFY: Final = 0x002
_IN_ATTRIB: Final = 0x004
_IN_CLOSE_WRITE: Final = 0x008
_IN_MOVED_FROM: Final = 0x040
IN_MOVED_TO: Final = 0x080
IN_CREATE: Final = 0x100
_IN_DELETE: Final = 0x200
_IN_DELETE_SELF: Final = 0x400
_IN_MOVE_SELF: Final = 0x800
IN_ONLYDIR: Final = 0x01000000
#: (`agentrt.agent.commondir`'s watches do not follow a link either.)
IN_DONT_FOLLOW: Final = 0x02000000
_MASK: Final = (
    _IN_MODIFY
    | _IN_ATTRIB
    | _IN_CLOSE_WRITE
    | _IN_MOVED_FROM
    | IN_MOVED_TO
    | IN_CREATE
    | _IN_DELETE
    | _IN_DELETE_SELF
    | _IN_MOVE_SELF
    | IN_ONLYDIR
)
#: What makes a path's event no file's change the last walk can be mended with: a folder
#: made, gone or moved (its entries are unknown), a watched folder itself gone or moved
#: (the paths of the folders are not known any more), a queue that overflowed.
IN_Q_OVERFLOW: Final = 0x4000
IN_IGNORED: Final = 0x8000
_IN_ISDIR: Final = 0x40000000
_UNKNOWN: Final = IN_Q_OVERFLOW | IN_IGNORED | _IN_DELETE_SELF | _IN_MOVE_SELF | _IN_ISDIR
#: The most paths the events since a walk may name before a walk is cheaper than their stats.
CHANGED_PATHS: Final = 1024
EVENT: Final = struct.Struct("iIII")
_IN_NONBLOCK: Final = os.O_NONBLOCK
IN_CLOEXEC: Final = os.O_CLOEXEC

#: The file systems (`statfs`'s ``f_type``) whose every change, whoever makes it, is an
#: event: local disks and memory. Not NFS, SMB or FUSE (changes made elsewhere), nor an
#: overlay (changes made to its layers beneath it).
LOCAL: Final = frozenset(
    {
        0xEF53,  # ext2, ext3, ext4
        0x58465342,  # xfs
        0x9123683E,  # btrfs
        0x01021994,  # tmpfs
        0xF2F52010,  # f2fs
        0x2FC12FC1,  # zfs
        0xCA451A4E,  # bcachefs
    }
)


@functools.cache
def inotify_libc() -> Any:
    """The C library's inotify and statfs, loaded when a folder is first watched (None where
    there are none).

    Not at import: every command imports this module, and `ctypes.util.find_library`
    runs ``ldconfig -p`` in a new process, so glibc's ``libc.so.6`` is tried first.
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        try:
            libc = ctypes.CDLL("libc.so.6", use_errno=True)
        except OSError:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.inotify_init1, libc.inotify_add_watch, libc.statfs  # noqa: B018
    except (OSError, AttributeError):
        return None
    libc.inotify_add_watch.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32)
    libc.statfs.argtypes = (ctypes.c_char_p, ctypes.c_void_p)
    return libc


def fs_type(path: str) -> int | None:
    """The ``f_type`` of the file system `path` is on (None where it cannot be told)."""
    libc = inotify_libc()
    if libc is None:
        return None
    # `struct statfs` begins with its `f_type`, a C long; 256 bytes hold the whole of it.
    buf = ctypes.create_string_buffer(256)
    if libc.statfs(os.fsencode(path), buf) != 0:
        return None
    return ctypes.c_ulong.from_buffer(buf).value & 0xFFFFFFFF


class FolderWatch:
    """An inotify instance over one folder tree: `arm` its folders, `drain` its events.

    Not thread-safe by itself: its user holds `lock` over a drain, the walk that arms
    it, and what it keeps of that walk, so that no other walk's drain falls between.
    """

    def __init__(self, root: str) -> None:
        self.root = root
        self.lock = threading.Lock()
        #: Whether the last walk still holds: every folder of it was armed, and no event came
        #: since, as far as the last `drain` read.
        self.armed = False
        #: The paths its last walk left out (a walk leaving out others is not the same).
        self.skip: tuple[str, ...] = ()
        #: The device of `root`: a folder on another is a mount, not watched.
        self.device = -1
        #: Not armed: the paths the events since the last walk named (files and their
        #: folders), or None when they could not say (then walk).
        self.changed: set[str] | None = None
        #: Each watched folder's path, by its watch descriptor, as the last walk armed them.
        self._folders: dict[int, str] = {}
        self._fd = -1
        libc = inotify_libc()
        if libc is None:
            return
        try:
            root_stat = os.stat(root)
        except OSError:
            return
        if fs_type(root) not in LOCAL:
            return
        fd = libc.inotify_init1(_IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            return  # the user's instances are all taken: walk every time
        self._fd = fd
        self.device = root_stat.st_dev
        self._closer = weakref.finalize(self, os.close, fd)

    @property
    def usable(self) -> bool:
        """Whether the kernel can watch this tree at all."""
        return self._fd >= 0

    def drain(self) -> None:
        """Read every event waiting: one disarms it, naming in `changed` the file it is
        about and that file's folder (or making `changed` None: a walk is needed)."""
        if self._fd < 0:
            return
        while True:
            try:
                data = os.read(self._fd, 65536)
            except BlockingIOError:
                return
            except OSError:
                self.armed, self.changed = False, None
                return
            if not data:
                return
            self.armed = False
            self._note(data)

    def _note(self, data: bytes) -> None:
        changed, folders = self.changed, self._folders
        at, size, unpack = 0, EVENT.size, EVENT.unpack_from
        while at < len(data) and changed is not None:
            wd, mask, _, length = unpack(data, at)
            name = data[at + size : at + size + length].rstrip(b"\0")
            at += size + length
            folder = folders.get(wd)
            if mask & _UNKNOWN or folder is None or not name or len(changed) > CHANGED_PATHS:
                changed = None
                break
            changed.add(os.path.join(folder, os.fsdecode(name)))
            if folder != self.root:
                changed.add(folder)  # its times changed with its entries
        self.changed = changed

    def begin(self) -> None:
        """A walk begins (after a `drain`: an earlier change is the walk's to see), armed
        until a folder of it cannot be."""
        self.armed = self._fd >= 0
        self.changed = set()
        self._folders = {}

    def mended(self) -> None:
        """The last walk was mended with the paths of `changed`: it holds again."""
        self.armed = self._fd >= 0
        self.changed = set()

    def arm(self, folder: str, device: int) -> None:
        """Watch `folder` (on `device`) before its entries are read."""
        if not self.armed:
            return
        if device != self.device:
            self.spoil()  # a mount inside the tree: its file system may not tell
            return
        # The watch limit or an unreadable folder: this walk cannot be trusted later. A folder
        # gone meanwhile is an event of its parent's (the root's, of none: made again later,
        # nothing would tell).
        wd = inotify_libc().inotify_add_watch(self._fd, os.fsencode(folder), _MASK)
        if wd >= 0:
            self._folders[wd] = folder
        elif ctypes.get_errno() != errno.ENOENT or folder == self.root:
            self.spoil()

    def spoil(self) -> None:
        """What was walked cannot be trusted later (the walk was cut, a folder skipped)."""
        self.armed, self.changed = False, None

    def close(self) -> None:
        """Give the instance back to the kernel."""
        if self._fd >= 0:
            self._closer()
            self._fd = -1
            self.armed, self.changed = False, None

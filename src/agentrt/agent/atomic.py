"""Write a file so that a kill at any moment leaves its old content or its new, never a mix.

The new content goes to a temporary file in the target's own folder (so the
rename stays on one file system), which is synced, given the old file's mode
and owner, renamed over the target, and the folder synced so that the rename
itself survives a power cut.

This module imports nothing but the standard library, on purpose: the file
tools run it as a script (``python -I -S _atomic.py PATH``, the content on
standard input) inside the sandbox, where agentrt's own package need not be
importable, and through sudo for a restricted path. Its exit status says what
failed (`EXIT_OS_ERROR` with the error on standard error).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import sys

#: Exit status of the script when the write failed with an OSError (its errno is printed).
EXIT_OS_ERROR = 3
#: Exit status of the script when the file is no longer the one the write was based on.
EXIT_CHANGED = 4
#: What the script says then.
CHANGED = "it changed since it was read (before the confirmation); read it again"
#: How the script reports an OSError on standard error: ``errno:strerror:path``.
ERROR_PREFIX = "agentrt-write-error"


class ChangedError(Exception):
    """The file's content is not the one the new content was made from (`write_atomic`)."""


def digest(data: bytes) -> str:
    """The SHA-256 of `data` in hex: what `write_atomic`'s `expect` compares."""
    return hashlib.sha256(data).hexdigest()


def write_atomic(path: str, data: bytes, expect: str | None = None) -> None:
    """Replace the file at `path` with `data` atomically, keeping its mode and owner.

    Missing parent folders are made. A new file gets the mode ``0o666`` less
    the umask, as ``open`` would give it. Raises OSError as the system did.
    With `expect` (a `digest`), raises `ChangedError` unless the file's current
    content has that digest: an edit made from content read before a
    confirmation never overwrites a change made while it was asked.
    """
    folder = os.path.dirname(path) or "."
    os.makedirs(folder, exist_ok=True)
    try:
        old: os.stat_result | None = os.stat(path)
    except FileNotFoundError:
        old = None
    if old is not None and not stat.S_ISREG(old.st_mode):
        raise IsADirectoryError(21, "not a regular file", path)
    if expect is not None:
        with open(path, "rb") as current:
            if digest(current.read()) != expect:
                raise ChangedError(path)
    base = os.path.basename(path)
    tmp = os.path.join(folder, f".{base}.{os.urandom(6).hex()}.agentrt-tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            if old is not None:
                os.fchmod(fd, stat.S_IMODE(old.st_mode))
                if (old.st_uid, old.st_gid) != (os.geteuid(), os.getegid()):
                    # Only root may give a file away; anyone else keeps their own.
                    with contextlib.suppress(PermissionError):
                        os.fchown(fd, old.st_uid, old.st_gid)
            else:
                mask = os.umask(0)
                os.umask(mask)
                os.fchmod(fd, 0o666 & ~mask)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    dirfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dirfd)
    finally:
        os.close(dirfd)


def _main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print("usage: _atomic.py PATH [SHA256]  (the content on standard input)", file=sys.stderr)
        return 2
    data = sys.stdin.buffer.read()
    try:
        write_atomic(argv[1], data, argv[2] if len(argv) == 3 else None)
    except ChangedError:
        print(CHANGED, file=sys.stderr)
        return EXIT_CHANGED
    except OSError as exc:
        print(f"{ERROR_PREFIX}:{exc.errno}:{exc.strerror}:{argv[1]}", file=sys.stderr)
        return EXIT_OS_ERROR
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv))

"""Write a file so that a kill at any moment leaves its old content or its new, never a mix.

The new content goes to a temporary file in the target's own folder (so the
rename stays on one file system), which is synced, given the old file's mode
and owner, renamed over the target, and the folder synced so that the rename
itself survives a power cut.

This module imports nothing but the standard library, on purpose: the file
tools run it as a script (``python -I -S _atomic.py PATH``, the content on
standard input) inside the sandbox, where agentrt's own package need not be
importable, and through sudo for a restricted path. Its exit status says what
failed (`EXIT_OS_ERROR` with the error on standard error). Told the content's
size (``--size``), it writes nothing unless standard input held exactly that
much: the process feeding it that dies midway (a daemon killed) ends its input
early, and that end must not pass for the content's.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import stat
import sys

#: Exit status of the script when the write failed with an OSError (its errno is printed).
EXIT_OS_ERROR = 3
#: Exit status of the script when the file is no longer the one the write was based on.
EXIT_CHANGED = 4
#: What the script says then.
CHANGED = "it changed since it was read (before the confirmation); read it again"
#: Exit status of the script when standard input ended before the size it was told (the
#: process writing it died midway): nothing is written.
EXIT_CUT_SHORT = 5
#: How the script reports an OSError on standard error: ``errno:strerror:path``.
ERROR_PREFIX = "agentrt-write-error"


class ChangedError(Exception):
    """The file's content is not the one the new content was made from (`write_atomic`)."""


#: How the temporary file of an atomic write ends.
TEMPORARY_SUFFIX = ".agentrt-tmp"


def digest(data: bytes) -> str:
    """The SHA-256 of `data` in hex: what `write_atomic`'s `expect` compares."""
    return hashlib.sha256(data).hexdigest()


def temporary_name(path: str) -> str:
    """A fresh name for the temporary file `write_atomic` writes beside `path`."""
    return os.path.join(
        os.path.dirname(path) or ".",
        f".{os.path.basename(path)}.{os.urandom(6).hex()}{TEMPORARY_SUFFIX}",
    )


def write_atomic(path: str, data: bytes, expect: str | None = None, tmp: str | None = None) -> None:
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
    if tmp is None:
        tmp = temporary_name(path)
    elif os.path.dirname(tmp) != folder:
        raise ValueError(f"the temporary file {tmp} is not beside {path}")
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


def _stopped(signum: int, _frame: object) -> None:
    # A stopped call's process group gets SIGTERM: leaving through an exception removes the
    # temporary file in `write_atomic`, where the default action would leave it behind.
    raise SystemExit(128 + signum)


_USAGE = (
    "usage: _atomic.py [--tmp TMP] [--size BYTES] PATH [SHA256]  (the content on standard input)"
)


def _main(argv: list[str]) -> int:
    signal.signal(signal.SIGTERM, _stopped)
    options: dict[str, str] = {}
    args = argv[1:]
    # The runner names the temporary file (`--tmp`), so that it can remove it itself should
    # this process be killed before it could, and says how many bytes it sends (`--size`):
    # a runner that dies midway closes standard input early, which must not read as the end.
    while len(args) > 1 and args[0] in ("--tmp", "--size") and args[0] not in options:
        options[args[0]] = args[1]
        args = args[2:]
    size = options.get("--size")
    if len(args) not in (1, 2) or (size is not None and not size.isdigit()):
        print(_USAGE, file=sys.stderr)
        return 2
    data = sys.stdin.buffer.read()
    if size is not None and len(data) != int(size):
        print(
            f"the content arrived cut short ({len(data)} of {size} bytes); nothing was written",
            file=sys.stderr,
        )
        return EXIT_CUT_SHORT
    try:
        write_atomic(args[0], data, args[1] if len(args) == 2 else None, options.get("--tmp"))
    except ChangedError:
        print(CHANGED, file=sys.stderr)
        return EXIT_CHANGED
    except OSError as exc:
        print(f"{ERROR_PREFIX}:{exc.errno}:{exc.strerror}:{args[0]}", file=sys.stderr)
        return EXIT_OS_ERROR
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv))

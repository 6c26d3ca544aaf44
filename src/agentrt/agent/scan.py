"""Read files and folders for the read-only tools, run as a script inside the sandbox.

``read_file``, ``list_dir``, ``glob`` and ``grep`` (without ripgrep), and the
look at a file's current content that a ``write_file`` or ``edit_file``
confirmation diffs against, run this module as a script
(``python -I -S scan.py MODE ARGS...``) in the tool's sandbox: the kernel, not
a filter on names, keeps agentrt's own state out of what they see. Like
`agentrt.agent.atomic` it imports nothing but the standard library, so it runs
where agentrt's package is not importable, and through sudo.

Modes (every path absolute):

``cat PATH``
    the file's bytes on standard output.
``read PATH OFFSET LIMIT MAX_BYTES``
    lines OFFSET (from 1) to OFFSET+LIMIT-1, at most MAX_BYTES of them, as a
    JSON object: ``text``, ``first``, ``last`` (0 when none), ``total`` (the
    file's lines) and ``cut`` (true when MAX_BYTES stopped it).
``list DIR``
    the folder's entries as JSON: ``entries`` (``[name, kind, size]``, kind
    ``dir``, ``file``, ``link`` or ``other``) and ``ignored`` (how many
    ``.gitignore`` hid, ``.git`` included).
``files ROOT``
    the files under ROOT (or ROOT itself, a file) that ``.gitignore`` does not
    ignore, NUL-separated, absolute, sorted.
``grep PATTERN ROOT MAX``
    the lines matching the Python regular expression PATTERN in those files,
    one JSON object a line (``path`` absolute, ``line``, ``text``), the first
    MAX of them, then ``{"total": N}``.

What ``.gitignore`` ignores is what git says (``git ls-files --others
--exclude-standard``, ``git check-ignore``) when the folder is in a git work
tree, as ripgrep does; outside one nothing is ignored but ``.git`` folders.
A failure prints ``agentrt-scan-error:ERRNO:STRERROR:PATH`` on standard error
and exits with `EXIT_OS_ERROR`.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys

#: Exit status when an OSError stopped the scan (its errno is printed).
EXIT_OS_ERROR = 3
#: How an OSError is reported on standard error: ``PREFIX:errno:strerror:path``.
ERROR_PREFIX = "agentrt-scan-error"
#: How much of a file is looked at to tell a binary file (a NUL byte in it), as git does.
BINARY_PROBE = 8000


def _git(folder: str, *args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes] | None:
    """`git -C folder ARGS`, or None when git is not installed.

    A repository's own configuration could name a program for git to run
    (``core.fsmonitor``): turned off, so a tool that only reads never runs one.
    """
    try:
        return subprocess.run(
            ["git", "-c", "core.fsmonitor=false", "-C", folder, *args],
            input=stdin,
            capture_output=True,
            check=False,
        )
    except OSError:
        return None


def _in_work_tree(folder: str) -> bool:
    done = _git(folder, "rev-parse", "--is-inside-work-tree")
    return done is not None and done.returncode == 0 and done.stdout.strip() == b"true"


def _walk(root: str) -> list[str]:
    found: list[str] = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d != ".git"]
        rel = os.path.relpath(folder, root)
        for name in names:
            found.append(name if rel == "." else os.path.join(rel, name))
    return found


def _base(root: str) -> str:
    """The folder the names `files` gives are relative to."""
    return root if os.path.isdir(root) else os.path.dirname(root)


def files(root: str) -> list[str]:
    """The files under `root` that ``.gitignore`` does not ignore, relative to it, sorted."""
    info = os.stat(root)
    if not stat.S_ISDIR(info.st_mode):
        return [os.path.basename(root)]
    if not _in_work_tree(root):
        return sorted(_walk(root))
    done = _git(root, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    if done is None or done.returncode != 0:
        return sorted(_walk(root))
    names = {n for n in os.fsdecode(done.stdout).split("\0") if n}
    # A tracked file deleted from the work tree is still listed; a submodule is a folder.
    return sorted(n for n in names if os.path.isfile(os.path.join(root, n)))


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "link"
    if stat.S_ISDIR(mode):
        return "dir"
    return "file" if stat.S_ISREG(mode) else "other"


def listing(folder: str) -> dict[str, object]:
    """The entries of `folder` that ``.gitignore`` does not ignore (see the module's doc)."""
    names = sorted(os.listdir(folder))
    hidden = {n for n in names if n == ".git"}
    rest = [n for n in names if n not in hidden]
    if rest and _in_work_tree(folder):
        asked = b"".join(os.fsencode(n) + b"\0" for n in rest)
        done = _git(folder, "check-ignore", "-z", "--stdin", stdin=asked)
        if done is not None and done.returncode in (0, 1):
            hidden |= {n for n in os.fsdecode(done.stdout).split("\0") if n}
    entries: list[list[object]] = []
    for name in names:
        if name in hidden:
            continue
        try:
            info = os.lstat(os.path.join(folder, name))
        except OSError:
            continue
        entries.append([name, _kind(info.st_mode), info.st_size])
    return {"entries": entries, "ignored": len(hidden)}


def read_lines(path: str, offset: int, limit: int, max_bytes: int) -> dict[str, object]:
    """Lines `offset` to ``offset + limit - 1`` of `path`, bounded by `max_bytes` (see the doc)."""
    kept: list[bytes] = []
    size = 0
    total = 0
    cut = False
    with open(path, "rb") as f:
        for total, line in enumerate(f, start=1):
            if total < offset or total >= offset + limit or cut:
                continue
            if size + len(line) > max_bytes:
                cut = True
                if not kept:
                    kept.append(line[:max_bytes])
                continue
            kept.append(line)
            size += len(line)
    first = offset if kept else 0
    return {
        "text": b"".join(kept).decode("utf-8", "replace"),
        "first": first,
        "last": first + len(kept) - 1 if kept else 0,
        "total": total,
        "cut": cut,
    }


def grep(pattern: str, root: str, most: int) -> int:
    """Print the first `most` matches of `pattern` under `root`; return how many there are."""
    regex = re.compile(pattern)
    total = 0
    base = _base(root)
    out = sys.stdout
    for rel in files(root):
        path = os.path.join(base, rel)
        if os.path.islink(path) and path != root:
            continue  # as ripgrep: a link found in a folder is not followed
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError:
            continue
        if b"\0" in data[:BINARY_PROBE]:
            continue
        lines = data.decode("utf-8", "replace").split("\n")
        if lines[-1] == "":
            lines.pop()  # the end of the last line, not a line of its own
        for number, line in enumerate(lines, start=1):
            if regex.search(line):
                total += 1
                if total <= most:
                    text = line[:-1] if line.endswith("\r") else line
                    out.write(json.dumps({"path": path, "line": number, "text": text}) + "\n")
    out.write(json.dumps({"total": total}) + "\n")
    return total


def _main(argv: list[str]) -> int:
    mode, args = (argv[1], argv[2:]) if len(argv) > 1 else ("", [])
    try:
        if mode == "cat" and len(args) == 1:
            with open(args[0], "rb") as f:
                sys.stdout.buffer.write(f.read())
        elif mode == "read" and len(args) == 4:
            offset, limit, most = (int(a) for a in args[1:])
            print(json.dumps(read_lines(args[0], offset, limit, most)))
        elif mode == "list" and len(args) == 1:
            print(json.dumps(listing(args[0])))
        elif mode == "files" and len(args) == 1:
            base = _base(args[0])
            found = (os.fsencode(os.path.join(base, n)) + b"\0" for n in files(args[0]))
            sys.stdout.buffer.write(b"".join(found))
        elif mode == "grep" and len(args) == 3:
            try:
                re.compile(args[0])
            except re.error as exc:
                print(f"{ERROR_PREFIX}:0:invalid pattern ({exc}):{args[0]}", file=sys.stderr)
                return EXIT_OS_ERROR
            grep(args[0], args[1], int(args[2]))
        else:
            print("usage: scan.py cat|read|list|files|grep ARGS...", file=sys.stderr)
            return 2
    except OSError as exc:
        print(f"{ERROR_PREFIX}:{exc.errno}:{exc.strerror}:{exc.filename}", file=sys.stderr)
        return EXIT_OS_ERROR
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv))

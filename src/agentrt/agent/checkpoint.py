"""Checkpoints of what each tool call changes in the working folder, and the undo of them.

Before ``write_file`` or ``edit_file`` replaces a file, the file's old content
(or its absence) is kept; around a ``shell`` command, the working folder is
compared before and after. Old contents are kept content-addressed under the
state dir (``checkpoints/objects/SHA256``), once whatever number of calls share
them; each call's changes are one JSON line of its session's log
(``checkpoints/log/SESSION.jsonl``): the session, the task, the call, and for
each path its state before and after (kind, mode, content hash or link
target; ``null`` for no file).

A shell command's changes are found by comparing the working folder before and
after it: a walk that stats every entry (size, mtime, ctime, inode, mode) and
reads only the files whose stat changed since the last walk of that folder,
keeping their content as the next call's "before". The first command in a
folder keeps every file of it once; later ones keep only what changed. It is
bounded: a call whose old contents would take more than `Checkpoints.limit`
bytes, or whose folder has more than `WALK_ENTRIES` entries, is recorded as not
undoable, and its confirmation says so before it runs. As with git, a file
rewritten within one timestamp tick at the same size and inode, and with its
ctime put back, would go unseen; nothing ordinary does that.

After the first walk, the folder's inotify watch (`agentrt.agent.fswatch`) says
what changed since: before and after each command, the last walk is mended with
the stat (and content) of the files its events name, and a walk is made again
only when they cannot name them (a folder made or moved, an overflow, more than
`fswatch.CHANGED_PATHS`); where inotify cannot see every change, every look is a walk.
A few small files are done on the caller's thread (`before_nowait`,
`after_nowait`), the rest in a thread. What makes no event goes unseen until the
next walk: a write through a shared map by a process still running when its
command ends, or through a hard link made outside the folder since its last
walk (files with several links at that walk are stat'ed every time).

An undo (`Checkpoints.undo`) restores every path the undone calls changed to
its state before the first of them. A path that changed since (by the person
or another run) is a conflict: nothing is touched until the caller says so
(`force`), and then its newer content is kept beside it
(``NAME.agentrt-undo-N``), named in the result. Before any file is touched, the
undo's every step is written to ``checkpoints/undo.json`` (synced); each step
can be done again, so `Checkpoints.recover` (run whenever a runtime opens the
state dir) finishes an undo a kill interrupted: every file ends as after it,
and one killed before the journal was written ends as before it.

This module is the runtime's: it runs in the runner's process, on the user's
own files, as the user; the tools' sandbox confines the tools, not agentrt.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import stat
import threading
import time
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Mapping
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from typing import Final
from typing import NamedTuple

import attrs

from ..config.statedir import write_synced
from ..vocab.reprs import mutable
from ..vocab.reprs import record
from .fswatch import FolderWatch

#: The most bytes of old content one call may keep (a call over it cannot be undone).
CHECKPOINT_LIMIT: Final = 256 * 1024 * 1024
#: The most bytes of a file a shell command wrote that are kept at once, by the walk after
#: it (they were read for their hash): the walk before the next command need read no
#: file then. A larger file is kept by that walk, if there is one.
KEEP_AT_ONCE: Final = 1024 * 1024
#: The most entries (files, folders, links) a shell command's walk of the working folder visits.
WALK_ENTRIES: Final = 100_000
#: What `Checkpoints.before_nowait` and `after_nowait` do on the caller's thread (an event
#: loop's) at most: stat and keep this many paths, of this many bytes in all, in a folder
#: of this many entries (its index is copied). More goes to a thread.
SMALL_PATHS: Final = 32
SMALL_BYTES: Final = 64 * 1024
SMALL_FOLDER: Final = 10_000
#: The most working folders one `Checkpoints` watches (each an inotify instance: a user
#: has 128 by default); a walk in any other folder is never left out.
WATCHED_FOLDERS: Final = 4
#: What the kept-beside copy of a conflicting file is named after: ``NAME.agentrt-undo-N``.
BESIDE: Final = ".agentrt-undo-"

_FILE: Final = "file"
_DIR: Final = "dir"
_LINK: Final = "link"


@record
class Entry:
    """The state of one path: a file (its content's hash), a folder, or a symbolic link."""

    kind: str
    mode: int = 0
    #: A file's content hash (`sha256` hex), or a link's target.
    data: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "mode": self.mode, "data": self.data}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any] | None) -> Entry | None:
        if raw is None:
            return None
        return cls(str(raw["kind"]), int(raw["mode"]), str(raw["data"]))


@record
class Change:
    """One path a call changed: its state before and after (None: no such path)."""

    path: str
    old: Entry | None
    new: Entry | None


@record
class CallRecord:
    """What one call changed, as its session's log keeps it."""

    session: str
    task: str
    call: str
    tool: str
    at: float
    changes: tuple[Change, ...] = ()
    #: Why the call cannot be undone (over the limit, a restricted path), or None.
    not_undoable: str | None = None
    #: Where its task's messages begin among the session's (the index of its user message).
    first: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "session": self.session,
            "task": self.task,
            "call": self.call,
            "tool": self.tool,
            "at": self.at,
            "not_undoable": self.not_undoable,
            "first": self.first,
            "changes": [
                {
                    "path": c.path,
                    "old": c.old.to_json() if c.old else None,
                    "new": c.new.to_json() if c.new else None,
                }
                for c in self.changes
            ],
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> CallRecord:
        changes = tuple(
            Change(str(c["path"]), Entry.from_json(c["old"]), Entry.from_json(c["new"]))
            for c in raw["changes"]
        )
        return cls(
            str(raw["session"]),
            str(raw["task"]),
            str(raw["call"]),
            str(raw["tool"]),
            float(raw["at"]),
            changes,
            raw.get("not_undoable"),
            int(raw.get("first", 0)),
        )


@record
class UndoResult:
    """What an undo did, or would do: the paths restored and the conflicts found."""

    #: The paths put back as they were (or, before it runs, that would be).
    restored: tuple[str, ...]
    #: Paths that changed since the calls: left alone unless forced, then kept beside.
    conflicts: tuple[str, ...]
    #: Where each conflicting path's newer content was kept (path -> beside).
    kept: Mapping[str, str] = attrs.field(factory=dict)
    #: The calls undone (or to undo), oldest first.
    calls: tuple[str, ...] = ()
    #: The calls that could not be undone, and why.
    skipped: Mapping[str, str] = attrs.field(factory=dict)
    #: Whether files were touched (False when conflicts stopped it, or nothing was to do).
    done: bool = False


class _Stat(NamedTuple):
    """What a walk compares: a path's kind, mode, size, times and inode (a tuple: fast)."""

    kind: str
    mode: int
    size: int
    mtime: int
    ctime: int
    ino: int


#: The kind of each file type a walk keeps.
_KINDS: Final = {stat.S_IFREG: _FILE, stat.S_IFDIR: _DIR, stat.S_IFLNK: _LINK}
#: Makes a `_Stat` of a tuple of its fields, without the Python-level ``__new__`` of a
#: named tuple: a walk makes one an entry.
_STAT: Final = tuple.__new__


def _stat_of(st: os.stat_result) -> _Stat | None:
    kind = _KINDS.get(stat.S_IFMT(st.st_mode))
    if kind is None:
        return None  # a socket, a fifo, a device: not kept
    return _Stat(
        kind, stat.S_IMODE(st.st_mode), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino
    )


def digest(data: bytes) -> str:
    """The SHA-256 of `data` in hex: the name of its object."""
    return hashlib.sha256(data).hexdigest()


def _fsync_dir(folder: str) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _write_durably(path: Path, data: bytes, mode: int = 0o600, *, sync: bool = True) -> None:
    """Write `path` whole (temp file, fsync, rename, fsync of the folder); without `sync`,
    whole all the same (a kill leaves it or nothing), but not waited to reach the disk."""
    # A name of its own: two calls may keep the same object at once.
    tmp = path.with_name(f".{path.name}.{os.urandom(6).hex()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if sync:
        _fsync_dir(str(path.parent))


@record
class Snapshot:
    """A walk of a working folder: every path's stat, and whether the walk was cut short."""

    entries: dict[str, _Stat]
    cut: bool = False
    #: The object of each file (and the target of each link) the walk saw, once kept.
    kept: dict[str, str] = attrs.field(factory=dict)
    #: The files whose content hash is known but not kept yet (a command's new content,
    #: kept only if another call changes it again: see `Checkpoints.before`).
    unkept: set[str] = attrs.field(factory=set)
    #: The files with more than one link: a write through a link outside the tree makes no
    #: event of the folder's watch, so their stat is taken again whatever it says.
    linked: list[str] = attrs.field(factory=list)


@mutable
class Checkpoints:
    """The checkpoints of a state dir: objects, each session's log, the undo journal."""

    root: Path = attrs.field(converter=Path)
    limit: int = CHECKPOINT_LIMIT
    walk_entries: int = WALK_ENTRIES
    #: Whether bytes hold a stored secret's value (the redactor's search): such content is
    #: never kept, so no secret lies in the checkpoints; an undo then names the file and
    #: leaves it alone, as for any old content that is gone.
    holds_secret: Callable[[bytes], bool] | None = None
    #: Per working folder: its last walk, whose kept files need not be read again.
    _index: dict[str, Snapshot] = attrs.field(factory=dict, init=False)
    #: Per working folder: whether anything in it changed since its last walk.
    _watches: dict[str, FolderWatch] = attrs.field(factory=dict, init=False)
    _watches_lock: threading.Lock = attrs.field(factory=threading.Lock, init=False)

    @property
    def objects(self) -> Path:
        return self.root / "objects"

    @property
    def journal(self) -> Path:
        return self.root / "undo.json"

    def _log(self, session: str) -> Path:
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in session)
        return self.root / "log" / f"{safe}.jsonl"

    # -- keeping --------------------------------------------------------------------

    def keep(self, data: bytes) -> str:
        """Keep `data` as an object (once); its hash."""
        sha = digest(data)
        path = self.objects / sha[:2] / sha
        if self.holds_secret is not None and self.holds_secret(data):
            return sha
        if not path.exists():
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            # Not synced one by one: the first command in a folder keeps all of it, and a
            # sync each would take seconds. A kill loses none; a power cut may, and an undo
            # then names the files whose old content is gone instead of putting them back.
            _write_durably(path, data, sync=False)
        return sha

    def _has(self, sha: str) -> bool:
        return (self.objects / sha[:2] / sha).exists()

    def content(self, sha: str) -> bytes:
        """The bytes of object `sha`."""
        return (self.objects / sha[:2] / sha).read_bytes()

    def entry_of(self, path: Path, *, keep: bool | int = True) -> Entry | None:
        """The state of `path` now (its content kept as an object with `keep`, or when an int,
        if it is at most that many bytes); None if absent."""
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return None
        info = _stat_of(st)
        if info is None:
            raise OSError(errno.EINVAL, "not a file, folder or link", str(path))
        if info.kind == _LINK:
            return Entry(_LINK, 0, os.readlink(path))
        if info.kind == _DIR:
            return Entry(_DIR, info.mode)
        data = path.read_bytes()
        kept = keep if isinstance(keep, bool) else len(data) <= keep
        return Entry(_FILE, info.mode, self.keep(data) if kept else digest(data))

    def too_big(self, path: Path) -> str | None:
        """Why a write of `path` could not be undone (its old content is over the limit)."""
        try:
            size = os.lstat(path).st_size
        except OSError:
            return None
        if size > self.limit:
            return f"{path} is {size:,} bytes, over the checkpoint limit of {self.limit:,}"
        return None

    def record(self, call: CallRecord) -> None:
        """Append `call` to its session's log, before its change is made.

        Not synced: a kill loses nothing written, and a power cut may lose the
        last records (those calls then cannot be undone), never an object one
        of them names: objects are synced as they are kept.
        """
        log = self._log(call.session)
        log.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        line = json.dumps(call.to_json(), separators=(",", ":")) + "\n"
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, line.encode("utf-8"))
        finally:
            os.close(fd)

    def _mark_undone(self, session: str, calls: Sequence[str]) -> None:
        log = self._log(session)
        log.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        line = json.dumps({"undone": list(calls), "at": time.time()}) + "\n"
        write_synced(log, line.encode("utf-8"), os.O_APPEND)

    def records(self, session: str) -> list[CallRecord]:
        """The session's calls that changed files and are not undone, oldest first."""
        try:
            text = self._log(session).read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        calls: list[CallRecord] = []
        for line in text.splitlines():
            try:
                raw = json.loads(line)
                if "undone" in raw:
                    gone = {str(call) for call in raw["undone"]}
                    calls = [c for c in calls if c.call not in gone]
                else:
                    # A call run again (a resume) is recorded again: the undo puts back the
                    # state before its first record.
                    calls.append(CallRecord.from_json(raw))
            except (ValueError, KeyError, TypeError):
                continue  # a line cut short by a kill: the call it began made no change
        return calls

    # -- a shell command's walk -----------------------------------------------------

    def walk(
        self, workdir: Path, skip: Sequence[Path] = (), watch: FolderWatch | None = None
    ) -> Snapshot:
        """Stat every entry under `workdir` (not following links, leaving out `skip`).

        With `watch`, each folder is armed before its entries are read (drain it first).
        """
        entries: dict[str, _Stat] = {}
        linked: list[str] = []
        skipped = {str(p) for p in skip}
        room = self.walk_entries
        # The loop runs once an entry of the folder (and twice a command): names bound here.
        scandir, kinds, ifmt, imode, make = os.scandir, _KINDS, stat.S_IFMT, stat.S_IMODE, _STAT
        in_flight = _IN_FLIGHT
        arm = None
        if watch is not None and watch.usable:
            watch.begin()
            arm = watch.arm
        root = str(workdir)
        stack = [(root, watch.device if watch is not None else 0)]
        while stack:
            folder, device = stack.pop()
            if arm is not None:
                arm(folder, device)
            try:
                scan = scandir(folder)
            except OSError:
                continue
            with scan:
                for item in scan:
                    path = item.path
                    if path in skipped or path in in_flight:
                        continue  # agentrt's own state, or another call's write under way
                    try:
                        st = item.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    mode = st.st_mode
                    kind = kinds.get(ifmt(mode))
                    if kind is None:
                        continue  # a socket, a fifo, a device: not kept
                    if not room:
                        if watch is not None:
                            watch.spoil()
                        return Snapshot(entries, cut=True, linked=linked)
                    room -= 1
                    entries[path] = make(
                        _Stat,
                        (kind, imode(mode), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino),
                    )
                    if kind == _DIR:
                        stack.append((path, st.st_dev))
                    elif st.st_nlink > 1 and kind == _FILE:
                        linked.append(path)
        return Snapshot(entries, linked=linked)

    def _last(self, workdir: Path) -> Snapshot:
        return self._index.get(str(workdir), Snapshot({}))

    @staticmethod
    def _to_keep(
        last: Snapshot, snapshot: Snapshot, changed: set[str] | None = None
    ) -> tuple[dict[str, str], set[str]]:
        """What of `last`'s kept objects still holds for `snapshot`, and the paths to keep anew
        (`changed`: the only paths whose stat may differ, when known).

        Compared as sets of (path, stat) pairs, so that a walk of a large folder in which
        one file changed costs its walk and little more.
        """
        entries = snapshot.entries
        if changed is not None:
            # Mended by the watch's events: what they did not name is as it was, kept or not
            # (a file that could not be read then cannot now: a chmod would be an event).
            touched = changed | (last.unkept & entries.keys())
            kept = dict(last.kept)
            for path in touched:
                kept.pop(path, None)
            return kept, {p for p in touched if p in entries and entries[p].kind != _DIR}
        changed = {path for path, _ in entries.items() - last.entries.items()}
        changed |= last.unkept & entries.keys()
        kept = {p: sha for p, sha in last.kept.items() if p in entries and p not in changed}
        anew = {p for p, info in entries.items() if info.kind != _DIR and p not in kept}
        return kept, anew

    @contextlib.contextmanager
    def _watching(self, workdir: Path) -> Iterator[FolderWatch | None]:
        """The folder's watch, its lock held (None where there is none): a drain, the walk
        after it and the index it leaves are one step for any other call's walk."""
        key = str(workdir)
        with self._watches_lock:
            watch = self._watches.get(key)
            if watch is None and len(self._watches) < WATCHED_FOLDERS:
                watch = self._watches[key] = FolderWatch(key)
        if watch is None or not watch.usable:
            yield None
            return
        with watch.lock:
            yield watch

    def _walked(
        self, workdir: Path, skip: Sequence[Path], watch: FolderWatch | None, *, walk: bool = True
    ) -> tuple[Snapshot, set[str] | None] | None:
        """The folder now, and the paths that may differ from its last walk (None: any).

        The last walk stands for it when the folder's watch says what changed since: no
        event (every folder armed, the same paths left out), or only events that name
        files, whose stat is then taken again (the watch is told by `_settle`). Otherwise
        a walk; or None without `walk`.
        """
        hidden = tuple(str(p) for p in skip)
        if watch is None:
            return (self.walk(workdir, skip), None) if walk else None
        watch.drain()
        last = self._index.get(str(workdir))
        if last is not None and not last.cut and watch.skip == hidden:
            named = set() if watch.armed else watch.changed
            if named is not None and (walk or len(named) + len(last.linked) <= SMALL_PATHS):
                named = named | set(last.linked)
                mended = self._mended(last, named, hidden)
                if mended is not None:
                    return mended, named
        if not walk:
            return None
        watch.skip = hidden
        return self.walk(workdir, skip, watch), None

    def _settle(
        self, workdir: Path, snapshot: Snapshot, watch: FolderWatch | None, named: set[str] | None
    ) -> None:
        """`snapshot` is the folder's last walk now (mended with `named`, or walked)."""
        self._index[str(workdir)] = snapshot
        if watch is not None and named is not None:
            watch.mended()

    def _mended(self, last: Snapshot, paths: set[str], hidden: tuple[str, ...]) -> Snapshot | None:
        """`last` with the stat of each of `paths` taken again; None if a folder came or went
        (what is in it is not known: walk)."""
        if not paths:
            return Snapshot(last.entries, linked=last.linked)
        entries = dict(last.entries)
        linked = set(last.linked)
        for path in paths:
            old = entries.pop(path, None)
            linked.discard(path)
            if path in hidden or path in _IN_FLIGHT:
                continue
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                st = None
            except OSError:
                return None
            info = _stat_of(st) if st is not None else None
            if (old is not None and old.kind == _DIR) != (info is not None and info.kind == _DIR):
                return None
            if info is not None and st is not None:
                entries[path] = info
                if info.kind == _FILE and st.st_nlink > 1:
                    linked.add(path)
        if len(entries) > self.walk_entries:
            return None
        return Snapshot(entries, linked=sorted(linked))

    def before_nowait(self, workdir: Path, skip: Sequence[Path]) -> Snapshot | None:
        """`before` when it does not block for long: the folder's watch says what changed
        since its last walk, at most `SMALL_PATHS` files of `SMALL_BYTES` in all to keep, in
        a folder of at most `SMALL_FOLDER` entries. None: call `before` (in a thread)."""
        watch = self._watches.get(str(workdir))
        if watch is None or not watch.usable or not watch.lock.acquire(blocking=False):
            return None  # another call's walk holds it: `before` waits for it
        try:
            last = self._index.get(str(workdir))
            if last is None or len(last.entries) > SMALL_FOLDER:
                return None
            found = self._before(workdir, skip, watch, small=True)
            return None if isinstance(found, str) else found
        finally:
            watch.lock.release()

    def before(self, workdir: Path, skip: Sequence[Path]) -> Snapshot | str:
        """Walk `workdir` and keep every file changed since the last walk; or why it cannot.

        The walk is left out when the folder's watch (`agentrt.agent.fswatch`) says
        nothing in it changed since the last one.
        """
        with self._watching(workdir) as watch:
            found = self._before(workdir, skip, watch)
        assert found is not None  # it walks when it must
        return found

    def _before(
        self, workdir: Path, skip: Sequence[Path], watch: FolderWatch | None, *, small: bool = False
    ) -> Snapshot | str | None:
        why = None
        last = self._last(workdir)
        walked = self._walked(workdir, skip, watch, walk=not small)
        if walked is None:
            return None
        snapshot, changed = walked
        kept, anew = ({}, set()) if snapshot.cut else self._to_keep(last, snapshot, changed)
        entries = snapshot.entries
        size = sum(entries[p].size for p in anew if entries[p].kind == _FILE)
        if small and (len(anew) > SMALL_PATHS or size > SMALL_BYTES):
            return None  # nothing settled: the watch still names what changed
        if snapshot.cut:
            why = f"the working folder has more than {self.walk_entries:,} entries"
        elif size > self.limit:
            why = (
                f"its files would take {size:,} bytes to keep, over the checkpoint limit "
                f"of {self.limit:,}"
            )
        if why is not None:
            self._index.pop(str(workdir), None)
            return why
        for path in anew:
            try:
                if entries[path].kind == _FILE:
                    kept[path] = self.keep(Path(path).read_bytes())
                else:
                    kept[path] = os.readlink(path)
            except OSError:
                continue
        snapshot.kept.update(kept)
        self._settle(workdir, snapshot, watch, changed)
        return snapshot

    def after(self, workdir: Path, skip: Sequence[Path], before: Snapshot) -> tuple[Change, ...]:
        """The changes since `before` (walking `workdir` again and keeping what changed)."""
        with self._watching(workdir) as watch:
            found = self._after(workdir, skip, before, watch)
        assert found is not None  # it walks when it must
        return found

    def after_nowait(
        self, workdir: Path, skip: Sequence[Path], before: Snapshot
    ) -> tuple[Change, ...] | None:
        """`after` when it does not block for long (as `before_nowait`). None: call `after`."""
        watch = self._watches.get(str(workdir))
        if watch is None or not watch.usable or not watch.lock.acquire(blocking=False):
            return None
        try:
            if len(before.entries) > SMALL_FOLDER:
                return None
            return self._after(workdir, skip, before, watch, small=True)
        finally:
            watch.lock.release()

    def _after(
        self,
        workdir: Path,
        skip: Sequence[Path],
        before: Snapshot,
        watch: FolderWatch | None,
        *,
        small: bool = False,
    ) -> tuple[Change, ...] | None:
        shas = before.kept
        base = self._index.get(str(workdir))
        walked = self._walked(workdir, skip, watch, walk=not small)
        if walked is None:
            return None
        now, named = walked
        old_entries, new_entries = before.entries, now.entries
        if named is not None and base is not None and base.entries is old_entries:
            # Nothing else changed since `before`: only the paths the events named can differ,
            # whatever their stat says (a file written twice within one timestamp tick).
            differ = {p for p in named if p in old_entries or p in new_entries}
        elif small:
            return None
        else:
            differ = {path for path, _ in new_entries.items() ^ old_entries.items()}
        if small:
            files = [new_entries[p] for p in differ if p in new_entries]
            if len(differ) > SMALL_PATHS or sum(f.size for f in files) > SMALL_BYTES:
                return None  # nothing settled: the watch still names what changed
        # What `before` kept holds still for every path not among the differing (a path gone
        # is among them).
        kept = now.kept
        kept.update(shas)
        for path in differ:
            kept.pop(path, None)
        now.unkept.update(p for p in before.unkept if p in kept)
        changes: list[Change] = []
        for path in sorted(differ):
            old, new = old_entries.get(path), new_entries.get(path)
            new_entry: Entry | None = None
            if new is not None:
                try:
                    # Kept at once if small (it is read for its hash anyway); a larger one is
                    # kept by the next walk before a command, if there is one.
                    new_entry = self.entry_of(Path(path), keep=KEEP_AT_ONCE)
                except OSError:
                    continue
                if new_entry is not None and new_entry.kind != _DIR:
                    kept[path] = new_entry.data
                    if new_entry.kind == _FILE and not self._has(new_entry.data):
                        now.unkept.add(path)
            old_entry = self._entry_from(path, old, shas) if old is not None else None
            if old_entry == new_entry:
                continue  # touched, not changed (a folder's entries are changes of their own)
            changes.append(Change(path, old_entry, new_entry))
        self._settle(workdir, now, watch, named)
        return tuple(changes)

    def close(self) -> None:
        """Give back the folders' watches (a walk after it walks, watched anew)."""
        with self._watches_lock:
            watches, self._watches = list(self._watches.values()), {}
        for watch in watches:
            with watch.lock:
                watch.close()

    @staticmethod
    def _entry_from(path: str, info: _Stat, shas: Mapping[str, str]) -> Entry | None:
        if info.kind == _FILE:
            sha = shas.get(path)
            return Entry(_FILE, info.mode, sha) if sha is not None else None
        if info.kind == _DIR:
            return Entry(_DIR, info.mode)
        target = shas.get(path)
        return Entry(_LINK, 0, target) if target is not None else None

    # -- undoing --------------------------------------------------------------------

    def undo(
        self,
        session: str,
        calls: Iterable[CallRecord],
        *,
        force: bool = False,
        dry_run: bool = False,
    ) -> UndoResult:
        """Put back every path `calls` changed as it was before the first of them.

        Without `force`, a path changed since the calls stops it (nothing is
        touched: the result lists the conflicts); with it, each conflicting
        path's newer content is kept beside it first. With `dry_run`, nothing is
        touched: the result says what would be put back.
        """
        todo = sorted(calls, key=lambda c: c.at)
        skipped = {c.call: c.not_undoable for c in todo if c.not_undoable}
        undoable = [c for c in todo if not c.not_undoable]
        first: dict[str, Entry | None] = {}
        last: dict[str, Entry | None] = {}
        for call in undoable:
            for change in call.changes:
                first.setdefault(change.path, change.old)
                last[change.path] = change.new
        steps: list[dict[str, Any]] = []
        restored: list[str] = []
        conflicts: list[str] = []
        kept: dict[str, str] = {}
        for path in sorted(first):
            target, expected = first[path], last[path]
            if target is not None and target.kind == _FILE and not self._has(target.data):
                skipped[path] = "its old content is gone from the checkpoints (a power cut?)"
                continue
            try:
                # Under a link to elsewhere, the path is not in the working folder at all.
                reached = _reached(os.path.dirname(path))
                now = self.entry_of(Path(path), keep=False) if reached else None
            except OSError:
                now = Entry("other")
            if _same(now, target):
                continue
            restored.append(path)
            if dry_run:
                continue
            step: dict[str, Any] = {
                "path": path,
                "target": target.to_json() if target else None,
            }
            if not _same(now, expected):
                conflicts.append(path)
                if now is not None and now.kind == _FILE:
                    self.keep(Path(path).read_bytes())
                    beside = _beside(path)
                    kept[path] = beside
                    step["beside"] = {"path": beside, "sha": now.data, "mode": now.mode}
            steps.append(step)
        ids = tuple(dict.fromkeys(c.call for c in todo))
        if dry_run or (conflicts and not force):
            return UndoResult(tuple(restored), tuple(conflicts), {}, ids, skipped)
        journal = {"session": session, "calls": list(ids), "steps": steps}
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        _write_durably(self.journal, json.dumps(journal).encode("utf-8"))
        self._replay(journal)
        return UndoResult(
            tuple(restored), tuple(conflicts), kept, ids, skipped, done=bool(steps) or bool(ids)
        )

    def recover(self) -> bool:
        """Finish an undo a kill interrupted (its journal is there); whether there was one."""
        try:
            raw = json.loads(self.journal.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return False
        except ValueError:
            # Cut short before its rename: nothing was touched yet.
            self.journal.unlink()
            return False
        self._replay(raw)
        return True

    def _replay(self, journal: Mapping[str, Any]) -> None:
        """Do every step of `journal` (each can be done again), then mark its calls undone."""
        steps = journal["steps"]
        touched: set[str] = set()
        for step in steps:
            beside = step.get("beside")
            if beside is not None:
                _put(Path(beside["path"]), Entry(_FILE, int(beside["mode"]), beside["sha"]), self)
                touched.add(os.path.dirname(beside["path"]))
        # Removals first, the deepest first; then what is put back, the shallowest first.
        for step in sorted(steps, key=lambda s: -s["path"].count(os.sep)):
            target = Entry.from_json(step["target"])
            _clear(Path(step["path"]), target)
        for step in sorted(steps, key=lambda s: s["path"].count(os.sep)):
            target = Entry.from_json(step["target"])
            if target is not None:
                _put(Path(step["path"]), target, self)
            touched.add(os.path.dirname(step["path"]))
        # Each folder's entries reach the disk once, before the undo is marked done: until
        # then the journal, already synced, puts everything back again after a power cut.
        for folder in sorted(touched):
            _fsync_dir(folder)
        self._mark_undone(str(journal["session"]), journal["calls"])
        self.journal.unlink()
        _fsync_dir(str(self.root))

    # -- which calls -----------------------------------------------------------------

    def last_run(self, session: str) -> list[CallRecord]:
        """The calls of the session's last task that changed files and are not undone."""
        records = self.records(session)
        if not records:
            return []
        task = records[-1].task
        return [r for r in records if r.task == task]

    def of_task(self, session: str, task: str) -> list[CallRecord]:
        """The calls not undone of one task of the session."""
        return [r for r in self.records(session) if r.task == task]

    def from_turn(self, session: str, first: int) -> list[CallRecord]:
        """The calls not undone of the session's tasks that began at message `first` or later."""
        return [r for r in self.records(session) if r.first >= first]

    def count_files(self, calls: Iterable[CallRecord]) -> int:
        """How many paths undoing `calls` would touch."""
        return len({c.path for call in calls if not call.not_undoable for c in call.changes})


#: The temporary files of this process's writes under way (`in_flight`): such a file exists
#: only while a call (running beside a shell command) or an undo writes; it is never a
#: change of the walking call's, and an undo must not bring it back. Named one by one,
#: never by a pattern a command could give its own files to hide them from a walk.
_IN_FLIGHT: Final[set[str]] = set()


@contextlib.contextmanager
def in_flight(tmp: str | Path) -> Iterator[None]:
    """Leave the temporary file `tmp` of a write under way out of every walk while it lasts."""
    name = os.fspath(tmp)
    _IN_FLIGHT.add(name)
    try:
        yield
    finally:
        _IN_FLIGHT.discard(name)


def _same(now: Entry | None, want: Entry | None) -> bool:
    if now is None or want is None:
        return now is want
    if now.kind != want.kind:
        return False
    if now.kind == _LINK:
        return now.data == want.data
    return now.mode == want.mode and now.data == want.data


def _beside(path: str) -> str:
    n = 1
    while os.path.lexists(f"{path}{BESIDE}{n}"):
        n += 1
    return f"{path}{BESIDE}{n}"


def _tmp(path: Path) -> Path:
    return path.with_name(f".{path.name}.agentrt-undo")


def _clear(path: Path, target: Entry | None) -> None:
    """Remove what is at `path` unless it is of `target`'s kind (a folder is left if not empty).

    Nothing is removed where a symbolic link stands among its folders: there is nothing of
    the working folder there (see `_open_folder`).
    """
    parent = _open_folder(str(path.parent))
    if parent is None:
        return
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(_tmp(path).name, dir_fd=parent)
        try:
            st = os.stat(path.name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            return
        info = _stat_of(st)
        kind = info.kind if info else ""
        if target is not None and target.kind == kind and kind != _LINK:
            return
        if kind == _DIR:
            with contextlib.suppress(OSError):
                os.rmdir(path.name, dir_fd=parent)
        else:
            os.unlink(path.name, dir_fd=parent)
    finally:
        os.close(parent)


def _put(path: Path, target: Entry, checkpoints: Checkpoints) -> None:
    """Make `path` what `target` says, atomically (a temp file of a fixed name, renamed).

    Its folder is synced by the caller, once for all the paths it puts back (`_replay`).
    Missing folders on the way are made; where a symbolic link stands among them, nothing
    is written (it would be written where the link points, out of the working folder).
    """
    parent = _open_folder(str(path.parent), make=True)
    if parent is None:
        return
    try:
        _put_in(parent, path, target, checkpoints)
    finally:
        os.close(parent)


def _put_in(parent: int, path: Path, target: Entry, checkpoints: Checkpoints) -> None:
    name = path.name
    if target.kind == _DIR:
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, target.mode, dir_fd=parent)
        try:
            folder = os.open(name, _FOLDER | os.O_NOFOLLOW, dir_fd=parent)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                return  # a link or a file made there since: left as it is
            raise
        try:
            os.fchmod(folder, target.mode)
        finally:
            os.close(folder)
        return
    tmp = _tmp(path)
    with in_flight(tmp):
        if target.kind == _LINK:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp.name, dir_fd=parent)
            os.symlink(target.data, tmp.name, dir_fd=parent)
            os.replace(tmp.name, name, src_dir_fd=parent, dst_dir_fd=parent)
            return
        data = checkpoints.content(target.data)
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(tmp.name, flags, 0o600, dir_fd=parent)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fchmod(fd, target.mode)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp.name, name, src_dir_fd=parent, dst_dir_fd=parent)


_FOLDER: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


def _open_folder(folder: str, *, make: bool = False) -> int | None:
    """A descriptor of `folder` (absolute) reached without following any symbolic link;
    None where a link or a file stands on the way, or a folder is missing (made with `make`).

    An undo runs with the person's full access, outside the sandbox, over paths a tool
    could change: a folder a run wrote in, replaced by a link to another folder, must not
    have the undo remove or write what is there. Each step opens the next folder relative
    to the last (``O_NOFOLLOW``), so a link made between a check and the write is not
    followed either.
    """
    fd = os.open("/", _FOLDER)
    try:
        for part in Path(folder).parts[1:]:
            try:
                step = os.open(part, _FOLDER | os.O_NOFOLLOW, dir_fd=fd)
            except FileNotFoundError:
                if not make:
                    os.close(fd)
                    return None
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o777, dir_fd=fd)
                step = os.open(part, _FOLDER | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = step
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            return None
        raise
    return fd


def _reached(folder: str) -> bool:
    """Whether `folder` is there with no symbolic link on the way (`_open_folder`)."""
    fd = _open_folder(folder)
    if fd is None:
        return False
    os.close(fd)
    return True


def described(result: UndoResult) -> Iterator[str]:
    """The lines that tell a person what an undo did (or found in its way)."""
    if result.conflicts and not result.done:
        yield (
            f"{len(result.conflicts)} file(s) changed since the run; nothing was undone. "
            "Undo anyway to put them back, their newer content kept beside:"
        )
        for path in result.conflicts:
            yield f"  {path}"
        return
    if not result.restored and not result.skipped:
        yield "nothing to undo"
        return
    yield f"undid {len(result.calls)} call(s): {len(result.restored)} path(s) put back"
    for path in result.restored:
        kept = result.kept.get(path)
        yield f"  {path}" + (f" (its newer content kept in {kept})" if kept else "")
    for call, why in result.skipped.items():
        yield f"  {call} cannot be undone: {why}"


@record
class Turn:
    """One turn of a session: where it begins among its messages, its words, and how many
    files a rewind to it would put back (those the runs after it changed)."""

    index: int
    text: str
    files: int


def undo_note(result: UndoResult, rewound: bool) -> str:
    """The note that tells the model what an undo or a rewind did to the files."""
    first = (
        "The user rewound the conversation to this point: what was said after it is gone"
        if rewound
        else "The user undid the file changes of the last run"
    )
    if not result.restored:
        return f"{first}; no file had to be put back."
    paths = ", ".join(result.restored[:50]) + (", ..." if len(result.restored) > 50 else "")
    text = f"{first}; these files are back as they were before: {paths}."
    if result.kept:
        kept = ", ".join(f"{k} (kept in {v})" for k, v in result.kept.items())
        text += f" Their newer content, changed after the run, was kept beside: {kept}."
    return text

"""Undoing what a run changed: checkpoints of every `write_file`, `edit_file` and `shell` call,
put back byte for byte and mode for mode; a file changed since is a conflict, its newer
content kept beside; an undo killed at any moment finishes on the next start.

The tools run for real (the scripted model, the sandbox); the kills are SIGKILLs of a real
process at random moments, as in tests/test_atomic_write.py.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentrt import ALLOW_ONCE
from agentrt import Answer
from agentrt import Entry as Question
from agentrt import Outcome
from agentrt import Runtime
from agentrt import open_runtime
from agentrt.agent.checkpoint import BESIDE
from agentrt.agent.checkpoint import KEEP_AT_ONCE
from agentrt.agent.checkpoint import CallRecord
from agentrt.agent.checkpoint import Checkpoints
from agentrt.agent.checkpoint import Snapshot
from agentrt.agent.checkpoint import in_flight
from agentrt.agent.fswatch import FolderWatch
from agentrt.core.errors import NoSuchTurnError
from agentrt.core.errors import PendingTaskExistsError
from agentrt.core.errors import UnknownSessionError
from agentrt.models.messages import Role

from .conftest import Recorder
from .conftest import results_in_call_order
from .conftest import run_answering
from .test_sessions import RecordingModel

_sessions = itertools.count()

Tree = dict[str, tuple[str, int, bytes]]


def tree(root: Path) -> Tree:
    """Every path under `root`: its kind, mode and bytes (a link's target)."""
    out: Tree = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder, name)
            st = path.lstat()
            rel = str(path.relative_to(root))
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", 0, os.readlink(path).encode())
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", stat.S_IMODE(st.st_mode), b"")
            else:
                out[rel] = ("file", stat.S_IMODE(st.st_mode), path.read_bytes())
    return out


def checkpoints_of(rt: Runtime) -> Checkpoints:
    found = rt.executor.config.checkpoints
    assert found is not None
    return found


async def run(rt: Runtime, session: str, text: str) -> tuple[list[str], list[Question]]:
    asked: list[Question] = []

    async def give(entry: Question) -> Answer:
        asked.append(entry)
        return Answer(ALLOW_ONCE)

    ended, _ = await run_answering(rt, session, text, give)
    assert ended.outcome is Outcome.FINISHED, ended
    return results_in_call_order(await rt.store.load_history(session)), asked


def fill(workdir: Path) -> None:
    """A folder with a text file, a binary one, an executable, a link and a subfolder."""
    (workdir / "notes.txt").write_text("alpha\nbeta\n")
    (workdir / "notes.txt").chmod(0o640)
    (workdir / "blob.bin").write_bytes(bytes(range(256)) * 40)
    (workdir / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (workdir / "run.sh").chmod(0o750)
    (workdir / "old_name.txt").write_text("moved away\n")
    (workdir / "gone.txt").write_text("deleted\n")
    (workdir / "sub").mkdir(mode=0o750)
    (workdir / "sub" / "inner.txt").write_text("inside\n")
    os.symlink("notes.txt", workdir / "link")


async def test_write_edit_and_shell_changes_are_undone_byte_for_byte_and_mode_for_mode(
    runtime: Runtime, workdir: Path
) -> None:
    fill(workdir)
    before = tree(workdir)
    session = f"cli-undo{next(_sessions)}"
    command = (
        "rm gone.txt && mv old_name.txt new_name.txt && mkdir -m 700 made && "
        "head -c 3000 /dev/urandom > made/random.bin && chmod 600 run.sh && "
        "rm -r sub && printf 'x\\000y' >> blob.bin && ln -sf run.sh link"
    )
    results, _ = await run(
        runtime,
        session,
        f"write created.txt 'new file'; edit notes.txt beta BETA; sh {command}",
    )
    assert results[0].startswith("wrote") and results[1].startswith("edited"), results
    assert results[2].endswith("[exit status 0]"), results
    changed = tree(workdir)
    assert changed != before and "made/random.bin" in changed and "sub" not in changed

    checkpoints = checkpoints_of(runtime)
    calls = checkpoints.last_run(session)
    assert sorted(c.tool for c in calls) == ["edit_file", "shell", "write_file"]
    result = checkpoints.undo(session, calls)
    assert result.done and not result.conflicts
    assert tree(workdir) == before
    # Undone once: the next undo of the session finds nothing of that run.
    assert checkpoints.last_run(session) == []


async def test_undo_takes_back_the_last_run_only(runtime: Runtime, workdir: Path) -> None:
    session = f"cli-undo{next(_sessions)}"
    await run(runtime, session, "write a.txt one")
    first = tree(workdir)
    await run(runtime, session, "write a.txt two; sh touch b.txt")
    checkpoints = checkpoints_of(runtime)
    checkpoints.undo(session, checkpoints.last_run(session))
    assert tree(workdir) == first
    checkpoints.undo(session, checkpoints.last_run(session))
    assert tree(workdir) == {}


async def test_a_file_changed_since_the_run_is_a_conflict_and_its_content_kept_beside(
    runtime: Runtime, workdir: Path
) -> None:
    session = f"cli-undo{next(_sessions)}"
    (workdir / "a.txt").write_text("original\n")
    await run(runtime, session, "write a.txt 'by the run'; write b.txt 'also by the run'")
    (workdir / "a.txt").write_text("the person's newer text\n")
    checkpoints = checkpoints_of(runtime)
    calls = checkpoints.last_run(session)
    asked = checkpoints.undo(session, calls)
    # Nothing touched until the person says so.
    assert not asked.done
    assert asked.conflicts == (str(workdir / "a.txt"),)
    assert (workdir / "a.txt").read_text() == "the person's newer text\n"
    assert (workdir / "b.txt").exists()

    done = checkpoints.undo(session, calls, force=True)
    beside = workdir / f"a.txt{BESIDE}1"
    assert done.done and done.kept == {str(workdir / "a.txt"): str(beside)}
    assert (workdir / "a.txt").read_text() == "original\n"
    assert beside.read_text() == "the person's newer text\n"
    assert not (workdir / "b.txt").exists()


async def test_a_call_over_the_limit_says_before_it_runs_that_it_cannot_be_undone(
    runtime: Runtime, workdir: Path
) -> None:
    session = f"cli-undo{next(_sessions)}"
    checkpoints = checkpoints_of(runtime)
    checkpoints.limit = 100
    (workdir / "big.txt").write_text("x" * 101)
    _, asked = await run(runtime, session, "write big.txt small; sh echo more >> big.txt")
    prompts = sorted(q.request.prompt for q in asked)
    assert prompts[0] == (
        "run: echo more >> big.txt (cannot be undone: its files would take 101 bytes to keep, "
        "over the checkpoint limit of 100)"
    )
    assert prompts[1] == (
        f"write 5 bytes to {workdir / 'big.txt'} (cannot be undone: {workdir / 'big.txt'} is "
        "101 bytes, over the checkpoint limit of 100)"
    )
    left = tree(workdir)
    result = checkpoints.undo(session, checkpoints.last_run(session))
    assert set(result.skipped.values()) == {
        f"{workdir / 'big.txt'} is 101 bytes, over the checkpoint limit of 100",
        "its files would take 101 bytes to keep, over the checkpoint limit of 100",
    }
    assert tree(workdir) == left


# -- through the runtime: /undo and /rewind, the note the model reads --------------------


async def test_rewind_across_three_turns_puts_back_the_later_turns_files_and_words(
    tmp_path: Path, workdir: Path
) -> None:
    model = RecordingModel()
    async with open_runtime(tmp_path / "state", model=model, workdir=workdir) as rt:
        session = f"cli-undo{next(_sessions)}"
        await run(rt, session, "write a.txt one")
        after_first = tree(workdir)
        await run(rt, session, "write b.txt two; sh mkdir d && echo x > d/c.txt")
        await run(rt, session, "edit a.txt one ONE")
        turns = await rt.executor.turns(session)
        assert [(t.text, t.files) for t in turns] == [
            ("write a.txt one", 4),  # b.txt, d, d/c.txt, a.txt
            ("write b.txt two; sh mkdir d && echo x > d/c.txt", 1),
            ("edit a.txt one ONE", 0),
        ]
        with pytest.raises(NoSuchTurnError, match="no turn at message 1;"):
            await rt.executor.undo(session, turn=1)
        result = await rt.executor.undo(session, turn=turns[0].index)
        assert result.done and not result.conflicts
        assert tree(workdir) == after_first
        history = await rt.store.load_history(session)
        note = history[-1]
        assert note.role is Role.NOTE and note.rewinds == turns[1].index
        assert note.content.startswith("The user rewound the conversation to this point")
        assert str(workdir / "d" / "c.txt") in note.content
        # The next turn's model sees the first turn, the note, and nothing of the two after it.
        await run(rt, session, "hello")
        seen = model.seen[-1]
        said = [m.content for m in seen if m.role is Role.USER]
        assert said == ["write a.txt one", "hello"]
        assert any(m.rewinds is not None for m in seen if m.role is Role.NOTE)
        # Nothing left after it: a rewind to the last turn puts nothing back.
        assert [t.files for t in await rt.executor.turns(session)] == [0, 0]


async def test_undo_refuses_a_session_that_runs_or_has_a_pending_task(
    runtime: Runtime, workdir: Path
) -> None:
    with pytest.raises(UnknownSessionError):
        await runtime.executor.undo("cli-nosuch")
    session = f"cli-undo{next(_sessions)}"
    await run(runtime, session, "write a.txt one")
    # Nobody listens: the question parks the task.
    ended = await runtime.executor.run(session, "ask 'what now?'", owner="t", emit=Recorder())
    assert ended.outcome is Outcome.AWAITING_ANSWER, ended
    with pytest.raises(PendingTaskExistsError, match="has a pending task"):
        await runtime.executor.undo(session)
    assert (workdir / "a.txt").read_text() == "one"


async def test_undo_tells_the_model_which_files_are_back(runtime: Runtime, workdir: Path) -> None:
    session = f"cli-undo{next(_sessions)}"
    await run(runtime, session, "write a.txt one")
    result = await runtime.executor.undo(session)
    assert result.restored == (str(workdir / "a.txt"),)
    note = (await runtime.store.load_history(session))[-1]
    assert note.role is Role.NOTE and note.rewinds is None
    assert note.content == (
        "The user undid the file changes of the last run; these files are back as they were "
        f"before: {workdir / 'a.txt'}."
    )
    # Nothing more to undo: no second note.
    again = await runtime.executor.undo(session)
    assert not again.done and again.restored == ()
    assert (await runtime.store.load_history(session))[-1] == note


# -- an undo never acts through a link a tool put among a path's folders ----------------


def _outside(tmp_path: Path) -> Path:
    """A folder of the person's out of the working folder, with a file a tool could read."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keys").write_text("theirs")
    (outside / "keys").chmod(0o644)
    return outside


async def test_a_folder_a_run_replaced_by_a_link_has_its_undo_stay_in_the_working_folder(
    runtime: Runtime, workdir: Path, tmp_path: Path
) -> None:
    outside = _outside(tmp_path)
    before = tree(outside)
    session = f"cli-undo{next(_sessions)}"
    # A run writes d/keys, the next puts a link to the person's folder where d was: an undo
    # of both that looked at d/keys through the link would find their file there (a
    # conflict to ask about), and, told to go on, move it aside and remove it.
    await run(runtime, session, "write d/keys theirs")
    results, _ = await run(runtime, session, f"sh rm -r d && ln -s {outside} d")
    assert results[-1] == "[exit status 0]", results
    checkpoints = checkpoints_of(runtime)
    calls = checkpoints.from_turn(session, 0)  # a rewind to the first turn
    assert sorted(c.tool for c in calls) == ["shell", "write_file"]
    result = checkpoints.undo(session, calls)
    assert result.done and result.conflicts == ()
    assert result.restored == (str(workdir / "d"),)
    assert tree(outside) == before
    # d is a folder again, as the write left it; its file was made by the run: not put back.
    assert tree(workdir) == {"d": ("dir", 0o755, b"")}
    # Forced, with the person's file changed since: nothing is kept beside it there either.
    await run(runtime, session, "write e/keys mine")
    await run(runtime, session, f"sh rm -r e && ln -s {outside} e")
    (outside / "keys").write_text("changed since")
    before = tree(outside)
    calls = checkpoints.from_turn(session, 0)
    forced = checkpoints.undo(session, calls, force=True)
    assert forced.done and forced.conflicts == () and forced.kept == {}
    assert tree(outside) == before
    assert tree(workdir) == {"d": ("dir", 0o755, b""), "e": ("dir", 0o755, b"")}


def test_a_link_among_the_folders_stops_a_put_and_a_removal_at_the_last_moment(
    tmp_path: Path,
) -> None:
    # As if the link were made after the undo looked: the write and the removal themselves
    # do not follow it.
    from agentrt.agent.checkpoint import Entry
    from agentrt.agent.checkpoint import _clear
    from agentrt.agent.checkpoint import _put

    outside = _outside(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    (work / "d").symlink_to(outside)
    checkpoints = Checkpoints(tmp_path / "checkpoints")
    sha = checkpoints.keep(b"planted\n")
    before = tree(outside)
    _put(work / "d" / "keys", Entry("file", 0o644, sha), checkpoints)
    _put(work / "d" / "new" / "deeper", Entry("file", 0o644, sha), checkpoints)
    _put(work / "d" / "folder", Entry("dir", 0o755), checkpoints)
    _clear(work / "d" / "keys", None)
    assert tree(outside) == before
    # Without a link the same calls do their work, missing folders made on the way.
    (work / "d").unlink()
    _put(work / "d" / "new" / "deeper", Entry("file", 0o640, sha), checkpoints)
    assert tree(work)["d/new/deeper"] == ("file", 0o640, b"planted\n")
    _clear(work / "d" / "new" / "deeper", None)
    assert "d/new/deeper" not in tree(work)


# -- an undo killed at any moment -------------------------------------------------------

_UNDO = """
import sys
from agentrt.agent.checkpoint import Checkpoints
from agentrt.core.errors import NoSuchTurnError
from agentrt.core.errors import PendingTaskExistsError
from agentrt.core.errors import UnknownSessionError
from agentrt.models.messages import Role
c = Checkpoints(sys.argv[1])
c.undo("s", c.last_run("s"), force=True)
"""


def _prepare(place: Path, files: int) -> tuple[Tree, Tree]:
    """A working folder and its checkpoints in `place`, the run's changes made (the same each
    time); the folder before and after the run."""
    work = place / "work"
    work.mkdir(parents=True)
    rng = random.Random(7)
    for n in range(files):
        (work / f"f{n}.dat").write_bytes(rng.randbytes(4_000))
    (work / "keep").mkdir()
    checkpoints = Checkpoints(place / "checkpoints")
    snapshot = checkpoints.before(work, ())
    assert not isinstance(snapshot, str)
    original = tree(work)
    for n in range(files):
        path = work / f"f{n}.dat"
        if n % 3 == 0:
            path.unlink()
        else:
            path.write_bytes(rng.randbytes(4_000))
            path.chmod(0o600)
    (work / "keep" / "new.txt").write_text("made by the run\n")
    changes = checkpoints.after(work, (), snapshot)
    checkpoints.record(CallRecord("s", "task", "call-1", "shell", time.time(), changes))
    return original, tree(work)


def test_thirty_kills_at_random_moments_of_an_undo_leave_it_done_or_not_begun(
    tmp_path: Path,
) -> None:
    rng = random.Random(20261203)
    argv = [sys.executable, "-c", _UNDO]

    def fresh(n: int) -> Path:
        place = tmp_path / f"try{n}"
        assert _prepare(place, 60) == (original, changed)
        return place

    original, changed = _prepare(tmp_path / "try0", 60)
    # How long a whole undo takes here: the kills fall anywhere within it.
    place = tmp_path / "try0"
    started = time.monotonic()
    subprocess.run([*argv, str(place / "checkpoints")], check=True)
    whole = time.monotonic() - started
    assert tree(place / "work") == original
    outcomes = {"done": 0, "finished on the next start": 0, "not begun": 0}
    for n in range(1, 31):
        place = fresh(n)
        proc = subprocess.Popen([*argv, str(place / "checkpoints")])
        time.sleep(rng.uniform(0, whole))  # a real process at a random moment, not a wait
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        checkpoints = Checkpoints(place / "checkpoints")
        midway = checkpoints.journal.exists()
        assert checkpoints.recover() is midway
        assert not checkpoints.journal.exists()
        now = tree(place / "work")
        if now == original:
            outcomes["finished on the next start" if midway else "done"] += 1
            assert checkpoints.last_run("s") == []
        else:
            assert now == changed, f"kill {n} left a mix"
            outcomes["not begun"] += 1
            assert [c.call for c in checkpoints.last_run("s")] == ["call-1"]
        shutil.rmtree(place)
    # The kills fell before the journal, and in the middle of the undo.
    assert outcomes["not begun"] and outcomes["finished on the next start"], outcomes


async def test_an_old_content_gone_from_the_checkpoints_is_named_and_its_file_left_alone(
    runtime: Runtime, workdir: Path
) -> None:
    session = f"cli-undo{next(_sessions)}"
    (workdir / "a.txt").write_text("before\n")
    await run(runtime, session, "write a.txt after; write b.txt new")
    checkpoints = checkpoints_of(runtime)
    shutil.rmtree(checkpoints.objects)  # as a power cut could leave them
    result = checkpoints.undo(session, checkpoints.last_run(session))
    assert result.skipped == {
        str(workdir / "a.txt"): "its old content is gone from the checkpoints (a power cut?)"
    }
    assert (workdir / "a.txt").read_text() == "after"
    assert not (workdir / "b.txt").exists()  # no old content needed: it was not there


def test_a_write_under_way_beside_a_shell_command_is_not_its_change(tmp_path: Path) -> None:
    """A shell command's walks see another call's temporary file come and go (a write running
    beside it): the undo of the command neither brings that file back nor counts it. A file
    the command names like one is the command's, and is undone like any other."""
    work = tmp_path / "work"
    work.mkdir()
    checkpoints = Checkpoints(tmp_path / "checkpoints")
    writing = [work / ".b.txt.951bf846f2a1.agentrt-tmp", work / ".c.txt.agentrt-undo"]
    with contextlib.ExitStack() as stack:
        for path in writing:
            stack.enter_context(in_flight(path))
            path.write_bytes(b"half written")
        snapshot = checkpoints.before(work, ())
        assert not isinstance(snapshot, str)
        assert set(snapshot.entries) == set()
        for path in writing:
            path.unlink()
        (work / "log").write_text("y\n")
        # A command cannot hide a file of its own by naming it like a write under way.
        (work / ".hidden.txt.000000000000.agentrt-tmp").write_text("mine\n")
        changes = checkpoints.after(work, (), snapshot)
    assert [c.path for c in changes] == [
        str(work / ".hidden.txt.000000000000.agentrt-tmp"),
        str(work / "log"),
    ]
    checkpoints.record(CallRecord("s", "task", "call-1", "shell", time.time(), changes))
    result = checkpoints.undo("s", checkpoints.last_run("s"))
    assert not result.conflicts
    assert sorted(work.iterdir()) == []


class _CountingWalks(Checkpoints):
    """Checkpoints that count their walks of a working folder."""

    walks = 0

    def walk(self, *args: Any, **kwargs: Any) -> Snapshot:
        type(self).walks += 1
        return super().walk(*args, **kwargs)


#: How many times `_shell_call` needed `before` or `after` (a thread, for the `shell` tool).
_blocking = itertools.count()


def _shell_call(checkpoints: Checkpoints, work: Path, command: Callable[[], object]) -> list[str]:
    """The paths a "command" (`command`, run here) changed, as its checkpoint recorded them
    (first without blocking when the folder's watch allows it, as the `shell` tool does)."""
    before: Snapshot | str | None = checkpoints.before_nowait(work, ())
    if before is None:
        next(_blocking)
        before = checkpoints.before(work, ())
    assert isinstance(before, Snapshot)
    command()
    changes = checkpoints.after_nowait(work, (), before)
    if changes is None:
        next(_blocking)
        changes = checkpoints.after(work, (), before)
    checkpoints.record(CallRecord("s", "task", f"c{time.monotonic_ns()}", "shell", 0, changes))
    return [os.path.relpath(c.path, work) for c in changes]


def test_a_quiet_folder_is_not_walked_again_and_any_change_between_calls_is_seen(
    tmp_path: Path,
) -> None:
    """The folder's watch says what changed since the last walk: when nothing did, the next
    call needs no walk before it (nor a thread); when only files did (the person's between
    calls, the command's), only their stat is taken again; a folder made or moved makes it
    walk. No change between calls is taken for the next call's (its undo leaves the person's
    edits alone)."""
    work = tmp_path / "work"
    (work / "deep").mkdir(parents=True)
    for name in ("a.txt", "b.txt", "deep/c.txt"):
        (work / name).write_text(f"{name}\n")
    checkpoints = _CountingWalks(tmp_path / "checkpoints")
    assert FolderWatch(str(work)).usable, "this file system should tell inotify every change"

    assert _shell_call(checkpoints, work, lambda: (work / "a.txt").write_text("1\n")) == ["a.txt"]
    walked, blocked = _CountingWalks.walks, next(_blocking)
    assert _shell_call(checkpoints, work, lambda: (work / "b.txt").write_text("2\n")) == ["b.txt"]
    # Only files changed, the command's: no walk, and no thread.
    assert (_CountingWalks.walks, next(_blocking)) == (walked, blocked + 1)

    def between(change: Callable[[], object], command_changes: str, walks: int) -> None:
        change()  # the person, between two calls
        counted, blocked = _CountingWalks.walks, next(_blocking)
        text = f"command {next(_sessions)}\n"
        changed = _shell_call(checkpoints, work, lambda: (work / command_changes).write_text(text))
        assert changed == [command_changes]
        # A walk is made in a thread; a few files' stats and contents are taken without one.
        assert (_CountingWalks.walks, next(_blocking)) == (counted + walks, blocked + 1 + walks)

    def made_with_a_link_outside() -> None:
        (work / "deep" / "new").mkdir()
        os.link(work / "deep" / "c.txt", tmp_path / "c-elsewhere")

    between(lambda: (work / "deep" / "c.txt").write_text("person\n"), "a.txt", 0)
    between(made_with_a_link_outside, "b.txt", 1)
    between(lambda: (work / "deep" / "new" / "d.txt").write_text("d\n"), "a.txt", 0)
    # Written through a name outside the folder: no event, but its stat is taken again.
    between(lambda: (tmp_path / "c-elsewhere").write_text("person 2\n"), "b.txt", 0)
    between(lambda: (work / "deep" / "c.txt").chmod(0o600), "a.txt", 0)
    between(lambda: (work / "deep" / "new").rename(work / "deep" / "moved"), "b.txt", 1)
    between(lambda: (work / "deep" / "moved" / "d.txt").unlink(), "a.txt", 0)
    old_b = (work / "b.txt").read_text()
    # In place, at the same size: a walk alone could miss it within one mtime tick.
    same_size = "X" * len((work / "a.txt").read_text())
    between(lambda: (work / "a.txt").write_text(same_size), "b.txt", 0)

    # The last call is undone; what the person changed before it stays as they left it.
    result = checkpoints.undo("s", checkpoints.records("s")[-1:])
    assert [os.path.relpath(p, work) for p in result.restored] == ["b.txt"]
    assert (work / "b.txt").read_text() == old_b
    assert (work / "a.txt").read_text() == same_size
    assert (work / "deep" / "c.txt").read_text() == "person 2\n"
    assert stat.S_IMODE((work / "deep" / "c.txt").stat().st_mode) == 0o600
    assert sorted(os.listdir(work / "deep")) == ["c.txt", "moved"]
    assert not os.listdir(work / "deep" / "moved")

    # Closed, its watch gone: the next call walks (watched anew), and sees its own change only.
    checkpoints.close()
    walks = _CountingWalks.walks
    (work / "a.txt").write_text("unwatched\n")
    assert _shell_call(checkpoints, work, lambda: (work / "b.txt").write_text("3\n")) == ["b.txt"]
    assert _CountingWalks.walks == walks + 1


def test_a_large_file_a_command_wrote_is_kept_before_the_next_command_changes_it(
    tmp_path: Path,
) -> None:
    """A file a command wrote is kept by the walk after it when small, and otherwise by the
    walk before the next command: either way, undoing that next command puts it back."""
    work = tmp_path / "work"
    work.mkdir()
    checkpoints = Checkpoints(tmp_path / "checkpoints")
    small, large = b"s" * 100, os.urandom(KEEP_AT_ONCE + 1)
    _shell_call(checkpoints, work, lambda: (work / "small").write_bytes(small))
    _shell_call(checkpoints, work, lambda: (work / "large").write_bytes(large))
    for name in ("small", "large"):
        _shell_call(checkpoints, work, lambda: (work / name).write_bytes(b"changed"))  # noqa: B023
    result = checkpoints.undo("s", checkpoints.records("s")[-2:])
    assert sorted(os.path.basename(p) for p in result.restored) == ["large", "small"]
    assert (work / "small").read_bytes() == small
    assert (work / "large").read_bytes() == large

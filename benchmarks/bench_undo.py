"""Checkpoints and undo: what keeping a call's changes costs, and putting 100 files back.

=====================  ==================================================  =======
benchmark              subject vs baseline                                 target
=====================  ==================================================  =======
``checkpoint_sh``      a confirmed ``shell`` call that changes one file,   <= 1.3x
                       run by the executor in a folder of 500 files, with
                       checkpoints (a look before and after: the folder's
                       inotify events, or a walk; the changed files kept)
                       vs the same call without them
``undo_100_files``     ``Checkpoints.undo`` of a run that changed 100      <= 2x
                       files of 4 KiB (journal, each file put back, synced)
                       vs writing the same 100 files each through a synced
                       temporary file renamed into place
=====================  ==================================================  =======
"""

from __future__ import annotations

import itertools
import os
import random
import time
from pathlib import Path

import attrs
import trio

from agentrt import Approval
from agentrt import ScriptedModel
from agentrt import open_runtime
from agentrt.agent.checkpoint import CallRecord
from agentrt.agent.checkpoint import Checkpoints
from agentrt.agent.config import AgentConfig

from ._harness import Batch
from ._harness import Result
from ._harness import interleave
from .bench_scale import _ignore

#: Files in the working folder the shell call runs in.
FOLDER_FILES = 500


async def bench_checkpoint_sh(root: Path, rounds: int = 12) -> Result:
    """A shell call through the executor, with checkpoints vs without."""
    work = root / "work"
    work.mkdir()
    rng = random.Random(1)
    for n in range(FOLDER_FILES):
        (work / f"f{n:03}.txt").write_bytes(rng.randbytes(2_000))
    sessions = itertools.count()
    problems: list[str] = []
    async with open_runtime(
        root / "state",
        model=ScriptedModel(word_delay=0, stream_delay=0),
        workdir=work,
        approval=Approval.FULL_AUTO,
    ) as rt:
        executor = rt.executor
        keeping = executor.config
        bare = attrs.evolve(keeping, checkpoints=None)

        def call(config: AgentConfig) -> Batch:
            async def timed() -> float:
                executor.config = config
                n = next(sessions)
                start = time.perf_counter()
                ended = await executor.run(
                    f"cli-bench{n}",
                    f"sh echo {n} > f{n % FOLDER_FILES:03}.txt",
                    owner="b",
                    emit=_ignore,
                )
                elapsed = time.perf_counter() - start
                if ended.outcome.value != "finished":
                    problems.append(f"a shell run ended {ended.outcome.value}")
                return elapsed

            return timed

        subject, baseline = await interleave(call(keeping), call(bare), rounds)
        executor.config = keeping
    checkpoints = keeping.checkpoints
    kept = checkpoints is not None and any(
        checkpoints.records(f"cli-bench{n}") for n in range(next(sessions))
    )
    if not kept:
        problems.append("no shell call was checkpointed")
    return Result("checkpoint_sh", subject, baseline, "ratio", 1.3, rounds, tuple(problems))


def _changed_run(place: Path, files: int) -> tuple[Checkpoints, Path]:
    """A folder of `files` files and the checkpoint of a run that rewrote every one."""
    work = place / "work"
    work.mkdir(parents=True)
    rng = random.Random(2)
    for n in range(files):
        (work / f"f{n:03}.dat").write_bytes(rng.randbytes(4_096))
    checkpoints = Checkpoints(place / "checkpoints")
    before = checkpoints.before(work, ())
    assert not isinstance(before, str)
    for n in range(files):
        (work / f"f{n:03}.dat").write_bytes(rng.randbytes(4_096))
    changes = checkpoints.after(work, (), before)
    checkpoints.record(CallRecord("s", "t", "c", "shell", time.time(), changes))
    # The run is over well before its undo: what it wrote has reached the disk by then (not
    # flushed here, the undo's syncs would pay for writing the whole run out).
    os.sync()
    return checkpoints, work


def _plain_restore(place: Path, contents: list[bytes]) -> None:
    for n, data in enumerate(contents):
        path = place / f"f{n:03}.dat"
        tmp = place / f".f{n:03}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    fd = os.open(place, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


async def bench_undo_100_files(root: Path, rounds: int = 8) -> Result:
    """`Checkpoints.undo` of 100 changed files vs writing 100 files as safely by hand."""
    counter = itertools.count()
    problems: list[str] = []
    contents = [random.Random(n).randbytes(4_096) for n in range(100)]
    plain = root / "plain"
    plain.mkdir()

    async def undo() -> float:
        checkpoints, _ = await trio.to_thread.run_sync(
            _changed_run, root / f"u{next(counter)}", 100
        )
        calls = checkpoints.last_run("s")
        start = time.perf_counter()
        result = await trio.to_thread.run_sync(lambda: checkpoints.undo("s", calls))
        elapsed = time.perf_counter() - start
        if len(result.restored) != 100:
            problems.append(f"an undo put back {len(result.restored)} files, not 100")
        return elapsed

    async def by_hand() -> float:
        start = time.perf_counter()
        await trio.to_thread.run_sync(_plain_restore, plain, contents)
        return time.perf_counter() - start

    subject, baseline = await interleave(undo, by_hand, rounds)
    return Result("undo_100_files", subject, baseline, "ratio", 2.0, rounds, tuple(problems))


async def run_all(root: Path) -> list[Result]:
    """Both rows, each in a folder of its own under `root`."""
    results = []
    for name, bench in (("sh", bench_checkpoint_sh), ("undo", bench_undo_100_files)):
        folder = root / name
        folder.mkdir(parents=True)
        results.append(await bench(folder))
    return results

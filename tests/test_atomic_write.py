"""A file write killed at any moment leaves the old content or the new, never a mix.

`write_file` writes through `agentrt.agent.atomic` (a helper process, in the
sandbox): a temporary file in the target's folder, synced, renamed over the
target, the folder synced. Here the real helper writes 60 MB over a file and
is SIGKILLed at random moments, fifty times; after every kill the file holds
exactly its old bytes or exactly its new ones.
"""

from __future__ import annotations

import hashlib
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio

from agentrt.agent import atomic as _atomic
from agentrt.agent.atomic import write_atomic

pytestmark = pytest.mark.deadline(300)

KILLS = 50
SIZE = 60 * 1024 * 1024
WRITER = [sys.executable, "-I", "-S", str(Path(_atomic.__file__).resolve())]


def digest(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def start_writer(target: Path, data_path: Path) -> subprocess.Popen[bytes]:
    with data_path.open("rb") as data:
        return subprocess.Popen([*WRITER, str(target)], stdin=data, stderr=subprocess.PIPE)


def test_fifty_kills_of_a_60_mb_write_leave_old_or_new_content(tmp_path: Path) -> None:
    rng = random.Random(20261201)
    target = tmp_path / "big.bin"
    old = tmp_path / "old.bin"
    new = tmp_path / "new.bin"
    old.write_bytes(b"o" * (SIZE // 2))
    new.write_bytes(rng.randbytes(SIZE))
    old_digest, new_digest = digest(old), digest(new)
    # How long a whole write takes here: the kills fall anywhere within it.
    target.write_bytes(old.read_bytes())
    started = time.monotonic()
    writer = start_writer(target, new)
    assert writer.wait(timeout=120) == 0, writer.stderr.read() if writer.stderr else ""
    whole = time.monotonic() - started
    assert digest(target) == new_digest
    seen = {"old": 0, "new": 0}
    for _ in range(KILLS):
        target.write_bytes(old.read_bytes())
        writer = start_writer(target, new)
        time.sleep(rng.uniform(0, whole))  # a real process at a random moment, not a wait
        writer.send_signal(signal.SIGKILL)
        writer.wait(timeout=60)
        if writer.stderr is not None:
            writer.stderr.close()
        now = digest(target)
        assert now in (old_digest, new_digest), "the file is half-written"
        seen["old" if now == old_digest else "new"] += 1
        # What a killed write leaves is its temporary file only, never a changed target.
        for leftover in tmp_path.glob(".big.bin.*.agentrt-tmp"):
            leftover.unlink()
    # The kills fell both before and after the rename.
    assert seen["old"] > 0, seen
    assert sum(seen.values()) == KILLS


def test_a_writer_whose_feeder_dies_midway_writes_nothing(tmp_path: Path) -> None:
    """The daemon feeding the helper is killed after the pipe took 64 KiB of 160 KiB: the
    helper reads an early end of its input, which it must not take for the content's end."""
    target = tmp_path / "f2.txt"
    target.write_bytes(b"old content\n")
    new = random.Random(5).randbytes(160 * 1024)
    tmp = _atomic.temporary_name(str(target))
    writer = subprocess.Popen(
        [*WRITER, "--tmp", tmp, "--size", str(len(new)), str(target)],
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert writer.stdin is not None and writer.stderr is not None
    writer.stdin.write(new[:65536])
    writer.stdin.close()  # as a killed process's pipe closes
    assert writer.wait(timeout=60) == _atomic.EXIT_CUT_SHORT
    assert writer.stderr.read().decode() == (
        "the content arrived cut short (65536 of 163840 bytes); nothing was written\n"
    )
    writer.stderr.close()
    assert target.read_bytes() == b"old content\n"
    assert not Path(tmp).exists()


def test_a_writer_told_the_size_writes_the_whole_content(tmp_path: Path) -> None:
    target = tmp_path / "f.txt"
    new = random.Random(6).randbytes(160 * 1024)
    done = subprocess.run(
        [*WRITER, "--size", str(len(new)), str(target)], input=new, capture_output=True
    )
    assert (done.returncode, done.stderr) == (0, b"")
    assert target.read_bytes() == new
    refused = subprocess.run(
        [*WRITER, "--size", "many", str(target)], input=b"x", capture_output=True
    )
    assert refused.returncode == 2
    assert refused.stderr.decode().startswith("usage: _atomic.py [--tmp TMP] [--size BYTES] PATH")
    assert target.read_bytes() == new


def test_a_write_keeps_the_files_mode_and_makes_its_folders(tmp_path: Path) -> None:
    target = tmp_path / "conf"
    target.write_text("old")
    target.chmod(0o640)
    write_atomic(str(target), b"new")
    assert target.read_bytes() == b"new"
    assert target.stat().st_mode & 0o777 == 0o640
    deep = tmp_path / "a" / "b" / "c.txt"
    write_atomic(str(deep), b"x")
    assert deep.read_bytes() == b"x"
    old_mask = os.umask(0o027)
    try:
        write_atomic(str(tmp_path / "fresh"), b"y")
    finally:
        os.umask(old_mask)
    assert (tmp_path / "fresh").stat().st_mode & 0o777 == 0o640
    assert list(tmp_path.glob(".*agentrt-tmp")) == []


def test_a_folder_in_the_way_is_refused_and_nothing_is_left(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    with pytest.raises(IsADirectoryError):
        write_atomic(str(tmp_path / "dir"), b"x")
    assert list(tmp_path.glob(".*agentrt-tmp")) == []


async def test_write_file_through_the_sandbox_keeps_mode_and_content(
    runtime: object, workdir: Path
) -> None:
    from agentrt import Runtime

    from .conftest import Recorder
    from .test_tool_processes import allow_everything

    assert isinstance(runtime, Runtime)
    target = workdir / "kept.txt"
    target.write_text("old")
    target.chmod(0o600)
    async with trio.open_nursery() as nursery:
        await nursery.start(allow_everything, runtime)
        with trio.fail_after(30):
            await runtime.executor.run(
                "cli-atomic", "write kept.txt new text", owner="t", emit=Recorder()
            )
        nursery.cancel_scope.cancel()
    assert target.read_text() == "new text"
    assert target.stat().st_mode & 0o777 == 0o600

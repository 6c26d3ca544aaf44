"""Task hashes and question ids: unpredictable, distinct, and drawn without a system call."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from agentrt.core.executor import new_task_hash
from agentrt.vocab.questions import new_question_id
from agentrt.vocab.unique import random_hex

from .cli_process import run_python


def test_the_shapes_are_those_drawn_from_the_os_before() -> None:
    assert re.fullmatch(r"[0-9a-f]{12}", new_task_hash())
    assert re.fullmatch(r"q-[0-9a-f]{12}", new_question_id())
    for size in (1, 4, 6, 8, 32, 64):
        assert re.fullmatch(rf"[0-9a-f]{{{2 * size}}}", random_hex(size))


def test_a_hundred_thousand_draws_are_all_different() -> None:
    drawn = [random_hex(16) for _ in range(100_000)]
    assert len(set(drawn)) == len(drawn)
    # Spread over every hex digit at every place, as random bytes are.
    for place in range(32):
        assert {value[place] for value in drawn[:2000]} == set("0123456789abcdef")


def test_no_system_call_draws_them(monkeypatch: pytest.MonkeyPatch) -> None:
    # A system call on the event loop's thread lets the store's threads take the
    # interpreter: the OS's bytes are read once, when the module loads.
    def refused(size: int) -> bytes:
        raise AssertionError("os.urandom called for an identifier")

    monkeypatch.setattr(os, "urandom", refused)
    assert new_task_hash() != new_task_hash()
    assert new_question_id() != new_question_id()


def test_each_process_draws_its_own(tmp_path: Path) -> None:
    code = "from agentrt.vocab.unique import random_hex; print(random_hex(16))"
    first, second = (run_python(code, cwd=tmp_path) for _ in range(2))
    assert first.returncode == second.returncode == 0, first.stderr + second.stderr
    assert first.stdout.strip() != second.stdout.strip()
    assert random_hex(16) not in (first.stdout.strip(), second.stdout.strip())


def test_a_forked_child_draws_other_values_than_its_parent() -> None:
    # The child has the parent's key and count: its process id keeps its draws apart.
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        os.close(read)
        os.write(write, random_hex(6).encode())
        os._exit(0)
    os.close(write)
    child = os.read(read, 64).decode()
    os.close(read)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert re.fullmatch(r"[0-9a-f]{12}", child)
    assert child != random_hex(6)

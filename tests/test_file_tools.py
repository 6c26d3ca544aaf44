"""The file tools a real model works with: `edit_file`, `read_file` ranges, `list_dir`, `glob`,
`grep`, and the diff every write's or edit's confirmation shows.

Each runs for real, through the scripted model, in the sandbox, against files in
the working folder; the confirmations are claimed from the registry as a
front-end would claim them.
"""

from __future__ import annotations

import itertools
import shutil
import stat
import subprocess
from collections.abc import Awaitable
from collections.abc import Callable
from pathlib import Path

import pytest

from agentrt import ALLOW_ONCE
from agentrt import Answer
from agentrt import Entry
from agentrt import Outcome
from agentrt import RequestKind
from agentrt import Runtime
from agentrt.agent.tools import search
from agentrt.agent.tools.diff import DIFF_BYTES
from agentrt.agent.tools.diff import DIFF_LINES
from agentrt.agent.tools.diff import unified_diff
from agentrt.agent.tools.files import READ_BYTES
from agentrt.agent.tools.files import nearest_match
from agentrt.config.secrets import SecretStore
from agentrt.vocab.clamp import TOOL_RESULT_LIMIT

from .conftest import results_in_call_order
from .conftest import run_answering

_sessions = itertools.count()


async def run(
    rt: Runtime, text: str, answer: Callable[[Entry], Awaitable[Answer]] | None = None
) -> tuple[list[str], list[Entry]]:
    """Run `text` in a new terminal session; the tool results, and every question asked."""
    asked: list[Entry] = []

    async def give(entry: Entry) -> Answer:
        asked.append(entry)
        return Answer(ALLOW_ONCE) if answer is None else await answer(entry)

    session = f"cli-ft{next(_sessions)}"
    ended, _ = await run_answering(rt, session, text, give)
    assert ended.outcome is Outcome.FINISHED, ended
    return results_in_call_order(await rt.store.load_history(session)), asked


# -- edit_file --------------------------------------------------------------------------


async def test_edit_replaces_the_one_occurrence_after_a_confirmation_showing_the_diff(
    runtime: Runtime, workdir: Path
) -> None:
    target = workdir / "notes.txt"
    target.write_text("alpha\nbeta\ngamma\n")
    target.chmod(0o640)
    inode = target.stat().st_ino
    [result], [asked] = await run(runtime, "edit notes.txt beta 'BETA two'")
    assert result == f"edited {target}: 1 replacement"
    assert target.read_text() == "alpha\nBETA two\ngamma\n"
    assert asked.request.kind is RequestKind.CONFIRM
    assert asked.request.tool == "edit_file"
    assert asked.request.prompt == f"edit {target} (1 replacement)"
    assert asked.request.diff == (
        "--- a/notes.txt\n+++ b/notes.txt\n@@ -1,3 +1,3 @@\n alpha\n-beta\n+BETA two\n gamma"
    )
    # Replaced by a rename (atomic), the mode kept.
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert target.stat().st_ino != inode


async def test_edit_of_text_not_there_shows_the_nearest_lines_and_asks_nothing(
    runtime: Runtime, workdir: Path
) -> None:
    target = workdir / "app.py"
    body = "import os\n\ndef handler(request):\n    return respond(request)\n"
    target.write_text(body)
    [result], asked = await run(runtime, "edit app.py 'return respond(req)' 'return None'")
    assert asked == []
    assert target.read_text() == body
    assert result == (
        f"error: old_string was not found in {target}. The nearest match, lines 4-4 "
        "(83% alike), is:\n"
        "     4|     return respond(request)\n"
        "old_string must match the file exactly, whitespace and indentation included"
    )


async def test_edit_of_text_found_several_times_says_how_many_and_where(
    runtime: Runtime, workdir: Path
) -> None:
    target = workdir / "c.ini"
    target.write_text("x = 1\ny = 2\nx = 1\nx = 1\n")
    [result], asked = await run(runtime, "edit c.ini 'x = 1' 'x = 3'")
    assert asked == []
    assert result == (
        f"error: old_string occurs 3 times in {target} (at lines 1, 3, 4); include more "
        "surrounding text to make it unique, or set replace_all to replace every one"
    )
    [result], [asked_all] = await run(runtime, "edit c.ini 'x = 1' 'x = 3' all")
    assert result == f"edited {target}: 3 replacements"
    assert target.read_text() == "x = 3\ny = 2\nx = 3\nx = 3\n"
    assert asked_all.request.diff is not None
    assert asked_all.request.diff.count("\n-x = 1") == 3


async def test_edit_never_overwrites_a_change_made_while_it_was_asked(
    runtime: Runtime, workdir: Path
) -> None:
    target = workdir / "notes.txt"
    target.write_text("one\n")

    async def change_then_allow(entry: Entry) -> Answer:
        target.write_text("one\nadded by a person\n")
        return Answer(ALLOW_ONCE)

    [result], _ = await run(runtime, "edit notes.txt one ONE", change_then_allow)
    assert result == (
        f"error: cannot write {target}: it changed since it was read (before the "
        "confirmation); read it again"
    )
    assert target.read_text() == "one\nadded by a person\n"


async def test_edit_of_a_missing_file_or_with_nothing_to_change_is_an_error(
    runtime: Runtime, workdir: Path
) -> None:
    (workdir / "a.txt").write_text("same\n")
    results, asked = await run(runtime, "edit gone.txt a b; edit a.txt same same")
    assert asked == []
    assert results == [
        f"error: cannot edit {workdir / 'gone.txt'}: no such file (to create it, use write_file)",
        "error: old_string and new_string are the same: nothing would change",
    ]


def test_the_nearest_match_is_the_window_of_lines_most_alike() -> None:
    text = "a = 1\nb = 2\nc = 3\nd = 4\n"
    near = nearest_match(text, "b = 2\nc = 9")
    assert near is not None
    assert near[:2] == (2, 3)
    assert near[2] == pytest.approx(10 / 11)
    assert nearest_match(text, "zzzzzzzzzzzzzzzzzz") is None


# -- the diff of a write --------------------------------------------------------------


async def test_write_file_asks_with_the_diff_against_the_current_file(
    runtime: Runtime, workdir: Path
) -> None:
    (workdir / "old.txt").write_text("keep\ndrop\n")
    results, asked = await run(runtime, "write old.txt keep; write new/n.txt hi")
    assert results == [
        f"wrote 4 bytes to {workdir / 'old.txt'}",
        f"wrote 2 bytes to {workdir / 'new' / 'n.txt'}",
    ]
    diffs = {e.request.prompt: e.request.diff for e in asked}
    assert diffs == {
        f"write 4 bytes to {workdir / 'old.txt'}": (
            "--- a/old.txt\n+++ b/old.txt\n@@ -1,2 +1 @@\n-keep\n-drop\n+keep\n"
            "\\ No newline at end of file"
        ),
        # A new file is all additions.
        f"write 2 bytes to {workdir / 'new' / 'n.txt'}": (
            "--- /dev/null\n+++ b/new/n.txt\n@@ -0,0 +1 @@\n+hi\n\\ No newline at end of file"
        ),
    }


async def test_the_diff_is_redacted_like_the_rest_of_the_confirmation(
    runtime: Runtime, tmp_path: Path, workdir: Path
) -> None:
    value = "tok-4b1d9a0c55e7f3"
    SecretStore(tmp_path / "state" / "secrets").put("deploy", value)
    (workdir / "env").write_text("TOKEN=old\n")
    _, [asked] = await run(runtime, f"edit env TOKEN=old TOKEN={value}")
    assert asked.request.diff is not None
    assert value not in asked.request.diff
    assert "+TOKEN=[secret deploy]" in asked.request.diff
    assert (workdir / "env").read_text() == f"TOKEN={value}\n"


def test_the_diff_is_cut_at_its_line_and_byte_bounds() -> None:
    new = "".join(f"line {n}\n" for n in range(500)).encode()
    diff = unified_diff("f.txt", None, new)
    lines = diff.split("\n")
    # 503 lines of diff (2 headers, 1 hunk, 500 additions): 200 shown, then the note.
    assert len(lines) == DIFF_LINES + 1
    assert lines[-1] == "... 303 more lines"
    wide = "".join(f"{n:04d}" + "x" * 95 + "\n" for n in range(180)).encode()  # 100 bytes each
    diff = unified_diff("w.txt", b"", wide)
    body, _, note = diff.rpartition("\n")
    assert len((body + "\n").encode()) <= DIFF_BYTES
    shown = body.count("\n") + 1
    assert note == f"... {183 - shown} more lines"
    assert shown == 3 + (DIFF_BYTES - len("--- a/w.txt\n+++ b/w.txt\n@@ -0,0 +1,180 @@\n")) // 101


def test_a_binary_or_unchanged_content_says_so() -> None:
    assert unified_diff("b", b"a\0b", b"c") == "Binary content of b differs (3 bytes -> 1 bytes)"
    assert unified_diff("s", b"x\n", b"x\n") == "(no change to s: the new content is the same)"


# -- read_file ranges -----------------------------------------------------------------


async def test_read_file_gives_a_range_of_lines_and_says_how_to_read_on(
    runtime: Runtime, workdir: Path
) -> None:
    (workdir / "ten.txt").write_text("".join(f"line {n}\n" for n in range(1, 11)))
    results, asked = await run(
        runtime, "read ten.txt; read ten.txt 3 2; read ten.txt 9; read ten.txt 40"
    )
    assert asked == []
    assert results == [
        "".join(f"line {n}\n" for n in range(1, 11)),
        "line 3\nline 4\n[lines 3-4 of 10; read on with offset=5]",
        "line 9\nline 10\n[lines 9-10 of 10]",
        f"[{workdir / 'ten.txt'} has 10 lines; offset 40 is past its end]",
    ]


async def test_read_file_is_bounded_in_lines_and_bytes(runtime: Runtime, workdir: Path) -> None:
    (workdir / "long.txt").write_text("".join(f"{n}\n" for n in range(1, 2501)))
    (workdir / "wide.txt").write_text(("y" * 999 + "\n") * 300)  # 1,000 bytes a line
    (workdir / "one.txt").write_text("z" * 40_000)
    [long, wide, one], _ = await run(runtime, "read long.txt; read wide.txt; read one.txt")
    assert long.endswith("2000\n[lines 1-2000 of 2500; read on with offset=2001]")
    assert long.count("\n") == 2000
    note = "[lines 1-32 of 300; cut at 32,000 bytes; read on with offset=33]"
    assert wide == ("y" * 999 + "\n") * 32 + note
    assert one == "z" * READ_BYTES + (
        "\n[lines 1-1 of 1; line 1 is longer than 32,000 bytes and was cut]"
    )
    # Kept whole with the task: no result is past what a snapshot keeps of one.
    assert all(len(r.encode()) <= TOOL_RESULT_LIMIT for r in (long, wide, one))


# -- list_dir, glob, grep -------------------------------------------------------------


@pytest.fixture
def tree(workdir: Path) -> Path:
    """A git work tree with ignored files, a binary file, a dot file and nested folders."""
    subprocess.run(["git", "init", "-q", str(workdir)], check=True)
    (workdir / ".gitignore").write_text("build/\n*.log\n")
    (workdir / "build").mkdir()
    (workdir / "build" / "out.py").write_text("needle = 'built'\n")
    (workdir / "debug.log").write_text("needle in a log\n")
    (workdir / "src" / "pkg").mkdir(parents=True)
    (workdir / "src" / "main.py").write_text("import pkg\nneedle = 1\n")
    (workdir / "src" / "pkg" / "util.py").write_text("# no match here\ndef needle():\n")
    (workdir / "src" / "data.bin").write_bytes(b"needle\0\x01\x02")
    (workdir / ".env.example").write_text("NEEDLE=x\nneedle=y\n")
    (workdir / "README.md").write_text("# A needle\n")
    # A link found in a folder is listed and globbed, but not searched (as ripgrep does).
    (workdir / "link.py").symlink_to("src/main.py")
    return workdir


async def test_list_dir_leaves_out_what_gitignore_ignores(runtime: Runtime, tree: Path) -> None:
    results, asked = await run(runtime, "ls; ls src")
    assert asked == []
    assert results == [
        ".env.example  18 bytes\n.gitignore  13 bytes\nREADME.md  11 bytes\nlink.py@\nsrc/\n"
        "[3 entries left out: .git, and what .gitignore ignores]",
        "data.bin  9 bytes\nmain.py  22 bytes\npkg/",
    ]


async def test_glob_matches_gitignore_style_patterns_less_what_gitignore_ignores(
    runtime: Runtime, tree: Path
) -> None:
    results, asked = await run(runtime, "glob *.py; glob 'src/*.py'; glob '**/*.py' src; glob *.rs")
    assert asked == []
    assert results == [
        "link.py\nsrc/main.py\nsrc/pkg/util.py",
        "src/main.py",
        "src/main.py\nsrc/pkg/util.py",
        "no file under . matches '*.rs'",
    ]


GREP_FOUND = (
    ".env.example:2:needle=y\nREADME.md:1:# A needle\nsrc/main.py:2:needle = 1\n"
    "src/pkg/util.py:2:def needle():"
)


@pytest.fixture(params=["ripgrep", "python"])
def engine(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """`grep` with ripgrep (installed by .ci/system-deps), or with its Python fallback."""
    if request.param == "ripgrep":
        assert shutil.which("rg"), "ripgrep is not installed: run .ci/system-deps"
        assert search.ripgrep() is not None
    else:
        monkeypatch.setattr(search, "ripgrep", lambda: None)
    return str(request.param)


async def test_grep_gives_the_same_matches_with_ripgrep_and_without(
    runtime: Runtime, tree: Path, engine: str
) -> None:
    results, asked = await run(runtime, "grep needle; grep 'def \\w+' src; grep zzz src/main.py")
    assert asked == []
    assert results == [
        GREP_FOUND,
        "src/pkg/util.py:2:def needle():",
        "no match for 'zzz' in src/main.py",
    ]


async def test_grep_is_bounded_in_matches_and_line_length(
    runtime: Runtime, workdir: Path, engine: str
) -> None:
    (workdir / "many.txt").write_text("hit\n" * 250)
    (workdir / "wide.txt").write_text("hit" + "w" * 400 + "\n")
    [many, wide], _ = await run(runtime, "grep hit many.txt; grep hit wide.txt")
    lines = many.split("\n")
    assert lines[:2] == ["many.txt:1:hit", "many.txt:2:hit"]
    assert len(lines) == search.GREP_MATCHES + 1
    assert lines[-1] == "... 50 more matches not shown; narrow the pattern or the path to see them"
    assert wide == "wide.txt:1:hit" + "w" * 297 + "... (403 characters)"


async def test_grep_says_what_is_wrong_with_a_bad_pattern(
    runtime: Runtime, workdir: Path, engine: str
) -> None:
    [result], _ = await run(runtime, "grep 'a(b'")
    assert result.startswith(f"error: cannot search {workdir}: ")
    assert "(" in result.partition(": ")[2]


async def test_the_search_tools_are_bounded_in_entries_and_bytes(
    runtime: Runtime, workdir: Path
) -> None:
    folder = workdir / "many"
    folder.mkdir()
    for n in range(600):
        (folder / f"f{n:03d}.txt").write_text("")
    [listing, found], _ = await run(runtime, "ls many; glob '*.txt' many")
    assert listing.split("\n")[-1] == (
        "... 100 more entries not shown; list a folder inside it, or use glob"
    )
    assert listing.split("\n")[0] == "f000.txt  0 bytes"
    assert found.split("\n")[-1] == "... 100 more paths not shown; narrow the pattern or the folder"
    assert len(found.split("\n")) == search.GLOB_PATHS + 1
    # Long names reach the byte bound before the count.
    deep = workdir / ("d" * 200)
    deep.mkdir()
    for n in range(300):
        (deep / f"{'n' * 200}{n:03d}").write_text("")
    [names], _ = await run(runtime, f"glob 'n*' {deep.name}")
    lines = names.split("\n")
    assert len(names.encode()) - len(lines[-1]) <= search.RESULT_BYTES
    assert lines[-1] == (
        f"... {300 - (len(lines) - 1)} more paths not shown; narrow the pattern or the folder"
    )
    assert len(lines) - 1 == search.RESULT_BYTES // (len(f"{deep.name}/{'n' * 200}000") + 1)


def test_a_file_in_the_listing_is_named_with_its_size() -> None:
    assert search._size(1023) == "1023 bytes"
    assert search._size(1536) == "1.5 KiB"
    assert search._size(5 * 1024 * 1024) == "5.0 MiB"


@pytest.fixture
def monitored(tree: Path) -> Path:
    """The tree, its git configuration naming a program for git to run (``core.fsmonitor``)."""
    hook = tree / "hook.sh"
    hook.write_text(f"#!/bin/sh\ntouch {tree}/hook-ran\n")
    hook.chmod(0o755)
    subprocess.run(["git", "-C", str(tree), "config", "core.fsmonitor", str(hook)], check=True)
    subprocess.run(["git", "-C", str(tree), "add", "README.md"], check=True)
    (tree / "hook-ran").unlink(missing_ok=True)  # (git add ran it, outside any tool)
    return tree


async def test_a_repositorys_configuration_runs_nothing_for_the_search_tools(
    runtime: Runtime, monitored: Path
) -> None:
    # git runs the program core.fsmonitor names when it lists files: a read must not.
    results, _ = await run(runtime, "glob *.md; ls")
    assert results[0] == "README.md"
    assert not (monitored / "hook-ran").exists()

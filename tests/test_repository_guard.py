"""A git repository's hooks and configuration are read-only to every tool call.

git runs what they name (a hook, ``core.fsmonitor``, an alias, a filter) with
the person's full access, outside any sandbox, the next time they use git: a
tool that could write them could run anything later. Each check here is a real
git in a real bubblewrap; the everyday work (commits, branches, stashes) still
goes through.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import trio
from stress.sandbox import Attempt
from stress.sandbox import attempt_once
from stress.sandbox import layout
from stress.sandbox import sandboxed_runtime

from agentrt.agent import commondir
from agentrt.agent.sandbox import Repository
from agentrt.agent.sandbox import Sandbox
from agentrt.agent.sandbox import _reads_worktree_config
from agentrt.agent.sandbox import refusal_note
from agentrt.agent.sandbox import repository_of
from agentrt.agent.toolproc import run_tool
from agentrt.vocab.terms import Approval

pytestmark = pytest.mark.deadline(120)

GIT = ("git", "-c", "user.name=t", "-c", "user.email=t@example.org")


def git(folder: Path, *args: str) -> str:
    done = subprocess.run([*GIT, "-C", str(folder), *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


def repository(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    git(folder, "init", "-q", "-b", "main")
    (folder / "a.txt").write_text("one\n")
    git(folder, "add", "a.txt")
    git(folder, "commit", "-qm", "first")
    return folder


async def sandboxed(workdir: Path, command: str) -> tuple[int, str]:
    sandbox = Sandbox.detect()
    assert sandbox.enforced, sandbox.why
    argv = sandbox.wrap(["sh", "-c", command], workdir=workdir, network=False)
    with trio.fail_after(30):
        out = await run_tool(argv, cwd=workdir)
    return out.returncode, out.output.decode()


async def test_commits_branches_and_stashes_still_work(tmp_path: Path) -> None:
    work = repository(tmp_path / "work")
    status, output = await sandboxed(
        work,
        "G='git -c user.name=t -c user.email=t@example.org'; echo two >> a.txt && "
        "$G commit -qam second && $G branch topic && $G tag v1 && echo three >> a.txt && "
        "$G stash -q && $G stash list | wc -l && $G switch -q topic && echo done",
    )
    assert (status, output) == (0, "1\ndone\n")
    assert git(work, "log", "--format=%s", "main").split() == ["second", "first"]
    assert git(work, "branch", "--show-current").strip() == "topic"
    assert git(work, "tag").split() == ["v1"]


async def test_hooks_and_configuration_cannot_be_written_moved_or_replaced(tmp_path: Path) -> None:
    work = repository(tmp_path / "work")
    config = (work / ".git" / "config").read_text()
    samples = sorted(p.name for p in (work / ".git" / "hooks").iterdir())
    status, output = await sandboxed(
        work,
        "echo x > .git/hooks/pre-commit; git config core.fsmonitor 'touch /var/tmp/x'; "
        "echo '[core]' >> .git/config; rm -f .git/config; mv .git/config c; "
        "rm -rf .git/hooks; mv .git moved; echo end",
    )
    assert output.count("Read-only file system") == 2 + len(samples), output
    assert output.count("Device or resource busy") == 4, output
    assert status == 0 and output.endswith("end\n")
    assert (work / ".git" / "config").read_text() == config
    assert sorted(p.name for p in (work / ".git" / "hooks").iterdir()) == samples
    assert not (work / "moved").exists()
    # Without the change, the same command gets through: the check sees an escape.
    unprotected = Sandbox.detect().wrap(
        ["sh", "-c", "echo x > .git/hooks/pre-commit"], workdir=work, network=False
    )
    cut = [a for i, a in enumerate(unprotected) if not _names_repository(unprotected, i, work)]
    with trio.fail_after(30):
        await run_tool(cut, cwd=work)
    assert (work / ".git" / "hooks" / "pre-commit").read_text() == "x\n"


def _names_repository(argv: list[str], i: int, work: Path) -> bool:
    """Whether `argv[i]` is part of a bind of the repository's (its three words)."""
    for start in (i, i - 1, i - 2):
        bind = start >= 0 and start + 2 < len(argv) and argv[start] in ("--bind", "--ro-bind")
        if bind and Path(argv[start + 1]).is_relative_to(work / ".git"):
            return True
    return False


async def test_a_shell_call_and_a_file_write_are_told_why(tmp_path: Path) -> None:
    with layout() as lay:
        async with sandboxed_runtime(lay, Approval.FULL_AUTO, text_guard=False) as runtime:
            attempt = Attempt("", "git config core.pager 'touch x'", lambda lay, out: None)
            shell = await attempt_once(runtime, lay, attempt, "cli-git1")
            with trio.fail_after(30):
                hook = lay.home / ".git" / "hooks" / "pre-push"
                await runtime.executor.run("cli-git2", f"write {hook} x", owner="t", emit=_ignore)
            history = await runtime.store.load_history("cli-git2")
    written = [m.content for m in history if m.role.value == "tool"][-1]
    for said in (shell, written):
        assert (
            "[sandbox: a repository's hooks and configuration (.git/hooks, .git/config) are "
            "read-only to tools, whatever the approval" in said
        ), said
    assert "Device or resource busy" in shell
    assert "Read-only file system" in written
    assert not hook.exists()


async def _ignore(event: object) -> None:
    await trio.lowlevel.checkpoint()


async def test_a_missing_hooks_folder_is_made_so_that_no_tool_can_make_it(tmp_path: Path) -> None:
    work = repository(tmp_path / "work")
    for hook in (work / ".git" / "hooks").iterdir():
        hook.unlink()
    (work / ".git" / "hooks").rmdir()
    status, output = await sandboxed(
        work, "mkdir -p .git/hooks && echo x > .git/hooks/post-checkout"
    )
    assert status == 2 and "Read-only file system" in output
    assert (work / ".git" / "hooks").is_dir()
    assert list((work / ".git" / "hooks").iterdir()) == []


async def test_a_submodules_repository_is_covered_too(tmp_path: Path) -> None:
    library = repository(tmp_path / "library")
    work = repository(tmp_path / "work")
    git(work, "-c", "protocol.file.allow=always", "submodule", "-q", "add", str(library), "lib")
    gitdir = work / ".git" / "modules" / "lib"
    assert repository_of(work) == Repository(
        (work / ".git", gitdir),
        (work / ".git" / "hooks", work / ".git" / "config", gitdir / "hooks", gitdir / "config"),
    )
    config = (gitdir / "config").read_text()
    status, output = await sandboxed(
        work,
        "cd lib && git config core.hooksPath /var/tmp; echo x > ../.git/modules/lib/hooks/post-merge; "
        "mv ../.git/modules/lib ../.git/modules/moved; mv ../.git/modules ../.git/m2",
    )
    assert status == 1, output
    # git config, and the moves (a new repository with hooks of its own would take its place).
    assert output.count("Device or resource busy") == 3, output
    assert not (work / ".git" / "m2").exists()
    assert output.count("Read-only file system") == 1, output
    assert not (work / ".git" / "modules" / "moved").exists()
    assert (gitdir / "config").read_text() == config
    assert not (gitdir / "hooks" / "post-merge").exists()


async def test_a_git_file_naming_a_folder_in_the_working_folder_is_followed(tmp_path: Path) -> None:
    # As `git init --separate-git-dir` leaves it: .git is a file naming the real folder.
    work = tmp_path / "work"
    work.mkdir()
    git(work, "init", "-q", "--separate-git-dir", str(work / ".repo"))
    assert (work / ".git").is_file()
    assert repository_of(work) == Repository(
        (work / ".repo",), (work / ".git", work / ".repo" / "hooks", work / ".repo" / "config")
    )
    before = (work / ".git").read_text()
    status, output = await sandboxed(
        work,
        "echo 'gitdir: elsewhere' > .git; rm -f .git; echo x > .repo/hooks/pre-commit; "
        "mv .repo moved",
    )
    assert (work / ".git").read_text() == before
    assert not (work / ".repo" / "hooks" / "pre-commit").exists()
    assert not (work / "moved").exists()
    assert status == 1 and output.count("Read-only file system") == 2, output
    assert output.count("Device or resource busy") == 2, output  # rm .git, mv .repo


def test_a_folder_that_is_no_repository_has_nothing_covered(tmp_path: Path) -> None:
    assert repository_of(tmp_path) == Repository()
    (tmp_path / ".git").symlink_to(tmp_path / "nowhere")
    assert repository_of(tmp_path) == Repository()


@pytest.mark.parametrize(
    "said",
    [
        "mv: cannot move '.git' to 'moved': Device or resource busy",
        "error: could not write config file .git/config: Device or resource busy",
        "sh: 1: cannot create .git/hooks/pre-commit: Read-only file system",
        "/w/.git/modules/lib/hooks/post-merge: Read-only file system",
    ],
)
def test_the_note_names_the_repository_for_each_way_it_is_refused(said: str) -> None:
    note = refusal_note(said, workdir=Path("/w"), restricted=(Path("/etc"),))
    assert note is not None and note.startswith("[sandbox: a repository's hooks")


def test_a_refused_file_named_config_elsewhere_gets_no_such_note() -> None:
    said = "cannot create /w/x/config: Device or resource busy"
    assert refusal_note(said, workdir=Path("/w"), restricted=()) is None


#: Makes a bare repository in the working folder whose core.fsmonitor says PWNED, and
#: names it in .git/commondir: the person's next `git status` would take its configuration.
_COMMONDIR_ATTACK = (
    "git init -q --bare evil && git -C evil config core.bare false && "
    "git -C evil config core.fsmonitor 'echo PWNED >&2; false' && "
    'echo "$(pwd)/evil" > .git/commondir'
)


def _there(path: Path) -> bool:
    return os.path.lexists(path)


def _person_runs_git_status(work: Path) -> str:
    done = subprocess.run(["git", "status", "--short"], cwd=work, capture_output=True, text=True)
    return done.stdout + done.stderr


async def test_a_commondir_a_tool_makes_is_removed_while_the_call_runs(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    work = repository(tmp_path / "work")
    watcher = commondir.watcher()
    assert watcher is not None
    removed = watcher.removed
    # The call itself waits (a bounded busy loop) to see its file go: it goes while it runs.
    status, output = await sandboxed(
        work,
        f"{_COMMONDIR_ATTACK} && i=0; while [ -e .git/commondir ] && [ $i -lt 200000 ]; "
        "do i=$((i+1)); done; ls -a .git | grep -c '^commondir$'",
    )
    assert (status, output) == (1, "0\n")
    assert not _there(work / ".git" / "commondir")
    assert watcher.removed == removed + 1
    assert "PWNED" not in _person_runs_git_status(work)
    assert f"a tool made {work / '.git' / 'commondir'}" in capfd.readouterr().err
    # A link, a rename and a folder of that name go the same way.
    status, output = await sandboxed(
        work,
        'echo "$(pwd)/evil" > c1 && ln c1 .git/commondir; '
        'echo "$(pwd)/evil" > .git/c2 && mv .git/c2 .git/commondir; '
        "mkdir .git/commondir; echo end",
    )
    await trio.to_thread.run_sync(watcher.settle)
    assert not _there(work / ".git" / "commondir"), output
    assert watcher.removed >= removed + 2  # (two made at once may be removed as one)
    assert "PWNED" not in _person_runs_git_status(work)


async def test_without_the_watch_the_same_commondir_takes_the_repository_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = repository(tmp_path / "work")
    monkeypatch.setattr(commondir, "watch", lambda gitdirs: None)
    status, output = await sandboxed(work, _COMMONDIR_ATTACK)
    assert status == 0, output
    assert "PWNED" in _person_runs_git_status(work)


async def test_a_commondir_that_was_there_stays_and_is_read_only(tmp_path: Path) -> None:
    # A working folder that is a linked worktree whose git folder lies inside it: its
    # commondir names the main repository, inside it too, whose hooks are covered as well.
    work = tmp_path / "work"
    main = repository(work / "main")
    git(main, "worktree", "add", "-q", str(tmp_path / "linked"))
    gitdir = main / ".git" / "worktrees" / "linked"
    (work / ".git").write_text(f"gitdir: {gitdir}\n")
    found = repository_of(work)
    assert found.pinned == (gitdir, main / ".git")
    assert {gitdir / "commondir", main / ".git" / "hooks", main / ".git" / "config"} <= set(
        found.protected
    )
    watcher = commondir.watcher()
    assert watcher is not None
    status, output = await sandboxed(
        work,
        "echo /nowhere > main/.git/worktrees/linked/commondir; "
        "echo x > main/.git/hooks/pre-commit; echo end",
    )
    await trio.to_thread.run_sync(watcher.settle)
    assert status == 0, output
    assert output.count("Read-only file system") == 2, output
    assert (gitdir / "commondir").read_text() == "../..\n"
    assert not (main / ".git" / "hooks" / "pre-commit").exists()


async def test_a_linked_worktrees_files_are_read_only(tmp_path: Path) -> None:
    work = repository(tmp_path / "work")
    linked = tmp_path / "linked"
    git(work, "worktree", "add", "-q", str(linked))
    admin = work / ".git" / "worktrees" / "linked"
    assert work / ".git" / "worktrees" in repository_of(work).protected
    before = {p.name: p.read_bytes() for p in admin.iterdir() if p.is_file()}
    status, output = await sandboxed(
        work,
        'echo "$(pwd)/evil" > .git/worktrees/linked/commondir; '
        "echo x > .git/worktrees/linked/config.worktree; "
        "rm -rf .git/worktrees/linked; mv .git/worktrees .git/w2; echo end",
    )
    assert status == 0
    assert output.endswith("end\n"), output
    assert output.count("Read-only file system") >= 3, output
    assert output.count("Device or resource busy") == 1, output  # the move
    assert {p.name: p.read_bytes() for p in admin.iterdir() if p.is_file()} == before
    assert "linked" in git(linked, "rev-parse", "--show-toplevel")
    refused = [line for line in output.splitlines() if "Read-only" in line]
    assert refusal_note(refused[0], workdir=work, restricted=()) is not None


async def test_a_worktree_configuration_git_reads_is_made_and_read_only(tmp_path: Path) -> None:
    work = repository(tmp_path / "work")
    other = repository(tmp_path / "other")
    git(work, "config", "extensions.worktreeConfig", "true")
    assert work / ".git" / "config.worktree" in repository_of(work).protected
    assert (work / ".git" / "config.worktree").read_text() == ""
    assert not (other / ".git" / "config.worktree").exists()
    assert not any(p.name == "config.worktree" for p in repository_of(other).protected)
    status, output = await sandboxed(
        work, "git config --worktree core.fsmonitor 'echo PWNED >&2; false'; echo end"
    )
    assert status == 0
    assert output.endswith("end\n") and "PWNED" not in _person_runs_git_status(work), output
    assert (work / ".git" / "config.worktree").read_text() == ""


@pytest.mark.parametrize(
    ("text", "reads"),
    [
        ("[extensions]\n\tworktreeConfig = true\n", True),
        ("[Extensions]\n  WorkTreeConfig=yes # on\n", True),
        ("[extensions]\nworktreeconfig\n", True),
        ("[extensions] worktreeConfig = 1\n", True),
        ("[extensions]\n\tworktreeConfig = false\n", False),
        ("[core]\n\tworktreeConfig = true\n", False),
        ("[extensions]\n\tobjectFormat = sha1\n[core]\nworktreeConfig = true\n", False),
    ],
)
def test_the_worktree_configuration_setting_is_read_as_git_reads_it(
    tmp_path: Path, text: str, reads: bool
) -> None:
    config = tmp_path / "config"
    config.write_text(text)
    assert _reads_worktree_config(config) is reads
    done = subprocess.run(
        ["git", "config", "--file", str(config), "--type=bool", "extensions.worktreeconfig"],
        capture_output=True,
        text=True,
    )
    assert (done.stdout.strip() == "true") is reads


def test_an_overflowing_event_queue_has_every_folder_looked_at(tmp_path: Path) -> None:
    watcher = commondir.watcher()
    assert watcher is not None
    gitdir = repository(tmp_path / "work") / ".git"
    commondir.watch([gitdir])
    watcher.settle()
    limit = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    before = watcher.removed
    # While the watch's thread cannot read, more events than the kernel queues are made,
    # the commondir last: its own event is lost, and the kernel says only that some were.
    with watcher._handled:
        for n in range(limit + 1):
            os.close(os.open(gitdir / f"f{n}", os.O_CREAT | os.O_WRONLY, 0o600))
        (gitdir / "commondir").write_text("/elsewhere\n")
    watcher.settle()
    assert not (gitdir / "commondir").exists()
    assert watcher.removed == before + 1


def test_a_forked_child_watches_with_a_thread_of_its_own(tmp_path: Path) -> None:
    parent = commondir.watcher()
    assert parent is not None
    gitdir = repository(tmp_path / "work") / ".git"
    pid = os.fork()
    if pid == 0:  # the child: its own watch, and its own thread acting on it
        code = 1
        try:
            child = commondir.watcher()
            commondir.watch([gitdir])
            (gitdir / "commondir").write_text("/elsewhere\n")
            assert child is not None and child is not parent
            child.settle()
            code = 0 if not (gitdir / "commondir").exists() else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0

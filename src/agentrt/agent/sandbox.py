"""The operating-system sandbox every tool process runs in (bubblewrap), and its environment.

What a tool may touch is decided by the kernel, not by reading the command:
each process a tool starts (a shell command, the file tools' helpers) runs
under `bubblewrap <https://github.com/containers/bubblewrap>`_ in new mount,
PID and IPC namespaces with every capability dropped:

* the whole file system is mounted read-only, except the working folder and a
  private, empty ``/tmp`` (gone when the call ends);
* agentrt's own state (the state dir with the task store, secrets, key store
  and HTTP token; the daemon's socket folder; the configuration folder and
  file) is covered by an empty read-only folder, or ``/dev/null`` for a single
  file: a tool cannot see it, however a path to it is spelled, through a
  symlink or a hard link, or from another program;
* where the working folder holds the home folder, the files a shell or a login
  runs there (``~/.bashrc``, ``~/.profile``, ``~/.gitconfig``, ``~/.ssh``...,
  `HOME_STARTUP`) are read-only;
* a git repository's hooks and configuration (``.git/hooks``, ``.git/config``,
  its linked worktrees' files) are read-only and its ``.git`` cannot be moved
  away (`repository_of`): git runs what they name outside any sandbox; a
  ``commondir`` a tool makes there is removed as it appears
  (`agentrt.agent.commondir`);
* restricted paths are read-only, even inside the working folder; a call that
  the person confirmed with the system password runs with exactly the
  restricted roots it was confirmed for made writable (and through sudo);
* the network is shared for calls a person confirmed and cut (a new network
  namespace holding only a loopback) for calls that run unasked, unless the
  configuration's ``sandbox_network`` is true; a call without the network
  cannot make a Unix socket either (a seccomp program, `agentrt.agent.seccomp`),
  so the sockets other services listen on (Docker's, a database's, the session
  bus) are out of its reach too;
* no call reaches the kernel's keyrings (the session keyring it inherits may
  hold credentials): its seccomp program refuses the key management calls;
* the PID namespace dies with the call: a command that left its process group
  (``setsid``) is killed with the rest, since the namespace's first process is
  in the call's group.

Why bubblewrap rather than Landlock alone: Landlock can only allow folders, so
it cannot hide the state dir inside a home folder the tools may still read.
bubblewrap is packaged by every distribution, needs no daemon and no setuid
bit where unprivileged user namespaces are allowed, and its mounts are exactly
the policy above.

Where no working bubblewrap can be had, `Sandbox.missing` is true: agentrt
says so once at start, refuses ``full-auto``, and every command and file
write is confirmed. Only ``sandbox = "off"`` (or ``--sandbox off``) runs tools
unsandboxed on purpose.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import sys
from collections.abc import Iterable
from collections.abc import Mapping
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from ..vocab.reprs import record
from ..vocab.terms import SandboxMode
from . import probe
from . import seccomp
from .probe import BWRAP_ENV as BWRAP_ENV
from .probe import bwrap_named

#: The first process of the sandbox's PID namespace (bubblewrap's ``--as-pid-1``): it runs
#: the command and passes a SIGTERM on to every process of the namespace (a namespace's
#: first process gets only the signals it has a handler for). When it exits, the kernel
#: kills every process left in the namespace, so nothing the command started in the
#: background (``setsid`` or not) outlives it or holds its output open. Standard input is
#: handed on explicitly: an asynchronous command's would otherwise be /dev/null.
_INIT: Final = (
    'exec 3<&0; trap "kill -TERM -1 2>/dev/null; exit 143" TERM; "$@" <&3 3<&- & exec 3<&-; wait $!'
)
#: `_INIT` for a shell command (``sh -c COMMAND``): the command is run by a subshell of the
#: first process (given as its ``$0``) instead of a new ``sh``, one program start fewer.
_INIT_SHELL: Final = (
    'exec 3<&0; trap "kill -TERM -1 2>/dev/null; exit 143" TERM; (eval "$0") <&3 3<&- & '
    "exec 3<&-; wait $!"
)
#: The private temporary folder every sandboxed call gets.
PRIVATE_TMP: Final = Path("/tmp")

#: Parts of a variable's name that mark it as a credential: it never reaches a tool.
_SECRET_NAME = re.compile(
    r"KEY|SECRET|TOKEN|PASSWORD|PASSWD|PASSPHRASE|CREDENTIAL|AUTH|COOKIE|SESSION", re.IGNORECASE
)
#: Prefixes of variables that configure agentrt, a model provider or a chat service.
_PRIVATE_PREFIXES: Final = ("AGENTRT_", "OPENAI_", "ANTHROPIC_", "TELEGRAM_", "DISCORD_")
#: What a tool's PATH is when the runner has none.
_DEFAULT_PATH: Final = "/usr/local/bin:/usr/bin:/bin"


def find_bwrap(environ: Mapping[str, str] | None = None) -> tuple[str | None, str]:
    """``(path, "")`` of a bubblewrap that works here, else ``(None, why not)``."""
    if not sys.platform.startswith("linux"):
        return None, f"tools cannot be sandboxed on {sys.platform} (bubblewrap needs Linux)"
    named, found = bwrap_named(environ)
    if found is None:
        return None, (
            f"bubblewrap ({named}) is not installed (Debian and Ubuntu: apt-get install bubblewrap)"
        )
    problem = probe.verdict(found)
    if problem is not None:
        return None, problem
    return found, ""


@record
class Sandbox:
    """How tool processes are confined: the mode in force and the bubblewrap that does it."""

    mode: SandboxMode = SandboxMode.WORKSPACE_WRITE
    #: A bubblewrap that works here; None when none could be had (see `why`).
    bwrap: str | None = None
    #: Network for calls that run unasked too (``sandbox_network = true``).
    network: bool = False
    #: Why no sandbox could be had, when `bwrap` is None.
    why: str = ""

    @classmethod
    def detect(
        cls,
        mode: SandboxMode = SandboxMode.WORKSPACE_WRITE,
        *,
        network: bool = False,
        environ: Mapping[str, str] | None = None,
    ) -> Sandbox:
        """The sandbox of `mode` as this machine can give it."""
        if mode is SandboxMode.OFF:
            return cls(mode, None, network, 'the sandbox is turned off (sandbox = "off")')
        bwrap, why = find_bwrap(environ)
        return cls(mode, bwrap, network, why)

    @classmethod
    def off(cls) -> Sandbox:
        """No sandbox, on purpose (``--sandbox off``)."""
        return cls(SandboxMode.OFF, None, False, 'the sandbox is turned off (sandbox = "off")')

    @property
    def enforced(self) -> bool:
        """Whether tool processes run in the sandbox."""
        return self.mode is SandboxMode.WORKSPACE_WRITE and self.bwrap is not None

    @property
    def missing(self) -> bool:
        """The sandbox was asked for but cannot be had: every call is confirmed instead."""
        return self.mode is SandboxMode.WORKSPACE_WRITE and self.bwrap is None

    def wrap(
        self,
        argv: Sequence[str],
        *,
        workdir: Path,
        hidden: Iterable[Path] = (),
        restricted: Iterable[Path] = (),
        writable: Iterable[Path] = (),
        network: bool,
        env: Mapping[str, str] | None = None,
        programs: Iterable[Path] = (),
    ) -> list[str]:
        """`argv` run inside the sandbox (as it is when the sandbox is not `enforced`).

        `programs` are what the command runs from that the person configured (an MCP
        server's script, or its virtualenv): under the private /tmp, each is bound in
        again read-only.

        `hidden` are covered so that nothing inside can be seen; `restricted`
        roots are read-only except those in `writable`; `network` keeps the
        network (else only a private loopback is there). With `env`, the
        command gets exactly that environment, whatever bubblewrap was given
        (for a command run through sudo).
        """
        if not self.enforced:
            return list(argv)
        assert self.bwrap is not None
        workdir = workdir.resolve()
        open_roots = {p.resolve() for p in writable}
        args = [self.bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
        args += ["--tmpfs", str(PRIVATE_TMP)]
        seen: list[Path] = []
        for root in runtime_roots():
            # The Python and the agentrt a tool process runs (`write_file`'s writer), when
            # installed under /tmp, are bound in again read-only, as the rest of / is.
            if not _visible(root, seen):
                args += ["--ro-bind", str(root), str(root)]
                seen.append(root)
        hidden = tuple(hidden)
        for program in dict.fromkeys(p.resolve() for p in programs):
            out_of_bounds = any(program == h or h in program.parents for h in hidden)
            if program.exists() and not out_of_bounds and not _visible(program, seen):
                args += ["--ro-bind", str(program), str(program)]
                seen.append(program)
        args += ["--bind", str(workdir), str(workdir)]
        seen.append(workdir)
        repository = repository_of(workdir)
        from . import commondir  # (its imports are not a run's start-up's: a tool's first call)

        commondir.watch(repository.pinned)
        protected = (*repository.protected, *home_startup_in(workdir))
        for pinned in _pinned(workdir, repository.pinned, protected):
            # A mount point of its own: it cannot be renamed, removed or replaced.
            args += ["--bind", str(pinned), str(pinned)]
        for path in protected:
            args += ["--ro-bind", str(path), str(path)]
        for root in dict.fromkeys(p.resolve() for p in restricted):
            # Bound even under the private /tmp: a restricted path stays in sight, read-only.
            if not root.exists():
                continue
            if not _related(root, (PRIVATE_TMP, workdir, *open_roots)):
                # Read-only already: the host's / is bound so with every mount under it,
                # and nothing writable is bound at, above or below it (one mount fewer).
                continue
            args += ["--bind" if root in open_roots else "--ro-bind", str(root), str(root)]
            seen.append(root)
        covered: list[Path] = []
        for path in sorted(dict.fromkeys(p.resolve() for p in hidden), key=lambda p: len(p.parts)):
            if any(path == c or c in path.parents for c in covered):
                continue
            if not _visible(path, seen) or not os.path.lexists(path):
                continue
            if path.is_dir():
                args += ["--tmpfs", str(path), "--remount-ro", str(path)]
            else:
                args += ["--ro-bind", "/dev/null", str(path)]
            covered.append(path)
        args += ["--unshare-pid", "--unshare-ipc"]
        if not network:
            args.append("--unshare-net")
        # No --die-with-parent: its PR_SET_PDEATHSIG fires when the *thread* that started
        # bubblewrap exits (Trio starts processes from worker threads that retire when
        # idle), which would kill a long command. The tool's process group dies with its
        # runner instead (`agentrt.agent.toolproc`), bubblewrap and its PID namespace with it.
        args += ["--cap-drop", "ALL", "--chdir", str(workdir)]
        if env is not None:
            args.append("--clearenv")
            for name, value in env.items():
                args += ["--setenv", name, value]
        filter_path = _seccomp_program(network)
        if filter_path is not None:
            args += ["--seccomp", str(seccomp.FD)]
        args += ["--setenv", "TMPDIR", str(PRIVATE_TMP), "--as-pid-1", "--"]
        if len(argv) == 3 and list(argv[:2]) == ["sh", "-c"]:
            args += ["sh", "-c", _INIT_SHELL, argv[2]]
        else:
            args += ["sh", "-c", _INIT, "agentrt-sandbox", *argv]
        if filter_path is not None:
            # bubblewrap reads the program from a descriptor, opened for this call alone.
            return ["sh", "-c", seccomp.OPEN_PROGRAM, filter_path, *args]
        return args


def _pinned(workdir: Path, folders: Sequence[Path], covered: Sequence[Path]) -> list[Path]:
    """`folders`, and every folder between `workdir` and them or `covered`, parents first.

    Each is bound onto itself: a folder holding a read-only mount could otherwise be
    renamed, mounts and all, and a new one with other contents made in its place.
    """
    found: set[Path] = set(folders)
    for path in (*folders, *covered):
        found.update(p for p in path.parents if workdir in p.parents)
    return sorted(found, key=lambda p: (len(p.parts), p))


@record
class Repository:
    """What of the working folder's git repository no tool may change, or move away."""

    #: Its ``.git`` folder (or the folder a ``.git`` file names) and each submodule's
    #: repository: bound onto themselves, so that they stay where they are.
    pinned: tuple[Path, ...] = ()
    #: Its hooks and configuration (a submodule's too), and a ``.git`` file: read-only.
    protected: tuple[Path, ...] = ()


def repository_of(workdir: Path) -> Repository:
    """The paths of `workdir`'s own git repository that tools get read-only.

    git runs a repository's hooks (``.git/hooks``) and the programs its
    configuration names (``core.fsmonitor``, ``core.hooksPath``, filter and
    diff drivers, aliases, ``core.sshCommand``) with the person's full access,
    outside any sandbox, the next time they use git there: a tool that could
    write them could run anything later, unasked. So they are read-only to every
    call, for the repository at the working folder's top and the submodules'
    repositories inside it; the ``.git`` folder is a mount point of its own, so
    it cannot be moved away and replaced by a new one. Objects, refs, the index
    and the rest stay writable: commits, branches and stashes work. A hooks
    folder that is missing is made (empty), so that none can be made by a tool.
    """
    dot = workdir / ".git"
    try:
        if dot.is_symlink():
            return Repository()
        if dot.is_file():
            gitdir = _gitdir_of(dot, workdir)
            if gitdir is None or workdir not in gitdir.parents or not gitdir.is_dir():
                return Repository((), (dot,))
            gitdirs = _repositories_from(gitdir, workdir)
            return Repository(gitdirs, (dot, *_protected_in(gitdirs)))
        if not dot.is_dir():
            return Repository()
        gitdirs = _repositories_from(dot, workdir)
        return Repository(gitdirs, _protected_in(gitdirs))
    except OSError:
        return Repository()


def _gitdir_of(dot: Path, workdir: Path) -> Path | None:
    """The folder a ``.git`` file names (``gitdir: PATH``), resolved; None if it names none."""
    text = dot.read_text(encoding="utf-8", errors="replace")
    first = text.splitlines()[0] if text else ""
    if not first.startswith("gitdir:"):
        return None
    return (workdir / first.removeprefix("gitdir:").strip()).resolve()


def _repositories_from(gitdir: Path, workdir: Path) -> tuple[Path, ...]:
    """`gitdir`, then the submodules' repositories in it (``modules``), theirs in turn, and
    the repository a ``commondir`` names (a linked worktree's) where it is in `workdir`."""
    found = [gitdir]
    for folder in found:  # grows as it goes
        common = folder / _COMMONDIR
        if common.is_file() and not common.is_symlink():
            text = common.read_text(encoding="utf-8", errors="replace").strip()
            named = (folder / text).resolve() if text else folder
            if workdir in named.parents and named.is_dir() and named not in found:
                found.append(named)
        modules = folder / "modules"
        if modules.is_dir() and not modules.is_symlink():
            found.extend(p for p in _repositories_under(modules) if p not in found)
    return tuple(found)


def _protected_in(gitdirs: tuple[Path, ...]) -> tuple[Path, ...]:
    """What of `gitdirs` git runs programs by or takes for them: read-only to tools.

    Each one's hooks folder (made when missing) and configuration; its linked
    worktrees' own files (``worktrees``: each one's ``commondir`` names the
    repository whose hooks and configuration it takes); a ``commondir`` that is
    there already (one made later is removed as it appears: `commondir`); and
    ``config.worktree`` where ``extensions.worktreeConfig`` has git read it
    (made empty when missing).
    """
    found: list[Path] = []
    for folder in gitdirs:
        hooks = folder / "hooks"
        if not hooks.is_dir() and not hooks.is_symlink():
            with contextlib.suppress(OSError):  # where it cannot be made, a tool cannot either
                hooks.mkdir()
        if hooks.exists():
            found.append(hooks)
        config = folder / "config"
        if config.exists():
            found.append(config)
            worktree_config = folder / "config.worktree"
            if not os.path.lexists(worktree_config) and _reads_worktree_config(config):
                with contextlib.suppress(OSError):
                    worktree_config.touch(exist_ok=True)
        for name in ("worktrees", _COMMONDIR, "config.worktree"):
            path = folder / name
            if path.exists() and not path.is_symlink():
                found.append(path)
    return tuple(found)


#: What git reads first in a git folder (`agentrt.agent.commondir`).
_COMMONDIR: Final = "commondir"

#: ``worktreeConfig = true`` (or yes, on, a number other than 0, or no value) in a section.
_WORKTREE_CONFIG = re.compile(
    r"^\s*worktreeconfig\s*(?:$|=\s*\"?(?:true|yes|on|[1-9]\d*)\"?\s*(?:[#;].*)?$)"
)


def _reads_worktree_config(config: Path) -> bool:
    """Whether the repository configuration `config` sets ``extensions.worktreeConfig``."""
    section = ""
    try:
        lines = config.read_text(encoding="utf-8", errors="replace").lower().splitlines()
    except OSError:
        return False
    for line in lines:
        header = re.match(r"^\s*\[\s*([^\]\s\"]+)", line)
        if header:
            section = header.group(1)
            line = line[line.index("]") + 1 :] if "]" in line else ""
        if section == "extensions" and _WORKTREE_CONFIG.match(line):
            return True
    return False


def _repositories_under(folder: Path) -> list[Path]:
    """The submodules' repositories under `folder` (``.git/modules``; nested by their names)."""
    found: list[Path] = []
    for root, dirs, files in os.walk(folder):
        if "HEAD" in files and "config" in files:
            found.append(Path(root))
            dirs[:] = []  # its own submodules are under its own "modules"
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(root, d))]
    return sorted(found)


#: What in the person's home folder a shell, a login or a desktop session runs, or names
#: programs for git, ssh or an editor to run: read-only to tools where the working folder
#: holds the home folder (`home_startup_in`).
HOME_STARTUP: Final = (
    *(".bashrc", ".bash_profile", ".bash_login", ".bash_logout", ".profile"),
    *(".zshrc", ".zshenv", ".zprofile", ".zlogin", ".zlogout", ".config/fish"),
    *(".pam_environment", ".config/environment.d", ".xprofile", ".xsession", ".xsessionrc"),
    *(".xinitrc", ".config/autostart", ".config/systemd"),
    *(".gitconfig", ".config/git", ".ssh", ".local/bin", "bin"),
    *(".vimrc", ".vim", ".config/nvim", ".emacs", ".emacs.d", ".tmux.conf", ".config/tmux"),
)


def home_folder() -> Path:
    """The person's home folder (``$HOME``), resolved."""
    return Path(os.path.expanduser("~")).resolve()


def holds_home(workdir: Path, home: Path | None = None) -> bool:
    """Whether `workdir` is the person's home folder (`home`, else looked up) or holds it."""
    home = home_folder() if home is None else home
    workdir = workdir.resolve()
    return home == workdir or workdir in home.parents


def home_startup_in(workdir: Path) -> tuple[Path, ...]:
    """The `HOME_STARTUP` paths there are, when `workdir` holds the home folder (else none).

    Otherwise the home folder is outside the working folder, read-only with the rest of
    ``/``. One that is a symlink has its target covered, not the link itself.
    """
    home = home_folder()  # once a call: resolving it takes a system call per part
    if not holds_home(workdir, home):
        return ()
    return tuple(home / name for name in HOME_STARTUP if (home / name).exists())


#: Whether this process has said that calls run without their seccomp program.
_told_no_seccomp = False


def _seccomp_program(network: bool) -> str | None:
    """The seccomp program for a call with or without the network; None (said once) if none
    can be had here."""
    global _told_no_seccomp
    program = seccomp.program(network=network)
    if program is None and not _told_no_seccomp:
        _told_no_seccomp = True
        print(
            "agentrt: warning: tool calls can reach the session's kernel keyring, and calls "
            f"without the network can still reach Unix sockets: {seccomp.why_not()} "
            "(see docs/security.md)",
            file=sys.stderr,
        )
    return program


@functools.cache
def runtime_roots() -> tuple[Path, ...]:
    """The folders of the running Python and of agentrt itself, which tool processes use."""
    here = Path(__file__).resolve().parents[2]  # the folder agentrt was imported from
    found = (Path(sys.prefix), Path(sys.base_prefix), Path(sys.exec_prefix), here)
    return tuple(dict.fromkeys(p.resolve() for p in found))


def _related(path: Path, others: Iterable[Path]) -> bool:
    """Whether `path` is one of `others`, or inside one, or holds one."""
    return any(path == o or path in o.parents or o in path.parents for o in others)


def _visible(path: Path, bound: Sequence[Path]) -> bool:
    """Whether `path` is there inside the sandbox (outside the private /tmp, or bound in again)."""
    if path != PRIVATE_TMP and PRIVATE_TMP not in path.parents:
        return True
    return any(path == b or b in path.parents for b in bound)


def tool_environment(
    environ: Mapping[str, str],
    *,
    names: Iterable[str] = (),
    values: Iterable[str] = (),
) -> dict[str, str]:
    """The environment a tool gets: the runner's, less every credential.

    Left out: agentrt's own variables (``AGENTRT_*``), the providers' and chat
    services' (``OPENAI_*``, ``ANTHROPIC_*``, ``TELEGRAM_*``, ``DISCORD_*``),
    every variable whose name says it holds a credential (``KEY``, ``SECRET``,
    ``TOKEN``, ``PASSWORD``, ``AUTH``... anywhere in it), the variables `names`
    (a provider's ``api_key_env``, a bot's ``token_env``), and any variable
    whose value is one of `values` (the keys and tokens in use), whatever its
    name. PATH and HOME are always set; TMPDIR is the sandbox's ``/tmp``.
    """
    dropped = set(names)
    secret_values = {v for v in values if v}
    env: dict[str, str] = {}
    for name, value in environ.items():
        if name in dropped or name.startswith(_PRIVATE_PREFIXES) or _SECRET_NAME.search(name):
            continue
        if value in secret_values:
            continue
        env[name] = value
    env.setdefault("PATH", _DEFAULT_PATH)
    env.setdefault("HOME", os.path.expanduser("~"))
    env["TMPDIR"] = str(PRIVATE_TMP)
    return env


#: The variables of a tool's environment that a command run through sudo keeps.
PRIVILEGED_VARIABLES: Final = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TERM", "TZ")


#: What a program prints when the kernel refused a write to a read-only mount.
_READ_ONLY = "Read-only file system"
#: What it prints when it tried to rename or remove a mount point (`Repository`).
_BUSY = "Device or resource busy"
#: A repository's hooks or configuration (a submodule's too) named in a message.
_REPOSITORY_PART = re.compile(
    r"\.git/(?:modules/(?:[^\s'\"`:]+/)?)?(?:hooks|config|worktrees|commondir)\b"
)
_REPOSITORY_NOTE: Final = (
    "[sandbox: a repository's hooks and configuration (.git/hooks, .git/config) are "
    "read-only to tools, whatever the approval, and its .git folder stays where it is: git "
    "runs what they name with the person's full access, outside the sandbox. For one "
    "command, pass a setting with git -c NAME=VALUE; to change them, ask the person]"
)
_PATH_IN_MESSAGE = re.compile(r"(?:^|[\s'\"`(])(/[^\s'\"`:)]*)")


_MISSING = ("No such file or directory", "Directory nonexistent", "nonexistent directory")


def _private_tmp_note(output: str, workdir: Path) -> str | None:
    """A note for a path under the host's /tmp that the sandbox's private /tmp does not hold."""
    for line in output.splitlines():
        if not any(m in line for m in _MISSING):
            continue
        for raw in _PATH_IN_MESSAGE.findall(line):
            path = Path(os.path.normpath(raw))
            if PRIVATE_TMP not in path.parents or workdir == path or workdir in path.parents:
                continue
            if path.exists() or path.parent.exists():
                return (
                    f"[sandbox: {path} is not there for tools: their /tmp is a private, empty "
                    f"folder; only {workdir} and that /tmp are writable]"
                )
    return None


def refusal_note(
    output: str,
    *,
    workdir: Path,
    restricted: Sequence[Path],
) -> str | None:
    """What to tell the model when `output` shows the sandbox refused a write; None if it did not.

    Names the restricted root the refused path lies under, when a path in the
    message says so, and how to get such a call confirmed.
    """
    refused = [line for line in output.splitlines() if _READ_ONLY in line or _BUSY in line]
    if any(_REPOSITORY_PART.search(line) or "'.git'" in line for line in refused):
        return _REPOSITORY_NOTE
    lines = [line for line in refused if _READ_ONLY in line]
    if not lines:
        return _private_tmp_note(output, workdir)
    roots: list[Path] = []
    for line in lines:
        for raw in _PATH_IN_MESSAGE.findall(line):
            path = Path(os.path.normpath(raw))
            for root in restricted:
                if (path == root or root in path.parents) and root not in roots:
                    roots.append(root)
    where = f"only {workdir} and a private /tmp are writable"
    if roots:
        named = ", ".join(str(r) for r in roots)
        return (
            f"[sandbox: the write was refused: {named} is a restricted path ({where}). "
            f"To change it, issue the call again naming the path under {roots[0]} plainly "
            "(no variables, quoting tricks or cd), so that it is confirmed with the system "
            "password]"
        )
    listed = ", ".join(str(r) for r in restricted) or "none"
    return (
        f"[sandbox: a write was refused: {where}; agentrt's own files are hidden. "
        f"Restricted paths ({listed}) can be changed only by a call that names the path "
        "plainly, so that it is confirmed with the system password]"
    )

"""The system prompt of a run: what the model is told before the conversation.

It is made of parts, in this order:

1. agentrt's own instructions: the tools offered in this run (from the specs the
   model is given, never a list of its own), the approval policy and the
   sandbox in force, and what a stop and a resume look like to the model (the
   note of the interrupt ledger, `agentrt.store.ledger`);
2. the environment: the working folder, the repository holding it, the
   operating system, the shell, the run's start date;
3. the project's ``AGENTS.md`` files, from the repository's root (the nearest
   folder above the working folder holding ``.git``; the working folder itself
   when there is none) down to the working folder, each under its path, nearer
   files later; `AGENTS_LIMIT` bytes in all, the nearer files served first, and
   what was cut is said where it was cut;
4. the configuration's ``instructions``, then the text of ``instructions_file``.

A run builds it once, at its first model request, and every request of the run
sends it unchanged (so a provider's prompt cache holds it): the date is the
run's start date. A subagent's prompt is its parent's with one part added that
says it is a subagent. ``agentrt config show --prompt`` prints it with
`build_prompt`, the same function a run uses.

The files are read with plain blocking calls: a few ``stat`` calls per folder
between the working folder and the repository's root, and at most
`AGENTS_LIMIT` bytes.
"""

from __future__ import annotations

import functools
import os
import shutil
import stat
import sys
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any
from typing import Final
from typing import Protocol

import attrs

from ..config.settings import INSTRUCTIONS_LIMIT
from ..models.messages import ToolSpec
from ..vocab.reprs import record
from ..vocab.terms import Approval
from ..vocab.terms import SandboxMode
from .sandbox import Sandbox

#: The file a project keeps its instructions for agents in (the cross-tool convention).
AGENTS_FILE: Final = "AGENTS.md"
#: The most bytes of ``AGENTS.md`` text one prompt holds, all files together.
AGENTS_LIMIT: Final = 32 * 1024


class PromptInputs(Protocol):
    """What a prompt is made from: an `agentrt.agent.config.AgentConfig` has all of it."""

    @property
    def workdir(self) -> Path: ...
    @property
    def approval(self) -> Approval: ...
    @property
    def sandbox(self) -> Sandbox: ...
    @property
    def restricted_paths(self) -> tuple[Path, ...]: ...
    @property
    def instructions(self) -> str: ...
    @property
    def instructions_file(self) -> Path | None: ...
    @property
    def hidden_paths(self) -> tuple[Path, ...]: ...


@record
class PromptSettings:
    """`PromptInputs` on their own, for a prompt shown without a run (``config show --prompt``)."""

    workdir: Path
    approval: Approval
    sandbox: Sandbox
    restricted_paths: tuple[Path, ...] = ()
    instructions: str = ""
    instructions_file: Path | None = None
    #: What no tool may see (agentrt's own files): no ``AGENTS.md`` is read from there.
    hidden_paths: tuple[Path, ...] = ()


@record
class PromptPart:
    """One part of a system prompt: what it is and its text (heading included)."""

    #: ``agentrt``, ``environment``, ``agents_md``, ``instructions`` or ``subagent``.
    kind: str
    text: str


@record
class AgentsFile:
    """One ``AGENTS.md`` found between the repository's root and the working folder."""

    path: Path
    #: Its size in bytes (0 when it could not be read).
    size: int
    #: How many of its bytes the prompt holds.
    sent: int
    #: Why it could not be read ("" when it was).
    error: str = ""

    @property
    def cut(self) -> bool:
        """Whether part of it (or all of it) was left out to keep within `AGENTS_LIMIT`."""
        return not self.error and self.sent < self.size


@record
class SystemPrompt:
    """A run's system prompt: its parts, and the files it read."""

    parts: tuple[PromptPart, ...]
    #: The run's start, in local time: the date the prompt gives.
    started: datetime
    #: The names of the tools offered, in the order the model is offered them.
    tools: tuple[str, ...] = ()
    #: The ``AGENTS.md`` files found, root first.
    agents_files: tuple[AgentsFile, ...] = ()

    @property
    def text(self) -> str:
        """The prompt as sent: its parts, a blank line between two."""
        return "\n\n".join(part.text for part in self.parts)

    def for_subagent(self, name: str) -> SystemPrompt:
        """The prompt of the subagent `name` started by this prompt's run: the same parts,
        and one that says it is a subagent."""
        parts = [p for p in self.parts if p.kind != "subagent"]
        return attrs.evolve(self, parts=(*parts, PromptPart("subagent", _subagent(name))))

    def as_json(self) -> dict[str, Any]:
        """What ``agentrt config show --prompt --json`` prints."""
        return {
            "text": self.text,
            "date": self.started.date().isoformat(),
            "tools": list(self.tools),
            "parts": [{"kind": p.kind, "text": p.text} for p in self.parts],
            "agents_files": [
                {
                    "path": str(f.path),
                    "bytes": f.size,
                    "sent": f.sent,
                    "cut": f.cut,
                    "error": f.error or None,
                }
                for f in self.agents_files
            ],
        }


def build_prompt(
    config: PromptInputs, tools: Sequence[ToolSpec], started: datetime | None = None
) -> SystemPrompt:
    """The system prompt of a run with `config`, offering `tools`, started at `started`
    (local time; default now)."""
    started = started if started is not None else datetime.now().astimezone()
    root = repository_root(config.workdir)
    files, agents_text = _agents_part(config.workdir, root, config.hidden_paths)
    parts = [
        PromptPart("agentrt", _own_part(config, tools)),
        PromptPart("environment", _environment(config, root, started)),
    ]
    if agents_text:
        parts.append(PromptPart("agents_md", agents_text))
    if config.instructions.strip():
        parts.append(
            PromptPart(
                "instructions",
                f"# Instructions from the configuration\n\n{config.instructions.strip()}",
            )
        )
    if config.instructions_file is not None:
        parts.append(PromptPart("instructions", _instructions_file(config.instructions_file)))
    return SystemPrompt(tuple(parts), started, tuple(t.name for t in tools), files)


# -- agentrt's own instructions ------------------------------------------------------------

_OPENING: Final = (
    "You are an agent run by agentrt. You work for a person, on their machine, through the "
    "tools below, in the working folder named under Environment. Read before you change "
    "anything, do what you were asked and no more, and say plainly what you did and what "
    "you could not do: never claim an effect no tool call had."
)

_APPROVAL: Final = {
    Approval.ASK: "Every file change and every shell command is shown to the person first "
    "and runs only if they allow it; reading runs at once.",
    Approval.AUTO_EDIT: "File changes inside the working folder run at once; every shell "
    "command is shown to the person first and runs only if they allow it.",
    Approval.FULL_AUTO: "File changes and shell commands run at once, without asking.",
}


def _own_part(config: PromptInputs, tools: Sequence[ToolSpec]) -> str:
    listed = "\n".join(f"- {t.name}: {' '.join(t.description.split())}" for t in tools)
    tools_text = (
        f"# Your tools\n\n{listed}"
        if tools
        else "# Your tools\n\nNo tools are offered in this run: answer in words."
    )
    restricted = ", ".join(str(p) for p in config.restricted_paths)
    password = (
        f"a call that names a restricted path ({restricted}) needs the person's system password; "
        if restricted
        else ""
    )
    approval = (
        f"# Approval policy: {config.approval.value}\n\n{_APPROVAL[config.approval]} "
        f"Whatever the policy, {password}a call that names agentrt's own configuration, and a "
        "call that may already have run once, are always asked about. The person may say no to a "
        "call, or allow a tool for the rest of the session. A call they denied says so in its "
        "result: do not issue it again unchanged; ask, or find another way."
    )
    return "\n\n".join(
        (_OPENING, tools_text, approval, _sandbox_part(config), _STOPS),
    )


def _sandbox_part(config: PromptInputs) -> str:
    sandbox = config.sandbox
    if sandbox.mode is SandboxMode.OFF:
        return (
            "# Sandbox: off\n\nThe sandbox is turned off: tools run with the person's full "
            "access, to every file they can read or change, agentrt's own files included. Take "
            "great care; in a chat or web session, file changes and commands are refused."
        )
    if not sandbox.enforced:
        return (
            "# Sandbox: none could be had\n\nNo sandbox can confine tools on this machine "
            f"({sandbox.why}), so every file change and shell command is shown to the person "
            "first, whatever the approval policy."
        )
    network = (
        "Every call has the network."
        if sandbox.network
        else "Calls the person allowed have the network; calls that run without asking have "
        "none (only a loopback, and no Unix sockets: making one fails with 'Permission "
        "denied')."
    )
    return (
        f"# Sandbox: {sandbox.mode.value}\n\nEvery process a tool starts runs in a sandbox: "
        "the file system is read-only except the working folder and a private, empty /tmp "
        "that is gone when the call ends; agentrt's own state and configuration are hidden; "
        "restricted paths stay read-only unless a call that names them plainly was allowed "
        "with the system password; a git repository's hooks and configuration (.git/hooks, "
        f".git/config) are read-only (use git -c NAME=VALUE). {network} A write the sandbox "
        "refuses fails with "
        '"Read-only file system", and the result says why.'
    )


_STOPS: Final = (
    "# Stops and resumes\n\n"
    "The person may stop this run at any moment: cancel it (the task ends; the session keeps "
    "what was done), or pause it to resume later; a lost connection or a restart stops it "
    "too, keeping the task. A resumed task goes on from its saved form: a call whose result "
    "was saved does not run again, and a reply of yours that was saved is not asked for "
    "again. A question to the person may be answered at once, or later: the run then stops "
    "and resumes with the answer.\n\n"
    "After a stop, the tool results of the round it interrupted are followed by one note "
    "from agentrt, not from the person. It says why and when the run stopped; the state of "
    "each call of that round (done; not started; stopped while running, its process killed; "
    "may have run, started with no result saved; denied; refused) and what became of it; "
    "and how many words of a reply that was not saved were lost. A call that was stopped or "
    "may have run may have taken effect in part, or twice: check before you rely on it."
)


def _subagent(name: str) -> str:
    return (
        f"# You are a subagent\n\nYou are {name}, started by the spawn tool of the agent "
        "above you. The task you are given is your part of its work, and your final answer "
        "is returned to it as the spawn call's result. The person, the tools and the "
        "policies are the same."
    )


# -- the environment ---------------------------------------------------------------------


def repository_root(workdir: Path) -> Path | None:
    """The nearest folder holding ``.git`` (a folder, or a worktree's file), from `workdir` up."""
    for folder in (workdir, *workdir.parents):
        if os.path.lexists(folder / ".git"):
            return folder
    return None


def _environment(config: PromptInputs, root: Path | None, started: datetime) -> str:
    workdir = config.workdir
    if root is None:
        repository = "none (no folder holding .git above the working folder)"
    elif root == workdir:
        repository = f"{root} (git), the working folder itself"
    else:
        repository = f"{root} (git); the working folder is inside it"
    lines = [
        f"- Working folder: {workdir} (tools work here; a relative path starts here)",
        f"- Repository: {repository}",
        f"- Operating system: {operating_system()}",
        f"- Shell: each command of the shell tool runs with sh -c ({shell()})",
        f"- Today's date: {started.date().isoformat()}, {started:%A} (time zone"
        f" {started.tzname() or 'unknown'}; the date this run started)",
    ]
    return "# Environment\n\n" + "\n".join(lines)


@functools.cache
def operating_system() -> str:
    """The system, its release and machine, and the distribution's name where it has one."""
    import platform  # only when a prompt is built

    name = f"{platform.system() or sys.platform} {platform.release()} {platform.machine()}"
    try:
        pretty = platform.freedesktop_os_release().get("PRETTY_NAME", "")
    except OSError:
        pretty = ""
    return f"{name.strip()} ({pretty})" if pretty else name.strip()


@functools.cache
def shell() -> str:
    """The program ``sh`` is here."""
    found = shutil.which("sh")
    if found is None:
        return "no sh found on the PATH"
    real = os.path.realpath(found)
    return found if real == found else f"{found}, which is {real}"


# -- AGENTS.md -----------------------------------------------------------------------------


def agents_paths(workdir: Path, root: Path | None) -> list[Path]:
    """The ``AGENTS.md`` files from `root` (else `workdir`) down to `workdir`, root first."""
    folders = [workdir]
    if root is not None and root != workdir:
        folders += list(workdir.parents[: len(workdir.parts) - len(root.parts)])
    return [f / AGENTS_FILE for f in reversed(folders) if _is_file(f / AGENTS_FILE)]


def _is_file(path: Path) -> bool:
    """Whether `path` is a regular file (or a link to one); False when it cannot be known."""
    try:
        return path.is_file()
    except OSError:  # a folder that may not be searched
        return False


def _agents_part(
    workdir: Path, root: Path | None, hidden: Sequence[Path] = ()
) -> tuple[tuple[AgentsFile, ...], str]:
    paths = agents_paths(workdir, root)
    hidden = tuple(h.resolve() for h in hidden)
    if not paths:
        return (), ""
    budget = AGENTS_LIMIT
    read: dict[Path, tuple[AgentsFile, str]] = {}
    for path in reversed(paths):  # the nearest first: its instructions are the most exact
        found, text = _read_bounded(path, budget, hidden)
        budget -= found.sent
        read[path] = (found, text)
    files = tuple(read[p][0] for p in paths)
    sections = [_agents_section(*read[p]) for p in paths]
    intro = (
        "# Project instructions (AGENTS.md)\n\n"
        "The project's instructions for agents, from the repository's root down to the "
        "working folder. Follow them; where two disagree, the nearer file (later here) wins."
    )
    return files, "\n\n".join([intro, *sections])


def _agents_section(found: AgentsFile, text: str) -> str:
    head = f"## {found.path}"
    limit = f"AGENTS.md files may take {AGENTS_LIMIT // 1024} KiB in all, the nearer first"
    if found.error:
        return f"{head}\n\n[not read: {found.error}]"
    if found.size == 0:
        return f"{head}\n\n[empty]"
    if found.sent == 0:
        return f"{head}\n\n[left out, all {found.size} bytes: {limit}]"
    if found.cut:
        return (
            f"{head}\n\n{text}\n\n[cut here: {found.sent} of its {found.size} bytes are "
            f"shown; {limit}]"
        )
    return f"{head}\n\n{text}"


def _read_bounded(path: Path, budget: int, hidden: Sequence[Path] = ()) -> tuple[AgentsFile, str]:
    """At most `budget` bytes of `path` (cut at the end of a line when it can be).

    agentrt reads it with the person's access, outside the sandbox, and the
    model sees what it reads: a file a tool could change (``AGENTS.md`` in the
    working folder) that leads, through a link, to what no tool may see (agentrt's
    own files: secrets, keys, the HTTP token) is not read. Which file was opened
    is asked of the kernel once it is open (``/proc/self/fd``), so a link
    changed in between is no way round; nor is a named pipe (it would block).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        return AgentsFile(path, 0, 0, exc.strerror or type(exc).__name__), ""
    with os.fdopen(fd, "rb") as file:
        real = Path(os.readlink(f"/proc/self/fd/{fd}"))
        if any(real == h or h in real.parents for h in hidden):
            why = f"it leads to {real}, among agentrt's own files, which tools may not see"
            return AgentsFile(path, 0, 0, why), ""
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                return AgentsFile(path, 0, 0, "not a regular file"), ""
            size = st.st_size
            data = file.read(max(budget, 0))
        except OSError as exc:
            return AgentsFile(path, 0, 0, exc.strerror or type(exc).__name__), ""
    if len(data) < size:
        cut = data.rfind(b"\n")
        data = data[: cut + 1] if cut >= 0 else _whole_characters(data)
    text = data.decode("utf-8", "replace").strip()
    return AgentsFile(path, size, len(data)), text


def _whole_characters(data: bytes) -> bytes:
    """`data` less a UTF-8 character cut off at its end."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte < 0x80:
            return data
        if byte >= 0xC0:  # the first byte of a character: is it whole?
            need = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return data if back >= need else data[:-back]
    return data


# -- the configured instructions ----------------------------------------------------------


def _instructions_file(path: Path) -> str:
    head = f"# Instructions from {path}"
    try:
        with path.open("rb") as file:
            size = os.fstat(file.fileno()).st_size
            data = file.read(INSTRUCTIONS_LIMIT)
    except OSError as exc:
        return f"{head}\n\n[not read: {exc.strerror or type(exc).__name__}]"
    text = data.decode("utf-8", "replace").strip()
    if len(data) < size:
        kept = _whole_characters(data)
        text = kept.decode("utf-8", "replace").strip()
        return (
            f"{head}\n\n{text}\n\n[cut here: {len(kept)} of its {size} bytes are shown; "
            f"instructions may take {INSTRUCTIONS_LIMIT // 1024} KiB]"
        )
    return f"{head}\n\n{text}"

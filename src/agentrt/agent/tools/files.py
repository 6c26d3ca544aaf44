"""Tools on files: `read_file`, `write_file` and `edit_file`, in the sandbox, through sudo for a
restricted path.

A write or an edit replaces the file atomically (`agentrt.agent.atomic`): a kill
at any moment leaves the old content or the new. Its confirmation shows the
unified diff of the change (`agentrt.agent.tools.diff`), made from the file as
the sandboxed read sees it. Every tool runs its work in a helper process in
the sandbox (`agentrt.agent.scan` reads, `agentrt.agent.atomic` writes), so the
kernel, not the spelling of the path, keeps them out of agentrt's own files and
off restricted paths.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import sys
from collections.abc import Iterator
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from typing import ClassVar
from typing import Final

import attrs
import trio

from ...core.policy import Edit
from ...models.messages import ToolCall
from ...vocab.reprs import record
from .. import atomic as _atomic
from .. import scan as _scan
from ..atomic import ERROR_PREFIX
from ..atomic import EXIT_CHANGED
from ..atomic import EXIT_CUT_SHORT
from ..atomic import EXIT_OS_ERROR
from ..atomic import ChangedError
from ..atomic import digest
from ..atomic import temporary_name
from ..atomic import write_atomic
from ..checkpoint import Change
from ..checkpoint import Entry
from ..checkpoint import in_flight
from ..guard import inside
from ..sandbox import refusal_note
from ..toolproc import ToolOutput
from ..toolproc import run_tool
from .base import DENIED
from .base import Tool
from .base import ToolError
from .base import ToolRefused
from .base import ToolRun
from .base import argument
from .base import call_record
from .base import check_confinable
from .base import confine
from .base import confirmed
from .base import runs_unasked
from .base import via_sudo
from .diff import unified_diff

#: The script the write helper runs (standard library only; see `agentrt.agent.atomic`).
_WRITER: Final = str(Path(_atomic.__file__).resolve())
#: The script the read helpers run (standard library only; see `agentrt.agent.scan`).
_SCANNER: Final = str(Path(_scan.__file__).resolve())
#: The most lines one `read_file` call gives.
READ_LINES: Final = 2000
#: The most bytes one `read_file` call gives (and `list_dir`, `glob`, `grep`), a note on
#: what was left out aside: below the 32 KiB of a tool result a task keeps
#: (`agentrt.vocab.clamp.TOOL_RESULT_LIMIT`), so a result is never elided in a kept task.
READ_BYTES: Final = 32_000


def _writer(path: Path, expect: str | None, tmp: str, size: int) -> list[str]:
    """The write helper's command line; the `size` bytes of content go on its standard input."""
    return [
        sys.executable,
        "-I",
        "-S",
        _WRITER,
        "--tmp",
        tmp,
        "--size",
        str(size),
        str(path),
        *([expect] if expect else []),
    ]


@contextlib.contextmanager
def _temporary_removed(tmp: str) -> Iterator[None]:
    """Remove `tmp` should the write helper not have: it was stopped, or killed.

    Meanwhile a walk of the folder leaves it out (`agentrt.agent.checkpoint.in_flight`).
    """
    try:
        with in_flight(tmp):
            yield
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def scanner(*args: str) -> list[str]:
    """The command line of the read helper (`agentrt.agent.scan`) in mode ``args[0]``."""
    return [sys.executable, "-I", "-S", _SCANNER, *args]


async def run_scan(agent: ToolRun, *args: str) -> ToolOutput:
    """Run the read helper with `args` in the run's sandbox (no network, nothing writable)."""
    config = agent.config
    argv = confine(agent, scanner(*args), network=False)
    return await run_tool(argv, cwd=config.workdir, ledger=config.tool_ledger, env=config.tool_env)


def scan_failure(output: bytes, returncode: int) -> tuple[int, str]:
    """(errno, reason) of a read helper that failed; errno 0 when it did not say one."""
    said = output.decode("utf-8", "replace").strip()
    for line in said.splitlines():
        if line.startswith(_scan.ERROR_PREFIX + ":"):
            _, number, reason, _ = line.split(":", 3)
            return int(number) if number.isdigit() else 0, reason
    return 0, said.rpartition(": ")[2] or f"exit status {returncode}"


def shown_path(agent: ToolRun, path: Path | str) -> str:
    """`path` as results show it: relative to the working folder when inside it."""
    workdir = agent.config.workdir
    try:
        rel = Path(path).relative_to(workdir)
    except ValueError:
        return str(path)
    return str(rel) if rel.parts else "."


async def current_content(agent: ToolRun, path: Path) -> bytes | None:
    """The file's bytes as the sandboxed read sees them; None when there is no such file.

    Raises `ToolError` when it is there but cannot be read.
    """
    out = await run_scan(agent, "cat", str(path))
    if out.returncode == 0:
        return out.output
    number, reason = scan_failure(out.output, out.returncode)
    if number == errno.ENOENT:
        return None
    raise ToolError(f"cannot read {path}: {reason}")


def _write_failure(agent: ToolRun, path: Path, result: ToolOutput) -> ToolError:
    """The error of a write helper that failed, in the words a direct write would give."""
    said = result.output.decode("utf-8", "replace").strip()
    reason = said
    if result.returncode == EXIT_OS_ERROR and said.startswith(ERROR_PREFIX):
        reason = said.split(":", 3)[2]
    message = f"cannot write {path}: {reason or f'exit status {result.returncode}'}"
    if result.returncode in (EXIT_CHANGED, EXIT_CUT_SHORT):
        return ToolError(message)
    config = agent.config
    note = refusal_note(
        f"{path}: {reason}", workdir=config.workdir, restricted=config.restricted_paths
    )
    return ToolError(f"{message} {note}" if note else message)


def _restricted_root(agent: ToolRun, path: Path) -> Path | None:
    """The restricted root `path` is under (then the write takes the password); refuses a path
    outside the working folder, which the sandbox would refuse anyway, before anything is asked.
    """
    config = agent.config
    root = inside(path, config.restricted_paths) if config.text_guard else None
    if root is not None:
        return root
    if config.text_guard and config.sandbox.enforced and not inside(path, (config.workdir,)):
        raise ToolRefused(
            f"refused: {path} is outside the working folder ({config.workdir}); the "
            "sandbox lets tools write only there and in a private /tmp"
        )
    return None


@record
class _Change:
    """A write about to be made: what is asked, what the result says, what it is based on."""

    path: Path
    data: bytes
    #: The question's words ("write 5 bytes to PATH").
    prompt: str
    #: The result's words once it is done ("wrote 5 bytes to PATH").
    done: str
    diff: str | None
    #: The `digest` of the content the change was made from, which must still be there.
    expect: str | None = None


def _cannot_undo(agent: ToolRun, path: Path, root: Path | None) -> str | None:
    """Why the change of `path` could not be undone, said in its confirmation; or None."""
    checkpoints = agent.config.checkpoints
    if checkpoints is None:
        return None
    if root is not None:
        return "a restricted path is written through sudo, and not checkpointed"
    return checkpoints.too_big(path)


async def _checkpoint(agent: ToolRun, call: ToolCall, change: _Change, why: str | None) -> None:
    """Record what the write is about to change (its old content kept), before it is made."""
    checkpoints = agent.config.checkpoints
    if checkpoints is None:
        return

    def keep() -> None:
        assert checkpoints is not None
        path = change.path
        changes: tuple[Change, ...] = ()
        if why is None:
            old = checkpoints.entry_of(path)
            mode = old.mode if old is not None and old.kind == "file" else _new_file_mode()
            changes = (Change(str(path), old, Entry("file", mode, digest(change.data))),)
        checkpoints.record(call_record(agent, call, changes, why))

    try:
        await trio.to_thread.run_sync(keep)
    except OSError as exc:
        raise ToolError(
            f"cannot keep the checkpoint of {change.path}: {exc.strerror or exc}; "
            "nothing was written"
        ) from None


def _new_file_mode() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


async def _apply(agent: ToolRun, call: ToolCall, change: _Change, root: Path | None) -> str:
    """Confirm `change` (showing its diff) and make it, as `write_file` always has.

    Its checkpoint is kept after the confirmation, before the write; one that
    cannot be undone says so in the question.
    """
    config = agent.config
    path, data = change.path, change.data
    why = _cannot_undo(agent, path, root)
    if why is not None:
        change = attrs.evolve(change, prompt=f"{change.prompt} (cannot be undone: {why})")
    if root is not None:
        prompt = f"{change.prompt} (restricted)"
        tmp = temporary_name(str(path))
        argv = confine(
            agent,
            _writer(path, change.expect, tmp, len(data)),
            network=False,
            writable=(root,),
            privileged=True,
        )
        with _temporary_removed(tmp):
            result = await via_sudo(agent, call, prompt, argv, stdin=data, diff=change.diff)
        if result is None:
            return DENIED
        await _checkpoint(agent, call, change, why)
        if result.returncode != 0:
            raise _write_failure(agent, path, ToolOutput(result.returncode, result.output))
        return f"{change.done} (via sudo)"
    if await confirmed(agent, call, change.prompt, Edit(path), change.diff) is None:
        return DENIED
    await _checkpoint(agent, call, change, why)
    if config.sandbox.enforced:
        tmp = temporary_name(str(path))
        argv = confine(agent, _writer(path, change.expect, tmp, len(data)), network=False)
        with _temporary_removed(tmp):
            done = await run_tool(
                argv,
                cwd=config.workdir,
                stdin=data,
                ledger=config.tool_ledger,
                env=config.tool_env,
            )
        if done.returncode != 0:
            raise _write_failure(agent, path, done)
        return change.done
    try:
        tmp = temporary_name(str(path))
        with _temporary_removed(tmp):
            await trio.to_thread.run_sync(write_atomic, str(path), data, change.expect, tmp)
    except ChangedError:
        raise ToolError(f"cannot write {path}: {_atomic.CHANGED}") from None
    except OSError as exc:
        raise ToolError(f"cannot write {path}: {exc.strerror or exc}") from None
    return change.done


async def _diff(agent: ToolRun, path: Path, data: bytes) -> str:
    """The diff `write_file` shows: against the current file, or all additions for a new one."""
    try:
        old = await current_content(agent, path)
    except ToolError as exc:
        return f"(the current content cannot be shown: {exc})"
    return unified_diff(shown_path(agent, path), old, data)


@record
class WriteFile(Tool):
    """``write_file``: after a confirmation (with the system password on a restricted path)."""

    NAME: ClassVar = "write_file"
    RECORDS_START: ClassVar = True
    DESCRIPTION: ClassVar = (
        "Write text to a file (relative paths are inside the working directory)."
    )

    path: str
    content: str

    async def run(self, agent: ToolRun, call: ToolCall) -> str:
        check_confinable(agent)
        path = agent.resolve(self.path)
        data = self.content.encode("utf-8", "surrogatepass")
        root = _restricted_root(agent, path)
        size = f"{len(data)} bytes"
        # The current file is read for the diff only when someone will be asked.
        asked = root is not None or not runs_unasked(agent, call, Edit(path))
        change = _Change(
            path,
            data,
            prompt=f"write {size} to {path}",
            done=f"wrote {size} to {path}",
            diff=await _diff(agent, path, data) if asked else None,
        )
        return await _apply(agent, call, change, root)


#: How alike (0 to 1) a piece of the file must be to the text sought to be shown as near.
NEAR_ENOUGH: Final = 0.5
#: The most windows of lines compared when looking for the nearest match.
NEAR_WINDOWS: Final = 20_000


def nearest_match(text: str, sought: str) -> tuple[int, int, float] | None:
    """The lines of `text` most like `sought` (first, last from 1, ratio), if any come near."""
    import difflib  # loaded only when an edit's text is not found

    lines = text.splitlines()
    want = sought.splitlines() or [sought]
    target = "\n".join(want)
    count = len(want)
    best: tuple[float, int] = (NEAR_ENOUGH, -1)
    for start in range(min(max(len(lines) - count + 1, 1), NEAR_WINDOWS)):
        window = "\n".join(lines[start : start + count])
        matcher = difflib.SequenceMatcher(None, window, target, autojunk=False)
        if matcher.real_quick_ratio() < best[0] or matcher.quick_ratio() < best[0]:
            continue
        ratio = matcher.ratio()
        if ratio > best[0] or (ratio == best[0] and best[1] < 0):
            best = (ratio, start)
    if best[1] < 0:
        return None
    first = best[1] + 1
    return first, min(first + count - 1, len(lines)), best[0]


def _numbered(lines: Sequence[str], first: int) -> str:
    return "\n".join(f"{n:>6}| {line}" for n, line in enumerate(lines, start=first))


def _line_of(text: str, index: int) -> int:
    return text.count("\n", 0, index) + 1


@record
class EditFile(Tool):
    """``edit_file``: replace exact text, after a confirmation showing the diff."""

    NAME: ClassVar = "edit_file"
    RECORDS_START: ClassVar = True
    DESCRIPTION: ClassVar = (
        "Edit a file by replacing an exact piece of its text (relative paths are inside the "
        "working directory). old_string must occur exactly once, unless replace_all is true: "
        "include enough surrounding lines to make it unique. Whitespace and indentation must "
        "match exactly. To create a file, use write_file."
    )

    path: str = argument("The file to edit.")
    old_string: str = argument("The exact text to replace.")
    new_string: str = argument("The text to put in its place.")
    replace_all: bool = argument("Replace every occurrence (default false).", default=False)

    async def run(self, agent: ToolRun, call: ToolCall) -> str:
        check_confinable(agent)
        path = agent.resolve(self.path)
        if not self.old_string:
            raise ToolError("old_string is empty; to write a whole file use write_file")
        if self.old_string == self.new_string:
            raise ToolError("old_string and new_string are the same: nothing would change")
        root = _restricted_root(agent, path)
        agent.asks_nothing()  # the read may take long; the question comes after it
        current = await current_content(agent, path)
        if current is None:
            raise ToolError(f"cannot edit {path}: no such file (to create it, use write_file)")
        text = current.decode("utf-8", "surrogateescape")
        count = text.count(self.old_string)
        if count == 0:
            raise ToolError(await trio.to_thread.run_sync(self._not_found, text, path))
        if count > 1 and not self.replace_all:
            raise ToolError(self._ambiguous(text, path, count))
        new_text = text.replace(self.old_string, self.new_string)
        try:
            data = new_text.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:
            raise ToolError("new_string holds characters that cannot be written as UTF-8") from None
        what = f"{count} replacement{'s' if count != 1 else ''}"
        change = _Change(
            path,
            data,
            prompt=f"edit {path} ({what})",
            done=f"edited {path}: {what}",
            diff=unified_diff(shown_path(agent, path), current, data),
            expect=digest(current),
        )
        return await _apply(agent, call, change, root)

    def _not_found(self, text: str, path: Path) -> str:
        message = f"old_string was not found in {path}"
        near = nearest_match(text, self.old_string)
        if near is None:
            return f"{message}, nor anything like it; read the file to see its text"
        first, last, ratio = near
        lines = text.splitlines()[first - 1 : last]
        return (
            f"{message}. The nearest match, lines {first}-{last} ({ratio:.0%} alike), is:\n"
            f"{_numbered(lines, first)}\n"
            "old_string must match the file exactly, whitespace and indentation included"
        )

    def _ambiguous(self, text: str, path: Path, count: int) -> str:
        lines: list[int] = []
        at = text.find(self.old_string)
        while at >= 0 and len(lines) < 10:
            lines.append(_line_of(text, at))
            at = text.find(self.old_string, at + len(self.old_string))
        listed = ", ".join(map(str, lines)) + (", ..." if count > len(lines) else "")
        return (
            f"old_string occurs {count} times in {path} (at lines {listed}); include more "
            "surrounding text to make it unique, or set replace_all to replace every one"
        )


@record
class ReadFile(Tool):
    """``read_file``: no confirmation, except the system password on a restricted path."""

    NAME: ClassVar = "read_file"
    DESCRIPTION: ClassVar = (
        f"Read a text file: at most {READ_LINES} lines and {READ_BYTES:,} bytes a call; "
        "the result says when the file goes on, and from which line to read on."
    )

    path: str
    offset: int = argument("The first line to read, counting from 1 (default 1).", default=1)
    limit: int = argument(
        f"How many lines to read (default and at most {READ_LINES}).", default=READ_LINES
    )

    async def run(self, agent: ToolRun, call: ToolCall) -> str:
        config = agent.config
        check_confinable(agent)
        path = agent.resolve(self.path)
        if self.offset < 1 or self.limit < 1:
            raise ToolError("offset and limit count lines: both must be 1 or more")
        limit = min(self.limit, READ_LINES)
        args = ("read", str(path), str(self.offset), str(limit), str(READ_BYTES))
        if config.text_guard and agent.is_restricted(path):
            prompt = f"read {path} (restricted)"
            argv = confine(agent, scanner(*args), network=False, privileged=True)
            result = await via_sudo(agent, call, prompt, argv, effect=False)
            if result is None:
                return DENIED
            out = ToolOutput(result.returncode, result.output)
        else:
            agent.asks_nothing()  # a read may take long (a slow disk, a pipe)
            out = await run_scan(agent, *args)
        if out.returncode != 0:
            raise ToolError(f"cannot read {path}: {scan_failure(out.output, out.returncode)[1]}")
        got: dict[str, Any] = json.loads(out.output)
        return self._result(path, got)

    def _result(self, path: Path, got: dict[str, Any]) -> str:
        text: str = got["text"]
        first, last, total, cut = got["first"], got["last"], got["total"], got["cut"]
        if not first:
            if total == 0 and self.offset == 1:
                return ""
            return f"[{path} has {total} lines; offset {self.offset} is past its end]"
        if first == 1 and last == total and not cut:
            return text  # the whole file, as it is
        note = f"[lines {first}-{last} of {total}"
        if cut and first == last:
            note += f"; line {first} is longer than {READ_BYTES:,} bytes and was cut"
        elif cut:
            note += f"; cut at {READ_BYTES:,} bytes"
        if last < total:
            note += f"; read on with offset={last + 1}"
        return f"{text}{'' if text.endswith(chr(10)) else chr(10)}{note}]"

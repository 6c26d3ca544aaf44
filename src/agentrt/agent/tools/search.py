"""The read-only search tools: `list_dir`, `glob` and `grep`, in the sandbox, never confirmed.

Like ``read_file`` they only read, so no approval policy asks about them; and
like it they run in a helper process in the tool sandbox (`agentrt.agent.scan`,
or ripgrep), so agentrt's own state, secrets and token are hidden from them by
the kernel, even inside the working folder. Each leaves out what ``.gitignore``
ignores: ripgrep does it natively, the helper asks git (``git ls-files
--exclude-standard``, ``git check-ignore``), both only inside a git work tree,
as ripgrep does. Every result is bounded, in entries and in bytes
(`RESULT_BYTES`), and says how many more there were.
"""

from __future__ import annotations

import base64
import functools
import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from typing import ClassVar
from typing import Final

from ...models.messages import ToolCall
from ...vocab.reprs import record
from ..toolproc import run_tool
from .base import Tool
from .base import ToolError
from .base import ToolRun
from .base import argument
from .base import check_confinable
from .base import confine
from .files import READ_BYTES
from .files import run_scan
from .files import scan_failure
from .files import shown_path

#: The most entries `list_dir` gives.
LIST_ENTRIES: Final = 500
#: The most paths `glob` gives.
GLOB_PATHS: Final = 500
#: The most matching lines `grep` gives.
GREP_MATCHES: Final = 200
#: The most bytes (UTF-8) of any of their results, the note on what was left out aside.
RESULT_BYTES: Final = READ_BYTES
#: The most characters of one matching line `grep` shows.
LINE_CHARS: Final = 300


@functools.cache
def ripgrep() -> str | None:
    """The ripgrep (``rg``) `grep` runs, None when it is not installed (then Python searches)."""
    return shutil.which("rg")


def bounded(lines: Sequence[str], total: int, most: int, noun: str, hint: str) -> str:
    """The first `most` of `lines` within `RESULT_BYTES`, and a note of how many of `total` more."""
    shown: list[str] = []
    size = 0
    for line in lines[:most]:
        size += len(line.encode("utf-8", "replace")) + 1
        if size > RESULT_BYTES:
            break
        shown.append(line)
    more = total - len(shown)
    if more > 0:
        shown.append(f"... {more} more {noun} not shown; {hint}")
    return "\n".join(shown)


def _failure(what: str, output: bytes, returncode: int) -> ToolError:
    return ToolError(f"cannot {what}: {scan_failure(output, returncode)[1]}")


def _size(size: int) -> str:
    if size < 1024:
        return f"{size} bytes"
    scaled = float(size)
    for unit in ("KiB", "MiB", "GiB"):
        scaled /= 1024
        if scaled < 1024 or unit == "GiB":
            break
    return f"{scaled:.1f} {unit}"


@record
class ListDir(Tool):
    """``list_dir``: a folder's entries, less what ``.gitignore`` ignores."""

    NAME: ClassVar = "list_dir"
    DESCRIPTION: ClassVar = (
        "List the entries of a folder, sorted by name: folders end in '/', files show their "
        f"size. Entries .gitignore ignores are left out. At most {LIST_ENTRIES} entries."
    )

    path: str = argument("The folder (default: the working directory).", default=".")

    async def run(self, agent: ToolRun, call: ToolCall) -> str:
        check_confinable(agent)
        path = agent.resolve(self.path)
        agent.asks_nothing()
        out = await run_scan(agent, "list", str(path))
        if out.returncode != 0:
            raise _failure(f"list {path}", out.output, out.returncode)
        got: dict[str, Any] = json.loads(out.output)
        lines = []
        for name, kind, size in got["entries"]:
            if kind == "dir":
                lines.append(f"{name}/")
            elif kind == "file":
                lines.append(f"{name}  {_size(size)}")
            else:
                lines.append(f"{name}@" if kind == "link" else name)
        ignored = got["ignored"]
        text = bounded(
            lines, len(lines), LIST_ENTRIES, "entries", "list a folder inside it, or use glob"
        )
        if not lines:
            text = f"{shown_path(agent, path)} is empty"
        if ignored:
            entries = "entry" if ignored == 1 else "entries"
            text += f"\n[{ignored} {entries} left out: .git, and what .gitignore ignores]"
        return text


@record
class Glob(Tool):
    """``glob``: the files under a folder whose path matches a pattern."""

    NAME: ClassVar = "glob"
    DESCRIPTION: ClassVar = (
        "Find files by a gitignore-style pattern: '*.py' matches at any depth, 'src/*.py' "
        "only directly in src, 'src/**/*.py' anywhere under src. Gives the paths sorted; files "
        f".gitignore ignores are left out. At most {GLOB_PATHS} paths."
    )

    pattern: str = argument("The pattern, e.g. '*.py' or 'docs/**/*.md'.")
    path: str = argument(
        "The folder to search, the pattern relative to it (default: the working directory).",
        default=".",
    )

    async def run(self, agent: ToolRun, call: ToolCall) -> str:
        import pathspec

        check_confinable(agent)
        root = agent.resolve(self.path)
        try:
            spec = pathspec.PathSpec.from_lines("gitignore", [self.pattern])
        except ValueError as exc:
            raise ToolError(f"invalid pattern {self.pattern!r}: {exc}") from None
        if not self.pattern.strip() or not spec.patterns:
            raise ToolError(f"invalid pattern {self.pattern!r}: it matches nothing")
        agent.asks_nothing()
        out = await run_scan(agent, "files", str(root))
        if out.returncode != 0:
            raise _failure(f"search {root}", out.output, out.returncode)
        found = [Path(p) for p in out.output.decode("utf-8", "surrogateescape").split("\0") if p]
        matched = [
            shown_path(agent, p)
            for p in found
            if spec.match_file(p.name if p == root else str(p.relative_to(root)))
        ]
        if not matched:
            return f"no file under {shown_path(agent, root)} matches {self.pattern!r}"
        return bounded(
            matched, len(matched), GLOB_PATHS, "paths", "narrow the pattern or the folder"
        )


def _text(value: dict[str, Any]) -> str:
    """A ripgrep JSON string (``{"text": ...}`` or ``{"bytes": BASE64}``)."""
    if "text" in value:
        return str(value["text"])
    return base64.b64decode(value.get("bytes", "")).decode("utf-8", "replace")


@record
class _Match:
    path: str
    line: int
    text: str


def _matches_of_ripgrep(output: bytes) -> tuple[list[_Match], str]:
    """The matches in ripgrep's ``--json`` output, and the lines that were not JSON (errors)."""
    matches = []
    said = []
    for raw in output.splitlines():
        try:
            message = json.loads(raw)
        except ValueError:
            said.append(raw.decode("utf-8", "replace"))
            continue
        if isinstance(message, dict) and message.get("type") == "match":
            data = message["data"]
            matches.append(_Match(_text(data["path"]), data["line_number"], _text(data["lines"])))
    return matches, "\n".join(said)


@record
class Grep(Tool):
    """``grep``: the lines matching a regular expression, with ripgrep or in Python."""

    NAME: ClassVar = "grep"
    DESCRIPTION: ClassVar = (
        "Search the contents of files for a regular expression; gives 'path:line:text', "
        "files sorted by path. Files .gitignore ignores and binary files are skipped. At "
        f"most {GREP_MATCHES} matches."
    )

    pattern: str = argument("The regular expression (ripgrep's syntax, like Python's).")
    path: str = argument(
        "The file or folder to search (default: the working directory).", default="."
    )

    async def run(self, agent: ToolRun, call: ToolCall) -> str:
        check_confinable(agent)
        root = agent.resolve(self.path)
        if not self.pattern:
            raise ToolError("grep needs a non-empty pattern")
        agent.asks_nothing()
        rg = ripgrep()
        if rg is not None:
            matches, total = await self._ripgrep(agent, rg, root)
        else:
            matches, total = await self._python(agent, root)
        if not total:
            return f"no match for {self.pattern!r} in {shown_path(agent, root)}"
        lines = []
        for match in matches:
            text = match.text.rstrip("\r\n")
            if len(text) > LINE_CHARS:
                text = text[:LINE_CHARS] + f"... ({len(text)} characters)"
            lines.append(f"{shown_path(agent, match.path)}:{match.line}:{text}")
        return bounded(
            lines, total, GREP_MATCHES, "matches", "narrow the pattern or the path to see them"
        )

    async def _ripgrep(self, agent: ToolRun, rg: str, root: Path) -> tuple[list[_Match], int]:
        config = agent.config
        argv = [
            rg,
            *("--json", "--no-config", "--sort", "path"),
            # As the Python side: dot files searched, .git not, only .gitignore (in a git
            # work tree) leaving files out.
            *("--hidden", "--glob", "!.git", "--no-ignore-dot"),
            *("--regexp", self.pattern, "--", str(root)),
        ]
        out = await run_tool(
            confine(agent, argv, network=False),
            cwd=config.workdir,
            ledger=config.tool_ledger,
            env=config.tool_env,
        )
        matches, said = _matches_of_ripgrep(out.output)
        if out.returncode not in (0, 1) and not matches:
            raise ToolError(f"cannot search {root}: {said.strip() or out.returncode}")
        return matches[:GREP_MATCHES], len(matches)

    async def _python(self, agent: ToolRun, root: Path) -> tuple[list[_Match], int]:
        out = await run_scan(agent, "grep", self.pattern, str(root), str(GREP_MATCHES))
        if out.returncode != 0:
            raise _failure(f"search {root}", out.output, out.returncode)
        matches = []
        total = 0
        for raw in out.output.splitlines():
            try:
                got = json.loads(raw)
            except ValueError:
                continue  # not the helper's (a warning of a program it ran)
            if "total" in got:
                total = got["total"]
            else:
                matches.append(_Match(got["path"], got["line"], got["text"]))
        return matches, total

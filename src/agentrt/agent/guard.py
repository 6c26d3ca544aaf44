"""The early, friendly checks of what a tool call names, and what its output may show.

What a tool may touch is enforced by the kernel (`agentrt.agent.sandbox`): the
agent's own state is not there inside the sandbox, and restricted paths are
read-only. The checks here only read a call's text, to say *early* what the
sandbox would refuse and to ask for the system password when a command names
a restricted path plainly (that password then makes exactly the named roots
writable). They are heuristics with known limits (a path built at run time,
``cd`` into a folder then a relative name), and the sandbox holds without
them. Any stored secret value that still appears in a tool's output or the
model's text is replaced by ``[secret NAME]`` before it reaches the
transcript, an event, a log or the model.
"""

from __future__ import annotations

import base64
import glob
import json
import os
import re
import time
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from ..config.keystore import KEYS_DIR
from ..config.secrets import is_secret_name
from ..config.secrets import write_generation
from ..models.messages import Redaction
from ..vocab.locations import HTTP_TOKEN_FILE
from ..vocab.reprs import mutable
from ..vocab.reprs import record

#: Secret values shorter than this are not searched for (too likely to match by chance).
MIN_REDACTED_LENGTH = 4

#: Seconds a redactor trusts its secret set before it asks the file system again whether
#: another process changed a source. Writes of this process are seen at once (their
#: generation, `agentrt.config.secrets.note_written`), and `Redactor.refresh` (every run's
#: start) asks at once too.
RECHECK_SECONDS = 0.1

#: Characters that separate the paths a shell command may mention.
_SHELL_SEPARATORS = re.compile(r"[\s=;|&<>()`'\",{}]+")
_GLOB_CHARS = re.compile(r"[*?\[]")


def resolve_path(raw: str, base: Path) -> Path:
    """`raw` as a tool means it: variables and ``~`` expanded, relative to `base`, resolved."""
    expanded = os.path.expanduser(os.path.expandvars(raw))
    return (base / expanded).resolve()


def inside(path: Path, folders: Iterable[Path]) -> Path | None:
    """The first of `folders` that `path` is, or lies inside; None if none."""
    for folder in folders:
        if path == folder or folder in path.parents:
            return folder
    return None


def mentioned_paths(command: str, base: Path) -> set[Path]:
    """The paths a shell command names, each resolved as `resolve_path` does.

    Every fragment between shell separators that looks like a path (it holds a
    ``/``, starts with ``~``, ``.`` or ``$``, or holds a glob character) counts;
    a fragment with glob characters also counts for every existing path it matches.
    """
    found: set[Path] = set()
    for fragment in _SHELL_SEPARATORS.split(command):
        if not fragment or not (
            "/" in fragment or fragment[0] in "~.$" or _GLOB_CHARS.search(fragment)
        ):
            continue
        try:
            found.add(resolve_path(fragment, base))
        except (OSError, RuntimeError, ValueError):
            continue
        if _GLOB_CHARS.search(fragment):
            pattern = os.path.expanduser(os.path.expandvars(fragment))
            for match in glob.glob(pattern if os.path.isabs(pattern) else str(base / pattern)):
                found.add(Path(match).resolve())
    return found


def command_touches(command: str, base: Path, folders: Iterable[Path]) -> Path | None:
    """The first of `folders` that `command` mentions, by path or by name; None if none.

    Conservative on purpose: the folder's own text anywhere in the command counts
    too, resolved or as given.
    """
    folders = tuple(folders)
    for folder in folders:
        if str(folder) in command:
            return folder
    for path in mentioned_paths(command, base):
        hit = inside(path, folders)
        if hit is not None:
            return hit
    return None


def touched_roots(command: str, base: Path, folders: Iterable[Path]) -> tuple[Path, ...]:
    """Every one of `folders` that `command` mentions (see `command_touches`), in their order."""
    folders = tuple(folders)
    paths = mentioned_paths(command, base)
    return tuple(
        folder
        for folder in folders
        if str(folder) in command or any(inside(p, (folder,)) for p in paths)
    )


#: Between two characters of a searched form: nothing, or the line break or blank a
#: wrapping tool puts in (``base64`` at 76 columns, ``xxd -p`` at 60, ``fold -w1``, ``od``).
_GAP = r"[ \t]?(?:\r?\n[ \t]?)?"
_GAPS = re.compile(r"[\r\n \t]")
#: What a replaced value becomes, and how such a label is found again.
_LABEL = "[secret {name}]"
_LABEL_RE = re.compile(r"\[secret ([A-Za-z0-9_.-]+)\]")
_URLSAFE = str.maketrans("+/", "-_")


class SecretGoneError(LookupError):
    """A saved tool call names a secret (``[secret NAME]``) that is no longer stored."""


@record
class _Form:
    """One searched spelling of a secret: its text and whether it is the value itself."""

    name: str
    text: str
    plain: bool


def encoded_forms(value: str) -> list[str]:
    """The spellings of `value` a tool's output may show besides the value itself.

    Base64 (standard and URL-safe) in each of the three alignments (the value
    starting at byte 0, 1 or 2 of a 3-byte group; only the characters every
    bit of which comes from the value), hex (lower case; searched in either
    case), the value reversed, and the value as a JSON string's body.
    """
    data = value.encode("utf-8", "surrogateescape")
    forms: list[str] = []
    for align in range(3):
        first = -(-8 * align // 6)  # the first character wholly inside the value
        end = (8 * (align + len(data))) // 6  # one past the last such character
        encoded = base64.b64encode(bytes(align) + data).decode("ascii")[first:end]
        forms.extend((encoded, encoded.translate(_URLSAFE)))
    forms.append(data.hex())
    forms.append(value[::-1])
    forms.append(json.dumps(value, ensure_ascii=False)[1:-1])
    forms.append(json.dumps(value)[1:-1])
    return [f for f in dict.fromkeys(forms) if f != value]


def _parts_of(text: str, *, any_case: bool) -> list[str]:
    """A regex for each character of `text` (a letter in either case with `any_case`)."""
    return [f"[{c.lower()}{c.upper()}]" if any_case and c.isalpha() else re.escape(c) for c in text]


def _pattern_of(text: str, *, any_case: bool) -> str:
    """A regex for `text` (letters in either case with `any_case`), a break allowed between
    any two characters."""
    return _GAP.join(_parts_of(text, any_case=any_case))


#: How many characters of a searched form a held-back end is matched against (see
#: `Redactor.redact_piece`): an end that matches this many is held while the rest of the
#: form could still follow.
HELD_PREFIX = 16
#: The most characters one character of a form spans in a match: itself and a `_GAP`.
_SPAN = 5


def _beginnings_of(parts: list[str]) -> str:
    """A regex for a beginning of the form whose characters `parts` match, up to the text's
    end: any proper prefix of it (breaks allowed as in the search), or its first
    `HELD_PREFIX` characters and then anything not longer than the rest of it can span
    (a longer text after them is no beginning: it holds the whole form or none)."""
    if len(parts) > HELD_PREFIX:
        rest = _SPAN * (len(parts) - HELD_PREFIX)
        pattern, parts = f"(?s:.{{0,{rest}}})", parts[:HELD_PREFIX]
    else:
        pattern, parts = "", parts[:-1]
    for part in reversed(parts):
        pattern = f"{part}{_GAP}(?:{pattern})?" if pattern else f"{part}{_GAP}"
    return pattern


@record
class _Compiled:
    """One secret set, ready to search: replaced whole, so a thread never sees half of one."""

    stamp: tuple[int, ...] = ()
    #: ``(name, value)``, longest value first.
    values: tuple[tuple[str, str], ...] = ()
    search: re.Pattern[str] | None = None
    #: Each form with its breaks taken out (hex in lower case), to the form.
    forms: Mapping[str, _Form] = attrs.field(factory=dict)
    #: Each name to its value, or None when two sources give the name different values.
    by_name: Mapping[str, str | None] = attrs.field(factory=dict)
    #: The beginnings of the forms as one regex source, anchored at the text's end.
    beginnings: str = attrs.field(default="", repr=False)
    #: The length of the shortest text `search` can match: a shorter one holds no secret.
    shortest: int = 0
    #: Its compiled form, once `held_search` was first asked for it.
    _held: list[re.Pattern[str]] = attrs.field(factory=list, alias="_held", eq=False, repr=False)

    @classmethod
    def of(cls, stamp: tuple[int, ...], found: Iterable[tuple[str, str]]) -> _Compiled:
        values = tuple(sorted(found, key=lambda nv: -len(nv[1])))
        forms: dict[str, _Form] = {}
        patterns: dict[str, str] = {}
        beginnings: dict[str, str] = {}
        by_name: dict[str, str | None] = {}
        for name, value in values:
            by_name[name] = value if by_name.get(name, value) == value else None
            for text, plain in [(value, True), *((f, False) for f in encoded_forms(value))]:
                key = _GAPS.sub("", text)
                if key in forms:
                    continue
                forms[key] = _Form(name, text, plain)
                if not plain and all(c in "0123456789abcdef" for c in text):
                    # Hex, in either case. The first character stays a literal (a letter
                    # gets one pattern a case), so the combined pattern keeps the regex
                    # engine's quick skip over positions no secret can start at.
                    for head in {text[0], text[0].upper()}:
                        parts = [re.escape(head), *_parts_of(text[1:], any_case=True)]
                        patterns[head + text[1:]] = _GAP.join(parts)
                        beginnings[head + text[1:]] = _beginnings_of(parts)
                else:
                    parts = _parts_of(text, any_case=False)
                    patterns[text] = _GAP.join(parts)
                    beginnings[text] = _beginnings_of(parts)
        # The longest first: a secret that contains another is replaced whole.
        ordered = sorted(patterns, key=len, reverse=True)
        search = re.compile("|".join(patterns[t] for t in ordered)) if ordered else None
        held = "|".join(b for b in beginnings.values() if b)
        shortest = min(map(len, patterns), default=0)
        held = rf"(?:{held})\Z" if held else ""
        return cls(stamp, values, search, forms, by_name, held, shortest)

    def held_search(self) -> re.Pattern[str] | None:
        """The regex of `beginnings`, compiled at the first use (a daemon's log filter needs
        none); None when there is no form to begin."""
        if not self.beginnings:
            return None
        if not self._held:
            self._held.append(re.compile(self.beginnings))
        return self._held[0]

    def form_of(self, match: re.Match[str]) -> _Form:
        """The form `match` (a match of `search`) found."""
        key = _GAPS.sub("", match.group(0))
        form = self.forms.get(key) or self.forms.get(key.lower())
        assert form is not None, "every match of the search is one of its forms"
        return form

    def label(self, match: re.Match[str]) -> str:
        """What `match` is replaced by."""
        return _LABEL.format(name=self.form_of(match).name)

    def value_of(self, match: re.Match[str]) -> str:
        """The value a ``[secret NAME]`` label stands for; `SecretGoneError` if none."""
        value = self.by_name.get(match.group(1))
        if value is None:
            raise SecretGoneError(match.group(1))
        return value


@mutable(eq=False)
class Redactor:
    """Replaces stored secret values in text with ``[secret NAME]``, however they are spelled.

    The secrets are the files of the secret store (every name `is_secret_name`
    accepts, so a stored secret cannot escape by its name), of the key store,
    and the other named files (the HTTP token). Each value is found as it is,
    wrapped by a line-breaking tool, and in its common encodings (see
    `encoded_forms`). Values shorter than `MIN_REDACTED_LENGTH` are not searched.

    The folders are read again, and the one combined search compiled again,
    only when a folder or a named file changed. Whether one did is asked of the
    file system (a `stat` a source) only when this process wrote a secret
    (`agentrt.config.secrets.write_generation` moved), at `refresh` (every run's
    start), and otherwise at most once every `recheck` seconds, for writes of
    other processes (``agentrt secrets set`` beside a daemon): calling it on
    every streamed piece of text costs a read of the clock and one regex scan,
    no system call. It may be called from several threads (the daemon's log
    filter): the compiled set is replaced in one assignment.
    """

    secrets_dir: Path
    #: Other files whose whole content is a secret (the HTTP token), by the name to show.
    files: Mapping[str, Path] = attrs.field(factory=dict)
    #: Other folders of one secret a file, each shown by its file's name (the key store).
    more_dirs: tuple[Path, ...] = ()
    #: Seconds between checks for other processes' writes (see the class).
    recheck: float = RECHECK_SECONDS
    #: The clock of those checks (`time.monotonic`: read without a system call on Linux).
    clock: Callable[[], float] = attrs.field(default=time.monotonic, repr=False)
    _compiled: _Compiled = attrs.field(factory=_Compiled, init=False, repr=False)
    #: The write generation seen at the last check, and when the next check is due.
    _checked_generation: int = attrs.field(default=-1, init=False)
    _check_after: float = attrs.field(default=float("-inf"), init=False)

    @classmethod
    def for_state_dir(cls, state_dir: Path) -> Redactor:
        """The secrets of a state dir: its secret store, its key store and its HTTP token."""
        return cls(
            state_dir / "secrets",
            {HTTP_TOKEN_FILE: state_dir / HTTP_TOKEN_FILE},
            (state_dir / KEYS_DIR,),
        )

    def values(self) -> list[tuple[str, str]]:
        """``(name, value)`` of every secret to hide, longest value first."""
        return list(self._current().values)

    def holds_secret(self, data: bytes) -> bool:
        """Whether `data` holds a stored secret's value, spelled any way `redact` finds."""
        text = data.decode("utf-8", "replace")
        return self.redact(text) != text

    def redact(self, text: str) -> str:
        """`text` with every secret value, in every searched spelling, replaced by its label."""
        if not text:
            return text
        compiled = self._compiled
        # `_current`'s test, inline: this runs at every streamed piece of a reply.
        if write_generation() != self._checked_generation or self.clock() >= self._check_after:
            compiled = self._current()
        search = compiled.search
        if search is None or len(text) < compiled.shortest:
            return text
        return search.sub(compiled.label, text)

    def redact_piece(self, text: str, held: str = "") -> tuple[str, str]:
        """`held + text` redacted and cut in two: what may be shown now, and what to hold back.

        For text that comes in pieces (a model's streamed reply): the held end is one
        that more text could make a stored secret, in any spelling `redact` finds (a
        beginning of one), so a secret cut across pieces is found whole. Pass it back
        with the next piece, and `redact` it once no piece follows. An end that matches
        `HELD_PREFIX` characters of a spelling is held whatever follows, until the
        secret is complete or what follows is longer than the rest of it could be.
        """
        if held:
            text = held + text
        if not text:
            return text, ""
        compiled = self._compiled
        if write_generation() != self._checked_generation or self.clock() >= self._check_after:
            compiled = self._current()
        search = compiled.search
        if search is None:
            return text, ""
        if len(text) >= compiled.shortest:  # a streamed token is nearly always shorter
            text = search.sub(compiled.label, text)
        held_search = compiled.held_search()
        begun = held_search.search(text) if held_search is not None else None
        if begun is None:
            return text, ""
        return text[: begun.start()], text[begun.start() :]

    def redact_arguments(self, value: Any) -> Any:
        """A JSON value (a tool call's arguments) with every string in it redacted."""
        return self.seal_arguments(value)[0]

    def seal_arguments(self, value: Any) -> tuple[Any, Redaction]:
        """`value` redacted, and whether `restore_arguments` can give the original back.

        `Redaction.NAMED` when only whole values were replaced and no label
        was there before (so each label stands for its value); `Redaction.LOST`
        when a value was replaced in another spelling, or beside a label the
        original already held (a label the model wrote must never become a value).
        """
        compiled = self._current()
        search = compiled.search
        if search is None:
            return value, Redaction.NONE
        replaced: list[bool] = []  # for each replacement: whether the value came back whole
        labelled: list[bool] = []

        def label(match: re.Match[str]) -> str:
            form = compiled.form_of(match)
            whole = form.plain and match.group(0) == compiled.by_name.get(form.name)
            replaced.append(whole)
            return _LABEL.format(name=form.name)

        def walk(item: Any) -> Any:
            if isinstance(item, str):
                if _LABEL_RE.search(item):
                    labelled.append(True)
                return search.sub(label, item)
            if isinstance(item, dict):
                return {walk(k): walk(v) for k, v in item.items()}
            if isinstance(item, list):
                return [walk(v) for v in item]
            return item

        sealed = walk(value)
        if not replaced:
            return value, Redaction.NONE
        if labelled or not all(replaced):
            return sealed, Redaction.LOST
        return sealed, Redaction.NAMED

    def restore_arguments(self, value: Any) -> Any:
        """A sealed JSON value with each ``[secret NAME]`` replaced by the value stored now.

        Raises `SecretGoneError` naming a secret that is no longer stored (or
        whose name two sources now give different values).
        """
        compiled = self._current()

        def walk(item: Any) -> Any:
            if isinstance(item, str):
                return _LABEL_RE.sub(compiled.value_of, item)
            if isinstance(item, dict):
                return {walk(k): walk(v) for k, v in item.items()}
            if isinstance(item, list):
                return [walk(v) for v in item]
            return item

        return walk(value)

    def refresh(self) -> None:
        """Ask the file system at the next use whether a secret changed (a run's start)."""
        self._check_after = float("-inf")

    def _current(self) -> _Compiled:
        compiled = self._compiled
        generation = write_generation()
        now = self.clock()
        if generation == self._checked_generation and now < self._check_after:
            return compiled
        # Noted before the stat: a write after this point is seen at the next use.
        self._checked_generation, self._check_after = generation, now + self.recheck
        stamp = self._current_stamp()
        if stamp != compiled.stamp:
            compiled = self._compiled = _Compiled.of(stamp, self._load())
        return compiled

    def _current_stamp(self) -> tuple[int, ...]:
        stamp: list[int] = []
        for path in (self.secrets_dir, *self.more_dirs, *self.files.values()):
            try:
                info = os.stat(path)
            except OSError:
                stamp.append(-1)
                continue
            stamp.extend((info.st_mtime_ns, info.st_size, info.st_ino))
        return tuple(stamp)

    def _load(self) -> list[tuple[str, str]]:
        found: list[tuple[str, str]] = []
        sources: list[tuple[str, Path]] = []
        for folder in (self.secrets_dir, *self.more_dirs):
            try:
                # Exactly the names a store accepts: never its ``.NAME.tmp`` files.
                names = [n for n in os.listdir(folder) if is_secret_name(n)]
            except OSError:
                names = []
            sources.extend((name, folder / name) for name in names)
        sources.extend(self.files.items())
        for name, path in sources:
            try:
                value = path.read_text("utf-8", "surrogateescape")
            except OSError:
                continue
            # Surrounding blanks (a file's last newline) are no part of the secret; the
            # value without them is found inside the value with them too.
            value = value.strip()
            if len(value) >= MIN_REDACTED_LENGTH:
                found.append((name, value))
        return found

"""The key store: API keys and bot tokens for agentrt itself, kept like secrets.

A key is named after the environment variable it stands in for
(``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``, ``AGENTRT_TELEGRAM_TOKEN``, or any
name a configuration's ``api_key_env`` gives). Wherever agentrt reads such a
variable and finds it unset or blank, it reads the key of that name instead.

Each key is one file in ``<state dir>/keys/``, mode 0600 in a 0700 folder,
written with an fsynced rename (as `agentrt.config.secrets.SecretStore` writes a
secret). The state dir is off-limits to every tool, and any key value that
shows up in a tool's output is replaced by ``[secret NAME]``
(`agentrt.agent.guard.Redactor.for_state_dir`). Keys are apart from the secrets the
agent's own ``store_secret`` tool keeps: no tool can overwrite a key.

This module loads nothing heavy: ``agentrt config show`` and ``agenttui`` read
keys without opening the runtime.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from ..vocab.reprs import mutable

#: The key store's folder in the state dir.
KEYS_DIR: Final = "keys"

#: A key's name: an environment variable's. Each is a secret name too (the one rule,
#: `agentrt.config.secrets.is_secret_name`, by which `KeyStore.put` writes and the redactor reads).
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
#: Provider names people may type instead of the variable's name.
_VARIABLE_OF: Final = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}


class KeyNameError(ValueError):
    """A key name that cannot be used."""


def check_key_name(name: str) -> str:
    """Return `name` if it can name a key; raise `KeyNameError` saying what to use instead."""
    hint = _VARIABLE_OF.get(name.lower())
    if hint is not None:
        raise KeyNameError(
            f"a key is named after the environment variable it stands in for: use {hint}, "
            f"not {name!r}"
        )
    if not _NAME.match(name):
        raise KeyNameError(
            f"invalid key name {name!r}: name it after the environment variable it stands in "
            "for, such as OPENAI_API_KEY (letters, digits and '_', not starting with a digit)"
        )
    return name


@mutable(eq=False)
class KeyStore:
    """The keys of one state dir. Values never appear in a `repr`, a log or an error.

    Reading creates nothing; the folder is made (0700) on the first `put`.
    """

    path: Path

    @classmethod
    def for_state_dir(cls, state_dir: Path) -> KeyStore:
        """The key store of `state_dir`."""
        return cls(Path(state_dir) / KEYS_DIR)

    def put(self, name: str, value: str) -> None:
        """Store `value` under `name`, atomically, readable by the owner only."""
        from .secrets import SecretStore

        check_key_name(name)
        # The same writing as a secret's: 0600 from birth, fsynced, renamed into place.
        SecretStore(self.path).put(name, value)

    def get(self, name: str) -> str | None:
        """The key stored as `name` with surrounding whitespace stripped, or None (also if blank)."""
        check_key_name(name)
        try:
            value = (self.path / name).read_text("utf-8")
        except (FileNotFoundError, NotADirectoryError):
            return None
        return value.strip() or None

    def delete(self, name: str) -> bool:
        """Remove a key; True if it existed."""
        from .secrets import note_written
        from .statedir import fsync_dir

        check_key_name(name)
        try:
            (self.path / name).unlink()
        except (FileNotFoundError, NotADirectoryError):
            return False
        note_written()
        fsync_dir(self.path)
        return True

    def names(self) -> list[str]:
        """The names of the stored keys, sorted."""
        try:
            entries = os.listdir(self.path)
        except (FileNotFoundError, NotADirectoryError):
            return []
        return sorted(n for n in entries if _NAME.match(n) and (self.path / n).is_file())

    def lookup(self, variable: str, environ: Mapping[str, str] | None = None) -> tuple[str, str]:
        """The value `variable` stands for and where it was found: ``("env"|"key store", value)``.

        The environment wins when the variable is set to something other than
        blanks; the key store is read next. ``("", "")`` when neither has it.
        """
        env = os.environ if environ is None else environ
        value = env.get(variable, "").strip()
        if value:
            return "env", value
        stored = self.get(variable) if _NAME.match(variable) else None
        if stored:
            return "key store", stored
        return "", ""

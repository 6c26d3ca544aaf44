"""Privilege checks for restricted paths: `sudo -n -v`, `sudo -S -v`, then the operation via sudo.

The password is written to sudo's standard input only; it is never stored,
logged, put in an argument list or an environment variable.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from typing import Protocol

import trio

from ..vocab.reprs import record
from .toolproc import ToolLedger
from .toolproc import run_tool


@record
class PrivilegedResult:
    """What a command run through sudo returned."""

    returncode: int
    output: bytes


class Verifier(Protocol):
    """Checks sudo credentials and runs commands with them (injectable for tests)."""

    async def cached(self) -> bool:
        """True while sudo credentials are cached (no password needed)."""
        ...

    async def verify(self, password: str) -> bool:
        """True when `password` is the user's sudo password (it then caches credentials)."""
        ...

    async def run(self, argv: Sequence[str], stdin: bytes | None = None) -> PrivilegedResult:
        """Run `argv` through sudo, non-interactively."""
        ...


@record
class SudoVerifier:
    """The real thing: `sudo -n -v`, `sudo -S -v` (password on stdin), `sudo -n CMD`."""

    sudo: str = "sudo"
    #: Where the commands' process groups are recorded while they run (see `run_tool`).
    ledger: ToolLedger | None = None

    async def cached(self) -> bool:
        """`sudo -n -v` succeeds: credentials are cached (or no password is needed)."""
        return await _succeeds([self.sudo, "-n", "-v"], b"")

    async def verify(self, password: str) -> bool:
        """`sudo -S -v` with the password on standard input and an empty prompt."""
        return await _succeeds([self.sudo, "-S", "-v", "-p", ""], password.encode("utf-8") + b"\n")

    async def run(self, argv: Sequence[str], stdin: bytes | None = None) -> PrivilegedResult:
        """`sudo -n ARGV...`, merging standard error into the output.

        The command runs in its own process group, stopped with the call (see
        `run_tool`). sudo passes SIGTERM on to the command; a command running
        as another user outlives the group's SIGKILL unless the runner is root.
        """
        try:
            result = await run_tool(
                [self.sudo, "-n", "--", *argv], stdin=stdin or b"", ledger=self.ledger
            )
        except OSError as exc:
            return PrivilegedResult(127, f"cannot run sudo: {exc}".encode())
        return PrivilegedResult(result.returncode, result.output)


async def _succeeds(argv: list[str], stdin: bytes) -> bool:
    """`argv` exits 0, its output thrown away; False when it cannot be started."""
    try:
        result = await trio.run_process(
            argv, stdin=stdin, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
    except OSError:
        return False
    return result.returncode == 0

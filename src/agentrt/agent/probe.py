"""Whether bubblewrap can build the sandbox on this machine: one short run of it, started early.

The probe runs ``bwrap`` once with the namespaces a tool call gets and ``true``
inside. Its time is mostly the kernel's, building and tearing down those
namespaces: 7-17 ms of wall time with little CPU. A command that will run a
task in this process (``agentrt run``) starts it before loading its own
modules (`start`, from `agentrt.apps.entry`), so that the wait overlaps the
imports; the sandbox reads the answer when it is first detected (`verdict`).
A probe nobody started is run then, and waited for, as before.

This module imports the standard library alone: it runs before the rest of
agentrt is loaded.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from collections.abc import Mapping
from typing import Final

#: The variable naming the bubblewrap binary to use (default: ``bwrap`` on the PATH).
BWRAP_ENV: Final = "AGENTRT_BWRAP"
#: How long a probe may take before bubblewrap counts as unusable here, in seconds.
PROBE_TIMEOUT: Final = 30.0

_lock = threading.Lock()
#: Probes started and not yet read, by the bubblewrap path they run.
_running: dict[str, subprocess.Popen[bytes]] = {}
#: What each probe found: None when the sandbox can be built, else why not.
_verdicts: dict[str, str | None] = {}


def bwrap_named(environ: Mapping[str, str] | None = None) -> tuple[str, str | None]:
    """The bubblewrap asked for (``$AGENTRT_BWRAP``, else ``bwrap``), and its path, if found."""
    env = os.environ if environ is None else environ
    named = env.get(BWRAP_ENV, "").strip() or "bwrap"
    return named, shutil.which(named)


def _spawn(bwrap: str) -> subprocess.Popen[bytes] | str:
    """A probe of `bwrap` started, or why it could not start."""
    try:
        return subprocess.Popen(
            [
                bwrap,
                *("--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"),
                *("--unshare-pid", "--unshare-net", "--cap-drop", "ALL"),
                "true",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
    except OSError as exc:
        return f"{bwrap} cannot run: {exc}"


def start(bwrap: str) -> None:
    """Start probing `bwrap` (a path), unless that is started or done: `verdict` reads it."""
    with _lock:
        if bwrap in _running or bwrap in _verdicts:
            return
        started = _spawn(bwrap)
        if isinstance(started, str):
            _verdicts[bwrap] = started
        else:
            _running[bwrap] = started


def verdict(bwrap: str) -> str | None:
    """None when `bwrap` (a path) can build the sandbox here; else why not, in a few words.

    The probe started by `start` is waited for (else one is run now); its answer
    is kept for the rest of the process.
    """
    with _lock:
        if bwrap in _verdicts:
            return _verdicts[bwrap]
        process = _running.pop(bwrap, None)
        if process is None:
            started = _spawn(bwrap)
            if isinstance(started, str):
                _verdicts[bwrap] = started
                return started
            process = started
        _verdicts[bwrap] = found = _wait(bwrap, process)
        return found


def _wait(bwrap: str, process: subprocess.Popen[bytes]) -> str | None:
    """What the probe `process` of `bwrap` found, once it has ended."""
    try:
        _, stderr = process.communicate(timeout=PROBE_TIMEOUT)
    except subprocess.TimeoutExpired as exc:
        process.kill()
        process.wait()
        return f"{bwrap} cannot run: {exc}"
    if process.returncode != 0:
        said = stderr.decode("utf-8", "replace").strip().splitlines()
        return f"{bwrap} fails here: {said[-1] if said else f'exit status {process.returncode}'}"
    return None

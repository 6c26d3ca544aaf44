"""The `agentrt` console script's first module: what starts before the command's modules load.

A command that runs a task in this process (`agentrt run`, ``sessions
continue``, ``pending resume``, ``pending answer``) needs to know whether
bubblewrap works here before its first model request. Finding out is one short
run of bubblewrap whose time is mostly the kernel's; started here
(`agentrt.agent.probe`), it runs while Python loads the command's modules,
instead of after them. When a daemon holds the state dir, or the sandbox is
turned off, the answer goes unread, and the probe has cost a process start.

Python's collector is paused while the modules load: nearly all they make
(modules, classes, functions) lives as long as the process, so its passes over
them free nothing. In `agentrt run hello` those passes were 82 collections of
17-22 ms in all, against 51 of ~12 ms for importing trio, attrs and cattrs
alone. Once the command's modules are in, what exists is frozen (`gc.freeze`:
later collections never go through it again) and the collector runs as usual.

While they load, attrs takes the compiled methods of their classes from the
file a previous start wrote (`agentrt.apps.codecache`) instead of compiling them.

This module, the probe's and the method cache's import the standard library alone.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Sequence

#: The commands that run a task in this process when no daemon holds the state dir.
_RUNS_A_TASK = frozenset(
    {("run",), ("sessions", "continue"), ("pending", "resume"), ("pending", "answer")}
)


def runs_a_task(args: Sequence[str]) -> bool:
    """Whether the command line `args` (without the program) names a command that runs a task."""
    return tuple(args[:1]) in _RUNS_A_TASK or tuple(args[:2]) in _RUNS_A_TASK


def collect_from_now_on() -> None:
    """The start is over: freeze what exists (later collections never walk it again), turn
    the collector on, and give attrs its own compiling back (`codecache.end`).

    For a program that paused the collector while its start made what lives as long as
    the process: the daemon once its socket is served, agenttui once its first screen is
    drawn. (The `agentrt` command freezes once its modules are in, and keeps attrs's
    methods coming from the cache until it is over: see `console_main`.)
    """
    from . import codecache

    codecache.end()
    _collect()


def _collect() -> None:
    gc.freeze()
    gc.enable()


def console_main() -> None:
    """The `agentrt` console script: the sandbox probe started early, then the command.

    The collector waits while the command's modules load; what they made is then frozen.
    attrs takes its compiled methods from the file the last start wrote until the command
    is over (`agentrt.apps.codecache`).
    """
    gc.disable()
    try:
        if sys.platform.startswith("linux") and runs_a_task(sys.argv[1:]):
            from ..agent import probe

            _, found = probe.bwrap_named()
            if found is not None:
                probe.start(found)
        from . import codecache

        codecache.begin()
        from .cli import console_main as main
    finally:
        # The modules the command loads later (its store's) take their methods from the
        # cache too: `main` ends it (`codecache.end`) before the process exits.
        _collect()
    main()

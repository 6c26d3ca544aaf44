"""The `agentrt` console script's start, before the command runs: the collector's pause."""

from __future__ import annotations

from pathlib import Path

from .cli_process import run_python

#: Runs `agentrt run hello` in this interpreter as its console script does, telling on
#: stderr of each collection the collector starts once the script's own module is in
#: (``collect GENERATION FROZEN``: how many objects were frozen by then) and, as the
#: process exits, whether the collector is on and how many objects are frozen.
_TELLING = """\
import gc, os, sys
from agentrt.apps import entry
def told(phase, info):
    if phase == "start":
        print("collect", info["generation"], gc.get_freeze_count(), file=sys.stderr)
gc.callbacks.append(told)
exit_for_real = os._exit
def exiting(code):
    print("exit", gc.isenabled(), gc.get_freeze_count(), file=sys.stderr, flush=True)
    exit_for_real(code)
os._exit = exiting
sys.argv = ["agentrt", "run", "hello", "--state-dir", sys.argv[1]]
entry.console_main()
"""


def test_the_collector_waits_while_the_modules_load_then_skips_what_they_made(
    tmp_path: Path,
) -> None:
    done = run_python(_TELLING, str(tmp_path / "state"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "hello" in done.stdout
    told = [line.split() for line in done.stderr.splitlines()]
    collections = [words for words in told if words[0] == "collect"]
    # Loading the command's modules makes tens of thousands of objects: with the collector
    # on, some 70 collections would run before anything is frozen. None does; those that
    # run later (the command's own work) skip the frozen start.
    assert all(int(frozen) > 0 for _, _, frozen in collections), collections
    (_, enabled, frozen) = next(words for words in told if words[0] == "exit")
    assert enabled == "True"
    assert int(frozen) > 10_000, frozen

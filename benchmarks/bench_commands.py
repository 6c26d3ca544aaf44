"""Commands a person types, timed from the outside as wall time of a fresh process.

Each subject is a real command of the project's virtualenv; each baseline a
process of the same interpreter that does the least the command must do
(import what it is built on, or list an empty store). They alternate in ABBA
order and the medians are compared.

=======================  ==============================================  =======
benchmark                subject vs baseline                             target
=======================  ==============================================  =======
``cli_pending_10k``      ``agentrt pending list`` with 10,000 pending    <= 1.1x
                         tasks vs with an empty store
``pending_list_100k``    ``agentrt pending list`` through a daemon with  <= 1.5x
                         100,000 pending tasks vs the same command on
                         the same store without a daemon
``pending_list_100k_10k`` the same through a daemon with 100,000 tasks   <= 11x
                         vs through a daemon with 10,000
``continue_10000``       ``agentrt sessions continue`` of a session of    <= 1.2x
                         10,000 messages, to the model's first words,
                         vs of a session of 10
``continue_10000_daemon`` the same through a daemon                      <= 1.2x
``run_hello``            ``agentrt run hello`` vs ``python -c "import    <= 1.3x
                         trio, attrs, cattrs"``
``client_import``        ``python -c "import agentrt.client"`` vs         <= 1.3x
                         ``python -c "import trio, attrs"``
``tui_first_screen``     ``agenttui`` (a daemon running) in a fresh      <= 1.3x
                         terminal until its first screen is drawn, vs
                         ``python -c "import trio, prompt_toolkit,
                         attrs, cattrs"`` in the same kind of terminal
=======================  ==============================================  =======
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import trio

from agentrt.store.sqlite import TaskStore

from ._harness import Result
from ._harness import format_time
from ._harness import interleave_sync
from ._harness import interleave_sync_many
from ._processes import STEP_TIMEOUT
from ._processes import ensure_store
from ._processes import isolated_env
from ._processes import script
from ._processes import start_daemon
from ._processes import stop_daemon
from ._processes import time_to_screen
from ._processes import timed_run
from ._workload import conversation

#: What marks the TUI's first drawn screen: its status line's key hints. Set
#: AGENTRT_BENCH_TUI_SCREEN to another regular expression if the status line changes.
TUI_SCREEN = os.environ.get("AGENTRT_BENCH_TUI_SCREEN", r"Esc stop|/help")
#: What marks the window as connected to the daemon: the status line's idle state.
TUI_CONNECTED = os.environ.get("AGENTRT_BENCH_TUI_CONNECTED", "idle")


def bench_cli_pending_list(
    root: Path, large_store: Path, rounds: int = 10, large: int = 10_000
) -> Result:
    """``agentrt pending list`` on a store of `large` pending tasks vs on an empty store."""
    env = isolated_env(root)
    empty = root / "empty-store"
    trio.run(ensure_store, empty, 0)
    lines: dict[Path, set[int]] = {large_store: set(), empty: set()}

    def listing(state: Path) -> float:
        elapsed, out = timed_run(
            [os.fspath(script("agentrt")), "pending", "list", "--state-dir", os.fspath(state)],
            env,
            root,
        )
        lines[state].add(len(out.splitlines()))
        return elapsed

    subject, baseline = interleave_sync(
        lambda: listing(large_store), lambda: listing(empty), rounds
    )
    problems = []
    if lines[large_store] != {large}:
        problems.append(f"listed {sorted(lines[large_store])} lines for {large} tasks")
    return Result(
        f"cli_pending_{_size(large)}",
        subject,
        baseline,
        "ratio",
        1.1,
        rounds,
        tuple(problems),
        (f"wall time of the command, its output read through a pipe; {large} vs 0 tasks",),
    )


def _copy_store(store: Path, state: Path) -> None:
    """Copy the task store of the state folder `store` into a new state folder `state`."""
    state.mkdir(mode=0o700, parents=True)
    for path in store.glob("tasks.db*"):
        shutil.copy2(path, state / path.name)


def bench_cli_pending_daemon(
    root: Path, stores: Path, large: int = 100_000, small: int = 10_000, rounds: int = 10
) -> list[Result]:
    """``agentrt pending list`` through a daemon: at `large` tasks vs without a daemon, and
    vs through a daemon at `small` tasks.

    The daemons hold copies of the stores (a daemon holds its state folder, so the
    command on the same folder would go through it); the command without a daemon
    lists the store it was copied from. Every listing must print the same lines
    with and without a daemon.
    """
    env = isolated_env(root)
    large_store = trio.run(ensure_store, stores / str(large), large)
    small_store = trio.run(ensure_store, stores / str(small), small)
    _copy_store(large_store, root / "listing-large-state")
    _copy_store(small_store, root / "listing-small-state")
    outputs: dict[str, set[str]] = {"daemon": set(), "plain": set(), "small": set()}
    counts: dict[str, set[int]] = {"daemon": set(), "plain": set(), "small": set()}

    def listing(state: Path, kind: str) -> float:
        elapsed, out = timed_run(
            [os.fspath(script("agentrt")), "pending", "list", "--state-dir", os.fspath(state)],
            env,
            root,
        )
        outputs[kind].add(hashlib.sha256(out.encode()).hexdigest())
        counts[kind].add(len(out.splitlines()))
        return elapsed

    big, _, big_state = start_daemon(root, env, "listing-large")
    try:
        little, _, little_state = start_daemon(root, env, "listing-small")
        try:
            through, plain, through_small = interleave_sync_many(
                [
                    lambda: listing(big_state, "daemon"),
                    lambda: listing(large_store, "plain"),
                    lambda: listing(little_state, "small"),
                ],
                rounds,
            )
        finally:
            stop_daemon(little)
    finally:
        stop_daemon(big)
    problems = [
        f"{kind}: listed {sorted(counts[kind])} lines for {count} tasks"
        for kind, count in (("daemon", large), ("plain", large), ("small", small))
        if counts[kind] != {count}
    ]
    if len(outputs["daemon"] | outputs["plain"]) != 1:
        problems.append("the listing through the daemon differs from the one without it")
    name = f"pending_list_{_size(large)}"
    return [
        Result(
            name,
            through,
            plain,
            "ratio",
            1.5,
            rounds,
            tuple(problems),
            (
                f"wall time of `agentrt pending list`, its output read through a pipe: through "
                f"a daemon holding {large} tasks vs without a daemon on the same store",
            ),
        ),
        Result(
            f"{name}_{_size(small)}",
            through,
            through_small,
            "ratio",
            11.0,
            rounds,
            tuple(problems),
            (f"the same through a daemon: {large} tasks vs {small}",),
        ),
    ]


def time_to_output(command: list[str], env: dict[str, str], cwd: Path) -> tuple[float, str]:
    """Run `command` to its end; (wall seconds until its first byte of standard output,
    all its standard output). Raises `RuntimeError` with its standard error when it fails."""
    start = time.perf_counter()
    process = subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=cwd,
        bufsize=0,  # unbuffered: the first byte is read alone, the rest by `communicate`
    )
    assert process.stdout is not None
    first = process.stdout.read(1)
    elapsed = time.perf_counter() - start
    rest, err = process.communicate(timeout=STEP_TIMEOUT)
    if process.returncode != 0:
        raise RuntimeError(
            f"{' '.join(command)} exited with {process.returncode}: "
            f"{err.decode(errors='replace')[-1000:]}"
        )
    return elapsed, (first + rest).decode(errors="replace")


async def _fill_conversations(state: Path, sizes: dict[str, int]) -> None:
    """A store in `state` holding a finished conversation of each size, by session id."""
    await trio.Path(state).mkdir(mode=0o700, parents=True)
    store = await TaskStore.open(state / "tasks.db")
    try:
        for session, count in sizes.items():
            await store.finish(session, conversation(count, session))
    finally:
        await store.aclose()


def bench_continue(
    root: Path, long: int = 10_000, short: int = 10, rounds: int = 10
) -> list[Result]:
    """``agentrt sessions continue`` of a session of `long` messages vs of `short`, until the
    model's first words, without a daemon and through one.

    Each sample continues the same session with ``hello`` (the scripted model says
    it back), so each grows by two messages a sample.
    """
    env = isolated_env(root)
    sizes = {"cli-long": long, "cli-short": short}
    here = root / "continue-state"
    trio.run(_fill_conversations, here, sizes)
    _copy_store(here, root / "continue-daemon-state")
    problems: list[str] = []

    def resume(state: Path, session: str) -> float:
        elapsed, out = time_to_output(
            [
                os.fspath(script("agentrt")),
                "sessions",
                "continue",
                session,
                "hello",
                "--state-dir",
                os.fspath(state),
            ],
            env,
            root,
        )
        if "hello" not in out:
            problems.append(f"sessions continue {session} printed {out[-200:]!r}")
        return elapsed

    daemon, _, there = start_daemon(root, env, "continue-daemon")
    try:
        medians = interleave_sync_many(
            [
                lambda: resume(here, "cli-long"),
                lambda: resume(here, "cli-short"),
                lambda: resume(there, "cli-long"),
                lambda: resume(there, "cli-short"),
            ],
            rounds,
        )
    finally:
        stop_daemon(daemon)
    note = (
        f"wall time from start to the first words the model says (stdout), {long} messages "
        f"vs {short} (each grows by 2 a sample)"
    )
    return [
        Result(
            f"continue_{long}",
            medians[0],
            medians[1],
            "ratio",
            1.2,
            rounds,
            tuple(problems[:3]),
            (f"{note}; no daemon",),
        ),
        Result(
            f"continue_{long}_daemon",
            medians[2],
            medians[3],
            "ratio",
            1.2,
            rounds,
            tuple(problems[:3]),
            (f"{note}; through a daemon holding the store",),
        ),
    ]


def _size(count: int) -> str:
    """`count` as a row's name gives it: ``10k`` for 10,000, ``5`` for 5."""
    return f"{count // 1000}k" if count >= 1000 else str(count)


def python_c(code: str, env: dict[str, str], cwd: Path) -> float:
    """Wall seconds of a fresh ``python -c CODE`` of this interpreter: the baselines' process."""
    return timed_run([sys.executable, "-c", code], env, cwd)[0]


def bench_run_hello(root: Path, rounds: int = 10) -> Result:
    """``agentrt run hello`` (the scripted model) vs importing what it is built on."""
    env = isolated_env(root)
    state = root / "run-state"
    problems: list[str] = []

    def run() -> float:
        elapsed, out = timed_run(
            [os.fspath(script("agentrt")), "run", "hello", "--state-dir", os.fspath(state)],
            env,
            root,
        )
        if "hello" not in out:
            problems.append(f"agentrt run hello printed {out[-200:]!r}")
        return elapsed

    subject, baseline = interleave_sync(
        run, lambda: python_c("import trio, attrs, cattrs", env, root), rounds
    )
    return Result(
        "run_hello",
        subject,
        baseline,
        "ratio",
        1.3,
        rounds,
        tuple(problems[:3]),
        (
            "wall time of each process; the scripted model streams the one word with its "
            "usual 20 ms pause, which is part of the command's time",
        ),
    )


def bench_tui_first_screen(root: Path, rounds: int = 10) -> Result:
    """``agenttui`` with a daemon running, until its first screen shows, vs the imports."""
    env = isolated_env(root)
    daemon, socket_path, state = start_daemon(root, env, "tui")
    try:
        screen, connected = re.compile(TUI_SCREEN), re.compile(TUI_CONNECTED)
        command = [
            os.fspath(script("agenttui")),
            "--socket",
            os.fspath(socket_path),
            "--state-dir",
            os.fspath(state),
        ]
        imports = [sys.executable, "-c", "import trio, prompt_toolkit, attrs, cattrs"]
        until_connected: list[float] = []

        def window() -> float:
            first, later = time_to_screen(command, env, root, screen, later=connected)
            if later is not None:
                until_connected.append(later)
            return first

        subject, baseline = interleave_sync(
            window, lambda: time_to_screen(imports, env, root, None)[0], rounds
        )
    finally:
        stop_daemon(daemon)
    shown = (
        f'{format_time(statistics.median(until_connected))} until it shows "{TUI_CONNECTED}" '
        "(connected)"
        if until_connected
        else f'"{TUI_CONNECTED}" (connected) never showed'
    )
    return Result(
        "tui_first_screen",
        subject,
        baseline,
        "ratio",
        1.3,
        rounds,
        notes=(
            f'from start in a fresh 120x40 pty until the screen shows "{TUI_SCREEN}"; '
            f"median {shown}; the baseline runs in the same kind of pty",
        ),
    )


def bench_client_import(root: Path, rounds: int = 20) -> Result:
    """``import agentrt.client`` (what a client of the daemon loads) vs what it is built on."""
    env = isolated_env(root)
    subject, baseline = interleave_sync(
        lambda: python_c("import agentrt.client", env, root),
        lambda: python_c("import trio, attrs", env, root),
        rounds,
    )
    return Result(
        "client_import",
        subject,
        baseline,
        "ratio",
        1.3,
        rounds,
        (),
        ("wall time of a fresh process that imports the daemon's client (agenttui's start)",),
    )


def run_all(
    root: Path,
    large_store: Path,
    large: int = 10_000,
    rounds: int | None = None,
    *,
    stores: Path | None = None,
    largest: int = 100_000,
    history: int = 10_000,
) -> list[Result]:
    """Every command benchmark; `large_store` is a state folder holding `large` tasks.

    The stores of the listings through a daemon (`largest` and `large` tasks) are made
    under `stores` (default: `root`), or reused from there; `history` is the length of
    the long conversation continued. `rounds`, when given, replaces every benchmark's
    own number of rounds.
    """
    counts = {} if rounds is None else {"rounds": rounds}
    return [
        bench_cli_pending_list(root, large_store, large=large, **counts),
        *bench_cli_pending_daemon(
            root, stores or root / "stores", large=largest, small=large, **counts
        ),
        *bench_continue(root, long=history, **counts),
        bench_run_hello(root, **counts),
        bench_client_import(root, **counts),
        bench_tui_first_screen(root, **counts),
    ]

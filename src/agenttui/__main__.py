"""``agenttui``: the terminal client. Starts a local daemon if none answers, then opens the window."""

from __future__ import annotations

import argparse
import gc
import sys
from collections.abc import Callable
from collections.abc import Sequence
from pathlib import Path

from agentrt import __version__
from agentrt.apps import codecache
from agentrt.apps.entry import collect_from_now_on
from agentrt.config.options import API_KEY_ENV
from agentrt.config.options import APPROVAL
from agentrt.config.options import BASE_URL
from agentrt.config.options import CONFIG
from agentrt.config.options import MODEL
from agentrt.config.options import MODEL_OPTIONS
from agentrt.config.options import SANDBOX
from agentrt.config.options import SOCKET
from agentrt.config.options import STATE_DIR
from agentrt.config.options import shared_options


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agenttui",
        description=(
            "The terminal client of the agentrt daemon. Type a message to start a run; "
            "Esc stops it (Yes / Pause / No), Ctrl+C stops it and discards its task, "
            "/pending resumes a paused one. With no daemon answering on the socket, "
            "one is started in the background."
        ),
        epilog="Inside the window, /help lists the keys and commands.",
        parents=[
            shared_options(
                SOCKET,
                STATE_DIR,
                *MODEL_OPTIONS,
                notes={
                    STATE_DIR: "a daemon this starts uses it too, and logs to daemon.log there",
                    MODEL: "for a daemon this starts; a daemon already running keeps its own",
                    BASE_URL: "for a daemon this starts",
                    API_KEY_ENV: "for a daemon this starts",
                    APPROVAL: "for a daemon this starts",
                    CONFIG: "a daemon this starts reads it too",
                },
            )
        ],
    )
    parser.add_argument("--version", action="version", version=f"agenttui {__version__}")
    return parser


def daemon_options(args: argparse.Namespace) -> list[str]:
    """The flags, beyond --model and --base-url, that a daemon this starts is given."""
    options: list[str] = []
    for flag, value in (
        (CONFIG, args.config),
        (API_KEY_ENV, args.api_key_env),
        (APPROVAL, args.approval),
        (SANDBOX, args.sandbox),
    ):
        if value is not None:
            options += [flag, str(value)]
    return options


def run(
    argv: Sequence[str] | None = None, *, on_first_screen: Callable[[], None] | None = None
) -> int:
    """Run the client; return the process exit status.

    `on_first_screen` is called once the window has been drawn the first time.
    """
    # Imported here, after `main` has paused the garbage collector, not when the module is.
    from agentrt.config.settings import load_settings
    from agentrt.protocol.client import default_socket_path
    from agentrt.protocol.client import new_window_hash

    from ._bridge import run_window
    from ._history import FileHistory
    from ._history import history_path
    from ._launch import DaemonStartError

    args = _parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    socket_path: Path = args.socket or default_socket_path()
    try:
        # Checked here, so a bad file is reported at once rather than by a daemon's log.
        settings = load_settings(args)
    except ValueError as exc:
        print(f"agenttui: {exc}", file=sys.stderr)
        return 2
    state_dir = settings.state_dir.value
    try:
        # The window is drawn at once; the daemon is found, or started, behind it.
        run_window(
            socket_path,
            new_window_hash(),
            state_dir=args.state_dir,
            model=args.model,
            base_url=args.base_url,
            history=FileHistory(history_path(state_dir)),
            daemon_options=daemon_options(args),
            on_first_screen=on_first_screen,
        )
    except DaemonStartError as exc:
        print(f"agenttui: {exc}", file=sys.stderr)
        return 1
    return 0


def main() -> None:
    """The ``agenttui`` command."""
    # Until the first screen is drawn, nearly everything made is kept for good (modules,
    # classes, the window), so the collector's passes over the young objects (a tenth of
    # the CPU time to the first screen) free nothing: it waits until then.
    gc.disable()
    # The window's classes take their compiled methods from the last start's (see
    # `agentrt.apps.codecache`) until the first screen is drawn.
    codecache.begin()
    try:
        # What the start made (modules, classes, the window) is then frozen.
        status = run(on_first_screen=collect_from_now_on)
    finally:
        codecache.end()
        gc.enable()
    sys.exit(status)


if __name__ == "__main__":
    main()

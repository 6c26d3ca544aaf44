"""Where agentrt keeps things: its state directory and the daemon's socket.

A leaf of the package, like `agentrt.vocab.terms`: the runtime needs these paths to
keep tools out of them, the daemon to listen, and a client (agenttui, the
`agentrt` command) to find the daemon, without any of them loading the others.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from collections.abc import Mapping
from pathlib import Path
from typing import Final
from typing import TypeAlias

#: A path as a caller may give it: a `str` or any `os.PathLike` (a `Path`, say).
StrPath: TypeAlias = "str | os.PathLike[str]"

#: The HTTP API token's file in the state directory (`agentrt.http` writes it).
HTTP_TOKEN_FILE: Final = "http-token"


def _env_path(
    env: Mapping[str, str] | None,
    own: str,
    xdg: str,
    in_xdg: str,
    otherwise: Callable[[], Path],
) -> Path:
    """`$own`, else `in_xdg` under `$xdg`, else `otherwise()` (`env`: the environment's)."""
    env = os.environ if env is None else env
    explicit = env.get(own)
    if explicit:
        return Path(explicit)
    base = env.get(xdg)
    return Path(base) / in_xdg if base else otherwise()


def default_state_dir(env: Mapping[str, str] | None = None) -> Path:
    """`$AGENTRT_STATE_DIR`, else `$XDG_STATE_HOME/agentrt`, else `~/.local/state/agentrt`."""
    return _env_path(
        env,
        "AGENTRT_STATE_DIR",
        "XDG_STATE_HOME",
        "agentrt",
        lambda: Path.home() / ".local" / "state" / "agentrt",
    )


def default_socket_path(env: Mapping[str, str] | None = None) -> Path:
    """`$AGENTRT_SOCKET`, else `$XDG_RUNTIME_DIR/agentrt/daemon.sock`, else ``/tmp/agentrt-UID/daemon.sock``."""
    return _env_path(
        env,
        "AGENTRT_SOCKET",
        "XDG_RUNTIME_DIR",
        "agentrt/daemon.sock",
        lambda: Path(f"/tmp/agentrt-{os.getuid()}") / "daemon.sock",
    )


def is_socket_answering(path: StrPath) -> bool:
    """True when something accepts connections on the Unix socket `path`."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(1.0)
        probe.connect(os.fspath(path))
    except OSError:
        return False
    finally:
        probe.close()
    return True

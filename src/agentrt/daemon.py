"""The agentrt daemon: runs agents for terminal windows over a Unix socket.

``agentrt daemon`` (or ``python -m agentrt.daemon``) serves the frame protocol
described in ``docs/protocol.md``. In code::

    async with open_runtime(state_dir) as runtime:
        daemon = await nursery.start(serve, socket_path, runtime)
        ...
        await daemon.shutdown()

Names are loaded when first used: a program that only needs the frame adapters
(`agentrt.frontends.terminal.framing`) does not load the server.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING
from typing import Any

if TYPE_CHECKING:
    from .apps.daemon import _amain as _amain
    from .apps.daemon import _parser as _parser
    from .apps.daemon import main as main
    from .apps.daemon import serve as serve
    from .frontends.terminal.connection import Connection as Connection
    from .frontends.terminal.lifecycle import ConnectionState as ConnectionState
    from .frontends.terminal.lifecycle import IllegalStepError as IllegalStepError
    from .frontends.terminal.lifecycle import Lifecycle as Lifecycle
    from .frontends.terminal.lifecycle import Step as Step
    from .frontends.terminal.logs import SecretFilter as SecretFilter
    from .frontends.terminal.paths import DaemonAlreadyRunningError as DaemonAlreadyRunningError
    from .frontends.terminal.paths import PeerCredentials as PeerCredentials
    from .frontends.terminal.paths import SocketPathError as SocketPathError
    from .frontends.terminal.paths import check_peer as check_peer
    from .frontends.terminal.paths import default_socket_path as default_socket_path
    from .frontends.terminal.paths import peer_credentials as peer_credentials
    from .frontends.terminal.server import Daemon as Daemon

#: Where each name lives.
_WHERE = {
    "Connection": "frontends.terminal.connection",
    "ConnectionState": "frontends.terminal.lifecycle",
    "IllegalStepError": "frontends.terminal.lifecycle",
    "Lifecycle": "frontends.terminal.lifecycle",
    "Step": "frontends.terminal.lifecycle",
    "SecretFilter": "frontends.terminal.logs",
    "_amain": "apps.daemon",
    "_parser": "apps.daemon",
    "main": "apps.daemon",
    "serve": "apps.daemon",
    "DaemonAlreadyRunningError": "frontends.terminal.paths",
    "PeerCredentials": "frontends.terminal.paths",
    "SocketPathError": "frontends.terminal.paths",
    "check_peer": "frontends.terminal.paths",
    "default_socket_path": "frontends.terminal.paths",
    "peer_credentials": "frontends.terminal.paths",
    "Daemon": "frontends.terminal.server",
}


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"agentrt.{where}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_WHERE})


if __name__ == "__main__":  # ``python -m agentrt.daemon``: the same as ``agentrt daemon``
    import gc
    import sys

    gc.disable()  # while the modules load; `main` turns it on once the socket is served
    from .apps import codecache

    codecache.begin()  # ended with the collector's pause (`collect_from_now_on`)
    from .apps.daemon import main as _main

    sys.exit(_main())

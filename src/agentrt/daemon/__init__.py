"""The agentrt daemon: runs agents for terminal windows over a Unix socket.

``agentrt daemon`` (or ``python -m agentrt.daemon``) serves the frame protocol
described in ``docs/protocol.md``. In code::

    async with open_runtime(state_dir) as runtime:
        daemon = await nursery.start(serve, socket_path, runtime)
        ...
        await daemon.shutdown()

Names are loaded when first used: a program that only needs the frame adapters
(`agentrt.daemon._wire`) does not load the server.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._connection import Connection as Connection
    from ._lifecycle import ConnectionState as ConnectionState
    from ._lifecycle import IllegalStepError as IllegalStepError
    from ._lifecycle import Lifecycle as Lifecycle
    from ._lifecycle import Step as Step
    from ._logging import SecretFilter as SecretFilter
    from ._main import _amain as _amain
    from ._main import _parser as _parser
    from ._main import main as main
    from ._main import serve as serve
    from ._paths import DaemonAlreadyRunningError as DaemonAlreadyRunningError
    from ._paths import PeerCredentials as PeerCredentials
    from ._paths import SocketPathError as SocketPathError
    from ._paths import check_peer as check_peer
    from ._paths import default_socket_path as default_socket_path
    from ._paths import peer_credentials as peer_credentials
    from ._server import Daemon as Daemon

#: Where each name lives.
_WHERE = {
    "Connection": "_connection",
    "ConnectionState": "_lifecycle",
    "IllegalStepError": "_lifecycle",
    "Lifecycle": "_lifecycle",
    "Step": "_lifecycle",
    "SecretFilter": "_logging",
    "_amain": "_main",
    "_parser": "_main",
    "main": "_main",
    "serve": "_main",
    "DaemonAlreadyRunningError": "_paths",
    "PeerCredentials": "_paths",
    "SocketPathError": "_paths",
    "check_peer": "_paths",
    "default_socket_path": "_paths",
    "peer_credentials": "_paths",
    "Daemon": "_server",
}


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{where}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_WHERE})

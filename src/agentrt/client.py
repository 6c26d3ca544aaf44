"""A small Trio client of the daemon: connect, say hello, send frames, receive frames.

The public names of `agentrt.protocol.client`, where the code lives."""

from __future__ import annotations

from .protocol.client import BrokenDaemonConnectionError as BrokenDaemonConnectionError
from .protocol.client import Client as Client
from .protocol.client import ClientError as ClientError
from .protocol.client import ClosedClientError as ClosedClientError
from .protocol.client import DaemonNotRunningError as DaemonNotRunningError
from .protocol.client import HandshakeError as HandshakeError
from .protocol.client import default_socket_path as default_socket_path
from .protocol.client import default_state_dir as default_state_dir
from .protocol.client import is_socket_answering as is_socket_answering
from .protocol.client import new_window_hash as new_window_hash

__all__ = [
    "BrokenDaemonConnectionError",
    "Client",
    "ClientError",
    "ClosedClientError",
    "DaemonNotRunningError",
    "HandshakeError",
    "default_socket_path",
    "default_state_dir",
    "is_socket_answering",
    "new_window_hash",
]

"""`serve_http`: the HTTP API and web page on hypercorn's Trio worker."""

from __future__ import annotations

import ipaddress
import logging
from functools import partial
from typing import Any

import trio
from hypercorn.config import Config
from hypercorn.trio import serve

from .._runtime import Runtime
from ._app import build_app
from ._frontend import WebFrontEnd

log = logging.getLogger("agentrt.http")

#: The prefix of the sessions whose questions the web page answers.
WEB_PREFIX = "chat-"


def _bind(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


async def serve_http(
    runtime: Runtime,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    token: str,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the HTTP API and the web chat page until cancelled; report the bound port.

    Start it with ``port = await nursery.start(serve_http, runtime, host, port,
    token=...)``; port 0 picks a free one. Runs started over HTTP live in this
    server's nursery; when it is cancelled they stop with the shutdown cause,
    which keeps their pending tasks. The server holds the one ``"chat-"``
    listener of the registry for its lifetime.
    """
    if not token:
        raise ValueError("serve_http needs a token: use load_or_create_token(state_dir)")
    if not _is_loopback(host):
        log.warning("the HTTP API listens on %s, which is not a loopback address", host)
    config = Config()
    config.bind = [_bind(host, port)]
    config.accesslog = None
    config.errorlog = logging.getLogger("agentrt.http.server")
    config.graceful_timeout = 1.0
    with runtime.registry.listen(WEB_PREFIX, name="web") as listener:
        async with trio.open_nursery() as nursery:
            frontend = WebFrontEnd(runtime, nursery, listener)
            nursery.start_soon(frontend.serve_questions)
            # hypercorn types its app more narrowly than Starlette declares itself.
            app: Any = build_app(frontend, token)
            binds: list[str] = await nursery.start(partial(serve, app, config, mode="asgi"))
            bound = int(binds[0].rpartition(":")[2])
            log.info("HTTP API on http://%s", _bind(host, bound))
            task_status.started(bound)

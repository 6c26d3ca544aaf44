"""Another local web server, as another user on the machine could run on another port.

It serves one page (`page_html`, set by the test) and records the headers of
every request the browser sends it, so a test can show what a browser that is
logged into the agentrt page hands to a neighbour: cookies, an Authorization
header, anything an attacker could replay.
"""

from __future__ import annotations

import attrs
import trio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.responses import Response
from starlette.routing import Route

from .loopback import serve_app


@attrs.frozen
class Seen:
    """One request as the other server received it."""

    method: str
    path: str
    headers: dict[str, str]


@attrs.define(eq=False)
class OtherOrigin:
    """The server; start with ``await nursery.start(server.run)``."""

    page_html: str = "<!doctype html><title>other</title>"
    port: int = 0
    seen: list[Seen] = attrs.field(factory=list)

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self.port}"

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve on an ephemeral loopback port until cancelled."""
        app = Starlette(
            routes=[
                Route("/", self._page, methods=["GET"]),
                Route("/{rest:path}", self._any, methods=["GET", "POST", "OPTIONS"]),
            ]
        )
        async with trio.open_nursery() as nursery:
            self.port = await serve_app(app, nursery)
            task_status.started()

    def _record(self, request: Request) -> None:
        self.seen.append(Seen(request.method, request.url.path, dict(request.headers)))

    async def _page(self, request: Request) -> Response:
        self._record(request)
        return HTMLResponse(self.page_html)

    async def _any(self, request: Request) -> Response:
        self._record(request)
        return Response(b"", status_code=204)

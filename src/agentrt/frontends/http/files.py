"""The web page's own files: the page at ``/``, its script and style at ``/static/{name}``,
and the libraries it ships with at ``/static/vendor/{name}``.

The lists of names are read from the package's ``web`` folder, so the OpenAPI
document names exactly the files the server answers without the token.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.responses import FileResponse
from starlette.responses import Response
from starlette.staticfiles import NotModifiedResponse
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

#: The package folders of the page's files, and the URL prefix each is served under.
FOLDERS: dict[str, str] = {"/static/": "web", "/static/vendor/": "web/vendor"}


class PageFiles(StaticFiles):
    """The files of one folder at ``PREFIX{name}``, served by Starlette.

    Starlette finds the file (never outside the folder), reads it in a worker
    thread and answers conditional requests; here the name comes from the
    route, the page itself is not among the files, and the types are pinned
    rather than left to the host's MIME table.
    """

    TYPES = {
        ".js": "text/javascript; charset=utf-8",
        ".css": "text/css; charset=utf-8",
        ".svg": "image/svg+xml",
    }

    def __init__(self, folder: str) -> None:
        super().__init__(packages=[("agentrt", folder)])

    def names(self) -> list[str]:
        """The files served (the page and the licence texts excluded)."""
        return [
            name
            for folder in self.all_directories
            for name in sorted(os.listdir(folder))
            if os.path.splitext(name)[1] in self.TYPES
        ]

    def page(self) -> bytes:
        """``index.html``, read once: it is answered at ``/``, not here."""
        for folder in self.all_directories:
            with contextlib.suppress(FileNotFoundError):
                return Path(folder, "index.html").read_bytes()
        raise RuntimeError("the web page is missing from the agentrt package (web/index.html)")

    def get_path(self, scope: Scope) -> str:
        """The file the route's ``{name}`` names; one of another type is not found."""
        name: str = scope["path_params"]["name"]
        if os.path.splitext(name)[1] not in self.TYPES:
            raise HTTPException(404)
        return name

    def file_response(
        self,
        full_path: str | os.PathLike[str],
        stat_result: os.stat_result,
        scope: Scope,
        status_code: int = 200,
    ) -> Response:
        """The file, revalidated by the browser on each load (the daemon may be upgraded)."""
        response = FileResponse(
            full_path,
            status_code=status_code,
            stat_result=stat_result,
            media_type=self.TYPES[os.path.splitext(full_path)[1]],
            headers={"Cache-Control": "no-cache"},
        )
        if self.is_not_modified(response.headers, Headers(scope=scope)):
            return NotModifiedResponse(response.headers)
        return response


def page_files() -> dict[str, PageFiles]:
    """Each URL prefix of the page's files with the files served under it."""
    return {prefix: PageFiles(folder) for prefix, folder in FOLDERS.items()}

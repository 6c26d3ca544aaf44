"""The HTTP API and the web chat page (origin ``chat-``), served on Trio by hypercorn."""

from .frontends.http.app import BODY_SECONDS as BODY_SECONDS
from .frontends.http.app import MAX_BODY as MAX_BODY
from .frontends.http.app import SECURITY_HEADERS as SECURITY_HEADERS
from .frontends.http.app import allowed_hosts as allowed_hosts
from .frontends.http.app import build_app as build_app
from .frontends.http.frontend import WebFrontEnd as WebFrontEnd
from .frontends.http.frontend import session_id_from_path as session_id_from_path
from .frontends.http.openapi import openapi_document as openapi_document
from .frontends.http.server import MAX_CONNECTIONS as MAX_CONNECTIONS
from .frontends.http.server import connection_limit as connection_limit
from .frontends.http.server import serve_http as serve_http
from .frontends.http.token import load_or_create_token as load_or_create_token
from .frontends.http.token import token_main as token_main

__all__ = [
    "BODY_SECONDS",
    "MAX_BODY",
    "MAX_CONNECTIONS",
    "SECURITY_HEADERS",
    "WebFrontEnd",
    "allowed_hosts",
    "build_app",
    "connection_limit",
    "load_or_create_token",
    "openapi_document",
    "serve_http",
    "session_id_from_path",
    "token_main",
]

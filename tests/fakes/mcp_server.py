"""An MCP server for the tests, on the official SDK's `MCPServer` (FastMCP), over stdio.

Run as ``python tests/fakes/mcp_server.py [FAULT]``. Its tools:

- ``echo(text)``: ``echo: TEXT``.
- ``greet()``: elicits a name (string), an age (integer), a colour (enum) and
  whether to subscribe (boolean); says what it got, or the action taken.
- ``login()``: elicits a password field (``format: password``).
- ``slow(seconds)``: reports progress, then waits; writes ``started``, then
  ``cancelled`` (when a ``notifications/cancelled`` reached it) or ``finished``
  to the file named by ``FAKE_MCP_RECORD`` (default ``mcp-record.txt`` in its
  working folder), one line each, with the request's id.
- ``touch(path)``: creates a file, or says why it cannot.
- ``connect(path)``: connects to a Unix socket and says what it answered, or why it cannot.
- ``crash()``: the process exits in the middle of the call.

FAULT ``no-init`` makes a server that reads its input and never answers
(``initialize`` included); FAULT ``garbage`` one that starts as a server should
(by hand: the SDK's server keeps stray output off the wire) and answers its
one tool's call, ``garbage``, with a line that is not JSON-RPC. ``http PORT``
serves the same tools over streamable HTTP on loopback, and one more,
``authorized``, which says whether the request carried the bearer token
``FAKE_MCP_TOKEN`` names.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Literal

import anyio
from mcp.server.mcpserver import Context
from mcp.server.mcpserver import MCPServer
from pydantic import BaseModel
from pydantic import Field

RECORD = Path(os.environ.get("FAKE_MCP_RECORD", "mcp-record.txt"))

app = MCPServer("fake")


def _record(line: str) -> None:
    with RECORD.open("a", encoding="utf-8") as f:
        f.write(line + "\n")


@app.tool()
def echo(text: str) -> str:
    """Say the text back."""
    return f"echo: {text}"


class Greeting(BaseModel):
    name: str = Field(description="your name")
    age: int
    colour: Literal["red", "green", "blue"]
    subscribe: bool


@app.tool()
async def greet(ctx: Context) -> str:
    """Greet the user, asking who they are."""
    result = await ctx.elicit("Who are you?", Greeting)
    if result.action != "accept":
        return f"greet: {result.action}"
    data = result.data
    return (
        f"hello {data.name}, {data.age}, {data.colour}, "
        f"{'subscribed' if data.subscribe else 'not subscribed'}"
    )


#: A password field: the SDK's models allow no such format, so the schema is sent as it is.
LOGIN_SCHEMA = {
    "type": "object",
    "properties": {"password": {"type": "string", "title": "Password", "format": "password"}},
    "required": ["password"],
}


@app.tool()
async def login(ctx: Context) -> str:
    """Log in, asking for a password."""
    result = await ctx.request_context.session.elicit_form(
        "Your password, please", LOGIN_SCHEMA, related_request_id=ctx.request_id
    )
    if result.action != "accept" or result.content is None:
        return f"login: {result.action}"
    return f"logged in with {len(str(result.content['password']))} characters"


@app.tool()
async def slow(seconds: float, ctx: Context) -> str:
    """Wait for a number of seconds, reporting progress."""
    request = ctx.request_id
    _record(f"started {request}")
    try:
        for step in range(3):
            await ctx.report_progress(step, 3, f"step {step}")
        await anyio.sleep(seconds)
    except anyio.get_cancelled_exc_class():
        _record(f"cancelled {request}")
        raise
    _record(f"finished {request}")
    return f"slept {seconds:g}s"


@app.tool()
def touch(path: str) -> str:
    """Create a file (to see where the server may write)."""
    try:
        Path(path).write_text("touched\n")
    except OSError as exc:
        return f"cannot: {exc.strerror}"
    return f"touched {path}"


@app.tool()
def connect(path: str) -> str:
    """Connect to a Unix socket (to see whether the server may reach one)."""
    import socket

    try:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(10)
            sock.connect(path)
            return f"answered {sock.recv(64)!r}"
    except OSError as exc:
        return f"cannot: {exc.strerror}"


@app.tool()
async def crash() -> str:
    """Exit in the middle of the call."""
    await anyio.sleep(0.05)
    os._exit(3)


async def authorized(ctx: Context) -> str:
    """Whether the request carried ``Authorization: Bearer $FAKE_MCP_TOKEN`` (HTTP only)."""
    request = ctx.request_context.request
    header = request.headers.get("authorization") if request is not None else None
    return "authorized" if header == f"Bearer {os.environ['FAKE_MCP_TOKEN']}" else "unauthorized"


def _never_answer() -> None:
    print("fake MCP server: reading, never answering", file=sys.stderr, flush=True)
    for _ in sys.stdin:
        pass
    time.sleep(3600)


def _garbage() -> None:
    """A server by hand whose only tool's call is answered with something that is not MCP."""
    tool = {"name": "garbage", "inputSchema": {"type": "object", "properties": {}}}
    for line in sys.stdin:
        message = json.loads(line)
        method, ident = message.get("method"), message.get("id")
        if method == "initialize":
            result = {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "garbage", "version": "0"},
            }
        elif method == "tools/list":
            result = {"tools": [tool]}
        elif method == "tools/call":
            sys.stdout.write("this is not json-rpc\n")
            sys.stdout.flush()
            continue
        else:
            continue
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": ident, "result": result}) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    if sys.argv[1:] == ["no-init"]:
        _never_answer()
    elif sys.argv[1:] == ["garbage"]:
        _garbage()
    elif sys.argv[1:2] == ["http"]:
        app.tool()(authorized)
        app.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        print("fake MCP server: up", file=sys.stderr, flush=True)
        app.run()

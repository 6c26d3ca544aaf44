"""The MCP servers of ``config.toml``: one `McpServerConfig` per ``[mcp.servers.NAME]`` table.

A server is reached either by a command whose standard input and output speak
MCP (``command``, ``args``, ``env``, ``cwd``: stdio), or at a URL (``url``,
``headers``: streamable HTTP). A header's value, and an ``env`` value, may
name a key of ``agentrt keys`` (or an environment variable) as ``${NAME}``;
it is looked up each time the server is started, never written anywhere.

This module checks the tables only; the servers are run by `agentrt.agent.mcp`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from typing import Final

import attrs

from ..vocab.reprs import record
from .keystore import KeyNameError
from .keystore import check_key_name

#: A server's name: it prefixes its tools' names (``NAME__tool``), which models take only as
#: letters, digits, ``_`` and ``-``; ``__`` is the separator, so a name holds none.
_NAME: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]*(_[A-Za-z0-9-]+)*$")
#: A reference to a key: ``${NAME}``.
KEY_REFERENCE: Final = re.compile(r"\$\{([^}]*)\}")
_HEADER_NAME: Final = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
#: The keys a ``[mcp.servers.NAME]`` table may hold.
SERVER_KEYS: Final = (
    "command",
    "args",
    "env",
    "cwd",
    "url",
    "headers",
    "trust",
    "trusted_tools",
    "sandbox",
    "network",
    "timeout",
    "startup_timeout",
)
#: Seconds a tool call may take unless the server's ``timeout`` says otherwise.
DEFAULT_CALL_TIMEOUT: Final = 300.0
#: Seconds a server has to answer ``initialize`` unless its ``startup_timeout`` says otherwise.
DEFAULT_STARTUP_TIMEOUT: Final = 30.0


@record
class McpServerConfig:
    """One ``[mcp.servers.NAME]`` table, checked."""

    name: str
    #: The program of a stdio server (None for an HTTP one).
    command: str | None = None
    args: tuple[str, ...] = ()
    #: Variables added to the server's environment (values may hold ``${KEY}``).
    env: Mapping[str, str] = attrs.field(factory=dict)
    cwd: Path | None = None
    #: The URL of a streamable-HTTP server (None for a stdio one).
    url: str | None = None
    #: Headers sent to an HTTP server (values may hold ``${KEY}``).
    headers: Mapping[str, str] = attrs.field(factory=dict, repr=False)
    #: Every tool of the server runs without a confirmation.
    trust: bool = False
    #: The tools (by their own names) that run without a confirmation.
    trusted_tools: tuple[str, ...] = ()
    #: Whether a stdio server runs inside the sandbox (it does unless its entry says false).
    sandbox: bool = True
    #: Whether a sandboxed stdio server keeps the network.
    network: bool = False
    #: Seconds one tool call may take.
    timeout: float = DEFAULT_CALL_TIMEOUT
    #: Seconds the server has to start and answer ``initialize``.
    startup_timeout: float = DEFAULT_STARTUP_TIMEOUT

    @property
    def transport(self) -> str:
        """``stdio`` or ``http``."""
        return "stdio" if self.command is not None else "http"

    def trusts(self, tool: str) -> bool:
        """Whether `tool` (the server's own name for it) runs without a confirmation."""
        return self.trust or tool in self.trusted_tools


def _strings(value: Any, what: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{what} must be a list of strings")
    return tuple(value)


def _table(value: Any, what: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise ValueError(f'{what} must be a table of strings, such as {{ "NAME" = "value" }}')
    for text in value.values():
        for ref in KEY_REFERENCE.findall(text):
            try:
                check_key_name(ref)
            except KeyNameError as exc:
                raise ValueError(f"{what}: ${{{ref}}}: {exc}") from None
    return dict(value)


def _seconds(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 86400:
        raise ValueError(f"{what} must be a number of seconds above 0, at most 86400")
    return float(value)


def _flag(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{what} must be true or false")
    return value


def parse_server(name: str, table: Any) -> McpServerConfig:
    """The server `name` of its table; `ValueError` (or `TypeError`) saying what is wrong."""
    if not _NAME.match(name):
        raise ValueError(
            f"{name!r} is not a server name: letters, digits, '-' and single '_' "
            "(its tools are called NAME__tool)"
        )
    if not isinstance(table, dict):
        raise ValueError(f"{name} must be a table ([mcp.servers.{name}])")
    unknown = [key for key in table if key not in SERVER_KEYS]
    if unknown:
        raise ValueError(f"{name}.{unknown[0]}: unknown key (keys: {', '.join(SERVER_KEYS)})")
    command, url = table.get("command"), table.get("url")
    if (command is None) == (url is None):
        raise ValueError(
            f"{name}: give either command (a server run here, over stdio) or url "
            "(a streamable-HTTP server), not both or neither"
        )
    fields: dict[str, Any] = {"name": name}
    if command is not None:
        if not isinstance(command, str) or not command.strip():
            raise ValueError(f"{name}.command must be a program's name or path")
        for key in ("url", "headers"):
            if key in table:
                raise ValueError(f"{name}.{key}: only for a server at a url")
        fields["command"] = command
        if "args" in table:
            fields["args"] = _strings(table["args"], f"{name}.args")
        if "env" in table:
            fields["env"] = _table(table["env"], f"{name}.env")
        if "cwd" in table:
            if not isinstance(table["cwd"], str):
                raise ValueError(f"{name}.cwd must be a folder's path")
            fields["cwd"] = Path(table["cwd"]).expanduser()
    else:
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ValueError(f"{name}.url must be an http:// or https:// URL")
        for key in ("args", "env", "cwd", "sandbox", "network"):
            if key in table:
                raise ValueError(f"{name}.{key}: only for a server run by a command")
        fields["url"] = url
        if "headers" in table:
            headers = _table(table["headers"], f"{name}.headers")
            for header, text in headers.items():
                if not _HEADER_NAME.match(header):
                    raise ValueError(f"{name}.headers: {header!r} is not a valid HTTP header name")
                if "\n" in text or "\r" in text:
                    raise ValueError(f"{name}.headers: the value of {header!r} holds a line break")
            fields["headers"] = headers
    for key in ("trust", "sandbox", "network"):
        if key in table:
            fields[key] = _flag(table[key], f"{name}.{key}")
    if "trusted_tools" in table:
        fields["trusted_tools"] = _strings(table["trusted_tools"], f"{name}.trusted_tools")
    for key in ("timeout", "startup_timeout"):
        if key in table:
            fields[key] = _seconds(table[key], f"{name}.{key}")
    return McpServerConfig(**fields)


def parse_servers(value: Any) -> dict[str, McpServerConfig]:
    """The ``[mcp.servers]`` table: each server by name (the check `settings` runs)."""
    if not isinstance(value, dict):
        raise TypeError("a table of servers, one [mcp.servers.NAME] each")
    return {name: parse_server(name, table) for name, table in value.items()}


def resolve_references(text: str, lookup: Any) -> str:
    """`text` with each ``${NAME}`` replaced by ``lookup(NAME)``; `KeyError` for one unset."""

    def value(match: re.Match[str]) -> str:
        found = lookup(match.group(1))
        if not found:
            raise KeyError(match.group(1))
        return str(found)

    return KEY_REFERENCE.sub(value, text)

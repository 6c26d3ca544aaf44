"""Settings: one configuration for every entry point, and where each value came from.

A value is taken from the first of: a command-line flag, the environment, the
configuration file, the default. The file is ``$XDG_CONFIG_HOME/agentrt/config.toml``
(else ``~/.config/agentrt/config.toml``), or the one ``--config PATH`` or
``$AGENTRT_CONFIG`` names; it is read with `tomllib`, and every key is checked:
an unknown key, a value of the wrong type or a TOML syntax error is refused
with the file, the line and the key. ``docs/configuration.md`` lists the keys.

`load_settings` gives the effective `Settings`, each value a `Value` that
knows its `Source`; `Settings.rows` is what ``agentrt config show`` prints,
with keys and tokens masked. `model_options` turns the settings into the
options the model providers take.

The environment variables of the official SDKs mean here what they mean
there: ``OPENAI_API_KEY``, ``OPENAI_BASE_URL``, ``OPENAI_ORG_ID`` and
``OPENAI_PROJECT_ID`` for ``openai:`` models; ``ANTHROPIC_API_KEY``,
``ANTHROPIC_BASE_URL`` and ``ANTHROPIC_CUSTOM_HEADERS`` for ``anthropic:``
ones. A variable set to blanks counts as unset. An API key or bot token found
in neither the environment nor the key store (`agentrt.config.keystore`) is unset.

This module loads neither the runtime nor an HTTP library: ``agenttui`` checks
the configuration with it before it starts a daemon.
"""

from __future__ import annotations

import argparse
import enum
import os
import re
from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Mapping
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any
from typing import Final
from typing import Generic
from typing import TypeVar
from urllib.parse import urlsplit

import attrs

from ..vocab.locations import default_state_dir
from ..vocab.questions import Timeout
from ..vocab.questions import TimeoutAction
from ..vocab.questions import Timeouts
from ..vocab.questions import parse_duration
from ..vocab.reprs import record
from ..vocab.terms import Approval
from ..vocab.terms import RequestKind
from ..vocab.terms import SandboxMode
from .keystore import KeyNameError
from .keystore import KeyStore
from .keystore import check_key_name

if TYPE_CHECKING:
    # The MCP servers and prices are read only from a file that has them, and loaded then:
    # agenttui checks its settings before its first screen and needs neither.
    from ..models.options import ModelOptions
    from .mcp import McpServerConfig
    from .prices import Price

#: The environment variable naming the configuration file.
CONFIG_ENV: Final = "AGENTRT_CONFIG"
#: Paths that need the system password unless configured otherwise.
DEFAULT_RESTRICTED: Final = ("/etc", "/usr", "/boot")
#: What ``agentrt config show`` says of ``sandbox = "off"``.
SANDBOX_OFF_WARNING: Final = (
    "tools run with your full access: they can read and change every file you can, "
    "agentrt's own state, secrets and configuration included"
)
#: The providers of ``openai:NAME`` and ``anthropic:NAME`` models.
PROVIDERS: Final = ("openai", "anthropic")
#: The hosted API each provider reaches when no base URL is configured.
HOSTED_URLS: Final = {
    "openai": "https://api.openai.com/v1",
    "anthropic": "https://api.anthropic.com",
}
#: The most bytes of the configuration's ``instructions`` (and of ``instructions_file``'s
#: text) sent to the model.
INSTRUCTIONS_LIMIT: Final = 32 * 1024
#: The chat services the daemon can serve.
BOTS: Final = ("telegram", "discord")

T = TypeVar("T")


def default_config_path(environ: Mapping[str, str] | None = None) -> Path:
    """``$XDG_CONFIG_HOME/agentrt/config.toml``, else ``~/.config/agentrt/config.toml``."""
    env = os.environ if environ is None else environ
    xdg = env.get("XDG_CONFIG_HOME", "").strip()
    base = Path(xdg) if xdg else Path.home() / ".config"
    return base / "agentrt" / "config.toml"


def check_model_spec(spec: str) -> str:
    """Return `spec` if it has one of the model forms; raise ValueError naming them if not."""
    kind, colon, name = spec.partition(":")
    if spec == "scripted" or (colon and name.strip() and kind in ("replay", "azure", *PROVIDERS)):
        return spec
    raise ValueError(
        f"unknown model {spec!r}; use 'scripted', 'replay:PATH', 'openai:NAME', 'anthropic:NAME'"
        " or 'azure:DEPLOYMENT'"
    )


def provider_of(spec: str) -> str | None:
    """``"openai"`` or ``"anthropic"`` for a model of that provider, else None."""
    kind = spec.partition(":")[0]
    return kind if kind in PROVIDERS and ":" in spec else None


def parse_host_port(text: str) -> tuple[str, int]:
    """``"127.0.0.1:8765"`` as ``("127.0.0.1", 8765)``; ``[::1]:8765`` for IPv6.

    Raises ValueError with an example of the form.
    """
    host, sep, port = text.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"expected HOST:PORT, such as 127.0.0.1:8765, not {text!r}")
    return host, int(port)


def check_base_url(url: str) -> str:
    """`url` if it is an ``http://`` or ``https://`` URL with a host; ValueError saying so if not."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(
            f"{url!r} is not an http:// or https:// URL (for Ollama: http://localhost:11434/v1)"
        )
    return url


# -- where a value came from ----------------------------------------------------------


class SourceKind(enum.Enum):
    """Where a setting's value was found, highest precedence first."""

    FLAG = "flag"
    ENV = "env"
    FILE = "file"
    KEY_STORE = "key store"
    SECRET_STORE = "secret store"
    DEFAULT = "default"


@record
class Source:
    """Where one value came from: its kind and which flag, variable, ``file:line`` or key."""

    kind: SourceKind
    where: str = ""

    def __str__(self) -> str:
        return f"{self.kind.value} {self.where}".strip()


DEFAULT: Final = Source(SourceKind.DEFAULT)


@record(repr=False)
class Value(Generic[T]):
    """A setting's value and its `Source`. A secret's `repr` hides the value."""

    value: T
    source: Source = DEFAULT
    #: An API key or token: never printed, only said to be set.
    secret: bool = False

    def __repr__(self) -> str:
        shown = "***" if self.secret and self.value is not None else repr(self.value)
        return f"Value({shown}, source={str(self.source)!r})"

    def shown(self) -> str:
        """The value as ``agentrt config show`` prints it (a secret as ``(set, N characters)``)."""
        v: Any = self.value
        if v is None or v == () or v == {}:
            return "(not set)"
        if self.secret:
            return f"(set, {len(str(v))} characters)"
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, enum.Enum):
            return str(v.value)
        if _is_address(v):
            return f"{v[0]}:{v[1]}"
        if isinstance(v, tuple):
            return ", ".join(str(p) for p in v)
        return str(v)

    def as_json(self) -> Any:
        """The value for ``agentrt config show --json``: plain JSON; a secret as null."""
        v: Any = self.value
        if self.secret:
            return None
        if isinstance(v, enum.Enum):
            return v.value
        if isinstance(v, Path):
            return str(v)
        if _is_address(v):
            return f"{v[0]}:{v[1]}"
        if isinstance(v, tuple):
            return [str(p) if isinstance(p, Path) else p for p in v]
        if isinstance(v, dict):
            from .prices import Price

            return {k: attrs.asdict(x) if isinstance(x, Price) else x for k, x in v.items()}
        return v


def _is_address(value: Any) -> bool:
    """Whether `value` is a ``(host, port)`` pair."""
    return (
        isinstance(value, tuple)
        and len(value) == 2
        and isinstance(value[0], str)
        and type(value[1]) is int
    )


# -- the file -------------------------------------------------------------------------


class ConfigError(ValueError):
    """A setting that cannot be used; the message says where it came from and what to do."""


#: A file value's check: the value as it will be used, or ValueError saying what it must be.
Check = Callable[[Any], Any]


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError("a string")
    return value


def _nonblank(value: Any) -> str:
    text = _text(value).strip()
    if not text:
        raise TypeError("a non-empty string")
    return text


def _model(value: Any) -> str:
    return check_model_spec(_nonblank(value))


def _positive_int(value: Any) -> int:
    if type(value) is not int or value < 1:
        raise TypeError("a positive integer")
    return value


def _days(value: Any) -> int:
    """A number of days from a flag or the environment (text) or the file (an integer)."""
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    return _positive_int(value)


def _temperature(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 2:
        raise TypeError("a number from 0 to 2")
    return float(value)


def _share(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
        raise TypeError("a share of the context window above 0 and at most 1, such as 0.85")
    return float(value)


def _windows(value: Any) -> dict[str, int]:
    if not isinstance(value, dict) or not all(type(v) is int and v > 0 for v in value.values()):
        raise TypeError(
            'a table of model names to token counts, such as { "openai:gpt-4o" = 128000 }'
        )
    for name in value:
        check_model_spec(name)
    return dict(value)


def _prices(value: Any) -> dict[str, Price]:
    if not isinstance(value, dict):
        raise TypeError(
            'a table of model names to prices, such as { "openai:gpt-4o" = { input = 2.5, '
            "output = 10.0, cached_input = 1.25 } } (US dollars a million tokens)"
        )
    out: dict[str, Price] = {}
    for name, fields in value.items():
        check_model_spec(name)
        if (
            not isinstance(fields, dict)
            or not {"input", "output"} <= set(fields)
            or not set(fields) <= {"input", "output", "cached_input"}
        ):
            raise ValueError(
                f"{name!r} needs input and output (and may have cached_input): US dollars a "
                "million tokens"
            )
        if not all(
            isinstance(v, int | float) and not isinstance(v, bool) and v >= 0
            for v in fields.values()
        ):
            raise ValueError(f"the prices of {name!r} must be numbers, 0 or more")
        from .prices import Price

        out[name] = Price(
            float(fields["input"]),
            float(fields["output"]),
            float(fields["cached_input"]) if "cached_input" in fields else None,
        )
    return out


def _boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError("true or false")
    return value


def _approval(value: Any) -> Approval:
    return Approval.parse(_text(value))


def _sandbox(value: Any) -> SandboxMode:
    return value if isinstance(value, SandboxMode) else SandboxMode.parse(_text(value))


def _flag_text(value: Any) -> bool:
    """A true/false setting from the environment (text) or the file (a boolean)."""
    if isinstance(value, str):
        lowered = value.strip().lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise TypeError("true or false")
    return _boolean(value)


def _instructions(value: Any) -> str:
    text = _text(value)
    if len(text.encode()) > INSTRUCTIONS_LIMIT:
        raise ValueError(
            f"is {len(text.encode())} bytes; at most {INSTRUCTIONS_LIMIT} are sent to the model"
            " (put longer instructions in instructions_file, or in an AGENTS.md)"
        )
    return text


def _path(value: Any) -> Path:
    return Path(_nonblank(value)).expanduser()


def _paths(value: Any) -> tuple[Path, ...]:
    if not isinstance(value, list) or not all(isinstance(p, str) and p for p in value):
        raise TypeError("a list of paths (strings)")
    return tuple(Path(p).expanduser() for p in value)


def _models(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise TypeError(
            'a list of models, such as ["openai:gpt-4o", "anthropic:claude-sonnet-4-5"]'
        )
    return tuple(dict.fromkeys(check_model_spec(v.strip()) for v in value))


def _url(value: Any) -> str:
    return check_base_url(_nonblank(value))


def _variable(value: Any) -> str:
    try:
        return check_key_name(_nonblank(value))
    except KeyNameError as exc:
        raise ValueError(str(exc)) from None


_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")


def _headers(value: Any) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise TypeError('a table of header names to strings, such as { "X-Title" = "agentrt" }')
    for name, text in value.items():
        if not _HEADER_NAME.match(name):
            raise ValueError(f"{name!r} is not a valid HTTP header name")
        if "\n" in text or "\r" in text:
            raise ValueError(f"the value of header {name!r} holds a line break")
    return dict(value)


#: The schemes of a store that is a PostgreSQL database.
STORE_SCHEMES: Final = ("postgresql://", "postgres://")
#: Seconds a fleet member's lease lasts from its last heartbeat, unless configured.
DEFAULT_LEASE: Final = 10.0


def check_store(value: str) -> str:
    """`value` if it names a store: a ``postgresql://`` URL, or an SQLite file's path.

    Raises ValueError with the forms accepted.
    """
    text = value.strip()
    if text.startswith(STORE_SCHEMES):
        if len(text.split("://", 1)[1]) == 0:
            raise ValueError(f"{value!r} names no database; use postgresql://USER@HOST:PORT/DB")
        return text
    if "://" in text or not text:
        raise ValueError(
            f"unknown store {value!r}; use a postgresql://USER@HOST:PORT/DB URL (a fleet of "
            "daemons) or the path of an SQLite file"
        )
    return str(Path(text).expanduser())


def shown_store(value: str) -> str:
    """A store location with any password in it replaced by ``***``."""
    value = re.sub(r"(://[^/@:]*):[^/@]*@", r"\1:***@", value)
    return re.sub(r"(password=)[^&\s]*", r"\1***", value)


def _store(value: Any) -> str:
    return check_store(_nonblank(value))


def _lease(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 1 <= value <= 3600:
        raise TypeError("a number of seconds from 1 to 3600")
    return float(value)


def _lease_text(value: Any) -> float:
    """A lease from the environment (text) or the file (a number)."""
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise TypeError("a number of seconds from 1 to 3600") from None
    return _lease(value)


def _address(value: Any) -> tuple[str, int]:
    return parse_host_port(_text(value))


def _ids(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(
        (isinstance(v, str) and v.strip()) or type(v) is int for v in value
    ):
        raise TypeError("a list of user ids (numbers or strings)")
    return tuple(str(v).strip() for v in value)


def _duration(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError('a duration such as "90s", "30m", "2h" or "1d"')
    parse_duration(value)  # ValueError saying the form
    return value.strip()


def _mcp_servers(value: Any) -> dict[str, McpServerConfig]:
    from .mcp import parse_servers

    return parse_servers(value)


def _timeout_action(value: Any) -> TimeoutAction:
    return TimeoutAction.parse(_text(value))


#: The kinds of question a timeout is set for, as the ``[timeouts]`` table names them.
TIMEOUT_KINDS: Final = tuple(kind.value for kind in RequestKind)
_TIMEOUT_KEYS: Final[dict[str, Check]] = {
    key: check
    for kind in TIMEOUT_KINDS
    for key, check in ((kind, _duration), (f"{kind}_action", _timeout_action))
}

_PROVIDER_KEYS: Final[dict[str, Check]] = {
    "base_url": _url,
    "api_key_env": _variable,
    "headers": _headers,
}
_BOT_KEYS: Final[dict[str, Check]] = {
    "enabled": _boolean,
    "allow": _ids,
    "token_env": _variable,
}
#: Every key the file may hold: a check, or a table of them.
FILE_KEYS: Final[dict[str, Check | dict[str, Check]]] = {
    "model": _model,
    "models": _models,
    "approval": _approval,
    "sandbox": _sandbox,
    "sandbox_network": _boolean,
    "instructions": _instructions,
    "instructions_file": _path,
    "max_tokens": _positive_int,
    "temperature": _temperature,
    "restricted_paths": _paths,
    "retention_days": _positive_int,
    "compact_at": _share,
    "context_windows": _windows,
    "prices": _prices,
    "openai": _PROVIDER_KEYS,
    "anthropic": _PROVIDER_KEYS,
    "http": {"listen": _address},
    "store": _store,
    "fleet": {"lease": _lease},
    "telegram": _BOT_KEYS,
    "discord": _BOT_KEYS,
    "timeouts": _TIMEOUT_KEYS,
    "mcp": {"servers": _mcp_servers},
}


@record
class ConfigFile:
    """A configuration file read and checked: its values by dotted key, and their lines."""

    path: Path
    values: Mapping[str, Any] = attrs.field(factory=dict)
    lines: Mapping[str, int] = attrs.field(factory=dict)

    def get(self, key: str) -> Value[Any] | None:
        """The file's value of `key` (dotted, ``"openai.base_url"``), or None."""
        if key not in self.values:
            return None
        return Value(self.values[key], self.source(key))

    def source(self, key: str) -> Source:
        """``file PATH:LINE`` for `key` (the line of its table when the key's own is not found)."""
        line = self.lines.get(key)
        return Source(SourceKind.FILE, f"{self.path}:{line}" if line else str(self.path))


def read_config_file(path: Path) -> ConfigFile:
    """Read and check the file at `path`; raise `ConfigError` naming the file, line and key."""
    try:
        text = path.read_text("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text; a configuration file is TOML") from None
    except OSError as exc:
        raise ConfigError(f"cannot read the configuration file {path}: {exc.strerror}") from None
    return parse_config(text, path)


_TOML_POSITION = re.compile(r"\(at line (\d+), column \d+\)")


def parse_config(text: str, path: Path) -> ConfigFile:
    """Check the TOML `text` of the file `path` (see `read_config_file`)."""
    import tomllib  # only when there is a file to read

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        found = _TOML_POSITION.search(message)
        line = int(found.group(1)) if found else len(text.splitlines()) or 1
        reason = _TOML_POSITION.sub("", message).replace("(at end of document)", "").strip()
        raise ConfigError(f"{path}:{line}: not valid TOML: {reason}") from None
    values: dict[str, Any] = {}
    lines: dict[str, int] = {}

    def fail(parts: tuple[str, ...], problem: str) -> ConfigError:
        line = find_line(text, parts)
        where = f"{path}:{line}" if line else str(path)
        return ConfigError(f"{where}: {'.'.join(parts)}: {problem}")

    def walk(table: Mapping[str, Any], spec: Mapping[str, Any], prefix: tuple[str, ...]) -> None:
        for key, raw in table.items():
            parts = (*prefix, key)
            check = spec.get(key)
            if check is None:
                known = list(spec)
                import difflib  # only for a key that is not known

                close = difflib.get_close_matches(key, known, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                place = f"the [{'.'.join(prefix)}] table" if prefix else "the file"
                raise fail(parts, f"unknown key{hint} (keys of {place}: {', '.join(known)})")
            if isinstance(check, dict):
                if not isinstance(raw, dict):
                    raise fail(parts, f"must be a table ([{'.'.join(parts)}]), not {_toml(raw)}")
                walk(raw, check, parts)
                continue
            try:
                value = check(raw)
            except TypeError as exc:
                raise fail(parts, f"must be {exc}, not {_toml(raw)}") from None
            except ValueError as exc:
                raise fail(parts, str(exc)) from None
            dotted = ".".join(parts)
            values[dotted] = value
            line = find_line(text, parts)
            if line:
                lines[dotted] = line
            if isinstance(value, dict):
                for name in value:
                    inner = find_line(text, (*parts, name))
                    if inner:
                        lines[f"{dotted}.{name}"] = inner

    walk(data, FILE_KEYS, ())
    return ConfigFile(path, values, lines)


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "a list"
    return str(value)


_HEADER = re.compile(r"^\[\[?\s*(.+?)\s*\]\]?$")
_KEY = re.compile(
    r"""^((?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*')(?:\s*\.\s*(?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*'))*)\s*="""
)


def find_line(text: str, parts: Sequence[str]) -> int | None:
    """The line where the dotted key `parts` is set in the TOML `text`, or None.

    `tomllib` tells no positions of keys, so the text is scanned: table headers
    (``[openai]``), plain and dotted keys (``openai.base_url = ...``). A key set
    inside an inline table or a multi-line value gives the line that opens it.
    """
    table: tuple[str, ...] = ()
    best: int | None = None
    target = tuple(parts)
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        header = _HEADER.match(line.split("#", 1)[0].strip()) if line.startswith("[") else None
        if header is not None:
            table = _split_dotted(header.group(1))
            if table == target:
                return number
            continue
        key = _KEY.match(line)
        if key is None:
            continue
        path = (*table, *_split_dotted(key.group(1)))
        if path == target:
            return number
        if best is None and target[: len(path)] == path:
            best = number  # the table (inline, or a dotted prefix) that holds the key
    return best


def _split_dotted(text: str) -> tuple[str, ...]:
    parts = re.findall(r"""[A-Za-z0-9_-]+|"[^"]*"|'[^']*'""", text)
    return tuple(p[1:-1] if p[:1] in "\"'" else p for p in parts)


# -- the settings ---------------------------------------------------------------------


@record
class ProviderSettings:
    """How to reach one provider's models: base URL, which key, the key, extra headers."""

    name: str
    base_url: Value[str]
    api_key_env: Value[str]
    api_key: Value[str | None]
    headers: Mapping[str, Value[str]] = attrs.field(factory=dict)

    @property
    def hosted(self) -> bool:
        """Whether requests go to the provider's hosted API (which needs a key)."""
        return self.base_url.value.rstrip("/") == HOSTED_URLS[self.name]


@record
class BotSettings:
    """One chat service: whether the daemon runs its bot, who may use it, its token."""

    service: str
    enabled: Value[bool]
    allow: Value[tuple[str, ...]]
    token_env: Value[str]
    token: Value[str | None]


@record
class Settings:
    """The effective configuration of one command, every value with its `Source`."""

    config: Value[Path]
    #: Whether the configuration file exists (a missing default file is no error).
    config_found: bool
    state_dir: Value[Path]
    model: Value[str]
    approval: Value[Approval]
    max_tokens: Value[int | None]
    temperature: Value[float | None]
    restricted_paths: Value[tuple[Path, ...]]
    #: Days a finished session is kept after its last message; None keeps it for ever.
    retention_days: Value[int | None]
    providers: Mapping[str, ProviderSettings]
    http: Value[tuple[str, int] | None]
    bots: Mapping[str, BotSettings]
    #: The task store: None for ``tasks.db`` in the state dir, else a URL or a file.
    store: Value[str | None] = Value(None)
    #: Seconds a fleet member's lease lasts (PostgreSQL stores only).
    lease: Value[float] = Value(DEFAULT_LEASE)
    #: agentrt's own configuration (its folder, the file in use): a tool that would change
    #: it is asked about under every approval policy.
    guarded_paths: tuple[Path, ...] = ()
    #: How tool processes are confined; ``off`` only by an explicit flag, variable or file.
    sandbox: Value[SandboxMode] = Value(SandboxMode.WORKSPACE_WRITE)
    #: Network for tool calls that run unasked (``full-auto``) too.
    sandbox_network: Value[bool] = Value(False)
    #: The models a person may switch a session to, besides `model` (the ``models`` list).
    models: Value[tuple[str, ...]] = Value(())
    #: How long each kind of question waits, and what happens then (the ``[timeouts]`` table).
    timeouts: Timeouts = Timeouts()
    #: The ``[timeouts]`` keys' values and sources, as ``config show`` lists them.
    timeout_values: Mapping[str, Value[Any]] = attrs.field(factory=dict)
    #: Words for the model, sent in the system prompt of every run.
    instructions: Value[str | None] = Value(None)
    #: A file whose text is sent after `instructions`, read again at the start of each run.
    instructions_file: Value[Path | None] = Value(None)
    #: The MCP servers whose tools every model is offered (``[mcp.servers.NAME]``).
    mcp_servers: Mapping[str, McpServerConfig] = attrs.field(factory=dict)
    #: The share of a model's context window a request may fill before the conversation
    #: is compacted, and the windows of models beyond the known families (by model spec).
    compact_at: Value[float] = Value(0.85)
    context_windows: Value[dict[str, int]] = attrs.field(factory=lambda: Value({}))
    #: Prices of models beyond the defaults (`agentrt.config.prices`), by model spec.
    prices: Value[dict[str, Price]] = attrs.field(factory=lambda: Value({}))

    @property
    def provider(self) -> ProviderSettings | None:
        """The settings of the model's provider; None for the scripted and replay models."""
        name = provider_of(self.model.value)
        return self.providers[name] if name is not None else None

    @property
    def model_list(self) -> tuple[str, ...]:
        """The models a session may use: the default (`model`) first, then the ``models`` list."""
        return tuple(dict.fromkeys((self.model.value, *self.models.value)))

    def check_model(self) -> str:
        """The model spec, checked; `ConfigError` naming its source if it has no known form.

        For the process that runs the model (a command working on its own, the
        daemon): `load_settings` checks a model from a flag or the file at once,
        but one from ``AGENTRT_MODEL`` only here.
        """
        return str(_checked(self.model, _model).value)

    def items(self) -> Iterator[tuple[str, Value[Any]]]:
        """Every setting by its key in the file (``openai.base_url``), in a stable order."""
        yield "config", self.config
        yield "state_dir", self.state_dir
        yield (
            "store",
            attrs.evolve(
                self.store,
                value=None if self.store.value is None else shown_store(self.store.value),
            ),
        )
        yield "fleet.lease", self.lease
        yield "model", self.model
        yield "models", self.models
        yield "approval", self.approval
        yield "sandbox", self.sandbox
        yield "sandbox_network", self.sandbox_network
        yield "instructions", self.instructions
        yield "instructions_file", self.instructions_file
        yield "max_tokens", self.max_tokens
        yield "temperature", self.temperature
        yield "restricted_paths", self.restricted_paths
        yield "retention_days", self.retention_days
        yield "compact_at", self.compact_at
        yield "context_windows", self.context_windows
        yield "prices", self.prices
        for name, provider in self.providers.items():
            yield f"{name}.base_url", provider.base_url
            yield f"{name}.api_key_env", provider.api_key_env
            yield f"{name}.api_key", provider.api_key
            for header, value in provider.headers.items():
                yield f"{name}.headers.{header}", value
        yield "http.listen", self.http
        for service, bot in self.bots.items():
            yield f"{service}.enabled", bot.enabled
            yield f"{service}.allow", bot.allow
            yield f"{service}.token_env", bot.token_env
            yield f"{service}.token", bot.token
        for kind in TIMEOUT_KINDS:
            for key in (f"timeouts.{kind}", f"timeouts.{kind}_action"):
                yield key, self.timeout_values.get(key) or _timeout_default(key)

    def rows(self) -> list[tuple[str, str, str]]:
        """``(key, value as shown, source)`` for each setting; keys and tokens masked."""
        rows = [(key, value.shown(), str(value.source)) for key, value in self.items()]
        rows = [
            (key, f"{shown} (DANGEROUS: {SANDBOX_OFF_WARNING})", source)
            if key == "sandbox" and self.sandbox.value is SandboxMode.OFF
            else (key, shown, source)
            for key, shown, source in rows
        ]
        rows = [
            (key, _summary(self.instructions.value), source)
            if key == "instructions" and self.instructions.value
            else (key, shown, source)
            for key, shown, source in rows
        ]
        if not self.config_found:
            rows[0] = ("config", f"{self.config.value} (none there)", str(self.config.source))
        return rows

    def as_json(self) -> dict[str, Any]:
        """``{key: {"value", "source", "where"}}``; a key or token has ``"value": null, "set"``."""
        out: dict[str, Any] = {}
        for key, value in self.items():
            entry: dict[str, Any] = {
                "value": value.as_json(),
                "source": value.source.kind.value,
                "where": value.source.where or None,
            }
            if value.secret:
                entry["set"] = value.value is not None
            out[key] = entry
        out["config"]["found"] = self.config_found
        out["sandbox"]["dangerous"] = self.sandbox.value is SandboxMode.OFF
        return out


def _summary(text: str) -> str:
    """Instructions as one short line of the table (``config show --prompt`` shows them whole)."""
    first = " ".join(text.split())
    if len(first) > 28:
        first = first[:25] + "..."
    return f"{first} ({len(text)} characters)"


def load_settings(
    flags: argparse.Namespace | None = None, environ: Mapping[str, str] | None = None
) -> Settings:
    """The effective settings for a command given `flags` (its parsed options).

    The flags read are the shared options' (``config``, ``state_dir``,
    ``model``, ``base_url``, ``api_key_env``, ``approval``, ``retention_days``)
    and the daemon's (``http``, ``telegram``, ``discord``); one left out or
    None is not given.
    Raises `ConfigError` (a ValueError) saying where a bad value came from
    (``AGENTRT_MODEL`` is checked by `Settings.check_model`).
    """
    env = os.environ if environ is None else environ
    args = flags if flags is not None else argparse.Namespace()

    def flag(name: str) -> Any:
        return getattr(args, name, None)

    config = _config_path(flag("config"), env)
    found = config.value.is_file()
    if config.source.kind is not SourceKind.DEFAULT and not found:
        raise ConfigError(f"the configuration file {config.value} ({config.source}) does not exist")
    file = read_config_file(config.value) if found else ConfigFile(config.value)

    def pick(key: str, default: T, *, option: str = "", variable: str = "") -> Value[Any]:
        """The flag's value, else the variable's, else the file's, else `default`."""
        given = flag(option.removeprefix("--").replace("-", "_")) if option else None
        if given is not None and given is not False:
            return Value(given, Source(SourceKind.FLAG, option))
        raw = env.get(variable, "").strip() if variable else ""
        if raw:
            return Value(raw, Source(SourceKind.ENV, variable))
        return file.get(key) or Value(default)

    state_flag = flag("state_dir")
    if state_flag is not None:
        state_dir = Value(Path(state_flag), Source(SourceKind.FLAG, "--state-dir"))
    elif env.get("AGENTRT_STATE_DIR"):
        state_dir = Value(default_state_dir(env), Source(SourceKind.ENV, "AGENTRT_STATE_DIR"))
    else:
        state_dir = Value(default_state_dir(env))
    keys = KeyStore.for_state_dir(state_dir.value)

    model = pick("model", "scripted", option="--model", variable="AGENTRT_MODEL")
    if model.source.kind is SourceKind.FLAG:
        # AGENTRT_MODEL is checked where it is used (`Settings.check_model`): a command
        # that goes through a running daemon runs the daemon's model, whatever it says.
        model = _checked(model, _model)
    approval = _checked(
        pick("approval", Approval.ASK, option="--approval", variable="AGENTRT_APPROVAL"),
        lambda v: v if isinstance(v, Approval) else Approval.parse(v),
    )
    restricted = _restricted(file, env)
    sandbox = _checked(
        pick(
            "sandbox",
            SandboxMode.WORKSPACE_WRITE,
            option="--sandbox",
            variable="AGENTRT_SANDBOX",
        ),
        _sandbox,
    )
    sandbox_network = _checked(
        pick("sandbox_network", False, variable="AGENTRT_SANDBOX_NETWORK"), _flag_text
    )
    retention = _checked(
        pick("retention_days", None, option="--retention-days", variable="AGENTRT_RETENTION_DAYS"),
        _days,
    )
    in_use = provider_of(model.value)
    for option in ("--base-url", "--api-key-env"):
        if flag(option[2:].replace("-", "_")) is not None and in_use is None:
            raise ConfigError(
                f"{option} is for an openai: or anthropic: model; the model is "
                f"{model.value!r} ({model.source})"
            )
    providers = {
        name: _provider(name, file, env, keys, state_dir.value, flag if name == in_use else None)
        for name in PROVIDERS
    }
    timeouts, timeout_values = _timeouts(file)
    return Settings(
        config=config,
        config_found=found,
        state_dir=state_dir,
        model=model,
        approval=approval,
        models=file.get("models") or Value(()),
        max_tokens=file.get("max_tokens") or Value(None),
        temperature=file.get("temperature") or Value(None),
        restricted_paths=restricted,
        retention_days=retention,
        providers=providers,
        http=pick("http.listen", None, option="--http"),
        store=_checked(pick("store", None, option="--store", variable="AGENTRT_STORE"), _store),
        lease=_checked(
            pick("fleet.lease", DEFAULT_LEASE, variable="AGENTRT_FLEET_LEASE"),
            _lease_text,
        ),
        bots={service: _bot(service, file, env, keys, flag(service)) for service in BOTS},
        guarded_paths=tuple(dict.fromkeys((default_config_path(env).parent, config.value))),
        sandbox=sandbox,
        sandbox_network=sandbox_network,
        timeouts=timeouts,
        timeout_values=timeout_values,
        instructions=file.get("instructions") or Value(None),
        instructions_file=_instructions_file(file),
        mcp_servers=(file.get("mcp.servers") or Value({})).value,
        compact_at=file.get("compact_at") or Value(0.85),
        context_windows=file.get("context_windows") or Value({}),
        prices=file.get("prices") or Value({}),
    )


def _instructions_file(file: ConfigFile) -> Value[Path | None]:
    """The file's ``instructions_file``, relative to the file's folder; it must be a file."""
    found = file.get("instructions_file")
    if found is None:
        return Value(None)
    path = found.value if found.value.is_absolute() else file.path.parent / found.value
    if not path.is_file():
        said = "is not a file" if path.exists() else "does not exist"
        raise ConfigError(f"{found.source.where}: instructions_file: {path} {said}")
    return attrs.evolve(found, value=path)


def _timeout_default(key: str) -> Value[Any]:
    return Value(TimeoutAction.WAIT) if key.endswith("_action") else Value(None)


def _timeouts(file: ConfigFile) -> tuple[Timeouts, dict[str, Value[Any]]]:
    """The ``[timeouts]`` table as `Timeouts`, and its keys' values for ``config show``.

    A duration needs an action that acts (``pause`` or ``deny``), and such an
    action needs a duration: either alone is refused naming its key and line.
    """
    found: dict[str, Timeout] = {}
    values: dict[str, Value[Any]] = {}
    for kind in TIMEOUT_KINDS:
        duration = file.get(f"timeouts.{kind}")
        action = file.get(f"timeouts.{kind}_action")
        for key, value in ((f"timeouts.{kind}", duration), (f"timeouts.{kind}_action", action)):
            if value is not None:
                values[key] = value
        acts = action is not None and action.value is not TimeoutAction.WAIT
        if duration is not None and not acts:
            said = 'its "wait" never times out' if action is not None else "unset, it waits"
            raise ConfigError(
                f"{duration.source.where}: timeouts.{kind}: a timeout needs an action: set "
                f'timeouts.{kind}_action to "pause" or "deny" ({said}), or leave '
                f"timeouts.{kind} out to wait for ever"
            )
        if action is not None and acts and duration is None:
            raise ConfigError(
                f"{action.source.where}: timeouts.{kind}_action: {action.value.value!r} needs "
                f'timeouts.{kind}, how long a {kind} waits first (such as "30m")'
            )
        if duration is not None and action is not None:
            found[kind] = Timeout(parse_duration(duration.value), action.value)
    return Timeouts(**found), values


def _checked(value: Value[Any], check: Check) -> Value[Any]:
    """`value` checked (and converted) by `check`; a bad one is refused naming its source."""
    if value.source.kind is SourceKind.FILE or value.source.kind is SourceKind.DEFAULT:
        return value  # checked when the file was read; defaults are good
    try:
        return attrs.evolve(value, value=check(value.value))
    except TypeError as exc:
        raise ConfigError(f"{value.source}: must be {exc}, not {value.value!r}") from None
    except ValueError as exc:
        raise ConfigError(f"{value.source}: {exc}") from None


def _config_path(flagged: Any, env: Mapping[str, str]) -> Value[Path]:
    if flagged is not None:
        return Value(Path(flagged).expanduser(), Source(SourceKind.FLAG, "--config"))
    named = env.get(CONFIG_ENV, "").strip()
    if named:
        return Value(Path(named).expanduser(), Source(SourceKind.ENV, CONFIG_ENV))
    return Value(default_config_path(env))


def _restricted(file: ConfigFile, env: Mapping[str, str]) -> Value[tuple[Path, ...]]:
    raw = env.get("AGENTRT_RESTRICTED")
    if raw is not None:
        # Set but empty means no restricted path at all.
        paths = tuple(Path(p).expanduser() for p in raw.split(":") if p)
        return Value(paths, Source(SourceKind.ENV, "AGENTRT_RESTRICTED"))
    found = file.get("restricted_paths")
    if found is not None:
        return found
    return Value(tuple(Path(p) for p in DEFAULT_RESTRICTED))


#: Variables an official SDK reads for a provider: base URL and key.
_SDK_VARIABLES: Final = {
    "openai": ("OPENAI_BASE_URL", "OPENAI_API_KEY"),
    "anthropic": ("ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY"),
}
#: The OpenAI SDK's variables that become request headers.
_OPENAI_HEADER_VARIABLES: Final = (
    ("OPENAI_ORG_ID", "OpenAI-Organization"),
    ("OPENAI_PROJECT_ID", "OpenAI-Project"),
)


def _provider(
    name: str,
    file: ConfigFile,
    env: Mapping[str, str],
    keys: KeyStore,
    state_dir: Path,
    flag: Callable[[str], Any] | None,
) -> ProviderSettings:
    """A provider's settings; `flag` reads the flags, given only for the model's provider.

    The environment's and the flags' values are checked only for the provider
    in use: a stray variable of the other one does not stop a command.
    """
    url_variable, key_variable = _SDK_VARIABLES[name]
    flagged_url = flag("base_url") if flag is not None else None
    if flagged_url is not None:
        base_url = Value(flagged_url, Source(SourceKind.FLAG, "--base-url"))
    elif env.get(url_variable, "").strip():
        base_url = Value(env[url_variable].strip(), Source(SourceKind.ENV, url_variable))
    else:
        base_url = file.get(f"{name}.base_url") or Value(HOSTED_URLS[name])
    flagged_env = flag("api_key_env") if flag is not None else None
    if flagged_env is not None:
        api_key_env = Value(flagged_env, Source(SourceKind.FLAG, "--api-key-env"))
    else:
        api_key_env = file.get(f"{name}.api_key_env") or Value(key_variable)
    if flag is not None:
        base_url = _checked(base_url, check_base_url)
        api_key_env = _checked(api_key_env, _variable)
    headers: dict[str, Value[str]] = {}
    for header, text in (file.values.get(f"{name}.headers") or {}).items():
        headers[header] = Value(text, file.source(f"{name}.headers.{header}"), _secret(header))
    for header, text, variable in _env_headers(name, env):
        for known in [h for h in headers if h.lower() == header.lower()]:
            del headers[known]  # the environment wins, whatever the spelling of the name
        headers[header] = Value(text, Source(SourceKind.ENV, variable), _secret(header))
    return ProviderSettings(
        name,
        base_url=base_url,
        api_key_env=api_key_env,
        api_key=find_api_key(name, api_key_env.value, state_dir, env),
        headers=headers,
    )


def _env_headers(name: str, env: Mapping[str, str]) -> list[tuple[str, str, str]]:
    """``(header, value, variable)`` of the headers an SDK's variables add."""
    found: list[tuple[str, str, str]] = []
    if name == "openai":
        for variable, header in _OPENAI_HEADER_VARIABLES:
            value = env.get(variable, "").strip()
            if value:
                found.append((header, value, variable))
    else:
        # As the Anthropic SDK reads it: one "Name: value" a line.
        for line in env.get("ANTHROPIC_CUSTOM_HEADERS", "").splitlines():
            header, colon, value = line.partition(":")
            if colon and _HEADER_NAME.match(header.strip()):
                found.append((header.strip(), value.strip(), "ANTHROPIC_CUSTOM_HEADERS"))
    return found


_CREDENTIAL = re.compile(r"auth|key|token|secret|password|cookie|signature|credential", re.I)


def _secret(header: str) -> bool:
    """Whether a header's value is likely a credential (shown masked)."""
    return bool(_CREDENTIAL.search(header))


def find_api_key(
    provider: str, variable: str, state_dir: Path, environ: Mapping[str, str] | None = None
) -> Value[str | None]:
    """The API key of `provider`: the variable, else the key store's key of that name.

    Last, the secret ``openai_api_key`` / ``anthropic_api_key`` of the state
    dir's secret store, where earlier versions kept it. Read afresh at each
    call, so a key stored while a daemon runs is used by its next request.
    """
    kind, value = KeyStore.for_state_dir(state_dir).lookup(variable, environ)
    if kind == "env":
        return Value(value, Source(SourceKind.ENV, variable), secret=True)
    if kind:
        return Value(value, Source(SourceKind.KEY_STORE, variable), secret=True)
    legacy = f"{provider}_api_key"
    try:
        stored = (state_dir / "secrets" / legacy).read_text("utf-8").strip()
    except (OSError, UnicodeDecodeError):
        stored = ""
    if stored:
        return Value(stored, Source(SourceKind.SECRET_STORE, legacy), secret=True)
    return Value(None, secret=True)


def _bot(
    service: str, file: ConfigFile, env: Mapping[str, str], keys: KeyStore, flagged: Any
) -> BotSettings:
    prefix = f"AGENTRT_{service.upper()}"
    if flagged:
        enabled: Value[bool] = Value(True, Source(SourceKind.FLAG, f"--{service}"))
    else:
        enabled = file.get(f"{service}.enabled") or Value(False)
    raw_allow = env.get(f"{prefix}_ALLOW", "")
    if raw_allow.strip():
        ids = tuple(p for p in raw_allow.replace(",", " ").split() if p)
        allow: Value[tuple[str, ...]] = Value(ids, Source(SourceKind.ENV, f"{prefix}_ALLOW"))
    else:
        allow = file.get(f"{service}.allow") or Value(())
    token_env = file.get(f"{service}.token_env") or Value(f"{prefix}_TOKEN")
    kind, value = keys.lookup(token_env.value, env)
    token: Value[str | None]
    if kind == "env":
        token = Value(value, Source(SourceKind.ENV, token_env.value), secret=True)
    elif kind:
        token = Value(value, Source(SourceKind.KEY_STORE, token_env.value), secret=True)
    else:
        token = Value(None, secret=True)
    return BotSettings(service, enabled, allow, token_env, token)


# -- what the settings give the rest ---------------------------------------------------


def model_options(settings: Settings, spec: str | None = None) -> ModelOptions:
    """The options of the settings' model (or of `spec`, one of `Settings.model_list`) for
    `agentrt.providers`: the one place the configuration turns into what a provider is
    built with."""
    from ..models.options import ModelOptions

    name = provider_of(spec) if spec is not None else None
    provider = settings.providers[name] if name is not None else None
    if spec is None:
        provider = settings.provider
    if provider is None:
        return ModelOptions(
            max_tokens=settings.max_tokens.value, temperature=settings.temperature.value
        )
    return ModelOptions(
        base_url=provider.base_url.value,
        api_key_env=provider.api_key_env.value,
        headers={name: value.value for name, value in provider.headers.items()},
        max_tokens=settings.max_tokens.value,
        temperature=settings.temperature.value,
    )


def bot_environ(settings: Settings, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment the bots read (`agentrt.bots.run_bots`), with the settings filled in.

    Each bot's token (from its ``token_env`` variable or the key store) and its
    allow-list (from the environment or the file) are put under the names the
    bots read: ``AGENTRT_TELEGRAM_TOKEN``, ``AGENTRT_TELEGRAM_ALLOW`` and so on.
    """
    env = dict(os.environ if environ is None else environ)
    for service, bot in settings.bots.items():
        prefix = f"AGENTRT_{service.upper()}"
        if bot.token.value is not None:
            env[f"{prefix}_TOKEN"] = bot.token.value
        else:
            env.pop(f"{prefix}_TOKEN", None)
        env[f"{prefix}_ALLOW"] = " ".join(bot.allow.value)
    return env

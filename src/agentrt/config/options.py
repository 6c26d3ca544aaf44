"""The command-line options `agentrt`, `agentrt daemon` and `agenttui` share, defined once.

Each command builds its parser with ``parents=[shared_options(...)]``, naming
the options it takes. Every option defaults to None, so a command can tell an
option given from one left out (and fall back on the environment, or on the
daemon that holds the state dir).

argparse rather than click: the commands are argparse parsers already, with
their exit status 2 for a usage error and their help texts pinned by tests,
and ``agentrt`` hands ``daemon``, ``token`` and ``lab`` on to their own
parsers. An argparse parent parser shares the definitions without a new
dependency or a second way of writing a command.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any
from typing import Final

STATE_DIR: Final = "--state-dir"
MODEL: Final = "--model"
BASE_URL: Final = "--base-url"
SOCKET: Final = "--socket"
WORKDIR: Final = "--workdir"
CONFIG: Final = "--config"
API_KEY_ENV: Final = "--api-key-env"
APPROVAL: Final = "--approval"
SANDBOX: Final = "--sandbox"
RETENTION_DAYS: Final = "--retention-days"
STORE: Final = "--store"

#: The options that say which model a command runs and how to reach it: every command that
#: runs tasks (or starts a daemon that does) takes all of them.
MODEL_OPTIONS: Final = (CONFIG, MODEL, BASE_URL, API_KEY_ENV, APPROVAL, SANDBOX)

_OPTIONS: dict[str, dict[str, Any]] = {
    STATE_DIR: {
        "metavar": "DIR",
        "type": Path,
        "help": "the state folder: pending tasks, secrets, keys, the HTTP token, the "
        "terminal's input history (env AGENTRT_STATE_DIR; default $XDG_STATE_HOME/agentrt, "
        "else ~/.local/state/agentrt)",
    },
    MODEL: {
        "metavar": "SPEC",
        "help": "the model: 'scripted' (default, offline), 'replay:PATH', 'openai:NAME' "
        "(OpenAI or any OpenAI-compatible server: Ollama, vLLM, llama.cpp, LM Studio) "
        "or 'anthropic:NAME' (env AGENTRT_MODEL; config file: model)",
    },
    BASE_URL: {
        "metavar": "URL",
        "help": "the API base URL of an openai: or anthropic: model, e.g. "
        "http://localhost:11434/v1 for Ollama (env OPENAI_BASE_URL or ANTHROPIC_BASE_URL; "
        "config file: [openai] or [anthropic] base_url)",
    },
    CONFIG: {
        "metavar": "PATH",
        "type": Path,
        "help": "the configuration file (env AGENTRT_CONFIG; default "
        "$XDG_CONFIG_HOME/agentrt/config.toml, else ~/.config/agentrt/config.toml); "
        "'agentrt config show' prints what is in effect and where each value came from",
    },
    API_KEY_ENV: {
        "metavar": "NAME",
        "help": "the environment variable holding the model's API key, also looked up in "
        "'agentrt keys' (default OPENAI_API_KEY or ANTHROPIC_API_KEY; config file: "
        "[openai] or [anthropic] api_key_env)",
    },
    APPROVAL: {
        "metavar": "POLICY",
        "choices": ("ask", "auto-edit", "full-auto"),
        "help": "which tool calls run without a confirmation: 'ask' (default: every file "
        "write and command), 'auto-edit' (file writes in the working folder run at once) or "
        "'full-auto' (writes and commands run at once); restricted paths always need the "
        "system password (env AGENTRT_APPROVAL; config file: approval)",
    },
    SANDBOX: {
        "metavar": "MODE",
        "choices": ("workspace-write", "off"),
        "help": "how tool processes are confined: 'workspace-write' (default, under every "
        "approval policy: only the working folder and a private /tmp are writable, agentrt's "
        "own files are hidden, restricted paths are read-only) or 'off' (DANGEROUS: tools run "
        "with your full access; refused for chat and web sessions) (env AGENTRT_SANDBOX; "
        "config file: sandbox; see docs/security.md)",
    },
    RETENTION_DAYS: {
        "metavar": "DAYS",
        "type": int,
        "help": "delete a finished session (its messages) DAYS days after its last message; "
        "a session with a pending task is never deleted (env AGENTRT_RETENTION_DAYS; config "
        "file: retention_days; default: keep every session)",
    },
    STORE: {
        "metavar": "URL",
        "help": "the task store: a postgresql://USER@HOST:PORT/DB URL for a fleet of daemons "
        "sharing one database (see docs/fleet.md), or an SQLite file (env AGENTRT_STORE; "
        "config file: store; default: tasks.db in the state folder)",
    },
    SOCKET: {
        "metavar": "PATH",
        "type": Path,
        "help": "the daemon's Unix socket (env AGENTRT_SOCKET; default "
        "$XDG_RUNTIME_DIR/agentrt/daemon.sock, else /tmp/agentrt-UID/daemon.sock)",
    },
    WORKDIR: {
        "metavar": "DIR",
        "type": Path,
        "help": "the folder the tools work in (default: the current folder)",
    },
}


def shared_options(*flags: str, notes: dict[str, str] | None = None) -> argparse.ArgumentParser:
    """A parent parser holding the shared options `flags` (`STATE_DIR`, `MODEL`, ...).

    `notes` adds a command's own words to an option's help, by flag.
    """
    parser = argparse.ArgumentParser(add_help=False)
    for flag in flags:
        spec = dict(_OPTIONS[flag])
        note = (notes or {}).get(flag)
        if note:
            spec["help"] = f"{spec['help']}; {note}"
        parser.add_argument(flag, default=None, **spec)
    return parser

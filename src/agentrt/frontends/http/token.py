"""The HTTP API's bearer token: made on first start, kept 0600 in the state dir."""

from __future__ import annotations

import argparse
import os
import secrets
import sys
from pathlib import Path

from ...config.options import STATE_DIR
from ...config.options import shared_options
from ...config.secrets import note_written
from ...config.statedir import StateDirError
from ...config.statedir import fsync_dir
from ...config.statedir import prepare_state_dir
from ...config.statedir import write_synced
from ...vocab.locations import HTTP_TOKEN_FILE
from ...vocab.locations import StrPath
from ...vocab.locations import default_state_dir

#: The token's file name inside the state dir.
TOKEN_FILE = HTTP_TOKEN_FILE
_MIN_LENGTH = 32


def load_or_create_token(state_dir: StrPath) -> str:
    """The HTTP token stored in `state_dir`, made (mode 0600) if there is none yet.

    Two processes starting at once agree on one token: the file is written
    under a temporary name and linked into place, so the loser reads the
    winner's token. A file with a token too short to be one is replaced.
    """
    state_dir = prepare_state_dir(Path(state_dir))
    path = state_dir / TOKEN_FILE
    existing = _read(path)
    if existing is not None:
        return existing
    token = secrets.token_urlsafe(32)
    tmp = state_dir / f".{TOKEN_FILE}.{os.getpid()}.{secrets.token_hex(4)}"
    write_synced(tmp, (token + "\n").encode("ascii"), os.O_EXCL)
    try:
        if path.exists():  # present but unusable: replace it
            os.replace(tmp, path)
            return token
        try:
            os.link(tmp, path)
        except FileExistsError:
            raced = _read(path)
            if raced is not None:
                return raced
            os.replace(tmp, path)
        return token
    finally:
        tmp.unlink(missing_ok=True)
        note_written()  # a token now in place (ours or the winner's) is a secret to redact
        # The new name (and the temporary one's removal) must survive a power cut.
        fsync_dir(state_dir)


def _read(path: Path) -> str | None:
    try:
        token = path.read_text("ascii").strip()
    except FileNotFoundError:
        return None
    except (UnicodeDecodeError, ValueError):
        return None
    if len(token) < _MIN_LENGTH:
        return None
    if path.stat().st_mode & 0o077:
        path.chmod(0o600)  # someone loosened it; the token is a password
    return token


def token_main(argv: list[str]) -> int:
    """`agentrt token`: print the HTTP API's bearer token, making it on first use."""
    parser = argparse.ArgumentParser(
        prog="agentrt token",
        description="Print the bearer token of the HTTP API and web chat (made on first use).",
        parents=[shared_options(STATE_DIR)],
    )
    args = parser.parse_args(argv)
    state_dir: Path = args.state_dir if args.state_dir is not None else default_state_dir()
    try:
        token = load_or_create_token(state_dir)
    except StateDirError as exc:
        print(f"agentrt token: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"agentrt token: cannot use {state_dir}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    print(token)
    return 0

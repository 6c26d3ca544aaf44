"""The state directory: who may use it, and durable renames inside it.

The state dir holds the task store, the secrets and the HTTP token, so it is
the owner's alone (mode 0700).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


class StateDirError(Exception):
    """The state dir cannot be used safely; the message says what to change."""


def fsync_dir(folder: Path) -> None:
    """Make a rename or a new file in `folder` durable: the name lives in the folder."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def prepare_state_dir(path: Path, *, uid: int | None = None) -> Path:
    """Make sure the state dir exists, belongs to `uid` and only its owner can enter it.

    A missing folder is created mode 0700. An existing one that others may
    enter is tightened to 0700. Raises `StateDirError` when it is not a folder
    or belongs to another user (it is then left alone).
    """
    uid = os.getuid() if uid is None else uid
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = os.stat(path)
    except OSError as exc:
        raise StateDirError(
            f"cannot use the state dir {path}: {exc.strerror or exc}; "
            "pass --state-dir (or set AGENTRT_STATE_DIR) to a folder of your own"
        ) from None
    if not stat.S_ISDIR(info.st_mode):
        raise StateDirError(
            f"the state dir {path} is not a folder; move it away, or pass --state-dir "
            "(or set AGENTRT_STATE_DIR) to a folder of your own"
        )
    if info.st_uid != uid:
        raise StateDirError(
            f"the state dir {path} belongs to uid {info.st_uid}, not to you (uid {uid}); "
            "pass --state-dir (or set AGENTRT_STATE_DIR) to a folder of your own"
        )
    if stat.S_IMODE(info.st_mode) & 0o077:
        os.chmod(path, 0o700)
    return path

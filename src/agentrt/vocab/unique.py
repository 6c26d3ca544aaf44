"""Unpredictable identifiers, drawn without a system call each.

A task's hash is drawn at every run's start and a question's id at every
question, on the event loop's thread. Drawn from the OS (`os.urandom`), each
is a system call during which Python lets its other threads run: the store's
threads, busy with the write that came just before, then hold the
interpreter until they let it go again, and the run waits for them. In the
pause -> resume cycle that was ~40 us of ~850 (a resume's hash is drawn while
the pause's write is under way).

`random_hex` is BLAKE2b keyed with 32 bytes drawn from the OS once per
process, of the process id and a counter: as unpredictable as the OS's bytes
to anyone without the key (keyed BLAKE2 is a pseudorandom function), distinct
in a forked child (another process id), ~1 us, and no system call.
"""

from __future__ import annotations

import hashlib
import itertools
import os
from typing import Final

#: The key of this process's identifiers, drawn once.
_KEY: Final = os.urandom(32)
#: How many identifiers this process has drawn (`next` on it is atomic under the GIL).
_drawn = itertools.count()


def random_hex(size: int) -> str:
    """`size` random bytes (at most 64) as ``2 * size`` hex digits, as ``os.urandom(size).hex()``."""
    message = f"{os.getpid()}:{next(_drawn)}".encode("ascii")
    return hashlib.blake2b(message, key=_KEY, digest_size=size).hexdigest()

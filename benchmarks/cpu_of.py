"""``python cpu_of.py OUT INPUT COMMAND...``: run COMMAND, then write its CPU time to OUT.

The command reads the file INPUT as its standard input and writes to this
process's standard output and error (a terminal). Once it has exited, its user
and system CPU seconds (from `os.wait4`) are written to OUT as one number. The
exit status is the command's.
"""

from __future__ import annotations

import os
import sys


def main() -> int:
    """Run the command, record its CPU time, return its exit status."""
    out, given, command = sys.argv[1], sys.argv[2], sys.argv[3:]
    pid = os.fork()
    if pid == 0:  # pragma: no cover - replaced by the command
        try:
            os.dup2(os.open(given, os.O_RDONLY), 0)
            os.execvp(command[0], command)
        finally:
            os._exit(127)
    _, status, usage = os.wait4(pid, 0)
    with open(out, "w") as file:
        file.write(f"{usage.ru_utime + usage.ru_stime}\n")
    return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(main())

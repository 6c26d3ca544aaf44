"""``python -m benchmarks`` (``make bench``): every benchmark, printed as a report.

The exit status is 0 even when a target is missed: the table is a report, and
each MISS is printed plainly. It is 1 only when a benchmark could not run.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import traceback

from . import bench_core

#: Optional benchmark modules run after the core ones when they exist, each through its `main()`.
OPTIONAL = ("benchmarks.bench_providers",)


def _run_optional(module_name: str) -> bool:
    """Import and run one optional benchmark module; False if it crashed."""
    if importlib.util.find_spec(module_name) is None:
        print(f"\n({module_name} is not present; skipped)")
        return True
    print(f"\n== {module_name} ==")
    try:
        module = importlib.import_module(module_name)
        entry = getattr(module, "main", None)
        if callable(entry):
            entry()
    except Exception:
        traceback.print_exc()
        print(f"{module_name} failed to run")
        return False
    return True


def main() -> int:
    """Run the core benchmarks, then the optional ones; return the exit status."""
    print("== core runtime: each figure against a baseline measured in the same run ==")
    results = bench_core.main()
    missed = [r.name for r in results if not r.passed]
    if missed:
        print(f"MISSED: {', '.join(missed)} (see the notes above; this is a report, not a failure)")
    else:
        print("all core targets met")
    ok = all([_run_optional(name) for name in OPTIONAL])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""The embedding guide's example runs as documented."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).parent.parent / "examples" / "embed.py"


def test_the_embedding_example_pauses_resumes_and_answers() -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLE)], capture_output=True, text=True, timeout=60, check=True
    )
    out = done.stdout
    assert (
        out.splitlines()[-1] == "outcomes: ['cancelled', 'finished', 'awaiting_answer', 'finished']"
    )
    assert "[kept] interrupted, still to run: ['sleep']" in out
    assert out.count("[allow]") == 1  # the committed write was not confirmed or run again
    assert "You answered: Ada" in out

"""The status line: the link, the run's state, task hash and elapsed time, the tokens."""

from __future__ import annotations

from agentrt.vocab.usage import cost_words

from ._state import TuiState
from ._words import short_path

SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"


def _link_text(state: TuiState, now: float) -> str:
    if state.starting_daemon:
        return "starting the daemon…"
    if state.link_error is None:
        return "connecting…"
    lost = "lost the daemon" if state.was_connected else "no daemon"
    doing = "reconnecting"
    if state.gave_up:
        lost, doing = "no daemon, not starting one (see above)", "looking again"
    if state.retry_at is not None and state.retry_at > now:
        return f"{lost}: {doing} in {state.retry_at - now:.0f}s"
    return f"{lost}: {doing}…"


def status_text(state: TuiState, now: float) -> str:
    """The status line: the link, the run's state, task hash and elapsed time, the tokens."""
    parts: list[str] = []
    run = state.run
    if not state.connected:
        parts.append(_link_text(state, now))
    elif run is None:
        parts.append("idle")
        if state.session:
            parts.append(f"session {state.session}")
    else:
        elapsed = max(0.0, now - run.started_at)
        spin = SPINNER[int(elapsed * 10) % len(SPINNER)]
        label = run.phase.value
        if state.ask is not None:
            label = "waiting for your answer"
        parts.append(f"{spin} {label}")
        parts.append(f"task {run.task[:12]}" if run.task else "task ...")
        parts.append(f"{elapsed:.1f}s")
    if state.connected and state.model:
        parts.append(f"model {state.model}")
    if state.cwd:
        parts.append(f"in {short_path(state.cwd)}")
    if state.input_tokens or state.output_tokens:
        cached = f" ({state.cached_tokens} cached)" if state.cached_tokens else ""
        reasoning = f" ({state.reasoning_tokens} reasoning)" if state.reasoning_tokens else ""
        cost = f" {cost_words(state.cost)}" if state.cost is not None else ""
        parts.append(
            f"tokens in {state.input_tokens}{cached} / out {state.output_tokens}{reasoning}{cost}"
        )
    if state.can_restore_input:
        parts.append("Esc brings back the cleared text")
    return "  |  ".join(parts)

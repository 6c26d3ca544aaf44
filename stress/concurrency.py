"""Concurrency: two runners reach for one task at once; the task must run once.

Two races, each repeated (``--races`` times, 100 by default) on tasks that
wait for a shell call's confirmation (so resuming one runs ``echo MARKER >>
counter`` exactly when a runner takes it):

* **two resumes**: two ``agentrt pending resume SESSION`` processes start
  together on one state directory and both answer the confirmation.
* **two daemons**: two daemons start together on one state directory (each
  on its own socket); if both come up, a window on each resumes the same
  task at the same moment and answers the confirmation.

A race is correct when the task ran once: one runner ran it and the other
refused (the session is busy, the task is gone, the state directory is in
use: a second daemon may refuse to start at all). It is a *double run* when
the marker ran twice (or both runners started it), and a failure. A runner
that fails without a clear one-line error (a traceback, a timeout) is a
failure too. Races where neither runner took the task are counted and shown.
"""

from __future__ import annotations

import json
import os
import random
import re
import time
from pathlib import Path

import attrs
import trio

from agentrt.core.runtime import open_runtime
from agentrt.models.scripted import ScriptedModel
from agentrt.protocol.client import BrokenDaemonConnectionError
from agentrt.protocol.client import Client
from agentrt.protocol.client import ClosedClientError
from agentrt.protocol.frames import AnswerFrame
from agentrt.protocol.frames import AskFrame
from agentrt.protocol.frames import EndedFrame
from agentrt.protocol.frames import ErrorFrame
from agentrt.protocol.frames import PendingAction
from agentrt.protocol.frames import PendingRequest
from agentrt.protocol.frames import TaskFrame

from ._common import STEP_TIMEOUT
from ._common import DaemonProcess
from ._common import SuiteResult
from ._common import describe_failure
from ._common import python
from ._common import short_tempdir

_COUNTER = "counter"


@attrs.define
class _Outcomes:
    """What each race came to, by kind."""

    counts: dict[str, int] = attrs.field(factory=dict)
    #: How the losing runner refused, by its message's gist.
    refusals: dict[str, int] = attrs.field(factory=dict)

    def add(self, outcome: str) -> None:
        self.counts[outcome] = self.counts.get(outcome, 0) + 1

    def refused(self, message: str) -> None:
        # One entry per kind of refusal, whatever the session or the pid.
        gist = re.sub(r"\d+", "N", re.sub(r"cli-\S+", "SESSION", " ".join(message.split())))
        self.refusals[gist[:90]] = self.refusals.get(gist[:90], 0) + 1


def _runs_of(workdir: Path, marker: str) -> int:
    try:
        return (workdir / _COUNTER).read_text().split().count(marker)
    except FileNotFoundError:
        return 0


async def _park_tasks(state_dir: Path, workdir: Path, sessions: list[str]) -> None:
    """Give each session a pending task that waits for its shell call's confirmation."""

    async def ignore(event: object) -> None:
        await trio.lowlevel.checkpoint()

    async with open_runtime(
        state_dir, model=ScriptedModel(word_delay=0, stream_delay=0), workdir=workdir
    ) as runtime:
        for session in sessions:
            # Nobody listens, so the confirmation is saved with the task and the run ends.
            ended = await runtime.executor.run(
                session, f"sh echo {session} >> {_COUNTER}", owner="setup", emit=ignore
            )
            if ended.question is None:
                raise RuntimeError(f"{session} did not park on its confirmation: {ended}")


def _environment(root: Path) -> dict[str, str]:
    """Everything the runners need, pointing at this suite's folders and nothing else."""
    return {
        **os.environ,
        "AGENTRT_STATE_DIR": os.fspath(root / "state"),
        "AGENTRT_SOCKET": os.fspath(root / "s" / "none.sock"),
        "XDG_RUNTIME_DIR": os.fspath(root / "xdg"),
        "AGENTRT_RESTRICTED": os.fspath(root / "restricted"),
    }


# -- two resumes ----------------------------------------------------------------------


def _frame_type(line: str) -> str | None:
    """The ``type`` of a JSON line the command printed, or None."""
    try:
        data = json.loads(line)
    except ValueError:
        return None
    return data.get("type") if isinstance(data, dict) else None


async def _cli_resume(root: Path, session: str) -> tuple[bool, str]:
    """``agentrt pending resume SESSION``, answering "y": (it started the task, how it ended)."""
    process = await trio.run_process(
        [python(), "-m", "agentrt", "pending", "resume", session, "--json"],
        stdin=b"y\n",
        capture_stdout=True,
        capture_stderr=True,
        check=False,
        cwd=root / "work",
        env=_environment(root),
    )
    out = process.stdout.decode("utf-8", "replace")
    err = process.stderr.decode("utf-8", "replace")
    started = any(_frame_type(line) == "task" for line in out.splitlines())
    if "Traceback" in err:
        return started, f"crashed (exit {process.returncode}): {err[-600:]}"
    if started:
        return True, f"ran (exit {process.returncode})"
    message = err.strip().splitlines()[-1] if err.strip() else f"exit {process.returncode}"
    return False, f"refused: {message}"


async def _race_resumes(
    root: Path, session: str, result: SuiteResult, outcomes: _Outcomes, replay: str
) -> None:
    ends: list[tuple[bool, str]] = []

    async def one() -> None:
        ends.append(await _cli_resume(root, session))

    with trio.move_on_after(STEP_TIMEOUT * 2) as timeout:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(one)
            nursery.start_soon(one)
    if timeout.cancelled_caught:
        result.fail(f"two resumes of {session}: still running after {STEP_TIMEOUT * 2:g}s {replay}")
        return
    _judge(
        f"two resumes of {session}",
        [started for started, _ in ends],
        [how for _, how in ends],
        _runs_of(root / "work", session),
        result,
        outcomes,
        replay,
    )


def _judge(
    race: str,
    started: list[bool],
    hows: list[str],
    runs: int,
    result: SuiteResult,
    outcomes: _Outcomes,
    replay: str,
) -> None:
    """Count one race: once, a double run, neither, or an unclear failure."""
    for how in hows:
        if how.startswith("refused: "):
            outcomes.refused(how.removeprefix("refused: "))
    unclear = [h for h in hows if not h.startswith(("ran", "refused: "))]
    if runs > 1 or sum(started) > 1:
        outcomes.add("double run")
        result.fail(f"{race}: the task ran {runs} times ({'; '.join(hows)}) {replay}")
    elif unclear:
        outcomes.add("unclear")
        result.fail(f"{race}: {'; '.join(unclear)} {replay}")
    elif runs == 1:
        outcomes.add("once")
    else:
        outcomes.add("neither ran")


# -- two daemons ----------------------------------------------------------------------


async def _window_resume(socket_path: Path, session: str) -> tuple[bool, str]:
    """Resume `session` from a new window, allowing its confirmation: (started, how it ended)."""
    started = False
    try:
        async with await Client.connect(socket_path) as client:
            await client.send(PendingRequest(PendingAction.RESUME, session=session))
            while True:
                frame = await client.receive()
                if isinstance(frame, TaskFrame):
                    started = True
                elif isinstance(frame, AskFrame):
                    await client.send(AnswerFrame(frame.id, "allow"))
                elif isinstance(frame, ErrorFrame):
                    return started, f"refused: {frame.message}"
                elif isinstance(frame, EndedFrame):
                    return started, f"ran ({frame.outcome.value})"
    except (BrokenDaemonConnectionError, ClosedClientError) as exc:
        return started, f"connection lost: {exc}"


async def _race_daemons(
    root: Path,
    session: str,
    index: int,
    result: SuiteResult,
    outcomes: _Outcomes,
    replay: str,
) -> None:
    env = _environment(root)
    daemons = [
        DaemonProcess(
            root / "s" / f"d{index}{side}.sock",
            root / "state",
            root / "work",
            root / f"daemon-{index}{side}.log",
            env=env,
        )
        for side in "ab"
    ]
    up: list[DaemonProcess] = []
    refusals: list[str] = []
    async with trio.open_nursery() as nursery:

        async def start(daemon: DaemonProcess) -> None:
            try:
                await daemon.start(nursery)
            except RuntimeError:  # it exited instead of listening: what it said last
                lines = daemon.log_text().strip().splitlines()
                refusals.append(lines[-1] if lines else "exited without a word")
            except Exception as exc:
                refusals.append(f"Traceback: {describe_failure(exc)}")
            else:
                up.append(daemon)

        try:
            async with trio.open_nursery() as starting:
                for daemon in daemons:
                    starting.start_soon(start, daemon)
            ends: list[tuple[bool, str]] = []
            if not up:
                outcomes.add("unclear")
                result.fail(f"two daemons, {session}: neither started: {refusals} {replay}")
                return
            for daemon, refusal in zip([d for d in daemons if d not in up], refusals, strict=True):
                # One clear line, no traceback: a second daemon refusing the state directory.
                if "Traceback" in refusal or "Traceback" in daemon.log_text():
                    ends.append((False, f"daemon crashed: {daemon.log_text()[-600:]}"))
                else:
                    ends.append((False, "refused: second daemon: " + refusal))

            async def resume(daemon: DaemonProcess) -> None:
                ends.append(await _window_resume(daemon.socket_path, session))

            with trio.move_on_after(STEP_TIMEOUT * 2) as timeout:
                async with trio.open_nursery() as resuming:
                    for daemon in up:
                        resuming.start_soon(resume, daemon)
            if timeout.cancelled_caught:
                result.fail(f"two daemons, {session}: a resume still ran after 60s {replay}")
                return
            _judge(
                f"two daemons, {session}",
                [started for started, _ in ends],
                [how for _, how in ends],
                _runs_of(root / "work", session),
                result,
                outcomes,
                replay,
            )
        finally:
            with trio.CancelScope(shield=True):
                for daemon in up:
                    await daemon.terminate()
            nursery.cancel_scope.cancel()


# -- the suite ------------------------------------------------------------------------


async def run_concurrency(races: int, seed: int) -> SuiteResult:
    """Run each race `races` times; count double runs."""
    result = SuiteResult("concurrency", "races run", "double runs or unclear failures", seed=seed)
    started = time.monotonic()
    replay = f"(replay: python -m stress --only concurrency --seed {seed} --races {races})"
    rng = random.Random(seed)
    resumes, daemons = _Outcomes(), _Outcomes()
    with short_tempdir("stk-") as root:
        (root / "work").mkdir()
        (root / "xdg").mkdir(mode=0o700)
        tag = rng.getrandbits(24)
        cli_sessions = [f"cli-r{tag:x}-{n}" for n in range(races)]
        daemon_sessions = [f"cli-d{tag:x}-{n}" for n in range(races)]
        await _park_tasks(root / "state", root / "work", cli_sessions + daemon_sessions)
        for session in cli_sessions:
            await _race_resumes(root, session, result, resumes, replay)
            result.done += 1
        for n, session in enumerate(daemon_sessions):
            await _race_daemons(root, session, n, result, daemons, replay)
            result.done += 1
    doubles = resumes.counts.get("double run", 0) + daemons.counts.get("double run", 0)
    result.detail = f"double runs: {doubles}"
    result.notes.append(
        f"two resumes: {dict(sorted(resumes.counts.items()))}; refusals "
        f"{dict(sorted(resumes.refusals.items()))}"
    )
    result.notes.append(
        f"two daemons: {dict(sorted(daemons.counts.items()))}; refusals "
        f"{dict(sorted(daemons.refusals.items()))}"
    )
    result.seconds = time.monotonic() - started
    return result

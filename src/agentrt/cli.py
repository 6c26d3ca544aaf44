"""The `agentrt` command: headless runs, pending tasks, and the daemon.

Exit status of `agentrt run`, `pending answer` and `pending resume`:
0 finished, 1 failed (pending task kept), 2 usage error, 3 stopped with the
pending task kept (paused, disconnected, awaiting an answer), 130 cancelled
by the user (pending task deleted).
"""

from __future__ import annotations

import argparse
import contextlib
import getpass
import json
import os
import secrets
import signal
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

import attrs
import trio

from . import __version__
from ._agent import Emit
from ._cause import Cause
from ._events import (
    Event,
    Outcome,
    RunEnded,
    TaskStarted,
    TextEvent,
    ToolCallEvent,
    ToolResultEvent,
    VerifyEvent,
)
from ._executor import ExecutorError, UnknownTaskError
from ._pending import DENY, Answer, Entry, RequestKind
from ._record import converter as record_converter
from ._runtime import Runtime, default_state_dir, open_runtime
from ._store import StoredTask, StoreError, UnreadableTask
from .frames import frame_for_event, to_wire

EXIT_FINISHED = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_KEPT = 3
EXIT_USER_CANCEL = 130


def event_to_json(event: Event) -> dict[str, Any]:
    """An event as the JSON object of its daemon frame (see docs/protocol.md)."""
    return to_wire(frame_for_event(event))


def exit_status(ended: RunEnded) -> int:
    """The process exit status that tells how a run ended."""
    if ended.outcome is Outcome.FINISHED:
        return EXIT_FINISHED
    if ended.outcome is Outcome.FAILED:
        return EXIT_FAILED
    if ended.outcome is Outcome.CANCELLED and not ended.pending_kept:
        return EXIT_USER_CANCEL
    return EXIT_KEPT


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help="where pending tasks and secrets live (default: $AGENTRT_STATE_DIR, "
        "else $XDG_STATE_HOME/agentrt, else ~/.local/state/agentrt)",
    )
    parser.add_argument(
        "--model",
        default=os.environ.get("AGENTRT_MODEL", "scripted"),
        help="scripted (default), replay:PATH, openai:NAME or anthropic:NAME",
    )
    parser.add_argument(
        "--base-url", default=None, help="API base URL for openai:/anthropic: models"
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="directory the tools work in (default: the current directory)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object a line")


def build_parser() -> argparse.ArgumentParser:
    """The `agentrt` argument parser."""
    parser = argparse.ArgumentParser(
        prog="agentrt",
        description="A Trio runtime for LLM agents that stop to ask a human. "
        "Run tasks headless, manage pending tasks, or start the daemon the terminal client uses.",
        epilog="Exit status of run / pending answer / pending resume: 0 finished, 1 failed "
        "(pending task kept), 2 usage error, 3 stopped with the pending task kept (paused, "
        "disconnected, awaiting an answer), 130 cancelled by the user (pending task deleted).",
    )
    parser.add_argument("--version", action="version", version=f"agentrt {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    run = sub.add_parser(
        "run",
        help="run one task in this process, answering questions on stdin",
        description="Run TEXT as a task. Confirmations and questions are printed and answered "
        "on stdin, one line each. Ctrl+C cancels (the pending task is deleted); SIGTERM pauses "
        "and SIGHUP disconnects (the pending task is kept for `agentrt pending resume`). "
        "A --session starting with chat-, tg- or dc- takes that origin: its ask_user saves the "
        "question and ends the run, and `agentrt pending answer` resumes it.",
    )
    run.add_argument(
        "text",
        help="what to ask; with the scripted model, statements like "
        "'write a.txt hi; ask Your name?'",
    )
    run.add_argument("--session", default=None, help="session id (default: a new cli- session)")
    _add_common(run)

    pending = sub.add_parser("pending", help="list, show, answer, resume or discard pending tasks")
    psub = pending.add_subparsers(dest="action", metavar="ACTION", required=True)
    plist = psub.add_parser("list", help="pending tasks, newest first")
    plist.add_argument("--prefix", default="", help="only sessions starting with this")
    _add_common(plist)
    pshow = psub.add_parser("show", help="one pending task in full")
    pshow.add_argument("session")
    _add_common(pshow)
    panswer = psub.add_parser("answer", help="answer a task's saved question and resume it")
    panswer.add_argument("session")
    panswer.add_argument("answer")
    _add_common(panswer)
    presume = psub.add_parser("resume", help="resume a task where it stopped")
    presume.add_argument("session")
    _add_common(presume)
    pdiscard = psub.add_parser("discard", help="throw a task away (a user-cancel)")
    pdiscard.add_argument("session")
    _add_common(pdiscard)

    sub.add_parser(
        "daemon",
        help="serve the terminal client over a Unix socket (see `agentrt daemon --help`)",
        add_help=False,
    )
    sub.add_parser("token", help="print the HTTP API token", add_help=False)
    return parser


# -- printing -------------------------------------------------------------


@attrs.define
class Printer:
    """Shows events to a person (or as JSON lines) and reads answers from stdin."""

    json_mode: bool
    out: TextIO = attrs.field(factory=lambda: sys.stdout)
    err: TextIO = attrs.field(factory=lambda: sys.stderr)
    _at_line_start: bool = True

    async def emit(self, event: Event) -> None:
        if self.json_mode:
            self._line(json.dumps(event_to_json(event), ensure_ascii=False))
            return
        if isinstance(event, TextEvent):
            self.out.write(event.text)
            self.out.flush()
            self._at_line_start = event.text.endswith("\n")
        elif isinstance(event, TaskStarted):
            verb = "resumed" if event.resumed else "started"
            self._note(f"task {event.task_hash} {verb} in session {event.session_id}")
        elif isinstance(event, ToolCallEvent):
            args = json.dumps(event.arguments, ensure_ascii=False)
            if len(args) > 120:
                args = args[:117] + "..."
            warning = f" ({event.may_have_run})" if event.may_have_run else ""
            self._note(f"{event.agent + ': ' if event.agent else ''}{event.name} {args}{warning}")
        elif isinstance(event, ToolResultEvent):
            first = event.preview.splitlines()[0] if event.preview else ""
            self._note(f"{event.name} {'->' if event.ok else 'failed:'} {first[:100]}")
        elif isinstance(event, VerifyEvent):
            self._note(event.message)
        elif isinstance(event, RunEnded):
            self._note(describe_end(event))

    def _note(self, text: str) -> None:
        if not self._at_line_start:
            self.out.write("\n")
            self.out.flush()
            self._at_line_start = True
        self.err.write(f"· {text}\n")
        self.err.flush()

    def _line(self, text: str) -> None:
        self.out.write(text + "\n")
        self.out.flush()

    async def answer(self, entry: Entry) -> Answer:
        """Ask a person (or a JSON client) on stdin; return the answer."""
        request = entry.request
        if self.json_mode:
            self._line(
                json.dumps(
                    {
                        "type": "ask",
                        "id": entry.id,
                        "kind": request.kind.value,
                        "prompt": request.prompt,
                        "choices": list(request.choices),
                        "masked": request.masked,
                        "error": request.error,
                    },
                    ensure_ascii=False,
                )
            )
        else:
            self._note(_ask_text(entry))
        masked = request.masked and sys.stdin.isatty()
        line = await trio.to_thread.run_sync(_read_answer, masked, abandon_on_cancel=True)
        if line is None:
            raise EOFError("stdin closed before the question was answered")
        return parse_answer(request.kind, request.choices, line)


def _ask_text(entry: Entry) -> str:
    request = entry.request
    lines = [f"? {request.prompt}"]
    if request.error:
        lines.append(f"  ({request.error})")
    if request.kind is RequestKind.CONFIRM:
        lines.append("  answer y (allow once), a (allow for this session) or n (deny)")
    elif request.kind is RequestKind.PASSWORD:
        lines.append("  type the system password, or an empty line to deny")
    elif request.kind is RequestKind.SECRET:
        lines.append("  type the secret value (empty line to decline)")
    return "\n".join(lines)


_CONFIRM_WORDS = {
    "y": "allow",
    "yes": "allow",
    "allow": "allow",
    "once": "allow",
    "a": "allow_session",
    "always": "allow_session",
    "allow_session": "allow_session",
    "session": "allow_session",
    "n": DENY,
    "no": DENY,
    "deny": DENY,
    "": DENY,
}


def parse_answer(kind: RequestKind, choices: Sequence[str], line: str) -> Answer:
    """Turn a typed line into an answer for a request of `kind`."""
    text = line.rstrip("\r\n")
    if kind is RequestKind.CONFIRM:
        value = _CONFIRM_WORDS.get(text.strip().lower(), DENY)
        if choices and value not in choices:
            value = DENY
        return Answer(value)
    if kind is RequestKind.PASSWORD:
        return Answer(DENY) if text == "" else Answer("allow", secret=text)
    if kind is RequestKind.SECRET:
        return Answer(DENY) if text == "" else Answer("", secret=text)
    return Answer(text)


def _read_answer(masked: bool) -> str | None:
    if masked:
        try:
            return getpass.getpass("")
        except EOFError:
            return None
    line = sys.stdin.readline()
    return line if line else None


def describe_end(ended: RunEnded) -> str:
    """One line saying how a run ended and what happened to its pending task."""
    sid = ended.session_id
    if ended.outcome is Outcome.FINISHED:
        return "finished"
    if ended.outcome is Outcome.AWAITING_ANSWER:
        return (
            f"waiting for an answer to: {ended.question}\n"
            f"  answer with: agentrt pending answer {sid} 'TEXT'"
        )
    if ended.outcome is Outcome.FAILED:
        return (
            f"failed: {ended.error}\n  the task is kept; retry with: agentrt pending resume {sid}"
        )
    cause = ended.cause.value if ended.cause else "unknown"
    if ended.pending_kept:
        return f"stopped ({cause}); the task is kept: agentrt pending resume {sid}"
    return f"cancelled ({cause}); the pending task was deleted"


# -- commands ---------------------------------------------------------------


async def _drive(
    rt: Runtime,
    printer: Printer,
    start: Callable[[Emit], Any],
    session_id: str,
) -> int:
    """Run one task with signal handling and a stdin listener; return the exit status."""
    task_hash: list[str] = []
    early: list[Cause] = []

    async def emit(event: Event) -> None:
        if isinstance(event, TaskStarted):
            task_hash.append(event.task_hash)
            if early:
                rt.executor.cancel(event.task_hash, early[0])
        await printer.emit(event)

    def cancel(cause: Cause) -> None:
        if not task_hash:
            early.append(cause)
            return
        # The run may have ended between the signal and this handler.
        with contextlib.suppress(UnknownTaskError):
            rt.executor.cancel(task_hash[0], cause)

    async def answer_questions() -> None:
        # Only this process's run posts here, so the listener takes every prefix.
        with rt.registry.listen("", name="stdin") as listener:
            while True:
                entry = await listener.claim()
                try:
                    reply = await printer.answer(entry)
                except EOFError as exc:
                    entry.fail(exc)
                    continue
                if not entry.done:
                    entry.answer(reply)

    async def signals() -> None:
        causes = {
            signal.SIGINT: Cause.USER_CANCEL,
            signal.SIGTERM: Cause.PAUSE,
            signal.SIGHUP: Cause.DISCONNECT,
        }
        with trio.open_signal_receiver(*causes) as received:
            async for signum in received:
                cancel(causes[signal.Signals(signum)])

    async with trio.open_nursery() as nursery:
        nursery.start_soon(signals)
        nursery.start_soon(answer_questions)
        ended: RunEnded = await start(emit)
        nursery.cancel_scope.cancel()
    return exit_status(ended)


def _new_session() -> str:
    return f"cli-{secrets.token_hex(4)}"


async def _cmd_run(args: argparse.Namespace) -> int:
    session = args.session or _new_session()
    printer = Printer(args.json)
    async with _open(args) as rt:
        return await _drive(
            rt,
            printer,
            lambda emit: rt.executor.run(session, args.text, owner="cli", emit=emit),
            session,
        )


async def _cmd_pending(args: argparse.Namespace) -> int:
    printer = Printer(args.json)
    async with _open(args) as rt:
        if args.action == "list":
            records = await rt.store.list_stored(args.prefix)
            if args.json:
                for record in records:
                    printer._line(json.dumps(summarize(record), ensure_ascii=False))
            elif not records:
                print("no pending tasks")
            else:
                for record in records:
                    print(_summary_line(record))
            return 0
        if args.action == "show":
            record = await rt.store.load(args.session)
            if record is None:
                print(f"agentrt: session {args.session} has no pending task", file=sys.stderr)
                return EXIT_FAILED
            detail = summarize(record)
            detail["transcript"] = [record_converter.unstructure(m) for m in record.transcript]
            print(json.dumps(detail, ensure_ascii=False, indent=None if args.json else 2))
            return 0
        if args.action == "discard":
            if not await rt.executor.discard(args.session):
                print(f"agentrt: session {args.session} has no pending task", file=sys.stderr)
                return EXIT_FAILED
            print(f"discarded the pending task of {args.session}")
            return 0
        answer = args.answer if args.action == "answer" else None
        return await _drive(
            rt,
            printer,
            lambda emit: rt.executor.resume(args.session, owner="cli", emit=emit, answer=answer),
            args.session,
        )


def summarize(record: StoredTask) -> dict[str, Any]:
    """A pending task as a small JSON object (no transcript)."""
    if isinstance(record, UnreadableTask):
        return {
            "session": record.session_id,
            "status": record.status,
            "cause": None,
            "error": record.error,
            "question": None,
            "question_kind": None,
            "input": "",
            "messages": 0,
            "runs": 0,
            "task": None,
            "updated_at": record.updated_at or 0.0,
        }
    return {
        "session": record.session_id,
        "status": "crashed" if record.crashed else record.status.value,
        "cause": record.cause.value if record.cause else None,
        "error": record.error,
        "question": record.question.prompt if record.question else None,
        "question_kind": record.question.kind.value if record.question else None,
        "input": record.input,
        "messages": len(record.transcript),
        "runs": record.runs,
        "task": record.task_hash,
        "updated_at": record.updated_at,
    }


def _summary_line(record: StoredTask) -> str:
    if isinstance(record, UnreadableTask):
        age = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(record.updated_at or 0.0))
        # Not shortened: the way out must stay readable.
        what = f"cannot be read; discard it with: agentrt pending discard {record.session_id}"
        return f"{record.session_id:<20} {record.status:<28} {age}  {what}"
    status = "crashed" if record.crashed else record.status.value
    if record.cause:
        status += f" ({record.cause.value})"
    age = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(record.updated_at))
    what = f"asks: {record.question.prompt}" if record.question else record.input
    if len(what) > 60:
        what = what[:57] + "..."
    return f"{record.session_id:<20} {status:<28} {age}  {what}"


def _open(args: argparse.Namespace) -> Any:
    return open_runtime(
        args.state_dir or default_state_dir(),
        args.model,
        workdir=args.workdir,
        base_url=args.base_url,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `agentrt` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "daemon":
        from .daemon import main as daemon_main

        return daemon_main(argv[1:])
    if argv and argv[0] == "token":
        from .http import token_main

        return token_main(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    command = _cmd_run if args.command == "run" else _cmd_pending
    try:
        return trio.run(command, args)
    except BaseException as exc:
        error = _user_error(exc)
        if error is None:
            raise
        print(f"agentrt: {error}", file=sys.stderr)
        return EXIT_USAGE if isinstance(error, ValueError) else EXIT_FAILED


def _user_error(exc: BaseException) -> Exception | None:
    """The error to show the user, looking inside exception groups; None for a bug."""
    if isinstance(exc, BaseExceptionGroup):
        for sub in exc.exceptions:
            found = _user_error(sub)
            if found is not None:
                return found
        return None
    if isinstance(exc, (ExecutorError, StoreError, ValueError)):
        return exc
    return None


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

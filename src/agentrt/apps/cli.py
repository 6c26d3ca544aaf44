"""The `agentrt` command: headless runs, pending tasks, sessions, and the daemon.

When a daemon holds the state dir, `agentrt run`, `agentrt pending ...` and
`agentrt sessions ...` send their requests to it over its socket (the daemon
is then the only process that opens the store); otherwise they work on the
store in this process. Both ways print the same and exit with the same status.

Exit status of `agentrt run`, `pending answer`, `pending resume` and `sessions continue`:
0 finished, 1 failed (pending task kept), 2 usage error, 3 stopped with the
pending task kept (paused, disconnected, awaiting an answer), 130 cancelled
by the user (pending task deleted).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any
from typing import Final
from typing import TextIO

import attrs
import trio

from .. import __version__
from ..agent.prompt import AGENTS_LIMIT
from ..config.keystore import KeyStore
from ..config.keystore import check_key_name
from ..config.options import API_KEY_ENV
from ..config.options import APPROVAL
from ..config.options import BASE_URL
from ..config.options import CONFIG
from ..config.options import MODEL
from ..config.options import MODEL_OPTIONS
from ..config.options import RETENTION_DAYS
from ..config.options import SANDBOX
from ..config.options import STATE_DIR
from ..config.options import STORE
from ..config.options import WORKDIR
from ..config.options import shared_options
from ..config.prices import Prices
from ..config.prices import total_cost
from ..config.settings import Settings
from ..config.settings import load_settings
from ..config.settings import model_options
from ..config.statedir import DaemonInfo
from ..config.statedir import StateDirError
from ..config.statedir import lock_is_held
from ..config.statedir import prepare_state_dir
from ..config.statedir import read_daemon_info
from ..core.cause import Cause
from ..core.executor import ExecutorError
from ..core.executor import TaskInfo
from ..core.executor import UnknownTaskError
from ..core.pending import ALLOW_ONCE
from ..core.pending import ALLOW_SESSION
from ..core.pending import DENY
from ..core.pending import Answer
from ..core.pending import Entry
from ..core.pending import NoAnswerComingError
from ..core.pending import RequestKind
from ..core.runtime import Runtime
from ..core.runtime import default_state_dir
from ..core.runtime import open_runtime
from ..core.runtime import open_settings_store
from ..core.runtime import run_prompt
from ..present.ends import describe_end as _describe_end
from ..present.listing import BriefTask
from ..present.listing import filled
from ..present.listing import lines as listing_lines
from ..present.preview import preview_lines
from ..present.shapes import SCHEMA_VERSION
from ..present.shapes import event_to_json
from ..present.shapes import message_json
from ..present.shapes import preview_json
from ..present.shapes import question_json
from ..store import SessionInfo
from ..store import Store
from ..store import StoreError
from ..store import UnreadableTask
from ..store import is_postgres
from ..vocab.events import Event
from ..vocab.events import Outcome
from ..vocab.events import RunEnded
from ..vocab.events import TaskStarted
from ..vocab.events import TextEvent
from ..vocab.events import ToolCallEvent
from ..vocab.events import ToolResultEvent
from ..vocab.events import VerifyEvent
from ..vocab.events import describe_compaction
from ..vocab.events import describe_resume
from ..vocab.events import may_have_run
from ..vocab.reprs import mutable
from ..vocab.terminal import dumps
from ..vocab.terminal import shown_output
from ..vocab.terminal import visible
from ..vocab.terms import TERMINAL
from ..vocab.usage import RunTokens
from ..vocab.usage import TokenCount
from ..vocab.usage import cost_words
from . import codecache

if TYPE_CHECKING:
    from ..protocol.client import Client
    from ..protocol.frames import AskFrame
    from ..protocol.frames import DaemonFrame
    from ..protocol.frames import ErrorFrame
    from ..protocol.frames import PendingDetail
    from ..protocol.frames import PendingRequest
    from ..protocol.frames import PendingTask
    from ..protocol.frames import Run
    from ..protocol.frames import SessionItem
    from ..protocol.frames import SessionMessage
    from ..protocol.frames import SessionsRequest
    from ..protocol.frames import TurnList
    from ..protocol.frames import Undone


EXIT_FINISHED = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_KEPT = 3
EXIT_USER_CANCEL = 130


def exit_status(ended: RunEnded) -> int:
    """The process exit status that tells how a run ended."""
    if ended.outcome is Outcome.FINISHED:
        return EXIT_FINISHED
    if ended.outcome is Outcome.FAILED:
        return EXIT_FAILED
    if ended.cause is Cause.USER_CANCEL:
        return EXIT_USER_CANCEL
    return EXIT_KEPT


def _common() -> argparse.ArgumentParser:
    """The options every command here takes: the shared ones, and ``--json``."""
    parser = shared_options(
        STATE_DIR,
        STORE,
        *MODEL_OPTIONS,
        WORKDIR,
        notes={
            MODEL: "when a daemon holds the state dir, its model is used",
            APPROVAL: "when a daemon holds the state dir, its policy is used",
        },
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object a line: a run's events and questions as the HTTP API "
        f'sends them, each with "v": {SCHEMA_VERSION}, the version of those shapes',
    )
    return parser


def _actions(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    help: str,
    description: str | None = None,
) -> argparse._SubParsersAction[argparse.ArgumentParser]:
    """Add the command `name` to `sub`; return its own ACTIONs (list, show, ...), one required."""
    command = sub.add_parser(name, help=help, description=description)
    return command.add_subparsers(dest="action", metavar="ACTION", required=True)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, not {text!r}")
    return value


#: The commands `build_parser` knows; `daemon`, `token` and `lab` parse their own arguments.
COMMANDS: Final = (
    "run",
    "pending",
    "sessions",
    "config",
    "keys",
    "fleet",
    "mcp",
    "daemon",
    "token",
    "lab",
)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The `agentrt` argument parser: every command's, or only `command`'s.

    Building one command's parser instead of all of them keeps a command's
    start-up short; `--help` and a mistyped command see them all.
    """

    def wanted(*names: str) -> bool:
        return command is None or command in names

    parser = argparse.ArgumentParser(
        prog="agentrt",
        description="A Trio runtime for LLM agents that stop to ask a human. "
        "Run tasks headless, manage pending tasks, or start the daemon the terminal client uses. "
        "Settings come from the flags, the environment and $XDG_CONFIG_HOME/agentrt/config.toml, "
        "in that order: `agentrt config show` prints them.",
        epilog="Exit status of run / pending answer / pending resume / sessions continue: "
        "0 finished, 1 failed (pending task kept) or refused (nothing started: the model has "
        "no API key, the session is busy), 2 usage or configuration error, 3 stopped with the "
        "pending task kept (paused, disconnected, awaiting an answer), 130 cancelled by the "
        "user (pending task deleted). Any command: 141 when the reader of its output went "
        "away (agentrt ... | head).",
    )
    parser.add_argument("--version", action="version", version=f"agentrt {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    common = _common()
    if wanted("run"):
        run = sub.add_parser(
            "run",
            parents=[common],
            help="run one task, answering questions on stdin",
            description="Run TEXT as a task: in the daemon that holds the state dir, if one does, "
            "else in this process. Confirmations and questions are printed and answered "
            "on stdin, one line each, in the order the calls were issued; a line that is not an "
            "answer (a confirmation takes y, a or n) is asked again. Ctrl+C cancels (the pending "
            "task is deleted); SIGTERM pauses and SIGHUP disconnects (the pending task is kept for "
            "`agentrt pending resume`); stdin closing while a question waits denies nothing: the "
            "run saves the question with its task and stops (exit status 3). "
            "A --session starting with chat-, tg- or dc- takes that origin: its ask_user saves the "
            "question and ends the run, and `agentrt pending answer` resumes it.",
        )
        run.add_argument(
            "text",
            help="what to ask, or - to read it from standard input (questions then cannot be "
            "answered there: the run stops at one, keeping its task); with the scripted model, "
            "statements like 'write a.txt hi; ask Your name?'",
        )
        run.add_argument("--session", default=None, help="session id (default: a new cli- session)")

    if wanted("pending"):
        psub = _actions(sub, "pending", help="list, show, answer, resume or discard pending tasks")
        plist = psub.add_parser("list", help="pending tasks, newest first", parents=[common])
        plist.add_argument("--prefix", default="", help="only sessions starting with this")
        pshow = psub.add_parser("show", help="one pending task in full", parents=[common])
        pshow.add_argument("session")
        panswer = psub.add_parser(
            "answer", help="answer a task's saved question and resume it", parents=[common]
        )
        panswer.add_argument("session")
        panswer.add_argument("answer")
        panswer.add_argument(
            "--question",
            metavar="ID",
            help="the id of the question answered (`pending list --json` shows it as "
            "question_id): if the task waits for another one now, or this one was answered, "
            "withdrawn or expired, nothing is answered and the command says why (exit 2)",
        )
        presume = psub.add_parser("resume", help="resume a task where it stopped", parents=[common])
        presume.add_argument("session")
        pdiscard = psub.add_parser(
            "discard", help="throw a task away (a user-cancel)", parents=[common]
        )
        pdiscard.add_argument("session")

    if wanted("sessions"):
        ssub = _actions(
            sub,
            "sessions",
            help="list, show, continue or remove conversations, finished ones too",
            description="Every session's messages are kept (see retention_days in `agentrt config "
            "show` for how long), so an earlier conversation can be read back and continued. "
            "Through the daemon that holds the state dir when one does, else on the store itself.",
        )
        slist = ssub.add_parser(
            "list", help="sessions, most recently active first", parents=[common]
        )
        slist.add_argument("--prefix", default="", help="only sessions starting with this")
        slist.add_argument(
            "--limit", type=_positive, default=None, help="at most this many (default: all)"
        )
        sshow = ssub.add_parser("show", help="a session's whole conversation", parents=[common])
        sshow.add_argument("session")
        scompact = ssub.add_parser(
            "compact",
            help="summarise a session's older messages now (the store keeps them all)",
            description="A summary (written by the model; a trim for the scripted model) "
            "takes the place of the session's older messages in what the model is given from "
            "now on; its newest messages stay whole. A run does this by itself before a "
            "request would pass compact_at of the model's context window (see docs/conversations.md).",
            parents=[common],
        )
        scompact.add_argument("session")
        scontinue = ssub.add_parser(
            "continue",
            help="run a new message in a session: the model is given its whole conversation",
            parents=[common],
        )
        scontinue.add_argument("session")
        scontinue.add_argument("text", help="the message, or - to read it from standard input")
        srm = ssub.add_parser(
            "rm",
            help="delete a finished session and its messages (one with a pending task is refused)",
            parents=[common],
        )
        srm.add_argument("session")
        sundo = ssub.add_parser(
            "undo",
            help="put back the files the session's last run changed (or, with --turn, every "
            "run's after that turn)",
            description="Every write_file, edit_file and shell call keeps what it changes in the "
            "working folder (docs/undo.md). This puts the files the session's last run changed "
            "back as they were before it, byte for byte and mode for mode, and tells the model "
            "in a note. With --turn SEQ (see `agentrt sessions turns`), every change of the runs "
            "after that turn is put back, and the model no longer sees what was said after it. "
            "A file changed since the run is not overwritten: it is listed and nothing is "
            "touched, unless --force (then its newer content is kept beside it, as "
            "NAME.agentrt-undo-N). A session with a pending task or a run going on is refused.",
            parents=[common],
        )
        sundo.add_argument("session")
        sundo.add_argument(
            "--turn",
            type=int,
            default=None,
            metavar="SEQ",
            help="rewind to this turn: the seq `agentrt sessions turns` lists",
        )
        sundo.add_argument(
            "--force",
            action="store_true",
            help="put back files changed since the run too, keeping their newer content beside",
        )
        sturns = ssub.add_parser(
            "turns",
            help="a session's turns, and how many files a rewind to each would put back",
            parents=[common],
        )
        sturns.add_argument("session")

    if wanted("config"):
        csub = _actions(
            sub,
            "config",
            help="show the configuration in effect and where each value came from",
            description="The configuration file is TOML: $XDG_CONFIG_HOME/agentrt/config.toml "
            "(else ~/.config/agentrt/config.toml), or the one --config or AGENTRT_CONFIG names. "
            "A value comes from the first of: a flag, the environment, the file, the default.",
        )
        cshow = csub.add_parser(
            "show",
            parents=[shared_options(STATE_DIR, STORE, *MODEL_OPTIONS, RETENTION_DAYS, WORKDIR)],
            help="every setting, its value and where it came from (flag, env, file:line, key "
            "store, default); API keys and tokens are never printed; --prompt prints the "
            "system prompt a run would send",
            description="Print every setting of agentrt, its value and where it came from: a "
            "flag, an environment variable, the configuration file (with its line), the key "
            "store or the default. Flags given here are applied as `agentrt run` would apply "
            "them. API keys and tokens are shown only as set or not. With --prompt, print "
            "instead the exact system prompt `agentrt run` would send the model now with the "
            "same flags: agentrt's own instructions (the tools offered, the approval policy, "
            "the sandbox, what a stop looks like), the environment (working folder, operating "
            "system, shell, today's date), the AGENTS.md files from the repository's root down "
            "to the working folder, and the configured instructions.",
        )
        cshow.add_argument(
            "--json",
            action="store_true",
            help='print one JSON object: {SETTING: {"value", "source", "where"}}, a key or '
            'token with "value": null and "set"; with --prompt: {"text", "date", "tools", '
            '"parts", "agents_files", "daemon"}',
        )
        cshow.add_argument(
            "--prompt",
            action="store_true",
            help="print the system prompt a run would send with these flags (--model, "
            "--approval, --sandbox, --workdir, --config...), exactly as sent and nothing "
            "else; notes (an AGENTS.md cut to fit, a daemon that runs tasks with its own "
            "settings) go to standard error",
        )

    if wanted("keys"):
        keys_common = shared_options(STATE_DIR)
        ksub = _actions(
            sub,
            "keys",
            help="store API keys and bot tokens: set, list, rm",
            description="A key is named after the environment variable it stands in for "
            "(OPENAI_API_KEY, ANTHROPIC_API_KEY, AGENTRT_TELEGRAM_TOKEN, or the name an "
            "api_key_env setting gives); when that variable is unset, the stored key is used. "
            "Keys are kept in the state dir's keys/ folder, one 0600 file each.",
        )
        kset = ksub.add_parser(
            "set",
            parents=[keys_common],
            help="store a key: typed without echo, or read from standard input when it is not "
            "a terminal",
        )
        kset.add_argument("name", help="the variable it stands in for, e.g. OPENAI_API_KEY")
        klist = ksub.add_parser("list", parents=[keys_common], help="the names of the stored keys")
        klist.add_argument("--json", action="store_true", help='print {"keys": [NAME, ...]}')
        krm = ksub.add_parser("rm", parents=[keys_common], help="remove a stored key")
        krm.add_argument("name")

    if wanted("fleet"):
        fsub = _actions(
            sub,
            "fleet",
            help="the daemons sharing a PostgreSQL store: their heartbeats and leases",
            description="A fleet is the daemons started with the same --store postgresql://... "
            "(see docs/fleet.md). Each holds a lease that its heartbeat renews; a task it runs is "
            "held by that lease. When a lease runs out, the tasks it held become interrupted "
            "(cause disconnect) and any daemon can resume them.",
        )
        fstatus = fsub.add_parser(
            "status",
            parents=[shared_options(STATE_DIR, CONFIG, STORE)],
            help="every daemon of the fleet, its heartbeat, its lease and the tasks it holds",
        )
        fstatus.add_argument("--json", action="store_true", help="print one JSON object")

    if wanted("mcp"):
        msub = _actions(
            sub,
            "mcp",
            help="the MCP servers whose tools the models are offered ([mcp.servers.NAME])",
            description="MCP servers are configured in config.toml, one [mcp.servers.NAME] "
            "table each (see docs/mcp.md); the daemon starts them and offers their tools as "
            "NAME__tool.",
        )
        mlist = msub.add_parser(
            "list",
            parents=[shared_options(STATE_DIR, CONFIG)],
            help="each server, its state (starting, ready, failed: why) and its tools; "
            "without a daemon, each server is started here to look",
        )
        mlist.add_argument("--json", action="store_true", help="print one JSON object")

    sub.add_parser(
        "daemon",
        help="serve the terminal client over a Unix socket (see `agentrt daemon --help`); "
        "`agentrt daemon status` and `agentrt daemon stop` ask the running one",
        add_help=False,
    )
    sub.add_parser("token", help="print the HTTP API token", add_help=False)
    sub.add_parser(
        "lab",
        help="interrupt a run at every point with every cause and show what each costs "
        "(see `agentrt lab --help`)",
        add_help=False,
    )
    return parser


# -- printing -------------------------------------------------------------

#: How many lines `Printer.lines` joins into one write. A listing of 10,000 tasks
#: written as one string was joined, copied with its newline, checked for control
#: characters and encoded: four fresh megabyte buffers, whose new pages cost 2 ms;
#: in pieces of this size (some 50 KB) the allocator reuses the same memory. Each
#: piece ends with its newline, so no ``\r\n`` is split between two writes.
LINES_PER_WRITE = 512


@mutable
class Printer:
    """Shows a run's frames to a person (or as JSON lines) and reads answers from stdin.

    The same frames come from a run in this process (its events, as frames)
    and from a run in the daemon, so both print alike.
    """

    json_mode: bool
    out: TextIO = attrs.field(factory=lambda: sys.stdout)
    err: TextIO = attrs.field(factory=lambda: sys.stderr)
    _at_line_start: bool = True
    #: The run's session, once its first frame named it.
    _session: str = ""

    def show(self, frame: DaemonFrame | Event) -> None:
        """Print one frame of a run, or one event of a run in this process.

        A run event's frame is that event under its frame class (a subclass of
        the event's), so both are told apart by the event classes: a run here
        prints its events without loading the frames. As JSON, a frame is
        printed as the event it carries, in the shape the HTTP API sends it
        (`agentrt.present.shapes`).
        """
        if isinstance(frame, TaskStarted | RunEnded):
            self._session = frame.session_id
        if self.json_mode:
            if isinstance(frame, Event):
                obj = {"v": SCHEMA_VERSION, **event_to_json(self._session, frame)}
                self.line(dumps(obj))
            return
        if isinstance(frame, TextEvent):
            self.out.write(frame.text)
            self.out.flush()
            self._at_line_start = frame.text.endswith("\n")
        elif isinstance(frame, TaskStarted):
            verb = "resumed" if frame.resumed else "started"
            self._note(f"task {frame.task_hash} {verb} in session {frame.session_id}")
            if frame.resumed:
                self._note(
                    describe_resume(frame.kept_calls, frame.rerun_calls, frame.regenerated_words)
                )
        elif isinstance(frame, ToolCallEvent):
            args = dumps(frame.arguments)
            if len(args) > 120:
                args = args[:117] + "..."
            warning = may_have_run(frame.attempt)
            note = f"{frame.agent + ': ' if frame.agent else ''}{frame.name} {args}"
            self._note(note + (f" ({warning})" if warning else ""))
        elif isinstance(frame, ToolResultEvent):
            first = frame.preview.splitlines()[0] if frame.preview else ""
            self._note(f"{frame.name} {'->' if frame.ok else 'failed:'} {first[:100]}")
        elif isinstance(frame, VerifyEvent):
            self._note(frame.message)
        elif isinstance(frame, RunEnded):
            self._note(describe_end(frame))

    def _note(self, text: str) -> None:
        if not self._at_line_start:
            self.out.write("\n")
            self.out.flush()
            self._at_line_start = True
        self.err.write(f"· {text}\n")
        self.err.flush()

    def line(self, text: str) -> None:
        """Print one line on stdout."""
        self.out.write(text + "\n")
        self.out.flush()

    def lines(self, texts: Sequence[str]) -> None:
        """Print many lines on stdout, `LINES_PER_WRITE` to a write, then flush once."""
        if texts:
            write = self.out.write
            for start in range(0, len(texts), LINES_PER_WRITE):
                write("\n".join(texts[start : start + LINES_PER_WRITE]) + "\n")
            self.out.flush()

    async def answer(self, ask: AskFrame) -> Answer:
        """Ask a person (or a JSON client) on stdin; return the answer.

        A line that is no answer to `ask` (a confirmation answered ``blue``) is
        never taken for one: the question is asked again, saying what it takes.
        Raises `EOFError` when stdin is closed.
        """
        while True:
            self._ask(ask)
            masked = ask.masked and sys.stdin.isatty()
            line = await trio.to_thread.run_sync(_read_answer, masked, abandon_on_cancel=True)
            if line is None:
                raise EOFError("stdin closed before the question was answered")
            answer = parse_answer(ask.kind, ask.choices, line)
            if answer is not None:
                return answer
            ask = attrs.evolve(ask, error=f"not an answer: {line.strip()!r}; {_takes(ask)}")

    def _ask(self, ask: AskFrame) -> None:
        if self.json_mode:
            # As the HTTP API shows a question; the ask frame does not say which agent asks.
            obj = question_json(ask.id, ask.session, ask.task, None, ask.request)
            shown = {"v": SCHEMA_VERSION, "type": "question", **obj}
            self.line(dumps(shown))
        else:
            self._note(_ask_text(ask))

    def stdin_closed(self) -> None:
        """Say that stdin closed while a question waited, and what becomes of the run."""
        self._note(
            "standard input closed while a question waited for its answer: it is not taken for "
            "a deny; the run finishes the calls under way, then stops with its task kept"
        )


def _ask_text(ask: AskFrame) -> str:
    lines = [f"? {ask.prompt}"]
    if ask.diff:
        lines += [f"  {line}" for line in ask.diff.splitlines()]
    if ask.error:
        lines.append(f"  ({ask.error})")
    takes = _takes(ask)
    if takes:
        lines.append(f"  {takes}")
    return "\n".join(lines)


#: How each choice of a confirmation is typed, and what it is called.
_CHOICE_WORDS: Final = {
    ALLOW_ONCE: ("y", "allow once"),
    ALLOW_SESSION: ("a", "allow for this session"),
    DENY: ("n", "deny"),
}


def _takes(ask: AskFrame) -> str:
    """What an answer to `ask` may be, as the line that asks it says."""
    if ask.kind is RequestKind.CONFIRM and set(ask.choices) - set(_CHOICE_WORDS):
        # Choices that are not a permission's (an MCP elicitation's): typed as they are.
        return "answer " + " or ".join(ask.choices)
    if ask.kind is RequestKind.CONFIRM:
        offered = [
            c for c in (ALLOW_ONCE, ALLOW_SESSION, DENY) if not ask.choices or c in ask.choices
        ]
        said = [f"{_CHOICE_WORDS[c][0]} ({_CHOICE_WORDS[c][1]})" for c in offered]
        return "answer " + (", ".join(said[:-1]) + " or " + said[-1] if len(said) > 1 else said[0])
    if ask.kind is RequestKind.PASSWORD:
        return "type the system password, or an empty line to deny"
    if ask.kind is RequestKind.SECRET:
        return "type the secret value (empty line to decline)"
    return ""


_CONFIRM_WORDS: Final = {
    "y": ALLOW_ONCE,
    "yes": ALLOW_ONCE,
    "allow": ALLOW_ONCE,
    "once": ALLOW_ONCE,
    "a": ALLOW_SESSION,
    "always": ALLOW_SESSION,
    "allow_session": ALLOW_SESSION,
    "session": ALLOW_SESSION,
    "n": DENY,
    "no": DENY,
    "deny": DENY,
}


def parse_answer(kind: RequestKind, choices: Sequence[str], line: str) -> Answer | None:
    """Turn a typed line into an answer for a request of `kind`; None when it is none.

    A confirmation takes one of its choices, by letter or word (`_CONFIRM_WORDS`,
    any case); anything else, an empty line too, is no answer to it and never
    counts as a deny.
    """
    text = line.rstrip("\r\n")
    if kind is RequestKind.CONFIRM and text.strip() in choices:
        return Answer(text.strip())  # a choice typed as it is (an MCP elicitation's)
    if kind is RequestKind.CONFIRM:
        value = _CONFIRM_WORDS.get(text.strip().lower())
        if value is None or (choices and value not in choices):
            return None
        return Answer(value)
    if kind is RequestKind.PASSWORD:
        return Answer(DENY) if text == "" else Answer("allow", secret=text)
    if kind is RequestKind.SECRET:
        return Answer(DENY) if text == "" else Answer("", secret=text)
    return Answer(text)


def _read_answer(masked: bool) -> str | None:
    if masked:
        try:
            import getpass  # only for a masked answer

            return getpass.getpass("")
        except EOFError:
            return None
    line = sys.stdin.readline()
    return line if line else None


def describe_end(ended: RunEnded) -> str:
    """One line saying how a run ended, what became of its task, and how to go on here."""
    status = _describe_end(ended).status
    if ended.outcome is Outcome.AWAITING_ANSWER:
        question = f" --question {ended.question_id}" if ended.question_id else ""
        return (
            f"{status}\n  answer with: agentrt pending answer {ended.session_id}{question} 'TEXT'"
        )
    if ended.pending_kept:
        return f"{status}: agentrt pending resume {ended.session_id}"
    return status


def summarize(task: PendingTask) -> dict[str, Any]:
    """A pending task as a small JSON object (no transcript)."""
    return {
        "session": task.session,
        "status": "crashed" if task.crashed else task.status,
        "cause": task.cause.value if task.cause else None,
        "error": task.error,
        "question": task.question,
        "question_id": task.question_id,
        "question_kind": task.question_kind.value if task.question_kind else None,
        "input": task.input,
        "messages": task.messages,
        "runs": task.runs,
        "task": task.task,
        "updated_at": task.updated_at,
    }


def _summary_row(task: PendingTask) -> BriefTask:
    """What a listing line shows of a task the daemon listed."""
    return (
        task.session,
        task.status,
        task.crashed,
        task.cause.value if task.cause else None,
        task.updated_at,
        task.question,
        task.input,
    )


def _print_lines(printer: Printer, lines: Sequence[str]) -> int:
    if not lines:
        printer.line("no pending tasks")
    else:
        printer.lines(lines)
    return EXIT_FINISHED


def _print_list(printer: Printer, tasks: Sequence[PendingTask]) -> int:
    if printer.json_mode:
        printer.lines([dumps(summarize(task)) for task in tasks])
        return EXIT_FINISHED
    return _print_lines(printer, listing_lines([_summary_row(task) for task in tasks]))


def _print_detail(printer: Printer, detail: PendingDetail) -> int:
    """``pending show``: the task's line, its saved conversation, and what a resume will do.

    As JSON, the task's summary with its ``transcript`` and its ``preview``
    (`preview_json`, as the HTTP API gives it).
    """
    task = detail.task
    preview = detail.preview
    if printer.json_mode:
        obj = summarize(task)
        obj["transcript"] = list(detail.transcript)
        obj["preview"] = preview_json(preview) if preview is not None else None
        printer.line(dumps(obj))
        return EXIT_FINISHED
    lines = listing_lines([_summary_row(task)])
    for message in detail.transcript:
        lines += _message_lines(_saved_message(message))
    if preview is not None:
        lines += ["", *preview_lines(preview)]
    if task.question is not None:
        lines.append(f"answer with: agentrt pending answer {task.session} 'TEXT'")
    lines.append(f"resume with: agentrt pending resume {task.session}")
    printer.lines(lines)
    return EXIT_FINISHED


def _saved_message(saved: dict[str, Any]) -> SessionMessage:
    """A message of a saved transcript (as the store keeps it) in the shape `sessions show` reads."""
    from ..protocol.frames import SessionMessage

    calls = saved.get("tool_calls") or ()
    return SessionMessage(
        seq=0,
        role=str(saved.get("role", "")),
        content=str(saved.get("content") or ""),
        created_at=0.0,
        tool_calls=tuple(c for c in calls if isinstance(c, dict)),
        tool_call_id=saved.get("tool_call_id"),
        name=saved.get("name"),
        summarised=int((saved.get("compaction") or {}).get("summarised", 0)),
    )


def _print_compacted(printer: Printer, session: str, summarised: int) -> int:
    said = describe_compaction(summarised) if summarised else "nothing to summarise yet"
    printer.line(f"compacted session {session}: {said}")
    return EXIT_FINISHED


def _no_pending_task(session: str) -> int:
    print(f"agentrt: session {session} has no pending task", file=sys.stderr)
    return EXIT_FAILED


def _no_session(session: str) -> int:
    print(f"agentrt: no session {session}; `agentrt sessions list` shows them", file=sys.stderr)
    return EXIT_FAILED


def _when(stamp: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(stamp))


def _print_sessions(printer: Printer, items: Sequence[SessionItem]) -> int:
    if printer.json_mode:
        for item in items:
            printer.line(dumps(attrs.asdict(item)))
    elif not items:
        printer.line("no sessions")
    else:
        for item in items:
            title = item.title if len(item.title) <= 60 else item.title[:57] + "..."
            pending = f"  [{item.status}]" if item.status else ""
            count = f"{item.messages} message{'' if item.messages == 1 else 's'}"
            printer.line(
                f"{item.session:<20} {_when(item.updated_at)}  {count:>12}  {title}{pending}"
            )
    return EXIT_FINISHED


def _print_conversation(
    printer: Printer,
    item: SessionItem,
    messages: Sequence[SessionMessage],
    usage: tuple[RunTokens, ...] = (),
) -> int:
    if printer.json_mode:
        shown = {
            "session": attrs.asdict(item),
            "usage": {
                **attrs.asdict(TokenCount.total(run.tokens for run in usage)),
                "cost": total_cost(usage),
                "runs": [attrs.asdict(run) for run in usage],
            },
            "messages": [
                message_json(
                    m.seq,
                    m.role,
                    m.content,
                    m.created_at,
                    m.tool_calls,
                    m.tool_call_id,
                    m.name,
                    m.summarised,
                )
                for m in messages
            ],
        }
        printer.line(dumps(shown))
        return EXIT_FINISHED
    printer.line(f"session {item.session}: {item.title}")
    printer.line(
        f"{item.messages} messages, started {_when(item.created_at)}, last {_when(item.updated_at)}"
    )
    for message in messages:
        printer.line("")
        for line in _message_lines(message):
            printer.line(line)
    printer.line("")
    if usage:
        total = TokenCount.total(run.tokens for run in usage)
        printer.line(
            f"tokens: {total.words()} in {total.rounds} rounds of {len(usage)} runs; "
            f"{cost_words(total_cost(usage))}"
        )
        for run in usage:
            printer.line(
                f"  run {run.task_hash} ({run.model}): {run.tokens.words()}, "
                f"{run.tokens.rounds} rounds; {cost_words(run.cost)}"
            )
    if item.status is not None:
        printer.line(f"its pending task is {item.status}: agentrt pending resume {item.session}")
    else:
        printer.line(f"continue it with: agentrt sessions continue {item.session} 'TEXT'")
    return EXIT_FINISHED


def _message_lines(message: SessionMessage) -> list[str]:
    """A stored message as a person reads it: ``>`` the user, ``*`` a call, ``=`` a result."""
    text = message.content.rstrip("\n")
    if message.summarised:
        return [f"({describe_compaction(message.summarised)})"]
    if message.role == "user":
        return ["> " + line if i == 0 else "  " + line for i, line in enumerate(text.split("\n"))]
    if message.role == "tool":
        first = text.splitlines()[0] if text else ""
        more = " ..." if "\n" in text or len(first) > 100 else ""
        return [f"  = {message.name or 'result'}: {first[:100]}{more}"]
    lines = text.split("\n") if text else []
    if message.role != "assistant":
        lines = [f"({message.role}) {line}" for line in lines]
    for call in message.tool_calls:
        args = dumps(call.get("arguments", {}))
        if len(args) > 120:
            args = args[:117] + "..."
        lines.append(f"  * {call.get('name', 'tool')} {args}")
    return lines


# -- where the work happens -----------------------------------------------


Reply = Callable[[Answer | None], Awaitable[None]]


class _Answers:
    """Questions of one run, answered on stdin one at a time, oldest first."""

    def __init__(self, printer: Printer) -> None:
        self.printer = printer
        # The frame class named only as a type: a run here loads no frames until it asks.
        self._send: trio.MemorySendChannel[tuple[AskFrame, Reply]]
        self._receive: trio.MemoryReceiveChannel[tuple[AskFrame, Reply]]
        self._send, self._receive = trio.open_memory_channel(math.inf)

    def put(self, ask: AskFrame, reply: Reply) -> None:
        """Queue a question; `reply(answer)` delivers the answer, `reply(None)` on stdin EOF."""
        self._send.send_nowait((ask, reply))

    async def serve(self, withdrawn: Callable[[str], bool]) -> None:
        """Answer the queued questions in turn; after stdin closed, each gets `reply(None)`."""
        closed = False
        async for ask, reply in self._receive:
            if withdrawn(ask.id):
                continue
            if not closed:
                try:
                    answer = await self.printer.answer(ask)
                except EOFError:
                    closed = True
                    self.printer.stdin_closed()
            if closed:
                # Never a deny: nobody is left to answer, so the run stops with its task kept.
                await reply(None)
            elif not withdrawn(ask.id):
                await reply(answer)


#: What a signal to the command does to its run.
SIGNAL_CAUSES: Final = {
    signal.SIGINT: Cause.USER_CANCEL,
    signal.SIGTERM: Cause.PAUSE,
    signal.SIGHUP: Cause.DISCONNECT,
}


async def _follow_signals(
    received: AsyncIterator[int], cancel: Callable[[Cause], Awaitable[None]]
) -> None:
    async for signum in received:
        await cancel(SIGNAL_CAUSES[signal.Signals(signum)])


async def _signals(cancel: Callable[[Cause], Awaitable[None]]) -> None:
    with trio.open_signal_receiver(*SIGNAL_CAUSES) as received:
        await _follow_signals(received, cancel)


async def _drive_here(
    rt: Runtime, printer: Printer, start: Callable[..., Awaitable[RunEnded]]
) -> int:
    """Run one task in this process, with signal handling and stdin answers.

    `start` is `Executor.run` or `Executor.resume` with all but `emit` given.
    Signals and questions are listened for before the run starts: one that
    comes at once waits for the run to be cancellable instead of being lost.
    """

    async def emit(event: Event) -> None:
        printer.show(event)

    answers = _Answers(printer)
    entries: dict[str, Entry] = {}
    ended: list[RunEnded] = []
    with (
        trio.open_signal_receiver(*SIGNAL_CAUSES) as signals,
        # Only this process's run posts here, so the listener takes every prefix.
        rt.registry.listen("", name="stdin") as listener,
    ):
        async with trio.open_nursery() as nursery:

            async def run(task_status: trio.TaskStatus[TaskInfo]) -> None:
                ended.append(await start(emit=emit, task_status=task_status))
                nursery.cancel_scope.cancel()

            info: TaskInfo = await nursery.start(run)

            async def cancel(cause: Cause) -> None:
                # The run may have ended between the signal and this handler.
                with contextlib.suppress(UnknownTaskError):
                    rt.executor.cancel(info.task_hash, cause)
                await trio.lowlevel.checkpoint()

            async def claim_questions() -> None:
                while True:
                    entry = await listener.claim()
                    entries[entry.id] = entry

                    async def reply(answer: Answer | None, entry: Entry = entry) -> None:
                        if entry.done:
                            pass
                        elif answer is None:
                            # Nobody is left to answer: the run saves the question and stops.
                            entry.fail(NoAnswerComingError("standard input closed"))
                        else:
                            entry.answer(answer)
                        await trio.lowlevel.checkpoint()

                    from ..frontends.terminal.framing import ask_frame

                    answers.put(ask_frame(entry), reply)

            nursery.start_soon(_follow_signals, signals, cancel)
            nursery.start_soon(claim_questions)
            nursery.start_soon(answers.serve, lambda i: i in entries and entries[i].done)
    return exit_status(ended[0])


async def _drive_daemon(
    client: Client, printer: Printer, request: Run | PendingRequest, session: str
) -> int:
    """Send `request` (a run or a resume of `session`) to the daemon; follow the run."""
    from ..protocol.client import BrokenDaemonConnectionError
    from ..protocol.client import ClientError
    from ..protocol.frames import Ack
    from ..protocol.frames import AnswerFrame
    from ..protocol.frames import AskFrame
    from ..protocol.frames import AskWithdrawn
    from ..protocol.frames import Cancel
    from ..protocol.frames import EndedFrame
    from ..protocol.frames import ErrorFrame
    from ..protocol.frames import TaskFrame

    task: list[str] = []
    held: list[Cause] = []
    withdrawn: set[str] = set()
    hung_up = False

    async def cancel(cause: Cause) -> None:
        nonlocal hung_up
        if not task:
            held.append(cause)  # sent once the run's task frame names it
            return
        if cause is Cause.DISCONNECT:
            # Like a closed window: the daemon stops the run, keeps its task and
            # still sends its `ended` frame.
            if not hung_up:
                hung_up = True
                with contextlib.suppress(ClientError):
                    await client.send_eof()
            return
        with contextlib.suppress(ClientError):
            await client.send(Cancel(task[0], cause=cause))

    answers = _Answers(printer)

    def reply_for(ask: AskFrame) -> Reply:
        async def reply(answer: Answer | None) -> None:
            if hung_up:
                return
            # None: nobody is left to answer; the run saves the question and stops.
            frame = (
                AnswerFrame(ask.id, "", unanswerable=True)
                if answer is None
                else AnswerFrame(ask.id, answer.value, secret=answer.secret)
            )
            with contextlib.suppress(ClientError):
                await client.send(frame)

        return reply

    async with trio.open_nursery() as nursery:
        nursery.start_soon(_signals, cancel)
        nursery.start_soon(answers.serve, lambda i: i in withdrawn)
        await client.send(request)
        while True:
            try:
                frame = await client.receive()
            except BrokenDaemonConnectionError:
                print(
                    "agentrt: the daemon closed the connection before the run ended (did it "
                    f"crash?); the task is kept: agentrt pending resume {session}",
                    file=sys.stderr,
                )
                nursery.cancel_scope.cancel()
                return EXIT_FAILED
            if isinstance(frame, AskFrame):
                answers.put(frame, reply_for(frame))
            elif isinstance(frame, AskWithdrawn):
                withdrawn.add(frame.id)
            elif isinstance(frame, ErrorFrame):
                if frame.ref in ("cancel", "answer"):
                    continue  # the run ended first, or the question went away: nothing lost
                nursery.cancel_scope.cancel()
                return _error_status(frame)
            elif isinstance(frame, Ack):
                continue
            else:
                printer.show(frame)
                if isinstance(frame, TaskFrame) and not task:
                    task.append(frame.task_hash)
                    for cause in held:
                        await cancel(cause)
                elif isinstance(frame, EndedFrame):
                    nursery.cancel_scope.cancel()
                    return exit_status(frame)
    raise AssertionError("unreachable")  # pragma: no cover


def _error_status(frame: ErrorFrame) -> int:
    from ..protocol.handshake import ErrorCode

    print(f"agentrt: {frame.message}", file=sys.stderr)
    return EXIT_USAGE if frame.code is ErrorCode.INVALID else EXIT_FAILED


#: How long a command waits for a daemon that holds the state dir but is still
#: starting (or stopping) before it says so.
DAEMON_WAIT = 15.0


async def _connect_daemon(args: argparse.Namespace, settings: Settings) -> Client | None:
    """A connection to the daemon holding the state dir, or None when no daemon holds it.

    With no daemon the command works on the store itself. One that is starting
    up is waited for; one that is stopping is waited out.
    """
    state_dir = settings.state_dir.value
    with trio.move_on_after(DAEMON_WAIT):
        while True:
            info = read_daemon_info(state_dir)
            if info is None or not info.alive():
                if not lock_is_held(state_dir):
                    return None  # no daemon: work here
            elif info.ready:
                _check_same_model(args, info, state_dir)
                # Loaded only when a daemon is there to talk to: a run here has no use for it.
                from ..protocol.client import Client
                from ..protocol.client import DaemonNotRunningError
                from ..protocol.handshake import Scope

                try:
                    return await Client.connect(info.socket, scope=Scope.ALL)
                except DaemonNotRunningError:
                    pass  # stopping, or its socket is not bound yet
            await trio.sleep(0.05)
    raise DaemonUnreachableError(
        f"a daemon holds the state dir {state_dir} but does not answer on its socket"
        + (f" {info.socket} (pid {info.pid})" if info is not None else "")
        + "; wait until it has started (or stopped) and try again, or stop it"
    )


class DaemonUnreachableError(Exception):
    """A daemon holds the state dir but cannot be reached."""


def _check_same_model(args: argparse.Namespace, info: DaemonInfo, state_dir: Path) -> None:
    """Refuse flags that ask for another model or policy than the daemon's: they would be lost."""
    asked = [
        f"{flag} {value}"
        for flag, value in (
            (MODEL, None if args.model == info.model else args.model),
            (BASE_URL, args.base_url),
            (API_KEY_ENV, args.api_key_env),
            (APPROVAL, None if args.approval == info.approval else args.approval),
            (SANDBOX, getattr(args, "sandbox", None)),
        )
        if value is not None
    ]
    if asked:
        raise ValueError(
            f"a daemon (pid {info.pid}, socket {info.socket}) holds the state dir {state_dir} "
            f"and runs tasks with its own model ({info.model}) and approval policy "
            f"({info.approval}), not {' '.join(asked)}; leave out --model, --base-url, "
            "--api-key-env, --approval and --sandbox to use it, or stop that daemon first "
            "('agentrt daemon stop')"
        )


def _workdir(args: argparse.Namespace) -> str:
    return os.fspath((args.workdir or Path.cwd()).resolve())


# -- commands ---------------------------------------------------------------


def _new_session() -> str:
    return f"{TERMINAL}{os.urandom(4).hex()}"


def read_message(text: str) -> str:
    """The message of `agentrt run`: `text`, or all of standard input when `text` is ``-``."""
    if text != "-":
        return text
    message = sys.stdin.read()
    if not message.strip():
        raise ValueError("no message on standard input (agentrt run - reads it from there)")
    # The newline that ends what was piped in is not part of the message.
    return message.removesuffix("\n")


async def _cmd_run(args: argparse.Namespace, settings: Settings) -> int:
    text = read_message(args.text)
    session = args.session or _new_session()
    printer = Printer(args.json)
    client = await _connect_daemon(args, settings)
    if client is not None:
        from ..protocol.frames import Run

        async with client:
            request = Run(text, session, cwd=_workdir(args))
            return await _drive_daemon(client, printer, request, session)
    async with _open(args, settings) as rt:
        # The folder is recorded with the task, as the daemon records it: a resume
        # works there too, wherever it is started from.
        run = partial(rt.executor.run, session, text, owner="cli", workdir=Path(_workdir(args)))
        return await _drive_here(rt, printer, run)


async def _cmd_pending(args: argparse.Namespace, settings: Settings) -> int:
    printer = Printer(args.json)
    client = await _connect_daemon(args, settings)
    if client is not None:
        async with client:
            return await _pending_via_daemon(args, printer, client)
    if args.action in ("list", "show"):
        async with _open_store(settings) as store:
            if args.action == "list":
                if printer.json_mode:
                    from ..frontends.terminal.framing import pending_task

                    listed = await store.list_stored(args.prefix)
                    return _print_list(printer, [pending_task(t) for t in listed])
                return _print_lines(printer, await store.list_lines(args.prefix))
            stored = await store.lookup(args.session)
            if stored is None:
                return _no_pending_task(args.session)
            if isinstance(stored, UnreadableTask):
                raise StoreError(stored.error)
            from ..frontends.terminal.framing import pending_detail

            return _print_detail(printer, pending_detail(stored))
    async with _open(args, settings) as rt:
        if args.action == "discard":
            if not await rt.executor.discard(args.session):
                return _no_pending_task(args.session)
            printer.line(f"discarded the pending task of {args.session}")
            return EXIT_FINISHED
        answer = args.answer if args.action == "answer" else None
        resume = partial(
            rt.executor.resume,
            args.session,
            owner="cli",
            answer=answer,
            question_id=_question_of(args),
            workdir=Path(_workdir(args)),
        )
        return await _drive_here(rt, printer, resume)


async def _pending_via_daemon(args: argparse.Namespace, printer: Printer, client: Client) -> int:
    from ..protocol.frames import Ack
    from ..protocol.frames import ErrorFrame
    from ..protocol.frames import PendingAction
    from ..protocol.frames import PendingDetail
    from ..protocol.frames import PendingRequest

    if args.action in ("resume", "answer"):
        answer = args.answer if args.action == "answer" else None
        request = PendingRequest(
            PendingAction.RESUME,
            args.session,
            answer=answer,
            cwd=_workdir(args),
            question_id=_question_of(args),
        )
        return await _drive_daemon(client, printer, request, args.session)
    action = PendingAction(args.action)
    if action is PendingAction.LIST:
        return await _list_via_daemon(client, printer, args.prefix)
    await client.send(PendingRequest(action, session=args.session))
    while True:
        frame = await client.receive()
        if isinstance(frame, ErrorFrame):
            return _error_status(frame)
        if isinstance(frame, PendingDetail) and action is PendingAction.SHOW:
            return _print_detail(printer, frame)
        if isinstance(frame, Ack) and action is PendingAction.DISCARD:
            printer.line(f"discarded the pending task of {args.session}")
            return EXIT_FINISHED


def _question_of(args: argparse.Namespace) -> str | None:
    """The question ``pending answer --question ID`` names (None: the one the task waits for)."""
    question: str | None = getattr(args, "question", None)
    return question


async def _list_via_daemon(client: Client, printer: Printer, prefix: str) -> int:
    """Every pending task the daemon lists: one request, its pages as they come.

    As text, the daemon sends each task as the line printed (`PendingLines`),
    and only the times are put in here, in this process's time zone.
    """
    from ..protocol.frames import LIST_PAGE_MAX
    from ..protocol.frames import ErrorFrame
    from ..protocol.frames import PendingAction
    from ..protocol.frames import PendingLines
    from ..protocol.frames import PendingList
    from ..protocol.frames import PendingRequest

    as_lines = not printer.json_mode
    tasks: list[PendingTask] = []
    lines: list[str] = []
    await client.send(
        PendingRequest(
            PendingAction.LIST,
            prefix=prefix,
            limit=LIST_PAGE_MAX,
            all_pages=True,
            lines=as_lines,
        )
    )
    wanted = PendingLines if as_lines else PendingList
    while True:
        frame = await client.receive()
        while not isinstance(frame, wanted | ErrorFrame):
            frame = await client.receive()  # an event of another run: not ours to show
        if isinstance(frame, ErrorFrame):
            return _error_status(frame)
        if isinstance(frame, PendingLines):
            lines += map(filled, frame.lines, frame.times)
        else:
            assert isinstance(frame, PendingList)
            tasks += frame.tasks
        if frame.next is None:
            return _print_lines(printer, lines) if as_lines else _print_list(printer, tasks)


async def _cmd_sessions(args: argparse.Namespace, settings: Settings) -> int:
    from ..frontends.terminal.framing import session_item
    from ..protocol.frames import LIST_PAGE_MAX

    printer = Printer(args.json)
    text = read_message(args.text) if args.action == "continue" else ""
    client = await _connect_daemon(args, settings)
    if client is not None:
        async with client:
            return await _sessions_via_daemon(args, printer, client, text)
    if args.action == "list":
        async with _open_store(settings) as listed:
            items: list[SessionItem] = []
            cursor: str | None = None
            while args.limit is None or len(items) < args.limit:
                page = await listed.sessions(args.prefix, limit=LIST_PAGE_MAX, cursor=cursor)
                items += [session_item(info) for info in page.items]
                if page.next is None:
                    break
                cursor = page.next
            return _print_sessions(printer, items[: args.limit])
    if args.action == "show":
        async with _open_store(settings) as store:
            info = await store.session(args.session)
            if info is None:
                return _no_session(args.session)
            return await _show_session(printer, store, info, Prices(settings.prices.value))
    async with _open(args, settings) as rt:
        store = rt.store
        if args.action in ("undo", "turns"):
            return await _undo_here(rt, args, printer)
        info = await store.session(args.session)
        if info is None:
            return _no_session(args.session)
        if args.action == "rm":
            await rt.executor.forget(args.session)
            printer.line(f"removed session {args.session}")
            return EXIT_FINISHED
        if args.action == "compact":
            summarised = await rt.executor.compact(args.session)
            return _print_compacted(printer, args.session, summarised)
        run = partial(
            rt.executor.run, args.session, text, owner="cli", workdir=Path(_workdir(args))
        )
        return await _drive_here(rt, printer, run)


async def _show_session(printer: Printer, store: Store, info: SessionInfo, prices: Prices) -> int:
    """``sessions show`` without a daemon: the session's messages, page by page, and its cost."""
    from ..frontends.terminal.framing import session_item
    from ..frontends.terminal.framing import session_message
    from ..protocol.frames import MESSAGES_PAGE_MAX

    messages: list[SessionMessage] = []
    after = -1
    while True:
        shown = await store.messages(info.session_id, after=after, limit=MESSAGES_PAGE_MAX)
        messages += [session_message(m) for m in shown.items]
        if shown.next is None:
            usage = await store.usage(info.session_id)
            priced = tuple(prices.priced(run) for run in usage)
            return _print_conversation(printer, session_item(info), messages, priced)
        after = int(shown.next)


async def _sessions_via_daemon(
    args: argparse.Namespace, printer: Printer, client: Client, text: str
) -> int:
    from ..protocol.frames import LIST_PAGE_MAX
    from ..protocol.frames import MESSAGES_PAGE_MAX
    from ..protocol.frames import Ack
    from ..protocol.frames import ErrorFrame
    from ..protocol.frames import Run
    from ..protocol.frames import SessionList
    from ..protocol.frames import SessionMessages
    from ..protocol.frames import SessionsAction
    from ..protocol.frames import SessionsRequest
    from ..protocol.frames import TurnList
    from ..protocol.frames import Undone

    async def ask(request: SessionsRequest) -> DaemonFrame:
        await client.send(request)
        return await next_reply()

    async def next_reply() -> DaemonFrame:
        while True:
            frame = await client.receive()
            # An event of another run is not ours to show.
            if isinstance(
                frame, SessionList | SessionMessages | TurnList | Undone | Ack | ErrorFrame
            ):
                return frame

    if args.action == "list":
        # Without a limit, every page comes for one request; with one, a page at a time
        # until there are enough.
        items: list[SessionItem] = []
        listing = SessionsRequest(
            SessionsAction.LIST,
            prefix=args.prefix,
            limit=LIST_PAGE_MAX,
            all_pages=args.limit is None,
        )
        listed = await ask(listing)
        while True:
            if isinstance(listed, ErrorFrame):
                return _error_status(listed)
            assert isinstance(listed, SessionList)
            items += listed.sessions
            if listed.next is None or (args.limit is not None and len(items) >= args.limit):
                break
            if listing.all_pages:
                listed = await next_reply()
            else:
                listed = await ask(attrs.evolve(listing, cursor=listed.next))
        return _print_sessions(printer, items[: args.limit])
    if args.action == "turns":
        listed = await ask(SessionsRequest(SessionsAction.TURNS, args.session))
        if isinstance(listed, ErrorFrame):
            return _error_status(listed)
        assert isinstance(listed, TurnList)
        return _print_turns(printer, listed)
    if args.action == "undo":
        force = args.force
        while True:
            request = SessionsRequest(
                SessionsAction.UNDO, args.session, turn=args.turn, force=force
            )
            undone = await ask(request)
            if isinstance(undone, ErrorFrame):
                return _error_status(undone)
            assert isinstance(undone, Undone)
            status = _print_undone(printer, undone)
            if status != _ASK_AGAIN:
                return status
            force = True
    if args.action == "rm":
        done = await ask(SessionsRequest(SessionsAction.RM, args.session))
        if isinstance(done, ErrorFrame):
            return _error_status(done)
        printer.line(f"removed session {args.session}")
        return EXIT_FINISHED
    if args.action == "compact":
        done = await ask(SessionsRequest(SessionsAction.COMPACT, args.session))
        if isinstance(done, ErrorFrame):
            return _error_status(done)
        assert isinstance(done, Ack)
        printer.line(f"compacted session {args.session}: {done.detail}")
        return EXIT_FINISHED
    messages: list[SessionMessage] = []
    after = -1
    while True:
        # `continue` asks for one message only, to learn that the session is there.
        limit = 1 if args.action == "continue" else MESSAGES_PAGE_MAX
        shown = await ask(
            SessionsRequest(SessionsAction.SHOW, args.session, after=after, limit=limit)
        )
        if isinstance(shown, ErrorFrame):
            return _error_status(shown)
        assert isinstance(shown, SessionMessages)
        if args.action == "continue":
            run = Run(text, args.session, cwd=_workdir(args))
            return await _drive_daemon(client, printer, run, args.session)
        messages += shown.messages
        if shown.next is None:
            return _print_conversation(printer, shown.session, messages, shown.usage)
        after = shown.next


#: What `_print_undone` returns when the person said to go on despite the conflicts.
_ASK_AGAIN = -1


async def _undo_here(rt: Runtime, args: argparse.Namespace, printer: Printer) -> int:
    """``sessions undo`` and ``turns`` on the store itself (no daemon holds the state dir)."""
    from ..protocol.frames import TurnItem
    from ..protocol.frames import TurnList
    from ..protocol.frames import Undone

    executor = rt.executor
    try:
        if args.action == "turns":
            turns = await executor.turns(args.session)
            items = tuple(TurnItem(t.index, t.text, t.files) for t in turns)
            return _print_turns(printer, TurnList(args.session, items))
        force = args.force
        while True:
            result = await executor.undo(args.session, turn=args.turn, force=force)
            frame = Undone(
                args.session,
                result.done,
                result.restored,
                result.conflicts,
                dict(result.kept),
                dict(result.skipped),
            )
            status = _print_undone(printer, frame)
            if status != _ASK_AGAIN:
                return status
            force = True
    except ExecutorError as exc:
        print(f"agentrt: {exc}", file=sys.stderr)
        return EXIT_USAGE if isinstance(exc, ValueError) else EXIT_FAILED


def _print_turns(printer: Printer, listed: TurnList) -> int:
    if printer.json_mode:
        for turn in listed.turns:
            printer.line(dumps({"seq": turn.seq, "text": turn.text, "files": turn.files}))
        return EXIT_FINISHED
    if not listed.turns:
        printer.line("no turns")
    for turn in listed.turns:
        words = turn.text.splitlines()[0] if turn.text else ""
        words = words if len(words) <= 60 else words[:57] + "..."
        printer.line(f"{turn.seq:>5}  {turn.files:>3} file(s) after it  {words}")
    return EXIT_FINISHED


def _print_undone(printer: Printer, frame: Undone) -> int:
    """Show what an undo did; `_ASK_AGAIN` when conflicts stopped it and the person says go on."""
    if printer.json_mode:
        printer.line(dumps(attrs.asdict(frame)))
        return EXIT_FINISHED if frame.done or not frame.conflicts else EXIT_FAILED
    if frame.conflicts and not frame.done:
        printer.line(f"{len(frame.conflicts)} file(s) changed since the run; nothing was undone:")
        for path in frame.conflicts:
            printer.line(f"  {path}")
        if sys.stdin.isatty():
            print("Undo anyway, keeping their newer content beside? [y/N] ", end="", flush=True)
            if sys.stdin.readline().strip().lower() in ("y", "yes"):
                return _ASK_AGAIN
        printer.line("run it again with --force to put them back, their newer content kept beside")
        return EXIT_FAILED
    if not frame.restored and not frame.skipped:
        printer.line("nothing to undo")
        return EXIT_FINISHED
    printer.line(f"put back {len(frame.restored)} path(s):")
    for path in frame.restored:
        kept = frame.kept.get(path)
        printer.line(f"  {path}" + (f" (its newer content kept in {kept})" if kept else ""))
    for call, why in frame.skipped.items():
        printer.line(f"  {call}: cannot be undone: {why}")
    return EXIT_FINISHED


def _open(args: argparse.Namespace, settings: Settings) -> Any:
    settings.check_model()
    return open_runtime(settings=settings, workdir=args.workdir)


def _open_store(settings: Settings) -> AbstractAsyncContextManager[Store]:
    """The task store alone (`open_settings_store`), for a command that only reads it.

    A whole runtime (`_open`) probed bubblewrap (7 ms of `agentrt pending list`
    here) and started every configured MCP server, to stop it again at once. The
    model spec is checked as `_open` checks it, so the refusals stay the same.
    """
    settings.check_model()
    return open_settings_store(settings)


# -- configuration and keys --------------------------------------------------------


def _cmd_config(args: argparse.Namespace, settings: Settings) -> int:
    """``agentrt config show``: every setting, its value and where it came from."""
    settings.check_model()
    daemon = read_daemon_info(settings.state_dir.value)
    if daemon is not None and not daemon.alive():
        daemon = None
    if args.prompt:
        return _show_prompt(args, settings, daemon)
    if args.json:
        _print_with_daemon(settings.as_json(), daemon)
        return EXIT_FINISHED
    # Shown before the columns are measured (the output stream would show them anyway).
    rows = [("SETTING", "VALUE", "FROM"), *(tuple(map(visible, r)) for r in settings.rows())]
    key_width = max(len(r[0]) for r in rows)
    value_width = min(max(len(r[1]) for r in rows), 48)
    for key, value, source in rows:
        print(f"{key:<{key_width}}  {value:<{value_width}}  {source}".rstrip())
    provider = settings.provider
    if provider is not None:
        from ..models.configured import unsent

        ignored = unsent(provider.name, model_options(settings))
        if ignored:
            print(
                f"\nnote: the {provider.name} provider takes no {', '.join(ignored)}: "
                "those settings are not sent with its requests"
            )
    if daemon is not None:
        print(
            f"\na daemon (pid {daemon.pid}) holds the state dir and runs tasks with the model "
            f"{daemon.model} and approval policy {daemon.approval}; `agentrt run` and "
            "`agentrt pending` go through it"
        )
    return EXIT_FINISHED


def _cmd_fleet(args: argparse.Namespace, settings: Settings) -> int:
    """``agentrt fleet status``: the daemons of the store's fleet, read from the database."""
    url = settings.store.value
    if url is None or not is_postgres(url):
        raise ValueError(
            "the store is not PostgreSQL, so there is no fleet: pass --store "
            "postgresql://USER@HOST:PORT/DB (or set AGENTRT_STORE, or store in config.toml)"
        )
    from ..fleet.member import read_status

    status = read_status(url)
    if args.json:
        print(dumps(status.as_json(), indent=2))
        return EXIT_FINISHED
    print(f"fleet of {status.location} (schema version {status.schema_version})")
    if not status.members:
        print("no daemon is in the fleet")
    rows = [("DAEMON", "HOST", "PID", "HTTP", "HEARTBEAT", "LEASE", "TASKS")]
    for m in status.members:
        left = f"{m.lease_left:.1f}s left" if m.live else f"ran out {-m.lease_left:.1f}s ago"
        rows.append(
            (
                m.id.rsplit(":", 1)[-1],
                m.host,
                str(m.pid),
                m.http or "-",
                f"{m.beat_age:.1f}s ago",
                left,
                str(len(m.leases)),
            )
        )
    if status.members:
        shown = [[visible(cell) for cell in row] for row in rows]  # measured as shown
        widths = [max(len(r[i]) for r in shown) for i in range(len(shown[0]))]
        for row in shown:
            print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    leases = [(m.id.rsplit(":", 1)[-1], t) for m in status.members for t in m.leases]
    if leases:
        print("\nleases (running tasks):")
        for member, lease in leases:
            print(f"  {lease.session_id}  task {lease.task_hash or '-'}  held by {member}")
    for lease in status.orphans:
        print(f"  {lease.session_id}  task {lease.task_hash or '-'}  held by no daemon")
    if status.disconnected:
        print(
            f"\n{status.disconnected} task(s) interrupted when their daemon's lease ran out "
            "(cause disconnect): any daemon can resume them"
        )
    return EXIT_FINISHED


def _cmd_keys(args: argparse.Namespace, state_dir: Path) -> int:
    """``agentrt keys set|list|rm``: the key store of the state dir; values are never printed."""
    keys = KeyStore.for_state_dir(state_dir)
    if args.action == "list":
        names = keys.names()
        if args.json:
            print(dumps({"keys": names}))
        elif not names:
            print(f"no keys stored (in {keys.path})")
        else:
            print("\n".join(names))
        return EXIT_FINISHED
    name = check_key_name(args.name)
    if args.action == "rm":
        if not keys.delete(name):
            print(f"agentrt: no key {name} is stored", file=sys.stderr)
            return EXIT_FAILED
        print(f"removed the key {name}")
        return EXIT_FINISHED
    value = _read_key_value(name)
    prepare_state_dir(state_dir)
    keys.put(name, value)
    print(f"stored the key {name} ({len(value)} characters) in {keys.path}")
    if os.environ.get(name, "").strip():
        print(
            f"note: {name} is set in this environment, and the environment comes first: "
            "the stored key is used where it is not set",
            file=sys.stderr,
        )
    return EXIT_FINISHED


def _print_with_daemon(data: dict[str, Any], daemon: DaemonInfo | None) -> None:
    """Print `data` as JSON, with the pid, model and approval policy of the `daemon`."""
    data["daemon"] = (
        None
        if daemon is None
        else {"pid": daemon.pid, "model": daemon.model, "approval": daemon.approval}
    )
    print(dumps(data, indent=2))


def _show_prompt(args: argparse.Namespace, settings: Settings, daemon: DaemonInfo | None) -> int:
    """``agentrt config show --prompt``: the system prompt a run would send, as it is sent."""
    prompt = run_prompt(settings, workdir=_workdir(args))
    limit = f"AGENTS.md files may take {AGENTS_LIMIT // 1024} KiB in all, the nearer first"
    notes = [
        f"{f.path} could not be read: {f.error}"
        if f.error
        else f"{f.path} is left out: none of its {f.size} bytes fit ({limit})"
        if f.sent == 0
        else f"{f.path} is cut to fit: {f.sent} of its {f.size} bytes are in the prompt ({limit})"
        for f in prompt.agents_files
        if f.error or f.cut
    ]
    if daemon is not None:
        notes.append(
            f"a daemon (pid {daemon.pid}) holds the state dir: `agentrt run` goes through it, "
            f"with its model ({daemon.model}), its approval policy ({daemon.approval}) and the "
            "configuration it read when it started"
        )
    if args.json:
        _print_with_daemon(prompt.as_json(), daemon)
    else:
        print(prompt.text)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    return EXIT_FINISHED


def _read_key_value(name: str) -> str:
    """A key's value: typed without echo at a terminal, else all of standard input."""
    if sys.stdin.isatty():
        import getpass  # only at a terminal

        value = getpass.getpass(f"{name} (typing is not shown): ")
    else:
        value = sys.stdin.read()
    value = value.strip()
    if not value:
        raise ValueError(f"no value given for {name}; nothing was stored")
    if "\n" in value or "\r" in value:
        raise ValueError(f"the value for {name} holds a line break; nothing was stored")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `agentrt` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["daemon"] and argv[1:2] in (["status"], ["stop"]):
        from .daemonctl import main as daemonctl_main

        return daemonctl_main(argv[1:])
    if argv and argv[0] == "daemon":
        # Its modules load with the console script's compiled methods still in attrs's
        # place (`agentrt.apps.codecache`); the daemon hands them back once it serves.
        from ..daemon import main as daemon_main

        return daemon_main(argv[1:])
    # Every other command's output is plain text for a person or JSON: control characters
    # in it (a model's, a tool's, a web user's) are shown, never obeyed (`agentrt.vocab.terminal`).
    with shown_output():
        return _command(argv)


def _command(argv: list[str]) -> int:
    if argv and argv[0] == "token":
        from ..http import token_main

        return token_main(argv[1:])
    if argv and argv[0] == "lab":
        from .lab import main as lab_main

        return lab_main(argv[1:])
    parser = build_parser(argv[0] if argv and argv[0] in COMMANDS else None)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    try:
        if args.command == "keys":
            # Keys live in the state dir only: a broken configuration file must not stand
            # in the way of storing the key it lacks.
            return _cmd_keys(args, args.state_dir or default_state_dir())
        settings = load_settings(args)
        if args.command == "config":
            return _cmd_config(args, settings)
        if args.command == "fleet":
            return _cmd_fleet(args, settings)
        if args.command == "mcp":
            from .mcplist import cmd_mcp

            return cmd_mcp(args, settings)
        command = {"run": _cmd_run, "sessions": _cmd_sessions}.get(args.command, _cmd_pending)
        return trio.run(command, args, settings)
    except BaseException as exc:
        error = _user_error(exc)
        if error is None:
            raise
        print(f"agentrt: {error}", file=sys.stderr)
        return EXIT_USAGE if isinstance(error, ValueError) else EXIT_FAILED


def console_main() -> None:
    """The `agentrt` console script: `main`, then an exit that skips the interpreter's teardown.

    By the time `main` returns, the command's store is closed, its threads are
    done and its output written; what is left, tearing down every module and
    object one by one, took a quarter of `agentrt run hello`'s own time (some
    15 ms). Output is flushed first; if that fails (a reader that went away)
    the ordinary exit reports it. Anything but a normal return (``--help``, a
    usage error, a bug's traceback) exits the ordinary way too. A reader that went
    away ends the command quietly with 141, as SIGPIPE would.
    """
    try:
        try:
            code = main()
        finally:
            codecache.end()  # the start's compiled methods, kept for the next start
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (`agentrt config show | head`): quiet, as a command killed by
        # SIGPIPE would be, with its exit status. Nothing more goes to the closed pipe.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        os._exit(128 + signal.SIGPIPE)
    try:
        sys.stderr.flush()
    except (OSError, ValueError):
        sys.exit(code)
    os._exit(code)


def _user_error(exc: BaseException) -> Exception | None:
    """The error to show the user, looking inside exception groups; None for a bug."""
    if isinstance(exc, BaseExceptionGroup):
        for sub in exc.exceptions:
            found = _user_error(sub)
            if found is not None:
                return found
        return None
    client = sys.modules.get("agentrt.client")  # if it was never loaded, none of its errors arose
    if isinstance(
        exc, (ExecutorError, StoreError, StateDirError, DaemonUnreachableError, ValueError)
    ) or (client is not None and isinstance(exc, client.ClientError)):
        return exc
    return None


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

"""The daemon over a real Unix socket: isolation, questions, cancel, pending, bad input."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import stat
from collections.abc import AsyncIterator
from collections.abc import Iterator
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.lowlevel
import trio.testing
from stress._common import TrackedDaemon

from agentrt import Cause
from agentrt import EntryState
from agentrt import Event
from agentrt import Message
from agentrt import Outcome
from agentrt import RequestKind
from agentrt import RunEnded
from agentrt import Runtime
from agentrt import TaskRecord
from agentrt import TaskStatus
from agentrt import TaskStore
from agentrt import open_runtime
from agentrt.agent.preview import resume_preview
from agentrt.agent.sudo import PrivilegedResult
from agentrt.core.errors import ExecutorError
from agentrt.core.pending import RegistryStatistics
from agentrt.daemon import Daemon
from agentrt.daemon import DaemonAlreadyRunningError
from agentrt.daemon import PeerCredentials
from agentrt.daemon import check_peer
from agentrt.daemon import peer_credentials
from agentrt.daemon import serve
from agentrt.frontends.terminal import connection as _connection
from agentrt.frontends.terminal.connection import Connection
from agentrt.models.messages import ModelResponse
from agentrt.models.messages import OnDelta
from agentrt.models.messages import TextDelta
from agentrt.models.messages import ToolSpec
from agentrt.protocol.client import BrokenDaemonConnectionError
from agentrt.protocol.client import Client
from agentrt.protocol.client import HandshakeError
from agentrt.protocol.codec import MAX_FRAME_SIZE
from agentrt.protocol.codec import NEED_DATA
from agentrt.protocol.codec import FrameCodec
from agentrt.protocol.codec import encode
from agentrt.protocol.frames import PROTOCOL_VERSION
from agentrt.protocol.frames import Ack
from agentrt.protocol.frames import AnswerFrame
from agentrt.protocol.frames import AskFrame
from agentrt.protocol.frames import AskWithdrawn
from agentrt.protocol.frames import Cancel
from agentrt.protocol.frames import DaemonFrame
from agentrt.protocol.frames import EndedFrame
from agentrt.protocol.frames import ErrorCode
from agentrt.protocol.frames import ErrorFrame
from agentrt.protocol.frames import Hello
from agentrt.protocol.frames import PendingAction
from agentrt.protocol.frames import PendingDetail
from agentrt.protocol.frames import PendingLines
from agentrt.protocol.frames import PendingList
from agentrt.protocol.frames import PendingPreview
from agentrt.protocol.frames import PendingRequest
from agentrt.protocol.frames import Run
from agentrt.protocol.frames import Scope
from agentrt.protocol.frames import SessionList
from agentrt.protocol.frames import SessionsAction
from agentrt.protocol.frames import SessionsRequest
from agentrt.protocol.frames import TaskFrame
from agentrt.protocol.frames import TextFrame
from agentrt.protocol.frames import VerifyFrame

from .conftest import Recorder
from .conftest import answered_and_finished
from .conftest import insert_unreadable
from .conftest import refused

TIMEOUT = 10


@attrs.define
class FakeVerifier:
    """Accepts the password 'sesame'; never has cached credentials; runs nothing."""

    tried: list[str] = attrs.field(factory=list)

    async def cached(self) -> bool:
        await trio.lowlevel.checkpoint()
        return False

    async def verify(self, password: str) -> bool:
        await trio.lowlevel.checkpoint()
        self.tried.append(password)
        return password == "sesame"

    async def run(self, argv: Sequence[str], stdin: bytes | None = None) -> PrivilegedResult:
        await trio.lowlevel.checkpoint()
        return PrivilegedResult(0, b"")


@pytest.fixture
async def runtime(tmp_path: Path) -> AsyncIterator[Runtime]:
    async with open_runtime(
        tmp_path / "state",
        workdir=tmp_path,
        restricted_paths=[tmp_path / "restricted"],
        verifier=FakeVerifier(),
    ) as rt:
        yield rt


async def connect(daemon: Daemon, window: str | None = None) -> Client:
    return await Client.connect(daemon.socket_path, window=window)


async def collect_until_ended(client: Client) -> list[DaemonFrame]:
    frames: list[DaemonFrame] = []
    while not isinstance(frames[-1] if frames else None, EndedFrame):
        frames.append(await client.receive())
    return frames


async def asked(client: Client, text: str) -> tuple[TaskFrame, AskFrame]:
    """Start a run of `text`; its task frame and its first question."""
    await client.send(Run(text))
    return await client.wait_for(TaskFrame), await client.wait_for(AskFrame)


async def round_trip(client: Client) -> DaemonFrame:
    """The next frame after a `pending list` request: proves what did NOT arrive before it."""
    await client.send(PendingRequest(PendingAction.LIST))
    return await client.receive()


# -- basics ---------------------------------------------------------------


async def test_socket_folder_is_private_and_socket_is_0600(daemon: Daemon) -> None:
    assert stat.S_IMODE(os.stat(daemon.socket_path.parent).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(daemon.socket_path).st_mode) == 0o600


async def test_hello_then_a_run_streams_to_the_end(daemon: Daemon) -> None:
    with trio.fail_after(TIMEOUT):
        async with await connect(daemon, "win-1") as client:
            assert client.welcome is not None
            assert client.welcome.version == PROTOCOL_VERSION
            assert client.welcome.window == "win-1"
            await client.send(Run("hello there"))
            frames = await collect_until_ended(client)
    task = frames[0]
    assert isinstance(task, TaskFrame)
    assert task.session_id.startswith("cli-")
    text = "".join(f.text for f in frames if isinstance(f, TextFrame))
    assert text == "hello there"
    ended = frames[-1]
    assert isinstance(ended, EndedFrame)
    assert ended.outcome is Outcome.FINISHED
    assert ended.task_hash == task.task_hash


async def test_request_before_hello_is_refused_and_hello_still_works(daemon: Daemon) -> None:
    with trio.fail_after(TIMEOUT):
        stream = await trio.open_unix_socket(os.fspath(daemon.socket_path))
        client = Client(stream, "w")
        await client.send(Run("hi"))
        error = await client.receive()
        assert error == ErrorFrame(
            ErrorCode.STATE,
            "a 'run' frame is not allowed in state AWAIT_HELLO: send a hello frame first",
            "run",
        )
        await client.send(Hello(PROTOCOL_VERSION, "w"))
        assert (await client.receive()).TYPE == "hello"
        await client.send(Hello(PROTOCOL_VERSION, "w"))
        again = await client.receive()
        assert isinstance(again, ErrorFrame)
        assert again.code is ErrorCode.STATE
        assert "not allowed in state READY" in again.message
        await client.aclose()


async def test_other_protocol_version_is_refused(daemon: Daemon) -> None:
    with trio.fail_after(TIMEOUT):
        stream = await trio.open_unix_socket(os.fspath(daemon.socket_path))
        client = Client(stream, "w")
        await client.send(Hello(PROTOCOL_VERSION + 1, "w"))
        error = await client.receive()
        assert isinstance(error, ErrorFrame)
        assert error.code is ErrorCode.VERSION
        with pytest.raises(BrokenDaemonConnectionError, match="closed the connection"):
            await client.receive()
        await client.aclose()


async def test_a_window_is_held_by_one_connection(daemon: Daemon) -> None:
    with trio.fail_after(TIMEOUT):
        async with await connect(daemon, "shared"):
            with pytest.raises(HandshakeError, match="another live connection holds this window"):
                await connect(daemon, "shared")
        # Once the first one is gone the window may be used again.
        async with await connect(daemon, "shared") as again:
            assert again.welcome is not None


# -- isolation ----------------------------------------------------------------


async def test_two_windows_cannot_see_answer_or_cancel_each_other(daemon: Daemon) -> None:
    with trio.fail_after(TIMEOUT):
        # B first: its listener waits longest, so it would be first to claim a stray question.
        b = await connect(daemon, "win-b")
        a = await connect(daemon, "win-a")
        task, ask = await asked(a, "ask What colour?")
        assert ask.kind is RequestKind.QUESTION
        assert ask.prompt == "What colour?"
        assert ask.task == task.task_hash

        # B got no question and sees no task of A's.
        listed = await round_trip(b)
        assert listed == PendingList(())

        # B cannot answer A's question ...
        await b.send(AnswerFrame(ask.id, "green"))
        refused = await b.receive()
        assert isinstance(refused, ErrorFrame)
        assert refused.code is ErrorCode.NOT_FOUND
        assert (
            refused.message == f"no question {ask.id!r} is waiting for an answer from this window"
        )

        # ... nor cancel A's task, and the refusal is the one an unknown hash gets.
        await b.send(Cancel(task.task_hash))
        foreign = await b.receive()
        await b.send(Cancel("0123456789ab"))
        unknown = await b.receive()
        assert isinstance(foreign, ErrorFrame)
        assert isinstance(unknown, ErrorFrame)
        assert foreign.code is unknown.code is ErrorCode.NOT_FOUND
        assert foreign.message.replace(task.task_hash, "X") == unknown.message.replace(
            "0123456789ab", "X"
        )
        # ... nor resume or discard it.
        await b.send(PendingRequest(PendingAction.DISCARD, session=task.session_id))
        hidden = await b.receive()
        await b.send(PendingRequest(PendingAction.DISCARD, session="cli-nosuchsession"))
        missing = await b.receive()
        assert isinstance(hidden, ErrorFrame)
        assert isinstance(missing, ErrorFrame)
        assert hidden.message.replace(task.session_id, "X") == missing.message.replace(
            "cli-nosuchsession", "X"
        )

        # A's run is untouched: A answers and it finishes.
        await answered_and_finished(a, ask.id, "blue")
        # B never received anything unasked for.
        assert await round_trip(b) == PendingList(())
        await a.aclose()
        await b.aclose()


async def test_an_answer_is_acknowledged_once_its_run_goes_on_with_it(daemon: Daemon) -> None:
    with trio.fail_after(TIMEOUT):
        async with await connect(daemon) as client:
            task, ask = await asked(client, "ask What colour?")
            await client.send(AnswerFrame(ask.id, "blue"))
            frames = [await client.receive()]
            while not isinstance(frames[-1], EndedFrame):
                frames.append(await client.receive())
    acks = [f for f in frames if isinstance(f, Ack)]
    assert acks == [Ack("answer", "answered; the run goes on", task=task.task_hash)]
    # The acknowledgement comes before anything the resumed run sends.
    assert frames[0] == acks[0]
    assert frames[-1].outcome is Outcome.FINISHED


async def test_answer_must_be_one_of_the_choices(daemon: Daemon, tmp_path: Path) -> None:
    with trio.fail_after(TIMEOUT):
        async with await connect(daemon) as client:
            await client.send(Run(f"write {tmp_path / 'x.txt'} hi"))
            ask = await client.wait_for(AskFrame)
            assert ask.kind is RequestKind.CONFIRM
            await client.send(AnswerFrame(ask.id, "sure"))
            error = await client.receive()
            assert isinstance(error, ErrorFrame)
            assert error.message == f"question {ask.id!r} takes one of: allow, allow_session, deny"
            await client.send(AnswerFrame(ask.id, "allow"))
            ended = await client.wait_for(EndedFrame)
            assert ended.outcome is Outcome.FINISHED
    assert (tmp_path / "x.txt").read_text() == "hi"


# -- disconnect, cancel, pause, pending ------------------------------------------


async def test_disconnect_mid_question_keeps_the_task_and_a_new_window_resumes_it(
    daemon: Daemon, runtime: Runtime
) -> None:
    with trio.fail_after(TIMEOUT):
        a = await connect(daemon, "win-a")
        task, ask = await asked(a, "ask What colour?")
        entry = runtime.registry.waiting_for(task.session_id)[0]
        assert entry.id == ask.id
        await a.aclose()
        state = await entry.wait_done()
        assert state in (EntryState.FAILED, EntryState.WITHDRAWN)
        await daemon.runs.wait_idle()

        record = await runtime.store.load(task.session_id)
        assert record is not None
        assert record.status is TaskStatus.INTERRUPTED
        assert record.cause is Cause.DISCONNECT
        assert runtime.registry.statistics().waiting == 0
        assert runtime.registry.statistics().claimed == 0

        # A new window may see and resume the closed window's task.
        c = await connect(daemon, "win-c")
        listed = await round_trip(c)
        assert isinstance(listed, PendingList)
        [pending] = listed.tasks
        assert pending.session == task.session_id
        assert pending.cause is Cause.DISCONNECT
        assert pending.status == "interrupted"
        assert pending.input == "ask What colour?"

        await c.send(PendingRequest(PendingAction.RESUME, session=task.session_id))
        resumed = await c.wait_for(TaskFrame)
        assert resumed.resumed
        assert resumed.session_id == task.session_id
        again = await c.wait_for(AskFrame)
        assert again.prompt == "What colour?"
        await answered_and_finished(c, again.id, "red")
        assert await runtime.store.load(task.session_id) is None
        await c.aclose()


async def test_withdrawn_question_is_announced(daemon: Daemon) -> None:
    with trio.fail_after(TIMEOUT):
        async with await connect(daemon) as client:
            task, ask = await asked(client, "ask Really?")
            await client.send(Cancel(task.task_hash, Cause.PAUSE))
            frames = await collect_until_ended(client)
    withdrawn = [f for f in frames if isinstance(f, AskWithdrawn)]
    assert [w.id for w in withdrawn] == [ask.id]
    assert Ack("cancel", "pausing; the pending task is kept", task=task.task_hash) in frames


async def test_a_refusal_has_the_code_its_http_status_stands_for(daemon: Daemon) -> None:
    # HTTP answers these 409 and 404; the daemon says "state" and "not_found", never "failed".
    with trio.fail_after(TIMEOUT):
        async with await connect(daemon) as client:
            await client.send(Run("sleep 30"))
            paused = await client.wait_for(TaskFrame)
            await client.send(Cancel(paused.task_hash, Cause.PAUSE))
            await client.wait_for(EndedFrame)
            await client.send(Run("again", paused.session_id))
            exists = await client.wait_for(ErrorFrame)
            assert (exists.code, exists.ref) == (ErrorCode.STATE, "run")
            assert "pending task" in exists.message
            await client.send(PendingRequest(PendingAction.RESUME, "cli-none"))
            missing = await client.wait_for(ErrorFrame)
            assert missing.code is ErrorCode.NOT_FOUND


def test_every_refusal_names_a_frame_code_and_an_http_status() -> None:
    refusals: list[type[ExecutorError]] = [ExecutorError, *ExecutorError.__subclasses__()]
    assert len(refusals) == 14
    for refusal in refusals:
        assert ErrorCode(refusal.frame_code) is not ErrorCode.FAILED or refusal is ExecutorError
        assert 400 <= refusal.http_status < 600
        assert refusal.code


async def test_pause_keeps_the_task_and_cancel_deletes_it(daemon: Daemon, runtime: Runtime) -> None:
    with trio.fail_after(TIMEOUT):
        async with await connect(daemon) as client:
            await client.send(Run("sleep 30"))
            paused = await client.wait_for(TaskFrame)
            await client.send(Cancel(paused.task_hash, Cause.PAUSE))
            ended = await client.wait_for(EndedFrame)
            assert (ended.outcome, ended.cause, ended.pending_kept) == (
                Outcome.CANCELLED,
                Cause.PAUSE,
                True,
            )
            assert await runtime.store.load(paused.session_id) is not None

            await client.send(Run("sleep 30"))
            cancelled = await client.wait_for(TaskFrame)
            await client.send(Cancel(cancelled.task_hash))
            ack = await client.wait_for(Ack)
            assert ack == Ack("cancel", "cancelling", task=cancelled.task_hash)
            ended = await client.wait_for(EndedFrame)
            assert (ended.cause, ended.pending_kept) == (Cause.USER_CANCEL, False)
            assert await runtime.store.load(cancelled.session_id) is None

            # A finished task can no longer be cancelled.
            await client.send(Cancel(cancelled.task_hash))
            late = await client.wait_for(ErrorFrame)
            assert late.code is ErrorCode.NOT_FOUND


async def test_an_older_clients_pause_flag_still_pauses(daemon: Daemon, runtime: Runtime) -> None:
    with trio.fail_after(TIMEOUT):
        async with await connect(daemon) as client:
            await client.send(Run("sleep 30"))
            task = await client.wait_for(TaskFrame)
            line = {"type": "cancel", "task": task.task_hash, "pause": True}
            await client.send_raw(json.dumps(line).encode() + b"\n")
            assert await client.wait_for(Ack) == Ack(
                "cancel", "pausing; the pending task is kept", task=task.task_hash
            )
            ended = await client.wait_for(EndedFrame)
    assert (ended.cause, ended.pending_kept) == (Cause.PAUSE, True)
    assert await runtime.store.load(task.session_id) is not None


async def test_saved_question_is_asked_inline_on_resume(daemon: Daemon, runtime: Runtime) -> None:
    async def ignore(event: Event) -> None:
        await trio.lowlevel.checkpoint()

    with trio.fail_after(TIMEOUT):
        async with await connect(daemon) as client:
            # A run of no live window parks on its question: the open window is not asked.
            parked: RunEnded = await runtime.executor.run(
                "cli-parked", "ask Which branch?", owner=object(), emit=ignore, window_hash="gone"
            )
            assert parked.outcome is Outcome.AWAITING_ANSWER
            listed = await round_trip(client)
            assert isinstance(listed, PendingList)
            [pending] = listed.tasks
            assert (pending.session, pending.question) == ("cli-parked", "Which branch?")
            assert pending.status == "awaiting_answer"
            await client.send(PendingRequest(PendingAction.RESUME, session="cli-parked"))
            ask = await client.wait_for(AskFrame)
            assert ask.prompt == "Which branch?"
            assert ask.session == "cli-parked"
            await answered_and_finished(client, ask.id, "main")


async def test_resume_with_an_answer_and_discard(daemon: Daemon, runtime: Runtime) -> None:
    async def ignore(event: Event) -> None:
        await trio.lowlevel.checkpoint()

    with trio.fail_after(TIMEOUT):
        for session in ("cli-one", "cli-two"):
            await runtime.executor.run(session, "ask Name?", owner=object(), emit=ignore)
        async with await connect(daemon) as client:
            await client.send(PendingRequest(PendingAction.RESUME, session="cli-one", answer="Ada"))
            ended = await client.wait_for(EndedFrame)
            assert ended.text is not None
            assert "You answered: Ada" in ended.text

            await client.send(PendingRequest(PendingAction.DISCARD, session="cli-two"))
            assert await client.receive() == Ack("pending", "discarded", session="cli-two")
            assert await runtime.store.load("cli-two") is None
            assert await round_trip(client) == PendingList(())

            await client.send(PendingRequest(PendingAction.RESUME))
            error = await client.receive()
            assert isinstance(error, ErrorFrame)
            assert error.message == "pending resume needs the session to resume"


async def test_pending_list_hides_tasks_of_other_live_windows(
    daemon: Daemon, runtime: Runtime
) -> None:
    with trio.fail_after(TIMEOUT):
        a = await connect(daemon, "win-a")
        b = await connect(daemon, "win-b")
        await a.send(Run("sleep 30"))
        task = await a.wait_for(TaskFrame)
        await a.send(Cancel(task.task_hash, Cause.PAUSE))
        await a.wait_for(EndedFrame)
        # Paused, A's window still open: A sees it, B does not.
        listed = await round_trip(a)
        assert isinstance(listed, PendingList)
        assert [t.session for t in listed.tasks] == [task.session_id]
        assert await round_trip(b) == PendingList(())
        # As lines too: the window's listing is checked task by task either way.
        await a.send(PendingRequest(PendingAction.LIST, lines=True))
        as_lines = await a.wait_for(PendingLines)
        assert [line.split()[0] for line in as_lines.lines] == [task.session_id]
        await b.send(PendingRequest(PendingAction.LIST, lines=True))
        assert await b.wait_for(PendingLines) == PendingLines()
        await b.send(PendingRequest(PendingAction.RESUME, session=task.session_id))
        refused = await b.receive()
        assert isinstance(refused, ErrorFrame)
        assert refused.code is ErrorCode.NOT_FOUND
        # Once A's window closes, B may take it over.
        await a.aclose()
        listed = await round_trip(b)
        assert isinstance(listed, PendingList)
        assert [t.session for t in listed.tasks] == [task.session_id]
        await b.aclose()


async def test_restricted_path_asks_for_the_password_and_reports_verification(
    daemon: Daemon, runtime: Runtime, tmp_path: Path
) -> None:
    target = tmp_path / "restricted" / "conf"
    with trio.fail_after(TIMEOUT):
        async with await connect(daemon) as client:
            await client.send(Run(f"write {target} x=1"))
            ask = await client.wait_for(AskFrame)
            assert (ask.kind, ask.masked, ask.error) == (RequestKind.PASSWORD, True, None)
            await client.send(AnswerFrame(ask.id, "allow", secret="wrong"))
            verify = await client.wait_for(VerifyFrame)
            assert (verify.ok, verify.attempts_left) == (False, 2)
            again = await client.wait_for(AskFrame)
            assert again.kind is RequestKind.PASSWORD
            assert again.error == verify.message
            await client.send(AnswerFrame(again.id, "allow", secret="sesame"))
            verify = await client.wait_for(VerifyFrame)
            assert verify.ok
            ended = await client.wait_for(EndedFrame)
            assert ended.outcome is Outcome.FINISHED


# -- bad input ----------------------------------------------------------------------


async def test_bad_frames_get_errors_and_the_connection_keeps_working(daemon: Daemon) -> None:
    with trio.fail_after(TIMEOUT):
        async with await connect(daemon) as client, await connect(daemon) as other:
            malformed = await refused(client, b"this is not json")
            assert malformed.code is ErrorCode.MALFORMED

            unknown = await refused(client, b'{"type":"launch"}')
            assert unknown.code is ErrorCode.UNKNOWN_TYPE
            assert "unknown frame type 'launch'" in unknown.message

            missing = await refused(client, b'{"type":"cancel","pause":true}')
            assert missing == ErrorFrame(
                ErrorCode.INVALID,
                "invalid 'cancel' frame: required field missing @ $.task",
                "cancel",
            )

            mistyped = await refused(client, b'{"type":"cancel","task":7}')
            assert "expected string, got int @ $.task" in mistyped.message

            async with trio.open_nursery() as nursery:
                # The daemon reads while we write, so a huge line cannot deadlock us.
                big = b'{"type":"run","text":"' + b"x" * (MAX_FRAME_SIZE + 10) + b'"}\n'
                nursery.start_soon(client.send_raw, big)
                too_large = await client.receive()
            assert isinstance(too_large, ErrorFrame)
            assert too_large.code is ErrorCode.TOO_LARGE

            # Both connections still work.
            await client.send(Run("still here"))
            assert (await client.wait_for(EndedFrame)).outcome is Outcome.FINISHED
            await other.send(Run("me too"))
            assert (await other.wait_for(EndedFrame)).outcome is Outcome.FINISHED


async def test_an_integer_of_5000_digits_gets_an_error_frame_and_the_run_goes_on(
    daemon: Daemon, runtime: Runtime
) -> None:
    with trio.fail_after(TIMEOUT):
        async with await connect(daemon) as client:
            task, ask = await asked(client, "ask Deploy where?")
            await client.send_raw(b'{"type":"cancel","task":"' + task.task_hash.encode() + b'",')
            await client.send_raw(b'"pause":' + b"7" * 5000 + b"}\n")
            refused = await client.receive()
            assert refused == ErrorFrame(
                ErrorCode.MALFORMED,
                "malformed JSON: an integer of 5000 digits is longer than the 4300 digits "
                "accepted; send long numbers as strings",
            )
            # The connection, its run and its question are still there.
            await client.send(AnswerFrame(ask.id, "staging"))
            ended = await client.wait_for(EndedFrame)
            assert ended.outcome is Outcome.FINISHED
            assert ended.text is not None and "staging" in ended.text
        assert await runtime.store.load(task.session_id) is None


async def test_a_peer_that_vanishes_mid_run_does_not_hurt_the_daemon(
    daemon: Daemon, runtime: Runtime
) -> None:
    with trio.fail_after(TIMEOUT):
        client = await connect(daemon)
        await client.send(Run("stream 50"))
        task = await client.wait_for(TaskFrame)
        await client.wait_for(TextFrame)
        await client.aclose()
        await daemon.runs.wait_idle()
        record = await runtime.store.load(task.session_id)
        assert record is not None
        assert record.cause is Cause.DISCONNECT
        async with await connect(daemon) as again:
            await again.send(Run("ok"))
            assert (await again.wait_for(EndedFrame)).outcome is Outcome.FINISHED


class _SlowPauseModel:
    """Says one word, then pauses on a machine so slow that the pause's time ran out
    before it began: the `Cancelled` it raises says its own deadline, not why."""

    name = "slow-pause"

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], on_delta: OnDelta
    ) -> ModelResponse:
        await on_delta(TextDelta("one"))
        await trio.sleep_until(trio.current_time())
        await trio.sleep_forever()


async def test_a_peer_that_vanishes_before_the_first_event_keeps_the_task_as_a_disconnect(
    tmp_path: Path, sock_path: Path
) -> None:
    async with (
        open_runtime(tmp_path / "state", model=_SlowPauseModel(), workdir=tmp_path) as rt,
        trio.open_nursery() as nursery,
    ):
        served = TrackedDaemon(rt, sock_path)  # counts the connections it serves
        await nursery.start(served.serve)
        with trio.fail_after(TIMEOUT):
            for n in range(20):
                client = await connect(served)
                await client.send(Run("hello", session=f"cli-gone{n}"))
                await client.aclose()
            await served.handling.wait_idle()
        assert (served.connections, served.runs.count) == (0, 0)
        kept = {r.session_id: (r.status, r.cause) for r in await rt.store.list(prefix="cli-gone")}
        assert kept == {
            f"cli-gone{n}": (TaskStatus.INTERRUPTED, Cause.DISCONNECT) for n in range(20)
        }
        nursery.cancel_scope.cancel()


# -- the socket ------------------------------------------------------------------------


def test_peer_check_accepts_only_the_same_uid() -> None:
    assert check_peer(PeerCredentials(pid=1, uid=1000, gid=1000), 1000) is None
    refusal = check_peer(PeerCredentials(pid=1, uid=1001, gid=1001), 1000)
    assert refusal is not None
    assert "uid 1001 may not use it" in refusal


def test_peer_credentials_are_read_from_the_kernel() -> None:
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with left, right:
        creds = peer_credentials(left)
    assert (creds.pid, creds.uid, creds.gid) == (os.getpid(), os.getuid(), os.getgid())


async def test_a_client_of_another_uid_is_refused(
    runtime: Runtime, sock_path: Path, nursery: trio.Nursery
) -> None:
    stranger = Daemon(runtime, sock_path, uid=os.getuid() + 1)
    await nursery.start(stranger.serve)
    with trio.fail_after(TIMEOUT):
        stream = await trio.open_unix_socket(os.fspath(sock_path))
        client = Client(stream, "w")
        refused = await client.receive()
        assert isinstance(refused, ErrorFrame)
        assert refused.code is ErrorCode.FORBIDDEN
        with pytest.raises(BrokenDaemonConnectionError, match="closed the connection"):
            await client.receive()
        await client.aclose()
    assert stranger.connections == 0


async def test_a_second_daemon_on_the_same_socket_is_refused(
    daemon: Daemon, runtime: Runtime
) -> None:
    second = Daemon(runtime, daemon.socket_path)
    with pytest.raises(DaemonAlreadyRunningError, match="already running on"):
        await second.serve()
    # The first one is unharmed.
    with trio.fail_after(TIMEOUT):
        async with await connect(daemon) as client:
            assert client.welcome is not None


async def test_a_stale_socket_file_is_replaced(
    runtime: Runtime, sock_path: Path, nursery: trio.Nursery
) -> None:
    sock_path.parent.mkdir(mode=0o700)
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(os.fspath(sock_path))
    dead.close()  # the file stays, nobody listens
    assert stat.S_ISSOCK(os.stat(sock_path).st_mode)
    daemon: Daemon = await nursery.start(serve, sock_path, runtime)
    with trio.fail_after(TIMEOUT):
        async with await connect(daemon) as client:
            assert client.welcome is not None


async def test_the_socket_path_appears_only_once_it_listens(
    runtime: Runtime, sock_path: Path, nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen_at_listen: list[bool] = []
    kind = type(trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM))
    listen = kind.listen

    def watched(self: trio.socket.SocketType, backlog: int = 128) -> None:
        seen_at_listen.append(sock_path.exists())
        listen(self, backlog)

    monkeypatch.setattr(kind, "listen", watched)
    daemon: Daemon = await nursery.start(serve, sock_path, runtime)
    # A client that finds the path connects: the path was not there while nobody listened.
    assert seen_at_listen == [False]
    assert sorted(p.name for p in sock_path.parent.iterdir()) == [
        sock_path.name,
        sock_path.name + ".lock",
    ]
    with trio.fail_after(TIMEOUT):
        async with await connect(daemon) as client:
            assert client.welcome is not None


async def test_shutdown_ends_runs_with_shutdown_and_removes_the_socket(
    daemon: Daemon, runtime: Runtime
) -> None:
    with trio.fail_after(TIMEOUT):
        async with await connect(daemon) as client:
            await client.send(Run("sleep 30"))
            task = await client.wait_for(TaskFrame)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(daemon.shutdown)
                ended = await client.wait_for(EndedFrame)
            assert (ended.cause, ended.pending_kept) == (Cause.SHUTDOWN, True)
    assert not daemon.socket_path.exists()
    record = await runtime.store.load(task.session_id)
    assert record is not None
    assert record.cause is Cause.SHUTDOWN


async def test_a_failure_inside_one_connection_ends_only_that_connection(
    daemon: Daemon,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def broken_list(self: TaskStore, prefix: str = "", **page: object) -> object:
        await trio.lowlevel.checkpoint()
        raise RuntimeError("disk on fire")

    with trio.fail_after(TIMEOUT):
        bystander = await connect(daemon, "bystander")
        await bystander.send(Run("ask Still there?"))
        ask = await bystander.wait_for(AskFrame)

        victim = await connect(daemon, "victim")
        monkeypatch.setattr(TaskStore, "list_page", broken_list)
        await victim.send(PendingRequest(PendingAction.LIST))
        with pytest.raises(BrokenDaemonConnectionError, match="closed the connection"):
            await victim.receive()
        await victim.aclose()
        monkeypatch.undo()
        # The daemon logs the failure once its side of the connection is closed.
        await trio.testing.wait_all_tasks_blocked()
        assert "connection" in caplog.text
        assert "disk on fire" in caplog.text

        # The daemon and the other window carry on.
        await bystander.send(AnswerFrame(ask.id, "yes"))
        ended = await bystander.wait_for(EndedFrame)
        assert ended.outcome is Outcome.FINISHED
        async with await connect(daemon) as fresh:
            assert await round_trip(fresh) == PendingList(())
        await bystander.aclose()


# -- an unreadable record ------------------------------------------------------


async def test_an_unreadable_task_is_listed_and_a_window_can_discard_it(
    daemon: Daemon, runtime: Runtime
) -> None:
    insert_unreadable(runtime.store, "cli-bad")
    with trio.fail_after(TIMEOUT):
        async with await connect(daemon) as client:
            listed = await round_trip(client)
            assert isinstance(listed, PendingList)
            [task] = listed.tasks
            assert (task.session, task.status) == ("cli-bad", "unreadable")
            assert task.error is not None
            assert "agentrt pending discard cli-bad" in task.error
            await client.send(PendingRequest(PendingAction.DISCARD, session="cli-bad"))
            assert await client.receive() == Ack("pending", "discarded", session="cli-bad")
            assert await round_trip(client) == PendingList(())


# -- a client that pipelines -----------------------------------------------------


async def test_a_client_sending_many_requests_before_reading_is_served(daemon: Daemon) -> None:
    """The reader never waits for the peer to read: 20,000 replies fill no deadlock.

    The replies (about 1.6 MB) are more than the socket buffers hold, so a
    daemon that wrote each reply before reading the next request would stop
    reading while this client, still sending, never reads: both would wait.
    """
    count = 20_000
    with trio.fail_after(TIMEOUT * 4):
        async with await connect(daemon, "pipeliner") as client:
            line = encode(Cancel(task="0123456789ab"))
            await client.send_raw(line * count)
            codes = [(await client.receive()) for _ in range(count)]
            assert all(isinstance(f, ErrorFrame) and f.code is ErrorCode.NOT_FOUND for f in codes)
            assert isinstance(await round_trip(client), PendingList)


# -- paged listing -------------------------------------------------------------


async def _save_paused(runtime: Runtime, count: int) -> None:
    """`count` paused tasks, ``cli-00`` on, four to a second (ties: the session id orders them)."""
    for n in range(count):
        await runtime.store.save(
            TaskRecord(
                f"cli-{n:02}",
                f"task {n}",
                (Message.user(f"task {n}"),),
                status=TaskStatus.INTERRUPTED,
                updated_at=float(n // 4),
            )
        )


async def _page_by_page(client: Client, limit: int) -> list[PendingList]:
    """Every page of ``pending list``, a request for each, following the cursors."""
    pages: list[PendingList] = []
    cursor: str | None = None
    while not pages or cursor is not None:
        await client.send(PendingRequest(PendingAction.LIST, limit=limit, cursor=cursor))
        page = await client.receive()
        assert isinstance(page, PendingList)
        pages.append(page)
        cursor = page.next
    return pages


async def test_a_long_pending_list_comes_in_pages_that_cover_every_task_once(
    daemon: Daemon, runtime: Runtime
) -> None:
    await _save_paused(runtime, 45)
    with trio.fail_after(TIMEOUT):
        async with await command(daemon) as client:
            pages = await _page_by_page(client, 10)
            assert all(len(page.tasks) <= 10 for page in pages)
            seen = [t.session for page in pages for t in page.tasks]
            assert len(pages) == 5
            assert sorted(seen) == [f"cli-{n:02}" for n in range(45)]
            assert len(set(seen)) == 45
            # Without a limit the first page holds them all (fewer than the default page).
            whole = await round_trip(client)
            assert isinstance(whole, PendingList) and whole.next is None
            assert [t.session for t in whole.tasks] == seen
            for bad in (
                PendingRequest(PendingAction.LIST, limit=0),
                PendingRequest(PendingAction.LIST, limit=5000),
                PendingRequest(PendingAction.LIST, cursor="not a cursor"),
            ):
                await client.send(bad)
                refused = await client.receive()
                assert isinstance(refused, ErrorFrame) and refused.code is ErrorCode.INVALID
            assert isinstance(await round_trip(client), PendingList), "the connection survives"


async def test_all_pages_answers_one_request_with_every_page_in_order(
    daemon: Daemon, runtime: Runtime
) -> None:
    await _save_paused(runtime, 45)
    with trio.fail_after(TIMEOUT):
        async with await command(daemon) as client:
            paged = await _page_by_page(client, 10)
            # One request; every frame sent after it is answered after its last page.
            await client.send(PendingRequest(PendingAction.LIST, limit=10, all_pages=True))
            await client.send(PendingRequest(PendingAction.SHOW, session="cli-07"))
            streamed = [await client.receive() for _ in paged]
            assert streamed == paged, "the same pages, cursors and all, as asked one by one"
            shown = await client.receive()
            assert isinstance(shown, PendingDetail) and shown.task.session == "cli-07"
            # From a cursor on, and the sessions listing the same way.
            await client.send(
                PendingRequest(PendingAction.LIST, limit=10, cursor=paged[2].next, all_pages=True)
            )
            assert [await client.receive(), await client.receive()] == paged[3:]
            await client.send(SessionsRequest(SessionsAction.LIST, limit=20, all_pages=True))
            sessions = [await client.receive() for _ in range(3)]
            assert all(isinstance(f, SessionList) for f in sessions)
            assert [f.next is None for f in sessions] == [False, False, True]  # type: ignore[union-attr]
            listed = [s.session for f in sessions for s in f.sessions]  # type: ignore[union-attr]
            assert sorted(listed) == [f"cli-{n:02}" for n in range(45)]
            assert isinstance(await round_trip(client), PendingList), "nothing more came"


async def test_a_cancel_is_handled_while_a_request_before_it_is_still_being_handled(
    daemon: Daemon, runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Requests are handled one at a time, in order; a cancel read meanwhile is not queued
    behind them: the run stops and says so while the listing still waits for the store."""
    release = trio.Event()
    listing = trio.Event()
    list_page = type(runtime.store).list_page

    async def slow_list_page(self: Any, *args: Any, **kwargs: Any) -> Any:
        listing.set()
        await release.wait()
        return await list_page(self, *args, **kwargs)

    monkeypatch.setattr(type(runtime.store), "list_page", slow_list_page)
    with trio.fail_after(TIMEOUT):
        async with await connect(daemon) as client:
            await client.send(Run("sleep 30"))
            task = await client.wait_for(TaskFrame)
            await client.send(PendingRequest(PendingAction.LIST))
            await client.send(PendingRequest(PendingAction.LIST))  # queued behind the first
            await listing.wait()
            await client.send(Cancel(task.task_hash, Cause.PAUSE))
            ack = await client.wait_for(Ack)
            ended = await client.wait_for(EndedFrame)
            assert ack == Ack("cancel", "pausing; the pending task is kept", task=task.task_hash)
            assert (ended.cause, ended.pending_kept) == (Cause.PAUSE, True)
            assert not release.is_set()  # the listing is still waiting
            release.set()
            first, second = await client.receive(), await client.receive()
    assert isinstance(first, PendingList) and isinstance(second, PendingList)
    # The second listing was handled after the first and the pause: it lists the paused task.
    assert [t.session for t in second.tasks] == [task.session_id]


async def test_all_pages_waits_for_a_slow_reader_instead_of_queueing_the_listing(
    daemon: Daemon, runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pages bigger than the socket takes, to a client that does not read yet."""
    async with trio.open_nursery() as nursery:
        for n in range(120):
            record = TaskRecord(
                f"cli-{n:03}",
                f"{n:03} " + "x" * 8000,
                (Message.user("x"),),
                status=TaskStatus.INTERRUPTED,
                updated_at=float(n),
            )
            nursery.start_soon(runtime.store.save, record)
    queued: list[tuple[int, int]] = []  # (the frame's size, bytes waiting for the socket after it)
    pages_read = 0
    read_two = trio.Event()
    send_nowait = Connection.send_nowait
    list_page = type(runtime.store).list_page

    def recording_send(
        self: Connection, frame: DaemonFrame, *, linger: bool = False, urgent: bool = False
    ) -> None:
        send_nowait(self, frame, linger=linger, urgent=urgent)
        if isinstance(frame, PendingList):
            queued.append((len(encode(frame)), self._outbox_bytes))

    async def counting_list_page(self: Any, *args: Any, **kwargs: Any) -> Any:
        nonlocal pages_read
        page = await list_page(self, *args, **kwargs)
        pages_read += 1
        if pages_read == 2:
            read_two.set()
        return page

    monkeypatch.setattr(Connection, "send_nowait", recording_send)
    monkeypatch.setattr(type(runtime.store), "list_page", counting_list_page)
    with trio.fail_after(TIMEOUT):
        async with await command(daemon) as client:
            await client.send(PendingRequest(PendingAction.LIST, limit=40, all_pages=True))
            await read_two.wait()
            await trio.testing.wait_all_tasks_blocked()
            # The second page is read, but not sent: the first has not left yet.
            assert len(queued) == 1 and queued[0][1] > 0, queued
            pages = [await client.receive() for _ in range(3)]
    assert [len(p.tasks) for p in pages if isinstance(p, PendingList)] == [40, 40, 40]
    assert len(queued) == 3
    for size, waiting in queued:
        assert waiting <= size, f"a page was queued behind another: {queued}"


# -- the `agentrt` command's scope ------------------------------------------------


async def command(daemon: Daemon) -> Client:
    return await Client.connect(daemon.socket_path, scope=Scope.ALL)


async def test_the_command_scope_sees_every_origin_and_a_window_only_its_own(
    daemon: Daemon, runtime: Runtime
) -> None:
    parked = await runtime.executor.run("chat-1", "ask Name?", owner="web", emit=Recorder())
    assert parked.outcome is Outcome.AWAITING_ANSWER
    with trio.fail_after(TIMEOUT):
        async with await connect(daemon) as window, await command(daemon) as cli:
            assert await round_trip(window) == PendingList(())
            await window.send(PendingRequest(PendingAction.SHOW, session="chat-1"))
            hidden = await window.receive()
            assert isinstance(hidden, ErrorFrame)
            assert hidden.code is ErrorCode.NOT_FOUND

            listed = await round_trip(cli)
            assert isinstance(listed, PendingList)
            assert [(t.session, t.question, t.messages) for t in listed.tasks] == [
                ("chat-1", "Name?", 2)
            ]
            await cli.send(PendingRequest(PendingAction.LIST, prefix="cli-"))
            assert await cli.receive() == PendingList(())
            await cli.send(PendingRequest(PendingAction.SHOW, session="chat-1"))
            shown = await cli.receive()
            assert isinstance(shown, PendingDetail)
            assert shown.task == listed.tasks[0]
            assert [m["role"] for m in shown.transcript] == ["user", "assistant"]
            await cli.send(PendingRequest(PendingAction.SHOW, session="chat-none"))
            assert await cli.receive() == ErrorFrame(
                ErrorCode.NOT_FOUND, "session chat-none has no pending task", "pending"
            )


async def test_a_preview_is_given_to_whoever_may_see_the_task_and_to_no_one_else(
    daemon: Daemon, runtime: Runtime
) -> None:
    parked = await runtime.executor.run("chat-1", "ask Name?", owner="web", emit=Recorder())
    assert parked.outcome is Outcome.AWAITING_ANSWER
    record = await runtime.store.load("chat-1")
    assert record is not None
    with trio.fail_after(TIMEOUT):
        async with await connect(daemon) as window, await command(daemon) as cli:
            replies = []
            for session in ("chat-1", "chat-none"):
                await window.send(PendingRequest(PendingAction.PREVIEW, session=session))
                refused = await window.receive()
                assert isinstance(refused, ErrorFrame)
                replies.append((refused.code, refused.message.replace(session, "S")))
            # A window cannot tell another origin's task from no task at all.
            assert (
                replies[0]
                == replies[1]
                == (
                    ErrorCode.NOT_FOUND,
                    "no pending task of session 'S' is visible to this window",
                )
            )
            await cli.send(PendingRequest(PendingAction.PREVIEW, session="chat-1"))
            previewed = await cli.receive()
            assert previewed == PendingPreview("chat-1", resume_preview(record))
            assert previewed.preview.questions == ("Name?",)
            await cli.send(PendingRequest(PendingAction.PREVIEW))
            unnamed = await cli.receive()
            assert unnamed == ErrorFrame(
                ErrorCode.INVALID, "pending preview needs the session to preview", "pending"
            )
            # pending show carries the same preview beside the transcript.
            await cli.send(PendingRequest(PendingAction.SHOW, session="chat-1"))
            shown = await cli.receive()
            assert isinstance(shown, PendingDetail) and shown.preview == previewed.preview


async def test_a_command_run_gets_its_confirmation_even_with_a_catch_all_listener_open(
    daemon: Daemon, runtime: Runtime, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    with runtime.registry.listen("chat-", name="web") as web, trio.fail_after(TIMEOUT):
        async with await command(daemon) as cli:
            await cli.send(Run("write a.txt hi", session="chat-w", cwd=str(elsewhere)))
            ask = await cli.wait_for(AskFrame)
            assert (ask.session, ask.kind) == ("chat-w", RequestKind.CONFIRM)
            assert web.claim_nowait() is None  # the web page is not asked the command's question
            await cli.send(AnswerFrame(ask.id, "allow"))
            ended = await cli.wait_for(EndedFrame)
    assert ended.outcome is Outcome.FINISHED
    assert (elsewhere / "a.txt").read_text() == "hi"


async def test_a_command_cannot_discard_a_task_another_client_runs(daemon: Daemon) -> None:
    with trio.fail_after(TIMEOUT):
        async with await connect(daemon) as window, await command(daemon) as cli:
            await window.send(Run("sleep 30", session="cli-busy"))
            task = await window.wait_for(TaskFrame)
            await cli.send(PendingRequest(PendingAction.DISCARD, session="cli-busy"))
            refused = await cli.receive()
            assert isinstance(refused, ErrorFrame)
            assert refused.message == (
                f"session cli-busy is running in the daemon (pid {os.getpid()}); pause or stop "
                "it there first"
            )
            assert daemon.runtime.executor.is_running("cli-busy")
            await window.send(Cancel(task.task_hash))
            await window.wait_for(EndedFrame)


async def test_a_run_in_a_folder_that_is_not_one_is_refused(daemon: Daemon) -> None:
    with trio.fail_after(TIMEOUT):
        async with await command(daemon) as cli:
            await cli.send(Run("hi", cwd="relative/path"))
            refused = await cli.receive()
            assert isinstance(refused, ErrorFrame)
            assert refused.code is ErrorCode.INVALID
            assert (
                refused.message == "the working directory 'relative/path' must be an absolute path"
            )


async def test_a_half_closed_connection_stops_its_run_and_still_gets_the_end(
    daemon: Daemon, runtime: Runtime
) -> None:
    with trio.fail_after(TIMEOUT):
        async with await connect(daemon) as client:
            await client.send(Run("sleep 30", session="cli-hup"))
            await client.wait_for(TaskFrame)
            await client.send_eof()
            ended = await client.wait_for(EndedFrame)
    assert (ended.cause, ended.pending_kept) == (Cause.DISCONNECT, True)
    record = await runtime.store.load("cli-hup")
    assert record is not None
    assert record.status is TaskStatus.INTERRUPTED


# -- how frames go out -----------------------------------------------------------


@contextlib.contextmanager
def connection_on_a_socket_pair(
    daemon: Daemon,
) -> Iterator[tuple[Connection, socket.socket]]:
    """A daemon connection on one end of a real socket pair; the other end, non-blocking."""
    ours, theirs = socket.socketpair()
    theirs.setblocking(False)
    with ours, theirs:
        yield Connection(daemon, trio.SocketStream(trio.socket.from_stdlib_socket(ours)), 1), theirs


async def test_a_frame_sent_while_nothing_waits_is_written_in_the_senders_own_turn(
    daemon: Daemon,
) -> None:
    """No hop to the writer task: the peer can read the frame before the sender yields."""
    with connection_on_a_socket_pair(daemon) as (conn, theirs):
        welcome = Ack("answer", "answered; the run goes on", task="0123456789ab")
        conn.send_nowait(welcome)
        assert theirs.recv(65536) == encode(welcome)  # no checkpoint in between


async def test_a_cancels_ack_waits_for_the_frame_after_it_and_both_go_out_in_one_write(
    daemon: Daemon,
) -> None:
    with connection_on_a_socket_pair(daemon) as (conn, theirs):
        ack = Ack("cancel", "pausing; the pending task is kept", task="0123456789ab")
        ended = EndedFrame("0123456789ab", "cli-1", Outcome.CANCELLED, cause=Cause.PAUSE)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(conn._write_loop)
            await trio.testing.wait_all_tasks_blocked()
            await conn.send(ack, linger=True)
            # The ack waits ...
            with pytest.raises(BlockingIOError):
                theirs.recv(65536)
            # ... for the run's final event, sent in the same turn here, and both go out
            # together, in the sender's own turn.
            await conn.send(ended)
            assert theirs.recv(65536) == encode(ack) + encode(ended)

            # An ack nothing follows goes out alone, a turn of the scheduler later.
            await conn.send(ack, linger=True)
            with pytest.raises(BlockingIOError):
                theirs.recv(65536)
            await trio.testing.wait_all_tasks_blocked()
            assert theirs.recv(65536) == encode(ack)
            # Once the writer is idle again, a frame goes straight out.
            conn.send_nowait(ended)
            assert theirs.recv(65536) == encode(ended)
            nursery.cancel_scope.cancel()


async def test_once_the_writer_task_has_written_the_next_frame_goes_straight_out(
    daemon: Daemon,
) -> None:
    """The writer task holds no write open past the bytes it wrote: a run's final event, sent
    right after the writer put its ack out alone, is not left for the writer's next turn."""
    with connection_on_a_socket_pair(daemon) as (conn, theirs):
        ack = Ack("cancel", "pausing; the pending task is kept", task="0123456789ab")
        ended = EndedFrame("0123456789ab", "cli-1", Outcome.CANCELLED, cause=Cause.PAUSE)
        with trio.fail_after(TIMEOUT):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(conn._write_loop)
                await trio.testing.wait_all_tasks_blocked()
                await conn.send(ack, linger=True)
                while True:  # one scheduler turn at a time, until the writer wrote the ack
                    await trio.lowlevel.checkpoint()
                    with contextlib.suppress(BlockingIOError):
                        assert theirs.recv(65536) == encode(ack)
                        break
                conn.send_nowait(ended)
                assert theirs.recv(65536) == encode(ended)  # no checkpoint in between
                nursery.cancel_scope.cancel()


async def test_once_a_frame_the_window_waits_for_is_written_the_daemon_lets_it_run_first(
    daemon: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An ack, an error or a run's end is followed by a yield of the processor, made when the
    peer can already read the frame; a streamed frame, or one left queued, is not."""
    with connection_on_a_socket_pair(daemon) as (conn, theirs):
        readable_at_yield: list[bytes] = []

        def yield_processor() -> None:
            readable_at_yield.append(theirs.recv(1 << 20))

        monkeypatch.setattr(_connection, "_yield_processor", yield_processor)
        text = TextFrame("0123456789ab", "hello")
        conn.send_nowait(text)
        assert readable_at_yield == []
        assert theirs.recv(65536) == encode(text)
        awaited: list[DaemonFrame] = [
            Ack("answer", "answered; the run goes on", task="0123456789ab"),
            ErrorFrame(ErrorCode.NOT_FOUND, "no question 'q9' is waiting", "answer"),
            EndedFrame("0123456789ab", "cli-1", Outcome.CANCELLED, cause=Cause.PAUSE),
        ]
        for frame in awaited:
            conn.send_nowait(frame)
        assert readable_at_yield == [encode(frame) for frame in awaited]
        # A peer that stopped reading: what is left queued is not followed by a yield.
        big = TextFrame("0123456789ab", "x" * 60000)
        while len(readable_at_yield) == len(awaited) and not conn._outbox:
            conn.send_nowait(big)
        conn.send_nowait(awaited[0])
        assert len(readable_at_yield) == len(awaited)


async def drain_frames(
    conn: Connection, theirs: socket.socket, received: bytearray, last: DaemonFrame
) -> list[DaemonFrame]:
    """Run the writer task and read until `last` arrived; every frame read, decoded."""
    codec = FrameCodec.for_client()
    frames: list[DaemonFrame] = []
    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(conn._write_loop)
            codec.feed(bytes(received))
            while not frames or frames[-1] != last:
                item = codec.next_frame()
                if item is NEED_DATA:
                    await trio.testing.wait_all_tasks_blocked()
                    with contextlib.suppress(BlockingIOError):
                        codec.feed(theirs.recv(1 << 20))
                    continue
                assert isinstance(item, DaemonFrame), item
                frames.append(item)
            nursery.cancel_scope.cancel()
    return frames


def fill_socket(conn: Connection, theirs: socket.socket, task: str) -> tuple[str, bytearray]:
    """Send text of run `task` until the socket is full and some is queued; (the text sent,
    the bytes the peer read of it so far)."""
    sent = []
    n = 0
    while not conn._waiting():
        piece = f"{n:06} " + "x" * 2000
        conn.send_nowait(TextFrame(task, piece))
        sent.append(piece)
        n += 1
    received = bytearray()
    with contextlib.suppress(BlockingIOError):
        while chunk := theirs.recv(1 << 20):
            received += chunk
    return "".join(sent), received


def texts_of(frames: Sequence[DaemonFrame], task: str) -> list[str]:
    return [f.text for f in frames if isinstance(f, TextFrame) and f.task_hash == task]


async def test_a_peer_that_stops_reading_gets_its_frames_queued_in_order(daemon: Daemon) -> None:
    """What the socket does not take at once waits, and nothing is written out of order;
    a run's text queued meanwhile reaches the peer whole, in fewer frames."""
    with connection_on_a_socket_pair(daemon) as (conn, theirs):
        early, received = fill_socket(conn, theirs, "0123456789ab")
        pieces = [f"{n:06} " + "y" * 2000 for n in range(400)]  # some 800 KB more
        for piece in pieces:
            conn.send_nowait(TextFrame("0123456789ab", piece))
        last = EndedFrame("0123456789ab", "cli-1", Outcome.FINISHED)
        conn.send_nowait(last)
        frames = await drain_frames(conn, theirs, received, last)
    texts = texts_of(frames, "0123456789ab")
    assert "".join(texts) == early + "".join(pieces)
    assert frames[-1] == last and len(frames) == len(texts) + 1
    # Queued text was joined: 400 pieces of 2 KB, in frames of at most 16 KiB characters.
    assert len([t for t in texts if "y" in t]) < len(pieces) / 4
    assert max(len(t) for t in texts) <= 16 * 1024


async def test_a_control_reply_overtakes_queued_text_and_each_run_keeps_its_order(
    daemon: Daemon,
) -> None:
    """With the peer behind, a cancel's ack goes before the text still queued; each run's
    text stays in order, joined only with its own, and its end comes after all of it."""
    a, b = "aaaaaaaaaaaa", "bbbbbbbbbbbb"
    with connection_on_a_socket_pair(daemon) as (conn, theirs):
        early, received = fill_socket(conn, theirs, a)
        queued: list[DaemonFrame] = [
            TextFrame(a, " a1"),
            TextFrame(b, " b1"),
            TextFrame(b, " b2"),
            TextFrame(a, " a2"),
            TextFrame(a, " a3", agent="sub1"),  # a subagent's text is not joined to its parent's
            TextFrame(a, " a4"),
            EndedFrame(b, "cli-b", Outcome.FINISHED),
            TextFrame(a, " a5"),
        ]
        for frame in queued:
            conn.send_nowait(frame)
        ack = Ack("cancel", "pausing; the pending task is kept", task=a)
        ended = EndedFrame(a, "cli-a", Outcome.CANCELLED, cause=Cause.PAUSE)
        conn.send_nowait(ack, linger=True, urgent=True)
        conn.send_nowait(ended)
        frames = await drain_frames(conn, theirs, received, ended)
    # The ack came before every frame queued before it but not yet written.
    assert frames.index(ack) < frames.index(TextFrame(b, " b1 b2"))
    main = [f.text for f in frames if isinstance(f, TextFrame) and f.task_hash == a and not f.agent]
    assert "".join(main) == early + " a1 a2 a4 a5"
    assert texts_of(frames, b) == [" b1 b2"]  # joined: consecutive pieces of one run
    assert TextFrame(a, " a3", agent="sub1") in frames
    # Runs interleaved as sent, and each run's end after its text.
    order = [
        f
        for f in frames
        if f not in (ack,) and not (isinstance(f, TextFrame) and f.text.startswith("0"))
    ]
    assert order == [
        TextFrame(a, " a1"),
        TextFrame(b, " b1 b2"),
        TextFrame(a, " a2"),
        TextFrame(a, " a3", agent="sub1"),
        TextFrame(a, " a4"),
        EndedFrame(b, "cli-b", Outcome.FINISHED),
        TextFrame(a, " a5"),
        ended,
    ]


# -- a closed window leaves nothing registered -------------------------------------------


async def wait_listeners(runtime: Runtime, count: int) -> None:
    """Wait until the registry has `count` listeners (every task settled in between)."""
    while runtime.registry.statistics().listeners != count:
        await trio.testing.wait_all_tasks_blocked()
        await trio.lowlevel.checkpoint()


@pytest.mark.parametrize("how", ["idle", "mid_question", "many"])
async def test_a_closed_windows_listener_is_unregistered(
    daemon: Daemon, runtime: Runtime, how: str
) -> None:
    baseline = runtime.registry.statistics().listeners
    with trio.fail_after(TIMEOUT):
        windows = 5 if how == "many" else 1
        clients = [await connect(daemon, f"win-{n}") for n in range(windows)]
        for client in clients:
            await round_trip(client)  # the connection is served by now
        # Each open window listens for the questions of its own runs.
        assert runtime.registry.statistics().listeners == baseline + windows
        if how == "mid_question":
            await clients[0].send(Run("ask What colour?"))
            await clients[0].wait_for(AskFrame)
            assert runtime.registry.statistics().claimed == 1
        for client in clients:
            await client.aclose()
        await daemon.runs.wait_idle()
        await wait_listeners(runtime, baseline)
    assert runtime.registry.statistics() == RegistryStatistics(0, 0, baseline)

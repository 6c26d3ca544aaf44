"""Stored secrets never leave in any spelling: encodings, wrapped lines, tool-call arguments.

A prompt-injected model that reads a secret it should not (through a path the
guard did not see) may print it encoded (``base64``, ``xxd -p``, ``rev``,
``fold -w1``) or copy it into a tool call's arguments; the value must then
still be replaced by ``[secret NAME]`` in every event, prompt, saved question
and in the bytes of the task store, while the tool itself gets the real value.
"""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import attrs
import hypothesis
import pytest
import trio
from hypothesis import strategies as st

from agentrt import ALLOW_ONCE
from agentrt import Answer
from agentrt import Entry
from agentrt import Message
from agentrt import ModelResponse
from agentrt import Outcome
from agentrt import RequestKind
from agentrt import Runtime
from agentrt import SecretStore
from agentrt import TaskRecord
from agentrt import TextDelta
from agentrt import TextEvent
from agentrt import ToolCall
from agentrt import ToolCallDelta
from agentrt import ToolCallDeltaEvent
from agentrt import ToolCallEvent
from agentrt import ToolResultEvent
from agentrt.agent.guard import HELD_PREFIX
from agentrt.agent.guard import MIN_REDACTED_LENGTH
from agentrt.agent.guard import Redactor
from agentrt.agent.guard import SecretGoneError
from agentrt.config.keystore import KeyStore
from agentrt.config.secrets import SecretNameError
from agentrt.config.secrets import is_secret_name
from agentrt.core.runtime import HTTP_TOKEN_FILE
from agentrt.models.messages import Redaction
from agentrt.models.messages import Role

from .conftest import FakeVerifier
from .conftest import Recorder
from .conftest import run_answering

LIMIT = 10
#: A value whose base64 holds '+' and '/' in every alignment, so URL-safe base64 differs.
VALUE = "k3y?>>>~~~?>?-canary-value-7f3a9b2e"
NAME = "deploy_key"
LABEL = f"[secret {NAME}]"


@pytest.fixture
def store(tmp_path: Path) -> SecretStore:
    secrets = SecretStore(tmp_path / "secrets")
    secrets.put(NAME, VALUE)
    return secrets


@pytest.fixture
def redactor(store: SecretStore) -> Redactor:
    return Redactor(store.path)


def determined(encoded: str, align: int, size: int) -> tuple[int, int]:
    """Where, in base64 of `align` unknown bytes + `size` known ones, the known bits alone decide.

    Character i carries bits 6i..6i+5 of the stream; the value's bits are
    8*align .. 8*(align+size)-1.
    """
    chars = [
        i for i in range(len(encoded)) if 6 * i >= 8 * align and 6 * i + 6 <= 8 * (align + size)
    ]
    return chars[0], chars[-1] + 1


def run(command: list[str], data: bytes) -> str:
    return subprocess.run(command, input=data, capture_output=True, check=True).stdout.decode()


def test_a_redactor_in_use_spells_no_secret_in_its_repr(redactor: Redactor) -> None:
    assert redactor.redact(f"key: {VALUE}") == f"key: {LABEL}"
    shown = repr(redactor)
    assert VALUE not in shown
    assert VALUE[: len(VALUE) // 2] not in shown  # nor the search's pieces of it


# -- encodings -------------------------------------------------------------------------------


@pytest.mark.parametrize("urlsafe", [False, True], ids=["standard", "urlsafe"])
@pytest.mark.parametrize("align", [0, 1, 2])
def test_base64_in_each_alignment_loses_every_character_the_value_decides(
    redactor: Redactor, align: int, urlsafe: bool
) -> None:
    data = b"\x00\xff"[:align] + VALUE.encode() + b"\n"
    encode = base64.urlsafe_b64encode if urlsafe else base64.b64encode
    encoded = encode(data).decode()
    assert ("-" in encoded or "_" in encoded) is urlsafe or not urlsafe
    first, end = determined(encoded, align, len(VALUE))
    assert redactor.redact(encoded) == encoded[:first] + LABEL + encoded[end:]


@pytest.mark.parametrize("align", [0, 1, 2])
def test_base64_wrapped_at_76_columns_by_the_base64_tool(redactor: Redactor, align: int) -> None:
    # Long enough to wrap: the value sits across a line break of `base64`'s output.
    before = os.urandom(50 + align)
    output = run(["base64"], before + VALUE.encode() + b"\n")
    assert "\n" in output.strip()
    redacted = redactor.redact(output)
    assert LABEL in redacted
    flat = output.replace("\n", "")
    first, end = determined(flat, len(before), len(VALUE))
    assert flat[first:end] not in redacted.replace("\n", "")
    # Only the value's own characters went: the rest is there, line breaks aside.
    left = redacted.replace("\n", "").replace(LABEL, "")
    assert len(left) == len(flat) - (end - first)


def test_url_safe_base64_is_found_as_basenc_prints_it(redactor: Redactor) -> None:
    output = run(["basenc", "--base64url"], VALUE.encode())
    assert "_" in output or "-" in output
    assert redactor.redact(output).strip().startswith(LABEL)


@pytest.mark.parametrize("upper", [False, True], ids=["lower", "upper"])
def test_hex_in_either_case_unwrapped(redactor: Redactor, upper: bool) -> None:
    text = VALUE.encode().hex()
    text = text.upper() if upper else text
    assert redactor.redact(f"dump: {text}0a") == f"dump: {LABEL}0a"


@pytest.mark.parametrize("upper", [False, True], ids=["lower", "upper"])
def test_hex_wrapped_at_60_columns_by_xxd(redactor: Redactor, upper: bool) -> None:
    output = run(["xxd", "-p"], os.urandom(20) + VALUE.encode() + b"\n")
    output = output.upper() if upper else output
    assert "\n" in output.strip()
    redacted = redactor.redact(output)
    assert LABEL in redacted
    hexed = VALUE.encode().hex()
    assert (hexed.upper() if upper else hexed) not in redacted.replace("\n", "")


def test_hex_as_od_spaces_it(redactor: Redactor) -> None:
    output = run(["od", "-An", "-tx1"], VALUE.encode())
    assert redactor.redact(output).strip() == LABEL


def test_reversed_by_rev(redactor: Redactor) -> None:
    output = run(["rev"], VALUE.encode() + b"\n")
    assert output == VALUE[::-1] + "\n"
    assert redactor.redact(output) == LABEL + "\n"


def test_one_character_a_line_by_fold(redactor: Redactor) -> None:
    output = run(["fold", "-w1"], VALUE.encode() + b"\n")
    assert redactor.redact(output) == LABEL + "\n"


def test_plain_value_as_before_and_within_a_json_string(
    redactor: Redactor, store: SecretStore
) -> None:
    assert redactor.redact(f"key={VALUE};") == f"key={LABEL};"
    store.put("quoted", 'pa"ss\\word')
    assert redactor.redact('{"p": "pa\\"ss\\\\word"}') == '{"p": "[secret quoted]"}'


def test_values_shorter_than_the_minimum_stay_unsearched_in_every_spelling(
    redactor: Redactor, store: SecretStore
) -> None:
    short = "q" * (MIN_REDACTED_LENGTH - 1)
    store.put("short", short)
    encoded = base64.b64encode(short.encode()).decode()
    text = f"{short} {encoded} {short.encode().hex()}"
    assert redactor.redact(text) == text
    store.put("short", short + "z")
    assert "[secret short]" in redactor.redact(short + "z")


def test_keys_and_the_http_token_are_found_encoded_too(tmp_path: Path) -> None:
    state = tmp_path / "state"
    KeyStore.for_state_dir(state).put("OPENAI_API_KEY", "sk-live-0123456789abcdef")
    (state / HTTP_TOKEN_FILE).write_text("tok-canary-1c2d3e4f\n")
    redactor = Redactor.for_state_dir(state)
    key = base64.b64encode(b"x" + b"sk-live-0123456789abcdef").decode()
    token = b"tok-canary-1c2d3e4f".hex().upper()
    redacted = redactor.redact(f"{key} {token}")
    assert "[secret OPENAI_API_KEY]" in redacted
    assert "[secret http-token]" in redacted
    assert "sk-live" not in redacted


@attrs.define
class HeldClock:
    """A clock that moves only when told: the redactor's checks happen when the test says."""

    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


def counting_file_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the `os` calls that ask the file system (stat, listdir, open), as made."""
    calls: list[str] = []
    for name in ("stat", "listdir", "open"):
        real = getattr(os, name)

        def counted(*args: Any, _real: Any = real, _name: str = name, **kw: Any) -> Any:
            calls.append(_name)
            return _real(*args, **kw)

        monkeypatch.setattr(os, name, counted)
    return calls


def put_from_another_process(folder: Path, name: str, value: str) -> None:
    """Store a secret as ``agentrt secrets set`` beside a daemon would: another process."""
    code = (
        "import sys; from agentrt import SecretStore; SecretStore(sys.argv[1]).put(*sys.argv[2:])"
    )
    subprocess.run([sys.executable, "-c", code, str(folder), name, value], check=True)


def test_the_search_is_compiled_once_per_change_and_a_redaction_asks_the_file_system_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "state"
    SecretStore(state / "secrets").put(NAME, VALUE)
    redactor = attrs.evolve(Redactor.for_state_dir(state), clock=HeldClock())
    assert redactor.redact(VALUE) == LABEL
    calls = counting_file_calls(monkeypatch)
    for _ in range(100):
        assert redactor.redact(f"a delta {VALUE[::-1]}") == f"a delta {LABEL}"
    assert calls == []
    # A write of this process is seen at the next piece, the clock still held.
    SecretStore(state / "secrets").put("other", "another-value-99")
    calls.clear()
    assert redactor.redact("another-value-99") == "[secret other]"
    assert "listdir" in calls
    calls.clear()
    KeyStore.for_state_dir(state).put("OPENAI_API_KEY", "sk-live-0123456789abcdef")
    assert redactor.redact("sk-live-0123456789abcdef") == "[secret OPENAI_API_KEY]"
    assert KeyStore.for_state_dir(state).delete("OPENAI_API_KEY")
    assert redactor.redact("sk-live-0123456789abcdef") == "sk-live-0123456789abcdef"
    assert "listdir" in calls


def test_a_secret_stored_by_another_process_is_redacted_once_the_recheck_is_due(
    tmp_path: Path,
) -> None:
    store = SecretStore(tmp_path / "secrets")
    store.put(NAME, VALUE)
    clock = HeldClock()
    redactor = Redactor(store.path, clock=clock)
    assert redactor.redact(VALUE) == LABEL
    put_from_another_process(store.path, "late", "late-canary-5e6f7a8b")
    # Within the recheck interval, nothing asks the file system (this is the bound on lateness).
    clock.now += redactor.recheck / 2
    assert redactor.redact("late-canary-5e6f7a8b") == "late-canary-5e6f7a8b"
    clock.now += redactor.recheck
    assert redactor.redact("late-canary-5e6f7a8b") == "[secret late]"
    # And a refresh (a run's start) asks at once, the clock held.
    put_from_another_process(store.path, "later", "later-canary-9c0d1e2f")
    redactor.refresh()
    assert redactor.redact("later-canary-9c0d1e2f") == "[secret later]"


async def test_a_run_hides_a_secret_another_process_stored_just_before_it(
    runtime: Runtime,
) -> None:
    redactor = runtime.executor.config.redactor
    # Checks for other processes' writes as good as never, but for the run's start.
    redactor.recheck = 1e9
    assert redactor.redact(VALUE) == VALUE
    put_from_another_process(runtime.secrets.path, NAME, VALUE)
    recorder = Recorder()
    ended = await runtime.executor.run("cli-late", f"say {VALUE}", owner=object(), emit=recorder)
    assert ended.outcome is Outcome.FINISHED
    assert VALUE in f"say {VALUE}" and LABEL in recorder.text()
    assert VALUE not in repr(recorder.events)
    assert VALUE.encode() not in db_bytes(runtime)


# -- one name rule ---------------------------------------------------------------------------


def test_a_name_with_a_leading_dot_is_refused_when_stored(tmp_path: Path) -> None:
    secrets = SecretStore(tmp_path / "secrets")
    with pytest.raises(
        SecretNameError, match=r"invalid secret name '\.hid'.*not starting with '\.'"
    ):
        secrets.put(".hid", VALUE)
    assert list(secrets.path.iterdir()) == []


def test_the_stores_temporary_files_are_never_taken_for_secrets(
    store: SecretStore, redactor: Redactor
) -> None:
    # A write that died between creating its temporary file and renaming it.
    (store.path / f".{NAME}.tmp").write_text("half-written-value")
    assert not is_secret_name(f".{NAME}.tmp")
    assert [name for name, _ in redactor.values()] == [NAME]


@hypothesis.settings(max_examples=60, deadline=None)
@hypothesis.given(name=st.text(alphabet="ab.-_ /\\\n0Z", min_size=0, max_size=8))
def test_every_name_the_store_accepts_is_one_the_redactor_reads(name: str) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        secrets = SecretStore(Path(folder) / "secrets")
        try:
            secrets.put(name, VALUE)
        except SecretNameError:
            assert not is_secret_name(name)
            return
        assert is_secret_name(name)
        assert Redactor(secrets.path).redact(VALUE) == f"[secret {name}]"


async def test_store_secret_refuses_a_leading_dot_before_asking(runtime: Runtime) -> None:
    asked: list[Entry] = []
    recorder = await allowing_run(runtime, "cli-dot", "secret .hid", asked)
    (result,) = recorder.of(ToolResultEvent)
    assert not result.ok
    assert "not starting with '.'" in result.preview
    assert asked == []


# -- arguments: seal and restore --------------------------------------------------------------


def test_sealing_whole_values_can_be_undone_by_name(redactor: Redactor) -> None:
    sealed, how = redactor.seal_arguments({"command": f"curl -H 'k: {VALUE}'", "n": 3})
    assert (sealed, how) == ({"command": f"curl -H 'k: {LABEL}'", "n": 3}, Redaction.NAMED)
    assert redactor.restore_arguments(sealed) == {"command": f"curl -H 'k: {VALUE}'", "n": 3}


@pytest.mark.parametrize(
    "argument",
    [
        base64.b64encode(VALUE.encode()).decode(),
        VALUE[::-1],
        "\n".join(VALUE),
        f"[secret {NAME}] is {VALUE}",  # a label the model wrote must never become a value
    ],
    ids=["base64", "reversed", "wrapped", "beside-a-label"],
)
def test_sealing_another_spelling_is_marked_lost(redactor: Redactor, argument: str) -> None:
    sealed, how = redactor.seal_arguments({"content": argument})
    assert how is Redaction.LOST
    assert VALUE not in str(sealed) and LABEL in sealed["content"]


def test_a_label_alone_is_left_as_the_model_wrote_it(redactor: Redactor) -> None:
    assert redactor.seal_arguments({"c": LABEL}) == ({"c": LABEL}, Redaction.NONE)


def test_restoring_a_secret_that_is_gone_names_it(redactor: Redactor, store: SecretStore) -> None:
    store.delete(NAME)
    with pytest.raises(SecretGoneError, match=NAME):
        redactor.restore_arguments({"c": LABEL})


# -- a run: events, prompts, saved questions, the store's bytes -------------------------------


def db_bytes(runtime: Runtime) -> bytes:
    """Every byte of the SQLite store, its write-ahead log included."""
    state = runtime.state_dir
    return b"".join(p.read_bytes() for p in sorted(state.glob("tasks.db*")))


async def allowing_run(
    runtime: Runtime,
    session: str,
    text: str,
    asked: list[Entry],
    seen: list[Any] | None = None,
    answer: Answer | None = None,
) -> Recorder:
    """Run `text`, allowing every confirmation; what was asked and saved meanwhile is kept."""

    async def give(entry: Entry) -> Answer:
        asked.append(entry)
        if seen is not None:
            record = await runtime.store.load(session)
            seen.append(record.question if record else None)
            seen.append(db_bytes(runtime))
        return answer or Answer(ALLOW_ONCE)

    _, recorder = await run_answering(runtime, session, text, give, LIMIT)
    return recorder


@pytest.fixture
def planted(runtime: Runtime) -> str:
    runtime.secrets.put(NAME, VALUE)
    return VALUE


async def test_a_secret_in_a_tool_call_is_hidden_everywhere_but_reaches_the_tool(
    runtime: Runtime, planted: str, workdir: Path
) -> None:
    asked: list[Entry] = []
    seen: list[Any] = []
    recorder = await allowing_run(runtime, "cli-arg", f"write {VALUE}.txt {VALUE}", asked, seen)
    # The tool got the real value, in its path and its content.
    assert (workdir / f"{VALUE}.txt").read_text() == VALUE
    (event,) = recorder.of(ToolCallEvent)
    assert event.arguments == {"path": f"{LABEL}.txt", "content": LABEL}
    (entry,) = asked
    assert entry.request.kind is RequestKind.CONFIRM
    assert entry.request.prompt == f"write {len(VALUE)} bytes to {workdir / LABEL}.txt"
    question, stored_then = seen
    assert question is not None and question.prompt == entry.request.prompt
    assert VALUE.encode() not in stored_then
    assert VALUE not in repr(recorder.events)
    assert VALUE.encode() not in db_bytes(runtime)
    history = await runtime.store.load_history("cli-arg")
    (call,) = next(m for m in history if m.role is Role.ASSISTANT and m.tool_calls).tool_calls
    assert call.arguments == {"path": f"{LABEL}.txt", "content": LABEL}
    assert call.redaction is Redaction.NAMED


async def test_a_password_prompt_hides_a_secret_in_the_path(
    runtime: Runtime, planted: str, tmp_path: Path, verifier: FakeVerifier
) -> None:
    (tmp_path / "restricted").mkdir()
    asked: list[Entry] = []
    seen: list[Any] = []
    await allowing_run(
        runtime,
        "cli-pw",
        f"write {tmp_path / 'restricted' / VALUE} x",
        asked,
        seen,
        Answer(ALLOW_ONCE, secret=verifier.password),
    )
    (entry,) = asked
    assert entry.request.kind is RequestKind.PASSWORD
    assert LABEL in entry.request.prompt and VALUE not in entry.request.prompt
    assert seen[0].prompt == entry.request.prompt
    assert (tmp_path / "restricted" / VALUE).read_text() == "x"
    assert VALUE.encode() not in db_bytes(runtime)


async def test_a_shell_confirmation_hides_a_secret_in_the_command(
    runtime: Runtime, planted: str
) -> None:
    asked: list[Entry] = []
    await allowing_run(runtime, "cli-sh", f"sh echo {VALUE} > out.txt", asked)
    (entry,) = asked
    assert entry.request.prompt.startswith(f"run: echo {LABEL}")
    assert VALUE not in entry.request.prompt


class StreamingCalls:
    """A model that streams one write_file call's arguments, then answers."""

    name = "streaming-calls"

    async def complete(self, messages: Any, tools: Any, on_delta: Any) -> ModelResponse:
        if any(m.role is Role.TOOL for m in messages):
            return ModelResponse("done")
        text = f'{{"path": "streamed.txt", "content": "{VALUE}"}}'
        await on_delta(ToolCallDelta(0, "c1", "write_file"))
        await on_delta(ToolCallDelta(0, arguments=text))
        call = ToolCall("c1", "write_file", {"path": "streamed.txt", "content": VALUE})
        return ModelResponse("", (call,))


async def test_streamed_tool_call_arguments_hide_a_secret(
    runtime: Runtime, planted: str, workdir: Path
) -> None:
    runtime.executor.model = StreamingCalls()
    asked: list[Entry] = []
    recorder = await allowing_run(runtime, "cli-stream", "go", asked)
    pieces = [e.arguments for e in recorder.of(ToolCallDeltaEvent)]
    assert pieces == ["", f'{{"path": "streamed.txt", "content": "{LABEL}"}}']
    assert (workdir / "streamed.txt").read_text() == VALUE
    assert VALUE not in repr(recorder.events)


def streamed(redactor: Redactor, pieces: list[str]) -> list[str]:
    """What a run shows of `pieces`, streamed one by one: each shown part, then the held end."""
    shown, held = [], ""
    for piece in pieces:
        part, held = redactor.redact_piece(piece, held)
        shown.append(part)
    return [*shown, redactor.redact(held)]


@pytest.mark.parametrize(
    "spelling",
    [VALUE, VALUE[::-1], VALUE.encode().hex().upper(), base64.b64encode(VALUE.encode()).decode()],
    ids=["plain", "reversed", "hex", "base64"],
)
def test_a_secret_cut_across_streamed_pieces_is_found_whole(
    redactor: Redactor, spelling: str
) -> None:
    text = f"it is {spelling} now"
    whole = redactor.redact(text)
    assert spelling not in whole
    cuts = [
        [text[:i], text[i:j], text[j:]] for i in range(len(text)) for j in range(i, len(text), 5)
    ]
    cuts += [[text[i : i + size] for i in range(0, len(text), size)] for size in range(1, 9)]
    for pieces in cuts:
        shown = streamed(redactor, pieces)
        assert "".join(shown) == whole, pieces
        # Nothing of the value shows before the rest of it is in: no part ends in its beginning.
        assert not any(part.endswith(spelling[:6]) for part in shown), pieces


def test_a_held_end_is_let_go_once_the_text_goes_another_way(redactor: Redactor) -> None:
    assert redactor.redact_piece("plain words.") == ("plain words.", "")
    shown, held = redactor.redact_piece(f"key {VALUE[:5]}")
    assert (shown, held) == ("key ", VALUE[:5])
    assert redactor.redact_piece(" and more.", held) == (f"{VALUE[:5]} and more.", "")
    # A long beginning is held whatever follows, while the rest of the value could still come.
    long_start = VALUE[: HELD_PREFIX + 2]
    assert redactor.redact_piece(long_start + " then text") == ("", long_start + " then text")
    text = long_start + " then text" + "." * (5 * len(VALUE))
    assert redactor.redact_piece(text) == (text, "")
    # Completed later, it is found whole.
    shown, held = redactor.redact_piece(long_start)
    assert (shown, held) == ("", long_start)
    assert redactor.redact_piece(VALUE[HELD_PREFIX + 2 :] + ".", held) == (f"{LABEL}.", "")


class SplitText:
    """A model that streams its reply with a secret cut across two pieces."""

    name = "split-text"

    async def complete(self, messages: Any, tools: Any, on_delta: Any) -> ModelResponse:
        pieces = ["the key is ", VALUE[:9], VALUE[9:20], f"{VALUE[20:]}, keep it"]
        for piece in pieces:
            await on_delta(TextDelta(piece))
        return ModelResponse("".join(pieces))


async def test_a_secret_cut_across_streamed_deltas_never_reaches_a_text_event(
    runtime: Runtime, planted: str
) -> None:
    runtime.executor.model = SplitText()
    recorder = Recorder()
    with trio.fail_after(LIMIT):
        ended = await runtime.executor.run("cli-split", "go", owner=object(), emit=recorder)
    assert ended.outcome is Outcome.FINISHED
    texts = [e.text for e in recorder.of(TextEvent)]
    assert "".join(texts) == f"the key is {LABEL}, keep it"
    assert not any(VALUE[:6] in t for t in texts)
    assert VALUE not in repr(recorder.events)
    assert VALUE.encode() not in db_bytes(runtime)


class Watching:
    """The scripted model, with every list of messages it was given kept."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name
        self.seen: list[list[Message]] = []

    async def complete(self, messages: Any, tools: Any, on_delta: Any) -> Any:
        self.seen.append(list(messages))
        return await self.inner.complete(messages, tools, on_delta)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def park(runtime: Runtime, session: str, text: str) -> TaskRecord:
    """Run `text` until it waits for an answer; the saved record, which never holds the value."""
    with trio.fail_after(LIMIT):
        ended = await runtime.executor.run(session, text, owner="t", emit=Recorder())
    assert ended.outcome is Outcome.AWAITING_ANSWER
    assert VALUE.encode() not in db_bytes(runtime)
    record = await runtime.store.load(session)
    assert record is not None and record.question is not None
    return record


async def test_a_parked_confirmation_saves_its_prompt_redacted(
    runtime: Runtime, planted: str, workdir: Path
) -> None:
    question = (await park(runtime, "chat-prompt", f"write {VALUE}.txt x")).question
    assert question is not None
    assert question.kind is RequestKind.CONFIRM
    assert question.prompt == f"write 1 bytes to {workdir / LABEL}.txt"


async def test_a_resumed_call_runs_with_the_real_value_while_the_model_reads_the_label(
    runtime: Runtime, planted: str, workdir: Path
) -> None:
    record = await park(runtime, "chat-resume", f"write out.txt {VALUE}")
    (call,) = record.unanswered_calls()
    assert call.arguments["content"] == LABEL
    watching = Watching(runtime.executor.model)
    runtime.executor.model = watching
    resumed = Recorder()
    with trio.fail_after(LIMIT):
        ended = await runtime.executor.resume(
            "chat-resume", answer=ALLOW_ONCE, owner="t", emit=resumed
        )
    assert ended.outcome is Outcome.FINISHED
    assert (workdir / "out.txt").read_text() == VALUE
    (result,) = resumed.of(ToolResultEvent)
    assert result.ok
    told = [c.arguments for m in watching.seen[-1] for c in m.tool_calls]
    assert told == [{"path": "out.txt", "content": LABEL}]
    assert VALUE not in repr(resumed.events)
    assert VALUE.encode() not in db_bytes(runtime)


async def test_a_resumed_call_whose_secret_is_gone_is_refused(
    runtime: Runtime, planted: str, workdir: Path
) -> None:
    await park(runtime, "chat-gone", f"write out.txt {VALUE}")
    runtime.secrets.delete(NAME)
    resumed = Recorder()
    with trio.fail_after(LIMIT):
        await runtime.executor.resume("chat-gone", answer=ALLOW_ONCE, owner="t", emit=resumed)
    (result,) = resumed.of(ToolResultEvent)
    assert not result.ok
    assert f"holds secret {NAME!r}, which is no longer stored" in result.preview
    assert not (workdir / "out.txt").exists()


async def test_a_resumed_call_that_held_an_encoded_secret_is_refused(
    runtime: Runtime, planted: str, workdir: Path
) -> None:
    encoded = base64.b64encode(VALUE.encode()).decode()
    record = await park(runtime, "chat-lost", f"write out.txt {encoded}")
    (call,) = record.unanswered_calls()
    assert call.redaction is Redaction.LOST
    resumed = Recorder()
    with trio.fail_after(LIMIT):
        await runtime.executor.resume("chat-lost", answer=ALLOW_ONCE, owner="t", emit=resumed)
    (result,) = resumed.of(ToolResultEvent)
    assert not result.ok and "encoded or wrapped" in result.preview
    assert not (workdir / "out.txt").exists()


async def test_a_label_the_model_wrote_itself_is_never_turned_into_the_value(
    runtime: Runtime, planted: str, workdir: Path
) -> None:
    await park(runtime, "chat-literal", f"write out.txt {LABEL}")
    with trio.fail_after(LIMIT):
        await runtime.executor.resume("chat-literal", answer=ALLOW_ONCE, owner="t", emit=Recorder())
    assert (workdir / "out.txt").read_text() == LABEL


@pytest.mark.parametrize("name", ["OPENAI_API_KEY", "_", "a" * 128, "AGENTRT_TELEGRAM_TOKEN"])
def test_every_key_name_is_a_secret_name(tmp_path: Path, name: str) -> None:
    KeyStore(tmp_path / "keys").put(name, VALUE)
    assert is_secret_name(name)
    assert Redactor(tmp_path / "none", more_dirs=(tmp_path / "keys",)).redact(VALUE) == (
        f"[secret {name}]"
    )

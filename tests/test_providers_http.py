"""What the providers share: the SSE decoder, retries, redaction, `make_model`."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import trio
import trio.testing

from agentrt import ModelResponse
from agentrt import SecretStore
from agentrt import TextDelta
from agentrt.models.messages import ModelDelta
from agentrt.models.messages import OnDelta
from agentrt.models.providers import AnthropicModel
from agentrt.models.providers import ModelAuthError
from agentrt.models.providers import ModelRateLimitError
from agentrt.models.providers import ModelServerError
from agentrt.models.providers import OpenAIModel
from agentrt.models.providers import RetryPolicy
from agentrt.models.providers import make_model
from agentrt.models.streaming import Redactor
from agentrt.models.streaming import SSEDecoder
from agentrt.models.streaming import SSEError
from agentrt.models.streaming import SSEEvent
from agentrt.models.streaming import parse_retry_after
from agentrt.models.streaming import server_message
from agentrt.models.streaming import with_retries

STREAM = (
    b": comment\r\n"
    b"event: message_start\r\n"
    b'data: {"a": 1}\r\n'
    b"\r\n"
    b"data: first\n"
    b"data:second\n"
    b"id: 7\n"
    b"retry: 100\n"
    b"\n"
    b"data: caf\xc3\xa9\r"
    b"\r"
    b"event: empty\n"
    b"\n"
    b"data: [DONE]\n"
)
EXPECTED = [
    SSEEvent("message_start", '{"a": 1}'),
    SSEEvent("message", "first\nsecond"),
    SSEEvent("message", "café"),
    SSEEvent("message", "[DONE]"),
]


def decode(chunks: list[bytes]) -> list[SSEEvent]:
    decoder = SSEDecoder()
    out: list[SSEEvent] = []
    for chunk in [*(c for c in chunks if c), b""]:
        decoder.feed(chunk)
        while (event := decoder.next_event()) is not None:
            out.append(event)
    return out


def test_sse_decoder_whole() -> None:
    assert decode([STREAM]) == EXPECTED


def test_sse_decoder_split_at_every_offset() -> None:
    for i in range(len(STREAM) + 1):
        assert decode([STREAM[:i], STREAM[i:]]) == EXPECTED, i


def test_sse_decoder_byte_by_byte() -> None:
    assert decode([STREAM[i : i + 1] for i in range(len(STREAM))]) == EXPECTED


def decode_with_feed_events(chunks: list[bytes]) -> list[SSEEvent]:
    decoder = SSEDecoder()
    out: list[SSEEvent] = []
    for chunk in chunks:
        if chunk:
            out.extend(decoder.feed_events(chunk))
    decoder.feed(b"")
    return out + decoder.drain()


def test_sse_decoder_feed_events_split_at_every_pair_of_offsets() -> None:
    # Whole-line feeds take the quick way, the others the buffer; both give the same events.
    for i in range(len(STREAM) + 1):
        for j in range(i, len(STREAM) + 1, 7):
            chunks = [STREAM[:i], STREAM[i:j], STREAM[j:]]
            assert decode_with_feed_events(chunks) == EXPECTED, (i, j)


def test_sse_decoder_feed_events_of_whole_lines_after_a_partial_one() -> None:
    decoder = SSEDecoder()
    assert decoder.feed_events(b"data: a") == []
    assert decoder.feed_events(b"bc\n\ndata: d\n\n") == [
        SSEEvent("message", "abc"),
        SSEEvent("message", "d"),
    ]
    assert decoder.feed_events(b"event: e\ndata: f\n\n") == [SSEEvent("e", "f")]


def test_sse_decoder_feed_events_caps_and_checks_utf8_like_feed() -> None:
    decoder = SSEDecoder(max_event_bytes=100)
    assert decoder.feed_events(b"data: " + b"x" * 60 + b"\n") == []
    with pytest.raises(SSEError, match="exceeds 100 bytes"):
        decoder.feed_events(b"data: " + b"y" * 60 + b"\n")
    decoder = SSEDecoder()
    assert decoder.feed_events(b"data: one\n\ndata: \xff\n\n") == [SSEEvent("message", "one")]
    with pytest.raises(SSEError, match="UTF-8"):
        decoder.feed_events(b"data: after\n\n")


def test_sse_decoder_needs_more_data_until_the_blank_line() -> None:
    decoder = SSEDecoder()
    decoder.feed(b"data: x\n")
    assert decoder.next_event() is None
    decoder.feed(b"\n")
    assert decoder.next_event() == SSEEvent("message", "x")


def test_sse_decoder_caps_event_size() -> None:
    decoder = SSEDecoder(max_event_bytes=100)
    decoder.feed(b"data: " + b"x" * 60 + b"\n")
    assert decoder.next_event() is None
    decoder.feed(b"data: " + b"y" * 60 + b"\n")
    with pytest.raises(SSEError, match="exceeds 100 bytes"):
        decoder.next_event()


def test_sse_decoder_caps_an_endless_line() -> None:
    decoder = SSEDecoder(max_event_bytes=100)
    with pytest.raises(SSEError, match="exceeds 100 bytes"):
        decoder.feed(b"data: " + b"x" * 200)


def test_sse_decoder_rejects_bad_utf8() -> None:
    decoder = SSEDecoder()
    decoder.feed(b"data: \xff\n\n")
    with pytest.raises(SSEError, match="UTF-8"):
        decoder.next_event()


def test_sse_decoder_gives_the_events_before_bad_utf8_first() -> None:
    decoder = SSEDecoder()
    decoder.feed(b"data: one\n\ndata\n\ndata: \xff\n\ndata: after\n\n")
    assert decoder.drain() == [SSEEvent("message", "one"), SSEEvent("message", "")]
    with pytest.raises(SSEError, match="UTF-8"):
        decoder.drain()


def test_sse_decoder_a_cr_at_the_end_of_a_feed_and_a_lf_at_the_start_of_the_next() -> None:
    decoder = SSEDecoder()
    decoder.feed(b"data: a\r")
    assert decoder.drain() == []
    decoder.feed(b"\ndata: b\r")
    assert decoder.drain() == []
    decoder.feed(b"\r")
    assert decoder.drain() == [SSEEvent("message", "a\nb")]


def test_redactor_scrubs_whole_and_masked_keys() -> None:
    key = "sk-proj-abcdefghijklmnopqrstuvwxyz0123"
    r = Redactor(key)
    text = f"Incorrect API key provided: {key}. Or sk-proj-****************0123 or ...uvwxyz0123."
    scrubbed = r.scrub(text)
    assert "abcdef" not in scrubbed
    assert "wxyz0123" not in scrubbed
    assert scrubbed.startswith("Incorrect API key provided: [redacted]")
    assert key not in repr(r)


def test_server_message_reads_common_error_shapes() -> None:
    r = Redactor(None)
    assert server_message(b'{"error": {"message": "bad model"}}', r) == "bad model"
    assert server_message(b'{"error": "plain"}', r) == "plain"
    assert server_message(b'{"detail": "nope"}', r) == "nope"
    assert server_message(b"  gateway\n  timeout ", r) == "gateway timeout"
    assert len(server_message(b"x" * 5000, r)) == 300


def test_parse_retry_after_forms() -> None:
    assert parse_retry_after({"retry-after": "7"}) == 7.0
    assert parse_retry_after({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    date = "Wed, 21 Oct 2015 07:28:10 GMT"
    assert parse_retry_after({"retry-after": date}, now=1445412480.0) == 10.0
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({}) is None


async def _ignore(delta: ModelDelta) -> None:
    pass


async def test_backoff_doubles_through_trio_sleep(autojump_clock: trio.testing.MockClock) -> None:
    attempts: list[float] = []

    async def attempt(deliver: OnDelta) -> ModelResponse:
        attempts.append(trio.current_time())
        raise ModelServerError("HTTP 503")

    policy = RetryPolicy(max_attempts=4, base_delay=1.0, max_delay=3.0)
    with pytest.raises(ModelServerError, match=r"gave up after 4 attempts"):
        await with_retries(policy, attempt, _ignore)
    gaps = [b - a for a, b in itertools.pairwise(attempts)]
    assert gaps == [1.0, 2.0, 3.0]


async def test_retry_after_is_honoured_exactly(autojump_clock: trio.testing.MockClock) -> None:
    attempts: list[float] = []

    async def attempt(deliver: OnDelta) -> ModelResponse:
        attempts.append(trio.current_time())
        if len(attempts) == 1:
            raise ModelRateLimitError("HTTP 429", retry_after=42.0)
        return ModelResponse("ok")

    response = await with_retries(RetryPolicy(), attempt, _ignore)
    assert response.text == "ok"
    assert attempts[1] - attempts[0] == 42.0


async def test_no_retry_once_a_delta_was_delivered(
    autojump_clock: trio.testing.MockClock,
) -> None:
    calls = 0
    seen: list[ModelDelta] = []

    async def collect(delta: ModelDelta) -> None:
        seen.append(delta)

    async def attempt(deliver: OnDelta) -> ModelResponse:
        nonlocal calls
        calls += 1
        await deliver(TextDelta("part"))
        raise ModelServerError("overloaded")

    with pytest.raises(ModelServerError):
        await with_retries(RetryPolicy(), attempt, collect)
    assert calls == 1
    assert seen == [TextDelta("part")]


async def test_auth_errors_are_not_retried(autojump_clock: trio.testing.MockClock) -> None:
    calls = 0

    async def attempt(deliver: OnDelta) -> ModelResponse:
        nonlocal calls
        calls += 1
        raise ModelAuthError("HTTP 401")

    with pytest.raises(ModelAuthError):
        await with_retries(RetryPolicy(), attempt, _ignore)
    assert calls == 1


async def test_backoff_sleep_is_cancellable(autojump_clock: trio.testing.MockClock) -> None:
    async def attempt(deliver: OnDelta) -> ModelResponse:
        raise ModelRateLimitError("HTTP 429", retry_after=30.0)

    with trio.move_on_after(5) as scope:
        await with_retries(RetryPolicy(), attempt, _ignore)
    assert scope.cancelled_caught


def test_make_model_rejects_other_specs() -> None:
    for spec in ("scripted", "gpt-4o", "openai:", "replay:x.json", "mistral:large"):
        with pytest.raises(
            ValueError, match=r"expected 'openai:NAME' .* 'anthropic:NAME' or 'azure:DEPLOYMENT'"
        ):
            make_model(spec)


def test_make_model_builds_each_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    local = make_model("openai:llama3.2", base_url="http://localhost:11434/v1")
    assert isinstance(local, OpenAIModel)
    assert local.name == "openai:llama3.2"
    assert local.url == "http://localhost:11434/v1/chat/completions"
    hosted = make_model("anthropic:claude-sonnet-4-5", api_key="k")
    assert isinstance(hosted, AnthropicModel)
    assert hosted.url == "https://api.anthropic.com/v1/messages"


def test_make_model_key_order(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    secrets = SecretStore(tmp_path / "secrets")
    secrets.put("openai_api_key", "from-store\n")
    secrets.put("anthropic_api_key", "ant-from-store")
    monkeypatch.setenv("OPENAI_API_KEY", "from-env")
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)

    def key(model: object) -> str | None:
        assert isinstance(model, (OpenAIModel, AnthropicModel))
        return model._api_key

    assert key(make_model("openai:m", secrets=secrets, api_key="explicit")) == "explicit"
    assert key(make_model("openai:m", secrets=secrets)) == "from-env"
    monkeypatch.setenv("OPENAI_API_KEY", "  ")
    assert key(make_model("openai:m", secrets=secrets)) == "from-store"
    assert key(make_model("anthropic:m", secrets=secrets)) == "ant-from-store"
    assert key(make_model("anthropic:m")) is None

"""Tokens per round, run and session, kept in the store, and their cost from the price table."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from agentrt import Outcome
from agentrt import UsageEvent
from agentrt import open_runtime
from agentrt.config.prices import DEFAULT_PRICES
from agentrt.config.prices import Price
from agentrt.config.prices import Prices
from agentrt.config.prices import total_cost
from agentrt.config.settings import ConfigError
from agentrt.config.settings import parse_config
from agentrt.models.messages import Message
from agentrt.models.providers import OpenAIModel
from agentrt.store import Store
from agentrt.store.record import TaskRecord
from agentrt.vocab.usage import RunTokens
from agentrt.vocab.usage import TokenCount
from agentrt.vocab.usage import cost_words

from .conftest import FakeVerifier
from .conftest import Recorder
from .fakes.llm_server import OA_DONE
from .fakes.llm_server import LLMServer
from .fakes.llm_server import oa_finish
from .fakes.llm_server import oa_text
from .fakes.llm_server import oa_tool
from .fakes.llm_server import oa_usage
from .fakes.llm_server import sse


def test_a_price_counts_cached_input_at_its_own_rate() -> None:
    price = Price(input=2.5, output=10.0, cached_input=1.25)
    tokens = TokenCount(
        rounds=2, input_tokens=1_000_000, output_tokens=100_000, cached_tokens=400_000
    )
    # 600,000 fresh at 2.50, 400,000 cached at 1.25, 100,000 out at 10.00 a million.
    assert price.cost(tokens) == pytest.approx(1.5 + 0.5 + 1.0)
    assert Price(1.0, 2.0).cost(tokens) == pytest.approx(1.0 + 0.2)


def test_the_configuration_wins_over_the_defaults_and_unknown_models_have_no_price() -> None:
    prices = Prices({"openai:gpt-4o": Price(1.0, 1.0)})
    assert prices.of("openai:gpt-4o") == Price(1.0, 1.0)
    assert prices.of("openai:gpt-4o-mini") == dict(DEFAULT_PRICES)["openai:gpt-4o-mini"]
    assert (
        prices.of("anthropic:claude-sonnet-4-5")
        == dict(DEFAULT_PRICES)["anthropic:claude-sonnet-4"]
    )
    assert prices.of("scripted") is None
    runs = (
        prices.priced(RunTokens("t1", "openai:gpt-4o", TokenCount(1, 500_000, 500_000))),
        prices.priced(RunTokens("t2", "scripted", TokenCount(1, 10, 10))),
    )
    assert runs[0].cost == pytest.approx(1.0)
    assert runs[1].cost is None
    assert total_cost(runs) is None
    assert total_cost(runs[:1]) == pytest.approx(1.0)
    assert cost_words(None) == "cost unknown"
    assert cost_words(0.01234) == "$0.0123"


def test_prices_in_the_configuration_file_are_checked(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    file = parse_config(
        '[prices]\n"openai:local" = { input = 0.5, output = 1.5, cached_input = 0.1 }\n', path
    )
    assert file.values["prices"] == {"openai:local": Price(0.5, 1.5, 0.1)}
    with pytest.raises(ConfigError, match=r"config.toml:1: prices: 'openai:local' needs input"):
        parse_config('[prices]\n"openai:local" = { input = 0.5 }\n', path)
    with pytest.raises(ConfigError, match="must be numbers, 0 or more"):
        parse_config('[prices]\n"openai:local" = { input = -1, output = 1 }\n', path)


async def test_each_rounds_tokens_are_added_to_its_run_in_the_store(
    llm_server: LLMServer, tmp_path: Path, workdir: Path, verifier: FakeVerifier
) -> None:
    (workdir / "a.txt").write_text("hello")
    llm_server.script(
        sse(
            [
                oa_tool(0, id="call_1", name="read_file", arguments='{"path": "a.txt"}'),
                oa_finish("tool_calls"),
                oa_usage(1200, 30, cached=1024, reasoning=20),
                OA_DONE,
            ]
        ),
        sse([oa_text("It says hello."), oa_finish(), oa_usage(1300, 8, cached=1152), OA_DONE]),
        sse([oa_text("Bye."), oa_finish(), oa_usage(1400, 2), OA_DONE]),
    )
    model = OpenAIModel("gpt-4o", llm_server.base_url + "/v1", api_key="k")
    with trio.fail_after(10):
        async with open_runtime(
            tmp_path / "state", model=model, workdir=workdir, restricted_paths=[], verifier=verifier
        ) as rt:
            first = Recorder()
            ended = await rt.executor.run("cli-u", "read a.txt", owner=object(), emit=first)
            assert ended.outcome is Outcome.FINISHED
            again = await rt.executor.run("cli-u", "bye", owner=object(), emit=Recorder())
            usage = await rt.store.usage("cli-u")
            prices = rt.executor.config.prices
    assert [e.reasoning_tokens for e in first.of(UsageEvent) if isinstance(e, UsageEvent)] == [
        20,
        0,
    ]
    assert [run.task_hash for run in usage] == [ended.task_hash, again.task_hash]
    assert usage[0] == RunTokens(
        ended.task_hash, "openai:gpt-4o", TokenCount(2, 2500, 38, 2176, 20)
    )
    assert usage[1].tokens == TokenCount(1, 1400, 2, 0, 0)
    priced = [prices.priced(run) for run in usage]
    # gpt-4o's default price: 2.50 in, 1.25 cached, 10.00 out, a million tokens.
    assert priced[0].cost == pytest.approx((324 * 2.5 + 2176 * 1.25 + 38 * 10) / 1e6)
    assert priced[1].cost == pytest.approx((1400 * 2.5 + 2 * 10) / 1e6)


async def test_each_backend_adds_up_a_runs_tokens_and_forgets_them_with_the_session(
    store: Store,
) -> None:
    history = (Message.user("hi"), Message.assistant("hello"))
    await store.create(TaskRecord("cli-b", "hi", history))
    await store.finish("cli-b", history)
    await store.add_usage("cli-b", "t1", "openai:gpt-4o", TokenCount(1, 100, 10, 64, 2))
    await store.add_usage("cli-b", "t1", "openai:gpt-4o", TokenCount(1, 120, 5, 100, 0))
    await store.add_usage("cli-b", "t2", "anthropic:claude-sonnet-4", TokenCount(1, 7, 3))
    assert await store.usage("cli-b") == (
        RunTokens("t1", "openai:gpt-4o", TokenCount(2, 220, 15, 164, 2)),
        RunTokens("t2", "anthropic:claude-sonnet-4", TokenCount(1, 7, 3)),
    )
    assert await store.usage("cli-other") == ()
    assert await store.forget("cli-b")
    assert await store.usage("cli-b") == ()

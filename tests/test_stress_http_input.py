"""Bad input over HTTP, a fixed sample: bodies that once got a 500 get a 400 in the API's shape."""

from __future__ import annotations

from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path

import httpx
import pytest
import trio
from stress._common import StandInVerifier

from agentrt import ScriptedModel
from agentrt import open_runtime
from agentrt.http import serve_http

TOKEN = "t" * 40


@pytest.fixture
async def base(tmp_path: Path, nursery: trio.Nursery) -> AsyncIterator[str]:
    async with open_runtime(
        tmp_path / "state",
        model=ScriptedModel(word_delay=0, stream_delay=0),
        workdir=tmp_path,
        restricted_paths=[tmp_path / "restricted"],
        verifier=StandInVerifier(),
    ) as runtime:
        port = await nursery.start(partial(serve_http, runtime, "127.0.0.1", 0, token=TOKEN))
        yield f"http://127.0.0.1:{port}"
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize(
    "body",
    [
        b"[" * 100_000,
        b'{"text":' + b"[" * 5000 + b"1" + b"]" * 5000 + b"}",
        b'{"text":"\\ud800"}',
        b'{"\xed\xa0\x80type": "hello"}',
        b'{"text": "a\xed\xa0\x80b"}',
    ],
)
@pytest.mark.parametrize("route", ["/v1/session/s1/run", "/v1/session/s1/task/resume"])
async def test_a_deep_or_surrogate_body_gets_a_400_in_the_error_shape(
    base: str, route: str, body: bytes
) -> None:
    with trio.fail_after(20):
        async with httpx.AsyncClient(base_url=base) as client:
            response = await client.post(
                route,
                content=body,
                headers={"authorization": f"Bearer {TOKEN}", "content-type": "application/json"},
            )
            assert response.status_code == 400, response.text
            error = response.json()["error"]
            assert error["code"] == "bad_body"
            assert error["message"].startswith(("the body is not valid JSON", "the body does not"))
            again = await client.get("/v1/sessions", headers={"authorization": f"Bearer {TOKEN}"})
            assert again.status_code == 200


@pytest.mark.parametrize("field", ["text", "answer", "pause"])
async def test_an_integer_of_5000_digits_gets_a_400_in_the_error_shape(
    base: str, field: str
) -> None:
    with trio.fail_after(20):
        async with httpx.AsyncClient(base_url=base) as client:
            response = await client.post(
                "/v1/session/s1/run",
                content=f'{{"{field}": {"7" * 5000}}}',
                headers={"authorization": f"Bearer {TOKEN}", "content-type": "application/json"},
            )
            assert response.status_code == 400, response.text
            assert response.json()["error"]["code"] == "bad_body"
            again = await client.get("/v1/sessions", headers={"authorization": f"Bearer {TOKEN}"})
            assert again.status_code == 200

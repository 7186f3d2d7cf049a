"""Tenants in front of HTTP workers: keys, allowed models, request and token limits (tokens
charged from the upstream's ``usage``), and the worker's own key sent upstream from the
environment, never logged nor shown."""

from __future__ import annotations

import logging
import re

import httpx
import openai
import pytest

from turnout.testing.router import RunningRouter, run_router

from .conftest import REMOTE, front

ADMIN = {"authorization": "Bearer admin-key"}
TENANTS = {
    "alpha": {"keys": ["alpha-key"], "requests_per_minute": 3},
    "beta": {"keys": ["beta-key"], "tokens_per_minute": 200},
    "gamma": {"keys": ["gamma-key"], "models": ["another-model"]},
}


def client(router: RunningRouter, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=router.base_url + "/v1", api_key=key, max_retries=0)


def chat(router: RunningRouter, key: str, max_tokens: int = 4) -> openai.types.chat.ChatCompletion:
    return client(router, key).chat.completions.create(
        model=REMOTE, messages=[{"role": "user", "content": "hi"}], max_tokens=max_tokens
    )


def tenant_tokens(router: RunningRouter, tenant: str, kind: str) -> float:
    text = httpx.get(router.base_url + "/metrics", headers=ADMIN, timeout=5).text
    found = re.search(
        rf'turnout_tenant_tokens_total\{{kind="{kind}",tenant="{tenant}"\}} (\S+)', text
    ) or re.search(rf'turnout_tenant_tokens_total\{{tenant="{tenant}",kind="{kind}"\}} (\S+)', text)
    return float(found.group(1)) if found else 0.0


def test_tenant_keys_models_and_limits(upstreams: list[RunningRouter]) -> None:
    config = {"server": {"admin_api_key": "admin-key"}, "tenants": TENANTS}
    with front([u.base_url for u in upstreams], config) as router:
        with pytest.raises(openai.AuthenticationError):
            chat(router, "no-such-key")
        with pytest.raises(openai.NotFoundError):
            chat(router, "gamma-key")  # the model is not the tenant's: as if not served

        for _ in range(3):
            assert chat(router, "alpha-key").choices[0].message.content
        with pytest.raises(openai.RateLimitError) as refused:
            chat(router, "alpha-key")
        assert refused.value.code == "rate_limit_exceeded"

        with pytest.raises(openai.RateLimitError) as refused:
            chat(router, "beta-key", max_tokens=1000)  # could never fit 200 tokens a minute
        assert refused.value.code == "request_too_large_for_limit"
        answer = chat(router, "beta-key")
        assert answer.usage is not None
        # Charged what the upstream says it used (the reservation was a guess).
        router.wait_until(lambda: tenant_tokens(router, "beta", "prompt") > 0)
        assert tenant_tokens(router, "beta", "prompt") == answer.usage.prompt_tokens
        assert tenant_tokens(router, "beta", "completion") == answer.usage.completion_tokens

        # A stream's usage, when the client asks for it, is read from its last events.
        chunks = list(
            client(router, "beta-key").chat.completions.create(
                model=REMOTE,
                messages=[{"role": "user", "content": "hi"}],
                max_tokens=4,
                stream=True,
                stream_options={"include_usage": True},
            )
        )
        usage = chunks[-1].usage
        assert usage is not None
        want = answer.usage.prompt_tokens + usage.prompt_tokens
        router.wait_until(lambda: tenant_tokens(router, "beta", "prompt") == want)


def test_the_worker_key_comes_from_the_environment_and_is_never_logged(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "upstream-secret-7f3a9c"
    caplog.set_level(logging.DEBUG)
    # An upstream that takes only this key.
    with run_router({"server": {"api_keys": [secret]}}) as upstream:
        monkeypatch.setenv("TURNOUT_TEST_UPSTREAM_KEY", secret)
        with front([upstream.base_url], api_key_env="TURNOUT_TEST_UPSTREAM_KEY") as router:
            answer = chat(router, "any")
            assert answer.choices[0].message.content
            stream = client(router, "any").chat.completions.create(
                model=REMOTE, messages=[{"role": "user", "content": "x"}], stream=True
            )
            assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
            shown = httpx.get(router.base_url + "/workers", timeout=5).text
            assert secret not in shown
            # A wrong key is the worker's configuration, not the client's: never a 401.
            monkeypatch.setenv("TURNOUT_TEST_UPSTREAM_KEY", "a-wrong-key")
            with pytest.raises(openai.APIStatusError) as refused:
                chat(router, "any")
            assert refused.value.status_code in (502, 503)  # 503 once its probes fail too
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert secret not in logged
    assert "a-wrong-key" not in logged


def test_an_unset_key_variable_is_named_not_guessed(monkeypatch: pytest.MonkeyPatch) -> None:
    from turnout.http_workers.connection import HttpClient, HttpConnection
    from turnout.http_workers.settings import HttpWorkersSettings
    from turnout.workers.settings import WorkerSpec

    monkeypatch.delenv("TURNOUT_TEST_UNSET_KEY", raising=False)
    spec = WorkerSpec(url="http://127.0.0.1:9/v1", api_key_env="TURNOUT_TEST_UNSET_KEY")
    connection = HttpConnection(spec, HttpClient(HttpWorkersSettings()))
    assert connection.base == "http://127.0.0.1:9"
    with pytest.raises(RuntimeError, match="TURNOUT_TEST_UNSET_KEY"):
        connection.auth_headers()
    monkeypatch.setenv("TURNOUT_TEST_UNSET_KEY", "k-1")
    assert connection.auth_headers() == {"authorization": "Bearer k-1"}

"""Kept responses belong to the tenant that made them: another tenant (or a key of no tenant)
cannot retrieve, list, delete or continue them, as if they had never been kept."""

from __future__ import annotations

import openai
import pytest

from tests.server.harness import MODEL, run_router

KEYS = {"a": "key-of-a", "b": "key-of-b"}
PLAIN = "plain-key"


def test_a_kept_response_is_found_by_its_own_tenant_only() -> None:
    config = {
        "server": {"api_keys": [PLAIN]},
        "tenants": {name: {"keys": [key]} for name, key in KEYS.items()},
    }
    with run_router(config=config, sims=1) as router:

        def client(key: str) -> openai.OpenAI:
            return openai.OpenAI(base_url=f"{router.base_url}/v1", api_key=key, max_retries=0)

        owner, other, plain = client(KEYS["a"]), client(KEYS["b"]), client(PLAIN)
        created = owner.responses.create(model=MODEL, input="a's secret")
        for stranger in (other, plain):
            with pytest.raises(openai.NotFoundError):
                stranger.responses.retrieve(created.id)
            with pytest.raises(openai.NotFoundError):
                stranger.responses.input_items.list(created.id)
            with pytest.raises(openai.NotFoundError):
                stranger.responses.delete(created.id)
            with pytest.raises(openai.NotFoundError):
                stranger.responses.create(
                    model=MODEL, input="tell me", previous_response_id=created.id
                )
            with pytest.raises(openai.NotFoundError):
                stranger.responses.create(
                    model=MODEL,
                    input=[{"type": "item_reference", "id": created.output[0].id}],
                )
        assert owner.responses.retrieve(created.id).output_text == "a's secret"
        follow_up = owner.responses.create(
            model=MODEL, input="go on", previous_response_id=created.id
        )
        assert follow_up.status == "completed"
        # An untenanted key's responses are untenanted keys' only.
        mine = plain.responses.create(model=MODEL, input="plain")
        assert plain.responses.retrieve(mine.id).output_text == "plain"
        with pytest.raises(openai.NotFoundError):
            owner.responses.retrieve(mine.id)

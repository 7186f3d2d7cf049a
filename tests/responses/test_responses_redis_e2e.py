"""The response store in a real Redis: routers sharing it continue, retrieve and delete each
other's responses; responses expire; a Redis that is down or hung never stalls a request
(503 ``response_store_unavailable`` where a kept response is needed, the answer otherwise)."""

from __future__ import annotations

import time
import uuid
from typing import Any

import httpx
import openai
import pytest

from tests.ops.redis_server import RedisServer, closed_port_url, silent_server
from tests.server.harness import MODEL, Router, run_router
from turnout.config import ResponsesConfig
from turnout.responses.storage import make_storage
from turnout.responses.store import RedisResponseStore, StoredResponse


def store_section(storage: str, **extra: Any) -> dict[str, Any]:
    """A ``responses`` section with a key prefix of its own (the tests share one Redis)."""
    return {"storage": storage, "key_prefix": f"test-{uuid.uuid4().hex[:12]}", **extra}


def client(router: Router) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{router.base_url}/v1", api_key="unused", max_retries=0)


def last_prompt(router: Router) -> str:
    text: str = router.sims[0].requests[-1].tokenized.original_text
    return text


def test_routers_sharing_a_redis_share_their_responses(redis_server: RedisServer) -> None:
    config = {"responses": store_section(redis_server.url)}
    with run_router(config=config, sims=1) as first, run_router(config=config, sims=1) as second:
        a, b = client(first), client(second)
        created = a.responses.create(model=MODEL, input="remember the blue door")
        assert b.responses.retrieve(created.id).model_dump() == created.model_dump()
        follow_up = b.responses.create(
            model=MODEL, input="which door?", previous_response_id=created.id
        )
        prompt = last_prompt(second)
        assert prompt.index("remember the blue door") < prompt.index("which door?")
        items = list(a.responses.input_items.list(follow_up.id, order="asc"))
        assert [getattr(item, "role", None) for item in items] == ["user", "assistant", "user"]
        b.responses.delete(created.id)
        with pytest.raises(openai.NotFoundError):
            a.responses.retrieve(created.id)
        # The follow-up holds its whole context: it outlives the response it followed.
        again = a.responses.create(model=MODEL, input="and now?", previous_response_id=follow_up.id)
        assert again.status == "completed"
        assert "remember the blue door" in last_prompt(first)
        # An item kept by one router is referred to through the other.
        answer = again.output[0].id
        referred = b.responses.create(model=MODEL, input=[{"type": "item_reference", "id": answer}])
        assert referred.status == "completed"
        assert "and now?" in last_prompt(second)


def test_a_stream_is_kept_before_its_last_event(redis_server: RedisServer) -> None:
    config = {"responses": store_section(redis_server.url)}
    with run_router(config=config, sims=1) as first, run_router(config=config, sims=1) as second:
        with client(first).responses.stream(model=MODEL, input="streamed and kept") as stream:
            final = stream.get_final_response()
        kept = client(second).responses.retrieve(final.id)
        assert kept.output_text == final.output_text == "streamed and kept"


def test_kept_responses_expire_after_their_time_to_live(redis_server: RedisServer) -> None:
    config = {"responses": store_section(redis_server.url, ttl_s=0.5)}
    with run_router(config=config, sims=1) as router:
        api = client(router)
        created = api.responses.create(model=MODEL, input="short-lived")
        deadline = time.monotonic() + 20
        while True:
            try:
                api.responses.retrieve(created.id)
            except openai.NotFoundError:
                break
            assert time.monotonic() < deadline, "the response never expired"
            time.sleep(0.1)


@pytest.mark.parametrize("hung", [False, True])
def test_an_unreachable_store_is_a_503_where_needed_and_never_a_stall(
    hung: bool, caplog: pytest.LogCaptureFixture
) -> None:
    with silent_server() as silent:
        url = silent if hung else closed_port_url()
        config = {"responses": store_section(url, timeout_s=0.3)}
        with run_router(config=config, sims=1) as router:
            base = f"{router.base_url}/v1/responses"
            started = time.monotonic()
            created = httpx.post(base, json={"model": MODEL, "input": "hello"}, timeout=30)
            # The answer stands; only keeping it failed (logged).
            assert created.status_code == 200, created.text
            response_id = created.json()["id"]
            follow_up = {"model": MODEL, "input": "x", "previous_response_id": response_id}
            for method, path, body in [
                ("GET", f"/{response_id}", None),
                ("DELETE", f"/{response_id}", None),
                ("GET", f"/{response_id}/input_items", None),
                ("POST", "", follow_up),
            ]:
                reply = httpx.request(method, base + path, json=body, timeout=30)
                assert reply.status_code == 503, (method, path, reply.text)
                assert reply.json()["error"]["code"] == "response_store_unavailable"
            # Five calls, each bounded by the deadline (and a loaded machine's slack).
            assert time.monotonic() - started < 20
    warnings = [r.getMessage() for r in caplog.records if r.name == "turnout.responses.store"]
    assert any("could not be stored" in m or "response store" in m for m in warnings)


async def test_the_redis_store_keeps_bytes_it_can_read_back(redis_server: RedisServer) -> None:
    storage = make_storage(ResponsesConfig(**store_section(redis_server.url)))
    store = storage.responses
    assert isinstance(store, RedisResponseStore)
    try:
        kept = StoredResponse({"id": "resp_1", "output": [{"text": "é\u2028"}]}, [{"id": "i"}])
        await store.put(kept)
        assert await store.get("resp_1") == kept
        assert await store.delete("resp_1")
        assert not await store.delete("resp_1")
        assert await store.get("resp_1") is None
    finally:
        await storage.aclose()


def test_a_response_over_max_bytes_is_answered_but_not_kept(redis_server: RedisServer) -> None:
    config = {"responses": store_section(redis_server.url, max_bytes=200)}
    with run_router(config=config, sims=1) as router:
        api = client(router)
        created = api.responses.create(model=MODEL, input="too big to keep " * 10)
        assert created.status == "completed"
        with pytest.raises(openai.NotFoundError):
            api.responses.retrieve(created.id)

"""Conversations in a real Redis: routers sharing it see each other's conversations, responses
made through either add to the same conversation (streamed too, and at the same time); a Redis
that is down or hung is a 503 ``response_store_unavailable`` where a conversation is needed,
never a stall."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai

from tests.ops.redis_server import RedisServer, closed_port_url, silent_server
from tests.server.harness import MODEL, run_router
from turnout.config import ResponsesConfig
from turnout.responses.conversations import ConversationHead
from turnout.responses.storage import make_storage

from .test_conversations_e2e import texts
from .test_responses_redis_e2e import client, last_prompt, store_section

#: A well-formed conversation id (what turnout gives).
CONV = "conv_" + "0" * 48


def test_routers_sharing_a_redis_share_their_conversations(redis_server: RedisServer) -> None:
    config = {"responses": store_section(redis_server.url)}
    with run_router(config=config, sims=1) as first, run_router(config=config, sims=1) as second:
        a, b = client(first), client(second)
        conversation = a.conversations.create(
            metadata={"who": "a"}, items=[{"role": "user", "content": "the door is blue"}]
        )
        assert b.conversations.retrieve(conversation.id) == conversation
        answer = b.responses.create(model=MODEL, input="which door?", conversation=conversation.id)
        assert "the door is blue" in last_prompt(second)
        with a.responses.stream(
            model=MODEL, input="and the window?", conversation=conversation.id
        ) as stream:
            streamed = stream.get_final_response()
        prompt = last_prompt(first)
        assert prompt.index(answer.output_text) < prompt.index("and the window?")
        listed = list(b.conversations.items.list(conversation.id, order="asc"))
        assert texts(listed) == [
            "the door is blue",
            "which door?",
            answer.output_text,
            "and the window?",
            streamed.output_text,
        ]
        b.conversations.items.delete(listed[0].id, conversation_id=conversation.id)
        assert len(list(a.conversations.items.list(conversation.id))) == 4
        assert b.conversations.update(conversation.id, metadata={"who": "b"}).metadata == {
            "who": "b"
        }
        assert a.conversations.retrieve(conversation.id).metadata == {"who": "b"}
        # Responses finishing at the same time through both routers all land.
        with ThreadPoolExecutor(8) as pool:
            answers = list(
                pool.map(
                    lambda n: (a, b)[n % 2].responses.create(
                        model=MODEL, input=f"turn {n}", conversation=conversation.id
                    ),
                    range(8),
                )
            )
        kept_ids = {item.id for item in a.conversations.items.list(conversation.id, limit=100)}
        assert {r.output[0].id for r in answers} <= kept_ids
        assert len(kept_ids) == 4 + 16
        b.conversations.delete(conversation.id)
        for api in (a, b):
            try:
                api.conversations.retrieve(conversation.id)
            except openai.NotFoundError:
                continue
            raise AssertionError("a deleted conversation was found")


def test_only_ids_turnout_gives_reach_the_store(redis_server: RedisServer) -> None:
    """``<id>:items`` and ``<id>:bytes`` would name a conversation's other keys in Redis."""
    config = {"responses": store_section(redis_server.url)}
    with run_router(config=config, sims=1) as router:
        api = client(router)
        conversation = api.conversations.create(items=[{"role": "user", "content": "x"}])
        for suffix in (":items", ":bytes", "%3Aitems", ""):
            url = f"{router.base_url}/v1/conversations/{conversation.id}{suffix or 'x'}"
            reply = httpx.get(url, timeout=10)
            assert reply.status_code == 404, (suffix, reply.text)
            assert reply.json()["error"]["code"] == "conversation_not_found"
        assert api.conversations.retrieve(conversation.id) == conversation


async def test_thousands_of_items_are_added_at_once(redis_server: RedisServer) -> None:
    section = ResponsesConfig(**store_section(redis_server.url))
    storage = make_storage(section)
    store = storage.conversations
    try:
        await store.create(ConversationHead("conv_many", 0, {}), [])
        many = [{"id": f"i{n}", "type": "message"} for n in range(10_000)]
        assert await store.append("conv_many", many)
        assert await store.items("conv_many") == many
    finally:
        await storage.aclose()


def test_an_unreachable_store_is_a_503_for_conversations() -> None:
    with silent_server() as silent:
        for url in (closed_port_url(), silent):
            config = {"responses": store_section(url, timeout_s=0.3)}
            with run_router(config=config, sims=1) as router:
                base = f"{router.base_url}/v1/conversations"
                started = time.monotonic()
                for method, path, body in [
                    ("POST", "", {}),
                    ("GET", f"/{CONV}", None),
                    ("GET", f"/{CONV}/items", None),
                    ("POST", f"/{CONV}/items", {"items": [{"role": "user", "content": "x"}]}),
                    ("DELETE", f"/{CONV}", None),
                ]:
                    reply = httpx.request(method, base + path, json=body, timeout=30)
                    assert reply.status_code == 503, (method, path, reply.text)
                    assert reply.json()["error"]["code"] == "response_store_unavailable"
                reply = httpx.post(
                    f"{router.base_url}/v1/responses",
                    json={"model": MODEL, "input": "x", "conversation": CONV},
                    timeout=30,
                )
                assert reply.status_code == 503, reply.text
                assert time.monotonic() - started < 20

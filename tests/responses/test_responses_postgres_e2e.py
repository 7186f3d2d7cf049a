"""Two routers sharing one real PostgreSQL, through the official ``openai`` client over real
HTTP: a conversation of three turns alternating between them, ``previous_response_id`` and
``item_reference`` across them, retrieval and deletion through either; the database stopped
under a router is a 503 ``response_store_unavailable`` where something kept is needed (the
answer still given otherwise), quickly, and it is used again once back; a router migrates an
empty database as it starts."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest

from tests.ops.postgres_server import PostgresServer
from tests.server.harness import MODEL, run_router
from turnout.responses.postgres_schema import MIGRATIONS

from .test_conversations_e2e import texts
from .test_postgres_store import empty_database, versions
from .test_responses_redis_e2e import client, last_prompt, store_section


def test_a_conversation_of_three_turns_across_two_routers(
    postgres_server: PostgresServer,
) -> None:
    config = {"responses": store_section(postgres_server.url, timeout_s=2)}
    with run_router(config=config, sims=1) as first, run_router(config=config, sims=1) as second:
        a, b = client(first), client(second)
        conversation = a.conversations.create(
            metadata={"who": "a"}, items=[{"role": "user", "content": "the door is blue"}]
        )
        assert b.conversations.retrieve(conversation.id) == conversation
        one = a.responses.create(model=MODEL, input="turn one", conversation=conversation.id)
        two = b.responses.create(model=MODEL, input="turn two", conversation=conversation.id)
        prompt = last_prompt(second)
        assert prompt.index("the door is blue") < prompt.index(one.output_text)
        assert prompt.index(one.output_text) < prompt.index("turn two")
        with a.responses.stream(
            model=MODEL, input="turn three", conversation=conversation.id
        ) as stream:
            three = stream.get_final_response()
        prompt = last_prompt(first)
        assert prompt.index(two.output_text) < prompt.index("turn three")
        listed = list(b.conversations.items.list(conversation.id, order="asc"))
        assert texts(listed) == [
            "the door is blue",
            "turn one",
            one.output_text,
            "turn two",
            two.output_text,
            "turn three",
            three.output_text,
        ]
        b.conversations.items.delete(listed[0].id, conversation_id=conversation.id)
        assert len(list(a.conversations.items.list(conversation.id))) == 6
        # Responses finishing at the same time through both routers all land.
        with ThreadPoolExecutor(8) as pool:
            answers = list(
                pool.map(
                    lambda n: (a, b)[n % 2].responses.create(
                        model=MODEL, input=f"together {n}", conversation=conversation.id
                    ),
                    range(8),
                )
            )
        kept_ids = {item.id for item in b.conversations.items.list(conversation.id, limit=100)}
        assert {answer.output[0].id for answer in answers} <= kept_ids
        assert len(kept_ids) == 6 + 16
        assert b.conversations.update(conversation.id, metadata={"who": "b"}).metadata == {
            "who": "b"
        }
        assert a.conversations.retrieve(conversation.id).metadata == {"who": "b"}
        b.conversations.delete(conversation.id)
        with pytest.raises(openai.NotFoundError):
            a.conversations.retrieve(conversation.id)


def test_previous_response_id_across_two_routers(postgres_server: PostgresServer) -> None:
    config = {"responses": store_section(postgres_server.url, timeout_s=2)}
    with run_router(config=config, sims=1) as first, run_router(config=config, sims=1) as second:
        a, b = client(first), client(second)
        created = a.responses.create(model=MODEL, input="remember the blue door")
        assert b.responses.retrieve(created.id).model_dump() == created.model_dump()
        follow_up = b.responses.create(
            model=MODEL, input="which door?", previous_response_id=created.id
        )
        prompt = last_prompt(second)
        assert prompt.index("remember the blue door") < prompt.index("which door?")
        again = a.responses.create(model=MODEL, input="and now?", previous_response_id=follow_up.id)
        prompt = last_prompt(first)
        assert prompt.index("which door?") < prompt.index("and now?")
        items = list(b.responses.input_items.list(again.id, order="asc"))
        assert [getattr(item, "role", None) for item in items] == [
            "user",
            "assistant",
            "user",
            "assistant",
            "user",
        ]
        b.responses.delete(created.id)
        with pytest.raises(openai.NotFoundError):
            a.responses.retrieve(created.id)
        # An item kept by one router is referred to through the other.
        referred = b.responses.create(
            model=MODEL, input=[{"type": "item_reference", "id": again.output[0].id}]
        )
        assert referred.status == "completed"
        assert "and now?" in last_prompt(second)


def test_a_stopped_database_is_a_quick_503_and_is_used_again_once_back() -> None:
    server = PostgresServer()
    try:
        config = {"responses": store_section(server.url, timeout_s=0.5)}
        with run_router(config=config, sims=1) as router:
            api = client(router)
            kept = api.responses.create(model=MODEL, input="kept")
            conversation = api.conversations.create()
            server.stop()
            base = router.base_url
            started = time.monotonic()
            follow_up = {"model": MODEL, "input": "x", "previous_response_id": kept.id}
            in_conversation = {"model": MODEL, "input": "x", "conversation": conversation.id}
            for method, path, body in [
                ("GET", f"/v1/responses/{kept.id}", None),
                ("POST", "/v1/responses", follow_up),
                ("GET", f"/v1/conversations/{conversation.id}", None),
                ("POST", "/v1/conversations", {}),
                ("POST", "/v1/responses", in_conversation),
            ]:
                one = time.monotonic()
                reply = httpx.request(method, base + path, json=body, timeout=30)
                assert reply.status_code == 503, (method, path, reply.text)
                assert reply.json()["error"]["code"] == "response_store_unavailable"
                assert time.monotonic() - one < 3
            # The answer stands where nothing kept is needed (only keeping it fails).
            answered = httpx.post(
                f"{base}/v1/responses", json={"model": MODEL, "input": "hi"}, timeout=30
            )
            assert answered.status_code == 200, answered.text
            assert time.monotonic() - started < 15
            server.start()
            deadline = time.monotonic() + 20
            while httpx.get(f"{base}/v1/responses/{kept.id}", timeout=30).status_code != 200:
                assert time.monotonic() < deadline, "the database was never used again"
                time.sleep(0.2)
            assert api.conversations.retrieve(conversation.id).id == conversation.id
    finally:
        server.close()


def test_a_router_migrates_an_empty_database_as_it_starts(
    postgres_server: PostgresServer,
) -> None:
    url = empty_database(postgres_server)
    with run_router(config={"responses": store_section(url)}, sims=1) as router:
        # Before any request needs it (the first one does not wait for the migration).
        deadline = time.monotonic() + 20
        while postgres_server.psql_in(url, "SELECT to_regclass('turnout_schema_version')") == "":
            assert time.monotonic() < deadline, "the router did not migrate the database"
            time.sleep(0.1)
        assert versions(postgres_server, url) == list(range(1, len(MIGRATIONS) + 1))
        assert client(router).responses.create(model=MODEL, input="x").status == "completed"

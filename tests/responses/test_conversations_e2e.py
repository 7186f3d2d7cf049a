"""OpenAI's Conversations API end to end with the official openai client over HTTP against the
router and a simulated worker: conversations and their items, ``conversation`` on
``responses.create`` (its items before the input; the input and output added when the response
ends, streamed too), the errors, and conversations belonging to their tenant."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
import yaml

from tests.server.harness import MODEL, Router, run_router

from .test_responses_e2e import RULES, TOOLS


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Router]:
    script = tmp_path_factory.mktemp("sim") / "script.yaml"
    script.write_text(yaml.safe_dump({"rules": RULES}))
    with run_router(
        sims=1,
        sim_kwargs={"script": script},
        model={"tool_parser": "qwen", "reasoning_parser": "qwen3"},
    ) as running:
        yield running


@pytest.fixture
def client(router: Router) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{router.base_url}/v1", api_key="unused", max_retries=0)


def last_prompt(router: Router) -> str:
    text: str = router.sims[0].requests[-1].tokenized.original_text
    return text


def texts(items: Any) -> list[str]:
    """The text of each message item, in order."""
    return [item.content[0].text for item in items]


def test_a_conversation_is_created_retrieved_updated_and_deleted(client: openai.OpenAI) -> None:
    created = client.conversations.create(
        metadata={"topic": "doors"},
        items=[{"type": "message", "role": "user", "content": "the door is blue"}],
    )
    assert created.id.startswith("conv_")
    assert created.object == "conversation"
    assert created.metadata == {"topic": "doors"}
    assert isinstance(created.created_at, int)
    assert client.conversations.retrieve(created.id) == created
    updated = client.conversations.update(created.id, metadata={"topic": "windows"})
    assert updated.metadata == {"topic": "windows"}
    assert client.conversations.retrieve(created.id).metadata == {"topic": "windows"}
    deleted = client.conversations.delete(created.id)
    assert (deleted.id, deleted.object, deleted.deleted) == (
        created.id,
        "conversation.deleted",
        True,
    )
    for gone in (
        lambda: client.conversations.retrieve(created.id),
        lambda: client.conversations.delete(created.id),
        lambda: client.conversations.items.list(created.id),
        lambda: client.conversations.update(created.id, metadata={}),
    ):
        with pytest.raises(openai.NotFoundError) as caught:
            gone()
        assert caught.value.code == "conversation_not_found"


def test_conversation_routes_have_their_own_metrics_labels(
    client: openai.OpenAI, router: Router
) -> None:
    created = client.conversations.create()
    client.conversations.items.list(created.id)
    metrics = httpx.get(f"{router.base_url}/metrics", timeout=10).text
    assert 'turnout_requests_total{model="",route="/v1/conversations",status="200"}' in metrics
    assert 'route="/v1/conversations/{id}"' in metrics


def test_an_empty_conversation(client: openai.OpenAI) -> None:
    created = client.conversations.create()
    assert created.metadata == {}
    listed = client.conversations.items.list(created.id)
    assert listed.data == []
    assert listed.has_more is False


def test_items_are_added_listed_paged_retrieved_and_deleted(client: openai.OpenAI) -> None:
    conversation = client.conversations.create(
        items=[{"role": "user", "content": f"item {i}"} for i in range(3)]
    )
    added = client.conversations.items.create(
        conversation.id,
        items=[
            {"type": "message", "role": "assistant", "content": "item 3"},
            {"type": "message", "role": "user", "content": "item 4", "id": "msg_mine"},
        ],
    )
    assert added.object == "list"
    assert texts(added.data) == ["item 3", "item 4"]
    assert added.last_id == "msg_mine"
    # Pages of two, oldest first, followed by the client through after=last_id.
    pages = client.conversations.items.list(conversation.id, limit=2, order="asc")
    assert texts(pages.data) == ["item 0", "item 1"]
    assert pages.has_more
    assert texts(pages) == [f"item {i}" for i in range(5)]
    newest = client.conversations.items.list(conversation.id)
    assert texts(newest.data) == [f"item {i}" for i in reversed(range(5))]
    assert not newest.has_more
    assert newest.first_id == "msg_mine"
    one = client.conversations.items.retrieve("msg_mine", conversation_id=conversation.id)
    assert one.type == "message"
    assert texts([one]) == ["item 4"]
    after_delete = client.conversations.items.delete("msg_mine", conversation_id=conversation.id)
    assert after_delete.id == conversation.id
    assert after_delete.object == "conversation"
    assert texts(client.conversations.items.list(conversation.id, order="asc")) == [
        f"item {i}" for i in range(4)
    ]
    with pytest.raises(openai.NotFoundError):
        client.conversations.items.retrieve("msg_mine", conversation_id=conversation.id)
    with pytest.raises(openai.NotFoundError):
        client.conversations.items.delete("msg_mine", conversation_id=conversation.id)


def test_a_response_in_a_conversation_reads_it_and_adds_to_it(
    client: openai.OpenAI, router: Router
) -> None:
    conversation = client.conversations.create(
        items=[{"role": "user", "content": "my name is Ada"}]
    )
    first = client.responses.create(
        model=MODEL, input="what is my name?", conversation=conversation.id
    )
    assert first.conversation is not None
    assert first.conversation.id == conversation.id
    prompt = last_prompt(router)
    assert prompt.index("my name is Ada") < prompt.index("what is my name?")
    items = list(client.conversations.items.list(conversation.id, order="asc"))
    assert [(item.type, getattr(item, "role", None)) for item in items] == [
        ("message", "user"),
        ("message", "user"),
        ("message", "assistant"),
    ]
    assert items[2].id == first.output[0].id
    # Streamed, naming the conversation as an object; not stored, still added.
    with client.responses.stream(
        model=MODEL, input="and again", conversation={"id": conversation.id}, store=False
    ) as stream:
        second = stream.get_final_response()
    assert second.conversation is not None
    assert second.conversation.id == conversation.id
    prompt = last_prompt(router)
    assert prompt.index("my name is Ada") < prompt.index(first.output_text)
    assert prompt.index(first.output_text) < prompt.index("and again")
    listed = client.conversations.items.list(conversation.id, order="asc")
    assert [item.id for item in listed][3:] == [
        listed.data[3].id,
        second.output[0].id,
    ]
    assert texts(listed.data[3:]) == ["and again", second.output_text]
    # A kept response in a conversation lists its whole context as its input items.
    kept_input = client.responses.input_items.list(first.id, order="asc")
    assert texts(kept_input) == ["my name is Ada", "what is my name?"]


def test_an_agent_loop_in_a_conversation(client: openai.OpenAI, router: Router) -> None:
    """A tool call and its output across two responses, the client sending only what is new;
    the items listed with ``include`` carry logprobs and sealed reasoning."""
    conversation = client.conversations.create()
    first = client.responses.create(
        model=MODEL,
        input="plan ahead, please",
        tools=TOOLS,
        conversation=conversation.id,
        include=["message.output_text.logprobs"],
    )
    reasoning, call = first.output
    assert reasoning.type == "reasoning"
    assert call.type == "function_call"
    second = client.responses.create(
        model=MODEL,
        input=[
            {"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 21 degrees"}
        ],
        tools=TOOLS,
        conversation=conversation.id,
        include=["message.output_text.logprobs"],
    )
    assert second.output_text == "It is sunny in Paris."
    prompt = last_prompt(router)
    assert "A call is needed." in prompt
    asked = prompt.index("plan ahead, please")
    assert asked < prompt.index("<tool_call>", asked) < prompt.index("sunny, 21 degrees")
    items = list(client.conversations.items.list(conversation.id, order="asc"))
    assert [item.type for item in items] == [
        "message",
        "reasoning",
        "function_call",
        "function_call_output",
        "message",
    ]
    assert getattr(items[1], "encrypted_content", None) is None
    assert items[4].content[0].logprobs == []  # type: ignore[union-attr]
    included = client.conversations.items.list(
        conversation.id,
        order="asc",
        include=["reasoning.encrypted_content", "message.output_text.logprobs"],
    ).data
    assert included[4].content[0].logprobs  # type: ignore[union-attr]
    sealed = included[1].encrypted_content  # type: ignore[union-attr]
    assert sealed
    assert "A call is needed." not in sealed
    one = client.conversations.items.retrieve(
        reasoning.id, conversation_id=conversation.id, include=["reasoning.encrypted_content"]
    )
    assert one.encrypted_content  # type: ignore[union-attr]
    # The sealed reasoning opens into a response outside the conversation.
    opaque = {"type": "reasoning", "id": reasoning.id, "summary": [], "encrypted_content": sealed}
    echoed = [items[0].model_dump(exclude_none=True), opaque, call.model_dump(exclude_none=True)]
    output = items[3].model_dump(exclude_none=True)
    again = client.responses.create(model=MODEL, input=[*echoed, output], tools=TOOLS, store=False)
    assert again.output_text == "It is sunny in Paris."
    assert "A call is needed." in last_prompt(router)


def test_conversation_errors(client: openai.OpenAI, router: Router) -> None:
    conversation = client.conversations.create()
    first = client.responses.create(model=MODEL, input="hello")
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(
            model=MODEL,
            input="both",
            conversation=conversation.id,
            previous_response_id=first.id,
        )
    assert caught.value.code == "mutually_exclusive_parameters"
    with pytest.raises(openai.NotFoundError) as missing:
        client.responses.create(model=MODEL, input="hi", conversation="conv_nope")
    assert missing.value.code == "conversation_not_found"
    with pytest.raises(openai.NotFoundError):
        client.conversations.items.create("conv_nope", items=[{"role": "user", "content": "x"}])
    # Nothing a failed request sent was added.
    assert client.conversations.items.list(conversation.id).data == []
    base = f"{router.base_url}/v1/conversations"
    bad: list[tuple[str, str, dict[str, Any] | None, str]] = [
        ("POST", base, {"items": [{"role": "robot", "content": "x"}]}, "items[0].role"),
        ("POST", base, {"items": [{"role": "user", "content": "x"}] * 21}, "items"),
        ("POST", base, {"metadata": {f"k{i}": "v" for i in range(17)}}, "metadata"),
        ("POST", base, {"metadata": {"k": "v" * 513}}, "metadata"),
        ("POST", base, {"colour": "blue"}, "colour"),
        ("POST", f"{base}/{conversation.id}", {}, "metadata"),
        ("POST", f"{base}/{conversation.id}/items", {"items": [{"type": "item_reference"}]}, ""),
        ("GET", f"{base}/{conversation.id}/items?limit=0", None, "limit"),
        ("GET", f"{base}/{conversation.id}/items?order=up", None, "order"),
        ("GET", f"{base}/{conversation.id}/items?after=msg_nope", None, "after"),
        ("GET", f"{base}/{conversation.id}/items?include[]=file_search_call.results", None, ""),
        ("POST", f"{router.base_url}/v1/responses", {"input": "x", "conversation": {}}, ""),
    ]
    for method, url, body, param in bad:
        reply = httpx.request(method, url, json=body, timeout=10)
        assert reply.status_code == 400, (url, body, reply.text)
        error = reply.json()["error"]
        assert isinstance(error["code"], str)
        assert (error["param"] or "").startswith(param), (url, body, error)


def test_a_conversation_is_found_by_its_own_tenant_only() -> None:
    keys = {"a": "key-of-a", "b": "key-of-b"}
    config = {
        "server": {"api_keys": ["plain-key"]},
        "tenants": {name: {"keys": [key]} for name, key in keys.items()},
    }
    with run_router(config=config, sims=1) as router:

        def client(key: str) -> openai.OpenAI:
            return openai.OpenAI(base_url=f"{router.base_url}/v1", api_key=key, max_retries=0)

        owner, other, plain = client(keys["a"]), client(keys["b"]), client("plain-key")
        conversation = owner.conversations.create(items=[{"role": "user", "content": "secret"}])
        item_id = owner.conversations.items.list(conversation.id).data[0].id
        for stranger in (other, plain):
            for attempt in (
                lambda s=stranger: s.conversations.retrieve(conversation.id),
                lambda s=stranger: s.conversations.update(conversation.id, metadata={"x": "y"}),
                lambda s=stranger: s.conversations.items.list(conversation.id),
                lambda s=stranger: s.conversations.items.retrieve(
                    item_id, conversation_id=conversation.id
                ),
                lambda s=stranger: s.conversations.items.create(
                    conversation.id, items=[{"role": "user", "content": "intruder"}]
                ),
                lambda s=stranger: s.conversations.items.delete(
                    item_id, conversation_id=conversation.id
                ),
                lambda s=stranger: s.responses.create(
                    model=MODEL, input="tell me", conversation=conversation.id
                ),
                lambda s=stranger: s.conversations.delete(conversation.id),
            ):
                with pytest.raises(openai.NotFoundError):
                    attempt()
        assert owner.conversations.retrieve(conversation.id).metadata == {}
        assert texts(owner.conversations.items.list(conversation.id)) == ["secret"]
        answer = owner.responses.create(model=MODEL, input="go on", conversation=conversation.id)
        assert answer.status == "completed"
        mine = plain.conversations.create()
        assert plain.conversations.retrieve(mine.id).id == mine.id
        with pytest.raises(openai.NotFoundError):
            owner.conversations.retrieve(mine.id)


def test_a_conversation_stops_growing_at_max_bytes(caplog: pytest.LogCaptureFixture) -> None:
    with run_router(config={"responses": {"max_bytes": 3_000}}, sims=1) as router:
        api = openai.OpenAI(base_url=f"{router.base_url}/v1", api_key="k", max_retries=0)
        conversation = api.conversations.create(items=[{"role": "user", "content": "x" * 1_000}])
        with pytest.raises(openai.BadRequestError) as caught:
            api.conversations.items.create(
                conversation.id, items=[{"role": "user", "content": "y" * 2_000}]
            )
        assert caught.value.code == "conversation_too_large"
        # A response that does not fit is answered; only adding it failed (logged).
        answer = api.responses.create(model=MODEL, input="z" * 1_500, conversation=conversation.id)
        assert answer.status == "completed"
        assert len(api.conversations.items.list(conversation.id).data) == 1
    assert any(
        "could not be added to conversation" in record.getMessage() for record in caplog.records
    )

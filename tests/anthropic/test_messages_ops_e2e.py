"""The Messages API under the router's operating rules, with the ``anthropic`` client: tenant
keys through ``x-api-key`` (their limits answered as ``rate_limit_error`` with
``retry-after``), worker failures as Anthropic's errors (before the stream and mid-stream, as
its ``error`` event), images through the chat path's image checks."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest

from tests.multimodal.helpers import image_bytes
from tests.server.harness import MODEL, Router, run_router
from tests.server.test_image_parts_e2e import IMAGES, QWEN2_VL, last_request, vision_model

TENANT_KEY = "key-of-a"
PLAIN_KEY = "plain-key"


@pytest.fixture(scope="module")
def router() -> Iterator[Router]:
    config = {
        "server": {"api_keys": [PLAIN_KEY], "request_timeout_s": 3},
        "tenants": {"a": {"keys": [TENANT_KEY], "requests_per_minute": 3}},
    }
    with run_router(config, sims=1) as running:
        yield running


@pytest.fixture
def sim_knobs(router: Router) -> Iterator[dict[str, Any]]:
    knobs: dict[str, Any] = router.sims[0].knobs
    yield knobs
    knobs.update(
        {"fail_after_tokens": None, "fail_status": None, "tokens_per_chunk": 1, "delay_ms": 0.0}
    )


def client_of(router: Router, key: str = TENANT_KEY) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=router.base_url, api_key=key, max_retries=0)


def user(text: str) -> list[Any]:
    return [{"role": "user", "content": text}]


def test_tenant_keys_work_through_x_api_key_and_limits_are_rate_limit_errors(
    router: Router,
) -> None:
    client = client_of(router)
    with pytest.raises(anthropic.RateLimitError) as limited:  # noqa: PT012
        for _ in range(4):
            client.messages.create(model=MODEL, max_tokens=4, messages=user("hi"))
    assert limited.value.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]
    assert limited.value.response.headers["retry-after"]
    with pytest.raises(anthropic.AuthenticationError) as refused:
        client_of(router, "nobody").messages.create(model=MODEL, max_tokens=4, messages=user("x"))
    assert refused.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]


def stream(router: Router, text: str) -> list[tuple[str, dict[str, Any]]]:
    """The ``(event, data)`` pairs of a streamed answer to ``text``."""
    events = []
    with httpx.stream(
        "POST",
        f"{router.base_url}/v1/messages",
        json={"model": MODEL, "max_tokens": 40, "stream": True, "messages": user(text)},
        headers={"x-api-key": PLAIN_KEY},
        timeout=30,
    ) as response:
        name = ""
        for line in response.iter_lines():
            if line.startswith("event: "):
                name = line[len("event: ") :]
            elif line.startswith("data: "):
                events.append((name, json.loads(line[len("data: ") :])))
    return events


def test_a_failure_mid_stream_is_an_error_event(router: Router, sim_knobs: dict[str, Any]) -> None:
    sim_knobs.update({"fail_after_tokens": 2, "tokens_per_chunk": 1})
    events = stream(router, "a b c d e")
    names = [name for name, _ in events]
    assert names[:2] == ["message_start", "ping"]
    assert "content_block_delta" in names
    last_name, last = events[-1]
    assert last_name == "error"
    assert last["type"] == "error"
    assert set(last["error"]) == {"type", "message"}
    assert "message_stop" not in names
    client = client_of(router, PLAIN_KEY)
    with (
        pytest.raises(anthropic.APIStatusError),
        client.messages.stream(model=MODEL, max_tokens=40, messages=user("f g h i j")) as events,
    ):
        for _ in events:
            pass


def test_a_stream_cut_by_the_request_timeout_ends_with_an_error_event(
    router: Router, sim_knobs: dict[str, Any]
) -> None:
    sim_knobs.update({"delay_ms": 400.0, "tokens_per_chunk": 1})
    events = stream(router, "one two three four five six seven eight nine ten eleven twelve")
    name, last = events[-1]
    assert name == "error"
    assert last == {
        "type": "error",
        "error": {"type": "timeout_error", "message": "the request timed out after 3s"},
    }


def test_a_worker_refusal_before_the_answer_is_an_anthropic_error(
    router: Router, sim_knobs: dict[str, Any]
) -> None:
    sim_knobs.update({"fail_status": "INVALID_ARGUMENT"})
    answer = httpx.post(
        f"{router.base_url}/v1/messages",
        json={"model": MODEL, "max_tokens": 8, "messages": user("hi")},
        headers={"x-api-key": PLAIN_KEY},
        timeout=30,
    )
    assert answer.status_code >= 400
    body = answer.json()
    assert body["type"] == "error"
    assert set(body["error"]) == {"type", "message"}


@pytest.mark.needs_shared
@pytest.mark.skipif(not QWEN2_VL.is_file(), reason=f"shared fixture not found: {QWEN2_VL}")
def test_images_base64_and_url_take_the_image_path(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    model = vision_model(tmp_path_factory.mktemp("vision"))
    with run_router(
        sims=1, model_dir=model, model={"chat_template": str(QWEN2_VL), "images": IMAGES}
    ) as running:
        client = client_of(running, "unused")
        data = base64.b64encode(image_bytes("PNG", (28, 28))).decode()
        message = client.messages.create(
            model=MODEL,
            max_tokens=4,
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "What is in the picture?"},
                        {
                            "type": "image",
                            "source": {"type": "base64", "media_type": "image/png", "data": data},
                        },
                    ],
                }
            ],
        )
        assert message.stop_reason in ("end_turn", "max_tokens")
        _, record = last_request(running)
        assert record.used
        assert record.modalities == ("image",)
        with pytest.raises(anthropic.BadRequestError, match="https") as bad:
            client.messages.create(
                model=MODEL,
                max_tokens=4,
                messages=[
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "image",
                                "source": {"type": "url", "url": "http://10.0.0.1/cat.png"},
                            }
                        ],
                    }
                ],
            )
        assert bad.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]


def test_requests_are_counted_under_their_route(router: Router) -> None:
    client = client_of(router, PLAIN_KEY)
    client.messages.create(model=MODEL, max_tokens=4, messages=user("count me"))
    client.messages.count_tokens(model=MODEL, messages=user("count me"))
    exposition = httpx.get(f"{router.base_url}/metrics", timeout=10).text
    assert 'route="/v1/messages"' in exposition
    assert 'route="/v1/messages/count_tokens"' in exposition

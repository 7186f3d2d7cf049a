"""Background responses (``background: true``) with the official client over real HTTP, against
a simulated worker that takes its time per token: polled until they end, cancelled on the
worker, their event stream resumed from the middle, the queue bound, tenant budgets, shutdown."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.ops.redis_server import RedisServer
from tests.server.harness import MODEL, Router, run_router
from tests.support import wait_for

#: Per generated token (the sim echoes the input, a token a word or so).
DELAY_MS = 20
SHORT = "the quick brown fox jumps over the lazy dog"
#: Long enough to be cancelled mid-way (some seconds of tokens).
LONG = " ".join(f"word{i}" for i in range(400))
FINISHED = {"completed", "incomplete", "failed", "cancelled"}


@pytest.fixture(scope="module")
def router() -> Iterator[Router]:
    config = {
        "background_responses": {"max_running": 2, "max_queued": 1},
        # One foreground request at a time, none waiting: a permit left taken shows at once.
        "server": {"max_concurrent_requests": 1, "queue_size": 0},
    }
    with run_router(config=config, sims=1, sim_kwargs={"delay_ms": DELAY_MS}) as running:
        yield running


@pytest.fixture
def client(router: Router) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{router.base_url}/v1", api_key="unused", max_retries=0)


def poll_until_finished(client: openai.OpenAI, response_id: str) -> tuple[Any, list[str]]:
    """The response once it ended, and the statuses seen on the way."""
    seen: list[str] = []
    deadline = time.monotonic() + 60
    while True:
        response = client.responses.retrieve(response_id)
        if not seen or seen[-1] != response.status:
            seen.append(response.status)
        if response.status in FINISHED:
            return response, seen
        assert time.monotonic() < deadline, f"still {response.status}"
        time.sleep(0.05)


def worker_request_of(router: Router, text: str) -> str:
    """The id of the worker request whose prompt holds ``text`` (the newest)."""
    requests = router.sims[0].records.requests

    def found() -> list[str]:
        return [r.request_id for r in list(requests) if text in r.tokenized.original_text]

    wait_for(lambda: bool(found()), "the worker request", within=20)
    return found()[-1]


def admitted(client: openai.OpenAI) -> bool:
    """Whether a foreground request is admitted now (not a 429)."""
    try:
        client.responses.create(model=MODEL, input=SHORT, max_output_tokens=16)
    except openai.RateLimitError:
        return False
    return True


def background_tasks(router: Router) -> list[str]:
    async def names() -> list[str]:
        return [
            task.get_name()
            for task in asyncio.all_tasks()
            if task.get_name().startswith("turnout-background-")
        ]

    found: list[str] = router.call(names)
    return found


def test_a_background_response_answers_at_once_and_is_polled_until_completed(
    client: openai.OpenAI,
) -> None:
    started = time.monotonic()
    submitted = client.responses.create(model=MODEL, input=SHORT, background=True)
    assert time.monotonic() - started < 2
    assert submitted.background is True
    assert submitted.status in ("queued", "in_progress")
    assert submitted.output == []
    response, seen = poll_until_finished(client, submitted.id)
    assert response.status == "completed"
    assert response.background is True
    assert response.output_text == SHORT
    assert response.usage is not None
    assert response.usage.output_tokens > 0
    assert seen[-1] == "completed"
    assert set(seen) <= {"queued", "in_progress", "completed"}
    # The foreground answer of the same input is the same output.
    foreground = client.responses.create(model=MODEL, input=SHORT)
    assert foreground.output_text == response.output_text
    assert foreground.background is False


def test_background_needs_store_and_bad_requests_are_still_400s(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model=MODEL, input=SHORT, background=True, store=False)
    assert refused.value.body["param"] == "store"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as bad:
        client.responses.create(model=MODEL, input=SHORT, background=True, temperature=3)
    assert bad.value.body["param"] == "temperature"  # type: ignore[index]
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="no-such-model", input=SHORT, background=True)


def test_cancel_aborts_on_the_worker_and_ends_cancelled(
    router: Router, client: openai.OpenAI
) -> None:
    submitted = client.responses.create(model=MODEL, input=LONG, background=True)
    request_id = worker_request_of(router, LONG)
    sim = router.sims[0]
    wait_for(lambda: sim.records.generated.get(request_id, 0) > 5, "tokens generated", within=20)
    assert client.responses.retrieve(submitted.id).status == "in_progress"
    # Nothing to follow up on yet.
    with pytest.raises(openai.BadRequestError) as unfinished:
        client.responses.create(model=MODEL, input="and?", previous_response_id=submitted.id)
    assert unfinished.value.body["param"] == "previous_response_id"  # type: ignore[index]
    cancelled = client.responses.cancel(submitted.id)
    assert cancelled.status == "cancelled"
    wait_for(lambda: request_id in sim.records.outcomes, "the worker's outcome", within=10)
    assert sim.records.outcomes[request_id] in ("abort", "cancelled")
    assert sim.records.generated[request_id] < 300  # stopped mid-way
    assert client.responses.retrieve(submitted.id).status == "cancelled"
    # Cancelling again, or a finished one, answers it as it ended.
    assert client.responses.cancel(submitted.id).status == "cancelled"
    done = client.responses.create(model=MODEL, input=SHORT, background=True)
    poll_until_finished(client, done.id)
    assert client.responses.cancel(done.id).status == "completed"
    router.wait_until(lambda: not background_tasks(router))


def test_a_queued_response_is_cancelled_before_it_runs(
    router: Router, client: openai.OpenAI
) -> None:
    running = [client.responses.create(model=MODEL, input=LONG, background=True) for _ in range(2)]
    queued = client.responses.create(model=MODEL, input=SHORT, background=True)
    assert client.responses.retrieve(queued.id).status == "queued"
    assert client.responses.cancel(queued.id).status == "cancelled"
    for response in running:
        assert client.responses.cancel(response.id).status == "cancelled"
    router.wait_until(lambda: not background_tasks(router))


def test_the_queue_is_bounded(router: Router, client: openai.OpenAI) -> None:
    taken = [client.responses.create(model=MODEL, input=LONG, background=True) for _ in range(3)]
    with pytest.raises(openai.RateLimitError) as full:
        client.responses.create(model=MODEL, input=SHORT, background=True)
    assert full.value.code == "background_queue_full"
    assert full.value.response.headers["retry-after"] == "1"
    # Foreground requests do not wait for background slots.
    assert client.responses.create(model=MODEL, input=SHORT).status == "completed"
    for response in taken:
        client.responses.cancel(response.id)
    again = client.responses.create(model=MODEL, input=SHORT, background=True)
    assert poll_until_finished(client, again.id)[0].status == "completed"


def test_a_worker_failure_ends_it_failed_with_the_error_and_its_event(
    router: Router, client: openai.OpenAI
) -> None:
    router.sims[0].knobs.update({"fail_status": "INVALID_ARGUMENT", "fault_budget": 1})
    submitted = client.responses.create(model=MODEL, input=SHORT, background=True)
    failed = poll_until_finished(client, submitted.id)[0]
    assert failed.status == "failed"
    assert failed.error is not None
    assert failed.error.message
    events = stream_events(client, submitted.id)
    assert events[-1]["type"] == "response.failed"
    assert events[-1]["response"]["error"]["code"] == failed.error.code


def stream_events(
    client: openai.OpenAI, response_id: str, starting_after: int | None = None, stop: int = 0
) -> list[dict[str, Any]]:
    """The events of ``GET …?stream=true`` as JSON (the first ``stop`` only, when set: the
    connection is dropped after them)."""
    fields: dict[str, Any] = {}
    if starting_after is not None:
        fields["starting_after"] = starting_after
    events = []
    with client.responses.retrieve(response_id, stream=True, **fields) as stream:
        for event in stream:
            events.append(event.model_dump(mode="json", exclude_unset=True))
            if stop and len(events) == stop:
                break
    return events


def test_a_stream_resumes_from_the_middle(client: openai.OpenAI) -> None:
    text = " ".join(f"token{i}" for i in range(60))
    submitted = client.responses.create(model=MODEL, input=text, background=True)
    # A reader drops its connection after a few events, while the response still runs…
    head = stream_events(client, submitted.id, stop=6)
    assert [e["sequence_number"] for e in head] == list(range(6))
    assert [e["type"] for e in head[:2]] == ["response.queued", "response.created"]
    assert head[0]["response"]["status"] == "queued"
    # … and resumes after the last it read, following the live events to the end.
    tail = stream_events(client, submitted.id, starting_after=head[-1]["sequence_number"])
    assert tail[0]["sequence_number"] == 6
    assert tail[-1]["type"] == "response.completed"
    # Once it ended, the whole stream reads the same, and any tail of it too.
    full = stream_events(client, submitted.id)
    assert [e["sequence_number"] for e in full] == list(range(len(full)))
    assert head + tail == full
    middle = len(full) // 2
    assert stream_events(client, submitted.id, starting_after=middle) == full[middle + 1 :]
    done = client.responses.retrieve(submitted.id)
    assert full[-1]["response"]["output"][0]["content"][0]["text"] == done.output_text == text


def test_stream_true_on_create_follows_the_background_response(
    router: Router, client: openai.OpenAI
) -> None:
    body = {"model": MODEL, "input": SHORT, "background": True, "stream": True}
    with httpx.stream("POST", f"{router.base_url}/v1/responses", json=body, timeout=30) as reply:
        assert reply.status_code == 200
        text = reply.read().decode()
    assert "event: response.completed" in text
    # A client that leaves stops its reading only: the response goes on, its permit is back.
    body["input"] = LONG
    with httpx.stream("POST", f"{router.base_url}/v1/responses", json=body, timeout=30) as reply:
        lines = reply.iter_lines()
        first = next(line for line in lines if line.startswith("data: "))
    response_id = json.loads(first[len("data: ") :])["response"]["id"]
    wait_for(lambda: admitted(client), "the permit given back", within=20)
    assert client.responses.retrieve(response_id).status == "in_progress"
    assert client.responses.cancel(response_id).status == "cancelled"


def test_resuming_needs_a_background_response_and_a_valid_sequence_number(
    router: Router, client: openai.OpenAI
) -> None:
    foreground = client.responses.create(model=MODEL, input=SHORT)
    reply = httpx.get(
        f"{router.base_url}/v1/responses/{foreground.id}", params={"stream": "true"}, timeout=10
    )
    assert reply.status_code == 400
    assert reply.json()["error"]["code"] == "unsupported_parameter"
    submitted = client.responses.create(model=MODEL, input=SHORT, background=True)
    reply = httpx.get(
        f"{router.base_url}/v1/responses/{submitted.id}",
        params={"stream": "true", "starting_after": "x"},
        timeout=10,
    )
    assert reply.status_code == 400
    assert reply.json()["error"]["param"] == "starting_after"
    poll_until_finished(client, submitted.id)
    with pytest.raises(openai.BadRequestError):
        client.responses.cancel(foreground.id)


def test_a_tenant_budget_holds_for_its_background_responses() -> None:
    keys = {"a": "key-of-a", "b": "key-of-b"}
    config = {
        "tenants": {
            "a": {"keys": [keys["a"]], "concurrent_requests": 1},
            "b": {"keys": [keys["b"]], "tokens_per_minute": 200},
        }
    }
    with run_router(config=config, sims=1, sim_kwargs={"delay_ms": DELAY_MS}) as router:

        def client(key: str) -> openai.OpenAI:
            return openai.OpenAI(base_url=f"{router.base_url}/v1", api_key=key, max_retries=0)

        a, b = client(keys["a"]), client(keys["b"])
        running = a.responses.create(model=MODEL, input=LONG, background=True)
        # Its one concurrent request is the background response, until it ends.
        with pytest.raises(openai.RateLimitError):
            a.responses.create(model=MODEL, input=SHORT, background=True)
        with pytest.raises(openai.RateLimitError):
            a.responses.create(model=MODEL, input=SHORT)
        # Another tenant neither sees nor cancels it.
        with pytest.raises(openai.NotFoundError):
            b.responses.retrieve(running.id)
        with pytest.raises(openai.NotFoundError):
            b.responses.cancel(running.id)
        assert a.responses.cancel(running.id).status == "cancelled"

        wait_for(lambda: admitted(a), "the tenant's slot given back", within=20)
        after = a.responses.create(model=MODEL, input=SHORT, background=True)
        assert poll_until_finished(a, after.id)[0].status == "completed"
        # Tokens are reserved when it reaches a worker: more than the tenant's window fails it.
        greedy = b.responses.create(
            model=MODEL, input=SHORT, background=True, max_output_tokens=1000
        )
        failed = poll_until_finished(b, greedy.id)[0]
        assert failed.status == "failed"
        assert failed.error is not None
        assert failed.error.code == "request_too_large_for_limit"
        fits = b.responses.create(model=MODEL, input=SHORT, background=True, max_output_tokens=60)
        assert poll_until_finished(b, fits.id)[0].status == "completed"


def test_shutdown_ends_running_background_responses_failed_and_aborted(
    redis_server: RedisServer,
) -> None:
    """A router that stops aborts its running background responses and stores them as failed
    (seen here by a second router on the same Redis)."""
    responses = {"storage": redis_server.url, "key_prefix": f"test-{uuid.uuid4().hex[:12]}"}
    config = {"responses": responses}
    with run_router(config=config, sims=1, sim_kwargs={"delay_ms": DELAY_MS}) as router:
        client = openai.OpenAI(base_url=f"{router.base_url}/v1", api_key="x", max_retries=0)
        submitted = client.responses.create(model=MODEL, input=LONG, background=True)
        request_id = worker_request_of(router, LONG)
        sim = router.sims[0]
        wait_for(lambda: sim.records.generated.get(request_id, 0) > 2, "tokens", within=20)
    assert sim.records.outcomes.get(request_id) in ("abort", "cancelled")
    with run_router(config=config, sims=1) as other:
        client = openai.OpenAI(base_url=f"{other.base_url}/v1", api_key="x", max_retries=0)
        ended = client.responses.retrieve(submitted.id)
        assert ended.status == "failed"
        assert ended.error is not None
        assert ended.error.code == "shutting_down"

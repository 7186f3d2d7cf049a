"""The official ``openai`` client against a router whose model is served by a pool of two HTTP
workers: chat, streamed chat (the upstream's bytes passed through), embeddings, balancing."""

from __future__ import annotations

import httpx
import openai

from turnout.sim import SimKnobs
from turnout.testing.router import RunningRouter

from .conftest import MODEL, REMOTE, front, served_by


def test_chat_stream_and_embeddings_over_a_pool_of_two(upstreams: list[RunningRouter]) -> None:
    before = [served_by(u) for u in upstreams]
    with front([u.base_url for u in upstreams]) as router:
        client = openai.OpenAI(base_url=router.base_url + "/v1", api_key="x", max_retries=0)
        answer = client.chat.completions.create(
            model=REMOTE, messages=[{"role": "user", "content": "hello there"}], max_tokens=8
        )
        assert answer.choices[0].message.content
        # Passed back as the upstream wrote it: it names the upstream's own model.
        assert answer.model == MODEL
        assert answer.usage is not None
        assert answer.usage.completion_tokens > 0

        chunks = list(
            client.chat.completions.create(
                model=REMOTE,
                messages=[{"role": "user", "content": "stream it"}],
                max_tokens=8,
                stream=True,
            )
        )
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text
        assert chunks[-1].choices[0].finish_reason is not None

        vectors = client.embeddings.create(model=REMOTE, input=["one", "two"])
        assert len(vectors.data) == 2
        assert len(vectors.data[0].embedding) > 0

        for _ in range(4):
            client.chat.completions.create(
                model=REMOTE, messages=[{"role": "user", "content": "hi"}], max_tokens=4
            )
        listed = client.models.list()
        assert [m.id for m in listed.data] == [REMOTE]
    after = [served_by(u) for u in upstreams]
    assert all(a > b for a, b in zip(after, before, strict=True)), (before, after)


def test_stream_bytes_are_the_upstreams(upstreams: list[RunningRouter]) -> None:
    """A stream's body through the front router is the body the upstream sends (a scripted
    answer is the same every time), piece by piece: nothing re-encoded."""
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "same bytes"}],
        "max_tokens": 6,
        "stream": True,
        "seed": 1,
    }
    sim = upstreams[0].sims[0]
    # The whole answer in one message: the upstream puts tokens that reach it together into
    # one event, so answers sent a token at a time could differ upstream of the relay.
    sim.knobs.update({"tokens_per_chunk": 64})
    try:
        direct = httpx.post(upstreams[0].base_url + "/v1/chat/completions", json=body, timeout=30)
        with front([upstreams[0].base_url]) as router:
            relayed = httpx.post(
                router.base_url + "/v1/chat/completions",
                json={**body, "model": REMOTE},
                timeout=30,
            )
    finally:
        sim.knobs.update({"tokens_per_chunk": SimKnobs().tokens_per_chunk})
    assert relayed.status_code == 200
    assert relayed.headers["content-type"].startswith("text/event-stream")
    strip = _without_ids
    assert strip(relayed.text) == strip(direct.text)


def _without_ids(text: str) -> str:
    """An SSE body with its per-request ids and times blanked."""
    import re

    return re.sub(r'"(id|created|system_fingerprint)":("[^"]*"|\d+)', r'"\1":_', text)


def test_completions_and_responses_are_forwarded(upstreams: list[RunningRouter]) -> None:
    with front([upstreams[0].base_url]) as router:
        client = openai.OpenAI(base_url=router.base_url + "/v1", api_key="x", max_retries=0)
        completion = client.completions.create(model=REMOTE, prompt="once upon", max_tokens=6)
        assert completion.choices[0].text
        pieces = list(
            client.completions.create(model=REMOTE, prompt="once", max_tokens=6, stream=True)
        )
        assert "".join(p.choices[0].text for p in pieces if p.choices)

        response = client.responses.create(model=REMOTE, input="hello", max_output_tokens=8)
        assert response.output_text
        events = list(
            client.responses.create(model=REMOTE, input="hello", max_output_tokens=8, stream=True)
        )
        assert events[-1].type == "response.completed"

        # An upstream's client error reaches the client as the upstream wrote it.
        bad = httpx.post(
            router.base_url + "/v1/chat/completions",
            json={"model": REMOTE, "messages": [], "max_tokens": -3},
            timeout=30,
        )
        assert bad.status_code == 400
        assert bad.json()["error"]["param"] is not None


def test_what_is_not_forwarded_is_refused_clearly(upstreams: list[RunningRouter]) -> None:
    """Routes that need the worker's gRPC side or a tokenizer answer an error that says so,
    never a 500."""
    with front([upstreams[0].base_url]) as router:
        info = httpx.get(router.base_url + f"/get_model_info?model={REMOTE}", timeout=30)
        assert info.status_code == 501
        messages = httpx.post(
            router.base_url + "/v1/messages",
            json={"model": REMOTE, "max_tokens": 4, "messages": [{"role": "user", "content": "x"}]},
            timeout=30,
        )
        assert messages.status_code in (400, 503), messages.text
        assert "tokenizer" in messages.text


def test_the_fields_the_relay_reads_may_hold_any_json() -> None:
    """The upstream judges the fields (a lenient server takes a null ``stream``): the relay
    reads what is usable and forwards the request either way."""
    from turnout.http_workers.relay import peek_request

    loose = peek_request(b'{"model": 3, "stream": null, "n": null, "max_tokens": "9"}')
    assert (loose.model_name, loose.streams, loose.choices, loose.limit) == (None, False, 1, None)
    tight = peek_request(b'{"model": "m", "stream": true, "n": 2, "max_completion_tokens": 7}')
    assert (tight.model_name, tight.streams, tight.choices, tight.limit) == ("m", True, 2, 7)

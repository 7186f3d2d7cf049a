"""The SSE response on its own: one ASGI message per batch, framed as before; an error of the
source after the start becomes an error event before the tail; the source is closed at once
whenever the response stops (a client gone included); keep-alive comments while idle."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any

import pytest

from turnout.errors import ApiError
from turnout.server.respond import StreamAnswer
from turnout.server.sse import KEEPALIVE


async def run(stream: StreamAnswer, fail_at: int | None = None) -> list[dict[str, Any]]:
    """The messages the response sends (the send fails at message ``fail_at``, as it does
    when the client is gone)."""
    messages: list[dict[str, Any]] = []

    async def send(message: Any) -> None:
        if len(messages) == fail_at:
            raise ConnectionResetError("client gone")
        messages.append(message)

    async def receive() -> Any:
        raise AssertionError("an event stream does not read")

    await stream({"type": "http"}, receive, send)
    return messages


def bodies(messages: list[dict[str, Any]]) -> list[bytes]:
    assert messages[0]["type"] == "http.response.start"
    assert all(m["more_body"] for m in messages[1:-1])
    assert not messages[-1]["more_body"]
    return [m["body"] for m in messages[1:]]


async def source(
    batches: list[list[Any]], error: Exception | None = None, closed: list[bool] | None = None
) -> AsyncGenerator[list[Any], None]:
    try:
        for batch in batches:
            yield batch
        if error is not None:
            raise error
    finally:
        if closed is not None:
            closed.append(True)


async def test_one_piece_per_batch_then_done() -> None:
    messages = await run(StreamAnswer(source([[{"a": 1}, {"b": 2}], [{"c": 3}]])))
    assert bodies(messages) == [
        b'data: {"a":1}\n\ndata: {"b":2}\n\n',
        b'data: {"c":3}\n\n',
        b"data: [DONE]\n\n",
    ]
    headers = dict(messages[0]["headers"])
    assert headers[b"content-type"].startswith(b"text/event-stream")
    assert headers[b"cache-control"] == b"no-cache"


async def test_typed_events_are_named_and_the_stream_has_no_done() -> None:
    stream = StreamAnswer(source([[{"type": "x.delta", "n": 1}]]), typed=True)
    assert bodies(await run(stream)) == [
        b'event: x.delta\ndata: {"type":"x.delta","n":1}\n\n',
        b"",
    ]


async def test_an_api_error_mid_stream_is_an_error_event_before_done() -> None:
    closed: list[bool] = []
    error = ApiError(503, "worker gone", code="worker_unavailable")
    messages = await run(StreamAnswer(source([[{"a": 1}]], error, closed)))
    assert bodies(messages) == [
        b'data: {"a":1}\n\n',
        b"data: " + error.to_json() + b"\n\n",
        b"data: [DONE]\n\n",
    ]
    assert closed == [True]


async def test_an_unexpected_error_mid_stream_is_an_internal_error_event() -> None:
    body = bodies(await run(StreamAnswer(source([], KeyError("x")))))
    assert body[0].startswith(b"data: ")
    assert b"internal error: KeyError" in body[0]
    assert body[1] == b"data: [DONE]\n\n"


async def test_a_typed_error_event_is_numbered_after_the_events_sent() -> None:
    batches = [[{"type": "a"}, {"type": "b"}], [{"type": "c"}]]
    stream = StreamAnswer(source(batches, ApiError(500, "boom")), typed=True)
    body = bodies(await run(stream))
    assert body[-2].startswith(b"event: error\n")
    assert b'"sequence_number":3' in body[-2]
    assert body[-1] == b""


async def test_a_client_gone_closes_the_source_at_once() -> None:
    """The HTTP side stops when the client leaves: that reaches the flow at once (which aborts
    the request on its worker)."""
    closed: list[bool] = []

    async def endless() -> AsyncGenerator[list[Any], None]:
        try:
            while True:
                yield [{"x": 1}]
        finally:
            closed.append(True)

    with pytest.raises(ConnectionResetError, match="client gone"):
        await run(StreamAnswer(endless()), fail_at=3)
    assert closed == [True]


async def test_an_idle_stream_sends_keepalive_comments_between_pieces() -> None:
    release = asyncio.Event()

    async def slow() -> AsyncGenerator[list[Any], None]:
        yield [{"a": 1}]
        await asyncio.wait_for(release.wait(), 10)
        yield [{"b": 2}]

    async def later() -> None:
        await asyncio.sleep(0.2)
        release.set()

    releasing = asyncio.create_task(later())
    body = bodies(await run(StreamAnswer(slow(), keepalive_s=0.02)))
    await releasing
    assert body[0] == b'data: {"a":1}\n\n'
    assert body[-1] == b"data: [DONE]\n\n"
    assert body[-2] == b'data: {"b":2}\n\n'
    assert KEEPALIVE in body[1:-2]
    assert set(body[1:-2]) == {KEEPALIVE}

"""A worker that sends what is not protobuf: clients of the real router get a 502 with an
OpenAI-style error, never a 500 with a traceback (both transports)."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.server.harness import MODEL, run_router
from turnout.wire import pb

from ._h2server import Request, grpc_message
from ._scripted_worker import scripted_worker

NOT_PROTOBUF = b"\xff\xff\xff\xff"
FIRST_CHUNK = pb.GenerateResponse(
    chunk=pb.GenerateStreamChunk(token_ids=[9707], prompt_tokens=10, completion_tokens=1)
).SerializeToString()


async def garbage_first(request: Request) -> None:
    request.send_headers()
    request.send_data(grpc_message(NOT_PROTOBUF))


async def garbage_after_a_chunk(request: Request) -> None:
    request.send_headers()
    request.send_data(grpc_message(FIRST_CHUNK))
    request.send_data(grpc_message(NOT_PROTOBUF))


def chat(stream: bool) -> dict[str, object]:
    return {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": stream}


@pytest.mark.parametrize("transport", ["native", "grpcio"])
def test_message_that_is_not_protobuf_is_a_502(transport: str) -> None:
    with (
        scripted_worker(garbage_first) as url,
        run_router({"workers": [{"url": url, "model": MODEL}], "wire": {"transport": transport}},
                   sims=0) as router,
    ):  # fmt: skip
        reply = httpx.post(f"{router.base_url}/v1/chat/completions", json=chat(False), timeout=10)
        assert reply.status_code == 502, reply.text
        error = reply.json()["error"]
        assert isinstance(error["code"], str)
        assert "not valid protobuf" in error["message"]
        assert "Traceback" not in reply.text


@pytest.mark.parametrize("transport", ["native", "grpcio"])
def test_stream_cut_by_a_message_that_is_not_protobuf_ends_with_an_error_event(
    transport: str,
) -> None:
    with (
        scripted_worker(garbage_after_a_chunk) as url,
        run_router({"workers": [{"url": url, "model": MODEL}], "wire": {"transport": transport}},
                   sims=0) as router,
    ):  # fmt: skip
        reply = httpx.post(f"{router.base_url}/v1/chat/completions", json=chat(True), timeout=10)
        assert reply.status_code == 200  # the stream had started
        events = [line[6:] for line in reply.text.splitlines() if line.startswith("data: ")]
        assert events[-1] == "[DONE]"
        error = json.loads(events[-2])["error"]
        assert "not valid protobuf" in error["message"]
        assert isinstance(error["code"], str)

"""A worker closing its connection gracefully (GOAWAY) refuses the streams it has not started:
the router sends the request again on a new connection, without counting it against the
worker, even when that worker is the only one (the real router over HTTP, both transports)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.server.harness import MODEL, run_router
from tests.wire._h2server import Request
from tests.wire._scripted_worker import scripted_worker
from turnout.wire import pb

TOKENS = [470, 0]  # "Hello!" in the demo tokenizer
ANSWER = [
    pb.GenerateResponse(
        chunk=pb.GenerateStreamChunk(token_ids=TOKENS, prompt_tokens=10, completion_tokens=2)
    ).SerializeToString(),
    pb.GenerateResponse(
        complete=pb.GenerateComplete(
            output_ids=[], finish_reason="stop", prompt_tokens=10, completion_tokens=2
        )
    ).SerializeToString(),
]


class RefuseFirst:
    """Answers Generate, except that the first call's connection goes away (GOAWAY) first."""

    def __init__(self, error_code: int = 0) -> None:
        self.error_code = error_code
        self.connections: list[Any] = []

    async def __call__(self, request: Request) -> None:
        self.connections.append(request.conn)
        if len(self.connections) == 1:
            # last stream id 0: none of this connection's streams will be processed
            request.conn.goaway(0, self.error_code, debug=b"max connection age")
            return
        request.reply(*ANSWER)


def chat(stream: bool = False) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": stream}


@pytest.mark.parametrize("transport", ["native", "grpcio"])
def test_request_refused_by_goaway_is_sent_again(transport: str) -> None:
    worker = RefuseFirst()
    config = {"workers": [], "wire": {"transport": transport}}
    with scripted_worker(worker) as url:
        config["workers"] = [{"url": url, "model": MODEL}]
        with run_router(config, sims=0) as router:
            reply = httpx.post(f"{router.base_url}/v1/chat/completions", json=chat(), timeout=10)
            assert reply.status_code == 200, reply.text  # native: 503 without the resend
            assert reply.json()["choices"][0]["message"]["content"] == "Hello!"
            assert len(worker.connections) == 2
            assert worker.connections[1] is not worker.connections[0]  # a new connection
            (info,) = httpx.get(f"{router.base_url}/workers", timeout=5).json()["workers"]
            assert info["failures_total"] == 0  # an orderly close is not a fault
            assert info["consecutive_failures"] == 0
            assert info["circuit"] == "closed"


def test_worker_refusing_every_call_gets_one_resend_then_a_503() -> None:
    connections: list[Any] = []

    async def always_refuse(request: Request) -> None:
        connections.append(request.conn)
        request.conn.goaway(0, debug=b"shutting down")

    with scripted_worker(always_refuse) as url:
        config = {"workers": [{"url": url, "model": MODEL}]}
        with run_router(config, sims=0) as router:
            reply = httpx.post(f"{router.base_url}/v1/chat/completions", json=chat(), timeout=10)
            assert reply.status_code == 503, reply.text
            error = reply.json()["error"]
            assert error["message"].startswith("the worker refused the request while closing")
            assert error["code"] == "upstream_error"
            assert url.removeprefix("grpc://") not in reply.text
            assert len(connections) == 2  # sent again once, then given up: no loop

"""A model served by a gRPC worker and an HTTP worker: the gRPC pool serves it while it can
(the tokenizing path never picks the HTTP worker); the HTTP worker takes over when no gRPC
worker is routable. An HTTP worker may join at run time (``POST /workers``)."""

from __future__ import annotations

import httpx

from turnout.testing.router import MODEL, RunningRouter, run_router

from .conftest import served_by

CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


def test_http_worker_as_the_overflow_of_a_grpc_pool(upstreams: list[RunningRouter]) -> None:
    upstream = upstreams[0]
    with run_router() as router:
        added = httpx.post(
            router.base_url + "/workers?wait_s=10",
            json={"url": upstream.base_url, "model": MODEL},
            timeout=15,
        )
        assert added.status_code == 201, added.text
        assert added.json()["state"] == "ready"
        assert added.json()["kind"] == "http"
        own, remote = served_by(router), served_by(upstream)
        for _ in range(4):
            answer = httpx.post(router.base_url + "/v1/chat/completions", json=CHAT, timeout=30)
            assert answer.status_code == 200, answer.text
        assert (served_by(router), served_by(upstream)) == (own + 4, remote)

        grpc_worker = next(
            w["id"]
            for w in httpx.get(router.base_url + "/workers", timeout=5).json()["workers"]
            if w.get("kind") != "http"
        )
        removed = httpx.delete(f"{router.base_url}/workers/{grpc_worker}?wait=true", timeout=15)
        assert removed.status_code == 200
        for stream in (False, True):
            answer = httpx.post(
                router.base_url + "/v1/chat/completions",
                json={**CHAT, "stream": stream},
                timeout=30,
            )
            assert answer.status_code == 200, answer.text
        assert (served_by(router), served_by(upstream)) == (own + 4, remote + 2)
        # SGLang's native API is not forwarded: a clear 400 naming what is.
        native = httpx.post(
            router.base_url + "/generate", json={"model": MODEL, "text": "hi"}, timeout=30
        )
        assert native.status_code == 400
        assert native.json()["error"]["code"] == "unsupported_endpoint"

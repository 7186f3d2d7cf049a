"""Which protocol a worker speaks: its URL's scheme, or ``kind`` in its config."""

from __future__ import annotations

import httpx
import pytest

from tests.server.harness import MODEL, run_router
from turnout.config import build_config
from turnout.errors import ConfigError
from turnout.wire import parse_worker_url
from turnout.wire.engines import split_scheme


@pytest.mark.parametrize(
    ("url", "engine", "target", "tls"),
    [
        ("grpc://h:1", "sglang", "h:1", False),
        ("vllm+grpc://h:2", "vllm", "h:2", False),
        ("trtllm+grpc://[::1]:3", "trtllm", "[::1]:3", False),
        ("vllm+grpcs://h:4", "vllm", "h:4", True),
    ],
)
def test_the_scheme_names_the_engine(url: str, engine: str, target: str, tls: bool) -> None:
    assert split_scheme(url)[0] == engine
    assert parse_worker_url(url) == (target, tls)


@pytest.mark.parametrize(
    "worker",
    [
        {"url": "vllm+grpc://127.0.0.1:1"},
        {"url": "trtllm+grpc://127.0.0.1:1", "kind": "trtllm"},
        {"url": "grpc://127.0.0.1:1", "kind": "vllm"},
        {"url": "grpc://127.0.0.1:1", "kind": "sglang"},
    ],
)
def test_config_takes_engine_schemes_and_kinds(worker: dict[str, str]) -> None:
    assert build_config({"workers": [worker]}).workers[0].url == worker["url"]


@pytest.mark.parametrize(
    ("worker", "key"),
    [
        ({"url": "trtllm+grpc://h:1", "kind": "vllm"}, "workers[0].kind"),
        ({"url": "vllm+grpc://h:1", "kind": "sglang"}, "workers[0].kind"),
        ({"url": "mlx+grpc://h:1"}, "workers[0].url"),
        ({"url": "grpc://h:1", "kind": "tgi"}, "kind"),
    ],
)
def test_config_refuses_a_kind_the_url_contradicts(worker: dict[str, str], key: str) -> None:
    with pytest.raises(ConfigError, match=key.replace("[", r"\[").replace("]", r"\]")):
        build_config({"workers": [worker]})


@pytest.mark.parametrize("engine", ["vllm", "trtllm"])
def test_kind_in_the_config_selects_the_protocol_of_a_plain_grpc_url(engine: str) -> None:
    with run_router(sims=1, engine=engine, engine_as_kind=True) as router:
        workers = httpx.get(f"{router.base_url}/workers").json()["workers"]
        assert workers[0]["url"].startswith("grpc://")
        assert workers[0]["labels"]["engine"] == engine
        body = {"model": MODEL, "messages": [{"role": "user", "content": "hi there"}]}
        answer = httpx.post(f"{router.base_url}/v1/chat/completions", json=body, timeout=20)
        assert answer.json()["choices"][0]["message"]["content"] == "hi there"
        assert [r.request_id for r in router.sims[0].requests]


def test_kubernetes_discovery_can_name_the_engine_by_scheme() -> None:
    from turnout.plugins.discovery.kubernetes import KubernetesProvider

    pod = {
        "metadata": {"name": "vllm-0", "uid": "u1"},
        "status": {
            "phase": "Running",
            "podIP": "10.0.0.9",
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    _, worker = KubernetesProvider(scheme="vllm+grpc", port=50051).pod_worker(pod)
    assert worker is not None
    assert worker.url == "vllm+grpc://10.0.0.9:50051"
    assert split_scheme(worker.url)[0] == "vllm"

"""API keys on every route class (serving, admin, public) and CORS, over real HTTP."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.server.harness import Router, run_router
from tests.support import bearer
from turnout.config import load_config
from turnout.errors import ConfigError
from turnout.server.auth import Access, KeyRing, access_of

from .helpers import StartServe, chat

ORIGIN = "https://app.example"


@pytest.fixture(scope="module")
def router() -> Iterator[Router]:
    config = {
        "server": {
            "api_keys": ["key-one", "key-two"],
            "admin_api_key": "admin-key",
            "cors_allow_origins": [ORIGIN],
        }
    }
    with run_router(config=config, sims=1) as running:
        yield running


def assert_401(response: httpx.Response) -> None:
    assert response.status_code == 401, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_api_key"
    assert error["type"] == "authentication_error"
    assert error["message"]
    assert response.headers["x-request-id"]


def test_serving_routes_need_a_serving_key(router: Router) -> None:
    url = f"{router.base_url}/v1/chat/completions"
    assert_401(httpx.post(url, json=chat(), timeout=20))
    assert_401(httpx.post(url, json=chat(), headers=bearer("wrong"), timeout=20))
    assert_401(httpx.post(url, json=chat(), headers={"authorization": "key-one"}, timeout=20))
    for key in ("key-one", "key-two", "admin-key"):
        assert httpx.post(url, json=chat(), headers=bearer(key), timeout=20).status_code == 200
    assert_401(httpx.get(f"{router.base_url}/v1/models", timeout=20))
    assert httpx.get(f"{router.base_url}/v1/models", headers=bearer("key-two")).status_code == 200
    assert_401(httpx.post(f"{router.base_url}/v1/tokenize", json={"prompt": "x"}, timeout=20))


def test_the_bearer_scheme_is_matched_in_any_case(router: Router) -> None:
    url = f"{router.base_url}/v1/models"
    for scheme in ("Bearer", "bearer", "BEARER", "bEaReR"):
        answer = httpx.get(url, headers={"authorization": f"{scheme} key-one"}, timeout=20)
        assert answer.status_code == 200, scheme
    assert_401(httpx.get(url, headers={"authorization": "Basic key-one"}, timeout=20))
    assert_401(httpx.get(url, headers={"authorization": "Bearerkey-one"}, timeout=20))


def test_rejected_requests_never_reach_a_worker(router: Router) -> None:
    before = len(router.sims[0].requests)
    assert_401(httpx.post(f"{router.base_url}/generate", json={"text": "hi"}, timeout=20))
    assert len(router.sims[0].requests) == before


def test_admin_routes_need_the_admin_key(router: Router) -> None:
    url = f"{router.base_url}/workers"
    assert_401(httpx.get(url, timeout=20))
    assert_401(httpx.get(url, headers=bearer("key-one"), timeout=20))
    assert_401(httpx.get(f"{url}/anything", headers=bearer("key-one"), timeout=20))
    listing = httpx.get(url, headers=bearer("admin-key"), timeout=20)
    assert listing.status_code == 200
    assert listing.json()["total"] == 1


def test_probes_and_metrics_are_public(router: Router) -> None:
    for path in ("/health", "/liveness", "/readiness", "/metrics"):
        assert httpx.get(f"{router.base_url}{path}", timeout=20).status_code == 200, path


def test_cors_preflight_and_headers_on_errors(router: Router) -> None:
    url = f"{router.base_url}/v1/chat/completions"
    preflight = httpx.options(
        url,
        headers={
            "origin": ORIGIN,
            "access-control-request-method": "POST",
            "access-control-request-headers": "authorization, content-type",
        },
        timeout=20,
    )
    assert preflight.status_code == 204
    assert preflight.headers["access-control-allow-origin"] == ORIGIN
    # A browser must be able to read a 401 (and the request id) too.
    denied = httpx.post(url, json=chat(), headers={"origin": ORIGIN}, timeout=20)
    assert_401(denied)
    assert denied.headers["access-control-allow-origin"] == ORIGIN
    assert "x-request-id" in denied.headers["access-control-expose-headers"]
    other = httpx.options(
        url,
        headers={"origin": "https://evil.example", "access-control-request-method": "POST"},
        timeout=20,
    )
    assert "access-control-allow-origin" not in other.headers


def test_without_admin_key_serving_keys_guard_admin_routes() -> None:
    keys = KeyRing(["k"], None)
    keys.check(Access.ADMIN, "Bearer k")
    with pytest.raises(Exception, match="invalid"):
        keys.check(Access.ADMIN, "Bearer other")
    open_ring = KeyRing([], None)
    assert not open_ring.enabled
    open_ring.check(Access.SERVING, None)


def test_metrics_can_be_made_private() -> None:
    assert access_of("/metrics") is Access.PUBLIC
    assert access_of("/metrics", metrics_public=False) is Access.ADMIN
    assert access_of("/workers/abc") is Access.ADMIN
    assert access_of("/workersx") is Access.SERVING
    assert access_of("/admin/reload") is Access.ADMIN


def test_keys_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> None:
    monkeypatch.setenv("TURNOUT_TEST_KEY", "from-env")
    config = load_config(None, {"server.api_keys": ["${TURNOUT_TEST_KEY}"]})
    assert config.server.api_keys == ["from-env"]
    # An unset variable with an empty default must not silently turn auth off.
    monkeypatch.delenv("TURNOUT_TEST_KEY")
    with pytest.raises(ConfigError, match="api_keys"):
        load_config(None, {"server.api_keys": ["${TURNOUT_TEST_KEY:-}"]})


KEYS: dict[str, Any] = {"api_keys": ["old-key"], "admin_api_key": "old-admin"}


def rotate(data: dict[str, Any]) -> dict[str, Any]:
    data["server"].update(KEYS)
    return data


def test_reload_rotates_the_serving_and_admin_keys() -> None:
    KEYS.update(api_keys=["old-key"], admin_api_key="old-admin")
    with run_router(config={"server": dict(KEYS)}, sims=1, reload_data=rotate) as router:
        url = f"{router.base_url}/v1/chat/completions"
        assert httpx.post(url, json=chat(), headers=bearer("old-key"), timeout=20).is_success
        KEYS.update(api_keys=["new-key"], admin_api_key="new-admin")
        reload = f"{router.base_url}/admin/reload"
        assert httpx.post(reload, headers=bearer("old-admin"), timeout=20).status_code == 200
        assert_401(httpx.post(url, json=chat(), headers=bearer("old-key"), timeout=20))
        assert_401(httpx.post(reload, headers=bearer("old-admin"), timeout=20))
        assert httpx.post(url, json=chat(), headers=bearer("new-key"), timeout=20).is_success
        assert httpx.post(reload, headers=bearer("new-admin"), timeout=20).status_code == 200


def test_sighup_rotates_keys_in_turnout_serve(serve: StartServe) -> None:
    server = serve({"api_keys": ["old-key"]})
    models = f"{server.base_url}/v1/models"
    assert httpx.get(models, headers=bearer("old-key"), timeout=10).status_code == 200
    server.config["server"]["api_keys"] = ["new-key"]
    server.write_config()
    server.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 20
    while httpx.get(models, headers=bearer("new-key"), timeout=10).status_code != 200:
        assert time.monotonic() < deadline, server.log.read_text()
        time.sleep(0.05)
    assert_401(httpx.get(models, headers=bearer("old-key"), timeout=10))

"""The one table of error answers: complete (every status turnout answers has a row) and
consistent (every error, whichever layer raises it, reads its type from that row)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import httpx
import pytest

from turnout.errors import ERROR_STATUSES, ApiError, default_code, error_status
from turnout.server.limits import Draining, QueueFull, QueueTimeout
from turnout.server.shutdown import ShutDown
from turnout.wire.errors import GRPC_TO_HTTP, MalformedResponse
from turnout.workers.errors import DispatchError, NoWorkerAvailable, WorkerRequestError

from .harness import Router

CORE = Path(__file__).resolve().parents[2] / "core"
PLUGINS = CORE.parent / "plugins"
CODE = re.compile(r"[a-z][a-z0-9]*(_[a-z0-9]+)*")
CLIENT_TYPES = {
    "invalid_request_error",
    "authentication_error",
    "permission_error",
    "not_found_error",
    "rate_limit_error",
    "timeout_error",
}
SERVER_TYPES = {
    "internal_server_error",
    "not_implemented_error",
    "api_error",
    "service_unavailable_error",
    "timeout_error",
}


def _sources() -> list[tuple[Path, ast.Module]]:
    return [
        (path, ast.parse(path.read_text(), str(path)))
        for root in (CORE, PLUGINS)
        for path in sorted(root.rglob("*.py"))
        if "proto" not in path.parts
    ]


def _error_statuses_in_source() -> set[int]:
    """Every literal status handed to an error answer: ``ApiError(4xx, …)``, ``status=5xx``,
    ``super().__init__(4xx, …)`` of an ApiError subclass, ``status = 5xx`` class attributes."""
    found: set[int] = set()
    for _, tree in _sources():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
                args = node.args[:1] if name in ("ApiError", "__init__") else []
                args += [k.value for k in node.keywords if k.arg in ("status", "status_code")]
                found |= {
                    a.value
                    for a in args
                    if isinstance(a, ast.Constant) and type(a.value) is int and a.value >= 400
                }
            elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                targets = {getattr(t, "id", None) for t in node.targets}
                value = node.value.value
                if targets & {"status", "class_http_status"} and type(value) is int:
                    found |= {value} if value >= 400 else set()
    return found


def _codes_in_source() -> set[str]:
    """Every literal error code: ``code="…"`` arguments (``"a" if … else "b"`` too) and
    ``code = "…"`` class attributes."""
    values: list[ast.expr] = []
    for _, tree in _sources():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                values += [k.value for k in node.keywords if k.arg == "code"]
            elif isinstance(node, ast.ClassDef):
                values += [
                    statement.value
                    for statement in node.body
                    if isinstance(statement, ast.Assign)
                    and any(getattr(t, "id", None) == "code" for t in statement.targets)
                ]
    found: set[str] = set()
    for value in values:
        branches = [value.body, value.orelse] if isinstance(value, ast.IfExp) else [value]
        found |= {
            b.value for b in branches if isinstance(b, ast.Constant) and isinstance(b.value, str)
        }
    return found


def test_every_status_turnout_answers_with_has_a_row() -> None:
    statuses = _error_statuses_in_source()
    statuses |= set(GRPC_TO_HTTP.values()) | {500, MalformedResponse.class_http_status or 502}
    assert {400, 404, 413, 429, 502, 503, 504} <= statuses  # the scan sees the raisers
    assert statuses - set(ERROR_STATUSES) == set()


def test_rows_are_consistent() -> None:
    for status, row in ERROR_STATUSES.items():
        assert 400 <= status < 600
        assert row.type in (CLIENT_TYPES if status < 500 else SERVER_TYPES), status
        assert CODE.fullmatch(row.code), row.code
        assert default_code(status) == row.code
        assert error_status(status) is row
    codes = [row.code for row in ERROR_STATUSES.values()]
    assert len(set(codes)) == len(codes)


def test_statuses_without_a_row_still_answer_in_shape() -> None:
    assert error_status(418).type == "invalid_request_error"
    assert error_status(418).code == "i_m_a_teapot"
    assert error_status(599) == error_status(599)
    assert error_status(599).type == "api_error"
    assert error_status(599).code == "http_599"


def test_every_code_in_the_source_is_a_snake_case_string() -> None:
    codes = _codes_in_source()
    assert {"shutting_down", "no_available_workers", "worker_not_found", "invalid_api_key"} <= codes
    assert [code for code in sorted(codes) if not CODE.fullmatch(code)] == []


@pytest.mark.parametrize(
    "error",
    [
        ApiError(413, "too big"),
        DispatchError("no capacity"),
        NoWorkerAvailable("m", "none registered"),
        WorkerRequestError("bad gateway", status=502, worker_fault=True),
        WorkerRequestError("bad request", status=400, worker_fault=False),
        WorkerRequestError("slow", status=504, worker_fault=True, retryable=True),
        Draining(),
        ShutDown(),
        QueueFull(1, 1),
        QueueTimeout(1.0),
    ],
    ids=lambda e: f"{type(e).__name__}-{e.status}",
)
def test_every_layer_reads_its_type_from_the_table(error: ApiError) -> None:
    """The worker layer's errors are API errors: same body, type from the same row (502 used
    to be ``upstream_error`` there and ``api_error`` in the server's own table)."""
    body = error.body()["error"]
    assert body["type"] == ERROR_STATUSES[error.status].type
    assert isinstance(body["code"], str)
    assert CODE.fullmatch(body["code"])
    assert body["message"] == str(error)


def test_worker_routes_and_api_routes_answer_alike(router: Router) -> None:
    base = router.base_url
    missing_worker = httpx.get(f"{base}/workers/nope:1", timeout=10)
    missing_route = httpx.get(f"{base}/v1/nothing-here", timeout=10)
    bad_wait = httpx.post(f"{base}/workers?wait_s=-1", json={"url": "grpc://h:1"}, timeout=10)
    bad_query = httpx.post(f"{base}/workers?wait_s=soon", json={"url": "grpc://h:1"}, timeout=10)
    answers = [missing_worker, missing_route, bad_wait, bad_query]
    for answer in answers:
        error = answer.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}, answer.text
        assert error["type"] == ERROR_STATUSES[answer.status_code].type, answer.text
    assert [a.status_code for a in answers] == [404, 404, 400, 400]
    codes = [a.json()["error"]["code"] for a in answers]
    assert codes == ["worker_not_found", "not_found", "invalid_value", "invalid_value"]
    assert bad_query.json()["error"]["param"] == "wait_s"

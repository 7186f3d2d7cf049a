"""Text logs of ``turnout serve``: a client cannot forge a log line with control characters."""

from __future__ import annotations

import logging
import signal
import sys
import time
import urllib.parse

import httpx

from tests.server.harness import MODEL
from turnout.observability.logs import TextFormatter

from .helpers import StartServe

FORGED = "2026-01-01 00:00:00,000 INFO turnout.access [forged] POST /admin/reload 200"


def test_control_characters_from_clients_cannot_forge_text_log_lines(serve: StartServe) -> None:
    server = serve({"log_json": False, "log_level": "info"})
    injected = "\n" + FORGED + "\r\n\x1b[2K"
    path = "/nothing-here" + urllib.parse.quote(injected)
    assert httpx.get(server.base_url + path, timeout=10).status_code == 404
    sim_url = server.config["workers"][0]["url"].replace("127.0.0.1", "localhost")
    added = httpx.post(
        f"{server.base_url}/workers",
        json={"url": sim_url, "id": "w" + injected, "model": MODEL},
        timeout=10,
    )
    assert added.status_code < 500, added.text
    if added.status_code == 201:  # the worker's state changes are logged with its id
        deadline = time.monotonic() + 20
        while "(grpc://localhost:" not in server.log.read_text():
            assert time.monotonic() < deadline, server.log.read_text()
            time.sleep(0.05)
    server.proc.send_signal(signal.SIGTERM)
    server.proc.wait(20)
    text = server.log.read_text()
    lines = text.splitlines()
    assert not [line for line in lines if line.startswith("2026-01-01")], text
    assert "\x1b" not in text
    escaped = [line for line in lines if "\\n2026-01-01" in line]
    assert any("turnout.access" in line and "/nothing-here" in line for line in escaped), text
    if added.status_code == 201:
        assert any("registry" in line and "(grpc://localhost:" in line for line in escaped), text
    # Every line is a record (starts with its timestamp) or an indented continuation.
    assert all(line[:1].isdigit() or line.startswith("  ") for line in lines if line), text


def test_a_traceback_stays_under_its_record() -> None:
    formatter = TextFormatter()
    try:
        raise ValueError("bad value\n" + FORGED)
    except ValueError:
        record = logging.LogRecord("t", logging.ERROR, __file__, 1, "boom %s", ("a\nb",), None)
        record.exc_info = sys.exc_info()
    record.request_id = "-"
    first, *rest = formatter.format(record).split("\n")
    assert first.endswith("ERROR t [-] boom a\\nb")
    assert rest[0] == "  Traceback (most recent call last):"
    assert f"  {FORGED}" in rest
    assert all(line.startswith("  ") for line in rest)

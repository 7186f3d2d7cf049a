"""A config reload keeps the response store (and says that a changed ``responses`` section
applies on restart)."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from tests.server.harness import MODEL, run_router


def shorter_ttl(data: dict[str, Any]) -> dict[str, Any]:
    data["responses"] = {"ttl_s": 1.0}
    return data


def test_a_reload_keeps_the_kept_responses(caplog: pytest.LogCaptureFixture) -> None:
    with run_router(sims=1, reload_data=shorter_ttl) as router:
        client = openai.OpenAI(base_url=f"{router.base_url}/v1", api_key="x", max_retries=0)
        created = client.responses.create(model=MODEL, input="kept across a reload")
        answer = httpx.post(f"{router.base_url}/admin/reload", timeout=30)
        assert answer.status_code == 200, answer.text
        assert client.responses.retrieve(created.id).output_text == "kept across a reload"
        follow_up = client.responses.create(
            model=MODEL, input="still there?", previous_response_id=created.id
        )
        assert follow_up.status == "completed"
    messages = [record.getMessage() for record in caplog.records]
    assert "the responses section changed: it applies when turnout restarts" in messages

"""Image parts are refused with a 400 until images reach the workers (issue 20), also for a model
whose chat template renders images: its placeholders must never reach a worker without them."""

from __future__ import annotations

import httpx
import pytest

from tests.tokenizer.helpers import TEMPLATES

from .harness import MODEL, run_router

QWEN2_VL = TEMPLATES / "Qwen-Qwen2-VL-7B-Instruct.jinja"

pytestmark = [
    pytest.mark.needs_shared,
    pytest.mark.skipif(not QWEN2_VL.is_file(), reason=f"shared fixture not found: {QWEN2_VL}"),
]


PARTS = [
    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
    {"type": "input_image", "image_url": "https://example.com/cat.png"},
]


def test_image_parts_are_unsupported_for_a_vision_template() -> None:
    with run_router(sims=1, model={"chat_template": str(QWEN2_VL)}) as router:
        for part in PARTS:
            content = [{"type": "text", "text": "What?"}, part]
            body = {"model": MODEL, "messages": [{"role": "user", "content": content}]}
            response = httpx.post(f"{router.base_url}/v1/chat/completions", json=body, timeout=30)
            assert response.status_code == 400, response.text
            error = response.json()["error"]
            assert error["code"] == "unsupported_parameter"
            assert error["param"] == "messages[0].content[1]"
        assert not router.sims[0].requests
        # the same model still answers text
        text = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
        answer = httpx.post(f"{router.base_url}/v1/chat/completions", json=text, timeout=30)
        assert answer.is_success, answer.text

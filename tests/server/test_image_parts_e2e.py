"""Images in chat end to end with the official ``openai`` client: a vision model (the demo model
made a Qwen2-VL: its ``config.json`` has a ``vision_config`` and an ``image_token_id``, its
tokenizer the vision tokens, its template Qwen2-VL's real one) gets each image's placeholder
expanded in the prompt and the preprocessed pixels in ``mm_inputs``, which the simulated worker
records; bad images, too many, too large, URLs the operator does not allow and models without
vision are 400s naming the part, and never reach a worker."""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.multimodal.helpers import data_uri, image_bytes, png_claiming
from tests.tokenizer.helpers import TEMPLATES
from turnout.demo_model import path as demo_path

from .harness import MODEL, Router, run_router

QWEN2_VL = TEMPLATES / "Qwen-Qwen2-VL-7B-Instruct.jinja"
VISION_START, VISION_END, IMAGE_PAD = 3000, 3001, 3002
#: Qwen2-VL's patch vector: 3 channels x 2 frames x 14 x 14.
PATCH_DIM = 1176

pytestmark = [
    pytest.mark.needs_shared,
    pytest.mark.skipif(not QWEN2_VL.is_file(), reason=f"shared fixture not found: {QWEN2_VL}"),
]


def vision_model(directory: Path, context: int | None = None) -> Path:
    """The demo model with Qwen2-VL's vision tokens and config entries (and a context of
    ``context`` tokens instead of 8192)."""
    model = directory / "vision-model"
    shutil.copytree(demo_path(), model)
    tokenizer = json.loads((model / "tokenizer.json").read_text())
    for token_id, content in (
        (VISION_START, "<|vision_start|>"),
        (VISION_END, "<|vision_end|>"),
        (IMAGE_PAD, "<|image_pad|>"),
    ):
        tokenizer["added_tokens"].append(
            {
                "id": token_id,
                "content": content,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
        )
    (model / "tokenizer.json").write_text(json.dumps(tokenizer))
    config = json.loads((model / "config.json").read_text())
    config.update(
        model_type="qwen2_vl",
        vocab_size=3003,
        image_token_id=IMAGE_PAD,
        vision_config={"patch_size": 14, "spatial_merge_size": 2},
    )
    if context is not None:
        config["max_position_embeddings"] = context
    (model / "config.json").write_text(json.dumps(config))
    return model


IMAGES = {
    "max_images": 2,
    "max_pixels": 200_000,
    "fetch_timeout_s": 2,
    "allowed_domains": ["127.0.0.1", "localhost"],
}


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Router]:
    model = vision_model(tmp_path_factory.mktemp("vision"))
    with run_router(
        sims=1,
        model_dir=model,
        model={"chat_template": str(QWEN2_VL), "images": IMAGES},
    ) as running:
        yield running


@pytest.fixture
def client(router: Router) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{router.base_url}/v1", api_key="x", max_retries=0)


def image_part(url: str) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url}}


def ask(*parts: dict[str, Any], text: str = "What is in the picture?") -> list[Any]:
    return [{"role": "user", "content": [{"type": "text", "text": text}, *parts]}]


def grid_sha(*grids: tuple[int, int, int]) -> str:
    values = [v for grid in grids for v in grid]
    return hashlib.sha256(struct.pack(f"<{len(values)}q", *values)).hexdigest()


def last_request(router: Router) -> tuple[Any, Any]:
    sim = router.sims[0]
    request = sim.records.requests[-1]
    [record] = [r for r in sim.records.multimodal if r.request_id == request.request_id]
    return request, record


def test_an_image_chat_reaches_the_worker_with_its_pixels(
    client: openai.OpenAI, router: Router
) -> None:
    png = image_bytes("PNG", (28, 28))  # resized to 56 x 56: 4 x 4 patches, 2 x 2 tokens
    answer = client.chat.completions.create(
        model=MODEL,
        messages=ask(image_part(data_uri(png))),
        max_tokens=4,
    )
    assert answer.choices[0].finish_reason in ("stop", "length")
    request, record = last_request(router)
    ids = list(request.tokenized.input_ids)
    assert record.used
    assert record.pixel_values.shape == (16, PATCH_DIM)
    assert record.pixel_values.dtype == "float32"
    assert record.model_specific_tensors["image_grid_thw"].shape == (1, 3)
    assert record.model_specific_tensors["image_grid_thw"].sha256 == grid_sha((1, 4, 4))
    assert record.im_token_id == IMAGE_PAD
    assert record.modalities == ("image",)
    [(offset, length)] = record.placeholders
    assert length == 4
    assert ids[offset - 1] == VISION_START
    assert ids[offset : offset + 4] == [IMAGE_PAD] * 4
    assert ids[offset + 4] == VISION_END
    assert ids.count(IMAGE_PAD) == 4
    assert "<|vision_start|><|image_pad|><|vision_end|>" in request.tokenized.original_text
    assert answer.usage is not None
    assert answer.usage.prompt_tokens == len(ids)  # the image's tokens count


def test_two_images_streamed_each_get_their_range(client: openai.OpenAI, router: Router) -> None:
    small = data_uri(image_bytes("PNG", (28, 28)))
    wide = data_uri(image_bytes("JPEG", (120, 60)), "image/jpeg")  # 112 x 56: 4 x 8 patches
    stream = client.chat.completions.create(
        model=MODEL,
        messages=ask(image_part(small), image_part(wide)),
        max_tokens=3,
        stream=True,
    )
    assert any(chunk.choices and chunk.choices[0].finish_reason for chunk in stream)
    request, record = last_request(router)
    ids = list(request.tokenized.input_ids)
    assert record.pixel_values.shape == (16 + 32, PATCH_DIM)
    assert record.model_specific_tensors["image_grid_thw"].shape == (2, 3)
    assert record.model_specific_tensors["image_grid_thw"].sha256 == grid_sha((1, 4, 4), (1, 4, 8))
    (first, four), (second, eight) = record.placeholders
    assert (four, eight) == (4, 8)
    assert first < second
    assert ids[first : first + 4] == [IMAGE_PAD] * 4
    assert ids[second : second + 8] == [IMAGE_PAD] * 8


def post(router: Router, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{router.base_url}/v1/chat/completions", json=body, timeout=30)


PNG = data_uri(image_bytes("PNG", (8, 8)))


@pytest.mark.parametrize(
    ("messages", "code", "param"),
    [
        (ask(image_part("data:image/png;base64,!!!")), "invalid_image", "messages[0].content[1]"),
        (
            ask(image_part(PNG), image_part("data:text/plain;base64,aGk=")),
            "invalid_image",
            "messages[0].content[2]",
        ),
        (
            ask(image_part(data_uri(b"not a png at all"))),
            "invalid_image",
            "messages[0].content[1]",
        ),
        (ask(image_part(PNG), image_part(PNG), image_part(PNG)), "too_many_images", "messages"),
        # An aspect ratio above 200, which Qwen2-VL's preprocessing cannot take.
        (
            ask(image_part(PNG), image_part(data_uri(image_bytes("PNG", (603, 3))))),
            "invalid_image",
            "messages[0].content[2]",
        ),
        (
            ask(image_part(data_uri(image_bytes("PNG", (500, 500))))),
            "image_too_large",
            "messages[0].content[1]",
        ),
        (
            ask(image_part("https://images.example.org/cat.png")),
            "image_url_not_allowed",
            "messages[0].content[1]",
        ),
        (
            ask(image_part("http://127.0.0.1/cat.png")),
            "image_url_not_allowed",
            "messages[0].content[1]",
        ),
        # Listed hosts, but loopback: refused on the address, before any connection.
        (
            ask(image_part("https://127.0.0.1:1/cat.png")),
            "image_url_not_allowed",
            "messages[0].content[1]",
        ),
        (
            ask(image_part("https://localhost:1/cat.png")),
            "image_url_not_allowed",
            "messages[0].content[1]",
        ),
        (ask({"type": "image_url", "image_url": {}}), "invalid_value", "messages[0].content[1]"),
        (
            ask({"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}),
            "unsupported_parameter",
            "messages[0].content[1]",
        ),
        (
            [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": [image_part(PNG)]},
            ],
            "chat_template_error",
            None,
        ),
    ],
)
def test_bad_images_are_400s_that_reach_no_worker(
    router: Router, messages: list[Any], code: str, param: str | None
) -> None:
    before = len(router.sims[0].records.requests)
    response = post(router, {"model": MODEL, "messages": messages, "max_tokens": 2})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == code, error
    assert error["param"] == param, error
    assert len(router.sims[0].records.requests) == before


def test_a_model_without_vision_refuses_images() -> None:
    """The demo model with Qwen2-VL's template renders image parts, but its config has no
    vision_config: a 400 naming the part, and text still works."""
    with run_router(sims=1, model={"chat_template": str(QWEN2_VL)}) as router:
        response = post(router, {"model": MODEL, "messages": ask(image_part(PNG))})
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["code"] == "unsupported_parameter"
        assert error["param"] == "messages[0].content[1]"
        assert "vision_config" in error["message"]
        assert not router.sims[0].records.requests
        text = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
        assert post(router, text).is_success


def test_a_responses_input_image_reaches_the_worker(client: openai.OpenAI, router: Router) -> None:
    """The Responses API's ``input_image`` parts take the chat path's images."""
    png = data_uri(image_bytes("PNG", (28, 28)))
    response = client.responses.create(
        model=MODEL,
        input=[
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "What is this?"},
                    {"type": "input_image", "image_url": png, "detail": "auto"},
                ],
            }
        ],
        max_output_tokens=3,
        store=False,
    )
    assert response.status == "completed" or response.incomplete_details is not None
    request, record = last_request(router)
    assert record.model_specific_tensors["image_grid_thw"].sha256 == grid_sha((1, 4, 4))
    [(offset, length)] = record.placeholders
    assert list(request.tokenized.input_ids)[offset : offset + length] == [IMAGE_PAD] * 4


#: A tenant whose window takes 300 tokens (the limits' window is 60 s).
TIGHT_KEY, PLAIN_KEY = "key-of-tight", "plain-key"


@pytest.fixture(scope="module")
def small_context(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Router]:
    """A vision model with a 512-token context, and a tenant with 300 tokens a window."""
    model = vision_model(tmp_path_factory.mktemp("vision-512"), context=512)
    config = {
        "server": {"api_keys": [PLAIN_KEY]},
        "tenants": {"tight": {"keys": [TIGHT_KEY], "tokens_per_minute": 300}},
    }
    with run_router(
        config,
        sims=1,
        model_dir=model,
        model={"chat_template": str(QWEN2_VL), "images": IMAGES},
    ) as running:
        yield running


def post_as(router: Router, key: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(
        f"{router.base_url}/v1/chat/completions",
        json=body,
        headers={"authorization": f"Bearer {key}"},
        timeout=30,
    )


#: 440 x 440 pixels (within the 200,000 allowed) is 256 image tokens.
CLAIMED = data_uri(png_claiming(440, 440))


def test_images_that_cannot_fit_the_context_are_refused_before_decoding(
    small_context: Router,
) -> None:
    """Two images of 256 tokens each cannot fit a 512-token context. Their PNGs claim their
    size in the header but hold no pixels, so decoding them would fail ("invalid_image"): the
    context's 400 proves the request was refused from the headers, before any decoding."""
    body = {"model": MODEL, "messages": ask(image_part(CLAIMED), image_part(CLAIMED))}
    response = post_as(small_context, PLAIN_KEY, body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "context_length_exceeded", error
    assert error["param"] == "messages"
    assert "maximum context length is 512 tokens" in error["message"]
    assert not small_context.sims[0].records.requests
    # the same size with real pixels is refused the same way; one image fits and is served
    real = data_uri(image_bytes("PNG", (440, 440)))
    body = {"model": MODEL, "messages": ask(image_part(real), image_part(real))}
    assert post_as(small_context, PLAIN_KEY, body).json()["error"]["code"] == (
        "context_length_exceeded"
    )
    body = {"model": MODEL, "messages": ask(image_part(real)), "max_tokens": 2}
    assert post_as(small_context, PLAIN_KEY, body).is_success
    _, record = last_request(small_context)
    assert record.placeholders[0][1] == 256


def test_images_that_cannot_fit_the_tenants_budget_are_refused_before_decoding(
    small_context: Router,
) -> None:
    """One image (about 280 tokens of prompt) and max_tokens 100 can never fit a window of
    300 tokens: a 429 from the header's size, before decoding (the image holds no pixels)."""
    before = len(small_context.sims[0].records.requests)
    body = {"model": MODEL, "messages": ask(image_part(CLAIMED)), "max_tokens": 100}
    response = post_as(small_context, TIGHT_KEY, body)
    assert response.status_code == 429, response.text
    error = response.json()["error"]
    assert error["code"] == "request_too_large_for_limit", error
    assert len(small_context.sims[0].records.requests) == before
    # without the tenant's budget the request is decoded, and the missing pixels found
    response = post_as(small_context, PLAIN_KEY, body)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "invalid_image"

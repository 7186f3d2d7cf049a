"""Which models take images: each missing piece is named in the refusal."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from turnout.config import ImagesConfig
from turnout.multimodal.vision import Vision, model_vision

VISION = {
    "has_vision_config": True,
    "model_type": "qwen2_vl",
    "image_token_id": 151655,
    "template_media": frozenset({"image"}),
}


def test_a_qwen2_vl_model_with_an_image_template_takes_images(tmp_path: Path) -> None:
    vision = model_vision(**VISION, directory=tmp_path, config=ImagesConfig(max_images=3))
    assert isinstance(vision, Vision)
    assert vision.image_token_id == 151655
    assert vision.config.max_images == 3
    assert vision.processor.merge_size == 2


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"has_vision_config": False}, "vision_config"),
        ({"model_type": "llava"}, "model_type 'llava'"),
        ({"image_token_id": None}, "image_token_id"),
        ({"template_media": frozenset({"video"})}, "chat template"),
    ],
)
def test_each_missing_piece_is_the_reason(
    tmp_path: Path, change: dict[str, object], reason: str
) -> None:
    given: dict[str, Any] = {**VISION, **change}
    refusal = model_vision(**given, directory=tmp_path, config=ImagesConfig())
    assert isinstance(refusal, str)
    assert reason in refusal

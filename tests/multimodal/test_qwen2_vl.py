"""Qwen2-VL preprocessing against transformers' own (PIL backend) processor, and the
``MultimodalInputs`` message it becomes, as SGLang's servicer decodes it (and the simulator)."""

from __future__ import annotations

import json
import struct
import warnings
from pathlib import Path

import pytest
from PIL import Image

from turnout.multimodal import BadImage
from turnout.multimodal.mm_inputs import expand_image_tokens, multimodal_inputs
from turnout.multimodal.qwen2_vl import Qwen2VLVision, smart_resize
from turnout.sim import SimWorker
from turnout.wire import WorkerClient

from ..wire._helpers import fold, request

np = pytest.importorskip("numpy")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    pil_backend = pytest.importorskip("transformers.models.qwen2_vl.image_processing_pil_qwen2_vl")

IMAGE_PAD = 151655


def gradient(size: tuple[int, int], mode: str = "RGB") -> Image.Image:
    """A picture with structure in every channel (a flat colour would hide ordering bugs)."""
    width, height = size
    image = Image.new("RGB", size)
    image.putdata(
        [
            ((x * 7) % 256, (y * 5) % 256, ((x + y) * 3) % 256)
            for y in range(height)
            for x in range(width)
        ]
    )
    if mode == "RGBA":
        image.putalpha(Image.linear_gradient("L").resize(size))
    return image.convert(mode) if mode not in ("RGB", "RGBA") else image


@pytest.mark.parametrize(
    ("size", "mode"),
    [
        ((100, 60), "RGB"),  # upscaled to the minimum
        ((301, 517), "RGB"),
        ((1600, 1200), "RGB"),  # downscaled to max_pixels
        ((224, 224), "RGBA"),  # transparency over white
        ((90, 140), "L"),
        ((64, 48), "P"),
    ],
)
def test_pixel_values_match_transformers(size: tuple[int, int], mode: str) -> None:
    image = gradient(size, mode)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = pil_backend.Qwen2VLImageProcessorPil()(images=[image], return_tensors="np")
    ours = Qwen2VLVision().preprocess(image)
    expected = reference["pixel_values"]
    assert (ours.patches, ours.patch_dim) == expected.shape
    assert list(ours.grid_thw) == reference["image_grid_thw"][0].tolist()
    got = np.frombuffer(ours.pixel_values, dtype="<f4").reshape(expected.shape)
    np.testing.assert_allclose(got, expected, rtol=0, atol=2e-6)
    assert ours.tokens == ours.patches // 4


def test_smart_resize_bounds() -> None:
    assert smart_resize(60, 100, 28, 3136, 1003520) == (56, 112)
    rows, cols = smart_resize(4000, 3000, 28, 3136, 1003520)
    assert rows % 28 == cols % 28 == 0
    assert rows * cols <= 1003520
    with pytest.raises(ValueError, match="aspect ratio"):
        smart_resize(10, 2500, 28, 3136, 1003520)


def test_settings_from_preprocessor_config(tmp_path: Path) -> None:
    (tmp_path / "preprocessor_config.json").write_text(
        json.dumps({"min_pixels": 1000, "max_pixels": 50176, "patch_size": 14, "merge_size": 2})
    )
    vision = Qwen2VLVision.from_model_dir(tmp_path)
    assert (vision.min_pixels, vision.max_pixels) == (1000, 50176)
    assert vision.preprocess(gradient((1000, 1000))).patches * 196 <= 50176
    assert Qwen2VLVision.from_model_dir(tmp_path / "none") == Qwen2VLVision()


def test_placeholders_expand_in_order() -> None:
    vision = Qwen2VLVision()
    first, second = vision.preprocess(gradient((56, 56))), vision.preprocess(gradient((112, 56)))
    assert (first.tokens, second.tokens) == (4, 8)
    ids = [1, 2, IMAGE_PAD, 3, IMAGE_PAD, 4]
    expanded, ranges = expand_image_tokens(ids, IMAGE_PAD, [first, second])
    assert expanded == [1, 2, *[IMAGE_PAD] * 4, 3, *[IMAGE_PAD] * 8, 4]
    assert ranges == [(2, 4), (7, 8)]
    with pytest.raises(BadImage, match="1 image placeholders for 2 images"):
        expand_image_tokens([1, IMAGE_PAD], IMAGE_PAD, [first, second])


def test_message_is_what_sglang_decodes() -> None:
    vision = Qwen2VLVision()
    images = [vision.preprocess(gradient((56, 56))), vision.preprocess(gradient((84, 56)))]
    _, ranges = expand_image_tokens([IMAGE_PAD, 5, IMAGE_PAD], IMAGE_PAD, images)
    mm = multimodal_inputs(images, ranges, IMAGE_PAD)
    # decoded the way SGLang's servicer does: frombuffer(dtype).reshape(shape)
    pixels = np.frombuffer(mm.pixel_values.data, dtype=np.float32).reshape(
        list(mm.pixel_values.shape)
    )
    assert pixels.shape == (16 + 24, 1176)
    grid = mm.model_specific_tensors["image_grid_thw"]
    thw = np.frombuffer(grid.data, dtype=np.int64).reshape(list(grid.shape))
    assert thw.tolist() == [[1, 4, 4], [1, 4, 6]]
    assert [(p.offset, p.length) for p in mm.mm_placeholders] == [(0, 4), (5, 6)]
    assert mm.im_token_id == IMAGE_PAD
    assert struct.unpack("<f", mm.pixel_values.data[:4])[0] == pytest.approx(pixels[0, 0])


async def test_the_simulator_takes_the_message() -> None:
    pad = 7  # a token of the demo model standing in for <|image_pad|>
    vision = Qwen2VLVision()
    image = vision.preprocess(gradient((56, 84)))
    req = request("Describe", request_id="vl", stream=False, max_new_tokens=3)
    ids = [*req.tokenized.input_ids[:-3], pad, *req.tokenized.input_ids[-3:]]
    expanded, ranges = expand_image_tokens(ids, pad, [image])
    del req.tokenized.input_ids[:]
    req.tokenized.input_ids.extend(expanded)
    req.mm_inputs.CopyFrom(multimodal_inputs([image], ranges, pad))
    async with SimWorker(port=0) as sim, WorkerClient(sim.url) as client:
        await fold(client.generate(req))
        [record] = sim.records.multimodal
    assert record.used
    assert record.pixel_values is not None
    assert record.pixel_values.shape == (image.patches, 1176)
    assert record.placeholders == ((ranges[0][0], image.tokens),)

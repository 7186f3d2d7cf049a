"""The ``MultimodalInputs`` message SGLang workers read, and the prompt ids it goes with.

What SGLang's gRPC servicer (``smg-grpc-servicer``) does with ``GenerateRequest.mm_inputs``:
only when ``pixel_values`` is set does it build one image item from it: ``pixel_values``
(``TensorData``: little-endian ``float32`` or ``int64`` bytes, ``shape``, ``dtype``) becomes the
item's feature, each ``model_specific_tensors`` entry a model input of the same name
(``image_grid_thw`` for Qwen2-VL), each ``mm_placeholders`` range ``(offset, length)`` the
prompt positions of one image's tokens, and ``im_token_id`` the token that fills them. The
fields ``image_data`` (raw bytes) and ``image_urls`` are not read (URLs only by encoder-
disaggregated workers), nor is ``mm_inputs`` of an Embed request. So the router preprocesses
the images itself (see :mod:`turnout.multimodal.qwen2_vl`) and expands each image's single
placeholder token in the prompt to as many tokens as the image takes.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from turnout.multimodal.errors import BadImage
from turnout.multimodal.qwen2_vl import ProcessedImage
from turnout.wire.proto import sglang_scheduler_pb2 as pb

__all__ = ["check_placeholders", "expand_image_tokens", "multimodal_inputs"]


def check_placeholders(input_ids: Sequence[int], image_token_id: int, images: int) -> None:
    """:class:`BadImage` unless the prompt holds one ``image_token_id`` per image (the chat
    template dropped or added one)."""
    found = input_ids.count(image_token_id)
    if found != images:
        raise BadImage(
            f"the prompt has {found} image placeholders for {images} images; "
            "the chat template must show every image once"
        )


def expand_image_tokens(
    input_ids: Sequence[int], image_token_id: int, images: Sequence[ProcessedImage]
) -> tuple[list[int], list[tuple[int, int]]]:
    """The prompt with the i-th ``image_token_id`` repeated ``images[i].tokens`` times, and
    each image's (offset, length) in it. :class:`BadImage` when the prompt does not hold one
    placeholder per image (the chat template dropped or added one)."""
    check_placeholders(input_ids, image_token_id, len(images))
    expanded: list[int] = []
    ranges: list[tuple[int, int]] = []
    next_image = 0
    for token in input_ids:
        if token == image_token_id:
            length = images[next_image].tokens
            ranges.append((len(expanded), length))
            expanded.extend([image_token_id] * length)
            next_image += 1
        else:
            expanded.append(token)
    return expanded, ranges


def multimodal_inputs(
    images: Sequence[ProcessedImage],
    placeholders: Sequence[tuple[int, int]],
    image_token_id: int,
) -> pb.MultimodalInputs:
    """One ``MultimodalInputs`` for all of a request's images, as SGLang's servicer reads it
    (blocking for large images: call it in a thread)."""
    if not images:
        raise ValueError("a MultimodalInputs message needs at least one image")
    dims = {image.patch_dim for image in images}
    if len(dims) != 1:
        raise ValueError(f"images of one request differ in patch size: {sorted(dims)}")
    patches = sum(image.patches for image in images)
    grids = [value for image in images for value in image.grid_thw]
    message = pb.MultimodalInputs(
        model_specific_tensors={
            "image_grid_thw": pb.TensorData(
                data=struct.pack(f"<{len(grids)}q", *grids),
                shape=[len(images), 3],
                dtype="int64",
            )
        },
        mm_placeholders=[pb.PlaceholderRange(offset=o, length=n) for o, n in placeholders],
        im_token_id=image_token_id,
        modalities=["image"],
    )
    # Set in place: a TensorData passed to the constructor would be copied once more (the
    # pixels are ~19 KB per image token, so hundreds of MB for a few large images).
    pixels = message.pixel_values
    pixels.data = b"".join(image.pixel_values for image in images)
    pixels.shape.extend([patches, dims.pop()])
    pixels.dtype = "float32"
    return message

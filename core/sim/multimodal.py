"""What multimodal input the simulator received, checked the way SGLang's servicer reads it.

SGLang (``smg-grpc-servicer``) uses ``mm_inputs`` of a Generate request only when
``pixel_values`` is set: it reads each ``TensorData`` as a little-endian ``float32`` or
``int64`` array of its ``shape`` (a size mismatch fails the request with INVALID_ARGUMENT), the
``model_specific_tensors`` the same way (``image_grid_thw`` for Qwen2-VL), and the
``mm_placeholders`` as the prompt positions of the image tokens. The raw ``image_data`` /
``image_urls`` fields are not read (URLs only by encoder-disaggregated workers), nor is any of
``mm_inputs`` of an Embed request. The simulator records all of it anyway, so that a test can
assert what a worker was sent, with ``used`` telling whether SGLang would have used it.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from turnout.wire.proto import sglang_scheduler_pb2 as pb

__all__ = ["InvalidMultimodal", "MultimodalRecord", "TensorRecord", "record_multimodal"]

#: Bytes per element of the dtypes SGLang decodes.
TENSOR_DTYPES: Final = {"float32": 4, "int64": 8}


class InvalidMultimodal(ValueError):
    """``mm_inputs`` that SGLang could not decode (its servicer answers INVALID_ARGUMENT)."""


@dataclass(frozen=True, slots=True)
class TensorRecord:
    """One ``TensorData`` as received: shape, dtype and the SHA-256 of its bytes."""

    shape: tuple[int, ...]
    dtype: str
    sha256: str

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"shape": list(self.shape), "dtype": self.dtype, "sha256": self.sha256}


@dataclass(frozen=True, slots=True)
class MultimodalRecord:
    """The multimodal part of one Generate or Embed request."""

    request_id: str
    rpc: Literal["Generate", "Embed"]
    #: True when SGLang would feed it to the model (a Generate request with pixel values).
    used: bool
    pixel_values: TensorRecord | None
    model_specific_tensors: dict[str, TensorRecord]
    #: (offset, length) of each placeholder run in the prompt, in order.
    placeholders: tuple[tuple[int, int], ...]
    im_token_id: int | None
    modalities: tuple[str, ...]
    image_urls: tuple[str, ...]
    #: SHA-256 of each raw ``image_data`` item, in order.
    image_data_sha256: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (what ``get_records`` returns for it)."""
        return {
            "request_id": self.request_id,
            "rpc": self.rpc,
            "used": self.used,
            "pixel_values": None if self.pixel_values is None else self.pixel_values.as_dict(),
            "model_specific_tensors": {
                key: tensor.as_dict() for key, tensor in self.model_specific_tensors.items()
            },
            "placeholders": [list(p) for p in self.placeholders],
            "im_token_id": self.im_token_id,
            "modalities": list(self.modalities),
            "image_urls": list(self.image_urls),
            "image_data_sha256": list(self.image_data_sha256),
        }


def _tensor(name: str, data: pb.TensorData) -> TensorRecord:
    itemsize = TENSOR_DTYPES.get(data.dtype)
    if itemsize is None:
        raise InvalidMultimodal(
            f"{name}: dtype {data.dtype!r} is not one of {sorted(TENSOR_DTYPES)}"
        )
    shape = tuple(data.shape)
    expected = math.prod(shape) * itemsize
    if len(data.data) != expected:
        raise InvalidMultimodal(
            f"{name}: {len(data.data)} bytes cannot be reshaped to {list(shape)} "
            f"{data.dtype} ({expected} bytes)"
        )
    return TensorRecord(shape, data.dtype, hashlib.sha256(data.data).hexdigest())


def _placeholders(mm: pb.MultimodalInputs, input_ids: Sequence[int]) -> tuple[tuple[int, int], ...]:
    ranges = tuple((p.offset, p.length) for p in mm.mm_placeholders)
    for offset, length in ranges:
        if length == 0 or offset + length > len(input_ids):
            raise InvalidMultimodal(
                f"mm_placeholders: ({offset}, {length}) is not a range of the "
                f"{len(input_ids)}-token prompt"
            )
    return ranges


def record_multimodal(
    rpc: Literal["Generate", "Embed"],
    request_id: str,
    mm: pb.MultimodalInputs,
    input_ids: Sequence[int],
) -> MultimodalRecord:
    """Record ``mm``; :class:`InvalidMultimodal` for what SGLang's Generate would refuse."""
    used = rpc == "Generate" and mm.HasField("pixel_values")
    pixels = tensors = None
    placeholders: tuple[tuple[int, int], ...] = ()
    try:
        pixels = _tensor("pixel_values", mm.pixel_values) if mm.HasField("pixel_values") else None
        tensors = {
            key: _tensor(f"model_specific_tensors[{key!r}]", value)
            for key, value in sorted(mm.model_specific_tensors.items())
        }
        placeholders = _placeholders(mm, input_ids)
    except InvalidMultimodal:
        if used:
            raise
    return MultimodalRecord(
        request_id=request_id,
        rpc=rpc,
        used=used,
        pixel_values=pixels,
        model_specific_tensors=tensors or {},
        placeholders=placeholders,
        im_token_id=mm.im_token_id if mm.HasField("im_token_id") else None,
        modalities=tuple(mm.modalities),
        image_urls=tuple(mm.image_urls),
        image_data_sha256=tuple(hashlib.sha256(item).hexdigest() for item in mm.image_data),
    )

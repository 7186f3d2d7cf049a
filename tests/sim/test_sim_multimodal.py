"""The simulator records the multimodal inputs it receives, and refuses what SGLang cannot read."""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
from pathlib import Path

import grpc
import pytest

from turnout import demo_model
from turnout.sim import SimWorker, get_records
from turnout.wire import WorkerCallError, WorkerClient, pb

from ..wire._helpers import chat_ids, fold, request

IMAGE_PAD = 7  # any token id: the simulator checks ranges, not which token fills them


def tensor(values: list[float] | list[int], shape: list[int], dtype: str) -> pb.TensorData:
    code = {"float32": "f", "int64": "q"}[dtype]
    return pb.TensorData(
        data=struct.pack(f"<{len(values)}{code}", *values), shape=shape, dtype=dtype
    )


def image_inputs(prompt_len: int) -> pb.MultimodalInputs:
    return pb.MultimodalInputs(
        pixel_values=tensor([0.5] * 12, [2, 6], "float32"),
        model_specific_tensors={"image_grid_thw": tensor([1, 2, 1], [1, 3], "int64")},
        mm_placeholders=[pb.PlaceholderRange(offset=prompt_len - 4, length=2)],
        im_token_id=IMAGE_PAD,
        modalities=["image"],
    )


def image_request(request_id: str, mm: pb.MultimodalInputs | None = None) -> pb.GenerateRequest:
    req = request("Describe this", request_id=request_id, stream=False, max_new_tokens=4)
    req.mm_inputs.CopyFrom(mm or image_inputs(len(req.tokenized.input_ids)))
    return req


async def test_generate_records_the_pixel_values_it_received(
    sim: SimWorker, client: WorkerClient
) -> None:
    req = image_request("img-1")
    folded = await fold(client.generate(req))
    assert folded.completes[0].finish_reason in ("stop", "length")
    [record] = sim.records.multimodal
    assert record.request_id == "img-1"
    assert record.rpc == "Generate"
    assert record.used
    assert record.pixel_values is not None
    assert record.pixel_values.shape == (2, 6)
    assert record.pixel_values.dtype == "float32"
    assert record.pixel_values.sha256 == hashlib.sha256(req.mm_inputs.pixel_values.data).hexdigest()
    assert record.model_specific_tensors["image_grid_thw"].shape == (1, 3)
    prompt_len = len(req.tokenized.input_ids)
    assert record.placeholders == ((prompt_len - 4, 2),)
    assert record.im_token_id == IMAGE_PAD
    # the same over the control RPC, for simulators in other processes
    [summary] = (await get_records(sim.url))["multimodal"]
    assert summary["pixel_values"]["shape"] == [2, 6]
    assert summary["placeholders"] == [[prompt_len - 4, 2]]
    assert summary["used"] is True


async def test_requests_without_images_record_nothing(sim: SimWorker, client: WorkerClient) -> None:
    await fold(client.generate(request("no image", stream=False)))
    assert sim.records.multimodal == []
    sim.records.clear()
    assert sim.records.multimodal == []


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"pixel_values": pb.TensorData(data=b"\0" * 40, shape=[2, 6], dtype="float32")}, "bytes"),
        ({"pixel_values": pb.TensorData(data=b"\0" * 24, shape=[2, 6], dtype="float16")}, "dtype"),
        ({"mm_placeholders": [pb.PlaceholderRange(offset=10_000, length=3)]}, "mm_placeholders"),
    ],
)
async def test_undecodable_inputs_are_invalid_argument(
    sim: SimWorker, client: WorkerClient, change: dict[str, object], message: str
) -> None:
    req = image_request("bad")
    mm = req.mm_inputs
    for key, value in change.items():
        target = getattr(mm, key)
        if isinstance(value, list):
            del target[:]
            target.extend(value)
        else:
            target.CopyFrom(value)
    with pytest.raises(WorkerCallError) as info:
        await fold(client.generate(req))
    assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert message in str(info.value)
    assert sim.records.outcomes["bad"] == "error"


async def test_raw_images_and_embed_inputs_are_recorded_as_unused(
    sim: SimWorker, client: WorkerClient
) -> None:
    raw = pb.MultimodalInputs(
        image_data=[b"\x89PNG-a", b"\x89PNG-b"], image_urls=["https://x/y.png"]
    )
    await fold(client.generate(image_request("raw", raw)))
    ids = chat_ids("embed me")
    await client.embed(
        pb.EmbedRequest(
            request_id="emb",
            tokenized=pb.TokenizedInput(input_ids=ids),
            mm_inputs=pb.MultimodalInputs(
                pixel_values=pb.TensorData(data=b"odd", shape=[5], dtype="float32")
            ),
        )
    )
    generate, embed = sim.records.multimodal
    assert not generate.used  # SGLang reads mm_inputs only when pixel_values is set
    assert generate.image_data_sha256 == (
        hashlib.sha256(b"\x89PNG-a").hexdigest(),
        hashlib.sha256(b"\x89PNG-b").hexdigest(),
    )
    assert generate.image_urls == ("https://x/y.png",)
    assert (embed.rpc, embed.used) == ("Embed", False)  # SGLang's Embed ignores mm_inputs


async def test_a_model_with_a_vision_config_supports_vision(tmp_path: Path) -> None:
    model = tmp_path / "vl-model"
    shutil.copytree(demo_model.path(), model)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "vision_config": {"depth": 2}}))
    async with SimWorker(model, port=0) as sim, WorkerClient(sim.url) as client:
        assert (await client.get_model_info()).supports_vision
    async with SimWorker(port=0) as sim, WorkerClient(sim.url) as client:
        assert not (await client.get_model_info()).supports_vision

"""The simulated worker in other engines' protocols (``turnout sim --engine vllm|trtllm``).

Thin servicers (:mod:`turnout.sim.vllm_servicer`, :mod:`turnout.sim.trtllm_servicer`): each maps
its engine's request onto SGLang's ``GenerateRequest`` and lets the one
:class:`~turnout.sim.servicer.SimServicer` plan, pace, cache and record it (same knobs, same
prefix cache and KV events, same records), then maps every response back. What the engine's
protocol cannot ask (beam search, text prompts) is refused as the engine would
(INVALID_ARGUMENT). This module holds what both share.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, Final, cast

import grpc
import grpc.aio

from turnout.sim.servicer import SimServicer
from turnout.wire.proto import common_pb2
from turnout.wire.proto import sglang_scheduler_pb2 as pb

__all__ = [
    "ANY_OBJECT",
    "DEFAULT_REPETITION_PENALTY",
    "DEFAULT_TOP_P",
    "CommonRpcs",
    "Context",
    "answer",
    "set_seed",
]

Context = grpc.aio.ServicerContext[Any, Any]
#: The schema of "any JSON object", for the engines' JSON-object mode.
ANY_OBJECT: Final = json.dumps({"type": "object"})
#: SGLang's defaults for what the engines' protocols leave unset (proto3 zeros).
DEFAULT_TOP_P: Final = 1.0
DEFAULT_REPETITION_PENALTY: Final = 1.0


def answer(
    sim: SimServicer, request: pb.GenerateRequest, context: Context
) -> AsyncGenerator[pb.GenerateResponse, None]:
    """The sim's ``Generate`` (an async generator: closing it ends the call's bookkeeping)."""
    return cast("AsyncGenerator[pb.GenerateResponse, None]", sim.Generate(request, context))


def set_seed(params: pb.SamplingParams, seed: int) -> None:
    """Carry ``seed`` as the router does: in ``custom_params``."""
    params.custom_params.update({"seed": seed})


class CommonRpcs:
    """The RPCs of ``common.proto`` that every engine's service has, served by the sim as
    they are (mixed into each engine's servicer, which sets ``sim``)."""

    sim: SimServicer

    async def GetTokenizer(
        self, request: common_pb2.GetTokenizerRequest, context: Context
    ) -> AsyncIterator[common_pb2.GetTokenizerChunk]:
        """The model's tokenizer files."""
        async for chunk in self.sim.GetTokenizer(request, context):
            yield chunk

    async def SubscribeKvEvents(
        self, request: common_pb2.SubscribeKvEventsRequest, context: Context
    ) -> AsyncIterator[common_pb2.KvEventBatch]:
        """The prefix caches' events, with each rank's load."""
        async for batch in self.sim.SubscribeKvEvents(request, context):
            yield batch

"""What a prompt builder makes of a request: the prompts and everything the later stages need."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from turnout.generation.models import ModelRuntime
from turnout.generation.output import OutputOptions
from turnout.generation.requests import SamplingFields
from turnout.wire.proto import sglang_scheduler_pb2 as pb
from turnout.wire.sampling import Constraint


@dataclass(slots=True)
class Prompt:
    """One prompt of a request, as a worker gets it."""

    ids: list[int]
    #: Its text: the client's, the rendered template, or what the ids decode to ("" when the
    #: endpoint has no use for it). The worker gets it as information; policies may route on it.
    text: str = ""
    #: The images the prompt's placeholder tokens stand for, as the worker reads them.
    mm_inputs: pb.MultimodalInputs | None = None


@dataclass(slots=True)
class Plan:
    """A request, prepared: its model, prompts, sampling and output processing.

    Each prompt gets ``output.n`` choices; choice ``i`` of prompt ``k`` is choice
    ``k * n + i`` of the request (in events and in answers).
    """

    runtime: ModelRuntime
    prompts: list[Prompt]
    #: The request's sampling fields (temperature, n, stop, …).
    sampling: SamplingFields
    #: The token limit, with the endpoint's default applied (``None``: the worker's).
    max_tokens: int | None
    output: OutputOptions
    constraint: Constraint | None = None
    #: The client reads the answer as a stream.
    stream: bool = False
    logprobs: bool = False
    top_logprobs: int = 0
    #: Ask for the prompt's logprobs, with this many alternatives per token (``None``: not
    #: asked; the worker is asked for the larger of this and ``top_logprobs``).
    prompt_logprobs: int | None = None
    #: Token ids whose logprobs every output position reports.
    token_ids_logprob: tuple[int, ...] = ()
    #: Ask the worker to count reasoning tokens.
    require_reasoning: bool = False
    #: The worker request id (``<id>-<k>`` for prompt ``k`` of several); ``None``: the
    #: request context's.
    request_id: str | None = None
    #: What the endpoint's prompt builder hands on to its renderer (the Responses API: the
    #: conversation the prompt was rendered from).
    endpoint_state: Any = None
    #: The LoRA adapter the request runs with (``None``: the base model); set by the flow.
    adapter: str | None = None
    #: Its ``lora_id`` for workers that did not report their own (the dispatcher puts a
    #: worker's id in when it has one).
    lora_id: str = ""

    @property
    def model_id(self) -> str:
        """The model the request is for."""
        return self.runtime.model_id

    @property
    def n(self) -> int:
        """Choices per prompt."""
        return self.output.n

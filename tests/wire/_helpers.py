"""Helpers for tests/wire and tests/sim: demo-model ChatML prompts, stream folding."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from functools import cache

from tokenizers import Tokenizer

from turnout import demo_model
from turnout.wire import GenerateStream, build_generate_request, build_sampling_params, pb


@cache
def tokenizer() -> Tokenizer:
    return Tokenizer.from_file(str(demo_model.path() / "tokenizer.json"))


def token_id(token: str) -> int:
    found = tokenizer().token_to_id(token)
    assert found is not None, token
    return int(found)


def chat_ids(user: str, system: str | None = None) -> list[int]:
    text = f"<|im_start|>system\n{system}<|im_end|>\n" if system else ""
    text += f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"
    return list(tokenizer().encode(text, add_special_tokens=False).ids)


def decode(ids: list[int], *, skip_special: bool = False) -> str:
    return str(tokenizer().decode(ids, skip_special_tokens=skip_special))


def request(
    user: str = "Hello there",
    *,
    request_id: str = "req-1",
    stream: bool = True,
    top_logprobs_num: int = 0,
    return_logprob: bool = False,
    prompt_logprobs_start: int | None = None,
    **sampling: object,
) -> pb.GenerateRequest:
    sampling.setdefault("max_new_tokens", 64)
    return build_generate_request(
        request_id=request_id,
        input_ids=chat_ids(user),
        sampling_params=build_sampling_params(**sampling),  # type: ignore[arg-type]
        stream=stream,
        top_logprobs_num=top_logprobs_num,
        return_logprob=return_logprob,
        prompt_logprobs_start=prompt_logprobs_start,
    )


@dataclass
class Folded:
    """Everything a Generate stream delivered, per choice index."""

    tokens: dict[int, list[int]] = field(default_factory=lambda: defaultdict(list))
    chunks: dict[int, list[pb.GenerateStreamChunk]] = field(
        default_factory=lambda: defaultdict(list)
    )
    completes: dict[int, pb.GenerateComplete] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)

    def text(self, index: int = 0, *, skip_special: bool = False) -> str:
        return decode(self.tokens[index], skip_special=skip_special)


async def fold(stream: GenerateStream) -> Folded:
    out = Folded()
    async with stream:
        async for response in stream:
            kind = response.WhichOneof("response")
            assert kind is not None
            out.order.append(kind)
            if kind == "chunk":
                out.tokens[response.chunk.index] += response.chunk.token_ids
                out.chunks[response.chunk.index].append(response.chunk)
            else:
                index = response.complete.index
                assert index not in out.completes, "two completes for one choice"
                out.completes[index] = response.complete
    return out

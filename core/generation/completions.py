"""``POST /v1/completions``: prompts as text, lists of text, or token ids; echo; logprobs."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from turnout.generation.chat_render import running_usage, usage_dict
from turnout.generation.context import RequestContext
from turnout.generation.events import ChoiceDelta, ChoiceEnd, Event, TokenLogprob, Usage
from turnout.generation.pipeline import (
    GenerateSession,
    closed_on_failure,
    generate_request,
    make_processors,
    output_options,
    sampling_params,
    stream_events,
    worker_streaming,
)
from turnout.generation.prompt_size import check_prompt_ids, encode_prompt
from turnout.generation.requests import CompletionRequest
from turnout.generation.tool_choice import plan_tools
from turnout.generation.unsupported import COMPLETIONS, refuse_unsupported, unsupported
from turnout.routing.types import RoutingRequest
from turnout.server.context import Services
from turnout.server.errors import bad_request
from turnout.server.protocol import decode_body
from turnout.server.respond import Answer, answer_json, answer_stream
from turnout.wire.sampling import Constraint, ConstraintKind


def _prompts(request: CompletionRequest) -> list[str | list[int]]:
    prompt = request.prompt
    if isinstance(prompt, str):
        return [prompt]
    if not prompt:
        raise bad_request("prompt must not be empty", "prompt")
    prompts: list[str | list[int]] = []
    ids: list[int] = []
    for item in prompt:
        if isinstance(item, int) and not isinstance(item, bool):
            ids.append(item)
        elif isinstance(item, str):
            prompts.append(item)
        elif isinstance(item, list) and item and all(isinstance(t, int) for t in item):
            prompts.append(list(item))
        else:
            raise bad_request("prompt must be a string, a list of strings or token ids", "prompt")
    if ids and prompts:
        raise bad_request("prompt must be a string, a list of strings or token ids", "prompt")
    return [ids] if ids else prompts


def _openai_logprobs(entries: list[TokenLogprob], offset: int) -> dict[str, Any]:
    tokens, values, tops, offsets = [], [], [], []
    for lp in entries:
        tokens.append(lp.token)
        values.append(lp.logprob)
        tops.append({top.token: top.logprob for top in lp.top} if lp.top else None)
        offsets.append(offset)
        offset += len(lp.token)
    return {
        "tokens": tokens,
        "token_logprobs": values,
        "top_logprobs": tops,
        "text_offset": offsets,
    }


async def handle_completion(services: Services, body: bytes, ctx: RequestContext) -> Answer:
    """Answer a text completion request; several prompts run as one request each."""
    request = decode_body(body, CompletionRequest)
    if request.suffix:
        raise unsupported("suffix", "suffix is not supported")
    if request.best_of is not None and request.best_of != request.n:
        raise unsupported("best_of", "best_of is not supported (only best_of = n)")
    refuse_unsupported(request, COMPLETIONS)
    model_id = services.models.resolve_name(request.model)
    runtime = await services.models.runtime(model_id)
    tokenizer = runtime.tokenizer
    prompts = _prompts(request)
    if len(prompts) * request.n > 128:
        raise bad_request("at most 128 choices (prompts × n) per request", "prompt")
    ids_list: list[list[int]] = []
    for p in prompts:
        if isinstance(p, str):
            ids = await encode_prompt(runtime, p, add_special_tokens=True, param="prompt")
        else:
            check_prompt_ids(runtime, p, "prompt")
            ids = p
        ids_list.append(ids)
    texts = [p if isinstance(p, str) else tokenizer.decode(p) for p in prompts]
    constraint = _constraint(request)
    logprobs = request.logprobs is not None
    options = output_options(request, logprobs=logprobs)
    streams = []
    worker_streams, interval = worker_streaming(request.stream, options.has_stops)
    async with closed_on_failure() as sessions:
        for i, (text, ids) in enumerate(zip(texts, ids_list, strict=True)):
            session = await _open(
                services,
                request=request,
                ctx=ctx,
                model_id=model_id,
                i=i,
                count=len(prompts),
                text=text,
                ids=ids,
                constraint=constraint,
                worker_streams=worker_streams,
                interval=interval,
            )
            sessions.append(session)
            processors = make_processors(runtime, options)
            streams.append(stream_events(session, processors, worker_streams=worker_streams))
    builder = _CompletionBuilder(ctx, model_id, request, texts, [len(ids) for ids in ids_list])
    if request.stream:
        return answer_stream(builder.stream(streams), services)
    for prompt_index, events in enumerate(streams):
        async for batch in events:
            for event in batch:
                builder.fold(prompt_index, event)
    return answer_json(builder.response())


def _constraint(request: CompletionRequest) -> Constraint | None:
    """The one output constraint of a completion request (SGLang: regex, ebnf, json_schema or
    response_format)."""
    response_schema = plan_tools(None, None, request.response_format, False).json_schema
    candidates: list[tuple[ConstraintKind, str | None]] = [
        ("regex", request.regex),
        ("ebnf", request.ebnf),
        ("json_schema", request.json_schema),
        ("json_schema", response_schema),
    ]
    given = [Constraint(kind, value) for kind, value in candidates if value]
    if len(given) > 1:
        raise bad_request("only one of regex, ebnf, json_schema and response_format")
    return given[0] if given else None


async def _open(
    services: Services,
    *,
    request: CompletionRequest,
    ctx: RequestContext,
    model_id: str,
    i: int,
    count: int,
    text: str,
    ids: list[int],
    constraint: Constraint | None,
    worker_streams: bool,
    interval: int | None,
) -> GenerateSession:
    params = sampling_params(
        request,
        max_tokens=request.max_tokens if request.max_tokens is not None else 16,
        skip_special_tokens=request.skip_special_tokens,
        constraint=constraint,
        stop_token_ids=request.stop_token_ids or (),
        stream_interval=interval,
    )
    rid = ctx.worker_request_id if count == 1 else f"{ctx.worker_request_id}-{i}"
    worker_request = generate_request(
        rid,
        ids,
        params,
        prompt_text=text,
        logprobs=request.logprobs is not None,
        top_logprobs=request.logprobs or 0,
        stream=worker_streams,
    )
    routing = RoutingRequest(model_id, ids, text, ctx.headers, ctx.routing_key)
    return await services.open_stream(model_id, routing, worker_request)


class _CompletionBuilder:
    def __init__(
        self,
        ctx: RequestContext,
        model: str,
        request: CompletionRequest,
        texts: list[str],
        prompt_tokens: list[int],
    ) -> None:
        self._base = {
            "id": request.rid or ctx.request_id,
            "object": "text_completion",
            "created": ctx.created,
            "model": model,
        }
        self._n = request.n
        self._echo = request.echo
        self._texts = texts
        self._logprobs = request.logprobs is not None
        self._include_usage = bool(request.stream_options and request.stream_options.include_usage)
        self._running = running_usage(request.stream_options, prompt_tokens, request.n)
        self._text: dict[int, list[str]] = {}
        self._lps: dict[int, list[TokenLogprob]] = {}
        self._ends: dict[int, ChoiceEnd] = {}
        self._usage = Usage(0, 0)

    def _index(self, prompt_index: int, choice: int) -> int:
        return prompt_index * self._n + choice

    def fold(self, prompt_index: int, event: Event) -> None:
        if isinstance(event, ChoiceDelta):
            i = self._index(prompt_index, event.index)
            self._text.setdefault(i, []).append(event.content)
            if event.logprobs:
                self._lps.setdefault(i, []).extend(event.logprobs)
        elif isinstance(event, ChoiceEnd):
            self._ends[self._index(prompt_index, event.index)] = event
        else:
            self._add_usage(event)

    def _add_usage(self, usage: Usage) -> None:
        self._usage.prompt_tokens += usage.prompt_tokens
        self._usage.completion_tokens += usage.completion_tokens
        self._usage.cached_tokens += usage.cached_tokens

    def response(self) -> dict[str, Any]:
        choices = []
        for i in range(len(self._texts) * self._n):
            text = "".join(self._text.get(i, []))
            prompt = self._texts[i // self._n]
            if self._echo:
                text = prompt + text
            end = self._ends.get(i)
            logprobs = None
            if self._logprobs:
                logprobs = _openai_logprobs(self._lps.get(i, []), len(prompt) if self._echo else 0)
            choices.append(
                {
                    "index": i,
                    "text": text,
                    "logprobs": logprobs,
                    "finish_reason": end.finish_reason if end else "abort",
                    "matched_stop": end.matched_stop if end else None,
                }
            )
        return self._base | {"choices": choices, "usage": usage_dict(self._usage)}

    async def stream(
        self, streams: list[AsyncIterator[list[Event]]]
    ) -> AsyncIterator[list[dict[str, Any]]]:
        """Chunk objects per batch of events, prompt after prompt."""
        for prompt_index, events in enumerate(streams):
            chunks: list[dict[str, Any]] = []
            if self._echo:
                for choice in range(self._n):
                    index = self._index(prompt_index, choice)
                    chunks.append(self._chunk(index, self._texts[prompt_index], None, None))
            async for batch in events:
                for event in batch:
                    chunk = self._event_chunk(prompt_index, event)
                    if chunk is not None:
                        chunks.append(chunk)
                if chunks:
                    yield chunks
                    chunks = []
        if self._include_usage:
            yield [self._base | {"choices": [], "usage": usage_dict(self._usage)}]

    def _event_chunk(self, prompt_index: int, event: Event) -> dict[str, Any] | None:
        if self._running is not None and not isinstance(event, Usage):
            self._running.note(self._index(prompt_index, event.index), event)
        if isinstance(event, ChoiceDelta):
            if not (event.content or event.logprobs):
                return None
            lps = _openai_logprobs(event.logprobs or [], 0) if self._logprobs else None
            return self._chunk(self._index(prompt_index, event.index), event.content, lps, None)
        if isinstance(event, ChoiceEnd):
            index = self._index(prompt_index, event.index)
            chunk = self._chunk(index, "", None, event.finish_reason)
            chunk["choices"][0]["matched_stop"] = event.matched_stop
            return chunk
        self._add_usage(event)
        return None

    def _chunk(
        self, index: int, text: str, logprobs: dict[str, Any] | None, finish: str | None
    ) -> dict[str, Any]:
        choice = {"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish}
        chunk = self._base | {"choices": [choice]}
        if self._running is not None:
            chunk["usage"] = self._running.of(index)
        elif self._include_usage:
            chunk["usage"] = None
        return chunk

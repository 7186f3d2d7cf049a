"""SGLang's native ``POST /generate``: text or token ids in, SGLang's response shape out."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any, cast

import msgspec

from turnout.generation.context import RequestContext
from turnout.generation.events import ChoiceDelta, ChoiceEnd, Event, TokenLogprob, Usage
from turnout.generation.pipeline import (
    closed_on_failure,
    generate_request,
    make_processors,
    output_options,
    sampling_params,
    stream_events,
    worker_streaming,
)
from turnout.generation.prompt_size import check_prompt_ids, encode_prompt
from turnout.generation.requests import GenerateRequestBody, NativeSamplingParams
from turnout.generation.unsupported import GENERATE, refuse_unsupported
from turnout.routing.types import RoutingRequest
from turnout.server.context import Services
from turnout.server.errors import bad_request
from turnout.server.protocol import decode_body
from turnout.server.respond import Answer, answer_json, answer_stream
from turnout.wire.sampling import Constraint, ConstraintKind

_CONSTRAINTS: tuple[ConstraintKind, ...] = ("json_schema", "structural_tag", "regex", "ebnf")


def _constraint(sampling: NativeSamplingParams) -> Constraint | None:
    given = [(kind, getattr(sampling, kind)) for kind in _CONSTRAINTS]
    # An empty constraint is none, as in SGLang (its sampling params test them for truth).
    given = [(kind, value) for kind, value in given if value is not None and value != ""]
    if len(given) > 1:
        raise bad_request("only one of json_schema, regex, ebnf, structural_tag", "sampling_params")
    if not given:
        return None
    kind, value = given[0]
    return Constraint(kind, value if isinstance(value, str) else _json(value))


def _json(value: Any) -> str:
    return msgspec.json.encode(value).decode()


async def handle_generate(services: Services, body: bytes, ctx: RequestContext) -> Answer:
    """Answer one ``/generate`` request (a single prompt or a batch)."""
    request = decode_body(body, GenerateRequestBody)
    refuse_unsupported(request, GENERATE)
    if request.logprob_start_len != -1:
        raise bad_request("input (prompt) logprobs are not supported", "logprob_start_len")
    sampling = request.sampling_params
    constraint = _constraint(sampling)
    model_id = services.models.resolve_name(request.model)
    runtime = await services.models.runtime(model_id)
    input_ids = request.input_ids
    batch = isinstance(request.text, list) or (
        input_ids is not None and len(input_ids) > 0 and isinstance(input_ids[0], list)
    )
    if request.text is not None:
        texts = request.text if isinstance(request.text, list) else [request.text]
        id_lists = [
            await encode_prompt(runtime, text, add_special_tokens=False, param="text")
            for text in texts
        ]
    else:
        items = request.input_ids or []
        id_lists = [x for x in items if isinstance(x, list)] if batch else [cast(list[int], items)]
        for ids in id_lists:
            check_prompt_ids(runtime, ids, "input_ids")
        texts = ["" for _ in id_lists]
    base_rid = request.rid or ctx.worker_request_id
    streams: list[AsyncIterator[list[Event]]] = []
    options = output_options(sampling, logprobs=request.return_logprob, keep_token_ids=True)
    worker_streams, interval = worker_streaming(request.stream, options.has_stops)
    async with closed_on_failure() as sessions:
        for i, (text, ids) in enumerate(zip(texts, id_lists, strict=True)):
            params = sampling_params(
                sampling,
                max_tokens=sampling.max_tokens if sampling.max_tokens is not None else 128,
                skip_special_tokens=sampling.skip_special_tokens,
                constraint=constraint,
                stop_token_ids=sampling.stop_token_ids or (),
                stream_interval=interval,
            )
            rid = base_rid if len(id_lists) == 1 else f"{base_rid}-{i}"
            worker_request = generate_request(
                rid,
                ids,
                params,
                prompt_text=text,
                logprobs=request.return_logprob,
                top_logprobs=request.top_logprobs_num,
                require_reasoning=request.require_reasoning,
                stream=worker_streams,
            )
            routing = RoutingRequest(model_id, ids, text or None, ctx.headers, ctx.routing_key)
            session = await services.open_stream(model_id, routing, worker_request)
            sessions.append(session)
            processors = make_processors(runtime, options)
            streams.append(stream_events(session, processors, worker_streams=worker_streams))
    shaper = _GenerateShaper(base_rid, sampling.n, len(id_lists), request, ctx)
    if request.stream:
        return answer_stream(shaper.stream(streams), services)
    for prompt_index, events in enumerate(streams):
        async for group in events:
            for event in group:
                shaper.fold(prompt_index, event)
    results = shaper.results()
    return answer_json(results if batch or sampling.n > 1 else results[0])


class _GenerateShaper:
    """Builds SGLang's ``{text, output_ids, meta_info}`` objects from events."""

    def __init__(
        self, rid: str, n: int, prompts: int, request: GenerateRequestBody, ctx: RequestContext
    ) -> None:
        self._rid, self._n, self._ctx = rid, n, ctx
        self._logprobs = request.return_logprob
        self._top = request.top_logprobs_num > 0
        self._with_text = request.return_text_in_logprobs
        self._count = n * prompts
        self._text: list[list[str]] = [[] for _ in range(self._count)]
        self._ids: list[list[int]] = [[] for _ in range(self._count)]
        self._lps: list[list[list[Any]]] = [[] for _ in range(self._count)]
        self._tops: list[list[list[list[Any]]]] = [[] for _ in range(self._count)]
        self._ends: dict[int, ChoiceEnd] = {}
        self._usage: dict[int, Usage] = {}

    def fold(self, prompt_index: int, event: Event) -> int | None:
        """Fold one event; returns the flat choice index it touched."""
        if isinstance(event, ChoiceDelta):
            i = prompt_index * self._n + event.index
            self._text[i].append(event.content)
            self._ids[i].extend(event.token_ids or ())
            for lp in event.logprobs or ():
                self._lps[i].append(self._entry(lp))
                if self._top:
                    self._tops[i].append([self._entry(top) for top in lp.top])
            return i
        if isinstance(event, ChoiceEnd):
            i = prompt_index * self._n + event.index
            self._ends[i] = event
            return i
        self._usage[prompt_index] = event
        return None

    def _meta(self, i: int, final: bool) -> dict[str, Any]:
        end = self._ends.get(i) if final else None
        usage = self._usage.get(i // self._n)
        meta: dict[str, Any] = {
            "id": self._rid if self._count == 1 else f"{self._rid}-{i}",
            "finish_reason": _finish_reason(end) if end else None,
            "prompt_tokens": usage.prompt_tokens if usage else 0,
            "completion_tokens": end.completion_tokens if end else len(self._ids[i]),
            "cached_tokens": usage.cached_tokens if usage else 0,
            "e2e_latency": time.monotonic() - self._ctx.started,
        }
        if end is not None:
            meta["matched_stop"] = end.matched_stop
            meta["reasoning_tokens"] = end.reasoning_tokens
        if self._logprobs:
            meta["output_token_logprobs"] = self._lps[i]
            if self._top:
                meta["output_top_logprobs"] = self._tops[i]
        return meta

    def _entry(self, lp: TokenLogprob) -> list[Any]:
        """SGLang's ``[logprob, token_id, text or null]``."""
        return [lp.logprob, lp.token_id, lp.token if self._with_text else None]

    def results(self) -> list[dict[str, Any]]:
        """One result object per choice."""
        return [
            {"text": "".join(self._text[i]), "output_ids": self._ids[i],
             "meta_info": self._meta(i, True), "index": i}
            for i in range(self._count)
        ]  # fmt: skip

    async def stream(
        self, streams: list[AsyncIterator[list[Event]]]
    ) -> AsyncIterator[list[dict[str, Any]]]:
        """SGLang streaming: each chunk carries the text and ids accumulated so far (one chunk
        per choice touched by a batch of events)."""
        for prompt_index, events in enumerate(streams):
            pending_usage: list[int] = []
            async for batch in events:
                touched: dict[int, None] = {}
                finals: list[int] = []
                for event in batch:
                    i = self.fold(prompt_index, event)
                    if isinstance(event, ChoiceEnd):
                        pending_usage.append(event.index)
                    elif i is None:
                        # Usage arrives after the ends: now every final chunk has its counts.
                        finals.extend(prompt_index * self._n + c for c in pending_usage)
                    else:
                        touched[i] = None
                chunks = [self._chunk(i, final=False) for i in touched if i not in finals]
                chunks.extend(self._chunk(i, final=True) for i in finals)
                if chunks:
                    yield chunks

    def _chunk(self, i: int, final: bool) -> dict[str, Any]:
        return {
            "text": "".join(self._text[i]),
            "output_ids": self._ids[i],
            "meta_info": self._meta(i, final),
            "index": i,
        }


def _finish_reason(end: ChoiceEnd) -> dict[str, Any]:
    if end.finish_reason == "length":
        return {"type": "length", "length": end.completion_tokens}
    reason: dict[str, Any] = {"type": end.finish_reason}
    if end.matched_stop is not None:
        reason["matched"] = end.matched_stop
    return reason

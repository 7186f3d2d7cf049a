"""The simulated worker's output of one Generate request: its planned choices as stream chunks
and completions, paced by the knobs, with the logprobs the request asks for."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Iterable
from typing import TYPE_CHECKING, Any

import grpc
import grpc.aio

from turnout.sim.model import ChoicePlan, synthetic_logprob, top_logprobs, wanted_logprob
from turnout.sim.ranks import Running
from turnout.wire.proto import sglang_scheduler_pb2 as pb

if TYPE_CHECKING:
    from turnout.sim.servicer import SimServicer

__all__ = ["ChoiceEmitter"]


class ChoiceEmitter:
    """Streams the planned choices of one request chunk by chunk (choices advance together)."""

    def __init__(
        self,
        servicer: SimServicer,
        *,
        request: pb.GenerateRequest,
        plans: list[ChoicePlan],
        prompt_tokens: int,
        cached: int,
        state: Running,
        faulty: bool,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> None:
        self.servicer = servicer
        self.request = request
        self.plans = plans
        self.prompt_tokens = prompt_tokens
        self.cached = cached
        self.state = state
        self.faulty = faulty
        self.context = context
        self.outcome = "stop"
        params = request.sampling_params
        self.per_chunk = params.stream_interval if params.HasField("stream_interval") else 0
        self.logprobs = request.return_logprob
        # In a PD pair, prompt logprobs come from the prefill leg only.
        self.input_logprobs = request.logprob_start_len >= 0 and servicer.role != "decode"
        self.top_k = max(request.top_logprobs_num, 0)
        #: The ids whose logprobs every output position reports (``token_ids_logprobs``).
        self.wanted_ids = list(request.token_ids_logprob)
        self._sent0 = 0

    def generated_ids(self) -> list[int]:
        """The token ids choice 0 produced so far."""
        return self.plans[0].token_ids[: self._sent0] if self.plans else []

    async def run(self) -> AsyncIterator[pb.GenerateResponse]:
        rid = self.request.request_id
        stream = self.request.stream
        knobs = self.servicer.knobs
        sent = [0] * len(self.plans)
        done = [False] * len(self.plans)
        last: list[list[int]] = [[] for _ in self.plans]
        first = True
        while not all(done):
            step = max(self.per_chunk or knobs.tokens_per_chunk, 1)
            if self.state.aborted.is_set():
                break
            fail_at = knobs.fail_after_tokens if self.faulty else None
            if fail_at is not None and sent[0] >= fail_at:
                self.outcome = "error"
                await self.context.abort(
                    grpc.StatusCode[knobs.fail_after_status],
                    f"simulated failure after {sent[0]} tokens",
                )
            if fail_at is not None:
                step = min(step, max(fail_at - sent[0], 1))
            emitted = 0
            for index, plan in enumerate(self.plans):
                if done[index]:
                    continue
                start = sent[index]
                ids = plan.token_ids[start : start + step]
                sent[index] += len(ids)
                emitted += len(ids)
                last[index] = ids
                finished = sent[index] >= len(plan.token_ids)
                if stream and (ids or first):
                    yield pb.GenerateResponse(
                        request_id=rid, chunk=self._chunk(index, plan, start, ids, first)
                    )
                if finished:
                    done[index] = True
                    yield pb.GenerateResponse(
                        request_id=rid,
                        complete=self._complete(
                            index,
                            plan,
                            last[index] if stream else plan.token_ids,
                            plan.finish_reason,
                            stream,
                        ),
                    )
            if first:
                self.state.rank.end_prefill(self.state)
            first = False
            self._sent0 = sent[0]
            self.state.rank.count_tokens(emitted)
            self.state.tokens += emitted
            self.servicer.records.generated[rid] = sum(sent)
            if not all(done):
                per_token = knobs.delay_ms + knobs.delay_jitter_ms * random.random()
                await self.state.sleep(per_token * step / 1000)
        if self.state.aborted.is_set() and not all(done):
            self.outcome = "abort"
            for index, plan in enumerate(self.plans):
                if not done[index]:
                    cut = ChoicePlan(plan.token_ids[: sent[index]], "length")
                    yield pb.GenerateResponse(
                        request_id=rid,
                        complete=self._complete(
                            index, cut, [] if stream else cut.token_ids, "abort", stream
                        ),
                    )
            return
        reasons = {p.finish_reason for p in self.plans}
        self.outcome = "stop" if reasons == {"stop"} else "length"

    def _chunk(
        self, index: int, plan: ChoicePlan, start: int, ids: list[int], first: bool
    ) -> pb.GenerateStreamChunk:
        end = start + len(ids)
        chunk = pb.GenerateStreamChunk(
            token_ids=ids,
            prompt_tokens=self.prompt_tokens,
            completion_tokens=end,
            cached_tokens=self.cached,
            reasoning_tokens=min(end, plan.reasoning_tokens),
            index=index,
        )
        if self.logprobs:
            chunk.output_logprobs.CopyFrom(self._output_logprobs(ids, start))
            if first and self.input_logprobs:
                chunk.input_logprobs.CopyFrom(self._input_logprobs())
        return chunk

    def _complete(
        self, index: int, plan: ChoicePlan, output_ids: list[int], reason: str, stream: bool
    ) -> pb.GenerateComplete:
        complete = pb.GenerateComplete(
            output_ids=output_ids,
            finish_reason=reason,
            prompt_tokens=self.prompt_tokens,
            completion_tokens=len(plan.token_ids),
            cached_tokens=self.cached,
            reasoning_tokens=plan.reasoning_tokens,
            index=index,
        )
        if plan.matched_token_id is not None and reason == "stop":
            complete.matched_token_id = plan.matched_token_id
        if self.logprobs and not stream:
            complete.output_logprobs.CopyFrom(self._output_logprobs(plan.token_ids, 0))
            if self.input_logprobs:
                complete.input_logprobs.CopyFrom(self._input_logprobs())
        return complete

    def _output_logprobs(self, ids: Iterable[int], start: int) -> pb.OutputLogProbs:
        ids = list(ids)
        out = pb.OutputLogProbs(
            token_logprobs=[synthetic_logprob(t, start + i) for i, t in enumerate(ids)],
            token_ids=ids,
        )
        if self.top_k:
            vocab = self.servicer.model.vocab_size
            for i, t in enumerate(ids):
                values, top_ids = top_logprobs(t, start + i, self.top_k, vocab)
                out.top_logprobs.append(pb.TopLogProbs(values=values, token_ids=top_ids))
        if self.wanted_ids:
            vocab = self.servicer.model.vocab_size
            for i, t in enumerate(ids):
                values = [wanted_logprob(t, start + i, w, vocab) for w in self.wanted_ids]
                out.token_ids_logprobs.append(
                    pb.TopLogProbs(values=values, token_ids=self.wanted_ids)
                )
        return out

    def _input_logprobs(self) -> pb.InputLogProbs:
        prompt = list(self.request.tokenized.input_ids)[self.request.logprob_start_len :]
        out = pb.InputLogProbs(token_ids=prompt)
        vocab = self.servicer.model.vocab_size
        for i, t in enumerate(prompt):
            position = self.request.logprob_start_len + i
            entry = pb.InputTokenLogProb()
            if position > 0:  # the very first prompt token has no logprob
                entry.value = synthetic_logprob(t, position)
            out.token_logprobs.append(entry)
            if self.top_k:
                values, top_ids = top_logprobs(t, position, self.top_k, vocab)
                out.top_logprobs.append(pb.TopLogProbs(values=values, token_ids=top_ids))
        return out

"""Reading ``GenerateResponse`` messages (the protobuf objects stay the data).

What a Generate stream carries, per choice ``index``:

* ``chunk`` (stream mode only): ``token_ids`` are the new tokens (a delta);
  ``prompt_tokens`` / ``completion_tokens`` / ``cached_tokens`` / ``reasoning_tokens`` are running
  totals; ``output_logprobs`` covers this chunk's tokens; ``input_logprobs`` only on the first
  chunk and only when prompt logprobs were asked for.
* ``complete``: ``finish_reason`` is ``"stop"``, ``"length"`` or ``"abort"``; ``matched_stop`` holds
  the stop token id (or a stop string). In stream mode its ``output_ids`` repeat the tokens of the
  last chunk (SGLang's servicer does this) — do not append them again. In non-stream mode it is the
  only message of its choice and ``output_ids`` / ``output_logprobs`` hold everything.
"""

from __future__ import annotations

from turnout.wire.proto import sglang_scheduler_pb2 as pb

__all__ = ["matched_stop"]


def matched_stop(complete: pb.GenerateComplete) -> int | str | None:
    """The stop token id or stop string that ended the choice, or None."""
    which = complete.WhichOneof("matched_stop")
    if which == "matched_token_id":
        return complete.matched_token_id
    if which == "matched_stop_str":
        return complete.matched_stop_str
    return None

"""gpt-oss (harmony format): the text of ``analysis`` messages is reasoning.

An output is a series of harmony messages::

    <|channel|>analysis<|message|>…thinking…<|end|>
    <|start|>assistant<|channel|>final<|message|>…answer…<|return|>

An analysis message's header (``<|channel|>analysis<|message|>``, with the ``<|start|>assistant``
that opens every message after the first) and its closing ``<|end|>`` are removed, and its body
is reasoning. Every other byte passes through verbatim as normal text — ``final`` and
``commentary`` messages with all their markup (``to=functions.NAME``, ``<|constrain|>json``,
``<|call|>``) — because the gpt-oss tool parser reads those channels. An analysis message with a
recipient (``<|channel|>analysis to=…``) is a tool call and passes through too.

An analysis body that runs into ``<|start|>``, ``<|channel|>``, ``<|return|>`` or ``<|call|>``
without ``<|end|>`` ends there; that token stays in the normal text. The harmony tokens are
special tokens, so decoding must keep them.
"""

from __future__ import annotations

from turnout.reasoning.base import MarkerReasoningParser


class GptOssReasoningParser(MarkerReasoningParser):
    """gpt-oss harmony: ``analysis`` channel bodies are reasoning, everything else is normal."""

    start_marker = "<|channel|>analysis<|message|>"
    start_markers = (
        "<|start|>assistant<|channel|>analysis<|message|>",
        "<|channel|>analysis<|message|>",
    )
    end_markers = ("<|end|>",)
    interrupt_markers = ("<|start|>", "<|channel|>", "<|return|>", "<|call|>")
    reopens = True
    needs_special_tokens = True

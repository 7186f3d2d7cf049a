"""How each choice's output is processed: the options a prompt builder chooses, and the fresh
per-choice processors made from them for each prompt."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import regex

from turnout.chat_formats.types import ChatFormat
from turnout.errors import bad_request
from turnout.generation.choice import CallIds, ChoiceProcessor, TokenPiece
from turnout.generation.models import ModelRuntime
from turnout.generation.requests import SamplingFields, stop_strings
from turnout.tokenizer.stops import StopStringMatcher, compile_stop_regexes
from turnout.tool_calls.types import ToolParser, Tools


@dataclass(slots=True)
class OutputOptions:
    """How each choice's output is processed."""

    n: int
    stops: list[str]
    no_stop_trim: bool
    skip_special_tokens: bool
    spaces_between_special_tokens: bool
    logprobs: bool
    stop_regexes: list[regex.Pattern[str]] = field(default_factory=list)
    keep_token_ids: bool = False
    #: A hidden stop token has its logprob reported too (``/generate``, whose output ids
    #: include it); elsewhere logprobs cover the text's tokens.
    stop_token_logprobs: bool = False
    #: Logprob tokens are named ``token_id:<id>`` (vLLM's ``return_tokens_as_token_ids``).
    tokens_as_ids: bool = False
    #: At most this many alternatives per token (``None``: what the worker sent; the worker
    #: may be asked for more, for the prompt's logprobs).
    top_logprobs: int | None = None
    tools: Tools = None
    tool_parser: Callable[[], ToolParser] | None = None
    #: The tool parser's registered name (attributes its failures).
    tool_parser_name: str | None = None
    reasoning: bool = False
    start_in_reasoning: bool | None = None
    history_calls: int = 0
    #: At most this many tool calls per choice (``parallel_tool_calls: false`` gives 1).
    max_calls: int | None = None
    #: The model's chat format reads the output token ids instead of the detokenizer and the
    #: parsers (``reasoning``: its reasoning is reasoning_content, else content; ``tools``:
    #: its calls are tool calls, else content).
    chat_format: ChatFormat | None = None

    @property
    def has_stops(self) -> bool:
        """True when turnout matches stop strings or stop regexes on the output."""
        return bool(self.stops or self.stop_regexes)


def output_options(request: SamplingFields, **extra: Any) -> OutputOptions:
    """Output options common to every endpoint (400 for a bad ``stop_regex``)."""
    try:
        regexes = compile_stop_regexes(stop_strings(request.stop_regex))
    except ValueError as exc:
        raise bad_request(str(exc), "stop_regex") from None
    return OutputOptions(
        n=request.n,
        stops=stop_strings(request.stop),
        stop_regexes=regexes,
        no_stop_trim=request.no_stop_trim,
        skip_special_tokens=request.skip_special_tokens,
        spaces_between_special_tokens=request.spaces_between_special_tokens,
        **extra,
    )


def token_piece(runtime: ModelRuntime, options: OutputOptions) -> TokenPiece:
    """The text and bytes of logprob tokens: the token's text, or ``token_id:<id>`` (vLLM's
    ``return_tokens_as_token_ids``; the bytes stay the token's own)."""
    piece: TokenPiece = runtime.tokenizer.pieces.piece
    if not options.tokens_as_ids:
        return piece

    def by_id(token_id: int) -> tuple[str, bytes]:
        return f"token_id:{token_id}", piece(token_id)[1]

    return by_id


def make_processors(
    runtime: ModelRuntime, options: OutputOptions, first_index: int = 0
) -> list[ChoiceProcessor]:
    """Fresh processors for the ``n`` choices of one prompt (no parser state is shared between
    requests or choices). Their events are numbered from ``first_index``: prompt ``k`` of a
    batch starts at ``k * n``, so every choice of a request has its own index."""
    tokenizer = runtime.tokenizer
    skip_special = options.skip_special_tokens and not (
        runtime.parsers_need_special_tokens and (options.tool_parser or options.reasoning)
    )
    # The stop token ends the output, not part of its text: ``no_stop_trim`` shows it only where
    # special tokens are shown at the client's wish (not where only the parsers need them).
    shown = options.no_stop_trim and not options.skip_special_tokens
    hidden = frozenset() if shown else runtime.stop_token_ids
    piece = token_piece(runtime, options) if options.logprobs else None
    processors = []
    for index in range(first_index, first_index + options.n):
        tool_parser = options.tool_parser() if options.tool_parser is not None else None
        reader = options.chat_format.reader() if options.chat_format is not None else None
        reasoning = None
        if options.reasoning and runtime.reasoning_parser is not None and reader is None:
            reasoning = runtime.reasoning_parser(start_in_reasoning=options.start_in_reasoning)
        stops = (
            StopStringMatcher(
                options.stops, keep_matched=options.no_stop_trim, patterns=options.stop_regexes
            )
            if options.has_stops
            else None
        )
        processors.append(
            ChoiceProcessor(
                index,
                decoder=tokenizer.incremental_detokenizer(
                    skip_special_tokens=skip_special,
                    spaces_between_special_tokens=options.spaces_between_special_tokens,
                ),
                stops=stops,
                reasoning=reasoning,
                tool_parser=tool_parser,
                tools=options.tools,
                call_ids=CallIds.of(
                    getattr(tool_parser, "call_id_style", "openai"), options.history_calls
                ),
                hidden_stop_ids=hidden,
                token_piece=piece,
                keep_token_ids=options.keep_token_ids,
                stop_token_logprobs=options.stop_token_logprobs,
                top_logprobs=options.top_logprobs,
                max_calls=options.max_calls,
                tool_parser_name=options.tool_parser_name,
                reasoning_parser_name=runtime.reasoning_parser_name,
                reader=reader,
                reader_reasoning=options.reasoning,
                reader_calls=options.tools is not None,
                reader_name=runtime.chat_format_name,
            )
        )
    return processors

"""A model's tokenizer, special tokens, EOS ids and chat templates, loaded once and shared."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Tokenizer

from turnout.tokenizer.byte_decode import ByteLevelDetokenizer, byte_decoder
from turnout.tokenizer.chat_template import ChatTemplate, Message
from turnout.tokenizer.content_format import ContentFormat
from turnout.tokenizer.detokenizer import IncrementalDetokenizer, byte_fallback_ids, special_ids
from turnout.tokenizer.errors import ChatTemplateError, ModelFilesError, TooManyTokens
from turnout.tokenizer.length_bound import chars_per_token, min_tokens
from turnout.tokenizer.model_dir import DEFAULT_TEMPLATE, ModelFiles, TokenSpec, read_model_dir
from turnout.tokenizer.offload import offloader
from turnout.tokenizer.segment_cache import SegmentCache
from turnout.tokenizer.token_bytes import TokenPieces

#: Texts at least this long are encoded on a tokenizer thread (a few milliseconds of work and
#: more); shorter ones are encoded in place, where a thread hop would cost more than it saves.
OFF_LOOP_CHARS = 16 * 1024

_cache: dict[tuple[Path, str | None], ModelTokenizer] = {}
_cache_lock = threading.Lock()


def _added_token(spec: TokenSpec, *, special: bool) -> AddedToken:
    return AddedToken(
        spec.content,
        single_word=spec.single_word,
        lstrip=spec.lstrip,
        rstrip=spec.rstrip,
        normalized=spec.normalized and not special,
        special=special,
    )


def _build_backend(files: ModelFiles) -> Tokenizer:
    """Load ``tokenizer.json`` and apply ``tokenizer_config.json`` on top, as transformers does."""
    try:
        backend = Tokenizer.from_file(str(files.tokenizer_file))
    except Exception as exc:  # tokenizers raises plain Exception for malformed files
        raise ModelFilesError(f"{files.tokenizer_file}: cannot load tokenizer: {exc}") from exc
    # Tokens the configuration declares but tokenizer.json lacks are appended, like transformers.
    missing = [
        _added_token(spec, special=spec.special)
        for spec in files.added_tokens
        if backend.token_to_id(spec.content) is None
    ]
    if missing:
        backend.add_tokens(missing)
    specials = [*files.special_tokens.values(), *files.extra_special_tokens]
    missing = [
        _added_token(spec, special=True)
        for spec in specials
        if backend.token_to_id(spec.content) is None
    ]
    if missing:
        backend.add_special_tokens(missing)
    # add_bos_token / add_eos_token are not applied: like transformers 5, the post-processor
    # in tokenizer.json decides what encode(add_special_tokens=True) adds.
    return backend


class ModelTokenizer:
    """Tokenizer of one model: encode/decode, special tokens, EOS ids and chat templates.

    Build it with :meth:`from_dir`; instances are immutable and shared between requests.
    """

    def __init__(self, backend: Tokenizer, files: ModelFiles) -> None:
        """Wrap an already loaded backend; prefer :meth:`from_dir`."""
        self.backend = backend
        """The underlying :class:`tokenizers.Tokenizer` (do not mutate)."""
        self.files = files
        self.special_tokens: Mapping[str, str] = {
            name: spec.content for name, spec in files.special_tokens.items()
        }
        """Named special tokens as template variables: ``{"bos_token": "<s>", …}``."""
        added = backend.get_added_tokens_decoder()
        self.special_token_ids: frozenset[int] = frozenset(
            token_id for token_id, token in added.items() if token.special
        )
        """Ids that ``skip_special_tokens`` hides."""
        eos_ids = set(files.eos_token_ids)
        if not eos_ids and "eos_token" in self.special_tokens:
            eos_id = backend.token_to_id(self.special_tokens["eos_token"])
            if eos_id is not None:
                eos_ids.add(eos_id)
        self.eos_token_ids: frozenset[int] = frozenset(eos_ids)
        """EOS ids from config.json ∪ generation_config.json (else the tokenizer's eos_token)."""
        self._byte_ids = byte_fallback_ids(backend)
        self._special_ids = special_ids(backend) if self._byte_ids else frozenset()
        #: Decodes output ids in Python when that is exact (byte-level vocabularies): faster.
        self._fast_decoder = byte_decoder(backend)
        self.pieces = TokenPieces(backend, {i: token.content for i, token in added.items()})
        """Text and real bytes of single tokens (logprobs)."""
        self._segments = SegmentCache(backend)
        self.vocab_size: int = backend.get_vocab_size(with_added_tokens=True)
        """Number of ids, added tokens included (``len(tokenizer)`` in transformers)."""
        self.chars_per_token: int | None = chars_per_token(backend)
        """The most characters one token stands for (``None``: no bound from length holds);
        see :mod:`turnout.tokenizer.length_bound`."""
        self._templates: dict[str, ChatTemplate] = {}
        for name, source in files.chat_templates.items():
            try:
                self._templates[name] = ChatTemplate(source, name)
            except ChatTemplateError as exc:
                raise ModelFilesError(f"{files.chat_template_origin}: {exc}") from exc

    @classmethod
    def from_dir(cls, path: str | Path, chat_template: str | Path | None = None) -> ModelTokenizer:
        """Load (or reuse) the tokenizer of the model directory ``path``.

        ``chat_template`` — a file path or the template text — overrides the model's templates.
        Problems with the files raise :class:`~turnout.tokenizer.ModelFilesError`.
        """
        directory = Path(path).expanduser()
        key = (directory.resolve(), None if chat_template is None else str(chat_template))
        with _cache_lock:
            cached = _cache.get(key)
            if cached is None:
                files = read_model_dir(directory, chat_template)
                cached = _cache[key] = cls(_build_backend(files), files)
        return cached

    # -- text <-> ids ---------------------------------------------------------------------------

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of ``text``; ``add_special_tokens`` applies the BOS/EOS post-processor.

        Without special tokens (rendered chat prompts) the text between added tokens is cached,
        so the repeated parts of conversations are tokenized once.
        """
        if not add_special_tokens:
            return self._segments.encode(text)
        return self.backend.encode(text, add_special_tokens=add_special_tokens).ids

    def encode_batch(
        self, texts: Sequence[str], add_special_tokens: bool = True
    ) -> list[list[int]]:
        """:meth:`encode` for many texts at once (parallel in Rust; cached pieces without
        special tokens)."""
        if not add_special_tokens:
            return [self._segments.encode(text) for text in texts]
        encodings = self.backend.encode_batch(list(texts), add_special_tokens=add_special_tokens)
        return [encoding.ids for encoding in encodings]

    def min_token_count(self, text: str) -> int:
        """The fewest tokens ``text`` can encode to, known from its length alone (0 if unknown)."""
        return min_tokens(len(text), self.chars_per_token)

    async def encode_off_loop(
        self, text: str, add_special_tokens: bool = True, *, max_tokens: int | None = None
    ) -> list[int]:
        """:meth:`encode` that keeps the event loop free: long texts are encoded on a tokenizer
        thread. With ``max_tokens``, a text with more tokens raises :class:`TooManyTokens` —
        before any encoding when its length alone proves it."""
        if max_tokens is not None and (least := self.min_token_count(text)) > max_tokens:
            raise TooManyTokens(least, max_tokens, at_least=True)
        if len(text) < OFF_LOOP_CHARS:
            ids = self.encode(text, add_special_tokens)
            if max_tokens is not None and len(ids) > max_tokens:
                raise TooManyTokens(len(ids), max_tokens, at_least=False)
            return ids
        return await offloader().run(self._encode_long, text, add_special_tokens, max_tokens)

    def _encode_long(
        self, text: str, add_special_tokens: bool, max_tokens: int | None
    ) -> list[int]:
        if not add_special_tokens:
            return self._segments.encode_long(text, max_tokens)
        # The batch encoder releases the GIL (encode() does not); the ids list is only built
        # for a text that fits, as building it holds the GIL.
        encoding = self.backend.encode_batch_fast([text], add_special_tokens=True)[0]
        if max_tokens is not None and len(encoding) > max_tokens:
            raise TooManyTokens(len(encoding), max_tokens, at_least=False)
        return encoding.ids

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        """Text of ``ids`` (no clean-up of tokenization spaces)."""
        return self.backend.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def decode_batch(
        self, batch: Sequence[Sequence[int]], skip_special_tokens: bool = False
    ) -> list[str]:
        """:meth:`decode` for many sequences."""
        return self.backend.decode_batch(
            [list(ids) for ids in batch], skip_special_tokens=skip_special_tokens
        )

    def token_to_id(self, token: str) -> int | None:
        """Id of a vocabulary entry (``None`` if absent)."""
        return self.backend.token_to_id(token)

    def id_to_token(self, token_id: int) -> str | None:
        """Vocabulary entry of an id (``None`` if out of range)."""
        return self.backend.id_to_token(token_id)

    def incremental_detokenizer(
        self, skip_special_tokens: bool = True, spaces_between_special_tokens: bool = True
    ) -> IncrementalDetokenizer | ByteLevelDetokenizer:
        """A fresh streaming decoder for one output choice (for a byte-level vocabulary, one
        that decodes each chunk once, in Python)."""
        if self._fast_decoder is not None:
            return self._fast_decoder.stream(skip_special_tokens, spaces_between_special_tokens)
        return IncrementalDetokenizer(
            self.backend,
            skip_special_tokens=skip_special_tokens,
            spaces_between_special_tokens=spaces_between_special_tokens,
            byte_ids=self._byte_ids,
            special=self._special_ids,
        )

    # -- chat templates -------------------------------------------------------------------------

    @property
    def chat_templates(self) -> Mapping[str, ChatTemplate]:
        """The model's templates by name (a single template is ``"default"``)."""
        return self._templates

    def chat_template(self, name: str | None = None, *, tools: object = None) -> ChatTemplate:
        """Pick a template like transformers: ``name``, else ``tool_use`` with tools, else default.

        ``name`` may also be template text (compiled once and cached).
        """
        if name is not None:
            if name in self._templates:
                return self._templates[name]
            if "{{" in name or "{%" in name:
                return ChatTemplate(name, "request")
            raise ChatTemplateError(
                f"unknown chat template {name!r}; this model has {sorted(self._templates)}"
            )
        if tools is not None and "tool_use" in self._templates:
            return self._templates["tool_use"]
        if DEFAULT_TEMPLATE in self._templates:
            return self._templates[DEFAULT_TEMPLATE]
        if not self._templates:
            raise ChatTemplateError(
                "this model has no chat template; start turnout with one for this model"
            )
        raise ChatTemplateError(f"no default chat template; pick one of {sorted(self._templates)}")

    @property
    def content_format(self) -> ContentFormat:
        """Content format of the default template (``"string"`` if there is none)."""
        template = self._templates.get(DEFAULT_TEMPLATE)
        return "string" if template is None else template.content_format

    @property
    def media_kinds(self) -> frozenset[str]:
        """Media kinds (``image``…) the default template renders (none without a template)."""
        template = self._templates.get(DEFAULT_TEMPLATE)
        return frozenset() if template is None else template.media_kinds

    def apply_chat_template(
        self,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool | None = None,
        *,
        continue_final_message: bool | str = False,
        documents: Sequence[Mapping[str, Any]] | None = None,
        chat_template: str | None = None,
        **template_kwargs: Any,
    ) -> str:
        """Render a conversation to the prompt text, like transformers' method of this name.

        ``add_generation_prompt`` defaults to ``True`` unless ``continue_final_message`` is set.
        Extra keyword arguments (``enable_thinking``, ``reasoning_effort`` …) reach the template
        and override special-token variables. Errors raise :class:`ChatTemplateError`.
        """
        if add_generation_prompt is None:
            add_generation_prompt = not continue_final_message
        template = self.chat_template(chat_template, tools=tools)
        return template.render(
            messages,
            tools=tools,
            documents=documents,
            add_generation_prompt=add_generation_prompt,
            continue_final_message=continue_final_message,
            special_tokens=self.special_tokens,
            **template_kwargs,
        )

    def encode_chat(
        self,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool | None = None,
        **kwargs: Any,
    ) -> tuple[str, list[int]]:
        """Render with :meth:`apply_chat_template` and encode without adding special tokens."""
        text = self.apply_chat_template(messages, tools, add_generation_prompt, **kwargs)
        return text, self.encode(text, add_special_tokens=False)


def clear_cache() -> None:
    """Forget loaded tokenizers (tests; a reload after model files changed)."""
    with _cache_lock:
        _cache.clear()

"""Message content parts as clients send them, and as chat templates receive them.

Clients send OpenAI parts: ``{"type": "text", "text": …}``, ``{"type": "image_url",
"image_url": {"url": …}}`` (Chat Completions) or ``input_text`` / ``input_image`` (Responses).
Templates receive what ``transformers`` users pass them: ``{"type": "text", "text": …}`` and a
bare ``{"type": "image"}`` per image (or the type or key the template tests instead, see
:func:`turnout.tokenizer.content_format.media_parts_of`), which the template turns into its
placeholder; the image itself travels beside the prompt. Media parts are accepted in user
messages only (as in OpenAI's API), and only of the kinds the template renders.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final, Literal

from turnout.tokenizer.errors import ChatTemplateError

__all__ = ["MediaKind", "media_kind", "template_content", "text_of_parts"]

MediaKind = Literal["image", "video", "audio"]

TEXT_TYPES: Final = frozenset({"text", "input_text", "output_text"})
#: Part ``type`` → the kind of media it carries.
MEDIA_TYPES: Final[Mapping[str, MediaKind]] = {
    "image_url": "image",
    "input_image": "image",
    "image": "image",
    "video_url": "video",
    "video": "video",
    "input_audio": "audio",
    "audio": "audio",
}


def media_kind(part: object) -> MediaKind | None:
    """The media kind of a content part, or None for text and anything unknown."""
    if isinstance(part, Mapping):
        kind = part.get("type")
        if isinstance(kind, str):
            return MEDIA_TYPES.get(kind)
    return None


def _text(part: object, index: int) -> str | None:
    """The text of a text part (a bare string counts); None for any other part."""
    if isinstance(part, str):
        return part
    if not isinstance(part, Mapping):
        raise ChatTemplateError(f"messages[{index}].content parts must be objects")
    text = part.get("text")
    kind = part.get("type", "text")
    if isinstance(kind, str) and kind in TEXT_TYPES and isinstance(text, str):
        return text
    return None


def _unsupported(part: object, index: int, why: str) -> ChatTemplateError:
    kind = part.get("type", "text") if isinstance(part, Mapping) else type(part).__name__
    return ChatTemplateError(f"messages[{index}].content: part type {kind!r} {why}")


def text_of_parts(parts: Sequence[object], index: int) -> str:
    """Text parts joined with newlines; any other part is a :class:`ChatTemplateError`."""
    texts: list[str] = []
    for part in parts:
        text = _text(part, index)
        if text is None:
            raise _unsupported(
                part, index, "is not supported by this model's chat template (it takes text only)"
            )
        texts.append(text)
    return "\n".join(texts)


def _typed_parts(
    parts: Sequence[object], index: int, role: object, media: Mapping[str, Mapping[str, str]]
) -> list[dict[str, str]]:
    """Parts as templates read them: text parts, and per media part the form ``media`` gives
    for its kind."""
    typed: list[dict[str, str]] = []
    for part in parts:
        text = _text(part, index)
        if text is not None:
            typed.append({"type": "text", "text": text})
            continue
        kind = media_kind(part)
        if kind is None:
            raise _unsupported(part, index, "is not supported")
        if kind not in media:
            raise _unsupported(
                part, index, f"is not supported: this model's chat template takes no {kind}"
            )
        if role != "user":
            raise _unsupported(part, index, f"is only allowed in user messages, not {role!r}")
        typed.append(dict(media[kind]))
    return typed


def template_content(
    content: object,
    *,
    index: int,
    role: object,
    parts_only: bool,
    media: Mapping[str, Mapping[str, str]],
) -> object:
    """``content`` in the form the template takes.

    ``parts_only`` templates (content format ``"openai"``) get parts, a string wrapped in a text
    part. The others get strings: text parts joined with newlines, except that a list with media
    parts stays a list of typed parts (``media``: kind → the part the template takes; any other
    kind is refused).
    """
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if parts_only else content
    if not isinstance(content, list):
        return content
    if parts_only or any(media_kind(part) is not None for part in content):
        return _typed_parts(content, index, role, media)
    return text_of_parts(content, index)

"""Tokenizers, chat templates, incremental detokenization and stop strings.

Workers only see token ids, so turnout owns the text: :class:`ModelTokenizer` loads a model
directory (tokenizer, special tokens, EOS ids, chat templates), :class:`IncrementalDetokenizer`
turns streamed ids into text deltas and :class:`StopStringMatcher` cuts the text at stop strings.
"""

from turnout.tokenizer.chat_template import ChatTemplate, prepare_messages
from turnout.tokenizer.content_format import ContentFormat, detect_content_format
from turnout.tokenizer.detokenizer import IncrementalDetokenizer
from turnout.tokenizer.errors import ChatTemplateError, ModelFilesError, TooManyTokens
from turnout.tokenizer.model_tokenizer import ModelTokenizer

__all__ = [
    "ChatTemplate",
    "ChatTemplateError",
    "ContentFormat",
    "IncrementalDetokenizer",
    "ModelFilesError",
    "ModelTokenizer",
    "TooManyTokens",
    "detect_content_format",
    "prepare_messages",
]

"""``POST /v1/embeddings``: inputs as text or token ids, one ``Embed`` call per input through the
dispatcher, OpenAI's answer (floats or base64, optionally shortened to ``dimensions``).

Embeddings are not generation: no event stream, no renderer. They share the generation flow's
model resolution (:func:`turnout.generation.flow.model_runtime`), its tokenization and prompt
limits (:mod:`turnout.generation.prompt_size`) and the dispatcher (selection, retries,
breakers).
"""

from turnout.embeddings.endpoint import Embedder, EmbeddingBackend, embed
from turnout.embeddings.request import MAX_INPUTS, EmbeddingRequest

__all__ = ["MAX_INPUTS", "Embedder", "EmbeddingBackend", "EmbeddingRequest", "embed"]

"""Workers that are OpenAI-compatible HTTP servers (vLLM or SGLang over HTTP, llama.cpp's
server, Ollama, a hosted API): requests for their models are forwarded as they came, and their
answers passed back byte for byte (see docs/http_workers.md).

Kept light on purpose: the worker layer imports :mod:`turnout.http_workers.kind` and
:mod:`turnout.http_workers.settings`; the client and the relay load only where they are used.
"""

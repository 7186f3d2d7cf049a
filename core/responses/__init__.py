"""OpenAI's Responses API (``/v1/responses``) on the one generation flow.

- :mod:`~turnout.responses.request`: the request body and what turnout refuses of it;
- :mod:`~turnout.responses.items`: input items, checked and given ids, and as chat messages;
- :mod:`~turnout.responses.endpoint`: the prompt builder (the chat template path) and the
  :class:`~turnout.generation.flow.Endpoint`;
- :mod:`~turnout.responses.render`: the typed stream events, and the response folded from them;
- :mod:`~turnout.responses.store`: where responses are kept for ``previous_response_id`` and
  ``GET /v1/responses/{id}``; :mod:`~turnout.responses.conversations`: where conversations are;
- :mod:`~turnout.responses.storage`: the backend of both (``responses.storage``): memory, Redis
  (:mod:`~turnout.responses.redis_link`) or PostgreSQL (:mod:`~turnout.responses.postgres`);
- :mod:`~turnout.responses.mcp`: MCP tools, which the router calls between the generations of
  one response.
"""

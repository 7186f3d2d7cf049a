"""Anthropic's Messages API (``/v1/messages``) on the one generation flow.

- :mod:`~turnout.anthropic.request`: the request body and what turnout refuses of it;
- :mod:`~turnout.anthropic.blocks`: content blocks, checked, as chat messages;
- :mod:`~turnout.anthropic.endpoint`: the prompt builder (the chat path's) and the
  :class:`~turnout.generation.flow.Endpoint`;
- :mod:`~turnout.anthropic.render`: the typed stream events, and the message folded from them;
- :mod:`~turnout.anthropic.errors`: errors in Anthropic's shape.
"""

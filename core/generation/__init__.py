"""Generation: what turns an API request into worker requests and their output into an answer.

Every generation endpoint runs the same stages (:mod:`turnout.generation.flow`); an endpoint
brings its request type, a prompt builder and a renderer. The HTTP side (routes, SSE, limits)
is :mod:`turnout.server`; choosing a worker is :mod:`turnout.routing`.
"""

"""``OPTIONS`` answers that name every method of their path.

Litestar gives each path an ``OPTIONS`` handler when the path's first handler is registered,
answering with that route's methods; when a handler for another method joins the path later (a
``GET`` and a ``DELETE`` on ``/v1/responses/{id}``), the path gets a new route but keeps the old
``OPTIONS`` handler, whose ``Allow`` then misses the newcomer.
"""

from __future__ import annotations

from litestar import Litestar
from litestar.routes import HTTPRoute

__all__ = ["allow_every_method"]


def allow_every_method(app: Litestar) -> None:
    """Point each path's ``OPTIONS`` answer at the route that has all of its methods."""
    for route in app.routes:
        if not isinstance(route, HTTPRoute):
            continue
        entry = route.route_handler_map.get("OPTIONS")
        if entry is None:
            continue
        handler = entry[0]
        made = route.create_options_handler(route.path)  # the answer of this route
        if handler.fn.__qualname__ == made.fn.__qualname__:  # Litestar's own, not an app's
            handler._fn = made.fn

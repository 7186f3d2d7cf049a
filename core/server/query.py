"""Query parameters every route reads the same way."""

from __future__ import annotations

from typing import Annotated, TypeAlias

from litestar.params import QueryParameter

from turnout.errors import ApiError, bad_request

__all__ = ["FLAG_SPELLINGS", "QueryFlag", "query_flag"]

#: How a boolean query parameter may be written (in any case).
FLAG_SPELLINGS = {"true": True, "1": True, "false": False, "0": False}

#: A route's boolean query parameter (read with :func:`query_flag`), documented as such.
QueryFlag: TypeAlias = Annotated[
    str | None, QueryParameter(description="A boolean: true, false, 1 or 0 (in any case)")
]


def query_flag(value: str | None, name: str, default: bool = False) -> bool:
    """The boolean query parameter ``name`` given as ``value`` (``default`` when absent)."""
    if value is None:
        return default
    flag = FLAG_SPELLINGS.get(value.lower())
    if flag is None:
        raise _not_a_flag(name)
    return flag


def _not_a_flag(name: str) -> ApiError:
    return bad_request(f"{name} must be true or false (or 1 or 0)", name)

"""The Jinja environment chat templates run in, configured like Hugging Face ``transformers``.

Templates from the Hub are untrusted code: they run in an immutable sandbox, namespaces refuse
underscore attributes and ``dict`` can only build plain dicts. Each template source is compiled
once and cached.
"""

from __future__ import annotations

import json
from collections.abc import MutableMapping
from datetime import datetime
from functools import lru_cache
from typing import Any, NoReturn

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.parser
from jinja2.runtime import Context
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import Namespace


def _raise_exception(message: str) -> NoReturn:
    raise jinja2.exceptions.TemplateError(message)


_PLAIN_JSON = json.JSONEncoder(ensure_ascii=False)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | str | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    # Jinja's own tojson HTML-escapes and always sorts keys; templates expect plain json.dumps.
    if indent is None and separators is None and not sort_keys and not ensure_ascii:
        return _PLAIN_JSON.encode(value)  # the usual call: no encoder built per value
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _refuse_private(name: object) -> None:
    if isinstance(name, str) and name.startswith("_"):
        raise jinja2.exceptions.SecurityError(
            f"chat templates may not set underscore attributes on a namespace: {name!r}"
        )


class _SafeNamespace(Namespace):
    """``namespace(...)`` that refuses attribute names starting with an underscore."""

    def __init__(*args: Any, **kwargs: Any) -> None:
        self, rest = args[0], args[1:]
        attrs = dict(*rest, **kwargs)
        for name in attrs:
            _refuse_private(name)
        Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: Any) -> None:
        _refuse_private(name)
        Namespace.__setitem__(self, name, value)


class _DictBuilder:
    """The ``dict`` global: builds plain dicts without exposing the ``dict`` type itself."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict(*args, **kwargs)

    def fromkeys(self, keys: Any, value: Any = None) -> dict[Any, Any]:
        return dict.fromkeys(keys, value)


class _GenerationBlocks(jinja2.ext.Extension):
    """Accept ``{% generation %}…{% endgeneration %}`` (assistant-mask markers) and render the body.

    Hugging Face uses these blocks to compute assistant token masks for training; serving only
    needs their content.
    """

    tags = {"generation"}  # noqa: RUF012 - the attribute Jinja reads

    def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.Scope(body).set_lineno(lineno)


#: What ``getattr`` finds on a plain dict (the sandbox checks these as before).
_DICT_ATTRIBUTES = frozenset(dir(dict))
#: Values a namespace attribute hands out as they are (the sandbox wraps ``str.format``
#: methods and checks nothing else about a namespace's values).
_PLAIN_VALUES = frozenset({str, int, float, bool, type(None), list, dict, tuple})


class _TemplateEnvironment(ImmutableSandboxedEnvironment):
    """The sandbox, with each template's globals copied into one plain dict when it is
    compiled: every render starts from its globals, and a dict is copied much faster than
    Jinja's default chain of the template's and the environment's globals (they are set once,
    before any template is compiled)."""

    def make_globals(self, d: MutableMapping[str, Any] | None) -> MutableMapping[str, Any]:
        return {**self.globals, **(d or {})}

    def getattr(self, obj: Any, attribute: str) -> Any:
        # ``message.role`` on a plain dict: the sandbox tries the attribute first, which fails
        # (raising AttributeError) for every name that is not one of dict's own, then reads the
        # key. Going straight to the key for those names gives the same value or undefined.
        if type(obj) is dict and attribute not in _DICT_ATTRIBUTES:
            try:
                return obj[attribute]
            except KeyError:
                return self.undefined(obj=obj, name=attribute)
        if type(obj) is _SafeNamespace and not attribute.startswith("_"):
            # ``ns.found``: a namespace holds only its attributes, none internal nor a mutable
            # container's method, so the sandbox's checks pass for each of them; what is not
            # there is undefined.
            try:
                value = getattr(obj, attribute)
            except AttributeError:
                return self.undefined(obj=obj, name=attribute)
            if type(value) in _PLAIN_VALUES:
                return value
        return super().getattr(obj, attribute)

    def call(__self, __context: Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        # ``namespace(...)``, called once or more per render: made directly (the sandbox's and
        # the context's checks pass for it, as for any plain class).
        if __obj is _SafeNamespace:
            kwargs.pop("_loop_vars", None)
            kwargs.pop("_block_vars", None)
            try:
                return _SafeNamespace(*args, **kwargs)
            except StopIteration:  # as the context's call answers it
                return __self.undefined(
                    "value was undefined because a callable raised a StopIteration exception"
                )
        return super().call(__context, __obj, *args, **kwargs)


@lru_cache(maxsize=1)
def template_environment() -> ImmutableSandboxedEnvironment:
    """The shared environment (``trim_blocks``, ``lstrip_blocks``, loop controls, HF globals)."""
    env = _TemplateEnvironment(
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=[jinja2.ext.loopcontrols, _GenerationBlocks],
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.globals["namespace"] = _SafeNamespace
    env.globals["dict"] = _DictBuilder()
    return env


@lru_cache(maxsize=64)
def compile_template(source: str) -> jinja2.Template:
    """Compile ``source`` once; raises ``jinja2.TemplateSyntaxError`` on bad syntax."""
    return template_environment().from_string(source)

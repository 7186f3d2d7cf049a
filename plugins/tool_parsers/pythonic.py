"""Pythonic tool calls (Llama 4, OLMo, ...): ``[f(a=1, b='x'), g()]``.

Optionally wrapped in ``<|python_start|>...<|python_end|>``. Choices (identical in streaming and
one-shot):

* A list is a candidate once ``[`` is followed by an identifier (dotted names allowed) and ``(``;
  any other ``[`` is released as text at once. The candidate is held until its closing bracket
  (brackets inside strings do not count) and then parsed with Python's ``ast``.
* Every element must be a call with keyword arguments whose values are Python literals; they are
  converted to JSON (``True``/``None`` -> ``true``/``null``; key order kept). Calls are emitted
  together when the list is complete (the arguments only exist once the whole list parses).
* If the list does not parse, an argument is not a literal or not JSON-representable (bytes,
  ``1e999``), or (with tools) any call names a function not offered, the whole list stays normal
  text verbatim. The wrapper tokens are dropped around calls; other text is kept exactly.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Generator
from typing import ClassVar

from turnout.tool_calls.base import GrammarToolParser

START = "<|python_start|>"
END = "<|python_end|>"
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*|")


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return None if base is None else f"{base}.{node.attr}"
    return None


def parse_call_list(source: str) -> list[tuple[str, str]] | None:
    """``[(name, arguments JSON)]`` for a Python list of keyword-argument calls, else ``None``."""
    try:
        tree = ast.parse(source.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    if not isinstance(tree.body, ast.List) or not tree.body.elts:
        return None
    calls: list[tuple[str, str]] = []
    for element in tree.body.elts:
        if not isinstance(element, ast.Call) or element.args:
            return None
        name = _dotted(element.func)
        if not name:
            return None
        arguments: dict[str, object] = {}
        for keyword in element.keywords:
            if keyword.arg is None:
                return None
            try:
                arguments[keyword.arg] = ast.literal_eval(keyword.value)
            except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
                return None
        try:
            calls.append((name, json.dumps(arguments, ensure_ascii=False, allow_nan=False)))
        except (TypeError, ValueError, RecursionError):
            return None
    return calls


class PythonicToolParser(GrammarToolParser):
    """Python-syntax call lists."""

    needs_special_tokens: ClassVar[bool] = False

    def grammar(self) -> Generator[None, None, None]:
        while True:
            marker = yield from self.text_until(("[", START), consume=False)
            if marker is None:
                return
            self.hold()
            wrapped = marker == START
            if wrapped:
                self._consume(self._pos + len(START))
                yield from self.skip_ws()
                if (yield from self.peek()) != "[":
                    self.release()
                    continue
            start = len(self._held)
            self._consume(self._pos + 1)  # "["
            yield from self.skip_ws()
            name = yield from self.word(_IDENT)
            if not name:
                self.release()
                continue
            yield from self.skip_ws()
            if not (yield from self.expect("(")) or not (yield from self._to_close(2)):
                self.release()
                continue
            calls = parse_call_list("".join(self._held[start:]))
            if calls is None or not all(self.allowed(n) for n, _ in calls):
                self.release()
                continue
            self.drop()
            for call_name, arguments in calls:
                self.emit_call(call_name, arguments)
            self.drop()
            if wrapped:
                self.hold()
                yield from self.skip_ws()
                if (yield from self.expect(END)):
                    self.drop()
                else:
                    self.release()

    def _to_close(self, depth: int) -> Generator[None, None, bool]:
        """Consume up to the bracket closing the list (strings skipped); ``False`` at the end."""
        quote = ""
        escaped = False
        while True:
            buf = self._buf
            for i in range(self._pos, len(buf)):
                c = buf[i]
                if quote:
                    if escaped:
                        escaped = False
                    elif c == "\\":
                        escaped = True
                    elif c == quote:
                        quote = ""
                elif c in "'\"":
                    quote = c
                elif c in "([{":
                    depth += 1
                elif c in ")]}":
                    depth -= 1
                    if depth == 0:
                        self._consume(i + 1)
                        return True
            self._consume(len(buf))
            if self._eof:
                return False
            yield

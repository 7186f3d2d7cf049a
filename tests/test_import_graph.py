"""The package's import graph: no runtime import cycle but the intended ones listed below, no
core module depending on ``turnout.plugins``, no module importing another's private names.

Read from the source (``ast``): function-level imports count as runtime imports, ``if
TYPE_CHECKING:`` ones do not (they never run). ``from pkg import mod`` is an import of the
submodule ``pkg.mod``, not of ``pkg``'s own names. Each allow-list below only shrinks: an entry
that no longer occurs fails the test, so that whoever removes the import also removes the entry.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Where each top-level package's source lives (the wheel maps ``plugins/`` into ``turnout``).
SOURCES = {"turnout": ROOT / "core", "turnout.plugins": ROOT / "plugins"}

#: Runtime cycles that are meant to be there, each with why.
INTENDED_CYCLES: dict[frozenset[str], str] = {
    frozenset({"turnout.observability.tracing", "turnout.observability.otel"}): (
        "tracing.py imports otel.py inside a function, only when tracing is configured, so that "
        "the optional OpenTelemetry SDK is never imported otherwise; otel.py takes its settings "
        "type from tracing.py"
    ),
}

#: Core modules (``turnout.*`` outside ``turnout.plugins``) that still import a plugin.
CORE_IMPORTS_OF_PLUGINS: dict[tuple[str, str], str] = {}

#: Modules that still import private names of another module.
PRIVATE_IMPORTS: dict[tuple[str, str], str] = {}


@dataclass
class Module:
    """One module's imports: all of them, the runtime ones, and the private names it takes."""

    name: str
    path: Path
    imports: set[str] = field(default_factory=set)
    runtime: set[str] = field(default_factory=set)
    private: set[str] = field(default_factory=set)  # modules it takes ``_names`` from


def _module_names() -> dict[str, Path]:
    names = {}
    for package, source in SOURCES.items():
        for path in source.rglob("*.py"):
            parts = [*package.split("."), *path.relative_to(source).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            names[".".join(parts)] = path
    return names


def _imported(node: ast.Import | ast.ImportFrom, module: str, path: Path) -> Iterator[str]:
    """The module names one import statement loads."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
        return
    base = node.module or ""
    if node.level:  # relative: from this module's package upwards
        package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        anchor = package[: len(package) - node.level + 1]
        base = ".".join([*anchor, base] if base else anchor)
    yield base
    yield from (f"{base}.{alias.name}" for alias in node.names)


def _read(name: str, path: Path, known: set[str]) -> Module:
    tree = ast.parse(path.read_text())
    typing_only = {
        id(sub)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for sub in ast.walk(node)
    }
    module = Module(name, path)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Import | ast.ImportFrom):
            continue
        loaded = set(_imported(node, name, path)) & known
        if isinstance(node, ast.ImportFrom):
            submodules = {m for m in loaded if m.rpartition(".")[0] in loaded}
            if submodules and len(submodules) == len(node.names):
                loaded = submodules  # `from pkg import mod`: pkg's own names are not used
            source = next((m for m in loaded if m not in submodules), None)
            if source and any(_private(a.name) for a in node.names):
                module.private.add(source)
        loaded.discard(name)
        module.imports |= loaded
        if id(node) not in typing_only:
            module.runtime |= loaded
    return module


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


@functools.cache
def _graph() -> dict[str, Module]:
    names = _module_names()
    return {name: _read(name, path, set(names)) for name, path in names.items()}


def _cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[frozenset[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in graph[module]:
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            component = set()
            while True:
                top = stack.pop()
                component.add(top)
                if top == module:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for module in graph:
        if module not in index:
            visit(module)
    return found


def _core(name: str) -> bool:
    return not (name == "turnout.plugins" or name.startswith("turnout.plugins."))


def test_no_runtime_import_cycle_but_the_intended_ones() -> None:
    graph = _graph()
    cycles = set(_cycles({name: m.runtime for name, m in graph.items()}))
    unexpected = sorted(sorted(c) for c in cycles - INTENDED_CYCLES.keys())
    assert unexpected == [], "import cycles: break them (move the shared names to a leaf)"
    gone = sorted(sorted(c) for c in INTENDED_CYCLES.keys() - cycles)
    assert gone == [], "these cycles are gone: delete their INTENDED_CYCLES entries"


def test_the_http_layer_builds_on_reload_never_the_other_way_round() -> None:
    assert "turnout.server.app" not in _graph()["turnout.server.reload"].imports


def test_no_core_module_imports_a_plugin() -> None:
    found = {
        (name, imported)
        for name, module in _graph().items()
        if _core(name)
        for imported in module.imports
        if not _core(imported)
    }
    unexpected = sorted(found - CORE_IMPORTS_OF_PLUGINS.keys())
    assert unexpected == [], "core must not depend on turnout.plugins (take it as an argument)"
    gone = sorted(CORE_IMPORTS_OF_PLUGINS.keys() - found)
    assert gone == [], "these imports are gone: delete their CORE_IMPORTS_OF_PLUGINS entries"


def test_no_module_imports_a_private_name_of_another() -> None:
    found = {(name, source) for name, module in _graph().items() for source in module.private}
    unexpected = sorted(found - PRIVATE_IMPORTS.keys())
    assert unexpected == [], "private names are private: make them public or move them"
    gone = sorted(PRIVATE_IMPORTS.keys() - found)
    assert gone == [], "these imports are gone: delete their PRIVATE_IMPORTS entries"


def test_the_graph_sees_function_level_imports_and_skips_typing_ones() -> None:
    graph = _graph()
    tracing = graph["turnout.observability.tracing"]
    assert "turnout.observability.otel" in tracing.runtime  # imported inside a function
    loader = graph["turnout.plugin_loader"]
    assert "turnout.routing.types" in loader.imports - loader.runtime  # if TYPE_CHECKING
    assert "turnout" not in loader.imports  # `from turnout import hookspecs` loads hookspecs

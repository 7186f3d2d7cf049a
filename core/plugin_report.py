"""What ``turnout plugins`` shows: installed plugin distributions and what each registers."""

from __future__ import annotations

from typing import Any

from turnout.plugin_kinds import PLUGIN_KINDS
from turnout.plugin_loader import Plugins, load_plugins


def plugins_report(plugins: Plugins | None = None) -> dict[str, Any]:
    """Plugins grouped by distribution, as plain data (the ``--json`` output)."""
    plugins = plugins or load_plugins()
    distributions: dict[str, dict[str, Any]] = {}
    for loaded in plugins.loaded:
        entry = distributions.setdefault(
            loaded.distribution,
            {"distribution": loaded.distribution, "version": loaded.version}
            | {kind.key: [] for kind in PLUGIN_KINDS},
        )
        entry["version"] = loaded.version
    for kind in PLUGIN_KINDS:
        for registration in plugins[kind].registrations():
            entry = distributions.setdefault(
                registration.distribution,
                {"distribution": registration.distribution, "version": registration.version}
                | {other.key: [] for other in PLUGIN_KINDS},
            )
            entry[kind.key].append(
                {
                    "name": registration.name,
                    "aliases": list(registration.aliases),
                    "models": list(registration.models),
                    "description": registration.description,
                }
            )
    return {
        "plugins": sorted(distributions.values(), key=lambda d: d["distribution"]),
        "failures": [
            {"distribution": f.distribution, "entry_point": f.entry_point, "error": f.error}
            for f in plugins.failures
        ],
    }


def render_plugins_report(report: dict[str, Any]) -> str:
    """Human-readable form of :func:`plugins_report`."""
    lines: list[str] = []
    for dist in report["plugins"]:
        lines.append(f"{dist['distribution']} {dist['version']}")
        for kind in PLUGIN_KINDS:
            for item in dist[kind.key]:
                extra = []
                if item["aliases"]:
                    extra.append("aliases: " + ", ".join(item["aliases"]))
                if item["models"]:
                    extra.append("models: " + ", ".join(item["models"]))
                suffix = f"  ({'; '.join(extra)})" if extra else ""
                lines.append(f"  {kind.listing_label:<16} {item['name']}{suffix}")
    for failure in report["failures"]:
        lines.append(
            f"FAILED {failure['distribution']} ({failure['entry_point']}): {failure['error']}"
        )
    return "\n".join(lines)

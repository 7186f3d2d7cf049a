"""The ready line names the workers and where the others come from (issue 32)."""

from __future__ import annotations

from turnout.config import build_config
from turnout.server.runner import workers_line


def test_the_ready_line_names_static_and_discovered_workers() -> None:
    nothing = build_config({})
    assert workers_line(nothing) == "none yet (add with POST /workers)"
    discovered = build_config({"discovery": [{"provider": "file", "options": {"path": "w.yaml"}}]})
    assert workers_line(discovered) == "discovered by file"
    both = build_config(
        {
            "workers": [{"url": "grpc://127.0.0.1:30000", "model": "m"}],
            "discovery": [{"provider": "file", "options": {"path": "w.yaml"}}],
        }
    )
    assert workers_line(both) == "grpc://127.0.0.1:30000, discovered by file"

"""Build real (if tiny) installed distributions on sys.path for plugin-loading tests."""

from __future__ import annotations

import textwrap
from pathlib import Path


def make_distribution(
    site: Path, name: str, module: str, source: str, *, version: str = "1.0", ep_name: str = "main"
) -> None:
    """Write ``module.py`` and a ``.dist-info`` whose entry point registers it with turnout."""
    (site / f"{module}.py").write_text(textwrap.dedent(source), encoding="utf-8")
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n", encoding="utf-8"
    )
    (info / "entry_points.txt").write_text(
        f"[turnout.plugins]\n{ep_name} = {module}\n", encoding="utf-8"
    )

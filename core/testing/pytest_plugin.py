"""pytest fixtures for plugin authors: a real router beside a simulated worker.

Enable it in a ``conftest.py``, then override the configuration fixtures a test needs::

    pytest_plugins = ["turnout.testing.pytest_plugin"]

    @pytest.fixture
    def turnout_model():
        return {"tool_parser": "arrow_calls"}

    def test_chat(turnout_router):
        status, body = turnout_router.request_json("POST", "/v1/chat/completions", {...})

Fixtures (each may be overridden, in a module or a conftest):

* ``turnout_config`` - the router's configuration (default ``{}``: turnout's defaults);
* ``turnout_model`` - the options of the served model :data:`~turnout.testing.router.MODEL`
  (``tool_parser``, ``reasoning_parser``, ``policy``...; default ``{}``);
* ``turnout_sim_script`` - what the simulated workers answer (default ``None``: they echo);
* ``turnout_sims`` - how many simulated workers (default 1);
* ``turnout_plugins`` - the plugins the router loads (default ``None``: the installed ones;
  ``load_plugins(allow=["turnout"], extra=[(my_module, "my-plugin", "0")])`` tests a plugin
  module that is not installed);
* ``turnout_router`` - the running router (:class:`~turnout.testing.router.RunningRouter`),
  started per test from the fixtures above and stopped after it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from turnout.plugin_loader import Plugins
from turnout.testing.router import RunningRouter, run_router

__all__ = [
    "turnout_config",
    "turnout_model",
    "turnout_plugins",
    "turnout_router",
    "turnout_sim_script",
    "turnout_sims",
]


@pytest.fixture
def turnout_config() -> dict[str, Any]:
    """The router's configuration, as in a config file (the sims are added to ``workers``)."""
    return {}


@pytest.fixture
def turnout_model() -> dict[str, Any]:
    """Options of the served model in the configuration (``models.turnout-demo``)."""
    return {}


@pytest.fixture
def turnout_sim_script() -> Any:
    """The simulated workers' script (``{"rules": [{"match": ..., "reply": ...}]}``), or None."""
    return None


@pytest.fixture
def turnout_sims() -> int:
    """How many simulated workers run behind the router."""
    return 1


@pytest.fixture
def turnout_plugins() -> Plugins | None:
    """The plugins the router loads (``None``: every installed plugin)."""
    return None


@pytest.fixture
def turnout_router(
    turnout_config: dict[str, Any],
    turnout_model: dict[str, Any],
    turnout_sim_script: Any,
    turnout_sims: int,
    turnout_plugins: Plugins | None,
) -> Iterator[RunningRouter]:
    """A router with ``turnout_plugins``, in front of ``turnout_sims`` simulated workers."""
    with run_router(
        turnout_config,
        sims=turnout_sims,
        model=turnout_model,
        script=turnout_sim_script,
        plugins=turnout_plugins,
    ) as router:
        yield router

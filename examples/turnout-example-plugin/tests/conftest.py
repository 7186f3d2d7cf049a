"""turnout's pytest fixtures (turnout_router and the fixtures that configure it)."""

pytest_plugins = ["turnout.testing.pytest_plugin"]

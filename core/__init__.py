"""turnout: a pluggable router for LLM inference clusters speaking SGLang's gRPC protocol."""

from turnout.hookspecs import hookimpl
from turnout.plugin_loader import Plugins, load_plugins

__version__ = "0.1.0"

__all__ = ["Plugins", "__version__", "hookimpl", "load_plugins"]

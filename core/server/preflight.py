"""Start-up checks: what ``turnout serve`` builds before it listens, which ``turnout check``
builds too, so that a config ``check`` passes does not fail ``serve``.

Plugins by name, discovery providers, every configured policy with its parameters, the runtime
(tokenizer, parsers, chat format) of each model whose files the config names, and the metrics
port. Each failure is a :class:`~turnout.errors.StartupError` of one line naming the config key.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

from turnout.config import Config, PolicyConfig, ServerConfig, policy_config
from turnout.discovery import describe_discovery
from turnout.errors import ApiError, ConfigError, PluginError, StartupError
from turnout.generation.models import ModelTable
from turnout.plugin_choice import validate_plugin_names
from turnout.plugin_loader import Plugins, load_plugins
from turnout.server.listener import bind_listener

__all__ = ["Preflight", "check_policies", "preflight", "preloaded_models"]


@dataclass(frozen=True, slots=True)
class Preflight:
    """What the checks loaded, for the caller to reuse."""

    plugins: Plugins
    #: One line per discovery entry (``turnout check`` prints them).
    discovery: list[str]


def preflight(config: Config, plugins: Plugins | None = None) -> Preflight:
    """Build what serving ``config`` needs before it listens; StartupError on the first failure."""
    plugins = plugins or load_plugins()
    validate_plugin_names(config, plugins)
    discovery = describe_discovery(config.discovery, plugins.discovery)
    check_policies(config, plugins)
    table = ModelTable(config, plugins, list)
    for model_id in preloaded_models(config):
        try:
            table.build(model_id)
        except ApiError as exc:
            raise StartupError(f"model {model_id!r}: {exc.message}") from None
    _check_metrics_port(config.server)
    return Preflight(plugins, discovery)


def preloaded_models(config: Config) -> list[str]:
    """Models whose tokenizer is known from the config alone (loaded at start-up)."""
    with_workers = {w.model for w in config.workers if w.model}
    return sorted(
        m
        for m in with_workers | set(config.models)
        if (config.models[m].tokenizer_path if m in config.models else None)
        or config.defaults.tokenizer_path
    )


def check_policies(config: Config, plugins: Plugins) -> None:
    """Create every policy the config names, as serving does; a parameter a policy does not
    take, or a value it refuses, is a ConfigError naming the key."""
    for key, policy in _policy_sections(config):
        _check_policy(key, policy, plugins)


def _policy_sections(config: Config) -> list[tuple[str, PolicyConfig]]:
    """Every policy the config names, with its key: the defaults', each model's, and the
    prefill and decode ones inside them."""
    found = []
    named = [("defaults.policy", config.defaults.policy)]
    named += [(f"models.{m}.policy", c.policy) for m, c in config.models.items() if c.policy]
    for key, value in named:
        policy = policy_config(value)
        found.append((key, policy))
        for role in ("prefill", "decode"):
            section = getattr(policy, role)
            if section is not None:
                found.append((f"{key}.{role}", policy_config(section)))
    return found


def _check_policy(key: str, policy: PolicyConfig, plugins: Plugins) -> None:
    """Create the policy as serving will: parameters it does not take name the key."""
    if policy.name is None:
        return
    factory = plugins.policies.factory(policy.name)
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # no signature to read: creating it tells
        signature = None
    if signature is not None:
        try:
            signature.bind(**policy.params)
        except TypeError:
            takes = [
                p.name
                for p in signature.parameters.values()
                if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
            ]
            raise ConfigError(
                f"{key}.params: policy {policy.name!r} takes "
                f"{', '.join(takes) if takes else 'no parameters'}, got "
                f"{', '.join(sorted(policy.params)) or 'none'}"
            ) from None
    try:
        plugins.policies.create(policy.name, **policy.params)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{key}.params: policy {policy.name!r}: {exc}") from None
    except StartupError as exc:
        raise type(exc)(f"{key}: {exc}") from None
    except Exception as exc:
        raise PluginError(
            f"{key}: policy {policy.name!r} failed to start: {type(exc).__name__}: {exc}"
        ) from None


def _check_metrics_port(server: ServerConfig) -> None:
    """The metrics port can be listened on now (serving listens there once it has started)."""
    if server.metrics_port is None:
        return
    try:
        bind_listener(
            server.host, server.metrics_port, setting="--metrics-port / server.metrics_port"
        ).close()
    except StartupError as exc:
        raise StartupError(f"server.metrics_port: {exc}") from None

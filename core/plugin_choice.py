"""Decide which tool parser, reasoning parser and policy serve a model."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from turnout.config import DISABLED, Config, ModelConfig, PolicyConfig, policy_config
from turnout.errors import PluginError
from turnout.plugin_loader import Plugins
from turnout.plugin_registry import Registry

if TYPE_CHECKING:
    from turnout.routing.types import Policy


@dataclass(frozen=True, slots=True)
class ModelChoices:
    """Canonical plugin names chosen for one model (None: no parsing, text passes through)."""

    tool_parser: str | None
    reasoning_parser: str | None
    policy: PolicyConfig
    #: The chat format replacing the template and both parsers (None: the template).
    chat_format: str | None = None


def _choose(
    registry: Registry[Any], explicit: str | None, default: str | None, model_id: str
) -> str | None:
    # Explicit config wins; then the plugin whose model pattern matches; then the default.
    for candidate in (explicit, registry.for_model(model_id), default):
        if candidate is None:
            continue
        if candidate.lower() == DISABLED:
            return None
        return registry.canonical(candidate)
    return None


def choose_plugins(model_id: str, config: Config, plugins: Plugins) -> ModelChoices:
    """Choices for ``model_id``; unknown names raise :class:`PluginError` listing valid ones."""
    model = config.models.get(model_id, ModelConfig())
    defaults = config.defaults
    policy = policy_config(model.policy if model.policy is not None else defaults.policy)
    return ModelChoices(
        tool_parser=_choose(
            plugins.tool_parsers, model.tool_parser, defaults.tool_parser, model_id
        ),
        reasoning_parser=_choose(
            plugins.reasoning_parsers, model.reasoning_parser, defaults.reasoning_parser, model_id
        ),
        policy=PolicyConfig(name=plugins.policies.canonical(policy.name), params=policy.params),
        chat_format=_choose(plugins.chat_formats, model.chat_format, None, model_id),
    )


def validate_plugin_names(config: Config, plugins: Plugins) -> None:
    """Fail start-up on any unknown parser or policy name in the config, and import each chosen
    plugin once so a broken plugin shows its import error now rather than on the first request."""
    named: list[tuple[str, Registry[Any], str | None]] = [
        ("defaults.tool_parser", plugins.tool_parsers, config.defaults.tool_parser),
        ("defaults.reasoning_parser", plugins.reasoning_parsers, config.defaults.reasoning_parser),
        ("defaults.policy", plugins.policies, policy_config(config.defaults.policy).name),
    ]
    for model_id, model in config.models.items():
        named.append((f"models.{model_id}.tool_parser", plugins.tool_parsers, model.tool_parser))
        named.append(
            (
                f"models.{model_id}.reasoning_parser",
                plugins.reasoning_parsers,
                model.reasoning_parser,
            )
        )
        named.append((f"models.{model_id}.chat_format", plugins.chat_formats, model.chat_format))
        if model.policy is not None:
            named.append(
                (f"models.{model_id}.policy", plugins.policies, policy_config(model.policy).name)
            )
    for key, registry, name in named:
        if name is None or name.lower() == DISABLED:
            continue
        try:
            registry.factory(name)
        except PluginError as exc:
            raise PluginError(f"{key}: {exc}") from None


def policies_for(
    config: Config, plugins: Plugins
) -> tuple[dict[str, Policy], Callable[[], Policy]]:
    """Per-model policy instances and a factory for models the config does not list."""
    policies = {
        model_id: _make_policy(plugins, choose_plugins(model_id, config, plugins).policy)
        for model_id in config.models
    }
    default = policy_config(config.defaults.policy)

    def default_policy() -> Policy:
        return _make_policy(plugins, default)

    return policies, default_policy


def _make_policy(plugins: Plugins, choice: PolicyConfig) -> Policy:
    return plugins.policies.create(choice.name, **choice.params)

"""Decide which tool parser, reasoning parser and policy serve a model."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from turnout.config import DISABLED, Config, ModelConfig, PolicyConfig, policy_config
from turnout.errors import PluginError
from turnout.plugin_loader import Plugins
from turnout.plugin_registry import Registry
from turnout.workers.roles import Role

if TYPE_CHECKING:
    from turnout.routing.types import Policy


#: The policy that picks prefill workers unless the config names one: a prefill worker's cost
#: is the prompt, and a cached prefix is what it saves.
DEFAULT_PREFILL_POLICY = "cache_aware"


@dataclass(frozen=True, slots=True)
class ModelChoices:
    """Canonical plugin names chosen for one model (None: no parsing, text passes through)."""

    tool_parser: str | None
    reasoning_parser: str | None
    #: Picks regular workers.
    policy: PolicyConfig
    #: The chat format replacing the template and both parsers (None: the template).
    chat_format: str | None = None
    #: Picks prefill workers, then decode workers, of a prefill-decode model.
    prefill_policy: PolicyConfig = field(
        default_factory=lambda: PolicyConfig(name=DEFAULT_PREFILL_POLICY)
    )
    decode_policy: PolicyConfig | None = None


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
    default_policy = policy_config(defaults.policy)
    own = policy_config(model.policy) if model.policy is not None else PolicyConfig()
    policy = own if own.name is not None else default_policy
    regular = _canonical(plugins, policy)
    prefill = own.prefill or default_policy.prefill or DEFAULT_PREFILL_POLICY
    decode = own.decode or default_policy.decode
    return ModelChoices(
        tool_parser=_choose(
            plugins.tool_parsers, model.tool_parser, defaults.tool_parser, model_id
        ),
        reasoning_parser=_choose(
            plugins.reasoning_parsers, model.reasoning_parser, defaults.reasoning_parser, model_id
        ),
        policy=regular,
        prefill_policy=_canonical(plugins, prefill),
        decode_policy=regular if decode is None else _canonical(plugins, decode),
        chat_format=_choose(plugins.chat_formats, model.chat_format, None, model_id),
    )


def _canonical(plugins: Plugins, value: str | PolicyConfig) -> PolicyConfig:
    """A policy by its canonical name, with its parameters only."""
    policy = policy_config(value)
    assert policy.name is not None  # the config check requires one
    return PolicyConfig(name=plugins.policies.canonical(policy.name), params=policy.params)


def validate_plugin_names(config: Config, plugins: Plugins) -> None:
    """Fail start-up on any unknown parser or policy name in the config, and import each chosen
    plugin once so a broken plugin shows its import error now rather than on the first request."""
    named: list[tuple[str, Registry[Any], str | None]] = [
        ("defaults.tool_parser", plugins.tool_parsers, config.defaults.tool_parser),
        ("defaults.reasoning_parser", plugins.reasoning_parsers, config.defaults.reasoning_parser),
    ]
    named.extend(_policy_names("defaults.policy", config.defaults.policy, plugins))
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
            named.extend(_policy_names(f"models.{model_id}.policy", model.policy, plugins))
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


def role_policies_for(config: Config, plugins: Plugins) -> Callable[[str, Role], Policy]:
    """A factory of the policies that pick a prefill-decode model's prefill or decode workers
    (``policy: {prefill: ..., decode: ...}``; one instance per model and role)."""

    def role_policy(model_id: str, role: Role) -> Policy:
        choice = choose_plugins(model_id, config, plugins)
        if role is Role.PREFILL:
            return _make_policy(plugins, choice.prefill_policy)
        return _make_policy(plugins, choice.decode_policy or choice.policy)

    return role_policy


def _make_policy(plugins: Plugins, choice: PolicyConfig) -> Policy:
    assert choice.name is not None  # the config check requires one
    return plugins.policies.create(choice.name, **choice.params)


def _policy_names(
    key: str, value: str | PolicyConfig, plugins: Plugins
) -> list[tuple[str, Registry[Any], str | None]]:
    policy = policy_config(value)
    named: list[tuple[str, Registry[Any], str | None]] = [(key, plugins.policies, policy.name)]
    for role in ("prefill", "decode"):
        section = getattr(policy, role)
        if section is not None:
            named.append((f"{key}.{role}", plugins.policies, policy_config(section).name))
    return named

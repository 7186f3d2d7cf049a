"""The typed configuration: loaded from YAML or TOML, ``${ENV}`` substituted, then validated.

:mod:`~turnout.config.schema` holds the sections, :mod:`~turnout.config.loading` reads and
validates a file, :mod:`~turnout.config.checks` applies the rules the schema cannot express.
"""

from turnout.config.checks import check_config, config_warnings, tokenizer_dir_problem
from turnout.config.loading import build_config, load_config, read_config_file, substitute_env
from turnout.config.schema import (
    DISABLED,
    IMAGE_FORMATS,
    AdapterConfig,
    BackgroundConfig,
    Config,
    DefaultsConfig,
    DiscoveryConfig,
    ImagesConfig,
    LimitsConfig,
    McpConfig,
    McpServerConfig,
    MigrationConfig,
    ModelConfig,
    PolicyConfig,
    ResponsesConfig,
    ServerConfig,
    TenantConfig,
    key_digest,
    policy_config,
)

__all__ = [
    "DISABLED",
    "IMAGE_FORMATS",
    "AdapterConfig",
    "BackgroundConfig",
    "Config",
    "DefaultsConfig",
    "DiscoveryConfig",
    "ImagesConfig",
    "LimitsConfig",
    "McpConfig",
    "McpServerConfig",
    "MigrationConfig",
    "ModelConfig",
    "PolicyConfig",
    "ResponsesConfig",
    "ServerConfig",
    "TenantConfig",
    "build_config",
    "check_config",
    "config_warnings",
    "key_digest",
    "load_config",
    "policy_config",
    "read_config_file",
    "substitute_env",
    "tokenizer_dir_problem",
]

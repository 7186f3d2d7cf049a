"""The typed configuration: loaded from YAML or TOML, ``${ENV}`` substituted, then validated."""

from __future__ import annotations

import hashlib
import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import msgspec
import yaml

from turnout.errors import ConfigError
from turnout.observability.tracing import TracingConfig
from turnout.workers.roles import bootstrap_port_problem
from turnout.workers.settings import (
    BreakerSettings,
    HealthSettings,
    LoadMonitorSettings,
    RetrySettings,
    WireSettings,
    WorkerSpec,
    WorkersSettings,
)
from turnout.workers.worker import default_worker_id, worker_id_problem

#: A parser name in the config that turns parsing off for a model.
DISABLED = "none"


class _Section(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Base of every config section: unknown keys are errors (typos must not pass silently)."""


#: An API key: not empty, not only spaces (an unset ``${VAR:-}`` must not turn auth off).
_Key = Annotated[str, msgspec.Meta(pattern=r"\S")]
_Count = Annotated[int, msgspec.Meta(ge=0)]
_Seconds = Annotated[float, msgspec.Meta(ge=0)]


class ServerConfig(_Section):
    """HTTP server settings."""

    host: str = "127.0.0.1"
    port: int = 8000
    log_level: str = "info"
    log_json: bool = False
    #: Keys accepted as ``Authorization: Bearer`` on serving routes; empty means no auth.
    api_keys: list[_Key] = msgspec.field(default_factory=list)
    #: Key for admin routes (``/workers`` …); None leaves them open unless ``api_keys`` are set.
    admin_api_key: _Key | None = None
    #: Header names searched (in order) for a client-given request id.
    request_id_headers: list[str] = msgspec.field(
        default_factory=lambda: ["x-request-id", "x-correlation-id"]
    )
    #: Header carrying the routing key for ``consistent_hashing`` / ``manual`` policies.
    routing_key_header: str = "x-routing-key"
    max_body_bytes: _Count = 32 * 1024 * 1024
    #: 0 disables the limit.
    max_concurrent_requests: _Count = 0
    queue_size: _Count = 100
    queue_timeout_s: _Seconds = 60.0
    #: End-to-end deadline of one request; 0 disables it.
    request_timeout_s: _Seconds = 600.0
    keepalive_interval_s: float = 15.0
    #: Origins allowed to call from browsers (``["*"]`` for any); empty disables CORS.
    cors_allow_origins: list[str] = msgspec.field(default_factory=list)
    #: ``/metrics`` without a key; False makes it an admin route.
    metrics_public: bool = True
    #: Show callers without the admin key what only operators should see: tenant names and the
    #: models some tenant may not use on ``/metrics`` (and ``metrics_port``), and the workers'
    #: file paths in ``/get_model_info`` and ``/get_server_info``. False leaves them out.
    expose_internals: bool = False
    #: Also serve ``/metrics`` on this port (same host); None serves it on the main port only.
    metrics_port: Annotated[int, msgspec.Meta(ge=1, le=65535)] | None = None
    #: On SIGTERM: how long in-flight requests may take to finish before they are aborted.
    shutdown_grace_s: _Seconds = 30.0
    #: Client connections open at once; 0: the file-descriptor limit less a reserve. At the cap
    #: a new connection closes the longest-idle one, or gets 503 when every connection is busy.
    max_connections: _Count = 0
    #: Close a connection that carries no request for this long (keep-alive included).
    idle_timeout_s: _Seconds = 75.0
    #: Answer 408 and close when a request's headers take longer than this to arrive.
    header_timeout_s: _Seconds = 15.0
    #: Answer 408 and close when a request's body takes longer than this to arrive.
    body_timeout_s: _Seconds = 60.0
    #: Close a connection whose client has read nothing of a pending response for this long.
    send_timeout_s: _Seconds = 60.0
    #: Longest request line or header field line (bytes); a longer one is answered 414 (the
    #: request target) or 431. 0 disables each of these three head limits.
    max_header_line_bytes: _Count = 16 * 1024
    #: Largest request head (request line and header fields, bytes); larger is answered 431.
    max_header_bytes: _Count = 64 * 1024
    #: Most header fields in a request; more are answered 431.
    max_headers: _Count = 100
    #: Serving processes on the one port (each has its own worker registry, health checks,
    #: policy state and limits; metrics are summed across them). 1 serves in this process.
    processes: Annotated[int, msgspec.Meta(ge=1, le=256)] = 1


class PolicyConfig(_Section):
    """A selection policy by name, with its parameters; for a prefill-decode model also the
    policies that pick its ``prefill`` and its ``decode`` workers (a name or ``{name,
    params}`` each)."""

    #: The policy of regular workers; unset: the ``defaults`` one.
    name: str | None = None
    params: dict[str, Any] = msgspec.field(default_factory=dict)
    #: Picks prefill workers; unset: the ``defaults`` one, else ``cache_aware``.
    prefill: str | PolicyConfig | None = None
    #: Picks decode workers; unset: the ``defaults`` one, else the regular workers' policy.
    decode: str | PolicyConfig | None = None


class DiscoveryConfig(_Section):
    """One discovery provider (a plugin) by name, with its options."""

    provider: str
    options: dict[str, Any] = msgspec.field(default_factory=dict)


class ImagesConfig(_Section):
    """How image inputs are taken: from ``data:`` URIs always, from ``https`` URLs only on the
    hosts listed (never from private, loopback, link-local or reserved addresses), within these
    bounds (see :mod:`turnout.multimodal`)."""

    #: Hosts whose ``https`` URLs may be fetched: ``images.example.com``, or ``*.example.com``
    #: for its subdomains. Empty: URLs are refused, only ``data:`` URIs are taken.
    allowed_domains: list[Annotated[str, msgspec.Meta(pattern=r"^(\*\.)?[^*\s/:]+$")]] = (
        msgspec.field(default_factory=list)
    )
    #: Encoded bytes of one image (the data URI's payload, or the download).
    max_bytes: Annotated[int, msgspec.Meta(ge=1)] = 20 * 1024 * 1024
    #: Width x height of one image, checked before it is decoded (decompression bombs); at
    #: most Pillow's own bomb threshold.
    max_pixels: Annotated[int, msgspec.Meta(ge=1, le=89_478_485)] = 16_777_216
    #: Images in one request.
    max_images: _Count = 8
    #: Deadline of one URL's download, redirects included.
    fetch_timeout_s: Annotated[float, msgspec.Meta(gt=0)] = 10.0
    #: Redirects followed (each one checked like the first URL); 0 refuses them.
    max_redirects: Annotated[int, msgspec.Meta(ge=0, le=10)] = 3
    #: Image formats taken (Pillow's names, lower case).
    formats: list[str] = msgspec.field(default_factory=lambda: ["png", "jpeg", "webp", "gif"])


class AdapterConfig(_Section):
    """A LoRA adapter of a model: requested as ``<model>:<name>``."""

    name: Annotated[str, msgspec.Meta(pattern=r"^\S+$")]
    #: What ``GenerateRequest.lora_id`` names it by on workers that do not list their adapters
    #: (default: the name); a worker that lists it gets its own id for it.
    lora_id: str | None = None

    @property
    def worker_id(self) -> str:
        """The ``lora_id`` sent to workers that did not report one."""
        return self.lora_id or self.name


class ModelConfig(_Section):
    """Per-model settings; every field is optional."""

    #: Local model directory holding tokenizer.json, tokenizer_config.json …
    tokenizer_path: str | None = None
    #: A chat template file (or template text) that overrides the model directory's.
    chat_template: str | None = None
    tool_parser: str | None = None
    reasoning_parser: str | None = None
    #: A chat format plugin (``harmony`` for gpt-oss) rendering prompts and reading outputs
    #: in place of the chat template and the parsers above.
    chat_format: str | None = None
    policy: str | PolicyConfig | None = None
    aliases: list[str] = msgspec.field(default_factory=list)
    #: This model's image settings, replacing the top-level ``images`` section as a whole.
    images: ImagesConfig | None = None
    #: LoRA adapters its workers serve (a name, or ``{name, lora_id}``), besides those the
    #: workers report themselves.
    adapters: list[Annotated[str, msgspec.Meta(pattern=r"^\S+$")] | AdapterConfig] = msgspec.field(
        default_factory=list
    )

    def adapter_configs(self) -> dict[str, AdapterConfig]:
        """The configured adapters by name."""
        return {
            a.name: a
            for a in (
                a if isinstance(a, AdapterConfig) else AdapterConfig(name=a) for a in self.adapters
            )
        }


#: A tenant's name: it labels metrics and log lines and names its counters in the storage.
_TenantName = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")]
_Positive = Annotated[int, msgspec.Meta(ge=1)]


class TenantConfig(_Section):
    """One tenant: its API keys, the models it may use and its limits (see docs/tenants.md).
    Every limit is optional; a tenant without any is only identified."""

    #: Plain API keys (usually ``${VAR}`` references).
    keys: list[_Key] = msgspec.field(default_factory=list)
    #: API keys given as SHA-256 hex digests, so that the config file holds no secret
    #: (``printf %s "$KEY" | sha256sum``).
    key_sha256: list[Annotated[str, msgspec.Meta(pattern=r"^[0-9a-fA-F]{64}$")]] = msgspec.field(
        default_factory=list
    )
    #: Model ids or aliases the tenant may use, as names or globs (``Qwen/*``); other models
    #: are answered 404 as if they were not served. None: every model.
    models: list[Annotated[str, msgspec.Meta(min_length=1)]] | None = None
    requests_per_minute: _Positive | None = None
    #: Prompt plus completion tokens; a request reserves ``prompt + max_tokens`` when it is
    #: admitted and is charged its real usage when it ends.
    tokens_per_minute: _Positive | None = None
    #: Requests of this tenant running (or queued for admission) at once.
    concurrent_requests: _Positive | None = None
    #: Place in the admission queue: waiting requests of a higher priority go first.
    priority: int = 0

    @property
    def limited(self) -> bool:
        """True when any limit is set."""
        return bool(self.requests_per_minute or self.tokens_per_minute or self.concurrent_requests)


class LimitsConfig(_Section):
    """Where tenant budgets are counted (restart to change)."""

    #: ``memory://`` (each serving process counts its own budgets) or ``redis://host:port/db``
    #: / ``rediss://…`` (every process and replica shares them; ``pip install 'turnout[redis]'``).
    storage: Annotated[str, msgspec.Meta(pattern=r"^(memory|redis|rediss)://")] = "memory://"
    #: Prefix of the storage keys, so that several routers can share one Redis.
    key_prefix: Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9._:-]{1,64}$")] = "turnout"
    #: The window the per-minute limits are counted in; a shorter one scales them down
    #: (``requests_per_minute * window_s / 60`` per window).
    window_s: Annotated[int, msgspec.Meta(ge=1, le=3600)] = 60
    #: Deadline of one storage call: a storage slower than this counts as unreachable.
    timeout_s: Annotated[float, msgspec.Meta(gt=0, le=10)] = 0.25
    #: While the shared storage is unreachable: ``open`` keeps serving with per-process limits
    #: (logged), ``closed`` answers limited tenants 503.
    on_storage_error: Literal["open", "closed"] = "open"
    #: How often an unreachable storage is tried again.
    retry_interval_s: Annotated[float, msgspec.Meta(gt=0)] = 5.0
    #: Completion tokens reserved for a request that sets no ``max_tokens`` when its model's
    #: context length is unknown.
    default_max_tokens: _Positive = 4096


class ResponsesConfig(_Section):
    """The Responses API's store of responses (``store: true``, ``previous_response_id``,
    ``GET /v1/responses/{id}``); restart to change."""

    #: ``memory://``: each serving process keeps its own responses (a follow-up request must
    #: reach the same process and replica). ``redis://host:port/db`` / ``rediss://…``: every
    #: process and replica shares them (``pip install 'turnout[redis]'``).
    storage: Annotated[str, msgspec.Meta(pattern=r"^(memory://$|redis://|rediss://)")] = "memory://"
    #: Prefix of the Redis keys (``<prefix>:response:<id>``), so that routers can share a Redis.
    key_prefix: Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9._:-]{1,64}$")] = "turnout"
    #: Deadline of one Redis call: a store slower than this counts as unreachable (503 for a
    #: request that needs a kept response; a response that cannot be kept is logged).
    timeout_s: Annotated[float, msgspec.Meta(gt=0, le=10)] = 0.5
    #: A stored response is forgotten this long after it was stored.
    ttl_s: Annotated[float, msgspec.Meta(gt=0)] = 24 * 3600.0
    #: In memory: at most this many responses and bytes (of JSON, input included); the least
    #: recently used go first. A response larger than ``max_bytes`` is not stored (in Redis
    #: too, where Redis's own ``maxmemory`` bounds the rest).
    max_entries: Annotated[int, msgspec.Meta(ge=1)] = 10_000
    max_bytes: Annotated[int, msgspec.Meta(ge=1)] = 256 * 1024 * 1024


class DefaultsConfig(_Section):
    """Choices for models the ``models`` section does not list (or leaves open)."""

    policy: str | PolicyConfig = "round_robin"
    tool_parser: str | None = None
    reasoning_parser: str | None = None
    tokenizer_path: str | None = None
    #: The model (id or alias) of requests that name none, e.g. SGLang's native ``/generate``.
    model: str | None = None


class Config(_Section):
    """The whole turnout configuration."""

    server: ServerConfig = msgspec.field(default_factory=ServerConfig)
    #: Workers known at start-up (more can be added with ``POST /workers``).
    workers: list[WorkerSpec] = msgspec.field(default_factory=list)
    #: Providers whose workers join and leave at run time (beside the static ``workers``).
    discovery: list[DiscoveryConfig] = msgspec.field(default_factory=list)
    models: dict[str, ModelConfig] = msgspec.field(default_factory=dict)
    defaults: DefaultsConfig = msgspec.field(default_factory=DefaultsConfig)
    #: Image inputs of every model (a model's own ``images`` replaces it).
    images: ImagesConfig = msgspec.field(default_factory=ImagesConfig)
    health: HealthSettings = msgspec.field(default_factory=HealthSettings)
    circuit_breaker: BreakerSettings = msgspec.field(default_factory=BreakerSettings)
    retry: RetrySettings = msgspec.field(default_factory=RetrySettings)
    load_monitor: LoadMonitorSettings = msgspec.field(default_factory=LoadMonitorSettings)
    wire: WireSettings = msgspec.field(default_factory=WireSettings)
    #: OpenTelemetry traces (off unless configured here or by ``OTEL_*`` variables).
    tracing: TracingConfig = msgspec.field(default_factory=TracingConfig)
    #: Tenants by name: API keys, allowed models and limits. Keys of ``server.api_keys`` stay
    #: untenanted (unlimited, every model).
    tenants: dict[_TenantName, TenantConfig] = msgspec.field(default_factory=dict)
    #: The storage of tenant budgets.
    limits: LimitsConfig = msgspec.field(default_factory=LimitsConfig)
    #: The Responses API's store of responses.
    responses: ResponsesConfig = msgspec.field(default_factory=ResponsesConfig)
    #: ``DELETE /workers/{id}`` waits this long for in-flight requests before removing anyway.
    drain_timeout_s: float = 600.0

    def workers_settings(self) -> WorkersSettings:
        """The worker layer's settings."""
        return WorkersSettings(
            workers=list(self.workers),
            health=self.health,
            circuit_breaker=self.circuit_breaker,
            retry=self.retry,
            load_monitor=self.load_monitor,
            wire=self.wire,
            drain_timeout_s=self.drain_timeout_s,
        )


def policy_config(value: str | PolicyConfig) -> PolicyConfig:
    """Normalise the short ``policy: name`` form."""
    return PolicyConfig(name=value) if isinstance(value, str) else value


def _check_policy(key: str, value: str | PolicyConfig, *, named: bool) -> None:
    """A policy section names a policy, or the prefill/decode ones (a model's may leave its
    regular policy to the defaults); a role's own section names one policy only."""
    policy = policy_config(value)
    if policy.name is None and (named or (policy.prefill is None and policy.decode is None)):
        raise ConfigError(f"{key}.name: a policy name is required")
    if policy.name is None and policy.params:
        raise ConfigError(f"{key}.params: parameters need a policy name")
    for role in ("prefill", "decode"):
        section = getattr(policy, role)
        if section is None:
            continue
        inner = policy_config(section)
        if inner.name is None:
            raise ConfigError(f"{key}.{role}.name: a policy name is required")
        if inner.prefill is not None or inner.decode is not None:
            raise ConfigError(f"{key}.{role}: names one policy (no prefill/decode inside)")


_ENV_PATTERN = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def substitute_env(value: Any, path: str = "$", environ: Mapping[str, str] | None = None) -> Any:
    """Replace ``${NAME}`` and ``${NAME:-default}`` in every string of a parsed config."""
    env = os.environ if environ is None else environ
    if isinstance(value, str):

        def replace(match: re.Match[str]) -> str:
            name, default = match.group(1), match.group(2)
            if name in env:
                return env[name]
            if default is not None:
                return default
            raise ConfigError(f"{_dotted(path)}: environment variable {name} is not set")

        return _ENV_PATTERN.sub(replace, value)
    if isinstance(value, dict):
        return {k: substitute_env(v, f"{path}.{k}", env) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute_env(v, f"{path}[{i}]", env) for i, v in enumerate(value)]
    return value


def read_config_file(path: str | Path) -> dict[str, Any]:
    """Parse a YAML (``.yaml``/``.yml``) or TOML (``.toml``) file into plain data."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {file}: {exc.strerror or exc}") from exc
    try:
        if file.suffix == ".toml":
            data: Any = tomllib.loads(text)
        else:
            data = yaml.safe_load(text)
    except (tomllib.TOMLDecodeError, yaml.YAMLError) as exc:
        kind = "TOML" if file.suffix == ".toml" else "YAML"
        raise ConfigError(f"config file {file} is not valid {kind}: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {file}: the top level must be a mapping")
    return data


def build_config(data: dict[str, Any]) -> Config:
    """Validate plain data into a :class:`Config`; errors name the key path and the bad value."""
    data = substitute_env(data)
    # msgspec does not name dict keys in error paths; validate entries one by one first.
    for section, entry_type in (("models", ModelConfig), ("tenants", TenantConfig)):
        entries = data.get(section)
        if not isinstance(entries, dict):
            continue
        for name, entry in entries.items():
            try:
                msgspec.convert(entry, entry_type, strict=False)
            except msgspec.ValidationError as exc:
                message = str(exc).replace(" - at `$", f" - at `$.{section}.{name}", 1)
                if " - at `" not in message:
                    message += f" - at `$.{section}.{name}`"
                raise ConfigError(_describe_validation_error(message, data)) from None
    try:
        config = msgspec.convert(data, Config, strict=False)
    except msgspec.ValidationError as exc:
        raise ConfigError(_describe_validation_error(str(exc), data)) from None
    _check(config)
    return config


def load_config(path: str | Path | None, overrides: dict[str, Any] | None = None) -> Config:
    """Load the config file (if any) and apply overrides (dotted keys from CLI flags)."""
    data = read_config_file(path) if path is not None else {}
    for dotted, value in (overrides or {}).items():
        _set_dotted(data, dotted, value)
    return build_config(data)


def _set_dotted(data: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    node = data
    for key in parents:
        child = node.get(key)
        if key == "policy" and isinstance(child, str):
            child = node[key] = {"name": child}  # a policy by name, now with more keys
        if not isinstance(child, dict):
            child = {}
            node[key] = child
        node = child
    node[last] = value


def _check(config: Config) -> None:
    server = config.server
    if not 0 <= server.port <= 65535:
        raise ConfigError(f"server.port: must be between 0 and 65535, got {server.port!r}")
    _check_policy("defaults.policy", config.defaults.policy, named=True)
    for model_id, model in config.models.items():
        if model.policy is not None:
            _check_policy(f"models.{model_id}.policy", model.policy, named=False)
    for index, worker in enumerate(config.workers):
        if not re.fullmatch(r"grpc://[^/\s:]+(:\d+)?|grpc://\[[0-9a-fA-F:.]+\](:\d+)?", worker.url):
            raise ConfigError(
                f"workers[{index}].url: expected grpc://host:port, got {worker.url!r}"
            )
        problem = bootstrap_port_problem(worker.role, worker.bootstrap_port)
        if problem is not None:
            raise ConfigError(f"workers[{index}].bootstrap_port: {problem}")
        worker_id = worker.id if worker.id is not None else default_worker_id(worker.url)
        problem = worker_id_problem(worker_id)
        if problem is not None:
            key = "id" if worker.id is not None else "url"
            raise ConfigError(f"workers[{index}].{key}: worker id {worker_id!r} {problem}")
    _check_images("images", config.images)
    for model_id, model in config.models.items():
        if model.images is not None:
            _check_images(f"models.{model_id}.images", model.images)
    _check_tokenizer_path("defaults.tokenizer_path", config.defaults.tokenizer_path)
    for model_id, model in config.models.items():
        _check_tokenizer_path(f"models.{model_id}.tokenizer_path", model.tokenizer_path)
    for model_id, model in config.models.items():
        names = [a if isinstance(a, str) else a.name for a in model.adapters]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ConfigError(f"models.{model_id}.adapters: {twice} listed more than once")
    seen: dict[str, str] = {}
    for model_id, model in config.models.items():
        for alias in model.aliases:
            if alias in config.models or alias in seen:
                raise ConfigError(
                    f"models.{model_id}.aliases: {alias!r} is already used by "
                    f"{seen.get(alias, alias)!r}"
                )
            seen[alias] = model_id
    _check_tenant_keys(config)


def _check_tenant_keys(config: Config) -> None:
    """Every key belongs to one tenant at most, and never doubles as an untenanted key."""
    owners: dict[str, str] = {}
    server = config.server
    for key in server.api_keys:
        owners.setdefault(key_digest(key), "server.api_keys")
    if server.admin_api_key:
        owners.setdefault(key_digest(server.admin_api_key), "server.admin_api_key")
    for name, tenant in config.tenants.items():
        digests = [(key_digest(k), "keys") for k in tenant.keys]
        digests += [(d.lower(), "key_sha256") for d in tenant.key_sha256]
        for digest, field_name in digests:
            owner = owners.get(digest)
            if owner is not None:
                raise ConfigError(
                    f"tenants.{name}.{field_name}: a key is also listed in {owner}; "
                    "give each key once"
                )
            owners[digest] = f"tenants.{name}"


def key_digest(key: str) -> str:
    """The SHA-256 hex digest of an API key (as ``key_sha256`` lists them)."""
    return hashlib.sha256(key.encode()).hexdigest()


_LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1", "0.0.0.0", "::"})


def _worker_address(url: str) -> tuple[str, int | None]:
    """``(host, port)`` of a worker URL, loopback spellings made one."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    return ("loopback" if host in _LOOPBACK else host), parts.port


def config_warnings(config: Config) -> list[str]:
    """Things a valid config probably does not mean (``turnout check`` prints them)."""
    warnings = []
    first: dict[tuple[str, int | None], int] = {}
    for index, worker in enumerate(config.workers):
        address = _worker_address(worker.url)
        if address not in first:
            first[address] = index
            continue
        earlier = first[address]
        other = config.workers[earlier]
        models = {m for m in (other.model, worker.model) if m}
        serving = (
            f" (models {', '.join(repr(m) for m in sorted(models))})" if len(models) > 1 else ""
        )
        warnings.append(
            f"workers[{earlier}] ({other.url}) and workers[{index}] ({worker.url}) are the same "
            f"worker{serving}: a worker serves one model, and turnout registers it once, as "
            f"workers[{earlier}]"
        )
    server = config.server
    if any(t.keys or t.key_sha256 for t in config.tenants.values()) and not (
        server.admin_api_key or server.api_keys
    ):
        warnings.append(
            "tenants have keys but server.admin_api_key is not set: admin routes (/workers, "
            "/admin/reload) refuse every key (tenant keys never open them)"
        )
    if config.limits.storage != "memory://" and not config.tenants:
        warnings.append("limits.storage is set but no tenant is configured: nothing is counted")
    if server.processes > 1 and config.responses.storage == "memory://":
        warnings.append(
            f"server.processes is {server.processes} and responses.storage is memory://: each "
            "process keeps its own Responses API responses, so a previous_response_id or GET "
            "/v1/responses/{id} that reaches another process is a 404 (keep them in Redis)"
        )
    return warnings


def tokenizer_dir_problem(path: str) -> str | None:
    """Why ``path`` is no usable model directory (None when it is one)."""
    directory = Path(path).expanduser()
    if not directory.exists():
        return f"{path} does not exist"
    if not directory.is_dir():
        return f"{path} is not a directory (give the model directory)"
    if not (directory / "tokenizer.json").is_file():
        return f"{path} has no tokenizer.json (turnout needs a Hugging Face tokenizer.json)"
    return None


def _check_images(key: str, images: ImagesConfig) -> None:
    from turnout.multimodal.images import SUPPORTED_FORMATS

    unknown = sorted(set(images.formats) - SUPPORTED_FORMATS)
    if unknown:
        raise ConfigError(
            f"{key}.formats: {unknown} not supported; choose from {sorted(SUPPORTED_FORMATS)}"
        )


def _check_tokenizer_path(key: str, path: str | None) -> None:
    problem = None if path is None else tokenizer_dir_problem(path)
    if problem is not None:
        raise ConfigError(f"{key}: {problem}")


_PATH_IN_MESSAGE = re.compile(r" - at `(\$[^`]*)`$")


def _describe_validation_error(message: str, data: Any) -> str:
    match = _PATH_IN_MESSAGE.search(message)
    if match is None:
        return f"invalid config: {message}"
    path = match.group(1)
    reason = message[: match.start()]
    value = _lookup(data, path)
    shown = "" if value is _MISSING else f" (got {value!r})"
    return f"{_dotted(path)}: {reason}{shown}"


_MISSING = object()
_PATH_TOKEN = re.compile(r"\.([^.\[]+)|\[(\d+)\]|\[(\.\.\.)\]")


def _lookup(data: Any, path: str) -> Any:
    node = data
    for name, index, _ in _PATH_TOKEN.findall(path[1:]):
        if name and isinstance(node, dict) and name in node:
            node = node[name]
        elif index and isinstance(node, list) and int(index) < len(node):
            node = node[int(index)]
        else:
            return _MISSING
    return node


def _dotted(path: str) -> str:
    return path[2:] if path.startswith("$.") else path.lstrip("$") or "(top level)"

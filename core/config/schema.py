"""The configuration's schema: every section as a typed struct, unknown keys refused."""

from __future__ import annotations

import hashlib
from typing import Annotated, Any, Final, Literal

import msgspec

from turnout.admission.settings import AdmissionSettings
from turnout.http_workers.settings import HttpWorkersSettings
from turnout.observability.tracing import TracingConfig
from turnout.workers.settings import (
    BreakerSettings,
    HealthSettings,
    LoadMonitorSettings,
    RetrySettings,
    WireSettings,
    WorkerSpec,
    WorkersSettings,
)

#: A parser name in the config that turns parsing off for a model.
DISABLED = "none"

#: Image formats ``images.formats`` may name (lower-case Pillow names); each has a decoder in
#: :mod:`turnout.multimodal.images`.
IMAGE_FORMATS: Final = frozenset({"png", "jpeg", "webp", "gif", "bmp", "tiff"})


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
    #: Image formats taken (Pillow's names, lower case; see :data:`IMAGE_FORMATS`).
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
    #: The highest ``admission`` class the tenant's requests may ask for (unset: the
    #: section's ``max_class``).
    max_class: str | None = None
    #: The tenant's weight in the fair share of token work within a class.
    weight: Annotated[float, msgspec.Meta(gt=0, le=1000)] = 1.0

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
    ``GET /v1/responses/{id}``) and of conversations (``/v1/conversations``); restart to
    change."""

    #: ``memory://``: each serving process keeps its own responses (a follow-up request must
    #: reach the same process and replica). ``redis://host:port/db`` / ``rediss://…``: every
    #: process and replica shares them (``pip install 'turnout[redis]'``).
    #: ``postgres://user:password@host:port/database`` (or ``postgresql://``): likewise, in
    #: tables turnout creates and migrates itself (``pip install 'turnout[postgres]'``).
    storage: Annotated[
        str, msgspec.Meta(pattern=r"^(memory://$|redis://|rediss://|postgres://|postgresql://)")
    ] = "memory://"
    #: Prefix of the Redis keys (``<prefix>:response:<id>``), and the namespace of the rows in
    #: PostgreSQL: routers with the same one share what they keep.
    key_prefix: Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9._:-]{1,64}$")] = "turnout"
    #: Deadline of one store call: a store slower than this counts as unreachable (503 for a
    #: request that needs a kept response; a response that cannot be kept is logged).
    timeout_s: Annotated[float, msgspec.Meta(gt=0, le=10)] = 0.5
    #: A stored response is forgotten this long after it was stored.
    ttl_s: Annotated[float, msgspec.Meta(gt=0)] = 24 * 3600.0
    #: In memory: at most this many responses and bytes (of JSON, input included); the least
    #: recently used go first. A response larger than ``max_bytes`` is not stored (in Redis and
    #: PostgreSQL too, where Redis's ``maxmemory`` or the time to live bounds the rest).
    max_entries: Annotated[int, msgspec.Meta(ge=1)] = 10_000
    max_bytes: Annotated[int, msgspec.Meta(ge=1)] = 256 * 1024 * 1024
    #: The secret that seals reasoning for ``include: ["reasoning.encrypted_content"]`` (use
    #: ``${ENV_VAR}``). Unset: the router draws a key at start-up (its serving processes share
    #: it); set it for several replicas, or to open what was sealed before a restart.
    reasoning_key: Annotated[str, msgspec.Meta(min_length=16)] | None = None


class BackgroundConfig(_Section):
    """Background responses (``background: true`` on ``POST /v1/responses``): how many run and
    wait at once in each serving process, and the stream events kept to resume them; restart
    to change."""

    #: Background responses generating at once; more wait in the queue.
    max_running: Annotated[int, msgspec.Meta(ge=1)] = 16
    #: Background responses waiting to run; a submission past it is a 429.
    max_queued: _Count = 256
    #: A background response still running after this long fails (``background_timeout``).
    max_duration_s: Annotated[float, msgspec.Meta(gt=0)] = 3600.0
    #: Stream events kept per background response (bytes of JSON), for ``GET
    #: /v1/responses/{id}?stream=true``; past it the oldest are dropped.
    max_event_bytes: Annotated[int, msgspec.Meta(ge=1)] = 4 * 1024 * 1024
    #: Stream events kept in all (bytes of JSON); past it those of finished responses are
    #: dropped, the longest finished first.
    max_total_event_bytes: Annotated[int, msgspec.Meta(ge=1)] = 256 * 1024 * 1024


class McpServerConfig(_Section):
    """An MCP server the operator runs or names: a request uses it by its label alone
    (``{"type": "mcp", "server_label": "<name>"}``, no ``server_url``), and never sees its
    URL, command or headers."""

    #: Its streamable HTTP endpoint (an URL ending in ``/sse``: the SSE transport). Operator
    #: servers may be on any host and address.
    url: Annotated[str, msgspec.Meta(pattern=r"^https?://")] | None = None
    #: Or a command the router starts for each use (stdio), and its arguments.
    command: list[str] | None = None
    #: The environment of that command (besides a minimal default one).
    env: dict[str, str] = msgspec.field(default_factory=dict)
    #: Sent with every request to ``url`` (use ``${ENV_VAR}`` for tokens).
    headers: dict[str, str] = msgspec.field(default_factory=dict)
    #: The models (ids) whose requests may use it; unset: every model.
    models: list[str] | None = None
    #: The tenants whose requests may use it; unset: every request.
    tenants: list[str] | None = None
    #: Whether calls wait for the client's approval, unless the request says (``require_approval``).
    require_approval: Literal["always", "never"] = "never"
    #: The tools requests may see (unset: all of them).
    allowed_tools: list[str] | None = None


class McpConfig(_Section):
    """MCP tools of ``/v1/responses`` (``{"type": "mcp", "server_url": …}``): the servers a
    request may name, and the bounds of what the router does with them (see
    :mod:`turnout.responses.mcp`)."""

    #: Hosts whose ``server_url`` a request may name: ``mcp.example.com``, or
    #: ``*.example.com`` for its subdomains. Empty: requests' MCP tools are refused.
    allowed_hosts: list[Annotated[str, msgspec.Meta(pattern=r"^(\*\.)?[^*\s/:]+$")]] = (
        msgspec.field(default_factory=list)
    )
    #: Let server URLs reach private, loopback and link-local addresses (servers inside the
    #: cluster). Off: every address a host resolves to must be public.
    allow_private_addresses: bool = False
    #: Generations of one response that end in MCP calls; the response ends (incomplete)
    #: after this many.
    max_tool_rounds: Annotated[int, msgspec.Meta(ge=1, le=64)] = 8
    #: Deadline of one tool call (connect, handshake and call), and of listing a server's tools.
    call_timeout_s: Annotated[float, msgspec.Meta(gt=0)] = 30.0
    #: Bytes of one answer of an MCP server (a larger one makes the call fail).
    max_result_bytes: Annotated[int, msgspec.Meta(ge=1024)] = 1024 * 1024
    #: Tools of one server shown to the model (a server listing more is cut to these).
    max_tools: Annotated[int, msgspec.Meta(ge=1, le=1024)] = 128
    #: Servers the operator configures, by label (what requests name them by).
    servers: dict[
        Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")], McpServerConfig
    ] = msgspec.field(default_factory=dict)


class MigrationConfig(_Section):
    """Failover of a running answer: a worker that fails after the first token hands the rest
    of the answer to another worker (the prompt and the tokens generated so far as its input)."""

    enabled: bool = True
    #: Migrations of one request at most (0: none).
    max_attempts: _Count = 2


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
    #: How turnout talks to OpenAI-compatible HTTP workers (``url: http://…``).
    http_workers: HttpWorkersSettings = msgspec.field(default_factory=HttpWorkersSettings)
    #: OpenTelemetry traces (off unless configured here or by ``OTEL_*`` variables).
    tracing: TracingConfig = msgspec.field(default_factory=TracingConfig)
    #: Tenants by name: API keys, allowed models and limits. Keys of ``server.api_keys`` stay
    #: untenanted (unlimited, every model).
    tenants: dict[_TenantName, TenantConfig] = msgspec.field(default_factory=dict)
    #: The storage of tenant budgets.
    limits: LimitsConfig = msgspec.field(default_factory=LimitsConfig)
    #: The Responses API's store of responses.
    responses: ResponsesConfig = msgspec.field(default_factory=ResponsesConfig)
    #: MCP tools of the Responses API.
    mcp: McpConfig = msgspec.field(default_factory=McpConfig)
    #: Failover of running answers to another worker.
    migration: MigrationConfig = msgspec.field(default_factory=MigrationConfig)
    #: Background responses of the Responses API.
    background_responses: BackgroundConfig = msgspec.field(default_factory=BackgroundConfig)
    #: Priority classes, fair shares, deadlines and engine capacity (off by default).
    admission: AdmissionSettings = msgspec.field(default_factory=AdmissionSettings)
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
            http=self.http_workers,
            drain_timeout_s=self.drain_timeout_s,
        )


def key_digest(key: str) -> str:
    """The SHA-256 hex digest of an API key (as ``key_sha256`` lists them)."""
    return hashlib.sha256(key.encode()).hexdigest()


def policy_config(value: str | PolicyConfig) -> PolicyConfig:
    """Normalise the short ``policy: name`` form."""
    return PolicyConfig(name=value) if isinstance(value, str) else value

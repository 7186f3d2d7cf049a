"""Checks beyond the schema (cross-field rules, worker URLs and ids, model paths) and the
warnings ``turnout check`` prints about valid configs that probably mean something else."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlsplit

from turnout.admission.checks import admission_problems
from turnout.config.schema import (
    IMAGE_FORMATS,
    Config,
    ImagesConfig,
    PolicyConfig,
    key_digest,
    policy_config,
)
from turnout.errors import ConfigError
from turnout.http_workers.kind import http_worker_problem, is_http_worker
from turnout.workers.ids import default_worker_id, worker_id_problem
from turnout.workers.roles import bootstrap_port_problem
from turnout.workers.settings import WorkerSpec


def check_config(config: Config) -> None:
    """What the schema cannot say: cross-field rules, worker URLs and ids, paths; ConfigError
    naming the key when one fails."""
    server = config.server
    if not 0 <= server.port <= 65535:
        raise ConfigError(f"server.port: must be between 0 and 65535, got {server.port!r}")
    if server.metrics_port is not None and server.metrics_port == server.port:
        raise ConfigError(
            f"server.metrics_port: {server.metrics_port} is also server.port (the API's port); "
            "choose another port, or leave it unset to serve /metrics on server.port only"
        )
    _check_policy("defaults.policy", config.defaults.policy, named=True)
    for model_id, model in config.models.items():
        if model.policy is not None:
            _check_policy(f"models.{model_id}.policy", model.policy, named=False)
    for index, worker in enumerate(config.workers):
        if is_http_worker(worker):
            _check_http_worker(f"workers[{index}]", worker)
        else:
            _check_grpc_worker(index, worker.url, worker.kind)
        problem = bootstrap_port_problem(worker.role, worker.bootstrap_port)
        if problem is not None:
            raise ConfigError(f"workers[{index}].bootstrap_port: {problem}")
        worker_id = worker.id if worker.id is not None else default_worker_id(worker.url)
        problem = worker_id_problem(worker_id)
        if problem is not None:
            key = "id" if worker.id is not None else "url"
            raise ConfigError(f"workers[{index}].{key}: worker id {worker_id!r} {problem}")
    _check_images("images", config.images)
    for label, mcp in config.mcp.servers.items():
        if (mcp.url is None) == (not mcp.command):
            raise ConfigError(
                f"mcp.servers.{label}: set url (an HTTP server) or command (a stdio server)"
            )
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
    problems = admission_problems(
        config.admission, {name: t.max_class for name, t in config.tenants.items()}
    )
    if problems:
        raise ConfigError(problems[0])


#: A gRPC worker URL: the scheme names the engine (``grpc://`` is SGLang).
_GRPC_URL = re.compile(
    r"(?:(sglang|vllm|trtllm)\+)?grpc://(?:[^/\s:\[\]]+|\[[0-9a-fA-F:.]+\])(?::\d+)?"
)


def _check_grpc_worker(index: int, url: str, kind: str | None) -> None:
    """A gRPC worker's URL, and its ``kind`` agreeing with the URL's scheme."""
    match = _GRPC_URL.fullmatch(url)
    if match is None:
        raise ConfigError(
            f"workers[{index}].url: expected grpc://host:port (or vllm+grpc://, "
            f"trtllm+grpc://), got {url!r}"
        )
    scheme_engine = match.group(1)
    if kind is not None and scheme_engine is not None and kind != scheme_engine:
        raise ConfigError(
            f"workers[{index}].kind: {kind!r} but the URL's scheme says {scheme_engine!r}"
        )


def _check_http_worker(key: str, worker: WorkerSpec) -> None:
    problem = http_worker_problem(worker)
    if problem is not None:
        field, message = problem
        raise ConfigError(f"{key}.{field}: {message}")


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
            "process keeps its own Responses API responses and conversations, so a "
            "previous_response_id, a conversation or GET /v1/responses/{id} that reaches "
            "another process is a 404 (keep them in Redis)"
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
    unknown = sorted(set(images.formats) - IMAGE_FORMATS)
    if unknown:
        raise ConfigError(
            f"{key}.formats: {unknown} not supported; choose from {sorted(IMAGE_FORMATS)}"
        )


def _check_tokenizer_path(key: str, path: str | None) -> None:
    problem = None if path is None else tokenizer_dir_problem(path)
    if problem is not None:
        raise ConfigError(f"{key}: {problem}")


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

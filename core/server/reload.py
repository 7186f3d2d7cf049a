"""Apply a new configuration to a running router without dropping requests.

Policies, parsers, per-model settings, the API keys and the tenants (their keys, models and
limits) are swapped for new requests (in-flight requests keep the objects they started with);
workers that left the config are drained, new ones are added. Other server settings (host,
port, limits, timeouts), the ``limits`` section (the budget storage) and the ``responses``
section (the response store) change on restart.

With several serving processes (``turnout serve --processes N``) the supervisor reads the
config and every process applies it (see :mod:`turnout.server.supervisor`); a reload asked of
one process is a reload of all, and answers what each did.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from typing import Any

from litestar import Response, post
from litestar.di import NamedDependency

from turnout.config import Config
from turnout.discovery import describe_discovery
from turnout.errors import ApiError, StartupError
from turnout.plugin_choice import policies_for, role_policies_for, validate_plugin_names
from turnout.server.context import Services
from turnout.server.preflight import check_policies
from turnout.server.respond import answer_json
from turnout.workers.ids import default_worker_id

log = logging.getLogger(__name__)


async def apply_config(services: Services, new: Config) -> dict[str, list[str]]:
    """Swap in ``new``; returns what changed (workers added and drained, discovery entries
    started and stopped)."""
    validate_plugin_names(new, services.plugins)
    check_policies(new, services.plugins)
    describe_discovery(new.discovery, services.plugins.discovery)
    registry = services.registry
    old = services.config
    models = services.models.with_config(new)
    await models.preload(sorted(m for m in new.models if new.models[m].tokenizer_path))
    policies, default_policy = policies_for(new, services.plugins)
    role_policy = role_policies_for(new, services.plugins)
    services.dispatcher.set_policies(policies, default_policy, role_policy)
    # Key rotation and tenants: old keys stop working with the next request; a request
    # already admitted settles its budget with the tenant settings it started with.
    ops = services.ops
    ops.set_tenants(new)
    if ops.limiter is not None and ops.limiter.settings != new.limits:
        log.warning("the limits section changed: it applies when turnout restarts")
    if new.responses != old.responses:
        log.warning("the responses section changed: it applies when turnout restarts")
    services.models = models
    services.config = new

    wanted = {spec.id or default_worker_id(spec.url): spec for spec in new.workers}
    known = {spec.id or default_worker_id(spec.url) for spec in old.workers}
    added, drained = [], []
    for worker_id, spec in wanted.items():
        if registry.get(worker_id) is None:
            await registry.add(spec)
            added.append(worker_id)
    for worker_id in known - set(wanted):
        if registry.get(worker_id) is not None:
            registry.start_drain(worker_id)
            drained.append(worker_id)
    changes = {"added": added, "drained": drained}
    if new.discovery != old.discovery:
        entries = await services.discovery.reconfigure(new.discovery)
        changes["discovery_started"] = entries["started"]
        changes["discovery_stopped"] = entries["stopped"]
    log.info("configuration reloaded: %s", changes)
    return changes


@post("/admin/reload", status_code=200)
async def admin_reload(services: NamedDependency[Services]) -> Response[bytes]:
    """Re-read the config file and apply it (admin route)."""
    return answer_json({"status": "reloaded", **await reload_from_source(services)})


def rejected(exc: StartupError) -> ApiError:
    """The answer to a reload whose new configuration does not hold."""
    return ApiError(400, f"the new configuration was rejected: {exc}")


async def reload_from_source(services: Services) -> dict[str, Any]:
    """Load the config again from where it came from and apply it (in every serving process,
    when there are several)."""
    if services.reload_all is not None:
        return await services.reload_all()
    source = services.config_source
    if source is None:
        raise ApiError(409, "turnout was started without a config file; there is nothing to reload")
    try:
        new = source()
        return await apply_config(services, new)
    except StartupError as exc:
        raise rejected(exc) from None


def install_sighup(services: Services) -> None:
    """Reload the configuration on SIGHUP (where the platform has it)."""
    if not hasattr(signal, "SIGHUP") or services.config_source is None:
        return
    loop = asyncio.get_running_loop()
    tasks: set[asyncio.Task[None]] = set()

    async def reload_logged() -> None:
        try:
            await reload_from_source(services)
        except ApiError as exc:
            log.error("reload on SIGHUP failed: %s", exc.message)

    def on_hangup() -> None:
        task = loop.create_task(reload_logged())
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    try:
        loop.add_signal_handler(signal.SIGHUP, on_hangup)
    except (ValueError, RuntimeError, NotImplementedError):
        # Signals reach only the main thread's loop (e.g. not an app run in a test thread).
        log.debug("SIGHUP reload not installed: not running in the main thread")

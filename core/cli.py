"""The ``turnout`` command: ``serve``, ``sim`` and ``plugins``."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from turnout import __version__
from turnout.errors import ConfigError, StartupError

#: Flags that set one config key each: (flag, argparse dest, dotted key).
_KEY_FLAGS: tuple[tuple[str, str, str], ...] = (
    ("--host", "host", "server.host"),
    ("--port", "port", "server.port"),
    ("--log-level", "log_level", "server.log_level"),
    ("--admin-api-key", "admin_api_key", "server.admin_api_key"),
    ("--policy", "policy", "defaults.policy"),
    ("--tool-parser", "tool_parser", "defaults.tool_parser"),
    ("--reasoning-parser", "reasoning_parser", "defaults.reasoning_parser"),
    ("--model-path", "model_path", "defaults.tokenizer_path"),
    ("--default-model", "default_model", "defaults.model"),
    ("--max-concurrent-requests", "max_concurrent_requests", "server.max_concurrent_requests"),
    ("--queue-size", "queue_size", "server.queue_size"),
    ("--queue-timeout", "queue_timeout_s", "server.queue_timeout_s"),
    ("--request-timeout", "request_timeout_s", "server.request_timeout_s"),
    ("--max-body-bytes", "max_body_bytes", "server.max_body_bytes"),
    ("--shutdown-grace", "shutdown_grace_s", "server.shutdown_grace_s"),
    ("--metrics-port", "metrics_port", "server.metrics_port"),
    ("--processes", "processes", "server.processes"),
    ("--prefill-policy", "prefill_policy", "defaults.policy.prefill"),
    ("--decode-policy", "decode_policy", "defaults.policy.decode"),
)


def _serve_overrides(args: argparse.Namespace) -> dict[str, Any]:
    overrides: dict[str, Any] = {}
    for _flag, attr, key in _KEY_FLAGS:
        value = getattr(args, attr)
        if value is not None:
            overrides[key] = value
    if args.log_json:
        overrides["server.log_json"] = True
    if args.api_key:
        overrides["server.api_keys"] = list(args.api_key)
    if args.cors_allow_origins:
        overrides["server.cors_allow_origins"] = list(args.cors_allow_origins)
    workers = [{"url": url} for url in args.worker_urls or ()]
    workers += [_prefill_worker(values) for values in args.prefill or ()]
    workers += [{"url": url, "role": "decode"} for url in args.decode or ()]
    if workers:
        overrides["workers"] = workers
    return overrides


def _flags_by_key(args: argparse.Namespace) -> dict[str, str]:
    """The flag that set each config key given on the command line (``workers[i]`` included)."""
    flags = {key: flag for flag, attr, key in _KEY_FLAGS if getattr(args, attr) is not None}
    if args.log_json:
        flags["server.log_json"] = "--log-json"
    if args.api_key:
        flags["server.api_keys"] = "--api-key"
    if args.cors_allow_origins:
        flags["server.cors_allow_origins"] = "--cors-allow-origins"
    given = [
        *(("--worker-urls", url) for url in args.worker_urls or ()),
        *(("--prefill", values[0]) for values in args.prefill or ()),
        *(("--decode", url) for url in args.decode or ()),
    ]
    for index, (flag, url) in enumerate(given):
        flags[f"workers[{index}]"] = f"{flag} {url}"
    return flags


def _name_flags(message: str, flags: dict[str, str]) -> str:
    """``message`` with the config key it starts with replaced by the flag that set that key
    (``defaults.tool_parser: ...`` becomes ``--tool-parser: ...``)."""
    head, colon, reason = message.partition(": ")
    if not colon:
        return message
    for key in sorted(flags, key=len, reverse=True):
        if head == key or head.startswith((f"{key}.", f"{key}[")):
            field = head[len(key) + 1 :]
            # A worker flag sets several keys at once (its bootstrap port…): say which one.
            detail = (
                f" ({field})" if key.startswith("workers[") and field not in ("", "url") else ""
            )
            return f"{flags[key]}{detail}: {reason}"
    return message


def _prefill_worker(values: Sequence[str]) -> dict[str, Any]:
    """A ``--prefill URL [BOOTSTRAP_PORT|none]`` flag as a worker entry."""
    if len(values) > 2:
        raise ConfigError(f"--prefill: expected URL [BOOTSTRAP_PORT], got {' '.join(values)}")
    worker: dict[str, Any] = {"url": values[0], "role": "prefill"}
    if len(values) == 2 and values[1].lower() != "none":
        try:
            worker["bootstrap_port"] = int(values[1])
        except ValueError:
            raise ConfigError(
                f"--prefill {values[0]}: the bootstrap port must be a number or 'none', "
                f"got {values[1]!r}"
            ) from None
    return worker


def _cmd_serve(args: argparse.Namespace) -> int:
    from turnout.config import load_config
    from turnout.server.runner import serve

    overrides = _serve_overrides(args)
    config = load_config(args.config, overrides)
    source = (lambda: load_config(args.config, overrides)) if args.config else None
    return serve(config, demo=args.demo, source=source)


def _cmd_check(args: argparse.Namespace) -> int:
    from turnout.config import config_warnings, load_config
    from turnout.observability.tracing import describe_tracing
    from turnout.plugin_choice import choose_plugins
    from turnout.server.preflight import preflight

    config = load_config(args.config, _serve_overrides(args))
    checked = preflight(config)
    models = sorted(set(config.models) | {w.model for w in config.workers if w.model})
    disaggregated = any(w.role not in (None, "regular") for w in config.workers)
    for model_id in models:
        choice = choose_plugins(model_id, config, checked.plugins)
        roles = ""
        if disaggregated:
            decode = choice.decode_policy or choice.policy
            roles = f" prefill_policy={choice.prefill_policy.name} decode_policy={decode.name}"
        print(
            f"{model_id}: tool_parser={choice.tool_parser} "
            f"reasoning_parser={choice.reasoning_parser} policy={choice.policy.name}{roles}"
        )
    for line in checked.discovery:
        print(line)
    print(describe_tracing(config.tracing))
    for warning in config_warnings(config):
        print(f"turnout: warning: {warning}", file=sys.stderr)
    print("config OK")
    return 0


def _cmd_plugins(args: argparse.Namespace) -> int:
    from turnout.plugin_report import plugins_report, render_plugins_report

    report = plugins_report()
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(render_plugins_report(report))
    return 0


def _cmd_sim(argv: list[str]) -> int:
    from turnout.sim.cli import main as sim_main

    return sim_main(argv)


def _add_config_flags(command: argparse.ArgumentParser) -> None:
    command.add_argument("--config", help="YAML or TOML config file")
    command.add_argument("--host")
    command.add_argument("--port", type=int)
    command.add_argument("--worker-urls", nargs="+", metavar="URL", help="grpc://host:port ...")
    command.add_argument(
        "--prefill",
        nargs="+",
        action="append",
        metavar=("URL", "BOOTSTRAP_PORT"),
        help="a prefill worker of a prefill-decode fleet, with its KV bootstrap port (default: "
        "what it reports, else 8998; repeatable)",
    )
    command.add_argument(
        "--decode", action="append", metavar="URL", help="a decode worker (repeatable)"
    )
    command.add_argument("--prefill-policy", help="default policy that picks prefill workers")
    command.add_argument("--decode-policy", help="default policy that picks decode workers")
    command.add_argument("--model-path", help="model directory (tokenizer) for served models")
    command.add_argument("--default-model", help="model of requests that name none (/generate)")
    command.add_argument("--policy", help="default selection policy")
    command.add_argument("--tool-parser", help="default tool-call parser")
    command.add_argument("--reasoning-parser", help="default reasoning parser")
    command.add_argument("--api-key", action="append", help="require this bearer key (repeatable)")
    command.add_argument("--admin-api-key", help="bearer key for admin routes")
    command.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    command.add_argument("--log-json", action="store_true", help="one JSON object per log line")
    command.add_argument(
        "--max-concurrent-requests", type=int, help="generation requests at once (0: no limit)"
    )
    command.add_argument("--queue-size", type=int, help="requests waiting for a slot (then 429)")
    command.add_argument(
        "--queue-timeout", dest="queue_timeout_s", type=float, help="max wait for a slot (503)"
    )
    command.add_argument(
        "--request-timeout", dest="request_timeout_s", type=float, help="per request (504)"
    )
    command.add_argument("--max-body-bytes", type=int, help="largest request body (413)")
    command.add_argument(
        "--shutdown-grace",
        dest="shutdown_grace_s",
        type=float,
        help="seconds in-flight requests get to finish after SIGTERM",
    )
    command.add_argument("--metrics-port", type=int, help="also serve /metrics on this port")
    command.add_argument(
        "--processes", type=int, help="serving processes on the one port (default 1)"
    )
    command.add_argument(
        "--cors-allow-origins", nargs="+", metavar="ORIGIN", help="browser origins ('*': any)"
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``turnout`` command."""
    parser = argparse.ArgumentParser(
        prog="turnout", description="A pluggable router for SGLang gRPC inference workers."
    )
    parser.add_argument("--version", action="version", version=f"turnout {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the router")
    check = commands.add_parser("check", help="validate a config and show each model's plugins")
    _add_config_flags(serve)
    serve.add_argument(
        "--demo",
        action="store_true",
        help="start two simulated workers with the demo model and route to them",
    )
    serve.set_defaults(handler=_cmd_serve)
    _add_config_flags(check)
    check.set_defaults(handler=_cmd_check)

    plugins = commands.add_parser("plugins", help="list installed plugins")
    plugins.add_argument("--json", action="store_true", help="machine-readable output")
    plugins.set_defaults(handler=_cmd_plugins)

    commands.add_parser("sim", help="run a simulated SGLang worker (see `turnout sim --help`)")
    return parser


def _one_line(message: str) -> str:
    """A start-up error as the one line it is printed as (its lines joined with ``; ``)."""
    return "; ".join(line.strip() for line in message.splitlines() if line.strip())


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``turnout`` command; start-up errors exit 2 without a traceback."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["sim"]:
        return _cmd_sim(arguments[1:])
    args = build_parser().parse_args(arguments)
    try:
        code: int = args.handler(args)
    except StartupError as exc:
        message = str(exc)
        if args.command in ("serve", "check"):
            message = _name_flags(message, _flags_by_key(args))
        print(f"turnout: error: {_one_line(message)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    raise SystemExit(main())

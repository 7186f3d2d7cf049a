"""Per-model runtime: tokenizer, parser factories and policy, resolved once per model."""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from turnout.chat_formats.types import ChatFormat
from turnout.config import Config, ModelConfig
from turnout.errors import ApiError, StartupError, bad_request
from turnout.generation.model_facts import ModelFacts, read_model_facts
from turnout.generation.prompt_size import PromptLimit
from turnout.generation.requests import LoraPath
from turnout.multimodal.vision import Vision, model_vision
from turnout.plugin_choice import choose_plugins
from turnout.plugin_loader import Plugins
from turnout.reasoning.types import ReasoningParser
from turnout.tokenizer import ModelFilesError, ModelTokenizer
from turnout.tool_calls.types import CallFormat, ToolParser
from turnout.workers.adapters import Adapter
from turnout.workers.worker import Worker

log = logging.getLogger(__name__)

#: Environment variable holding the router's start time, which its serving processes share.
STARTED_ENV = "TURNOUT_STARTED"


def router_started() -> int:
    """When this router started (Unix seconds; ``$TURNOUT_STARTED`` when a parent set it)."""
    value = os.environ.get(STARTED_ENV, "")
    return int(value) if value.isdigit() else _PROCESS_STARTED


_PROCESS_STARTED = int(time.time())


#: The tool parser reading a constrained JSON array of calls (``tool_choice: required``).
ARRAY_PARSER = "json"

_NO_SETTINGS = ModelConfig()


def _lora_path_adapter(lora_path: LoraPath | None) -> str | None:
    """The adapter SGLang's ``lora_path`` names: one name, or the same one for every prompt."""
    if lora_path is None or isinstance(lora_path, str):
        return lora_path or None
    names = set(lora_path)
    if len(names) > 1:
        raise bad_request(
            "lora_path names different adapters for the prompts of one request: send one "
            "request per adapter",
            "lora_path",
        )
    return next(iter(names), None) or None


@dataclass(slots=True)
class ModelRuntime:
    """Everything a request for one model needs, looked up once at start-up or first use."""

    model_id: str
    tokenizer: ModelTokenizer
    tool_parser_name: str | None = None
    tool_parser: Callable[[], ToolParser] | None = None
    #: How the tool parser writes one call (its optional ``call_format()``), for structural tags.
    tool_call_format: CallFormat | None = None
    reasoning_parser_name: str | None = None
    reasoning_parser: Callable[..., ReasoningParser] | None = None
    #: Factory of the parser reading a constrained JSON array of calls (tool_choice=required).
    array_parser: Callable[[], ToolParser] | None = None
    reasoning_start_marker: str = ""
    #: Markers that close reasoning, when the parser names them (``end_markers``).
    reasoning_end_markers: tuple[str, ...] = ()
    parsers_need_special_tokens: bool = False
    stop_token_ids: frozenset[int] = field(default_factory=frozenset)
    #: How long a prompt the model's workers take now (``None``: they did not say).
    prompt_limit: Callable[[], PromptLimit | None] = lambda: None
    #: What the model's ``config.json`` says (hidden size, Matryoshka, vision).
    facts: ModelFacts = field(default_factory=ModelFacts)
    #: The chat format rendering chat prompts and reading their outputs (``None``: the chat
    #: template and the parsers above).
    chat_format: ChatFormat | None = None
    chat_format_name: str | None = None
    #: What images need of the model, or why it takes none.
    vision: Vision | str = "it takes no images"


class UnknownAdapter(ApiError):
    """A request named a LoRA adapter its model does not have (404, like an unknown model)."""

    def __init__(self, model_id: str, message: str) -> None:
        super().__init__(404, message, param="model", code="model_not_found")
        self.model_id = model_id


class ModelTable:
    """Resolves request model names (ids and aliases) to runtimes, building them on first use."""

    def __init__(
        self,
        config: Config,
        plugins: Plugins,
        served_models: Callable[[], list[str]],
        tokenizer_hint: Callable[[str], str | None] = lambda _model: None,
        unplaced_workers: Callable[[], list[Worker]] = list,
        *,
        prompt_limit: Callable[[str], PromptLimit | None] = lambda _model: None,
        worker_adapters: Callable[[str], Mapping[str, Adapter]] = lambda _model: {},
        tokenizer_fetch: Callable[[str], Awaitable[Path]] | None = None,
        adapters_refresh: Callable[[str], Awaitable[None]] | None = None,
    ) -> None:
        self._config = config
        self._plugins = plugins
        self._served = served_models
        self.tokenizer_hint = tokenizer_hint
        #: Registered workers whose model is not known yet: any requested model may be theirs.
        self.unplaced_workers = unplaced_workers
        #: The prompt limit of a model, from its workers.
        self.prompt_limit = prompt_limit
        #: The LoRA adapters a model's workers reported, by name.
        self.worker_adapters = worker_adapters
        #: Fetches a model's tokenizer from its workers into a local directory (``GetTokenizer``)
        #: when the router has no directory of its own for it; None: never.
        self.tokenizer_fetch = tokenizer_fetch
        #: Asks a model's workers again which adapters they have (rate-limited); None: never.
        self.adapters_refresh = adapters_refresh
        self._runtimes: dict[str, ModelRuntime] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._loading: dict[str, asyncio.Task[None]] = {}
        self._aliases = {
            alias: model_id for model_id, model in config.models.items() for alias in model.aliases
        }

    @property
    def created(self) -> int:
        """The ``created`` time of every model listed: when the router started."""
        return router_started()

    def with_config(self, config: Config) -> ModelTable:
        """A new table for ``config`` (a reload) that asks the same workers."""
        return ModelTable(
            config,
            self._plugins,
            self._served,
            self.tokenizer_hint,
            self.unplaced_workers,
            prompt_limit=self.prompt_limit,
            worker_adapters=self.worker_adapters,
            tokenizer_fetch=self.tokenizer_fetch,
            adapters_refresh=self.adapters_refresh,
        )

    def served(self) -> list[str]:
        """Model ids with at least one registered worker, sorted."""
        return sorted(set(self._served()))

    def resolve_name(self, requested: str | None) -> str:
        """The model id a request means; 400 when ambiguous, 404 when unknown."""
        if not requested and self._config.defaults.model:
            requested = self._config.defaults.model
        if requested:
            model_id = self._aliases.get(requested, requested)
            if model_id in self._served():
                return model_id
            self._raise_if_unplaced(f"no ready worker for model {model_id!r}")
            raise ApiError(
                404,
                f"model {requested!r} is not served here; served models: "
                f"{', '.join(self.served()) or 'none'}",
                param="model",
                code="model_not_found",
            )
        served = self.served()
        if len(served) == 1:
            return served[0]
        if not served:
            self._raise_if_unplaced("no ready worker")
            raise ApiError(503, "no model is being served: no workers are registered")
        raise ApiError(
            400,
            f"`model` is required: this router serves {', '.join(served)} "
            "(defaults.model in the config names the model of requests without one)",
            param="model",
        )

    def resolve_model(
        self, requested: str | None, lora_path: LoraPath | None = None
    ) -> tuple[str, str | None]:
        """The model id and LoRA adapter a request means: ``model`` is a model or
        ``<model>:<adapter>`` (SGLang's syntax), ``lora_path`` (SGLang's field) may name the
        adapter instead. 404 for an adapter the model does not have, like an unknown model."""
        named = _lora_path_adapter(lora_path)
        if requested and ":" in requested and not self._is_model(requested):
            for at in (i for i, ch in enumerate(requested) if ch == ":"):
                base = requested[:at]
                if self._is_model(base):
                    if named is not None and named != requested[at + 1 :]:
                        raise bad_request(
                            f"lora_path {named!r} differs from the adapter in model {requested!r}",
                            "lora_path",
                        )
                    named = requested[at + 1 :]
                    requested = base
                    break
        model_id = self.resolve_name(requested)
        if named is None:
            return model_id, None
        if named not in self.adapters(model_id):
            known = ", ".join(f"{model_id}:{a}" for a in self.adapters(model_id)) or "none"
            raise UnknownAdapter(
                model_id, f"model {model_id!r} has no LoRA adapter {named!r}; its adapters: {known}"
            )
        return model_id, named

    async def resolve_model_fresh(
        self, requested: str | None, lora_path: LoraPath | None = None
    ) -> tuple[str, str | None]:
        """:meth:`resolve_model`, asking the model's workers again for their adapters before
        answering that one is unknown: an adapter loaded at run time (through another serving
        process or replica, or on the worker itself) routes at once."""
        try:
            return self.resolve_model(requested, lora_path)
        except UnknownAdapter as exc:
            if self.adapters_refresh is None:
                raise
            await self.adapters_refresh(exc.model_id)
        return self.resolve_model(requested, lora_path)

    def _is_model(self, name: str) -> bool:
        return self._aliases.get(name, name) in self.served()

    def adapters(self, model_id: str) -> dict[str, str]:
        """The LoRA adapters of a model (configured, and reported by its workers): name →
        where it was loaded from (the name itself when unknown), sorted by name."""
        found = {name: name for name in self._model(model_id).adapter_configs()}
        for name, adapter in self.worker_adapters(model_id).items():
            if adapter.path or name not in found:
                found[name] = adapter.path or name
        return dict(sorted(found.items()))

    def lora_id(self, model_id: str, adapter: str) -> str:
        """The ``lora_id`` sent for ``adapter`` to workers that did not report their own id
        for it: the configured one, else the adapter's name."""
        configured = self._model(model_id).adapter_configs().get(adapter)
        return configured.worker_id if configured is not None else adapter

    def _model(self, model_id: str) -> ModelConfig:
        return self._config.models.get(model_id) or _NO_SETTINGS

    def _raise_if_unplaced(self, what: str) -> None:
        """503 rather than 404 while registered workers have not been reached: the model may be
        theirs. Workers are named by id (their addresses stay out of client answers)."""
        waiting = self.unplaced_workers()
        if waiting:
            names = ", ".join(f"{w.id} {w.state.value}" for w in waiting)
            raise ApiError(
                503, f"{what} ({len(waiting)} registered: {names})", code="no_available_workers"
            )

    async def runtime(self, model_id: str) -> ModelRuntime:
        """The runtime of a served model (tokenizer loaded off the event loop on first use)."""
        runtime = self._runtimes.get(model_id)
        if runtime is not None:
            return runtime
        lock = self._locks.setdefault(model_id, asyncio.Lock())
        async with lock:
            runtime = self._runtimes.get(model_id)
            if runtime is None:
                fetched = None
                if self.tokenizer_fetch is not None and self._tokenizer_path(model_id) is None:
                    fetched = await self.tokenizer_fetch(model_id)
                try:
                    runtime = await asyncio.to_thread(self.build, model_id, fetched)
                except ModelUnavailable as exc:
                    raise exc.answer() from exc
                self._runtimes[model_id] = runtime
        return runtime

    def ensure_loading(self, model_id: str) -> None:
        """Start loading a model's tokenizer in the background (a worker for it appeared), so
        readiness does not wait for the first request. Failures are logged; the first request
        for the model then answers with the reason."""
        if model_id in self._runtimes or model_id in self._loading:
            return
        task = asyncio.get_running_loop().create_task(self._load_quietly(model_id))
        self._loading[model_id] = task
        task.add_done_callback(lambda _t: self._loading.pop(model_id, None))

    async def _load_quietly(self, model_id: str) -> None:
        try:
            await self.runtime(model_id)
        except Exception as exc:
            cause = exc.__cause__ if isinstance(exc.__cause__, ModelUnavailable) else None
            message = str(cause or (exc.message if isinstance(exc, ApiError) else exc))
            log.warning("model %r: tokenizer not loaded: %s", model_id, message)

    async def preload(self, model_ids: list[str]) -> None:
        """Build runtimes now (start-up): broken model files fail start-up, not a request."""
        for model_id in model_ids:
            try:
                await self.runtime(model_id)
            except ApiError as exc:
                if isinstance(exc.__cause__, ModelUnavailable):
                    raise exc.__cause__ from None
                raise StartupError(f"model {model_id!r}: {exc.message}") from None

    def choice(self, model_id: str, kind: str) -> str | None:
        """The parser name configured or matched for a model (``kind``: ``tool_parsers`` or
        ``reasoning_parsers``)."""
        choices = choose_plugins(model_id, self._config, self._plugins)
        return choices.tool_parser if kind == "tool_parsers" else choices.reasoning_parser

    def loaded(self, model_id: str) -> bool:
        """True once the model's tokenizer is loaded."""
        return model_id in self._runtimes

    def _tokenizer_path(self, model_id: str) -> str | None:
        """The configured tokenizer directory of a model, else the path its workers report when
        it is a directory on this host; None: the router has none of its own."""
        model = self._config.models.get(model_id, ModelConfig())
        configured = model.tokenizer_path or self._config.defaults.tokenizer_path
        if configured:
            return configured
        hint = self.tokenizer_hint(model_id)
        return hint if hint and Path(hint).is_dir() else None

    def build(self, model_id: str, directory: Path | None = None) -> ModelRuntime:
        """Load the tokenizer (from ``directory``, else the model's own path) and resolve
        plugins for ``model_id``."""
        config = self._config
        model = config.models.get(model_id, ModelConfig())
        path = str(directory) if directory is not None else self._tokenizer_path(model_id)
        if path is None or not Path(path).is_dir():
            raise ApiError(
                503,
                f"no tokenizer for model {model_id!r}: set models.{model_id}.tokenizer_path "
                "(a local model directory) in the config",
            )
        try:
            tokenizer = ModelTokenizer.from_dir(path, model.chat_template)
        except ModelFilesError as exc:
            raise ModelUnavailable(
                model_id, _tokenizer_key(config, model_id), str(exc), _files_fix(model_id)
            ) from None
        choices = choose_plugins(model_id, config, self._plugins)
        runtime = ModelRuntime(
            model_id=model_id,
            tokenizer=tokenizer,
            stop_token_ids=tokenizer.eos_token_ids,
            array_parser=self._plugins.tool_parsers.factory(ARRAY_PARSER),
            prompt_limit=functools.partial(self.prompt_limit, model_id),
            facts=read_model_facts(tokenizer.files.directory),
        )
        facts = runtime.facts
        runtime.vision = model_vision(
            has_vision_config=facts.vision,
            model_type=facts.model_type,
            image_token_id=facts.image_token_id,
            template_media=tokenizer.media_kinds,
            directory=tokenizer.files.directory,
            config=model.images or config.images,
        )
        if choices.tool_parser is not None:
            factory = self._plugins.tool_parsers.factory(choices.tool_parser)
            runtime.tool_parser_name = choices.tool_parser
            runtime.tool_parser = factory
            call_format = getattr(factory, "call_format", None)
            runtime.tool_call_format = call_format() if callable(call_format) else None
            runtime.parsers_need_special_tokens |= bool(
                getattr(factory, "needs_special_tokens", False)
            )
        if choices.reasoning_parser is not None:
            rfactory = self._plugins.reasoning_parsers.factory(choices.reasoning_parser)
            runtime.reasoning_parser_name = choices.reasoning_parser
            runtime.reasoning_parser = rfactory
            runtime.reasoning_start_marker = str(getattr(rfactory, "start_marker", ""))
            runtime.reasoning_end_markers = tuple(getattr(rfactory, "end_markers", ()))
            runtime.parsers_need_special_tokens |= bool(
                getattr(rfactory, "needs_special_tokens", False)
            )
        if choices.chat_format is not None:
            runtime.chat_format_name = choices.chat_format
            runtime.chat_format = _make_chat_format(
                model_id,
                choices.chat_format,
                self._plugins.chat_formats.factory(choices.chat_format),
            )
        return runtime


def _make_chat_format(model_id: str, name: str, factory: Callable[[], ChatFormat]) -> ChatFormat:
    """The model's chat format; one that cannot start (a missing extra, no vocabulary) makes the
    model unavailable with its reason (a 503, or a failed start-up)."""
    try:
        return factory()
    except Exception as exc:
        reason = f"chat format {name!r} is unavailable: {exc}"
        raise ModelUnavailable(model_id, f"models.{model_id}.chat_format", reason, reason) from None


def _files_fix(model_id: str) -> str:
    """What a client is told when a model's files are not usable here (their path stays out)."""
    return (
        "its model directory is missing or incomplete on this router's host: set "
        f"models.{model_id}.tokenizer_path to a local copy of the model directory "
        "(tokenizer.json, tokenizer_config.json)"
    )


class ModelUnavailable(StartupError):
    """A model's runtime cannot be built. At start-up it names the config key to fix and the
    reason (paths included, for the operator); a request for the model is answered 503 with
    ``fix`` (no paths: clients see it)."""

    def __init__(self, model_id: str, key: str, reason: str, fix: str) -> None:
        super().__init__(f"{key}: {reason}")
        self.model_id = model_id
        self.fix = fix

    def answer(self) -> ApiError:
        """The 503 a request for the model gets."""
        return ApiError(
            503, f"model {self.model_id!r} cannot be served: {self.fix}", code="model_unavailable"
        )


def _tokenizer_key(config: Config, model_id: str) -> str:
    """Where the tokenizer path of ``model_id`` came from."""
    model = config.models.get(model_id)
    if model is not None and model.tokenizer_path:
        return f"models.{model_id}.tokenizer_path"
    if config.defaults.tokenizer_path:
        return "defaults.tokenizer_path"
    return f"model {model_id!r}: the model directory its workers report"

"""A router with no local tokenizer (no tokenizer path configured; the path its worker reports
is not a directory on this host) fetches the model's tokenizer and chat template from the
worker (GetTokenizer, sha256-checked, cached on disk by digest) and serves chat; a worker that
cannot send it makes the model a clear 503."""

from __future__ import annotations

import asyncio
import hashlib
import io
import zipfile
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from turnout import demo_model
from turnout.errors import ApiError
from turnout.sim import SimWorker
from turnout.tokenizer import ModelTokenizer
from turnout.wire import TokenizerBundle
from turnout.workers.registry import WorkerRegistry
from turnout.workers.remote_tokenizer import RemoteTokenizers, unpack_bundle
from turnout.workers.settings import WorkerSpec, WorkersSettings

from .harness import MODEL, Router, run_router

REMOTE_PATH = "/remote-host/models/turnout-demo"
MESSAGES = [{"role": "user", "content": "hello from far away"}]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("tokenizers")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TURNOUT_TOKENIZER_CACHE", str(path))
        yield path


@pytest.fixture(scope="module", params=["grpcio", "native"])
def router(request: pytest.FixtureRequest, cache_dir: Path) -> Iterator[Router]:
    with run_router(
        sims=1,
        model={"tokenizer_path": None},
        sim_kwargs={"transport": request.param, "reported_model_path": REMOTE_PATH},
    ) as running:
        yield running


def test_chat_with_the_tokenizer_of_the_worker(router: Router, cache_dir: Path) -> None:
    assert not Path(REMOTE_PATH).exists()
    client = openai.OpenAI(base_url=f"{router.base_url}/v1", api_key="x", max_retries=0)
    answer = client.chat.completions.create(model=MODEL, messages=MESSAGES)  # type: ignore[arg-type]
    assert answer.choices[0].message.content
    # The worker got the prompt the model's own chat template makes.
    local = ModelTokenizer.from_dir(demo_model.path())
    _, expected_ids = local.encode_chat(MESSAGES)  # type: ignore[arg-type]
    [request] = [r for r in router.sims[0].requests if r.request_id == answer.id]
    assert list(request.tokenized.input_ids) == expected_ids
    # Cached on disk under its digest.
    [entry] = [p for p in cache_dir.iterdir() if not p.name.startswith(".")]
    bundle = router.sims[0].servicer._tokenizer_archive
    assert bundle is not None
    assert entry.name == bundle.sha256
    assert (entry / "tokenizer.json").read_bytes() == (
        demo_model.path() / "tokenizer.json"
    ).read_bytes()


async def test_a_worker_without_get_tokenizer_makes_a_clear_503(tmp_path: Path) -> None:
    """The reason names the model, each worker's answer and the fix (the router logs it as
    one line when the worker appears, and answers it to requests for the model)."""
    sim = SimWorker(
        reported_model_path=REMOTE_PATH, serves_tokenizer=False, served_model_name=MODEL
    )
    async with sim:
        registry = WorkerRegistry(WorkersSettings(workers=[WorkerSpec(url=sim.url, model=MODEL)]))
        await registry.start()
        try:
            [worker] = registry.all()
            assert await registry.wait_ready(worker.id, 30)
            with pytest.raises(ApiError) as failed:
                await RemoteTokenizers(registry, tmp_path).fetch(MODEL)
        finally:
            await registry.stop()
    error = failed.value
    assert error.status == 503
    assert error.code == "tokenizer_unavailable"
    assert f"no tokenizer for model {MODEL!r}" in error.message
    assert f"worker {worker.id}: UNIMPLEMENTED" in error.message
    assert f"models.{MODEL}.tokenizer_path" in error.message
    assert await asyncio.to_thread(lambda: list(tmp_path.iterdir())) == []  # nothing unpacked


def _bundle(files: dict[str, bytes]) -> TokenizerBundle:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    data = buffer.getvalue()
    return TokenizerBundle(data, hashlib.sha256(data).hexdigest())


@pytest.mark.parametrize(
    ("files", "problem"),
    [
        ({"../escape.json": b"{}", "tokenizer.json": b"{}"}, "unexpected archive member"),
        ({"sub/tokenizer.json": b"{}"}, "unexpected archive member"),
        ({"readme.txt": b"hi"}, "no tokenizer.json"),
    ],
)
def test_unpack_refuses_archives_that_are_not_flat_tokenizer_files(
    tmp_path: Path, files: dict[str, bytes], problem: str
) -> None:
    with pytest.raises(ValueError, match=problem):
        unpack_bundle(_bundle(files), tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == []  # nothing half-unpacked is left


def test_unpack_is_once_per_digest(tmp_path: Path) -> None:
    bundle = _bundle({"tokenizer.json": b"{}", "tokenizer_config.json": b"{}"})
    first = unpack_bundle(bundle, tmp_path)
    (first / "tokenizer.json").write_bytes(b"kept")  # a second unpack does not redo it
    assert unpack_bundle(bundle, tmp_path) == first
    assert (first / "tokenizer.json").read_bytes() == b"kept"
    with pytest.raises(ValueError, match="not a zip"):
        unpack_bundle(TokenizerBundle(b"junk", hashlib.sha256(b"junk").hexdigest()), tmp_path)

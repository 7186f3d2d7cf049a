"""A scripted worker that a real router can register: it answers the info and health calls as a
simulated worker does (replaying that worker's answers), and ``Generate`` as the test decides.

It runs in a thread with its own event loop, since the router harness runs in another one.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator

from turnout.sim import SimWorker
from turnout.wire import WorkerClient, pb

from ._h2server import Handler, Request, ScriptedServer

__all__ = ["scripted_worker"]


async def _sim_answers() -> dict[str, bytes]:
    """What a simulated worker answers to every call but Generate."""
    async with SimWorker(port=0) as sim, WorkerClient(sim.url) as client:
        return {
            "HealthCheck": (await client.health_check()).SerializeToString(),
            "GetModelInfo": (await client.get_model_info()).SerializeToString(),
            "GetServerInfo": (await client.get_server_info()).SerializeToString(),
            "GetLoads": (await client.get_loads()).SerializeToString(),
            "ListLoadedLoRAAdapters": (
                await client.list_loaded_lora_adapters()
            ).SerializeToString(),
            "Abort": pb.AbortResponse().SerializeToString(),
        }


@contextlib.contextmanager
def scripted_worker(generate: Handler) -> Iterator[str]:
    """Run the worker; yields its URL. ``generate`` answers each Generate request."""
    loop = asyncio.new_event_loop()
    started = threading.Event()
    box: list[ScriptedServer] = []
    stop = asyncio.Event()

    async def main() -> None:
        answers = await _sim_answers()

        async def handler(request: Request) -> None:
            if request.method == "Generate":
                await generate(request)
            elif request.method in answers:
                request.reply(answers[request.method])
            else:  # e.g. SubscribeKvEvents: a worker without the call
                request.reply(status=12, message=f"{request.method} is not served")

        async with ScriptedServer(handler, answer_aborts=False) as server:
            box.append(server)
            started.set()
            await stop.wait()

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    try:
        assert started.wait(30), "scripted worker did not start"
        yield box[0].url
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(10)
        loop.close()

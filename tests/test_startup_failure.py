"""A lifespan start-up failure under real uvicorn and Litestar becomes one line, not a logged
traceback (``turnout serve`` prints it and exits 2)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

import pytest
import uvicorn
from litestar import Litestar

from turnout.errors import StartupError
from turnout.server.startup_failure import OneLineStartup


def _start(failure: BaseException) -> tuple[bool, str | None]:
    """Run an app whose lifespan raises ``failure`` under uvicorn; (started, kept failure)."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        raise failure
        yield  # pragma: no cover

    wrapped = OneLineStartup(Litestar(lifespan=[lifespan]))
    server = uvicorn.Server(
        uvicorn.Config(wrapped, host="127.0.0.1", port=0, lifespan="on", log_config=None)
    )
    with pytest.raises(SystemExit):  # uvicorn exits when start-up fails
        asyncio.run(server.serve())
    return server.started, wrapped.failure


def test_a_startup_error_in_the_lifespan_is_one_line_and_no_traceback(
    capfd: pytest.CaptureFixture[str],
) -> None:
    logging.getLogger("uvicorn.error").addHandler(handler := logging.StreamHandler())
    try:
        started, failure = _start(StartupError("models.m: the files\nare gone"))
    finally:
        logging.getLogger("uvicorn.error").removeHandler(handler)
    assert not started
    assert failure == "models.m: the files are gone"
    logged = capfd.readouterr().err
    assert "Application startup failed" in logged  # uvicorn's own line is there
    assert "Traceback" not in logged
    assert "the files" not in logged  # printed once, by turnout serve


def test_a_defect_in_the_lifespan_says_what_and_where() -> None:
    started, failure = _start(KeyError("x"))
    assert not started
    assert failure is not None
    assert failure.startswith("start-up failed: KeyError: 'x' (at test_startup_failure.py:")

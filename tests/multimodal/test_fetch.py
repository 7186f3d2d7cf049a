"""Image downloads over real HTTPS from a local server with a test certificate authority.

The server listens on 127.0.0.1, which the default address check refuses; the tests that
download pass the fetcher an address filter taking loopback (a constructor argument the config
cannot set) and the test CA.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from turnout.config import ImagesConfig
from turnout.multimodal import (
    BadImage,
    ImageFetcher,
    ImageFetchFailed,
    ImageNotAllowed,
    ImageTooLarge,
    load_images,
)
from turnout.multimodal.addresses import IPAddress

from .helpers import image_bytes
from .images_server import Authority, ImageServer, make_authority, respond, serve_images

PNG = image_bytes("PNG", (40, 30))


def loopback(address: IPAddress) -> bool:
    return address.is_loopback


@pytest.fixture(scope="module")
def authority(tmp_path_factory: pytest.TempPathFactory) -> Authority:
    return make_authority(tmp_path_factory.mktemp("ca"))


async def png(path: str, writer: asyncio.StreamWriter) -> None:
    await respond(writer, 200, PNG, {"Content-Type": "image/png"})


async def chunked_png(path: str, writer: asyncio.StreamWriter) -> None:
    writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
    for start in range(0, len(PNG), 50):
        piece = PNG[start : start + 50]
        writer.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
    writer.write(b"0\r\n\r\n")
    await writer.drain()


async def endless(path: str, writer: asyncio.StreamWriter) -> None:
    writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
    chunk = b"x" * 4096
    for _ in range(10_000):  # 40 MB unless the client stops reading
        writer.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
        await writer.drain()


async def claims_huge(path: str, writer: asyncio.StreamWriter) -> None:
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 999999999\r\nConnection: close\r\n\r\n")
    await writer.drain()


async def stalls(path: str, writer: asyncio.StreamWriter) -> None:
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\nonly a little")
    await writer.drain()
    await asyncio.sleep(30)


def redirect(to: str) -> Any:
    async def handler(path: str, writer: asyncio.StreamWriter) -> None:
        await respond(writer, 302, headers={"Location": to.replace("{port}", str(PORT[0]))})

    return handler


PORT = [0]  # the server's port, for redirect targets
ROUTES = {
    "/cat.png": png,
    "/chunked.png": chunked_png,
    "/endless": endless,
    "/huge": claims_huge,
    "/slow": stalls,
    "/relative": redirect("/cat.png"),
    "/hop1": redirect("https://localhost:{port}/relative"),
    "/loop": redirect("/loop"),
    "/to-ip": redirect("https://127.0.0.1:{port}/cat.png"),
    "/to-http": redirect("http://localhost:{port}/cat.png"),
    "/not-image": png,  # replaced below
}


async def not_image(path: str, writer: asyncio.StreamWriter) -> None:
    await respond(writer, 200, b"<html>hello</html>", {"Content-Type": "image/png"})


ROUTES["/not-image"] = not_image


@pytest.fixture
async def server(authority: Authority) -> AsyncIterator[ImageServer]:
    async with serve_images(authority, ROUTES) as running:
        PORT[0] = running.port
        yield running


def fetcher(authority: Authority, **config: Any) -> ImageFetcher:
    settings = ImagesConfig(allowed_domains=["localhost"], **config)
    return ImageFetcher(settings, ssl_context=authority.client_context(), accept=loopback)


async def test_downloads_an_image(server: ImageServer, authority: Authority) -> None:
    got = await fetcher(authority).fetch(server.url("/cat.png"))
    assert got.data == PNG
    assert got.content_type == "image/png"
    chunked = await fetcher(authority).fetch(server.url("/chunked.png"))
    assert chunked.data == PNG
    [loaded] = await load_images(
        [server.url("/cat.png")], fetcher(authority).config, fetcher(authority)
    )
    assert loaded.size == (40, 30)
    assert loaded.source == server.url("/cat.png")


async def test_loopback_is_refused_after_resolution(
    server: ImageServer, authority: Authority
) -> None:
    # the production address filter, with the host allowed by name: the resolved address
    # (127.0.0.1) is what is refused, before any connection
    settings = ImagesConfig(allowed_domains=["localhost", "127.0.0.1"])
    strict = ImageFetcher(settings, ssl_context=authority.client_context())
    for url in (server.url("/cat.png"), server.url("/cat.png", host="127.0.0.1")):
        with pytest.raises(ImageNotAllowed, match="non-public address"):
            await strict.fetch(url)
    assert server.connections == 0


async def test_connects_to_the_address_it_checked(
    server: ImageServer, authority: Authority, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DNS rebinding: a second resolution would answer a private address; the fetcher resolves
    once per URL and connects to the address it checked."""
    loop = asyncio.get_running_loop()
    real = loop.getaddrinfo
    calls: list[str] = []

    async def rebinding(host: str, *args: Any, **kwargs: Any) -> Any:
        calls.append(host)
        if len(calls) == 1:
            return await real("127.0.0.1", *args, **kwargs)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.0.0.1", args[0]))]

    monkeypatch.setattr(loop, "getaddrinfo", rebinding)
    settings = ImagesConfig(allowed_domains=["images.example"])
    checked: list[str] = []

    def accept(address: IPAddress) -> bool:
        checked.append(str(address))
        return address.is_loopback

    tls = authority.client_context()
    tls.check_hostname = False  # the test certificate names localhost, not images.example
    pinned = ImageFetcher(settings, ssl_context=tls, accept=accept)
    got = await pinned.fetch(f"https://images.example:{server.port}/cat.png")
    assert got.data == PNG
    assert calls == ["images.example"]
    assert checked == ["127.0.0.1"]


async def test_redirects_are_followed_and_rechecked(
    server: ImageServer, authority: Authority
) -> None:
    assert (await fetcher(authority).fetch(server.url("/hop1"))).data == PNG
    assert server.requests[-3:] == ["/hop1", "/relative", "/cat.png"]
    with pytest.raises(ImageFetchFailed, match="more than 1 times"):
        await fetcher(authority, max_redirects=1).fetch(server.url("/hop1"))
    with pytest.raises(ImageFetchFailed, match="redirects more than"):
        await fetcher(authority).fetch(server.url("/loop"))
    with pytest.raises(ImageNotAllowed, match=r"images from '127\.0\.0\.1' are not allowed"):
        await fetcher(authority).fetch(server.url("/to-ip"))
    with pytest.raises(ImageNotAllowed, match="must be https"):
        await fetcher(authority).fetch(server.url("/to-http"))
    before = len(server.requests)
    with pytest.raises(ImageFetchFailed):
        await fetcher(authority, max_redirects=0).fetch(server.url("/relative"))
    assert server.requests[before:] == ["/relative"]


async def test_size_bounds(server: ImageServer, authority: Authority) -> None:
    with pytest.raises(ImageTooLarge, match="larger than 1000 bytes"):
        await fetcher(authority, max_bytes=1000).fetch(server.url("/huge"))
    started = time.monotonic()
    with pytest.raises(ImageTooLarge, match="larger than 100000 bytes"):
        await fetcher(authority, max_bytes=100_000).fetch(server.url("/endless"))
    assert time.monotonic() - started < 20
    assert (await fetcher(authority, max_bytes=len(PNG)).fetch(server.url("/cat.png"))).data


async def test_deadline(server: ImageServer, authority: Authority) -> None:
    started = time.monotonic()
    with pytest.raises(ImageFetchFailed, match=r"within 0\.5s"):
        await fetcher(authority, fetch_timeout_s=0.5).fetch(server.url("/slow"))
    assert time.monotonic() - started < 10


async def test_http_errors_and_bad_content(server: ImageServer, authority: Authority) -> None:
    with pytest.raises(ImageFetchFailed, match="HTTP 404"):
        await fetcher(authority).fetch(server.url("/missing.png"))
    settings = ImagesConfig(allowed_domains=["localhost"])
    with pytest.raises(BadImage, match=r"^image 0: not an image"):
        await load_images([server.url("/not-image")], settings, fetcher(authority))


async def test_untrusted_certificates_are_refused(server: ImageServer) -> None:
    settings = ImagesConfig(allowed_domains=["localhost"])
    default_trust = ImageFetcher(settings, accept=loopback)  # the system CAs only
    with pytest.raises(ImageFetchFailed, match="certificate is not valid"):
        await default_trust.fetch(server.url("/cat.png"))


async def test_urls_refused_before_the_network(authority: Authority) -> None:
    checker = fetcher(authority)
    for url, message in [
        ("http://localhost/cat.png", "must be https"),
        ("ftp://localhost/cat.png", "must be https"),
        ("https://user:pw@localhost/cat.png", "credentials"),
        ("https://other.example/cat.png", "'other.example' are not allowed"),
        ("https:///cat.png", "no host"),
        ("https://localhost:99999/cat.png", "malformed"),
    ]:
        with pytest.raises(ImageNotAllowed, match=message):
            checker.check_url(url)


def test_nothing_is_allowed_by_default() -> None:
    with pytest.raises(ImageNotAllowed, match="not allowed on this server"):
        ImageFetcher(ImagesConfig()).check_url("https://upload.wikimedia.org/cat.png")


async def test_a_host_with_one_refused_address_is_not_fetched(
    server: ImageServer, authority: Authority, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The host resolves to the image server's address (taken by this fetcher's filter) and
    to a private one: refused before any connection, not fetched from the address that
    passes."""
    loop = asyncio.get_running_loop()

    async def two_records(host: str, port: int, *args: Any, **kwargs: Any) -> Any:
        return [
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port)),
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.0.0.1", port)),
        ]

    monkeypatch.setattr(loop, "getaddrinfo", two_records)
    with pytest.raises(ImageNotAllowed, match="'localhost' resolves to a non-public address"):
        await fetcher(authority).fetch(server.url("/cat.png"))
    assert server.connections == 0


async def test_a_redirect_to_a_host_with_one_refused_address_is_not_followed(
    server: ImageServer, authority: Authority, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same for a redirect target: the first answer is the server's address alone, the
    second (for the redirect's target) adds a private one; the redirect is not followed."""
    loop = asyncio.get_running_loop()
    answers: list[list[str]] = [["127.0.0.1"], ["127.0.0.1", "10.0.0.1"]]

    async def changing(host: str, port: int, *args: Any, **kwargs: Any) -> Any:
        addresses = answers.pop(0) if len(answers) > 1 else answers[0]
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port)) for a in addresses]

    monkeypatch.setattr(loop, "getaddrinfo", changing)
    with pytest.raises(ImageNotAllowed, match="non-public address"):
        await fetcher(authority).fetch(server.url("/relative"))
    assert server.requests == ["/relative"]

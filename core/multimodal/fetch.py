"""Download an image over ``https`` from a host the operator allows, within bounds.

Each URL (the first and every redirect target) is checked the same way: ``https``, no
credentials, a listed host, every resolved address public. The connection goes to the address
that was checked (TLS still verifies the certificate against the host name), so a DNS answer
that changes between the check and the connection cannot redirect it. The body is read up to
``max_bytes`` (a larger ``Content-Length`` is refused before reading), and the whole download,
redirects included, has one deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final
from urllib.parse import urljoin, urlsplit

import h11

import turnout
from turnout.config import ImagesConfig
from turnout.multimodal.addresses import (
    AddressFilter,
    IPAddress,
    host_allowed,
    is_public_address,
    resolve_public,
)
from turnout.multimodal.errors import ImageFetchFailed, ImageNotAllowed, ImageTooLarge

__all__ = ["FetchedImage", "ImageFetcher"]

_REDIRECTS: Final = frozenset({301, 302, 303, 307, 308})
_READ_CHUNK: Final = 64 * 1024
_USER_AGENT: Final = f"turnout/{turnout.__version__} (image fetch)"


@dataclass(frozen=True, slots=True)
class FetchedImage:
    """The bytes of a downloaded image and where they finally came from."""

    data: bytes
    url: str
    content_type: str | None


@dataclass(frozen=True, slots=True)
class _Target:
    host: str
    port: int
    path: str


class ImageFetcher:
    """Fetches image URLs under an :class:`ImagesConfig`.

    ``ssl_context`` and ``accept`` (which resolved addresses may be reached) exist for tests
    that serve images from a local server with their own certificate authority; the config
    cannot set them.
    """

    def __init__(
        self,
        config: ImagesConfig,
        *,
        ssl_context: ssl.SSLContext | None = None,
        accept: AddressFilter = is_public_address,
    ) -> None:
        self.config = config
        self._ssl = ssl_context or ssl.create_default_context()
        self._accept = accept

    def check_url(self, url: str) -> None:
        """:class:`ImageNotAllowed` unless ``url`` may be fetched (before any network use)."""
        self._target(url)

    async def fetch(self, url: str) -> FetchedImage:
        """The image at ``url`` (redirects followed and re-checked); :class:`ImageError`\\ s."""
        timeout = self.config.fetch_timeout_s
        try:
            async with asyncio.timeout(timeout):
                return await self._fetch(url)
        except TimeoutError:
            raise ImageFetchFailed(f"the image URL did not answer within {timeout:g}s") from None

    async def _fetch(self, url: str) -> FetchedImage:
        redirects = 0
        while True:
            target = self._target(url)
            addresses = await resolve_public(target.host, target.port, accept=self._accept)
            status, location, content_type, body = await self._get(target, addresses)
            if status in _REDIRECTS and location is not None:
                if redirects >= self.config.max_redirects:
                    raise ImageFetchFailed(
                        f"the image URL redirects more than {self.config.max_redirects} times"
                    )
                redirects += 1
                url = urljoin(url, location)
                continue
            if status != 200:
                raise ImageFetchFailed(f"the image URL answered HTTP {status}")
            return FetchedImage(body, url, content_type)

    def _target(self, url: str) -> _Target:
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError:
            raise ImageNotAllowed("the image URL is malformed") from None
        if parts.scheme.lower() != "https":
            raise ImageNotAllowed("image URLs must be https (or data: URIs)")
        if parts.username is not None or parts.password is not None:
            raise ImageNotAllowed("image URLs may not carry credentials")
        host = parts.hostname
        if not host:
            raise ImageNotAllowed("the image URL has no host")
        if not host_allowed(host, self.config.allowed_domains):
            raise ImageNotAllowed(f"images from {host!r} are not allowed on this server")
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        return _Target(host, port or 443, path)

    async def _get(
        self, target: _Target, addresses: Sequence[IPAddress]
    ) -> tuple[int, str | None, str | None, bytes]:
        reader, writer = await self._connect(target, addresses)
        try:
            return await self._exchange(target, reader, writer)
        except (h11.ProtocolError, ConnectionError, ssl.SSLError) as exc:
            raise ImageFetchFailed(f"the image URL's server broke the exchange: {exc}") from None
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _connect(
        self, target: _Target, addresses: Sequence[IPAddress]
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        failure = "no address"
        for address in addresses:  # each one already checked: connect to exactly these
            try:
                return await asyncio.open_connection(
                    str(address), target.port, ssl=self._ssl, server_hostname=target.host
                )
            except ssl.SSLCertVerificationError as exc:
                raise ImageFetchFailed(
                    f"the image URL's certificate is not valid: {exc.verify_message}"
                ) from None
            except (OSError, ssl.SSLError) as exc:
                failure = type(exc).__name__
        raise ImageFetchFailed(f"cannot connect to the image URL's host ({failure})")

    async def _exchange(
        self, target: _Target, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> tuple[int, str | None, str | None, bytes]:
        limit = self.config.max_bytes
        conn = h11.Connection(our_role=h11.CLIENT)
        host = target.host if target.port == 443 else f"{target.host}:{target.port}"
        request = h11.Request(
            method="GET",
            target=target.path,
            headers=[
                ("Host", host),
                ("User-Agent", _USER_AGENT),
                ("Accept", "image/*"),
                ("Accept-Encoding", "identity"),
                ("Connection", "close"),
            ],
        )
        writer.write(conn.send(request) + conn.send(h11.EndOfMessage()))
        await writer.drain()
        status = 0
        location = content_type = None
        body = bytearray()
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await reader.read(_READ_CHUNK))
                continue
            if isinstance(event, h11.Response):
                status = event.status_code
                headers = {name.lower(): value for name, value in event.headers}
                location = _header(headers, b"location")
                content_type = _header(headers, b"content-type")
                length = _header(headers, b"content-length")
                if status != 200:
                    return status, location, content_type, b""
                if length is not None and length.isdigit() and int(length) > limit:
                    raise ImageTooLarge(f"the image is larger than {limit} bytes")
            elif isinstance(event, h11.Data):
                body += event.data
                if len(body) > limit:
                    raise ImageTooLarge(f"the image is larger than {limit} bytes")
            elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                return status, location, content_type, bytes(body)


def _header(headers: dict[bytes, bytes], name: bytes) -> str | None:
    value = headers.get(name)
    return None if value is None else value.decode("latin-1")

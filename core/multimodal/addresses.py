"""Which hosts and addresses image URLs may reach.

A URL's host must be one the operator lists; every address it resolves to must be public.
The check runs on the resolved addresses (a public name may point at ``127.0.0.1``), and the
caller connects to exactly the address checked, so a second, different DNS answer (DNS
rebinding) is never used.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Callable, Sequence
from typing import Final

from turnout.multimodal.errors import ImageFetchFailed, ImageNotAllowed

__all__ = ["AddressFilter", "host_allowed", "is_public_address", "resolve_public"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
#: Decides whether a resolved address may be connected to.
AddressFilter = Callable[[IPAddress], bool]

_GLOBAL_UNICAST: Final = ipaddress.ip_network("2000::/3")
_IPV4_MAPPED: Final = ipaddress.ip_network("::ffff:0:0/96")
#: The well-known NAT64 prefix (RFC 6052): reaches the IPv4 address in its last 32 bits.
_NAT64: Final = ipaddress.ip_network("64:ff9b::/96")
#: Inside the global unicast space but not public, and unknown to some Python versions.
_NOT_PUBLIC_V6: Final = (ipaddress.ip_network("3fff::/20"),)  # documentation (RFC 9637)


def _public_ipv6(address: ipaddress.IPv6Address) -> bool:
    """Public: an IPv4-mapped or well-known NAT64 address around a public IPv4 address, or a
    global unicast address (2000::/3) that is not documentation, benchmarking… and does not
    wrap a non-public IPv4 address (6to4, Teredo).

    Everything outside 2000::/3 is refused, whatever Python's ``is_global`` says of it: the
    IPv4-compatible ``::a.b.c.d`` (``::7f00:1`` is 127.0.0.1), the IPv4-translated
    ``::ffff:0:a.b.c.d``, local-use NAT64 (64:ff9b:1::/48, RFC 8215), site-local (fec0::/10),
    unique-local, link-local, multicast and what is reserved now or later."""
    if address.scope_id:
        return False
    if address in _IPV4_MAPPED or address in _NAT64:
        return is_public_address(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    if address not in _GLOBAL_UNICAST or any(address in net for net in _NOT_PUBLIC_V6):
        return False
    inner = address.sixtofour or (address.teredo[1] if address.teredo else None)
    if inner is not None and not is_public_address(inner):
        return False
    return address.is_global


def is_public_address(address: IPAddress) -> bool:
    """A globally routable unicast address: not private, loopback, link-local, shared (CGNAT),
    reserved, multicast or unspecified, also when wrapped in an IPv6 address."""
    if isinstance(address, ipaddress.IPv6Address):
        return _public_ipv6(address)
    return address.is_global and not address.is_multicast


def _normalise_host(host: str) -> str:
    host = host.rstrip(".").lower()
    try:
        return host.encode("idna").decode("ascii")
    except UnicodeError:
        return host


def host_allowed(host: str, allowed_domains: Sequence[str]) -> bool:
    """``host`` is listed, or is a subdomain of a listed ``*.domain``."""
    name = _normalise_host(host)
    for entry in allowed_domains:
        if entry.startswith("*."):
            if name.endswith("." + _normalise_host(entry[2:])):
                return True
        elif name == _normalise_host(entry):
            return True
    return False


async def resolve_public(
    host: str, port: int, *, accept: AddressFilter = is_public_address
) -> list[IPAddress]:
    """The addresses of ``host``; :class:`ImageNotAllowed` unless ``accept`` takes every one.

    Every address must pass, not just one: a name that also points inside the network is
    refused whichever address a connection would have used.
    """
    try:
        literal = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        literal = None
    if literal is not None:
        found: list[IPAddress] = [literal]
    else:
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(
                host, port, type=socket.SOCK_STREAM
            )
        except (OSError, UnicodeError):
            raise ImageFetchFailed(f"cannot resolve the image URL's host {host!r}") from None
        found = []
        for info in infos:
            raw = str(info[4][0]).split("%", 1)[0]
            address = ipaddress.ip_address(raw)
            if address not in found:
                found.append(address)
        if not found:
            raise ImageFetchFailed(f"the image URL's host {host!r} has no address")
    for address in found:
        if not accept(address):
            raise ImageNotAllowed(f"the image URL's host {host!r} resolves to a non-public address")
    return found

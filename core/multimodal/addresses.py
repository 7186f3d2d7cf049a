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

_NAT64: Final = ipaddress.ip_network("64:ff9b::/96")


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one carries (mapped, 6to4, Teredo, NAT64), if any."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def is_public_address(address: IPAddress) -> bool:
    """A globally routable unicast address: not private, loopback, link-local, shared (CGNAT),
    reserved, multicast or unspecified, also when wrapped in an IPv6 address."""
    if isinstance(address, ipaddress.IPv6Address):
        inner = _embedded_ipv4(address)
        if inner is not None and not is_public_address(inner):
            return False
        if address.scope_id:
            return False
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

"""Which addresses image URLs may reach: checked on real resolutions, wrapped forms included."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from typing import Any

import pytest

from turnout.multimodal import ImageFetchFailed, ImageNotAllowed
from turnout.multimodal.addresses import host_allowed, is_public_address, resolve_public


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "127.5.6.7",
        "10.1.2.3",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",  # cloud metadata
        "100.64.0.1",  # carrier-grade NAT
        "0.0.0.0",
        "255.255.255.255",
        "224.0.0.1",
        "192.0.2.10",  # documentation range
        "198.18.0.1",  # benchmarking
        "240.0.0.1",  # reserved
        "::",
        "::1",
        "fe80::1",
        "fc00::1",
        "ff02::1",
        "::ffff:127.0.0.1",  # IPv4-mapped
        "::ffff:10.0.0.1",
        "2002:7f00:1::1",  # 6to4 around 127.0.0.1
        "2002:a9fe:a9fe::1",  # 6to4 around 169.254.169.254
        "64:ff9b::a00:1",  # NAT64 around 10.0.0.1
        "2001:db8::1",  # documentation
        # IPv6 forms outside the global unicast space that Python calls global
        "::7f00:1",  # IPv4-compatible 127.0.0.1
        "::a9fe:a9fe",  # IPv4-compatible 169.254.169.254
        "::808:808",  # IPv4-compatible, even around a public address: deprecated
        "::ffff:0:0",  # IPv4-mapped 0.0.0.0
        "::ffff:0:7f00:1",  # IPv4-translated 127.0.0.1 (SIIT)
        "::ffff:0:808:808",
        "64:ff9b:1::7f00:1",  # local-use NAT64 (RFC 8215)
        "64:ff9b:1:7f00:1::",
        "fec0::1",  # site-local
        "feff::1",
        "5f00::1",  # SRv6 SIDs
        "3fff::1",  # documentation (RFC 9637)
        "2002:a00:1::1",  # 6to4 around 10.0.0.1
    ],
)
def test_non_public_addresses_are_refused(address: str) -> None:
    assert not is_public_address(ipaddress.ip_address(address))


@pytest.mark.parametrize(
    "address",
    [
        "8.8.8.8",
        "1.1.1.1",
        "151.101.1.69",
        "2606:4700:4700::1111",
        "2a00:1450:4001:81b::200e",
        "::ffff:8.8.8.8",
        "64:ff9b::808:808",  # well-known NAT64 around 8.8.8.8 (IPv6-only networks)
        "2002:808:808::1",  # 6to4 around 8.8.8.8
    ],
)
def test_public_addresses_pass(address: str) -> None:
    assert is_public_address(ipaddress.ip_address(address))


async def test_names_are_checked_after_resolution() -> None:
    # a real resolution of a name that points at the loopback interface
    with pytest.raises(ImageNotAllowed, match="'localhost' resolves to a non-public address"):
        await resolve_public("localhost", 443)
    with pytest.raises(ImageNotAllowed):
        await resolve_public("127.0.0.1", 443)
    for literal in ("[::1]", "[::7f00:1]", "[::ffff:0:a00:1]", "[fec0::1]", "[64:ff9b:1::a00:1]"):
        with pytest.raises(ImageNotAllowed):
            await resolve_public(literal, 443)
    accepted = await resolve_public("localhost", 443, accept=lambda a: a.is_loopback)
    assert accepted
    assert all(a.is_loopback for a in accepted)


async def test_unresolvable_hosts_fail_to_fetch() -> None:
    with pytest.raises(ImageFetchFailed, match="cannot resolve"):
        await resolve_public("no-such-host.invalid", 443)


def test_allowed_domains() -> None:
    allowed = ["cdn.example.com", "*.images.example.org", "Bücher.example"]
    assert host_allowed("cdn.example.com", allowed)
    assert host_allowed("CDN.Example.COM.", allowed)
    assert not host_allowed("evil-cdn.example.com", allowed)
    assert not host_allowed("cdn.example.com.evil.net", allowed)
    assert not host_allowed("example.com", allowed)
    assert host_allowed("a.images.example.org", allowed)
    assert host_allowed("a.b.images.example.org", allowed)
    assert not host_allowed("images.example.org", allowed)  # *. means subdomains only
    assert not host_allowed("ximages.example.org", allowed)
    assert host_allowed("xn--bcher-kva.example", allowed)  # IDNA form of Bücher
    assert not host_allowed("anything", [])


def resolving_to(monkeypatch: pytest.MonkeyPatch, *addresses: str) -> None:
    """The running loop's resolver answers ``addresses`` for every name (as a DNS server
    with several A/AAAA records would)."""

    async def answer(host: str, port: int, *args: Any, **kwargs: Any) -> Any:
        return [
            (
                socket.AF_INET6 if ":" in a else socket.AF_INET,
                socket.SOCK_STREAM,
                6,
                "",
                (a, port),
            )
            for a in addresses
        ]

    monkeypatch.setattr(asyncio.get_running_loop(), "getaddrinfo", answer)


@pytest.mark.parametrize("private", ["10.0.0.7", "127.0.0.1", "::7f00:1", "fec0::1"])
async def test_one_private_address_among_public_ones_refuses_the_host(
    monkeypatch: pytest.MonkeyPatch, private: str
) -> None:
    """Every address must be public, not one: which one a connection would use is not the
    checker's to decide (and the next resolution may order them differently)."""
    resolving_to(monkeypatch, "93.184.215.14", private, "2606:4700:4700::1111")
    with pytest.raises(ImageNotAllowed, match=r"'cdn\.example' resolves to a non-public address"):
        await resolve_public("cdn.example", 443)


async def test_several_public_addresses_are_all_returned(monkeypatch: pytest.MonkeyPatch) -> None:
    resolving_to(monkeypatch, "93.184.215.14", "2606:4700:4700::1111", "93.184.215.14")
    found = await resolve_public("cdn.example", 443)
    assert [str(a) for a in found] == ["93.184.215.14", "2606:4700:4700::1111"]

"""Which addresses image URLs may reach: checked on real resolutions, wrapped forms included."""

from __future__ import annotations

import ipaddress

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
    ],
)
def test_non_public_addresses_are_refused(address: str) -> None:
    assert not is_public_address(ipaddress.ip_address(address))


@pytest.mark.parametrize(
    "address", ["8.8.8.8", "1.1.1.1", "151.101.1.69", "2606:4700:4700::1111", "::ffff:8.8.8.8"]
)
def test_public_addresses_pass(address: str) -> None:
    assert is_public_address(ipaddress.ip_address(address))


async def test_names_are_checked_after_resolution() -> None:
    # a real resolution of a name that points at the loopback interface
    with pytest.raises(ImageNotAllowed, match="'localhost' resolves to a non-public address"):
        await resolve_public("localhost", 443)
    with pytest.raises(ImageNotAllowed):
        await resolve_public("127.0.0.1", 443)
    with pytest.raises(ImageNotAllowed):
        await resolve_public("[::1]", 443)
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

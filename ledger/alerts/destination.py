"""Where a webhook may go: vetted when an alert is set, and again before every delivery.

A webhook is called from inside the deployment, so a URL chosen by an admin user must
not reach what only the deployment can reach (the cloud metadata service, the database,
an admin port on loopback). The policy:

- the scheme is `https`; `http` only with LEDGER_WEBHOOK_ALLOW_HTTP;
- the host is resolved (`Resolve`: the system resolver, or a test's), and EVERY address
  it resolves to must be allowed, else the destination is refused. IP literals resolve
  to themselves as the operating system reads them, so `2130706433`, `0177.0.0.1` and
  `0x7f.1` are 127.0.0.1 and refused like it;
- allowed: a global unicast address (`ipaddress`'s `is_global`, and none of loopback,
  private, link-local, CGNAT 100.64/10, reserved, documentation or benchmark ranges), or
  an address inside LEDGER_WEBHOOK_ALLOWED_NETWORKS (CIDRs: internal receivers).
  Multicast and unspecified addresses (0.0.0.0, ::) are refused even inside an allowed
  network: no receiver lives there. IPv4 carried in IPv6 (mapped `::ffff:a.b.c.d`,
  6to4 `2002::/16`, NAT64 `64:ff9b::/96`) is judged as that IPv4 address;
- a vetted `Target` carries the addresses that were checked: the delivery connects to
  them and never resolves the name again, so a DNS answer that changes between the check
  and the connection (rebinding) cannot redirect it.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from ledger.settings import Settings

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
# host, port -> the addresses (text) a connection to host:port could go to
Resolve = Callable[[str, int], Sequence[str]]

DEFAULT_PORTS = {"http": 80, "https": 443}
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


def system_resolve(host: str, port: int) -> list[str]:
    """Every address the operating system's resolver gives for `host` (TCP)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    return [str(info[4][0]) for info in infos]


class DestinationRefused(Exception):
    """The URL may not be called; `message` says why (without the resolved address)."""

    def __init__(self, message: str, detail: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail or message  # with the address: for logs and finance/admin


@dataclass(frozen=True)
class Target:
    """A vetted destination: connect to `addresses` only; `host` is for Host, SNI and the certificate."""

    scheme: str
    host: str
    port: int
    path: str
    addresses: tuple[IPAddress, ...]


def embedded_ipv4(address: IPAddress) -> IPAddress:
    """The IPv4 address an IPv6 one carries (mapped, 6to4, NAT64), else the address itself."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return address.ipv4_mapped
        if address.sixtofour is not None:
            return address.sixtofour
        if address in _NAT64:
            return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address


def address_class(address: IPAddress) -> str | None:
    """Why `address` is not a public unicast address (e.g. "loopback"), or None if it is."""
    checks = (
        ("unspecified", address.is_unspecified),
        ("loopback", address.is_loopback),
        ("link-local", address.is_link_local),
        ("multicast", address.is_multicast),
        ("reserved", address.is_reserved),
        ("private", address.is_private),
    )
    for name, hit in checks:
        if hit:
            return name
    if not address.is_global:
        return "non-global (shared or special-purpose)"
    return None


@dataclass(frozen=True)
class DestinationPolicy:
    allow_http: bool = False
    allowed_networks: tuple[Network, ...] = ()

    @classmethod
    def of(cls, settings: Settings) -> DestinationPolicy:
        return cls(allow_http=settings.webhook_allow_http, allowed_networks=settings.webhook_allowed_networks)

    def refusal(self, address: IPAddress) -> str | None:
        """Why a webhook may not connect to `address`, or None if it may."""
        judged = embedded_ipv4(address)
        if judged.is_multicast or judged.is_unspecified:
            return "multicast" if judged.is_multicast else "unspecified"
        if any(judged.version == net.version and judged in net for net in self.allowed_networks):
            return None
        return address_class(judged)

    def check_scheme(self, scheme: str) -> None:
        if scheme == "http" and not self.allow_http:
            raise DestinationRefused("webhook_url must be https (http is off: LEDGER_WEBHOOK_ALLOW_HTTP)")
        if scheme not in DEFAULT_PORTS:
            raise DestinationRefused("webhook_url must be an https:// URL")

    def vet(self, url: str, resolve: Resolve) -> Target:
        """The URL's destination with its checked addresses; `DestinationRefused` otherwise."""
        parts = urlsplit(url)
        self.check_scheme(parts.scheme)
        host = parts.hostname or ""
        port = parts.port or DEFAULT_PORTS[parts.scheme]
        try:
            answers = resolve(host, port)
            addresses = tuple(ipaddress.ip_address(answer) for answer in answers)
        except (OSError, UnicodeError, ValueError) as error:
            raise DestinationRefused(
                "webhook_url's host does not resolve", f"{host} does not resolve: {error}"
            ) from error
        if not addresses:
            raise DestinationRefused("webhook_url's host does not resolve", f"{host} has no address")
        for address in addresses:
            why = self.refusal(address)
            if why is not None:
                raise DestinationRefused(
                    f"webhook_url's host resolves to a {why} address; a receiver must be public "
                    "or inside LEDGER_WEBHOOK_ALLOWED_NETWORKS",
                    f"{host} resolves to {address}, a {why} address",
                )
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        return Target(parts.scheme, host, port, path, addresses)

"""The SSRF guard: which addresses and URLs an upstream call may reach.

The rule is "globally routable, or listed in ALLOWED_TOOL_CIDRS"; nothing else. It is decided
on addresses, never on names: a name is resolved first (every answer must pass), and the
transport then connects to the checked address itself, so DNS cannot change between the
check and the connect. See RELIABILITY.md SSRF-01/02/04/07/10 and anchors A1-A5.

One narrower door exists for a URL the operator configured for the appliance's own use (the
embeddings endpoint): ``EgressPolicy.for_operator_origin`` builds a policy of its own that
opens that origin and nothing else, so tool calls, whose policy is another object, never
gain from it (see ``gateway/semantic_egress.py``).
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import re
import socket
from collections.abc import Awaitable, Callable, Iterable
from typing import TypeAlias

import httpx

from appliance.errors import UpstreamError

Address: TypeAlias = ipaddress.IPv4Address | ipaddress.IPv6Address
Network: TypeAlias = ipaddress.IPv4Network | ipaddress.IPv6Network
# A resolver answers (host, port) with IP address strings; tests inject one, production
# uses the event loop's getaddrinfo (run in a thread, so the loop never blocks on DNS).
Resolver: TypeAlias = Callable[[str, int], Awaitable[list[str]]]

_HINT = "allow it only via ALLOWED_TOOL_CIDRS"
# The address kinds an operator-configured *name* may resolve to: where a self-hosted service
# lives (this host, a LAN or container network, a tailnet in 100.64/10). Never link-local
# (cloud metadata services answer on 169.254.169.254), multicast, unspecified or reserved: no
# service the operator points us at lives there, so a name answering with one is being steered.
OPERATOR_NAME_RULES = frozenset({"loopback", "private", "shared (100.64/10)"})
_UNSEEN = object()
_VERDICTS_MAX = 4096


def _nets(*pairs: tuple[str, str]) -> tuple[tuple[Network, str], ...]:
    return tuple((ipaddress.ip_network(net), rule) for net, rule in pairs)


# Our own table of IANA special-purpose ranges, checked before ``is_global``: the stdlib's
# answers differ between Python releases (gh-113171 changed them in 3.11.10), and the guard
# must decide the same way on every interpreter. Order matters: the first match names the rule.
_SPECIAL_V4 = _nets(
    ("0.0.0.0/32", "unspecified"),  # Linux routes a connect to 0.0.0.0 to the local host
    ("0.0.0.0/8", "reserved"),
    ("127.0.0.0/8", "loopback"),
    ("10.0.0.0/8", "private"),
    ("172.16.0.0/12", "private"),
    ("192.168.0.0/16", "private"),
    ("100.64.0.0/10", "shared (100.64/10)"),
    ("169.254.0.0/16", "link-local"),
    ("192.0.0.0/24", "reserved"),
    ("192.0.2.0/24", "reserved"),
    ("198.51.100.0/24", "reserved"),
    ("203.0.113.0/24", "reserved"),
    ("192.88.99.0/24", "reserved"),
    ("198.18.0.0/15", "reserved"),
    ("224.0.0.0/4", "multicast"),
    ("240.0.0.0/4", "reserved"),  # includes 255.255.255.255 (broadcast)
)
_SPECIAL_V6 = _nets(
    ("::/128", "unspecified"),  # like 0.0.0.0: the local host
    ("::1/128", "loopback"),
    ("::/8", "reserved"),  # IPv4-compatible and other deprecated forms
    ("64:ff9b:1::/48", "private"),  # local-use NAT64 (RFC 8215)
    ("100::/64", "reserved"),
    ("2001:db8::/32", "reserved"),
    ("2001::/23", "reserved"),
    ("3fff::/20", "reserved"),
    ("5f00::/16", "reserved"),
    ("fc00::/7", "private"),
    ("fe80::/10", "link-local"),
    ("fec0::/10", "site-local"),
    ("ff00::/8", "multicast"),
)
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")

# Hosts made only of digits, hex and dots that are not a canonical dotted quad: glibc's
# inet_aton reads "2130706433", "0x7f.1", "127.1" and "0177.0.0.1" as IPv4, Python does not.
# We refuse them outright rather than let the two parsers disagree (SSRF-02).
_NUMERIC_HOST = re.compile(r"^(0x[0-9a-f]*|[0-9]+)(\.(0x[0-9a-f]*|[0-9]+))*\.?$", re.IGNORECASE)


def _embedded(ip: ipaddress.IPv6Address) -> tuple[str, list[ipaddress.IPv4Address]] | None:
    """The IPv4 addresses an IPv6 form really reaches, or None for a plain IPv6 address."""
    if ip.ipv4_mapped is not None:
        return "IPv4-mapped", [ip.ipv4_mapped]
    if ip in _NAT64:
        return "NAT64", [ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)]
    if ip.sixtofour is not None:
        return "6to4", [ip.sixtofour]
    if ip.teredo is not None:
        return "Teredo", list(ip.teredo)
    return None


def _rule_for(ip: Address) -> str | None:
    """The special-purpose rule an unwrapped address falls under, or None if it is public."""
    table = _SPECIAL_V4 if ip.version == 4 else _SPECIAL_V6
    for net, rule in table:
        if ip in net:
            return rule
    if not ip.is_global or ip.is_reserved:
        return "reserved"
    return None


def parse_address(value: str | Address) -> Address:
    """An address object from a string as getaddrinfo returns it (IPv6 scope ids dropped)."""
    if isinstance(value, ipaddress.IPv4Address | ipaddress.IPv6Address):
        return value
    return ipaddress.ip_address(value.split("%", 1)[0])


class EgressPolicy:
    """Which addresses upstream calls may reach: public ones plus the listed networks."""

    def __init__(self, allowed_cidrs: Iterable[str] = (), *, resolver: Resolver | None = None) -> None:
        # config.py already refuses malformed entries and wildcards; strict=False matches it.
        self.allowed: tuple[Network, ...] = tuple(
            ipaddress.ip_network(c, strict=False) for c in allowed_cidrs
        )
        self.resolver = resolver
        # Exact (address or name, port) pairs the appliance itself serves (the demo API):
        # opening one port on one address is narrower than listing a network.
        self.endpoints: set[tuple[str, int]] = set()
        # (name, port) pairs the operator configured by name: their answers may also be
        # OPERATOR_NAME_RULES addresses (still resolved per request and pinned).
        self.operator_names: set[tuple[str, int]] = set()
        self._verdicts: dict[Address, object] = {}
        self.hint = _HINT  # what a refusal tells the operator to do about it

    def allow_endpoint(self, host: str, port: int) -> None:
        """Allow exactly ``host``:``port`` (an IP literal or a name) whatever its address."""
        literal = _literal(host.strip("[]"))
        self.endpoints.add((str(literal) if literal else host.strip("[]").lower(), port))

    @classmethod
    def for_operator_origin(
        cls, url: str, *, field: str = "url", resolver: Resolver | None = None
    ) -> EgressPolicy:
        """A policy opening exactly the origin of ``url``, which the operator configured.

        Public addresses pass as everywhere; nothing is listed. The URL's own host is
        trusted because the operator wrote it: an IP literal is allowed at exactly that
        address and port, a name (``localhost`` included) at that port whenever its answers
        are public or OPERATOR_NAME_RULES addresses. Raises UpstreamError naming ``field``
        for a URL the guard refuses in shape (scheme, userinfo, odd IPv4 spellings).
        """
        policy = cls(resolver=resolver)
        # ALLOWED_TOOL_CIDRS never widens this path, so a refusal must not point to it.
        policy.hint = f"this path opens only the origin `{field}` names (ALLOWED_TOOL_CIDRS does not apply)"
        try:
            parsed = httpx.URL(url)
        except (httpx.InvalidURL, TypeError, ValueError) as exc:
            raise _bad_url("is not a valid URL", field) from exc
        if parsed.raw_host:
            host, port = host_port(parsed)
            literal = _literal(host)
            if literal is not None:
                policy.endpoints.add((str(literal), port))
            elif not _NUMERIC_HOST.match(host) and "%" not in host:
                policy.operator_names.add((host.lower(), port))
        policy.check_url(parsed, field=field)
        return policy

    def _named_open(self, host: str, port: int) -> bool:
        named = (host.lower(), port)
        return named in self.endpoints or named in self.operator_names

    def opens(self, host: str) -> bool:
        """Whether ``host`` (a literal address, or a localhost name) lies in a network that
        ALLOWED_TOOL_CIDRS opens: where an OAuth endpoint a spec names may be plain http."""
        literal = _literal(host.strip("[]"))
        if literal is None and _is_localhost(host):
            literal = LOCALHOST
        return literal is not None and self._listed(literal)

    def _listed(self, ip: Address) -> bool:
        return any(ip.version == net.version and ip in net for net in self.allowed)

    def check_address(self, ip: str | Address) -> str | None:
        """The name of the rule that refuses ``ip``, or None when it may be reached."""
        addr = parse_address(ip)
        # The verdict depends only on the address and this policy's fixed networks, so it
        # is remembered: a call to a known upstream then costs a dict lookup, not a walk of
        # the special-purpose tables (bounded, so hostile input cannot grow it without end).
        verdict = self._verdicts.get(addr, _UNSEEN)
        if verdict is _UNSEEN:
            if len(self._verdicts) >= _VERDICTS_MAX:
                self._verdicts.clear()
            verdict = self._verdicts[addr] = self._decide(addr)
        return verdict  # type: ignore[return-value]

    def _decide(self, addr: Address) -> str | None:
        if self._listed(addr):
            return None
        if isinstance(addr, ipaddress.IPv6Address):
            wrapped = _embedded(addr)
            if wrapped is not None:
                kind, inner = wrapped
                for v4 in inner:
                    if not self._listed(v4) and (rule := _rule_for(v4)) is not None:
                        return rule
                # Teredo tunnels through a relay we do not control: refuse unless listed.
                return "teredo" if kind == "Teredo" else None
        return _rule_for(addr)

    def refusal(self, ip: str | Address, host: str | None = None) -> UpstreamError | None:
        """The client-safe error for a refused address, naming address and rule."""
        addr = parse_address(ip)
        rule = self.check_address(addr)
        if rule is None:
            return None
        where = f"{addr} is" if host is None or host == str(addr) else f"{host} resolves to {addr}, which is"
        return UpstreamError(
            f"{where} {rule}; {self.hint}",
            reason="ssrf_blocked",
            data={"address": str(addr), "rule": rule},
        )

    async def resolve(self, host: str, port: int, resolver: Resolver | None = None) -> list[Address]:
        """Every address ``host`` resolves to, all of them allowed; else UpstreamError.

        One disallowed answer refuses the whole name (a mixed answer set is how rebinding
        attacks hide), and a DNS failure fails closed.
        """
        host = host.strip("[]")
        literal = _literal(host)
        if (str(literal) if literal else host.lower(), port) in self.endpoints:
            return [literal] if literal else await self._lookup(host, port, resolver)
        if self.operator_names and literal is None and (host.lower(), port) in self.operator_names:
            return await self._operator_answers(host, port, resolver)
        if literal is not None:
            answers = [literal]
        else:
            if _NUMERIC_HOST.match(host):
                raise UpstreamError(
                    f"{host} is not a canonical IPv4 address; write it as a dotted quad",
                    reason="ssrf_blocked",
                    field="url",
                    data={"rule": "malformed address"},
                )
            if _is_localhost(host):
                # RFC 6761: a localhost name is loopback whatever DNS says (or fails to say);
                # it is never asked. It stands for 127.0.0.1 and is judged as that address,
                # so ALLOWED_TOOL_CIDRS opening 127.0.0.1 opens the name too, as the
                # refusal's advice says.
                answers = [LOCALHOST]
            else:
                answers = await self._lookup(host, port, resolver)
        for addr in answers:
            if (refused := self.refusal(addr, host)) is not None:
                raise refused
        return answers

    async def _operator_answers(self, host: str, port: int, resolver: Resolver | None) -> list[Address]:
        """A configured name's answers: public or OPERATOR_NAME_RULES ones, all of them."""
        answers: list[Address] = [LOCALHOST]
        if not _is_localhost(host):
            answers = await self._lookup(host, port, resolver)
        for addr in answers:
            rule = self.check_address(addr)
            if rule is not None and rule not in OPERATOR_NAME_RULES:
                raise UpstreamError(
                    f"{host} resolves to {addr}, which is {rule}; a configured name may resolve "
                    "only to public, loopback, private or shared addresses",
                    reason="ssrf_blocked",
                    data={"address": str(addr), "rule": rule},
                )
        return answers

    async def _lookup(self, host: str, port: int, resolver: Resolver | None) -> list[Address]:
        lookup = resolver or self.resolver or _getaddrinfo
        try:
            answers = _unique(parse_address(a) for a in await lookup(host, port))
        except (OSError, UnicodeError, ValueError) as exc:
            raise UpstreamError(
                f"DNS resolution failed for {host}", reason="upstream_unavailable", sent=False
            ) from exc
        if not answers:
            raise UpstreamError(
                f"DNS resolution failed for {host}", reason="upstream_unavailable", sent=False
            )
        return answers

    def check_url(self, url: str | httpx.URL, *, field: str = "url") -> httpx.URL:
        """Parse and vet a URL; the returned object is the one to send (one parser, A1).

        Only http and https, no userinfo, a host is required, and a host written as an IP
        address must be allowed. Names are resolved and checked at connect time by the
        pinned transport (without DNS here, registration cannot hang on a slow resolver).
        """
        try:
            parsed = url if isinstance(url, httpx.URL) else httpx.URL(url)
        except (httpx.InvalidURL, TypeError, ValueError) as exc:
            raise _bad_url("is not a valid URL", field) from exc
        if parsed.scheme not in ("http", "https"):
            raise _bad_url(f"scheme {parsed.scheme or '(none)'!r} is not allowed; use http or https", field)
        if parsed.userinfo:
            raise _bad_url("must not carry a user name or password; store credentials in the vault", field)
        if not parsed.raw_host:
            raise _bad_url("has no host", field)
        host, port = host_port(parsed)
        literal = _literal(host)
        if literal is None and ("%" in host or _NUMERIC_HOST.match(host)):
            raise _bad_url("has a malformed host (write an IPv4 address as a dotted quad)", field)
        if literal is None and _is_localhost(host) and not self._named_open(host, port):
            literal = LOCALHOST  # known without DNS, so refused at registration already
        if literal is not None and (str(literal), port) not in self.endpoints:
            refused = self.refusal(literal, host)
            if refused is not None:
                refused.field = field
                raise refused
        return parsed


LOCALHOST = ipaddress.IPv4Address("127.0.0.1")


def _is_localhost(host: str) -> bool:
    return host.rstrip(".").lower().split(".")[-1] == "localhost"


def _bad_url(why: str, field: str = "url") -> UpstreamError:
    return UpstreamError(f"the URL {why}", reason="ssrf_blocked", field=field, data={"rule": "url"})


@functools.lru_cache(maxsize=1024)
def _literal(host: str) -> Address | None:
    # Cached: the same few upstream hosts are parsed on every call (check, then resolve).
    try:
        return parse_address(host)
    except ValueError:
        return None


def _unique(addrs: Iterable[Address]) -> list[Address]:
    seen: dict[Address, None] = {}
    for a in addrs:
        seen.setdefault(a, None)
    return list(seen)


async def _getaddrinfo(host: str, port: int) -> list[str]:
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


def host_port(url: httpx.URL) -> tuple[str, int]:
    """The host (as resolved, brackets stripped) and the effective port of a URL."""
    host = url.raw_host.decode("ascii", "replace")
    port = url.port or (443 if url.scheme == "https" else 80)
    return host, port

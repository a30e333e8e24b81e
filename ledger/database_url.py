"""The database URL: one parsed form, and what SQLAlchemy and libpq are given from it.

`LEDGER_DATABASE_URL` (and `LEDGER_MIGRATION_DATABASE_URL`, `LEDGER_READ_DATABASE_URL`)
may be written in any of these forms, all parsed into one `DatabaseURL`:

- libpq's URI, `postgresql://` or `postgres://`, including its multi-host form
  `postgres://h1:p1,h2:p2/ledger?target_session_attrs=read-write&sslmode=prefer`, exactly
  as `pg_autoctl show uri` prints it, and hosts given as query parameters
  (`?host=/run/postgresql`, `?host=h1,h2&port=p1,p2`);
- SQLAlchemy's `postgresql+psycopg://`, including its multi-host form
  `?host=h1:p1&host=h2:p2` and the embedded server's `postgresql+psycopg://postgres@/ledger?host=%2Fpath`.

Invariants:
- Every connection the service opens gets its parameters from `conninfo()`: the raw psycopg
  connections (group-commit lanes, advisory locks, health checks, grants) directly, the
  SQLAlchemy engines (`ledger.db.make_engine`, the migrations) through `connect_args`, with
  a URL that names no host, so no other parser ever reads the hosts.
- `DatabaseURL.parse(url.sqlalchemy()) == url` and `DatabaseURL.parse(url.libpq()) == url`:
  the settings carry `sqlalchemy()` (one string through every command and process), and
  parsing it again gives back the same parameters.
- Every parameter is checked by libpq's own parser when the URL is parsed, and the
  values of `target_session_attrs` and `sslmode` too, so a malformed URL is one
  `DatabaseURLError` naming what is wrong (the CLI prints it and exits 2), never a
  traceback at the first connection.

A Unix socket directory is a host that starts with `/`. In SQLAlchemy's multi-host form a
host `h:p` carries its port, and so does a socket directory ending in `:digits`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import parse_qsl, quote, unquote

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

SCHEMES = ("postgresql+psycopg", "postgresql", "postgres")
SESSION_ATTRS = frozenset({"any", "read-write", "read-only", "primary", "standby", "prefer-standby"})
SSL_MODES = frozenset({"disable", "allow", "prefer", "require", "verify-ca", "verify-full"})
_FIELDS = {"user", "password", "dbname"}  # given in the query, they fill the URL's own parts


class DatabaseURLError(ValueError):
    """The URL cannot be used; the message is one line and never shows the password."""


Fail = Callable[[str], DatabaseURLError]


@dataclass(frozen=True)
class Host:
    """One host of the list: a name, an IP address or a Unix socket directory ('' = libpq's default)."""

    host: str
    port: int | None = None

    @property
    def socket(self) -> bool:
        return self.host.startswith("/") or self.host.startswith("@")


@dataclass(frozen=True)
class DatabaseURL:
    hosts: tuple[Host, ...]
    dbname: str | None = None
    user: str | None = None
    password: str | None = None
    params: tuple[tuple[str, str], ...] = ()  # every other libpq parameter, sorted by name

    # --- parsing ---------------------------------------------------------------------

    @classmethod
    def parse(cls, raw: str, *, name: str = "LEDGER_DATABASE_URL") -> DatabaseURL:
        """Parse any accepted form (see the module); `DatabaseURLError` naming `name` if it is malformed."""

        def fail(why: str) -> DatabaseURLError:
            return DatabaseURLError(f"{name} is not a usable PostgreSQL URL: {why}")

        text = raw.strip()
        scheme, sep, rest = text.partition("://")
        if not sep or scheme not in SCHEMES:
            raise fail("it must start with postgresql://, postgres:// or postgresql+psycopg://")
        rest, _, query = rest.partition("?")
        if "#" in query or "#" in rest:
            raise fail("a '#' must be percent-encoded (%23)")
        netloc, _, path = rest.partition("/")
        userinfo, at, hostlist = netloc.rpartition("@")
        if not at:
            userinfo, hostlist = "", netloc
        user, colon, password = userinfo.partition(":")
        fields: dict[str, str | None] = {
            "user": unquote(user) if user else None,
            "password": unquote(password) if colon else None,
            "dbname": unquote(path) if path else None,
        }
        hosts = [cls._host(unquote(item), fail) for item in hostlist.split(",")] if hostlist else []
        if any(not h.host and h.port is None for h in hosts) and len(hosts) > 1:
            raise fail("an empty host in the host list")
        query_hosts: list[Host] = []
        ports: list[str] | None = None
        params: dict[str, str] = {}
        try:
            pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))
        except ValueError:
            raise fail("its query string is malformed") from None
        for key, value in pairs:
            if key == "host":
                query_hosts.extend(cls._host(item, fail) for item in value.split(","))
            elif key == "port":
                if ports is not None:
                    raise fail("port is given twice")
                ports = value.split(",")
            elif key in _FIELDS:
                fields[key] = value
            elif key in params:
                raise fail(f"{key} is given twice")
            else:
                params[key] = value
        if query_hosts:
            if any(h.host or h.port is not None for h in hosts):
                raise fail("hosts are given both before the path and as ?host=")
            hosts = query_hosts
        if ports is not None:
            if not hosts:
                hosts = [Host("")]
            if len(ports) not in (1, len(hosts)):
                raise fail(f"{len(ports)} ports for {len(hosts)} hosts")
            if any(h.port is not None for h in hosts):
                raise fail("ports are given both as host:port and as ?port=")
            given = ports * len(hosts) if len(ports) == 1 else ports
            hosts = [Host(h.host, cls._port(p, fail)) for h, p in zip(hosts, given, strict=True)]
        url = cls(
            hosts=tuple(hosts) or (Host(""),),
            dbname=fields["dbname"],
            user=fields["user"],
            password=fields["password"],
            params=tuple(sorted(params.items())),
        )
        url._check(fail)
        return url

    @staticmethod
    def _port(text: str, fail: Fail) -> int | None:
        if text == "":
            return None
        if not (text.isascii() and text.isdigit()) or not 0 < int(text) < 65536:
            raise fail(f"port {text!r} is not a number from 1 to 65535")
        return int(text)

    @classmethod
    def _host(cls, item: str, fail: Fail) -> Host:
        """`host`, `host:port`, `[v6]:port`, `/socket/dir` or `/socket/dir:port`."""
        if item.startswith("["):
            address, bracket, tail = item[1:].partition("]")
            if not bracket or (tail and not tail.startswith(":")):
                raise fail(f"host {item!r} is not [address]:port")
            return Host(address, cls._port(tail[1:], fail) if tail else None)
        head, colon, tail = item.rpartition(":")
        if not colon:
            return Host(item)
        if item.startswith("/") and not (tail.isascii() and tail.isdigit()):
            return Host(item)  # a socket directory with a ':' in its name
        if ":" in head:
            raise fail(f"host {item!r}: write an IPv6 address in brackets, [address]:port")
        return Host(head, cls._port(tail, fail))

    def _check(self, fail: Fail) -> None:
        """libpq's own parser must accept every parameter; two values are checked for it."""
        for key, allowed in (("target_session_attrs", SESSION_ATTRS), ("sslmode", SSL_MODES)):
            value = dict(self.params).get(key)
            if value is not None and value not in allowed:
                raise fail(f"{key} must be one of {', '.join(sorted(allowed))}, got {value!r}")
        try:
            conninfo_to_dict(self.conninfo())
        except psycopg.ProgrammingError as error:
            raise fail(str(error).strip().splitlines()[0]) from None

    # --- what each consumer is given -------------------------------------------------

    def libpq_params(self) -> dict[str, str]:
        """The connection parameters as libpq keywords (multi-host: comma-separated lists)."""
        out: dict[str, str] = {}
        if any(h.host for h in self.hosts):
            out["host"] = ",".join(h.host for h in self.hosts)
        if any(h.port is not None for h in self.hosts):
            out["port"] = ",".join("" if h.port is None else str(h.port) for h in self.hosts)
        for key, value in (("dbname", self.dbname), ("user", self.user), ("password", self.password)):
            if value is not None:
                out[key] = value
        out.update(self.params)
        return out

    def conninfo(self, **extra: str | int) -> str:
        """A libpq conninfo string (`host=h1,h2 port=p1,p2 ...`), with `extra` parameters on top."""
        return make_conninfo("", **{**self.libpq_params(), **extra})

    def sqlalchemy(self) -> str:
        """The URL in SQLAlchemy's form (`postgresql+psycopg://`, several hosts as `?host=h:p&host=h:p`)."""
        query: list[tuple[str, str]] = []
        netloc = ""
        single = len(self.hosts) == 1 and not self.hosts[0].socket
        if single:
            netloc = self._netloc(self.hosts[0])
        elif len(self.hosts) == 1:
            query.append(("host", self.hosts[0].host))
            if self.hosts[0].port is not None:
                query.append(("port", str(self.hosts[0].port)))
        else:
            query.extend(("host", self._netloc(h)) for h in self.hosts)
        return self._render("postgresql+psycopg", netloc, query)

    def libpq(self) -> str:
        """The URL in libpq's form (`postgresql://h1:p1,h2:p2/db?...`; socket hosts as `?host=`)."""
        if any(h.socket for h in self.hosts):
            query = [("host", ",".join(h.host for h in self.hosts))]
            if any(h.port is not None for h in self.hosts):
                query.append(("port", ",".join("" if h.port is None else str(h.port) for h in self.hosts)))
            return self._render("postgresql", "", query)
        return self._render("postgresql", ",".join(self._netloc(h) for h in self.hosts), [])

    def redacted(self) -> str:
        """`libpq()` with the password shown as `***` (for messages and logs)."""
        if self.password is None:
            return self.libpq()
        return DatabaseURL(self.hosts, self.dbname, self.user, "***", self.params).libpq()

    @property
    def multi_host(self) -> bool:
        return len(self.hosts) > 1

    def _netloc(self, host: Host) -> str:
        name = f"[{host.host}]" if ":" in host.host and not host.socket else quote(host.host, safe="")
        return name if host.port is None else f"{name}:{host.port}"

    def _render(self, scheme: str, netloc: str, query: list[tuple[str, str]]) -> str:
        userinfo = ""
        if self.user is not None or self.password is not None:
            userinfo = quote(self.user or "", safe="")
            if self.password is not None:
                userinfo += ":" + quote(
                    self.password, safe="*"
                )  # "*" is allowed there, and reads as redacted
            userinfo += "@"
        path = "/" + quote(self.dbname, safe="") if self.dbname is not None else "/"
        pairs = [*query, *self.params]
        tail = "?" + "&".join(f"{quote(k, safe='')}={quote(v, safe='')}" for k, v in pairs) if pairs else ""
        return f"{scheme}://{userinfo}{netloc}{path}{tail}"


def conninfo(url: str, **extra: str | int) -> str:
    """The libpq conninfo of a URL in any accepted form (see `DatabaseURL.conninfo`)."""
    return DatabaseURL.parse(url).conninfo(**extra)

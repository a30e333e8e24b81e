"""The ledger on a pg_auto_failover formation (`tests/formation.py`): one URL, reads on the
standby, and a gateway's load riding through a switchover and the hard loss of a primary.

`ledger serve` runs as a subprocess with `LEDGER_DATABASE_URL` set to exactly what
`pg_autoctl show uri` prints. The gateway load is 4 threads of reserve-then-settle
cycles, each retrying a 503 or a lost connection with the same idempotency key (the
contract's exactly-once answer) and a capped exponential backoff. Through a planned
switchover and then a SIGKILL of the new primary's keeper and postmaster it must see no
5xx other than 503 and no refusal, and afterwards the ledger must hold exactly what the
client was told: every cycle settled once with the charge it was answered, nothing held,
the balances and the journal in step, integrity ok. The figures (promotion times, the
longest stretch without an answer) are printed, not asserted.

Skipped without pg_autoctl unless `CI` is set: then it fails (`.ci/run` installs it).
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from ledger.database_url import DatabaseURL
from tests import formation as formation_module
from tests.formation import Formation, Node
from tests.serving import ROOT, Server

GATEWAY = "ha-gateway-token-0123456789abcdef0123456789"
ADMIN = "ha-admin-token-0123456789abcdef0123456789ab"
MODEL = "gpt-5-mini"
THREADS = 4
PHASE_SECONDS = 6.0  # load before the switchover, between the two events, and after the kill
USAGE = {"prompt_tokens": 120, "completion_tokens": 30}
ENV = {
    "PGUSER": "postgres",  # pg_autoctl's URL names no user; the nodes trust postgres locally
    "LEDGER_GATEWAY_TOKENS": GATEWAY,
    "LEDGER_ADMIN_TOKENS": f"{ADMIN}:admin",
    "LEDGER_LOG_FORMAT": "console",
    "LEDGER_LOG_LEVEL": "warning",
    "LEDGER_DB_POOL_SIZE": "5",
    "LEDGER_IDENTITY_SECRET": "ha-identity-secret-0123456789abcdef0123456789",
}

pytestmark = pytest.mark.formation


@pytest.fixture(scope="module")
def formation() -> Iterator[Formation]:
    if not formation_module.available():
        message = "pg_autoctl is not installed (Debian: postgresql-15-auto-failover pg-auto-failover-cli)"
        if os.environ.get("CI"):
            pytest.fail(f"CI is set but {message}: .ci/run installs them")
        pytest.skip(message)
    root = Path(tempfile.mkdtemp(prefix="ldgha", dir="/tmp"))
    root.chmod(0o755)  # the postgres user walks through it
    built = Formation(root)
    try:
        built.start()
        yield built
    finally:
        built.stop()
        if not os.environ.get("LEDGER_TEST_KEEP_HA"):  # set it to keep the logs of a failed run
            subprocess.run(["rm", "-rf", str(root)], check=False)


def with_attrs(uri: str, attrs: str) -> str:
    url = DatabaseURL.parse(uri)
    params = dict(url.params, target_session_attrs=attrs)
    return dataclasses.replace(url, params=tuple(sorted(params.items()))).libpq()


@pytest.fixture(scope="module")
def service(formation: Formation) -> Iterator[Server]:
    uri = formation.uri()
    assert uri.startswith("postgres://127.0.0.1:") and "," in uri  # libpq's multi-host form, as printed
    env = {**ENV, "LEDGER_DATABASE_URL": uri, "LEDGER_READ_DATABASE_URL": with_attrs(uri, "prefer-standby")}
    migrate = subprocess.run(
        [sys.executable, "-m", "ledger.cli", "migrate"],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert migrate.returncode == 0, migrate.stderr
    with Server(env, formation.root / "serve.log") as server:
        server.wait_ready()
        yield server


def admin(server: Server, method: str, path: str, **kwargs: Any) -> httpx.Response:
    return httpx.request(
        method, server.base + path, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10, **kwargs
    )


def open_account(server: Server, name: str, deposit: str) -> str:
    account = f"{name}-{os.urandom(4).hex()}"
    assert admin(server, "POST", "/admin/v1/accounts", json={"account_id": account}).status_code == 201
    r = admin(
        server,
        "POST",
        f"/admin/v1/accounts/{account}/deposits",
        json={"idempotency_key": f"dep-{account}", "amount": deposit},
    )
    assert r.status_code == 201, r.text
    return account


def sessions(node: Node, application_name: str) -> int:
    with psycopg.connect(node.url, autocommit=True, connect_timeout=3) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (application_name,)
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_admin_reads_are_served_by_the_standby_and_writes_by_the_primary(
    formation: Formation, service: Server
) -> None:
    primary = formation.primary()
    standby = next(node for node in formation.nodes if node.name != primary.name)
    account = open_account(service, "reads", "5")  # written on the primary

    # The standby has the commit flushed (synchronous_commit = on), perhaps not yet applied.
    deadline = time.monotonic() + 10
    while True:
        listed = admin(service, "GET", f"/admin/v1/accounts/{account}/transactions")
        if listed.status_code == 200 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert listed.status_code == 200, listed.text
    assert [t["kind"] for t in listed.json()["data"]] == ["deposit"]
    assert admin(service, "GET", "/admin/v1/accounts", params={"limit": 500}).status_code == 200
    assert admin(service, "GET", "/admin/v1/holds", params={"account_id": account}).status_code == 200

    assert sessions(standby, "ledger-reads") >= 1  # the lists came from the standby
    assert sessions(primary, "ledger-reads") == 0
    assert formation.sql(standby, "SELECT pg_is_in_recovery()") == [(True,)]
    # A write still goes to the primary, and a read of one account's balance too.
    r = admin(
        service,
        "POST",
        f"/admin/v1/accounts/{account}/deposits",
        json={"idempotency_key": "d2", "amount": "1"},
    )
    assert r.status_code == 201, r.text
    assert admin(service, "GET", f"/admin/v1/accounts/{account}/balance").json()["balance"] == "6"
    assert sessions(primary, "ledger") >= 1


def test_a_connection_on_a_standby_is_503_never_500(formation: Formation, service: Server) -> None:
    """A URL that lands on a standby (no target_session_attrs): every write is refused by the
    server with SQLSTATE 25006, which the service answers 503 `database_unavailable`."""
    from litestar.testing import TestClient

    from ledger.app import create_app
    from ledger.settings import load_settings
    from tests.conftest import TEST_ENV, auth

    primary = formation.primary()
    standby = next(node for node in formation.nodes if node.name != primary.name)
    account = open_account(service, "standby", "5")
    settings = load_settings(
        {
            **TEST_ENV,
            "LEDGER_DATABASE_URL": standby.url,
            "LEDGER_GATEWAY_TOKENS": GATEWAY,
            "LEDGER_ADMIN_TOKENS": f"{ADMIN}:admin",
        }
    )
    with TestClient(create_app(settings, settings.database_url or "")) as client:
        deadline = time.monotonic() + 10
        while client.get(f"/v1/accounts/{account}/balance", headers=auth(GATEWAY)).status_code != 200:
            assert time.monotonic() < deadline, "the account never reached the standby"
            time.sleep(0.05)
        writes = [
            client.post(
                "/v1/holds",  # the fast lane's group-commit lane
                json={"account_id": account, "idempotency_key": "s1", "model": MODEL, "max_output_tokens": 8},
                headers=auth(GATEWAY),
            ),
            client.post(
                f"/admin/v1/accounts/{account}/deposits",  # the SQLAlchemy pool
                json={"idempotency_key": "s2", "amount": "1"},
                headers=auth(ADMIN),
            ),
        ]
        for r in writes:
            assert r.status_code == 503, r.text
            assert r.json()["error"]["code"] == "database_unavailable"
        assert client.get("/readyz").json()["replication"]["in_recovery"] is True
    assert admin(service, "GET", f"/admin/v1/accounts/{account}/balance").json()["balance"] == "5"


def test_the_watch_sees_the_standby_as_a_role_without_pg_read_all_stats(formation: Formation) -> None:
    """pg_stat_replication hides its details from such a role; a streaming WAL sender counts."""
    import asyncio

    from ledger.db import make_engine
    from ledger.replication import ReplicationWatch

    primary = formation.primary()
    formation.sql(primary, "DROP ROLE IF EXISTS ledger_watch_probe")
    formation.sql(primary, "CREATE ROLE ledger_watch_probe LOGIN")
    url = primary.url.replace(f"{formation_module.USER}@", "ledger_watch_probe@")

    async def probe() -> tuple[bool, dict[str, Any]]:
        engine = make_engine(url, pool_size=1, max_overflow=0)
        try:
            watch = ReplicationWatch(engine, required=True)
            found = await watch.refresh()
            watch.require()  # a standby is there: nothing is refused
            return found, watch.status()
        finally:
            await engine.dispose()

    found, status = asyncio.run(probe())
    assert found is True, status
    assert status["synchronous_commit"] == "on"
    assert status["synchronous_standby_names"].startswith("ANY 1")
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT count(*), count(sync_state) FROM pg_stat_replication").fetchone()
    assert row == (1, 0)  # it sees the WAL sender, not its state


@dataclass
class Cycle:
    key: str
    hold_id: str | None = None
    charge: Decimal | None = None
    acknowledged: bool = False


@dataclass
class Gateway:
    """The retrying client's record: every cycle, every status, every answer's time."""

    base: str
    accounts: list[str]
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    cycles: dict[str, list[Cycle]] = field(default_factory=dict)
    statuses: dict[int, int] = field(default_factory=dict)
    unexpected: list[str] = field(default_factory=list)
    answered: list[float] = field(default_factory=list)  # monotonic times of 2xx answers
    retries: int = 0

    def call(self, client: httpx.Client, path: str, body: dict[str, Any], ok: tuple[int, ...]) -> Any:
        """POST until an answer in `ok` (retrying 503 and lost connections with the same body);
        None after a refusal of any other kind (recorded)."""
        delay = 0.02
        give_up = time.monotonic() + 90
        while time.monotonic() < give_up:
            try:
                r = client.post(path, json=body)
            except httpx.TransportError:
                status = -1
            else:
                status = r.status_code
            with self.lock:
                self.statuses[status] = self.statuses.get(status, 0) + 1
                if status in ok:
                    self.answered.append(time.monotonic())
                    return r.json()
                if status not in (-1, 503):
                    self.unexpected.append(f"{status} {path}: {r.text[:300]}")
                    return None
                self.retries += 1
            time.sleep(delay)
            delay = min(delay * 2, 0.5)
        with self.lock:
            self.unexpected.append(f"no answer in 90 s: {path}")
        return None

    def run(self, account: str) -> None:
        record: list[Cycle] = self.cycles.setdefault(account, [])
        headers = {"Authorization": f"Bearer {GATEWAY}"}
        with httpx.Client(base_url=self.base, headers=headers, timeout=10) as client:
            while not self.stop.is_set():
                cycle = Cycle(key=f"{account}-{len(record)}")
                record.append(cycle)
                hold = self.call(
                    client,
                    "/v1/holds",
                    {
                        "account_id": account,
                        "idempotency_key": cycle.key,
                        "model": MODEL,
                        "max_output_tokens": 64,
                    },
                    (200, 201),
                )
                if hold is None:
                    return
                cycle.hold_id = hold["id"]
                settled = self.call(client, f"/v1/holds/{cycle.hold_id}/settle", {"usage": USAGE}, (200,))
                if settled is None:
                    return
                cycle.charge = Decimal(settled["charge"]["amount"])
                cycle.acknowledged = True

    def longest_silence(self, start: float, end: float) -> float:
        times = sorted(t for t in self.answered if start <= t <= end)
        points = [start, *times, end]
        return max(b - a for a, b in itertools.pairwise(points))

    def first_answer_after(self, moment: float) -> float | None:
        later = [t for t in self.answered if t >= moment]
        return min(later) - moment if later else None


def gauge(server: Server) -> str | None:
    try:
        text = httpx.get(server.base + "/metrics", timeout=5).text
    except httpx.HTTPError:
        return None
    return next(
        (line.split()[1] for line in text.splitlines() if line.startswith("ledger_database_sync_standby ")),
        None,
    )


def wait_gauge(server: Server, value: str, timeout: float = 20) -> str | None:
    deadline = time.monotonic() + timeout
    seen = gauge(server)
    while seen != value and time.monotonic() < deadline:
        time.sleep(0.2)
        seen = gauge(server)
    return seen


def test_gateway_load_rides_through_a_switchover_and_a_hard_kill(
    formation: Formation, service: Server
) -> None:
    assert formation.sql(formation.primary(), "SHOW synchronous_commit") == [("on",)]
    assert formation.sql(formation.primary(), "SHOW synchronous_standby_names") != [("",)]
    assert wait_gauge(service, "1.0") == "1.0"  # a synchronous standby behind the primary

    accounts = [open_account(service, f"ha{i}", "1000") for i in range(THREADS)]
    gateway = Gateway(service.base, accounts)
    threads = [threading.Thread(target=gateway.run, args=(a,), daemon=True) for a in accounts]
    start = time.monotonic()
    for thread in threads:
        thread.start()
    try:
        time.sleep(PHASE_SECONDS)
        first = formation.primary()
        switch_at = time.monotonic()
        formation.switchover()
        second = formation.wait_primary(exclude=first)
        switch_promoted = time.monotonic()
        formation.wait_secondary()  # the old primary rejoins, synchronously replicating
        time.sleep(PHASE_SECONDS)
        kill_at = time.monotonic()
        killed = formation.kill_primary()
        assert killed.name == second.name
        third = formation.wait_primary(exclude=killed)
        kill_promoted = time.monotonic()
        time.sleep(PHASE_SECONDS)
    finally:
        gateway.stop.set()
        for thread in threads:
            thread.join(120)
    end = time.monotonic()
    assert not any(thread.is_alive() for thread in threads)

    cycles = [c for record in gateway.cycles.values() for c in record]
    acknowledged = [c for c in cycles if c.acknowledged]
    switch_first = gateway.first_answer_after(switch_promoted)
    kill_first = gateway.first_answer_after(kill_promoted)
    silence = gateway.longest_silence(start, end)
    bad_5xx = sum(n for status, n in gateway.statuses.items() if status >= 500 and status != 503)

    # What the ledger holds, read on the surviving primary.
    with psycopg.connect(third.url, autocommit=True) as conn:
        holds = {
            row[0]: row[1:]
            for row in conn.execute(
                "SELECT idempotency_key, id::text, state, charged FROM holds WHERE account_id = ANY(%s)",
                (accounts,),
            ).fetchall()
        }
        balances = dict(
            conn.execute(  # type: ignore[arg-type]
                "SELECT id, balance FROM accounts WHERE id = ANY(%s)", (accounts,)
            ).fetchall()
        )
        held = conn.execute("SELECT sum(held) FROM accounts WHERE id = ANY(%s)", (accounts,)).fetchone()
        settles = conn.execute(
            "SELECT count(*) FROM journal_transactions t WHERE t.kind = 'settle' AND t.hold_id IN "
            "(SELECT id FROM holds WHERE account_id = ANY(%s))",
            (accounts,),
        ).fetchone()
    lost = [c.key for c in acknowledged if c.key not in holds or holds[c.key][1] != "settled"]
    wrong = [c.key for c in acknowledged if c.key in holds and Decimal(holds[c.key][2]) != c.charge]
    extra = sorted(set(holds) - {c.key for c in cycles})

    print(
        f"\nfailover: {len(acknowledged)} cycles acknowledged ({len(cycles)} started) by {THREADS} threads "
        f"in {end - start:.1f} s; switchover {first.name}->{second.name}: promoted "
        f"{switch_promoted - switch_at:.2f} s after it began, first answer {_secs(switch_first)} after; "
        f"SIGKILL of {killed.name}: {third.name} promoted {kill_promoted - kill_at:.2f} s after the kill, "
        f"first answer {_secs(kill_first)} after; longest stretch without an answer {silence:.2f} s; "
        f"retries {gateway.retries}; statuses {dict(sorted(gateway.statuses.items()))}; "
        f"lost {len(lost)}; 5xx other than 503: {bad_5xx}"
    )

    assert not gateway.unexpected, gateway.unexpected[:5]
    assert bad_5xx == 0
    # The ledger process never went away: a dropped connection to it is a bug, not a failover.
    assert gateway.statuses.get(-1, 0) == 0, gateway.statuses
    assert len(acknowledged) == len(cycles)  # every cycle the gateway started was answered in the end
    assert len(acknowledged) > 3 * THREADS
    assert lost == [] and wrong == [] and extra == []
    assert len(holds) == len(cycles)  # one hold per idempotency key: no retry reserved twice
    assert settles is not None and settles[0] == len(cycles)  # one settle posting per hold
    assert held is not None and held[0] == 0  # nothing left held
    for account in accounts:
        charged = sum((c.charge or Decimal(0) for c in gateway.cycles[account]), Decimal(0))
        assert balances[account] == Decimal(1000) - charged, account
    r = admin(service, "GET", "/admin/v1/integrity")
    assert r.status_code == 200 and r.json()["ok"] is True, r.text
    # The surviving primary has no standby left: the gauge and /readyz say so.
    assert wait_gauge(service, "0.0") == "0.0"
    ready = httpx.get(service.base + "/readyz", timeout=5)
    assert ready.status_code == 200 and ready.json()["replication"]["sync_standby"] is False
    log = service.log()
    at = log.find("Traceback")
    assert at < 0, f"the service logged a traceback:\n{log[max(0, at - 1500) : at + 3000]}"


def _secs(value: float | None) -> str:
    return "none" if value is None else f"{value:.2f} s"

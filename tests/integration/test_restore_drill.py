"""Restore drill: a pgBackRest backup and point-in-time restore give back the money as it stood.

A throwaway cluster archives its WAL into a temporary pgBackRest repository, with
`deploy/pgbackrest/pgbackrest.conf` and `deploy/pgbackrest/archive.conf` as shipped (only
their paths and port replaced). The ledger is migrated onto it with `ledger migrate` and
served by a real `ledger serve`; money moves through the API before a full backup, between
it and a differential one, and after that; the database's clock is read at T; more money
moves; the WAL is archived (`pgbackrest check`). Then `pgbackrest restore --type=time
--target=T --target-action=promote` goes into a fresh data directory, PostgreSQL starts
there, a second `ledger serve` starts on it, and:

- its integrity check is ok;
- its accounts are exactly the live accounts created by T, and each one's balance, held,
  available, paid and granted equal the live service's `balance?as_of=T`;
- what moved after T is absent: the account opened after T does not exist, the hold
  reserved before T and settled after it is still open.

Each account's restored numbers are printed, one line each (`pytest -s` shows them).
Fails rather than skips under CI when pgBackRest (which `.ci/run` installs) or the
PostgreSQL server binaries are missing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.backrest import pgbackrest, render_archive_conf, render_config
from tests.conftest import FINANCE, GATEWAY, TEST_ENV, VIEWER, auth
from tests.pgcluster import Cluster, Workspace, missing_prerequisites
from tests.serving import ROOT, Server

FIELDS = ("balance", "held", "available", "paid", "granted")
MISSING = missing_prerequisites("pgbackrest")

pytestmark = pytest.mark.skipif(
    bool(MISSING) and not os.environ.get("CI"), reason=f"missing: {', '.join(MISSING)} (and CI is unset)"
)


class Money:
    """The admin and gateway calls the drill makes against one service."""

    def __init__(self, base: str) -> None:
        self.http = httpx.Client(base_url=base, timeout=60)

    def open(self, account_id: str, deposit: str) -> None:
        r = self.http.post("/admin/v1/accounts", json={"account_id": account_id}, headers=auth(FINANCE))
        assert r.status_code == 201, r.text
        self.deposit(account_id, deposit, f"open-{account_id}")

    def deposit(self, account_id: str, amount: str, key: str) -> None:
        body = {"idempotency_key": key, "amount": amount}
        r = self.http.post(f"/admin/v1/accounts/{account_id}/deposits", json=body, headers=auth(FINANCE))
        assert r.status_code == 201, r.text

    def grant(self, account_id: str, amount: str, key: str) -> None:
        body = {
            "idempotency_key": key,
            "amount": amount,
            "expires_at": "2099-01-01T00:00:00Z",
            "reason": "drill",
        }
        r = self.http.post(f"/admin/v1/accounts/{account_id}/grants", json=body, headers=auth(FINANCE))
        assert r.status_code == 201, r.text

    def reserve(self, account_id: str, key: str) -> str:
        body = {
            "account_id": account_id,
            "idempotency_key": key,
            "model": "gpt-5-mini",
            "max_output_tokens": 256,
        }
        r = self.http.post("/v1/holds", json=body, headers=auth(GATEWAY))
        assert r.status_code == 201, r.text
        hold_id: str = r.json()["id"]
        return hold_id

    def settle(self, hold_id: str, prompt: int, completion: int) -> None:
        usage = {"usage": {"prompt_tokens": prompt, "completion_tokens": completion}}
        r = self.http.post(f"/v1/holds/{hold_id}/settle", json=usage, headers=auth(GATEWAY))
        assert r.status_code == 200, r.text

    def cycles(self, account_id: str, tag: str, count: int) -> None:
        for i in range(count):
            self.settle(self.reserve(account_id, f"{tag}-{i}"), 1200 + 100 * i, 180 + i)

    def accounts(self) -> dict[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] = {}
        cursor: str | None = None
        while True:
            params = {"limit": "100"} | ({"cursor": cursor} if cursor else {})
            r = self.http.get("/admin/v1/accounts", params=params, headers=auth(VIEWER))
            assert r.status_code == 200, r.text
            page = r.json()
            found |= {a["account_id"]: a for a in page["data"]}
            cursor = page.get("next_cursor")
            if not cursor:
                return found

    def balance(self, account_id: str, as_of: str | None = None) -> dict[str, Any]:
        params = {"as_of": as_of} if as_of else {}
        r = self.http.get(f"/admin/v1/accounts/{account_id}/balance", params=params, headers=auth(VIEWER))
        assert r.status_code == 200, r.text
        body: dict[str, Any] = r.json()
        return body

    def integrity(self) -> dict[str, Any]:
        r = self.http.get("/admin/v1/integrity", headers=auth(VIEWER))
        assert r.status_code == 200, r.text
        body: dict[str, Any] = r.json()
        return body


@pytest.fixture
def workspace() -> Iterator[Workspace]:
    assert not MISSING, f"CI is set but this machine lacks {', '.join(MISSING)}: .ci/run installs pgbackrest"
    space = Workspace("ldr")
    try:
        yield space
    finally:
        space.close()


def _instant(text: str) -> datetime:
    """An RFC 3339 timestamp of the API (which leaves out a zero fraction) as a datetime."""
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def serve(cluster: Cluster, log: Path) -> Server:
    env = {**TEST_ENV, "LEDGER_DATABASE_URL": cluster.url("ledger")}
    server = Server(env, log)
    server.wait_ready()
    return server


def test_point_in_time_restore_gives_back_every_balance_as_of_t(workspace: Workspace) -> None:
    live = Cluster.initdb(workspace, "live", {"fsync": "off"})
    config = render_config(
        workspace.root / "pgbackrest.conf",
        repo=workspace.folder("repo"),
        logs=workspace.folder("log"),
        locks=workspace.folder("lock"),
        pgdata=live.datadir,
        port=live.port,
        socket=str(live.datadir),
    )
    archive = render_archive_conf(workspace.root / "archive.conf", config)
    live.configure({"include": f"'{archive}'"})
    live.start()
    pgbackrest(config, "stanza-create")
    live.sql("CREATE DATABASE ledger")
    env = {**os.environ, **TEST_ENV, "LEDGER_DATABASE_URL": live.url("ledger")}
    migrated = subprocess.run(
        [sys.executable, "-m", "ledger.cli", "migrate"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert migrated.returncode == 0, migrated.stderr
    assert json.loads(migrated.stdout)["migrated"] is True

    with serve(live, workspace.root / "live-serve.log") as service:
        money = Money(service.base)
        # Before the full backup: money the backup itself carries.
        money.open("drill-a", "100")
        money.cycles("drill-a", "a0", 3)
        pgbackrest(config, "backup", "--type=full", "--start-fast")
        # Between the full and the differential backup, and after it: money only WAL carries.
        money.open("drill-b", "50.25")
        money.grant("drill-b", "5", "grant-b")
        money.cycles("drill-b", "b1", 4)
        pgbackrest(config, "backup", "--type=diff", "--start-fast")
        money.deposit("drill-a", "12.000000000001", "dep-a1")
        money.cycles("drill-a", "a1", 2)
        money.open("drill-c", "7")
        open_hold = money.reserve("drill-c", "c-open")  # open at T, settled after it
        # T by the database's clock, after every commit above: pgBackRest's form for --target
        # (it becomes recovery_target_time), and RFC 3339 for the API's as_of.
        t = live.sql("SELECT to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US')")
        target = f"{t[0][0]}+00"
        as_of = str(t[0][0]).replace(" ", "T") + "Z"

        # After T: none of this may survive the restore.
        money.settle(open_hold, 5000, 900)
        money.deposit("drill-a", "1000", "dep-a2")
        money.cycles("drill-b", "b2", 3)
        money.open("drill-late", "9")
        pgbackrest(config, "check")  # switches the WAL segment and waits until it is archived

        at_t = {
            account_id: money.balance(account_id, as_of=as_of)
            for account_id, account in money.accounts().items()
            if _instant(account["created_at"]) <= _instant(as_of)
        }
        assert sorted(at_t) == ["drill-a", "drill-b", "drill-c"]
        assert at_t["drill-c"]["held"] != "0", "the hold open at T must be held at T"
        assert money.integrity()["ok"] is True

    info = json.loads(pgbackrest(config, "info", "--output=json"))
    assert [b["type"] for b in info[0]["backup"]] == ["full", "diff"]

    # A fresh data directory; the drill's copy must not push WAL into the repository (archive-mode=off).
    restored = workspace.cluster("restored")
    pgbackrest(
        config,
        f"--pg1-path={restored.datadir}",
        "--type=time",
        f"--target={target}",
        "--target-action=promote",
        "--archive-mode=off",
        "restore",
    )
    restored.start()
    restored.wait_writable()

    with serve(restored, workspace.root / "restored-serve.log") as service:
        back = Money(service.base)
        integrity = back.integrity()
        assert integrity["ok"] is True, integrity
        accounts = back.accounts()
        assert sorted(accounts) == sorted(at_t), "the accounts restored are not those that existed at T"
        print(f"\nrestore drill: restored to T = {target}; account: " + " / ".join(FIELDS))
        for account_id, expected in sorted(at_t.items()):
            now = back.balance(account_id)
            print(f"  {account_id}: " + " / ".join(now[f] for f in FIELDS))
            assert {f: now[f] for f in FIELDS} == {f: expected[f] for f in FIELDS}, account_id
        r = back.http.get("/admin/v1/accounts/drill-late", headers=auth(VIEWER))
        assert r.status_code == 404, r.text
        r = back.http.get(f"/v1/holds/{open_hold}", headers=auth(GATEWAY))
        assert r.status_code == 200 and r.json()["state"] == "open", r.text

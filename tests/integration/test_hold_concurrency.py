"""Real concurrency against a real server process: parallel connections, one account.

The service runs as `ledger serve` in a subprocess (its own connection pool); the
clients are threads, each with its own HTTP connection, released together by a
barrier. Nothing may overspend, double-settle, deadlock or answer 500.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from typing import Any

import httpx
import pytest
from litestar.testing import TestClient

from tests.conftest import (
    FINANCE,
    GATEWAY,
    TEST_ENV,
    VIEWER,
    auth,
    fresh_currency,
    new_id,
    publish,
    simple_document,
)
from tests.serving import Server

PARALLEL = 50


@pytest.fixture(scope="module")
def server(database: str, contract_version: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    env = {
        **TEST_ENV,
        "LEDGER_DATABASE_URL": database,
        "LEDGER_DB_POOL_SIZE": "20",
        "LEDGER_DB_MAX_OVERFLOW": "5",
    }
    log = tmp_path_factory.mktemp("server") / "server.log"
    with Server(env, log, drop=("LEDGER_REDIS_URL",), stop_timeout=10) as serve:
        serve.wait_ready(30)
        yield serve.base
    serve.assert_no_tracebacks()


def together(n: int, work: Callable[[httpx.Client, int], Any]) -> list[Any]:
    """Run `work` n times in parallel threads, each with its own connection, started at once."""
    barrier = threading.Barrier(n)

    def run(i: int) -> Any:
        with httpx.Client(timeout=30) as http:
            http.get  # noqa: B018  (client is created before the barrier so connecting is not serialized)
            barrier.wait()
            return work(http, i)

    with ThreadPoolExecutor(max_workers=n) as pool:
        return list(pool.map(run, range(n)))


@pytest.fixture
def funded(client: TestClient[Any], make_account: Any) -> Callable[[str], str]:
    currency = fresh_currency()
    publish(client, simple_document(currency))

    def make(amount: str) -> str:
        account_id: str = make_account(amount, currency=currency)
        return account_id

    return make


def reserve_body(account_id: str, key: str, max_output: int = 100) -> dict[str, Any]:
    return {
        "account_id": account_id,
        "idempotency_key": key,
        "model": "t-simple",
        "max_output_tokens": max_output,
    }


def account(client: TestClient[Any], account_id: str) -> dict[str, Decimal]:
    body = client.get(f"/v1/accounts/{account_id}/balance", headers=auth(GATEWAY)).json()
    return {k: Decimal(body[k]) for k in ("balance", "held", "available")}


def integrity_ok(client: TestClient[Any]) -> None:
    report = client.get("/admin/v1/integrity", headers=auth(VIEWER)).json()
    assert report["ok"] is True, report


@pytest.mark.parametrize("affordable", [17, 1])
def test_parallel_reserves_never_overspend(
    server: str, client: TestClient[Any], funded: Callable[[str], str], affordable: int
) -> None:
    each = Decimal("0.003")  # 1000 x 2/1e6 + 100 x 10/1e6
    account_id = funded(f"{each * affordable}")

    def work(http: httpx.Client, i: int) -> int:
        r = http.post(f"{server}/v1/holds", json=reserve_body(account_id, f"k{i}"), headers=auth(GATEWAY))
        return r.status_code

    statuses = Counter(together(PARALLEL, work))
    assert statuses == {201: affordable, 402: PARALLEL - affordable}
    assert account(client, account_id) == {
        "balance": each * affordable,
        "held": each * affordable,
        "available": Decimal(0),
    }
    integrity_ok(client)


@pytest.mark.parametrize("funds", ["1", "0.003"])
def test_parallel_duplicate_reserves_make_one_hold(
    server: str, client: TestClient[Any], funded: Callable[[str], str], funds: str
) -> None:
    """Same key, same body: one hold, every other answer a 200 replay, also when the one
    hold takes all the funds (the replay must win over a 402)."""
    account_id = funded(funds)

    def work(http: httpx.Client, i: int) -> tuple[int, str]:
        r = http.post(f"{server}/v1/holds", json=reserve_body(account_id, "the-one"), headers=auth(GATEWAY))
        return r.status_code, r.json().get("id", r.text)

    results = together(20, work)
    assert Counter(s for s, _ in results) == {201: 1, 200: 19}
    assert len({hold_id for _, hold_id in results}) == 1
    assert account(client, account_id)["held"] == Decimal("0.003")


def test_settle_racing_release_has_one_winner(
    server: str, client: TestClient[Any], funded: Callable[[str], str]
) -> None:
    account_id = funded("1")
    holds = [
        client.post("/v1/holds", json=reserve_body(account_id, f"h{i}"), headers=auth(GATEWAY)).json()["id"]
        for i in range(25)
    ]

    def work(http: httpx.Client, i: int) -> tuple[str, str, int]:
        hold_id = holds[i // 2]
        if i % 2 == 0:
            r = http.post(
                f"{server}/v1/holds/{hold_id}/settle",
                json={"usage": {"prompt_tokens": 100, "completion_tokens": 10}},
                headers=auth(GATEWAY),
            )
            return hold_id, "settle", r.status_code
        r = http.post(f"{server}/v1/holds/{hold_id}/release", headers=auth(GATEWAY))
        return hold_id, "release", r.status_code

    results = together(2 * len(holds), work)
    settled = 0
    for hold_id in holds:
        mine = {verb: status for h, verb, status in results if h == hold_id}
        assert sorted(mine.values()) == [200, 409], mine
        state = client.get(f"/v1/holds/{hold_id}", headers=auth(GATEWAY)).json()["state"]
        winner = "settle" if mine["settle"] == 200 else "release"
        assert state == {"settle": "settled", "release": "released"}[winner]
        settled += winner == "settle"
    charge = Decimal("0.0003")  # 100 x 2 + 10 x 10 per 1e6
    assert account(client, account_id) == {
        "balance": 1 - settled * charge,
        "held": Decimal(0),
        "available": 1 - settled * charge,
    }
    integrity_ok(client)


def test_repeated_settles_charge_once(
    server: str, client: TestClient[Any], funded: Callable[[str], str]
) -> None:
    account_id = funded("1")
    hold_id = client.post("/v1/holds", json=reserve_body(account_id, "x"), headers=auth(GATEWAY)).json()["id"]

    def work(http: httpx.Client, i: int) -> tuple[int, Any]:
        r = http.post(
            f"{server}/v1/holds/{hold_id}/settle",
            json={"usage": {"prompt_tokens": 500, "completion_tokens": 50}},
            headers=auth(GATEWAY),
        )
        return r.status_code, r.json().get("charge")

    results = together(20, work)
    assert {status for status, _ in results} == {200}
    assert len({str(charge) for _, charge in results}) == 1
    assert account(client, account_id)["balance"] == Decimal("0.9985")
    journal = client.get(
        f"/admin/v1/accounts/{account_id}/transactions", params={"limit": 50}, headers=auth(VIEWER)
    ).json()["data"]
    assert Counter(t["kind"] for t in journal) == {"deposit": 1, "reserve": 1, "settle": 1}


def test_mixed_storm_on_one_account_no_500_no_deadlock(
    server: str, client: TestClient[Any], funded: Callable[[str], str]
) -> None:
    account_id = funded("0.05")

    def work(http: httpx.Client, i: int) -> list[int]:
        seen: list[int] = []
        for round_ in range(6):
            r = http.post(
                f"{server}/v1/holds", json=reserve_body(account_id, f"s{i}-{round_}"), headers=auth(GATEWAY)
            )
            seen.append(r.status_code)
            if r.status_code != 201:
                continue
            hold_id = r.json()["id"]
            verb = ("settle", "release", "interrupt")[(i + round_) % 3]
            body = (
                {"usage": {"prompt_tokens": 200 + i, "completion_tokens": 20}} if verb != "release" else None
            )
            r = http.post(f"{server}/v1/holds/{hold_id}/{verb}", json=body, headers=auth(GATEWAY))
            seen.append(r.status_code)
            if verb == "interrupt":
                r = http.post(f"{server}/v1/holds/{hold_id}/settle", json=body, headers=auth(GATEWAY))
                seen.append(r.status_code)
        return seen

    statuses = Counter(s for seen in together(PARALLEL, work) for s in seen)
    assert set(statuses) <= {200, 201, 402}, statuses
    assert statuses[201] > 0
    after = account(client, account_id)
    assert after["held"] == 0
    assert after["available"] == after["balance"]
    assert after["balance"] >= 0
    integrity_ok(client)
    assert (
        client.get(
            "/admin/v1/holds", params={"account_id": account_id, "state": "open"}, headers=auth(VIEWER)
        ).json()["data"]
        == []
    )


def test_server_metrics_count_requests(server: str) -> None:
    text = httpx.get(f"{server}/metrics").text
    assert 'route="/v1/holds"' in text
    assert "ledger_journal_transactions_total" in text


_ = (FINANCE, new_id)


def test_parallel_settles_consume_grants_exactly_once(
    server: str, client: TestClient[Any], funded: Callable[[str], str]
) -> None:
    """30 settles of one account at once, paid first from three grants (locked in order)."""
    account_id = funded("1")
    grant_ids = []
    for priority in (5, 0, 9):
        r = client.post(
            f"/admin/v1/accounts/{account_id}/grants",
            json={
                "idempotency_key": new_id("g"),
                "amount": "0.001",
                "priority": priority,
                "expires_at": "2999-01-01T00:00:00Z",
                "reason": "concurrency",
            },
            headers=auth(FINANCE),
        )
        assert r.status_code == 201, r.text
        grant_ids.append(r.json()["grant_id"])
    holds = [
        client.post("/v1/holds", json=reserve_body(account_id, f"g{i}"), headers=auth(GATEWAY)).json()["id"]
        for i in range(30)
    ]

    def work(http: httpx.Client, i: int) -> int:
        r = http.post(
            f"{server}/v1/holds/{holds[i]}/settle",
            json={"usage": {"prompt_tokens": 100, "completion_tokens": 10}},  # 0.0003 each
            headers=auth(GATEWAY),
        )
        return r.status_code

    assert set(together(len(holds), work)) == {200}
    grants = client.get(f"/admin/v1/accounts/{account_id}/grants", headers=auth(VIEWER)).json()["data"]
    assert {g["remaining"] for g in grants} == {"0"}
    body = client.get(f"/v1/accounts/{account_id}/balance", headers=auth(GATEWAY)).json()
    # 1 paid + 0.003 granted - 30 x 0.0003: the grants pay 0.003, paid pays 0.006.
    assert (body["balance"], body["paid"], body["granted"]) == ("0.994", "0.994", "0")
    integrity_ok(client)

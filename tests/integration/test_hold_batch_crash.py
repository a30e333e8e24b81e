"""Exactly once through SIGKILL, on the group-committed hot path.

A `ledger serve` process takes a storm of reserves (then settles) on one account, many
of them in flight in one batch, and is killed with SIGKILL in the middle. A new process
then gets every request again, with the same idempotency keys, as a gateway retrying
would. Whatever the killed process had committed (a batch commits whole or not at all),
every key ends with exactly one hold, every hold is settled exactly once, and the books
agree.
"""

from __future__ import annotations

import signal
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
from litestar.testing import TestClient

from tests.conftest import GATEWAY, TEST_ENV, VIEWER, auth, fresh_currency, publish, simple_document
from tests.serving import Server

N = 120
CHARGE = Decimal("0.0003")  # 100 prompt x 2 + 10 completion x 10, per 1e6


def storm(base: str, paths: list[tuple[str, dict[str, Any]]], kill: Server | None) -> list[int | None]:
    """POST every (path, body) at once; SIGKILL `kill` once some have been answered."""
    answered = threading.Event()
    statuses: list[int | None] = [None] * len(paths)

    def one(i: int) -> None:
        path, body = paths[i]
        try:
            with httpx.Client(timeout=10) as http:
                statuses[i] = http.post(base + path, json=body, headers=auth(GATEWAY)).status_code
                answered.set()
        except httpx.HTTPError:
            statuses[i] = None  # the process died under it

    with ThreadPoolExecutor(max_workers=len(paths)) as pool:
        futures = [pool.submit(one, i) for i in range(len(paths))]
        if kill is not None:
            answered.wait(10)
            kill.proc.send_signal(signal.SIGKILL)
        for future in futures:
            future.result()
    return statuses


def serve(database: str, log: Path) -> Server:
    server = Server({**TEST_ENV, "LEDGER_DATABASE_URL": database}, log, stop_timeout=10)
    server.wait_ready(30)
    return server


def test_a_killed_process_leaves_each_request_applied_once(
    database: str, client: TestClient[Any], make_account: Any, tmp_path: Path
) -> None:
    currency = fresh_currency()
    publish(client, simple_document(currency))
    account_id = make_account("100", currency=currency)
    reserves = [
        (
            "/v1/holds",
            {
                "account_id": account_id,
                "idempotency_key": f"crash-{i}",
                "model": "t-simple",
                "max_output_tokens": 100,
            },
        )
        for i in range(N)
    ]

    first = serve(database, tmp_path / "first.log")
    try:
        killed = storm(first.base, reserves, kill=first)
    finally:
        first.stop()
    assert killed.count(None) + killed.count(201) == N  # answered, or cut off by the kill
    print("reserves answered before the kill:", killed.count(201), "cut off:", killed.count(None))

    second = serve(database, tmp_path / "second.log")
    try:
        again = storm(second.base, reserves, kill=None)
        assert all(status in (200, 201) for status in again), Counter(again)
        with httpx.Client(base_url=second.base, headers=auth(GATEWAY)) as http:
            holds = [http.post(path, json=body).json()["id"] for path, body in reserves]  # replays
        assert len(set(holds)) == N  # one hold per key
        settles = [
            (f"/v1/holds/{h}/settle", {"usage": {"prompt_tokens": 100, "completion_tokens": 10}})
            for h in holds
        ]
        third_killed = storm(second.base, settles, kill=second)
        assert third_killed.count(None) + third_killed.count(200) == N
        print(
            "settles answered before the kill:", third_killed.count(200), "cut off:", third_killed.count(None)
        )
    finally:
        second.stop()

    third = serve(database, tmp_path / "third.log")
    try:
        final = storm(third.base, settles, kill=None)
        assert set(final) == {200}, Counter(final)
    finally:
        third.stop()
    third.assert_no_tracebacks()

    balance = client.get(f"/v1/accounts/{account_id}/balance", headers=auth(GATEWAY)).json()
    assert Decimal(balance["held"]) == 0
    assert Decimal(balance["balance"]) == 100 - N * CHARGE  # each hold charged exactly once
    journal = client.get(
        f"/admin/v1/accounts/{account_id}/transactions", params={"limit": 500}, headers=auth(VIEWER)
    ).json()["data"]
    assert Counter(t["kind"] for t in journal) == {"deposit": 1, "reserve": N, "settle": N}
    report = client.get("/admin/v1/integrity", headers=auth(VIEWER)).json()
    assert report["ok"] is True, report

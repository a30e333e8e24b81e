"""A usage object is kept with the hold as sent, so it is bounded like metadata.

The unpriced fields of a settle, checkpoint, interrupt or admin settle are stored with
the hold (JSONB): beyond `MAX_USAGE_BYTES` as JSON the request is 422 `usage_invalid`
with param `usage`, and nothing changes (the hold stays open without usage, the balance
is untouched). At the bound exactly it is accepted and stored as sent.
"""

from __future__ import annotations

from typing import Any

import msgspec
from litestar.testing import TestClient

from tests.conftest import FINANCE, assert_integrity, auth, balance, call, reserve

MAX_USAGE_BYTES = 16_384  # the documented bound, the same as metadata's (ledger.schemas)


def sized(total: int) -> dict[str, Any]:
    """A valid usage whose JSON is exactly `total` bytes (one unpriced string field pads it)."""
    base = {"prompt_tokens": 300, "completion_tokens": 50, "upstream_note": ""}
    pad = total - len(msgspec.json.encode(base))
    assert pad > 0
    usage = {**base, "upstream_note": "x" * pad}
    assert len(msgspec.json.encode(usage)) == total
    return usage


def test_usage_over_the_bound_is_refused_everywhere_and_nothing_is_stored(
    client: TestClient[Any], world: dict[str, Any]
) -> None:
    hold = reserve(client, world["account"], max_output_tokens=100).json()
    before = balance(client, world["account"])
    too_big = sized(MAX_USAGE_BYTES + 1)
    attempts = [
        call(client, hold["id"], "usage", {"usage": too_big}),
        call(client, hold["id"], "interrupt", {"usage": too_big}),
        call(client, hold["id"], "settle", {"usage": too_big}),
        client.post(
            f"/admin/v1/holds/{hold['id']}/settle",
            json={"reason": "test", "usage": too_big},
            headers=auth(FINANCE),
        ),
    ]
    for r in attempts:
        assert r.status_code == 422, r.text
        assert r.json()["error"]["code"] == "usage_invalid"
        assert r.json()["error"]["param"] == "usage"
    stored = client.get(f"/admin/v1/holds/{hold['id']}", headers=auth(FINANCE)).json()
    assert (stored["state"], stored["usage"], stored["charge"]) == ("open", None, None)
    assert balance(client, world["account"]) == before
    # At the bound exactly: stored as sent, and charged as usual.
    at_bound = sized(MAX_USAGE_BYTES)
    r = call(client, hold["id"], "usage", {"usage": at_bound})
    assert r.status_code == 200, r.text
    r = call(client, hold["id"], "settle", {"usage": at_bound})
    assert r.status_code == 200, r.text
    assert r.json()["usage"] == at_bound
    assert r.json()["charge"]["amount"] == "0.0011"  # 300 x 2/1e6 + 50 x 10/1e6
    assert_integrity(client)

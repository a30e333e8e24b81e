"""Group commit: the gateway's reserves, settles and releases, many per database round trip.

One `HoldBatcher` per process (per event loop), with `LEDGER_BATCH_LANES` lanes
(`ledger.holds.lane`), each with its own connection. An operation goes to the lane of
its account (a stable hash), so an account's operations go through one lane: a hot
account's operations coalesce into one batch per round trip instead of queueing for its
row lock in several, while different accounts' batches run in parallel. The exception is
a release of a hold this process did not reserve (its account unknown without a read):
it goes to the lane of its hold id. Correctness never depends on the lane (every batch
locks its accounts in id order); only how well a hot account's operations coalesce.

A batch is one call of the database function `ledger_hold_batch`
(migrations/sql/ledger_hold_batch.sql): one statement, one transaction, one commit.
Each operation gets its own outcome; one operation's refusal (insufficient funds, a
budget, a frozen account, a stale price version) never touches another's. Alone, an
operation is sent at once (on the next turn of the event loop, no timer).
"""

from __future__ import annotations

import zlib
from typing import Any

from ledger.holds.lane import Lane


class HoldBatcher:
    """Coalesces hold operations into `ledger_hold_batch` calls; `submit` answers one row."""

    def __init__(
        self,
        url: str,
        *,
        lanes: int = 1,
        pipeline: int = 2,
        max_batch: int = 200,
        connect_timeout: int = 5,
    ) -> None:
        self.lanes = [
            Lane(url, pipeline=pipeline, max_batch=max_batch, connect_timeout=connect_timeout)
            for _ in range(lanes)
        ]

    async def submit(self, operation: dict[str, Any], account_id: str) -> Any:
        """Queue one operation in the lane of `account_id`; its row (op_index, op_outcome,
        op_detail, hold columns) once its batch has committed."""
        lane = self.lanes[zlib.crc32(account_id.encode()) % len(self.lanes)]
        return await lane.submit(operation)

    async def close(self) -> None:
        for lane in self.lanes:
            await lane.close()

"""The hold service: the gateway's hot path (twice per model request) and the admin's.

`HoldService` is the one object controllers, workers and the console use; its parts:
- `ledger.holds.reserve`: reserve (group-committed);
- `ledger.holds.lifecycle`: checkpoint, interrupt, settle, release, admin settle,
  true-up (group-committed where the batch can decide, else the locked path);
- `ledger.holds.core`: connections, caches, reads, pricing of usage;
- `ledger.holds.views`: the API's view of a hold and the parsing the parts share.

Lock order, everywhere: the hold's account row first (the only lock anything waits on),
then the hold, then its grants and budget row; every operation decides under that lock
and commits in one transaction, and a refused request changes nothing.
"""

from __future__ import annotations

from ledger.holds.lifecycle import Lifecycle
from ledger.holds.reserve import Reserve


class HoldService(Reserve, Lifecycle):
    """Reserve, settle, release, checkpoint, interrupt, admin settle and the hold reads."""

"""Wire shapes of reconciliation runs. Amounts are decimal strings, never floats."""

from __future__ import annotations

from typing import Literal

import msgspec

Trigger = Literal["cli", "api", "schedule", "embedded"]
TRIGGERS: tuple[Trigger, ...] = ("cli", "api", "schedule", "embedded")
Action = Literal["settled", "released"]


class RunItem(msgspec.Struct, frozen=True):
    """One hold the run resolved, and why."""

    hold_id: str
    account_id: str
    currency: str
    action: Action
    why: str
    charge: str | None  # the amount charged (settled), None when released
    released: str  # the part of the hold's amount returned to the account


class RunError(msgspec.Struct, frozen=True):
    """A hold the run could not resolve (left untouched), or the failure of the whole run."""

    message: str
    hold_id: str | None = None
    code: str | None = None


class CurrencyTotals(msgspec.Struct, frozen=True):
    settled: int
    released: int
    charged_amount: str
    released_amount: str


class ReconciliationRun(msgspec.Struct, frozen=True):
    """A run's summary: what `ledger reconcile` prints and the admin API returns.

    `skipped` counts eligible holds this run found locked by another transaction (another
    reconciler, or the gateway acting on the account at that moment); they are left for
    whoever holds the lock, or the next run.
    """

    run_id: str
    status: Literal["running", "succeeded", "failed"]
    trigger: str
    actor: str
    grace_seconds: int
    started_at: str
    finished_at: str | None
    settled: int
    released: int
    skipped: int
    charged_amount: str
    released_amount: str
    by_currency: dict[str, CurrencyTotals]
    items: list[RunItem]
    errors: list[RunError]

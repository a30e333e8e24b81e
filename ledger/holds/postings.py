"""The journal legs of the hold operations of the locked path (docs/architecture.md has the same table).

The batch function `ledger_hold_batch` writes the same legs for what it decides
(reserve, a settle that no grant pays, release); the locked path writes these.

H = the hold's reserved amount, X = the charge, R = a revenue shard of the currency.

| operation        | legs                                                     |
|------------------|----------------------------------------------------------|
| reserve          | account/main -H, account/hold +H                         |
| settle           | account/hold -H, account/main +(H - (X - G)),            |
|                  | account/grant:<i> -g_i, R +X                             |
| release          | account/hold -H, account/main +H                         |
| true-up (late)   | account/main -(D - G), account/grant:<i> -g_i, R +D      |

A reservation leaves `balance` unchanged and raises `held`; a settle lowers
`balance` by exactly X (below zero when X exceeds what the account had: overage);
a release restores `available` exactly.

G = sum of g_i: what the account's live grants pay of the charge X (or of a positive
true-up difference D = X' - X), taken in order of priority, then earliest expiry, then
grant id, each up to its remaining (`ledger.grants.repository.consumption_ctes`); the
rest comes from paid (main). A negative true-up (a refund) goes back to main: paid.
Zero legs are left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from uuid import UUID

from ledger.journal.postings import Leg, grant_book, revenue_account
from pricing.money import EXACT, add

GrantTakes = Sequence[tuple[UUID, Decimal]]


def _from_grants(account_id: str, takes: GrantTakes) -> tuple[Decimal, list[Leg]]:
    return add(*(g for _, g in takes)), [Leg(account_id, g.copy_negate(), grant_book(i)) for i, g in takes]


def settle_legs(
    account_id: str, currency: str, hold_id: str, held: Decimal, charge: Decimal, takes: GrantTakes = ()
) -> list[Leg]:
    taken, grant_legs = _from_grants(account_id, takes)
    return [
        Leg(account_id, -held, "hold"),
        Leg(account_id, EXACT.add(EXACT.subtract(held, charge), taken), "main"),
        *grant_legs,
        Leg(revenue_account(currency, hold_id), charge, "main"),
    ]


def release_legs(account_id: str, held: Decimal) -> list[Leg]:
    return [Leg(account_id, -held, "hold"), Leg(account_id, held, "main")]


def true_up_legs(
    account_id: str, currency: str, hold_id: str, difference: Decimal, takes: GrantTakes = ()
) -> list[Leg]:
    taken, grant_legs = _from_grants(account_id, takes)
    return [
        Leg(account_id, EXACT.subtract(taken, difference), "main"),
        *grant_legs,
        Leg(revenue_account(currency, hold_id), difference, "main"),
    ]


def moves_money(legs: list[Leg]) -> bool:
    return any(leg.amount != 0 for leg in legs)

"""The journal legs of each hold operation (the README has the same table).

H = the hold's reserved amount, X = the charge, R = a revenue shard of the currency.

| operation        | legs                                                     |
|------------------|----------------------------------------------------------|
| reserve          | account/main -H, account/hold +H                         |
| settle           | account/hold -H, account/main +(H - X), R +X             |
| release          | account/hold -H, account/main +H                         |
| true-up (late)   | account/main -(X' - X), R +(X' - X)                      |

A reservation leaves `balance` unchanged and raises `held`; a settle lowers
`balance` by exactly X (below zero when X exceeds what the account had: overage);
a release restores `available` exactly.
"""

from __future__ import annotations

from decimal import Decimal

from ledger.journal.postings import Leg, revenue_account


def reserve_legs(account_id: str, amount: Decimal) -> list[Leg]:
    return [Leg(account_id, -amount, "main"), Leg(account_id, amount, "hold")]


def settle_legs(account_id: str, currency: str, hold_id: str, held: Decimal, charge: Decimal) -> list[Leg]:
    return [
        Leg(account_id, -held, "hold"),
        Leg(account_id, held - charge, "main"),
        Leg(revenue_account(currency, hold_id), charge, "main"),
    ]


def release_legs(account_id: str, held: Decimal) -> list[Leg]:
    return [Leg(account_id, -held, "hold"), Leg(account_id, held, "main")]


def true_up_legs(account_id: str, currency: str, hold_id: str, difference: Decimal) -> list[Leg]:
    return [Leg(account_id, -difference, "main"), Leg(revenue_account(currency, hold_id), difference, "main")]


def moves_money(legs: list[Leg]) -> bool:
    return any(leg.amount != 0 for leg in legs)

"""Every SQL statement of the holds domain.

Lock order, everywhere: the account row first (FOR UPDATE), then its holds. Every
change to a hold is made while its account row is locked, so the account lock
alone serializes everything that can touch the account's money.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

import msgspec
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from ledger.budgets import repository as budgets
from ledger.grants.repository import consumption_ctes

HOLD_COLUMNS = (
    "id, account_id, idempotency_key, request_hash, state, model, price_version, currency, amount, "
    "reservation, ttl_seconds, expires_at, metadata, usage, gateway_usage, charge, charged, released, "
    "overage, overage_flagged, true_up, resolved_by, resolved_reason, interrupted_at, resolved_at, "
    "created_at, updated_at, budget_key"
)

_GET = text(f"SELECT {HOLD_COLUMNS} FROM holds WHERE id = :id")
_FIND_BY_KEY = text(
    "SELECT id, request_hash FROM holds WHERE account_id = :account_id AND idempotency_key = :key"
)
_ACCOUNT_CURRENCY = text("SELECT currency FROM accounts WHERE id = :id AND kind = 'customer'")
_ACTIVE_VERSION = text(
    "SELECT version FROM price_versions WHERE currency = :currency AND effective_at <= now() "
    "ORDER BY effective_at DESC, id DESC LIMIT 1"
)

# The whole reservation as ONE statement (run in autocommit: one round trip, no BEGIN or
# COMMIT). The account row is locked first (FOR UPDATE; after a wait PostgreSQL re-reads
# it, so the funds check sees the latest balance). The hold and its journal transaction
# are written only if: no hold has this idempotency key, the price version the caller
# sized the reservation with is still the active one (or was pinned), the account is not
# frozen (read from the locked row, so a freeze that commits while this waits is seen),
# and available covers the amount. Otherwise nothing is written and the row says why. A concurrent
# duplicate key (the key lookup can be stale after a lock wait) fails on the unique
# index and is retried by the caller. With a budget_key, the key's budget row is locked
# next (after the account's) and checked too, and the hold is added to its `held`.
_RESERVE_HEAD = f"""
    WITH a AS (
      SELECT id, currency, balance, held, credit_limit, frozen_at, ledger_lapsed_grants(id) AS lapsed
        FROM accounts WHERE id = :account_id AND kind = 'customer' FOR UPDATE
    ){{budget_lock}}, v AS (
      SELECT (SELECT pv.version FROM price_versions pv
                WHERE pv.currency = a.currency AND pv.effective_at <= now()
                ORDER BY pv.effective_at DESC, pv.id DESC LIMIT 1) AS active_version
        FROM a
    ), ex AS (
      SELECT id AS existing_id, request_hash AS existing_hash FROM holds
       WHERE account_id = :account_id AND idempotency_key = :key
    ), go AS (
      SELECT a.id FROM a, v
       WHERE NOT EXISTS (SELECT 1 FROM ex)
         AND a.currency = :currency
         AND a.frozen_at IS NULL
         AND (CAST(:pinned AS boolean) OR v.active_version = :price_version)
         AND a.balance - a.lapsed + a.credit_limit - a.held >= :amount{{budget_condition}}
    ), h AS (
      INSERT INTO holds (id, account_id, idempotency_key, request_hash, state, model, price_version, currency,
                         amount, reservation, ttl_seconds, expires_at, metadata, budget_key)
      SELECT :id, :account_id, :key, :request_hash, 'open', :model, :price_version, :currency,
             :amount, CAST(:reservation AS jsonb), :ttl, now() + make_interval(secs => :ttl),
             CAST(:metadata AS jsonb), :budget_key
        FROM go
      RETURNING {HOLD_COLUMNS}
    )"""
_RESERVE_TAIL = """
    SELECT a.currency AS account_currency, a.balance AS account_balance, a.held AS account_held,
           a.credit_limit AS account_credit_limit, a.lapsed AS account_lapsed,
           a.frozen_at AS account_frozen_at, v.active_version,
           ex.existing_id, ex.existing_hash, {budget_columns}h.*
      FROM a CROSS JOIN v LEFT JOIN ex ON true LEFT JOIN h ON true{budget_join}
    """
_STATEMENTS: dict[tuple[Any, ...], Any] = {}


def _journal_ctes(kind: str, source: str, n_legs: int) -> str:
    """CTEs writing a journal transaction for the one row of CTE `source` (none if no legs).

    Legs come as parameters :a<i> (account), :b<i> (book), :m<i> (amount); the entry
    trigger applies them to the accounts and checks each account's currency.
    """
    if n_legs == 0:
        return ""
    values = ", ".join(f"(:a{i}, :b{i}, CAST(:m{i} AS numeric))" for i in range(n_legs))
    return f"""
    , t AS (
      INSERT INTO journal_transactions (kind, account_id, hold_id, actor)
      SELECT '{kind}', {source}.account_id, {source}.id, :actor FROM {source} RETURNING id
    ), e AS (
      INSERT INTO journal_entries (transaction_id, account_id, currency, book, amount)
      SELECT t.id, legs.account_id, :currency, legs.book, legs.amount
        FROM t, (VALUES {values}) AS legs (account_id, book, amount)
    )"""


def _settle_journal_ctes(n_legs: int) -> str:
    """The settle's journal transaction, taking what it can of the charge from live grants.

    The legs come as parameters, as in `_journal_ctes`; `gl`/`take` (locked after the
    account and the hold) say what each live grant pays of :charged, and the SQL adds
    grant legs -g_i and raises the account's main leg by their sum. Zero legs are left
    out, and no transaction is written when every leg is zero.
    """
    values = ", ".join(f"(:a{i}, :b{i}, CAST(:m{i} AS numeric))" for i in range(n_legs))
    return f"""
    , {consumption_ctes("l.account_id", ":charged", joined="l", gate="l.state IN ('open', 'interrupted')")}
    , legs AS (
      SELECT v.account_id, v.book,
             v.amount + CASE WHEN v.book = 'main' AND v.account_id = l.account_id
                             THEN (SELECT coalesce(sum(take.amount), 0) FROM take) ELSE 0 END AS amount
        FROM l, (VALUES {values}) AS v (account_id, book, amount)
      UNION ALL
      SELECT l.account_id, 'grant:' || take.id, -take.amount FROM l, take WHERE take.amount > 0
    ), t AS (
      INSERT INTO journal_transactions (kind, account_id, hold_id, actor)
      SELECT 'settle', u.account_id, u.id, :actor FROM u
       WHERE EXISTS (SELECT 1 FROM legs WHERE legs.amount <> 0)
      RETURNING id
    ), e AS (
      INSERT INTO journal_entries (transaction_id, account_id, currency, book, amount)
      SELECT t.id, legs.account_id, :currency, legs.book, legs.amount FROM t, legs WHERE legs.amount <> 0
    )"""


def _leg_params(params: dict[str, Any], legs: list[Any]) -> None:
    for i, leg in enumerate(legs):
        params[f"a{i}"], params[f"b{i}"], params[f"m{i}"] = leg.account_id, leg.book, leg.amount


# Lock the hold's account, then the hold, in one statement. Rows are locked in the order
# of the OF list (account first, as everywhere), and after waiting for a lock PostgreSQL
# re-reads every locked row, so the hold returned is its latest committed version.
_LOCK_HOLD = text(
    "SELECT " + ", ".join(f"h.{c.strip()}" for c in HOLD_COLUMNS.split(",")) + " FROM holds h "
    "JOIN accounts a ON a.id = h.account_id WHERE h.id = :id FOR UPDATE OF a, h"
)

_LIST = text(
    f"""
    SELECT {HOLD_COLUMNS} FROM holds
     WHERE (CAST(:state AS text) IS NULL OR state = :state)
       AND (CAST(:account_id AS text) IS NULL OR account_id = :account_id)
       AND (CAST(:older_than AS timestamptz) IS NULL OR created_at <= :older_than)
       AND id > :after
     ORDER BY id LIMIT :limit
    """
)


def _json(value: Any) -> str | None:
    return None if value is None else msgspec.json.encode(value).decode()


def _reserve_sql(n_legs: int, budgeted: bool) -> str:
    """The reserve statement; `budgeted` (a budget_key was given) adds the budget's pieces
    (ledger.budgets.repository): lock its row after the account's, check, add to held."""
    pieces = {"budget_lock": "", "budget_condition": "", "budget_columns": "", "budget_join": ""}
    if budgeted:
        pieces = {
            "budget_lock": budgets.RESERVE_LOCK,
            "budget_condition": budgets.RESERVE_CONDITION,
            "budget_columns": budgets.RESERVE_COLUMNS,
            "budget_join": budgets.RESERVE_JOIN,
        }
    head = _RESERVE_HEAD.replace("{budget_lock}", pieces["budget_lock"]).replace(
        "{budget_condition}", pieces["budget_condition"]
    )
    write = budgets.RESERVE_WRITE if budgeted else ""
    tail = _RESERVE_TAIL.format(budget_columns=pieces["budget_columns"], budget_join=pieces["budget_join"])
    return head + _journal_ctes("reserve", "h", n_legs) + write + tail


async def reserve(conn: AsyncConnection, *, legs: list[Any], **params: Any) -> Any | None:
    """Run the one-statement reservation; None when the account does not exist."""
    budgeted = params["budget_key"] is not None
    key = ("reserve", len(legs), budgeted)
    statement = _STATEMENTS.get(key)
    if statement is None:
        statement = _STATEMENTS[key] = text(_reserve_sql(len(legs), budgeted))
    params["reservation"] = _json(params["reservation"])
    params["metadata"] = _json(params["metadata"])
    _leg_params(params, legs)
    return (await conn.execute(statement, params)).first()


_HOLD_TERMS = text(
    "SELECT id, account_id, currency, model, price_version, amount, state, budget_key, "
    "CAST(reservation ->> 'n' AS integer) AS n FROM holds WHERE id = :id"
)

# The account's review mark (accounts.review, migration 0007): why, which hold, when (UTC).
_REVIEW_MARK = (
    "jsonb_build_object('reason', CAST(:review_reason AS text), 'hold_id', CAST(:review_hold AS text), "
    """'at', to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))"""
)
_MARK_FOR_REVIEW = text(f"UPDATE accounts SET review = {_REVIEW_MARK} WHERE id = :account_id")


def _settle_statement(n_legs: int, budgeted: bool = False) -> Any:
    """Settle an unresolved hold in ONE statement (autocommit), or change nothing.

    Locks the account then the hold (FOR UPDATE OF a, h: the usual order; after a wait
    both rows are re-read), and only if the hold is still open or interrupted: marks it
    settled and writes the settle's journal transaction. The row returned says which.

    The charge is taken from the account's live grants first (`_settle_journal_ctes`):
    for an account without grants that is one probe of an empty partial index.

    A flagged settle (charge above the overage factor) also marks the account for
    review (CTE r). The hold's update waits for r (the EXISTS), and the journal entries,
    whose trigger moves the account's balance, come after the hold's update: so this
    statement's own update of the account row always precedes the trigger's, never
    follows it (PostgreSQL refuses a statement updating a row that one of its own
    triggers already changed).

    `budgeted` (the hold has a budget_key) adds the budget movement (CTEs bs, bo, bm of
    ledger.budgets.repository: the hold leaves `held`, its charge joins the spend).
    """
    key = ("settle", n_legs, budgeted)
    statement = _STATEMENTS.get(key)
    if statement is None:
        returned = ", ".join(f"u.{c.strip()}" for c in HOLD_COLUMNS.split(","))
        statement = _STATEMENTS[key] = text(
            f"""
            WITH l AS (
              SELECT h.id, h.state, h.account_id FROM holds h JOIN accounts a ON a.id = h.account_id
               WHERE h.id = :id FOR UPDATE OF a, h
            ), r AS (
              UPDATE accounts SET review = {_REVIEW_MARK}
                FROM l WHERE CAST(:flagged AS boolean) AND accounts.id = l.account_id
                 AND l.state IN ('open', 'interrupted')
              RETURNING accounts.id
            ), u AS (
              UPDATE holds SET state = 'settled', usage = CAST(:usage AS jsonb),
                     gateway_usage = CAST(:usage AS jsonb), charge = CAST(:charge AS jsonb),
                     charged = :charged, released = :released, overage = :overage,
                     overage_flagged = CAST(:flagged AS boolean), resolved_by = 'gateway', resolved_at = now()
                FROM l WHERE holds.id = l.id AND l.state IN ('open', 'interrupted')
                 AND (NOT CAST(:flagged AS boolean) OR EXISTS (SELECT 1 FROM r))
              RETURNING holds.*
            ){_settle_journal_ctes(n_legs)}{budgets.SETTLE_CTES if budgeted else ""}
            SELECT l.state AS locked_state, {budgets.SETTLE_COLUMNS if budgeted else ""}{returned}
              FROM l LEFT JOIN u ON true{budgets.SETTLE_JOIN if budgeted else ""}
            """
        )
    return statement


async def hold_terms(conn: AsyncConnection, hold_id: UUID) -> Any | None:
    """What prices a hold (immutable) and its state now."""
    return (await conn.execute(_HOLD_TERMS, {"id": hold_id})).first()


async def settle_unresolved(
    conn: AsyncConnection,
    hold_id: UUID,
    *,
    legs: list[Any],
    currency: str,
    actor: str,
    usage: dict[str, Any],
    charge: dict[str, Any],
    charged: Any,
    released: Any,
    overage: Any,
    review_reason: str | None,
    budgeted: bool = False,
) -> Any | None:
    """Settle in one statement; `review_reason` (not None) flags the hold and marks its account;
    `budgeted` (the hold has a budget_key) moves its budget too (`budget_*` columns)."""
    params: dict[str, Any] = {
        "flagged": review_reason is not None,
        "review_reason": review_reason,
        "review_hold": str(hold_id),
        "id": hold_id,
        "currency": currency,
        "actor": actor,
        "usage": _json(usage),
        "charge": _json(charge),
        "charged": charged,
        "released": released,
        "overage": overage,
    }
    _leg_params(params, legs)
    return (await conn.execute(_settle_statement(len(legs), budgeted), params)).first()


async def mark_for_review(conn: AsyncConnection, account_id: str, *, reason: str, hold_id: UUID) -> None:
    """Set the account's review mark (the last flagged settle's reason, hold and time)."""
    params = {"account_id": account_id, "review_reason": reason, "review_hold": str(hold_id)}
    await conn.execute(_MARK_FOR_REVIEW, params)


async def find_by_key(conn: AsyncConnection, account_id: str, key: str) -> Any | None:
    return (await conn.execute(_FIND_BY_KEY, {"account_id": account_id, "key": key})).first()


async def account_currency(conn: AsyncConnection, account_id: str) -> str | None:
    value: str | None = (await conn.execute(_ACCOUNT_CURRENCY, {"id": account_id})).scalar()
    return value.strip() if value else None


async def active_version(conn: AsyncConnection, currency: str) -> str | None:
    value: str | None = (await conn.execute(_ACTIVE_VERSION, {"currency": currency})).scalar()
    return value


async def get(conn: AsyncConnection, hold_id: UUID) -> Any | None:
    return (await conn.execute(_GET, {"id": hold_id})).first()


async def lock_hold(conn: AsyncConnection, hold_id: UUID) -> Any | None:
    """The hold, with its account row and then its own row locked FOR UPDATE."""
    return (await conn.execute(_LOCK_HOLD, {"id": hold_id})).first()


async def update(conn: AsyncConnection, hold_id: UUID, **changes: Any) -> Any:
    """Update the named columns (jsonb columns given as Python values) and return the row."""
    json_columns = {"usage", "gateway_usage", "charge"}
    sets = []
    params: dict[str, Any] = {"id": hold_id}
    for column, value in changes.items():
        if column == "expires_at" and value == "extend":
            sets.append("expires_at = now() + make_interval(secs => ttl_seconds)")
            continue
        if column in ("resolved_at", "interrupted_at") and value == "now":
            sets.append(f"{column} = now()")
            continue
        if column in json_columns:
            sets.append(f"{column} = CAST(:{column} AS jsonb)")
            params[column] = _json(value)
        else:
            sets.append(f"{column} = :{column}")
            params[column] = value
    statement = text(f"UPDATE holds SET {', '.join(sets)} WHERE id = :id RETURNING {HOLD_COLUMNS}")
    return (await conn.execute(statement, params)).one()


async def list_page(
    conn: AsyncConnection,
    *,
    state: str | None,
    account_id: str | None,
    older_than: datetime | None,
    after: UUID | None,
    limit: int,
) -> list[Any]:
    params = {
        "state": state,
        "account_id": account_id,
        "older_than": older_than,
        "after": after or UUID(int=0),
        "limit": limit,
    }
    return list((await conn.execute(_LIST, params)).all())

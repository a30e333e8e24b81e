"""Group commit: one function applies a batch of gateway reserves, settles and releases.

`ledger_hold_batch(ops jsonb)` takes a JSON array of operations (built by
`ledger.holds.batch`) and returns one row per operation: its index, an outcome and,
where there is one, the hold row. It runs as one statement, so a batch is one round
trip and one database transaction (one commit, one WAL flush) however many requests it
carries. The function changes nothing the triggers of 0001-0014 check: every hold
insert or update, journal transaction and entry goes through the same tables and the
same row and deferred triggers, so the balanced-transaction check, the append-only
guards, the hold-journal ties, the grant and alert triggers hold as before. If any of
them refuses, the whole batch rolls back and the service runs each of its operations
alone, so one bad operation never fails its neighbours.

Lock order, as everywhere: first every account row the batch touches, in id order
(FOR UPDATE), then, per operation, the rows that belong to it (its hold, its grants in
consumption order). Within the batch the operations run in arrival order, each statement
with a fresh snapshot (READ COMMITTED), so each sees the account as every earlier
operation left it: several reserves on one account are checked against available funds
one after another, exactly as if they had come one by one.

Outcomes (the service maps them to its answers):

| op      | outcome      | meaning                                                              |
|---------|--------------|----------------------------------------------------------------------|
| reserve | created      | the hold was written (hold row)                                      |
| reserve | exists       | the account already has a hold with this idempotency key (hold row)  |
| reserve | no_account   | no customer account with this id (and currency)                      |
| reserve | frozen       | the account is frozen                                                |
| reserve | version      | another price version is active (detail: active_version)             |
| reserve | insufficient | available does not cover the amount (detail: balance, held, limit)   |
| settle  | settled      | the open or interrupted hold was settled (hold row)                  |
| release | released     | the open or interrupted hold was released (hold row)                 |
| release | exists       | the hold was already released (hold row)                             |
| any     | fallback     | anything else (resolved, budgeted, missing, usage seen): the service |
|         |              | takes its transactional path, which decides replay, 409 or true-up   |

Holds with a budget_key are never handled here (fallback; their reserve never comes):
their budget movements stay in the single-statement and transactional paths.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-03
"""

from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

UPGRADE = r"""
CREATE FUNCTION ledger_hold_batch(ops jsonb)
  RETURNS TABLE (op_index integer, op_outcome text, op_detail jsonb, op_hold holds)
  LANGUAGE plpgsql AS $$
DECLARE
  n integer := jsonb_array_length(ops);
  o jsonb;
  k integer;
  a record;
  r holds;
  g record;
  v_txn bigint;
  v_amount numeric;
  v_charged numeric;
  v_need numeric;
  v_take numeric;
  v_taken numeric;
  v_books text[];
  v_takes numeric[];
  v_currency char(3);
  v_version text;
  v_version_currency char(3);
BEGIN
  -- Every account the batch touches, locked in id order before anything else.
  PERFORM 1 FROM accounts
   WHERE id IN (SELECT x ->> 'account_id' FROM jsonb_array_elements(ops) x WHERE x ->> 'op' = 'reserve'
                UNION
                SELECT hh.account_id FROM holds hh
                 WHERE hh.id IN (SELECT CAST(x ->> 'id' AS uuid) FROM jsonb_array_elements(ops) x
                                  WHERE x ->> 'op' <> 'reserve'))
     AND kind = 'customer'
   ORDER BY id
   FOR UPDATE;

  FOR k IN 0 .. n - 1 LOOP
    o := ops -> k;
    op_index := k;
    op_detail := NULL;
    op_hold := NULL;

    IF o ->> 'op' = 'reserve' THEN
      v_currency := o ->> 'currency';
      SELECT id, currency, balance, held, credit_limit, frozen_at INTO a FROM accounts
       WHERE id = o ->> 'account_id' AND kind = 'customer';
      IF NOT FOUND OR a.currency <> v_currency THEN
        op_outcome := 'no_account';
        RETURN NEXT;
        CONTINUE;
      END IF;
      SELECT * INTO r FROM holds WHERE account_id = a.id AND idempotency_key = o ->> 'key';
      IF FOUND THEN
        op_outcome := 'exists';
        op_hold := r;
        RETURN NEXT;
        CONTINUE;
      END IF;
      IF a.frozen_at IS NOT NULL THEN
        op_outcome := 'frozen';
        RETURN NEXT;
        CONTINUE;
      END IF;
      IF NOT CAST(o ->> 'pinned' AS boolean) THEN
        IF v_version_currency IS DISTINCT FROM v_currency THEN
          SELECT pv.version INTO v_version FROM price_versions pv
           WHERE pv.currency = v_currency AND pv.effective_at <= now()
           ORDER BY pv.effective_at DESC, pv.id DESC LIMIT 1;
          v_version_currency := v_currency;
        END IF;
        IF v_version IS DISTINCT FROM o ->> 'price_version' THEN
          op_outcome := 'version';
          op_detail := jsonb_build_object('active_version', v_version);
          RETURN NEXT;
          CONTINUE;
        END IF;
      END IF;
      v_amount := CAST(o ->> 'amount' AS numeric);
      IF a.balance + a.credit_limit - a.held < v_amount THEN
        op_outcome := 'insufficient';
        op_detail := jsonb_build_object('balance', CAST(a.balance AS text), 'held', CAST(a.held AS text),
                                        'credit_limit', CAST(a.credit_limit AS text));
        RETURN NEXT;
        CONTINUE;
      END IF;
      INSERT INTO holds (id, account_id, idempotency_key, request_hash, state, model, price_version, currency,
                         amount, reservation, ttl_seconds, expires_at, metadata)
      VALUES (CAST(o ->> 'id' AS uuid), a.id, o ->> 'key', o ->> 'request_hash', 'open', o ->> 'model',
              o ->> 'price_version', v_currency, v_amount, o -> 'reservation', CAST(o ->> 'ttl' AS integer),
              now() + make_interval(secs => CAST(o ->> 'ttl' AS integer)), o -> 'metadata')
      RETURNING * INTO r;
      IF v_amount <> 0 THEN
        INSERT INTO journal_transactions (kind, account_id, hold_id, actor)
        VALUES ('reserve', a.id, r.id, o ->> 'actor') RETURNING id INTO v_txn;
        INSERT INTO journal_entries (transaction_id, account_id, currency, book, amount)
        VALUES (v_txn, a.id, v_currency, 'main', -v_amount), (v_txn, a.id, v_currency, 'hold', v_amount);
      END IF;
      op_outcome := 'created';
      op_hold := r;
      RETURN NEXT;

    ELSIF o ->> 'op' = 'settle' THEN
      SELECT * INTO r FROM holds WHERE id = CAST(o ->> 'id' AS uuid);
      IF NOT FOUND OR r.state NOT IN ('open', 'interrupted') OR r.budget_key IS NOT NULL
         OR r.amount <> CAST(o ->> 'held' AS numeric) THEN
        op_outcome := 'fallback';
        RETURN NEXT;
        CONTINUE;
      END IF;
      v_charged := CAST(o ->> 'charged' AS numeric);
      -- What the account's live grants pay of the charge: priority, earliest expiry, id.
      v_taken := 0;
      v_books := '{}';
      v_takes := '{}';
      IF v_charged > 0 THEN
        v_need := v_charged;
        FOR g IN SELECT gr.id, gr.remaining FROM grants gr
                  WHERE gr.account_id = r.account_id AND gr.remaining > 0 AND gr.expires_at > now()
                  ORDER BY gr.priority, gr.expires_at, gr.id
                  FOR UPDATE OF gr LOOP
          EXIT WHEN v_need <= 0;
          v_take := least(g.remaining, v_need);
          v_need := v_need - v_take;
          v_taken := v_taken + v_take;
          v_books := v_books || ('grant:' || g.id);
          v_takes := v_takes || v_take;
        END LOOP;
      END IF;
      IF CAST(o ->> 'flagged' AS boolean) THEN
        UPDATE accounts
           SET review = jsonb_build_object(
                 'reason', o ->> 'review_reason', 'hold_id', CAST(r.id AS text),
                 'at', to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))
         WHERE id = r.account_id;
      END IF;
      IF r.amount <> 0 OR v_charged <> 0 THEN
        INSERT INTO journal_transactions (kind, account_id, hold_id, actor)
        VALUES ('settle', r.account_id, r.id, o ->> 'actor') RETURNING id INTO v_txn;
        INSERT INTO journal_entries (transaction_id, account_id, currency, book, amount)
        SELECT v_txn, legs.account_id, r.currency, legs.book, legs.amount
          FROM (VALUES (r.account_id, 'hold', -r.amount),
                       (r.account_id, 'main', r.amount - v_charged + v_taken),
                       (o ->> 'revenue', 'main', v_charged)) AS legs (account_id, book, amount)
         WHERE legs.amount <> 0
        UNION ALL
        SELECT v_txn, r.account_id, r.currency, gl.book, -gl.amount
          FROM unnest(v_books, v_takes) AS gl (book, amount);
      END IF;
      UPDATE holds
         SET state = 'settled', usage = o -> 'usage', gateway_usage = o -> 'usage', charge = o -> 'charge',
             charged = v_charged, released = greatest(r.amount - v_charged, 0),
             overage = greatest(v_charged - r.amount, 0), overage_flagged = CAST(o ->> 'flagged' AS boolean),
             resolved_by = 'gateway', resolved_at = now()
       WHERE id = r.id
       RETURNING * INTO r;
      op_outcome := 'settled';
      op_hold := r;
      RETURN NEXT;

    ELSIF o ->> 'op' = 'release' THEN
      SELECT * INTO r FROM holds WHERE id = CAST(o ->> 'id' AS uuid);
      IF FOUND AND r.state = 'released' THEN
        op_outcome := 'exists';
        op_hold := r;
        RETURN NEXT;
        CONTINUE;
      END IF;
      IF NOT FOUND OR r.state NOT IN ('open', 'interrupted') OR r.usage IS NOT NULL
         OR r.budget_key IS NOT NULL THEN
        op_outcome := 'fallback';
        RETURN NEXT;
        CONTINUE;
      END IF;
      IF r.amount <> 0 THEN
        INSERT INTO journal_transactions (kind, account_id, hold_id, actor)
        VALUES ('release', r.account_id, r.id, o ->> 'actor') RETURNING id INTO v_txn;
        INSERT INTO journal_entries (transaction_id, account_id, currency, book, amount)
        VALUES (v_txn, r.account_id, r.currency, 'hold', -r.amount),
               (v_txn, r.account_id, r.currency, 'main', r.amount);
      END IF;
      UPDATE holds
         SET state = 'released', released = r.amount, resolved_by = 'gateway', resolved_at = now()
       WHERE id = r.id
       RETURNING * INTO r;
      op_outcome := 'released';
      op_hold := r;
      RETURN NEXT;

    ELSE
      RAISE EXCEPTION 'ledger: unknown batch operation %', o ->> 'op' USING ERRCODE = 'invalid_parameter_value';
    END IF;
  END LOOP;
END $$;
"""

DOWNGRADE = r"""
DROP FUNCTION ledger_hold_batch(jsonb);
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)

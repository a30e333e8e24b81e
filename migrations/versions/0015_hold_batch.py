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
  LANGUAGE plpgsql
  -- Its statements are cached plans, often first made while the tables were nearly empty:
  -- never let such a plan scan holds or accounts once they are large (every lookup here
  -- is by a key that has an index).
  SET enable_seqscan = off
  AS $$
DECLARE
  n integer := jsonb_array_length(ops);
  o jsonb;
  k integer;
  j integer;
  r holds;
  v_seq regclass := CAST(pg_get_serial_sequence('journal_transactions', 'id') AS regclass);
  v_txn bigint;
  v_amount numeric;
  v_charged numeric;
  v_currency char(3);
  v_version text;
  v_version_currency char(3);
  v_account text;
  v_holds uuid[];
  -- the batch's accounts (sorted), as the batch's operations so far have left them
  a_id text[];
  a_currency char(3)[];
  a_frozen boolean[];
  a_balance numeric[];
  a_held numeric[];
  a_limit numeric[];
  a_row record;
  -- what the batch writes at the end, one statement per table
  n_idx integer[] := '{}'; n_id uuid[] := '{}'; n_account text[] := '{}'; n_key text[] := '{}';
  n_hash text[] := '{}'; n_model text[] := '{}'; n_version text[] := '{}'; n_currency char(3)[] := '{}';
  n_amount numeric[] := '{}'; n_reservation jsonb[] := '{}'; n_ttl integer[] := '{}'; n_metadata jsonb[] := '{}';
  n_keys text[] := '{}';
  s_idx integer[] := '{}'; s_id uuid[] := '{}'; s_usage jsonb[] := '{}'; s_charge jsonb[] := '{}';
  s_charged numeric[] := '{}'; s_flagged boolean[] := '{}';
  x_idx integer[] := '{}'; x_id uuid[] := '{}';
  resolved uuid[] := '{}';
  v_review_account text[] := '{}'; v_review_reason text[] := '{}'; v_review_hold text[] := '{}';
  t_id bigint[] := '{}'; t_kind text[] := '{}'; t_account text[] := '{}'; t_hold uuid[] := '{}'; t_actor text[] := '{}';
  e_txn bigint[] := '{}'; e_account text[] := '{}'; e_currency char(3)[] := '{}'; e_book text[] := '{}';
  e_amount numeric[] := '{}';
BEGIN
  -- Every account the batch touches, locked in id order before anything else: one
  -- primary-key lookup each (a hold's account never changes, so reading it unlocked is
  -- exact; a single statement with ORDER BY id may be planned as a walk of the whole index).
  v_holds := ARRAY(SELECT CAST(x ->> 'id' AS uuid) FROM jsonb_array_elements(ops) x WHERE x ->> 'op' <> 'reserve');
  a_id := ARRAY(SELECT x ->> 'account_id' FROM jsonb_array_elements(ops) x WHERE x ->> 'op' = 'reserve'
                UNION
                SELECT (SELECT hh.account_id FROM holds hh WHERE hh.id = u.id) FROM unnest(v_holds) u (id)
                ORDER BY 1);
  FOR j IN 1 .. coalesce(array_length(a_id, 1), 0) LOOP
    SELECT currency, frozen_at IS NOT NULL AS frozen, balance, held, credit_limit INTO a_row
      FROM accounts WHERE id = a_id[j] AND kind = 'customer' FOR UPDATE;
    a_currency[j] := a_row.currency;  -- NULL when there is no such customer account
    a_frozen[j] := a_row.frozen;
    a_balance[j] := a_row.balance;
    a_held[j] := a_row.held;
    a_limit[j] := a_row.credit_limit;
  END LOOP;

  -- Each operation in arrival order, against the accounts as the earlier ones left them.
  FOR k IN 0 .. n - 1 LOOP
    o := ops -> k;
    op_index := k;
    op_detail := NULL;
    op_hold := NULL;

    IF o ->> 'op' = 'reserve' THEN
      v_currency := o ->> 'currency';
      v_account := o ->> 'account_id';
      j := array_position(a_id, v_account);
      IF j IS NULL OR a_currency[j] IS DISTINCT FROM v_currency THEN
        op_outcome := 'no_account';
        RETURN NEXT;
        CONTINUE;
      END IF;
      IF v_account || E'\x1f' || (o ->> 'key') = ANY (n_keys) THEN
        op_outcome := 'again';  -- the same key earlier in this batch: answered from the next one
        RETURN NEXT;
        CONTINUE;
      END IF;
      SELECT * INTO r FROM holds WHERE account_id = v_account AND idempotency_key = o ->> 'key';
      IF FOUND THEN
        op_outcome := 'exists';
        op_hold := r;
        RETURN NEXT;
        CONTINUE;
      END IF;
      IF a_frozen[j] THEN
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
      IF a_balance[j] + a_limit[j] - a_held[j] < v_amount THEN
        op_outcome := 'insufficient';
        op_detail := jsonb_build_object('balance', CAST(a_balance[j] AS text), 'held', CAST(a_held[j] AS text),
                                        'credit_limit', CAST(a_limit[j] AS text));
        RETURN NEXT;
        CONTINUE;
      END IF;
      a_held[j] := a_held[j] + v_amount;
      n_keys := n_keys || (v_account || E'\x1f' || (o ->> 'key'));
      n_idx := n_idx || k;
      n_id := n_id || CAST(o ->> 'id' AS uuid);
      n_account := n_account || v_account;
      n_key := n_key || (o ->> 'key');
      n_hash := n_hash || (o ->> 'request_hash');
      n_model := n_model || (o ->> 'model');
      n_version := n_version || (o ->> 'price_version');
      n_currency := n_currency || v_currency;
      n_amount := n_amount || v_amount;
      n_reservation := n_reservation || (o -> 'reservation');
      n_ttl := n_ttl || CAST(o ->> 'ttl' AS integer);
      n_metadata := n_metadata || (o -> 'metadata');
      IF v_amount <> 0 THEN
        v_txn := nextval(v_seq);
        t_id := t_id || v_txn; t_kind := t_kind || 'reserve'::text; t_account := t_account || v_account;
        t_hold := t_hold || CAST(o ->> 'id' AS uuid); t_actor := t_actor || (o ->> 'actor');
        e_txn := e_txn || ARRAY[v_txn, v_txn]; e_account := e_account || ARRAY[v_account, v_account];
        e_currency := e_currency || ARRAY[v_currency, v_currency]; e_book := e_book || ARRAY['main', 'hold'];
        e_amount := e_amount || ARRAY[-v_amount, v_amount];
      END IF;

    ELSE  -- settle or release: the hold as committed, unless this batch already resolves it
      IF CAST(o ->> 'id' AS uuid) = ANY (resolved) THEN
        op_outcome := 'again';
        RETURN NEXT;
        CONTINUE;
      END IF;
      SELECT * INTO r FROM holds WHERE id = CAST(o ->> 'id' AS uuid);
      IF FOUND AND r.state = 'released' AND o ->> 'op' = 'release' THEN
        op_outcome := 'exists';
        op_hold := r;
        RETURN NEXT;
        CONTINUE;
      END IF;
      IF NOT FOUND OR r.state NOT IN ('open', 'interrupted') OR r.budget_key IS NOT NULL THEN
        op_outcome := 'fallback';
        RETURN NEXT;
        CONTINUE;
      END IF;
      j := array_position(a_id, r.account_id);
      resolved := resolved || r.id;

      IF o ->> 'op' = 'settle' THEN
        v_charged := CAST(o ->> 'charged' AS numeric);
        IF r.amount <> CAST(o ->> 'held' AS numeric)
           OR (v_charged > 0 AND EXISTS (SELECT 1 FROM grants gr WHERE gr.account_id = r.account_id
                                          AND gr.remaining > 0 AND gr.expires_at > now())) THEN
          -- Live grants pay first: that settle takes the single-statement path.
          op_outcome := 'fallback';
          RETURN NEXT;
          CONTINUE;
        END IF;
        IF CAST(o ->> 'flagged' AS boolean) THEN
          v_review_account := v_review_account || r.account_id;
          v_review_reason := v_review_reason || (o ->> 'review_reason');
          v_review_hold := v_review_hold || CAST(r.id AS text);
        END IF;
        IF r.amount <> 0 OR v_charged <> 0 THEN
          v_txn := nextval(v_seq);
          t_id := t_id || v_txn; t_kind := t_kind || 'settle'::text; t_account := t_account || r.account_id;
          t_hold := t_hold || r.id; t_actor := t_actor || (o ->> 'actor');
          IF r.amount <> 0 THEN
            e_txn := e_txn || v_txn; e_account := e_account || r.account_id; e_currency := e_currency || r.currency;
            e_book := e_book || 'hold'::text; e_amount := e_amount || -r.amount;
          END IF;
          IF r.amount <> v_charged THEN
            e_txn := e_txn || v_txn; e_account := e_account || r.account_id; e_currency := e_currency || r.currency;
            e_book := e_book || 'main'::text; e_amount := e_amount || (r.amount - v_charged);
          END IF;
          IF v_charged <> 0 THEN
            e_txn := e_txn || v_txn; e_account := e_account || (o ->> 'revenue');
            e_currency := e_currency || r.currency; e_book := e_book || 'main'::text;
            e_amount := e_amount || v_charged;
          END IF;
        END IF;
        a_balance[j] := a_balance[j] - v_charged;
        a_held[j] := a_held[j] - r.amount;
        s_idx := s_idx || k;
        s_id := s_id || r.id;
        s_usage := s_usage || (o -> 'usage');
        s_charge := s_charge || (o -> 'charge');
        s_charged := s_charged || v_charged;
        s_flagged := s_flagged || CAST(o ->> 'flagged' AS boolean);

      ELSIF o ->> 'op' = 'release' THEN
        IF r.usage IS NOT NULL THEN
          op_outcome := 'fallback';  -- usage was seen: releasing would forgive it (409 there)
          RETURN NEXT;
          CONTINUE;
        END IF;
        IF r.amount <> 0 THEN
          v_txn := nextval(v_seq);
          t_id := t_id || v_txn; t_kind := t_kind || 'release'::text; t_account := t_account || r.account_id;
          t_hold := t_hold || r.id; t_actor := t_actor || (o ->> 'actor');
          e_txn := e_txn || ARRAY[v_txn, v_txn]; e_account := e_account || ARRAY[r.account_id, r.account_id];
          e_currency := e_currency || ARRAY[r.currency, r.currency]; e_book := e_book || ARRAY['hold', 'main'];
          e_amount := e_amount || ARRAY[-r.amount, r.amount];
        END IF;
        a_held[j] := a_held[j] - r.amount;
        x_idx := x_idx || k;
        x_id := x_id || r.id;

      ELSE
        RAISE EXCEPTION 'ledger: unknown batch operation %', o ->> 'op' USING ERRCODE = 'invalid_parameter_value';
      END IF;
    END IF;
  END LOOP;

  -- The writes: one statement per table for the whole batch, each row through the same
  -- row and deferred triggers as any other write (the entry trigger moves the accounts).
  IF array_length(v_review_account, 1) > 0 THEN
    UPDATE accounts ac
       SET review = jsonb_build_object('reason', u.reason, 'hold_id', u.hold_id,
                                       'at', to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))
      FROM unnest(v_review_account, v_review_reason, v_review_hold) AS u (account_id, reason, hold_id)
     WHERE ac.id = u.account_id;
  END IF;
  IF array_length(n_id, 1) > 0 THEN
    RETURN QUERY
      WITH ins AS (
        INSERT INTO holds (id, account_id, idempotency_key, request_hash, state, model, price_version, currency,
                           amount, reservation, ttl_seconds, expires_at, metadata)
        SELECT u.id, u.account_id, u.key, u.hash, 'open', u.model, u.version, u.currency, u.amount,
               u.reservation, u.ttl, now() + make_interval(secs => u.ttl), u.metadata
          FROM unnest(n_id, n_account, n_key, n_hash, n_model, n_version, n_currency, n_amount, n_reservation,
                      n_ttl, n_metadata)
            AS u (id, account_id, key, hash, model, version, currency, amount, reservation, ttl, metadata)
        RETURNING holds.id, holds AS hold_row
      )
      SELECT u.idx, 'created'::text, NULL::jsonb, ins.hold_row
        FROM ins JOIN unnest(n_id, n_idx) AS u (id, idx) ON u.id = ins.id;
  END IF;
  IF array_length(t_id, 1) > 0 THEN
    INSERT INTO journal_transactions (id, kind, account_id, hold_id, actor) OVERRIDING SYSTEM VALUE
    SELECT * FROM unnest(t_id, t_kind, t_account, t_hold, t_actor);
    INSERT INTO journal_entries (transaction_id, account_id, currency, book, amount)
    SELECT * FROM unnest(e_txn, e_account, e_currency, e_book, e_amount);
  END IF;
  IF array_length(s_id, 1) > 0 THEN
    RETURN QUERY
      WITH up AS (
        UPDATE holds h
           SET state = 'settled', usage = u.usage, gateway_usage = u.usage, charge = u.charge, charged = u.charged,
               released = greatest(h.amount - u.charged, 0), overage = greatest(u.charged - h.amount, 0),
               overage_flagged = u.flagged, resolved_by = 'gateway', resolved_at = now()
          FROM unnest(s_id, s_idx, s_usage, s_charge, s_charged, s_flagged)
            AS u (id, idx, usage, charge, charged, flagged)
         WHERE h.id = u.id
        RETURNING u.idx, h AS hold_row
      )
      SELECT up.idx, 'settled'::text, NULL::jsonb, up.hold_row FROM up;
  END IF;
  IF array_length(x_id, 1) > 0 THEN
    RETURN QUERY
      WITH up AS (
        UPDATE holds h
           SET state = 'released', released = h.amount, resolved_by = 'gateway', resolved_at = now()
          FROM unnest(x_id, x_idx) AS u (id, idx)
         WHERE h.id = u.id
        RETURNING u.idx, h AS hold_row
      )
      SELECT up.idx, 'released'::text, NULL::jsonb, up.hold_row FROM up;
  END IF;
END $$;
"""

DOWNGRADE = r"""
DROP FUNCTION ledger_hold_batch(jsonb);
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)

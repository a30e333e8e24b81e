"""Group commit: one function applies a batch of gateway reserves, settles and releases.

`ledger_hold_batch(ops jsonb)` takes a JSON array of operations (built by
`ledger.holds.batch`) and returns one row per operation: its index, an outcome and,
where there is one, the hold row. It is one statement, so a batch is one round trip and
one database transaction (one commit, one WAL flush) however many requests it carries.

It works in two phases:

1. Decide. Every account the batch touches is locked first, in id order (FOR UPDATE,
   one primary-key lookup each), and read. Then each operation, in arrival order, is
   checked against the accounts as the earlier operations of the batch left them (kept
   in the function's arrays): several reserves on one account are checked against
   available funds one after another, exactly as if they had come one by one. Refusals
   are answered at once and write nothing.
2. Write. One statement per table for the whole batch: the new holds, the journal
   transactions, their entries, the settled and the released holds. Every row goes
   through the same row, statement and deferred triggers as any other write (hold
   guards, balanced transactions, hold-journal ties, append-only, alerts).

If the database refuses the batch as a whole, it rolls back and the service runs each of
its operations alone, so one bad operation never fails its neighbours.

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
| any     | again        | an earlier operation of this batch has the same key or hold: the     |
|         |              | service sends it again in the next batch, which sees that outcome    |
| any     | fallback     | anything else (resolved, budgeted, missing, usage seen, an account   |
|         |              | with live grants): the service takes its single-statement or         |
|         |              | transactional path, which decides replay, 409, true-up or grants     |

Holds with a budget_key never come here (their movements stay in the other paths).

Entries of batched transactions move their accounts once per statement. Until now
every journal entry's row trigger updated its account row: a batch with 40 entries on
one hot account would update that row 40 times, each a new executor with the table's
CHECK constraints parsed again, the account guard run, a row version written. Now:

- `journal_transactions.batched` (default false) marks the transactions that
  `ledger_hold_batch` writes (reserve, settle, release only). Everything else posts
  exactly as before: its entries are applied row by row by `ledger_entry_post`.
- An entry of a batched transaction must carry its account's running position itself
  (`balance_after`, `held_after`; NULL for system accounts). The row trigger checks the
  transaction (exists, same database transaction, not sealed) and the book (main or
  hold) and leaves the account alone.
- The statement trigger `journal_entries_apply` (AFTER INSERT FOR EACH STATEMENT, the
  statement's rows as a transition table) then, for the batched entries: refuses a
  statement that mixes batched and other entries of one account; checks that every
  account exists in the entry's currency, that a system account's entry is on main with
  no running position and that system:grants takes none; checks that each customer
  entry's balance_after / held_after is exactly the account's current row plus the
  running sum of the statement's entries of that account up to it, in entry order, and
  that held never goes below zero on the way; and applies the sums with ONE update per
  account. The account's current row is its position before the statement (no row
  trigger moved it), so balance = the sum of its entries, held = the sum of its hold
  book and balance_after = the running balance hold as strictly as before.
  tests/integration/test_entries_per_statement.py shows direct SQL refused for each.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-03
"""

from alembic import op

from migrations.functions import defined_by

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

UPGRADE = r"""
ALTER TABLE journal_transactions ADD COLUMN batched boolean NOT NULL DEFAULT false;
ALTER TABLE journal_transactions ADD CONSTRAINT journal_transactions_batched_kind
  CHECK (NOT batched OR kind IN ('reserve', 'settle', 'release'));

CREATE OR REPLACE FUNCTION ledger_entry_post() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  txn_xact xid8;
  txn_kind text;
  txn_batched boolean;
  account_currency char(3);
  account_kind text;
  g record;
  left_after numeric;
BEGIN
  SELECT xact_id, kind, batched INTO txn_xact, txn_kind, txn_batched FROM journal_transactions
   WHERE id = NEW.transaction_id;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'ledger: journal transaction % does not exist', NEW.transaction_id
      USING ERRCODE = 'foreign_key_violation';
  END IF;
  IF txn_xact <> pg_current_xact_id() THEN
    RAISE EXCEPTION 'ledger: entries may only be added to a journal transaction created in the same database transaction'
      USING ERRCODE = 'restrict_violation';
  END IF;
  IF strpos(coalesce(current_setting('ledger.sealed', true), ''), ',' || NEW.transaction_id || ',') > 0 THEN
    RAISE EXCEPTION 'ledger: journal transaction % was already checked as balanced; it takes no more entries',
      NEW.transaction_id USING ERRCODE = 'restrict_violation';
  END IF;
  IF txn_batched THEN
    -- A batched transaction (the group commit's reserve, settle or release): the statement
    -- trigger ledger_entries_apply checks this entry's account, book and running position
    -- and moves the account once for the whole statement.
    IF NEW.book NOT IN ('main', 'hold') THEN
      RAISE EXCEPTION 'ledger: a batched transaction posts to main and hold books only'
        USING ERRCODE = 'check_violation';
    END IF;
    NEW.created_at := now();
    RETURN NEW;
  END IF;
  IF NEW.book = 'main' AND txn_kind IN ('grant', 'grant_expiry')
     AND NEW.account_id IS DISTINCT FROM 'system:grants:' || NEW.currency THEN
    RAISE EXCEPTION 'ledger: a % transaction moves money between a grant book and system:grants:% only',
      txn_kind, NEW.currency USING ERRCODE = 'check_violation';
  ELSIF NEW.book LIKE 'grant:%' THEN
    SELECT id, account_id, amount, remaining, expired, expires_at INTO g
      FROM grants WHERE id = CAST(substr(NEW.book, 7) AS uuid);
    IF NOT FOUND OR g.account_id <> NEW.account_id THEN
      RAISE EXCEPTION 'ledger: book % is not a grant of account %', NEW.book, NEW.account_id
        USING ERRCODE = 'foreign_key_violation';
    END IF;
    IF txn_kind = 'grant' THEN
      IF g.remaining <> 0 OR g.expired <> 0 OR NEW.amount <> g.amount THEN
        RAISE EXCEPTION 'ledger: a grant transaction puts exactly the grant''s amount into its empty book'
          USING ERRCODE = 'check_violation';
      END IF;
    ELSIF txn_kind IN ('settle', 'true_up') THEN
      IF NEW.amount > 0 OR g.expires_at <= now() THEN
        RAISE EXCEPTION 'ledger: a charge only takes from a grant that has not expired (grant %)', g.id
          USING ERRCODE = 'check_violation';
      END IF;
    ELSIF txn_kind = 'grant_expiry' THEN
      IF g.expires_at > now() OR NEW.amount > 0 THEN
        RAISE EXCEPTION 'ledger: grant % has not expired', g.id USING ERRCODE = 'check_violation';
      END IF;
    ELSE
      RAISE EXCEPTION 'ledger: a % transaction may not post to a grant book', txn_kind
        USING ERRCODE = 'check_violation';
    END IF;
    UPDATE grants
       SET remaining = remaining + NEW.amount,
           expired = expired - CASE WHEN txn_kind = 'grant_expiry' THEN NEW.amount ELSE 0 END,
           expired_at = CASE WHEN txn_kind = 'grant_expiry' THEN now() ELSE expired_at END
     WHERE id = g.id
     RETURNING remaining INTO left_after;
    IF txn_kind = 'grant_expiry' AND left_after <> 0 THEN
      RAISE EXCEPTION 'ledger: an expiry posts out all that remains of grant % (% left)', g.id, left_after
        USING ERRCODE = 'check_violation';
    END IF;
  END IF;
  NEW.created_at := now();
  UPDATE accounts
     SET balance = balance + NEW.amount,
         held = held + CASE WHEN NEW.book = 'hold' THEN NEW.amount ELSE 0 END
   WHERE id = NEW.account_id AND kind = 'customer' AND currency = NEW.currency
   RETURNING balance, held INTO NEW.balance_after, NEW.held_after;
  IF NOT FOUND THEN
    SELECT currency, kind INTO account_currency, account_kind FROM accounts WHERE id = NEW.account_id;
    IF NOT FOUND OR account_currency <> NEW.currency THEN
      RAISE EXCEPTION 'ledger: entry account % does not exist in currency %', NEW.account_id, NEW.currency
        USING ERRCODE = 'foreign_key_violation';
    END IF;
    IF account_kind = 'customer' THEN
      RAISE EXCEPTION 'ledger: could not apply the entry to account %', NEW.account_id
        USING ERRCODE = 'internal_error';
    END IF;
    IF NEW.book <> 'main' THEN
      RAISE EXCEPTION 'ledger: system accounts have no hold or grant book' USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.account_id LIKE 'system:grants:%' AND txn_kind NOT IN ('grant', 'grant_expiry') THEN
      RAISE EXCEPTION 'ledger: % takes grant and grant_expiry entries only', NEW.account_id
        USING ERRCODE = 'check_violation';
    END IF;
    NEW.balance_after := NULL;
    NEW.held_after := NULL;
  END IF;
  RETURN NEW;
END $$;



CREATE FUNCTION ledger_entries_apply() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  e record;
  current_account text;
  current_batched boolean;
  account_kind text;
  account_currency char(3);
  running_balance numeric;
  running_held numeric;
BEGIN
  -- The statement's entries grouped by account, in entry order; each one's transaction and
  -- each account are primary-key lookups (no plan over the transition table may scan a table).
  FOR e IN SELECT x.id, x.account_id, x.currency, x.book, x.amount, x.balance_after, x.held_after,
                  (SELECT t.batched FROM journal_transactions t WHERE t.id = x.transaction_id) AS batched
             FROM added x ORDER BY x.account_id, 8, x.id LOOP  -- a mix shows at its first batched entry
    IF e.account_id IS DISTINCT FROM current_account THEN
      IF current_batched AND account_kind = 'customer' THEN
        UPDATE accounts SET balance = running_balance, held = running_held WHERE id = current_account;
      END IF;
      current_account := e.account_id;
      current_batched := e.batched;
      IF NOT e.batched THEN
        CONTINUE;  -- applied by the row trigger, as every entry outside the group commit
      END IF;
      SELECT kind, currency, balance, held INTO account_kind, account_currency, running_balance, running_held
        FROM accounts WHERE id = e.account_id;
      IF NOT FOUND OR account_currency <> e.currency THEN
        RAISE EXCEPTION 'ledger: entry account % does not exist in currency %', e.account_id, e.currency
          USING ERRCODE = 'foreign_key_violation';
      END IF;
    ELSIF e.batched IS DISTINCT FROM current_batched THEN
      RAISE EXCEPTION 'ledger: one statement posts batched and other entries to account %', e.account_id
        USING ERRCODE = 'check_violation';
    END IF;
    IF NOT e.batched THEN
      CONTINUE;
    END IF;
    IF account_kind = 'system' THEN
      IF e.book <> 'main' OR e.balance_after IS NOT NULL OR e.held_after IS NOT NULL
         OR e.account_id LIKE 'system:grants:%' THEN
        RAISE EXCEPTION 'ledger: system account % takes batched main entries without a running position only (never system:grants)',
          e.account_id USING ERRCODE = 'check_violation';
      END IF;
      CONTINUE;
    END IF;
    running_balance := running_balance + e.amount;
    IF e.book = 'hold' THEN
      running_held := running_held + e.amount;
    END IF;
    IF e.balance_after IS DISTINCT FROM running_balance OR e.held_after IS DISTINCT FROM running_held
       OR running_held < 0 THEN
      RAISE EXCEPTION 'ledger: entry % of account % does not carry the account''s running balance and held (or takes held below zero)',
        e.id, e.account_id USING ERRCODE = 'check_violation';
    END IF;
  END LOOP;
  IF current_batched AND account_kind = 'customer' THEN
    UPDATE accounts SET balance = running_balance, held = running_held WHERE id = current_account;
  END IF;
  RETURN NULL;
END $$;
CREATE TRIGGER journal_entries_apply AFTER INSERT ON journal_entries
  REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION ledger_entries_apply();

CREATE FUNCTION ledger_hold_batch(ops jsonb)
  RETURNS TABLE (op_index integer, op_outcome text, op_detail jsonb, op_hold holds)
  LANGUAGE plpgsql
  -- Its statements are cached plans, often first made while the tables were nearly empty
  -- or with estimates that do not know the batch is small: never let such a plan scan
  -- holds or accounts once they are large. Every lookup here is by a key that has an
  -- index, and every join is a small batch against a large table: index lookups in a
  -- nested loop, never a sequential scan, nor a hash or merge join that reads a whole
  -- table or index.
  SET enable_seqscan = off
  SET enable_hashjoin = off
  SET enable_mergejoin = off
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
  e_amount numeric[] := '{}'; e_balance numeric[] := '{}'; e_held numeric[] := '{}';
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
        -- each entry's running position (0016): main -H, then hold +H
        e_balance := e_balance || ARRAY[a_balance[j] - v_amount, a_balance[j]];
        e_held := e_held || ARRAY[a_held[j], a_held[j] + v_amount];
        a_held[j] := a_held[j] + v_amount;
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
            a_balance[j] := a_balance[j] - r.amount;
            a_held[j] := a_held[j] - r.amount;
            e_txn := e_txn || v_txn; e_account := e_account || r.account_id; e_currency := e_currency || r.currency;
            e_book := e_book || 'hold'::text; e_amount := e_amount || -r.amount;
            e_balance := e_balance || a_balance[j]; e_held := e_held || a_held[j];
          END IF;
          IF r.amount <> v_charged THEN
            a_balance[j] := a_balance[j] + (r.amount - v_charged);
            e_txn := e_txn || v_txn; e_account := e_account || r.account_id; e_currency := e_currency || r.currency;
            e_book := e_book || 'main'::text; e_amount := e_amount || (r.amount - v_charged);
            e_balance := e_balance || a_balance[j]; e_held := e_held || a_held[j];
          END IF;
          IF v_charged <> 0 THEN  -- a revenue shard: a system account, no running position
            e_txn := e_txn || v_txn; e_account := e_account || (o ->> 'revenue');
            e_currency := e_currency || r.currency; e_book := e_book || 'main'::text;
            e_amount := e_amount || v_charged;
            e_balance := e_balance || NULL::numeric; e_held := e_held || NULL::numeric;
          END IF;
        END IF;
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
          e_balance := e_balance || ARRAY[a_balance[j] - r.amount, a_balance[j]];
          e_held := e_held || ARRAY[a_held[j] - r.amount, a_held[j] - r.amount];
          a_held[j] := a_held[j] - r.amount;
        END IF;
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
    INSERT INTO journal_transactions (id, kind, account_id, hold_id, actor, batched) OVERRIDING SYSTEM VALUE
    SELECT u.*, true FROM unnest(t_id, t_kind, t_account, t_hold, t_actor) AS u;
    -- In entry order (ids ascend with the array), each with its account's running position:
    -- the statement trigger of 0016 checks them and moves each account once.
    INSERT INTO journal_entries (transaction_id, account_id, currency, book, amount, balance_after, held_after)
    SELECT * FROM unnest(e_txn, e_account, e_currency, e_book, e_amount, e_balance, e_held);
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

DOWNGRADE = (
    r"""
DROP FUNCTION ledger_hold_batch(jsonb);
DROP TRIGGER journal_entries_apply ON journal_entries;
DROP FUNCTION ledger_entries_apply();
"""
    + defined_by("0013_credit_grants.py", "ledger_entry_post")
    + r"""

ALTER TABLE journal_transactions DROP CONSTRAINT journal_transactions_batched_kind;
ALTER TABLE journal_transactions DROP COLUMN batched;
"""
)


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)

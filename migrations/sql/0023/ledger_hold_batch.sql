-- The gateway's reserves, settles and releases, many in one call: one statement, so one
-- round trip, one transaction, one commit (a lane of ledger.holds.lane sends it). `ops` is a JSON
-- array of operations; each gets its own row back (op_index, op_outcome, op_detail, the
-- hold), and no operation's refusal touches another's.
--
-- Invariants:
-- - every account the batch touches is locked first, in id order, in one statement; every
--   decision is made under those locks, against the accounts as the batch's earlier
--   operations left them (so reserves on one account are checked in arrival order and can
--   never together exceed `available`);
-- - a reserve is refused, writing nothing, when the account is missing or of another
--   currency ('no_account'), frozen ('frozen'), sized with a price version that is no
--   longer active and not pinned ('version'), short of funds ('insufficient': available is
--   balance - lapsed + credit_limit - held), or past its budget key's budget ('budget',
--   checked after the funds, so insufficient funds wins when both refuse);
-- - a budget row is locked and written only under its account's lock
--   (`ledger_budget_hold`, `ledger_budget_move`), so taking it never deadlocks;
-- - a settle or release of a hold that is not open or interrupted, or a settle that live
--   grants would pay (grants first), or a release of a hold with usage, answers
--   'fallback' and writes nothing: the service's locked path decides it;
-- - an operation on a key or hold an earlier operation of the batch already uses answers
--   'again' (it is sent again in a later batch);
-- - the writes are one statement per table at the end, through the same triggers as any
--   other write (the journal stays balanced, holds append-only in their state machine).
CREATE OR REPLACE FUNCTION ledger_hold_batch(ops jsonb)
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
  -- One plan per statement per connection, made once (0017): every statement below is in
  -- a form whose only plan probes an index by the batch's own keys, whatever size the
  -- tables had when the plan was made (no join against a table, no condition a
  -- wider index scan could satisfy instead). The budget functions it calls
  -- (`ledger_budget_hold`, `ledger_budget_move`: a primary-key probe each) run under
  -- these settings too.
  SET plan_cache_mode = force_generic_plan
  AS $$
DECLARE
  n integer := jsonb_array_length(ops);
  n_reserves integer;
  o jsonb;
  k integer;
  j integer;
  j2 integer;
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
  -- read once per batch, under the account locks: the holds it settles or releases, the
  -- holds that already have a reserve's idempotency key, the accounts with live grants
  h_ids uuid[];
  h_rows holds[];
  k_keys text[];
  k_rows holds[];
  g_accounts text[] := '{}';
  g_any text[] := '{}';  -- the accounts that have any grant with money left (live or lapsed)
  v_budget jsonb;
  v_move record;
  -- the batch's accounts (sorted), as the batch's operations so far have left them
  a_id text[];
  a_currency char(3)[];
  a_frozen boolean[];
  a_balance numeric[];
  a_held numeric[];
  a_limit numeric[];
  a_lapsed numeric[];  -- what expired grants still hold until the expiry job posts it out
  a_row record;
  -- what the batch writes at the end, one statement per table
  n_idx integer[] := '{}'; n_id uuid[] := '{}'; n_account text[] := '{}'; n_key text[] := '{}';
  n_hash text[] := '{}'; n_model text[] := '{}'; n_version text[] := '{}'; n_currency char(3)[] := '{}';
  n_amount numeric[] := '{}'; n_reservation jsonb[] := '{}'; n_ttl integer[] := '{}'; n_metadata jsonb[] := '{}';
  n_budget text[] := '{}';
  n_keys text[] := '{}';
  s_idx integer[] := '{}'; s_id uuid[] := '{}'; s_usage jsonb[] := '{}'; s_charge jsonb[] := '{}';
  s_charged numeric[] := '{}'; s_flagged boolean[] := '{}'; s_detail jsonb[] := '{}';
  x_idx integer[] := '{}'; x_id uuid[] := '{}';
  resolved uuid[] := '{}';
  v_review_account text[] := '{}'; v_review_reason text[] := '{}'; v_review_hold text[] := '{}';
  t_id bigint[] := '{}'; t_kind text[] := '{}'; t_account text[] := '{}'; t_hold uuid[] := '{}'; t_actor text[] := '{}';
  e_txn bigint[] := '{}'; e_account text[] := '{}'; e_currency char(3)[] := '{}'; e_book text[] := '{}';
  e_amount numeric[] := '{}'; e_balance numeric[] := '{}'; e_held numeric[] := '{}';
BEGIN
  -- Every account the batch touches, locked in id order before anything else (a hold's
  -- account never changes, so reading it unlocked is exact).
  v_holds := ARRAY(SELECT CAST(x ->> 'id' AS uuid) FROM jsonb_array_elements(ops) x WHERE x ->> 'op' <> 'reserve');
  a_id := ARRAY(SELECT x ->> 'account_id' FROM jsonb_array_elements(ops) x WHERE x ->> 'op' = 'reserve'
                UNION
                SELECT (SELECT hh.account_id FROM holds hh WHERE hh.id = u.id) FROM unnest(v_holds) u (id)
                ORDER BY 1);
  -- One statement: an index scan of the ids (sorted, distinct), each row locked as the
  -- scan reaches it, so in id order. No such customer account: its entries stay NULL.
  -- Whether the account has any grant with money left is one probe of the grants by
  -- account per locked row, in the same statement (no further statement for the common
  -- account without grants); it serves only the lapsed amount below. A grant made by a
  -- transaction that commits while this statement waits for the lock is not seen by the
  -- probe (its snapshot predates the wait), but such a grant is live (its expires_at is
  -- after its commit, so after this transaction's now()): nothing of it has lapsed, and
  -- the locked row's balance includes it. Which settles live grants pay is read after the
  -- locks, with the holds (below). Grant conditions are written `(...) IS TRUE` so that no partial index of grants with
  -- money left can serve them (the one by expiry would be scanned whole): each probe is
  -- by account id.
  FOR a_row IN SELECT ac.id, ac.currency, ac.frozen_at IS NOT NULL AS frozen, ac.balance, ac.held, ac.credit_limit,
                      (SELECT true FROM grants gr WHERE gr.account_id = ac.id AND (gr.remaining > 0) IS TRUE LIMIT 1)
                        AS granted
                 FROM accounts ac WHERE ac.id = ANY (a_id) AND (ac.kind = 'customer') IS TRUE
                ORDER BY ac.id FOR UPDATE LOOP
    j := array_position(a_id, a_row.id);
    a_currency[j] := a_row.currency;
    a_frozen[j] := a_row.frozen;
    a_balance[j] := a_row.balance;
    a_held[j] := a_row.held;
    a_limit[j] := a_row.credit_limit;
    a_lapsed[j] := 0;
    IF a_row.granted THEN
      g_any := g_any || a_row.id;
    END IF;
  END LOOP;
  -- For those accounts only, when the batch reserves: what their expired grants still hold,
  -- read again now that the locks are held (an expiry posting locks the account first, so
  -- this read is exactly as committed). A grant backs no reservation from its expires_at
  -- on, whether or not the expiry job has posted its remainder out yet (0020's
  -- `ledger_lapsed_grants`, the one definition of lapsed).
  n_reserves := n - coalesce(array_length(v_holds, 1), 0);
  IF n_reserves > 0 AND array_length(g_any, 1) > 0 THEN
    FOR a_row IN SELECT u.id, ledger_lapsed_grants(u.id) AS lapsed FROM unnest(g_any) AS u (id) LOOP
      a_lapsed[array_position(a_id, a_row.id)] := a_row.lapsed;
    END LOOP;
  END IF;

  -- Under the locks (every change to a hold or its key, and every grant, takes its
  -- account's lock first), so exactly as committed: one statement each instead of one per
  -- operation. With the holds, whether a live grant would pay a settle on each one's
  -- account (a live grant pays before paid money does: those settles take the locked path).
  IF array_length(v_holds, 1) > 0 THEN
    SELECT array_agg(h.id), array_agg(h),
           array_agg(h.account_id) FILTER (WHERE (SELECT true FROM grants gr
                                                   WHERE gr.account_id = h.account_id
                                                     AND (gr.remaining > 0) IS TRUE
                                                     AND (gr.expires_at > now()) IS TRUE LIMIT 1))
      INTO h_ids, h_rows, g_accounts
      FROM holds h WHERE h.id = ANY (v_holds);
  END IF;
  -- One unique-index probe per reserve: a scalar subquery, never turned into a join (a
  -- join's plan could walk the whole holds index when it was made on a small table).
  IF n_reserves > 0 THEN
    SELECT array_agg((k.hold).account_id || E'\x1f' || (k.hold).idempotency_key), array_agg(k.hold)
      INTO k_keys, k_rows
      FROM (SELECT (SELECT hh FROM holds hh
                     WHERE hh.account_id = x ->> 'account_id' AND hh.idempotency_key = x ->> 'key') AS hold
              FROM jsonb_array_elements(ops) x
             WHERE x ->> 'op' = 'reserve' OFFSET 0) k
     WHERE (k.hold).id IS NOT NULL;  -- (a row IS NOT NULL only when every column is)
  END IF;

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
      j2 := array_position(k_keys, v_account || E'\x1f' || (o ->> 'key'));
      IF j2 IS NOT NULL THEN
        op_outcome := 'exists';
        op_hold := k_rows[j2];
        RETURN NEXT;
        CONTINUE;
      END IF;
      IF a_frozen[j] THEN
        op_outcome := 'frozen';
        RETURN NEXT;
        CONTINUE;
      END IF;
      IF NOT coalesce(CAST(o ->> 'pinned' AS boolean), false) THEN
        IF v_version_currency IS DISTINCT FROM v_currency THEN
          v_version := ledger_active_version(v_currency);
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
      IF a_balance[j] - a_lapsed[j] + a_limit[j] - a_held[j] < v_amount THEN
        op_outcome := 'insufficient';
        op_detail := jsonb_build_object('balance', CAST(a_balance[j] AS text), 'held', CAST(a_held[j] AS text),
                                        'credit_limit', CAST(a_limit[j] AS text),
                                        'lapsed', CAST(a_lapsed[j] AS text));
        RETURN NEXT;
        CONTINUE;
      END IF;
      IF o ->> 'budget_key' IS NOT NULL THEN
        v_budget := ledger_budget_hold(v_account, o ->> 'budget_key', v_amount);
        IF v_budget IS NOT NULL THEN
          op_outcome := 'budget';
          op_detail := v_budget;
          RETURN NEXT;
          CONTINUE;
        END IF;
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
      n_budget := n_budget || (o ->> 'budget_key');
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
      j2 := array_position(h_ids, CAST(o ->> 'id' AS uuid));
      r := CASE WHEN j2 IS NULL THEN NULL ELSE h_rows[j2] END;
      IF j2 IS NOT NULL AND r.state = 'released' AND o ->> 'op' = 'release' THEN
        op_outcome := 'exists';
        op_hold := r;
        RETURN NEXT;
        CONTINUE;
      END IF;
      IF j2 IS NULL OR r.state NOT IN ('open', 'interrupted') THEN
        op_outcome := 'fallback';
        RETURN NEXT;
        CONTINUE;
      END IF;
      j := array_position(a_id, r.account_id);
      resolved := resolved || r.id;

      IF o ->> 'op' = 'settle' THEN
        v_charged := CAST(o ->> 'charged' AS numeric);
        IF r.amount <> CAST(o ->> 'held' AS numeric)
           OR (v_charged > 0 AND r.account_id = ANY (coalesce(g_accounts, '{}'))) THEN
          -- Live grants pay first: that settle takes the service's locked path.
          op_outcome := 'fallback';
          RETURN NEXT;
          CONTINUE;
        END IF;
        v_budget := NULL;
        IF r.budget_key IS NOT NULL THEN  -- the hold leaves the key's held, its charge joins the spend
          SELECT * INTO v_move FROM ledger_budget_move(r.account_id, r.budget_key, -r.amount, v_charged, now());
          IF v_move.alerted THEN  -- logged by the service once this batch has committed
            v_budget := jsonb_build_object('budget_alert', jsonb_build_object(
              'account_id', v_move.account_id, 'budget_key', v_move.budget_key,
              'amount', CAST(v_move.amount AS text), 'period', v_move.period,
              'alert_threshold', CAST(v_move.alert_threshold AS text),
              'period_spent', CAST(v_move.period_spent AS text)));
          END IF;
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
        s_detail := s_detail || v_budget;

      ELSIF o ->> 'op' = 'release' THEN
        -- The release rule, as HoldLifecycle.release_locked has it for what falls back here:
        -- an open or interrupted hold without usage; releasing a released hold again answers it.
        IF r.usage IS NOT NULL THEN
          op_outcome := 'fallback';  -- usage was seen: releasing would forgive it (409 there)
          RETURN NEXT;
          CONTINUE;
        END IF;
        IF r.budget_key IS NOT NULL THEN
          PERFORM ledger_budget_move(r.account_id, r.budget_key, -r.amount, 0, now());
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
       SET review = ledger_review_mark(u.reason, u.hold_id)
      FROM unnest(v_review_account, v_review_reason, v_review_hold) AS u (account_id, reason, hold_id)
     WHERE ac.id = u.account_id AND ac.id = ANY (v_review_account);
  END IF;
  IF array_length(n_id, 1) > 0 THEN
    RETURN QUERY
      WITH ins AS (
        INSERT INTO holds (id, account_id, idempotency_key, request_hash, state, model, price_version, currency,
                           amount, reservation, ttl_seconds, expires_at, metadata, budget_key)
        SELECT u.id, u.account_id, u.key, u.hash, 'open', u.model, u.version, u.currency, u.amount,
               u.reservation, u.ttl, now() + make_interval(secs => u.ttl), u.metadata, u.budget_key
          FROM unnest(n_id, n_account, n_key, n_hash, n_model, n_version, n_currency, n_amount, n_reservation,
                      n_ttl, n_metadata, n_budget)
            AS u (id, account_id, key, hash, model, version, currency, amount, reservation, ttl, metadata,
                  budget_key)
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
    -- Marked batched (0017): the row trigger leaves them to the statement trigger, which checks them.
    INSERT INTO journal_entries (transaction_id, account_id, currency, book, amount, balance_after, held_after, batched)
    SELECT u.*, true FROM unnest(e_txn, e_account, e_currency, e_book, e_amount, e_balance, e_held) AS u;
  END IF;
  IF array_length(s_id, 1) > 0 THEN
    RETURN QUERY
      WITH up AS (
        UPDATE holds h
           SET state = 'settled', usage = u.usage, gateway_usage = u.usage, charge = u.charge, charged = u.charged,
               released = greatest(h.amount - u.charged, 0), overage = greatest(u.charged - h.amount, 0),
               overage_flagged = u.flagged, resolved_by = 'gateway', resolved_at = now()
          FROM unnest(s_id, s_idx, s_usage, s_charge, s_charged, s_flagged, s_detail)
            AS u (id, idx, usage, charge, charged, flagged, detail)
         WHERE h.id = u.id AND h.id = ANY (s_id)
        RETURNING u.idx, u.detail, h AS hold_row
      )
      SELECT up.idx, 'settled'::text, up.detail, up.hold_row FROM up;
  END IF;
  IF array_length(x_id, 1) > 0 THEN
    RETURN QUERY
      WITH up AS (
        UPDATE holds h
           SET state = 'released', released = h.amount, resolved_by = 'gateway', resolved_at = now()
          FROM unnest(x_id, x_idx) AS u (id, idx)
         WHERE h.id = u.id AND h.id = ANY (x_id)
        RETURNING u.idx, h AS hold_row
      )
      SELECT up.idx, 'released'::text, NULL::jsonb, up.hold_row FROM up;
  END IF;
END $$;

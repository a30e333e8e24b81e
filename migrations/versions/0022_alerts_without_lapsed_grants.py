"""Low-balance alerts judge `available` as every funds check does since 0020: without lapsed grants.

`ledger_alert_crossing` (0014, run at commit for each account whose available amount
moved) read `balance + credit_limit - held`, which still counted what expired grants hold
until the expiry job posts it out. It now subtracts `ledger_lapsed_grants(account)`, so
the first posting after a grant lapses (or the expiry job's own posting) records the
crossing that the lapse caused, and `available_before` / `available_after` are the
amounts the API reported (the expiry job's own transaction counts what it posts out as
lapsed before it too). The crossing itself is seen at that posting: no row changes at
the instant a grant expires (the expiry job runs every minute by default).

The trigger's WHEN condition (available moved by this update) is unchanged: lapsed grants
do not change between OLD and NEW of one update.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-07
"""

from alembic import op

from migrations.functions import defined_by

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

UPGRADE = r"""
CREATE OR REPLACE FUNCTION ledger_alert_crossing() RETURNS trigger LANGUAGE plpgsql
  SECURITY DEFINER SET search_path = public, pg_temp SET enable_seqscan = off AS $$
DECLARE
  alert record;
  now_available numeric;
  now_below boolean;
  lapsed numeric;
BEGIN
  SELECT threshold, webhook_url, below INTO alert
    FROM account_alerts WHERE account_id = NEW.id AND active;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  -- The committed state: later updates of this row in the same transaction are included.
  -- Expired grants' remainders count for nothing (0020), posted out yet or not.
  lapsed := ledger_lapsed_grants(NEW.id);
  SELECT balance - lapsed + credit_limit - held INTO now_available FROM accounts WHERE id = NEW.id;
  now_below := now_available < alert.threshold;
  IF now_below = alert.below THEN
    RETURN NULL;
  END IF;
  BEGIN
    -- Before this transaction its own grant_expiry postings (if any) were lapsed too: this
    -- transaction's entries of the account (created_at = now(), by account_id and time).
    SELECT lapsed - coalesce(sum(e.amount), 0) INTO lapsed
      FROM journal_entries e JOIN journal_transactions t ON t.id = e.transaction_id
     WHERE e.account_id = NEW.id AND e.created_at = now() AND starts_with(e.book, 'grant:')
       AND t.kind = 'grant_expiry' AND t.xact_id = pg_current_xact_id();
    UPDATE account_alerts SET below = now_below WHERE account_id = NEW.id;
    -- The first queued row event of this account in the transaction is the one that flips,
    -- so its OLD is the account as it was before the transaction.
    INSERT INTO alert_events (account_id, kind, threshold, available_before, available_after,
                              currency, webhook_url)
    VALUES (NEW.id, CASE WHEN now_below THEN 'below' ELSE 'above' END, alert.threshold,
            OLD.balance - lapsed + OLD.credit_limit - OLD.held, now_available, NEW.currency, alert.webhook_url);
  EXCEPTION WHEN OTHERS THEN
    RAISE WARNING 'ledger: low-balance alert for account % not recorded: % (%)', NEW.id, SQLERRM, SQLSTATE;
  END;
  RETURN NULL;
END $$;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(
        defined_by("0014_low_balance_alerts.py", "ledger_alert_crossing")
        + "ALTER FUNCTION ledger_alert_crossing() SET enable_seqscan = off;\n"  # as 0019 left it
    )

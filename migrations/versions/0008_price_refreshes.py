"""Price refreshes: what the configured price sources produced at each successful refresh.

`ledger prices refresh` (and the scheduled job) compares what its sources produce now
against what they produced at its own last successful refresh, never against the
latest price version, so a version finance published by hand is never mistaken for
"a change to revert". One row per successful refresh that changed this state (a
publish, the first-start seed, or adopting content already published); a refresh
that finds its sources unchanged writes nothing.

- `content_hash`: the content hash (see `pricing.document.content_hash`) of the
  document the sources produced;
- `version_id`: the newest price version of the currency when the refresh succeeded
  (the one it published, or the one it found). A version of the currency with a
  larger id was published by someone else after the refresh: refresh does not
  publish over it unless forced;
- append-only, like `price_versions`: UPDATE, DELETE and TRUNCATE raise.

The upgrade records, per currency, the newest version that the seed or a refresh
published (from the audit log), so an existing deployment keeps finance's later
versions safe from its first refresh after the upgrade.

Revision ID: 0008
Revises: 0006
Create Date: 2026-12-03
"""

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

UPGRADE = r"""
CREATE TABLE price_refreshes (
  id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  currency      char(3) NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
  content_hash  text NOT NULL CHECK (content_hash ~ '^[0-9a-f]{64}$'),
  version_id    bigint NOT NULL REFERENCES price_versions (id),
  action        text NOT NULL CHECK (action IN ('seed', 'publish', 'adopt', 'upgrade')),
  refreshed_by  text NOT NULL,
  refreshed_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX price_refreshes_latest ON price_refreshes (currency, id DESC);
CREATE TRIGGER price_refreshes_append_only BEFORE UPDATE OR DELETE ON price_refreshes
  FOR EACH ROW EXECUTE FUNCTION ledger_refuse_change();
CREATE TRIGGER price_refreshes_no_truncate BEFORE TRUNCATE ON price_refreshes
  FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();

INSERT INTO price_refreshes (currency, content_hash, version_id, action, refreshed_by, refreshed_at)
SELECT DISTINCT ON (v.currency) v.currency, v.content_hash, v.id, 'upgrade', 'migration 0008', now()
  FROM price_versions v
  JOIN audit_log a ON a.target = v.version AND a.action IN ('prices.seed', 'prices.refresh')
 ORDER BY v.currency, v.id DESC;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute("DROP TABLE price_refreshes")

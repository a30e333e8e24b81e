"""Price versions: immutable snapshots of price documents.

A published version never changes: UPDATE, DELETE and TRUNCATE raise. Its
identifier is derived from its row id ("v1", "v2", ...), so it cannot be reused.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02
"""

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

UPGRADE = r"""
CREATE TABLE price_versions (
  id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  version       text GENERATED ALWAYS AS ('v' || id::text) STORED UNIQUE,
  content_hash  text NOT NULL CHECK (content_hash ~ '^[0-9a-f]{64}$'),
  currency      char(3) NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
  effective_at  timestamptz NOT NULL,
  source        text NOT NULL,
  document      jsonb NOT NULL,
  published_by  text NOT NULL,
  published_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX price_versions_active ON price_versions (currency, effective_at DESC, id DESC);
CREATE TRIGGER price_versions_immutable BEFORE UPDATE OR DELETE ON price_versions
  FOR EACH ROW EXECUTE FUNCTION ledger_refuse_change();
CREATE TRIGGER price_versions_no_truncate BEFORE TRUNCATE ON price_versions
  FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute("DROP TABLE price_versions")

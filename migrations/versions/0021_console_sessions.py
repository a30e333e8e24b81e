"""Console sessions on the server, so that logging out ends a session in every process.

One row per console login, keyed by the session's random nonce (which the signed
cookie carries). A cookie is honoured only while its row exists, is not revoked and
has not expired; logout sets `revoked_at`, so a copied cookie stops working in every
process at once. Rows past `expires_at` are of no use: `ledger_console_sessions_prune()`
deletes them. It runs as its owner (SECURITY DEFINER) so that the service role, which
is never granted DELETE, can prune without being able to delete a live session.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-07
"""

from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

UPGRADE = r"""
CREATE TABLE console_sessions (
  nonce       text PRIMARY KEY CHECK (length(nonce) BETWEEN 16 AND 64),
  actor       text NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now(),
  expires_at  timestamptz NOT NULL,
  revoked_at  timestamptz
);
CREATE INDEX console_sessions_expires ON console_sessions (expires_at);

CREATE FUNCTION ledger_console_sessions_prune() RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
  gone integer;
BEGIN
  DELETE FROM console_sessions WHERE expires_at < now();
  GET DIAGNOSTICS gone = ROW_COUNT;
  RETURN gone;
END $$;
"""

DOWNGRADE = r"""
DROP FUNCTION ledger_console_sessions_prune();
DROP TABLE console_sessions;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)

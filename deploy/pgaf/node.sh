#!/bin/sh
# One PostgreSQL node of the formation (compose.ha.yaml, services node1 and node2).
#
# First start: `pg_autoctl create postgres` registers the node with the monitor, which makes
# the first node to register the primary and every later one a synchronous secondary (cloned
# from the primary with pg_basebackup). Then, on every start:
# - postgresql.conf includes /etc/pgbackrest/archive.conf (archive_mode = on and pgBackRest's
#   archive_command), so whichever node is primary archives WAL into the shared repository;
# - pg_hba.conf admits the ledger's two roles (passwords, TLS) and pg_auto_failover's own
#   roles from the compose network only;
# - on the primary, the ledger's roles are created once (they replicate to the secondary);
# then `pg_autoctl run` keeps the node in the formation.
#
# Environment: PGDATA, PG_AUTOCTL_MONITOR (the monitor's URL), LEDGER_OWNER_PASSWORD,
# LEDGER_SERVICE_PASSWORD; optional PGPORT (5432), PGAF_HOSTNAME (how the other nodes reach
# this one: the container's host name), PGAF_NAME (the node's name: the same),
# PGBACKREST_ARCHIVE_CONF (/etc/pgbackrest/archive.conf).
set -eu
: "${PGDATA:?}" "${PG_AUTOCTL_MONITOR:?}" "${LEDGER_OWNER_PASSWORD:?}" "${LEDGER_SERVICE_PASSWORD:?}"
export PGPORT="${PGPORT:-5432}"
host="${PGAF_HOSTNAME:-$(hostname)}"
archive_conf="${PGBACKREST_ARCHIVE_CONF:-/etc/pgbackrest/archive.conf}"
if [ ! -f "$PGDATA/postgresql.conf" ]; then
  pg_autoctl create postgres --pgdata "$PGDATA" --pgport "$PGPORT" --hostname "$host" \
    --name "${PGAF_NAME:-$host}" --dbname ledger --monitor "$PG_AUTOCTL_MONITOR" \
    --ssl-self-signed --skip-pg-hba --replication-quorum true
fi
if ! grep -q "^include_if_exists = '$archive_conf'" "$PGDATA/postgresql.conf"; then
  echo "include_if_exists = '$archive_conf'" >> "$PGDATA/postgresql.conf"
fi
if ! grep -q "deploy/pgaf/node.sh" "$PGDATA/pg_hba.conf"; then
  cat >> "$PGDATA/pg_hba.conf" <<'HBA'
# deploy/pgaf/node.sh: pg_auto_failover's roles (replication, pg_rewind, health checks), then the ledger's
hostssl replication pgautofailover_replicator samenet trust
hostssl all pgautofailover_replicator samenet trust
hostssl postgres pgautofailover_monitor samenet trust
hostssl ledger ledger,ledger_service samenet scram-sha-256
HBA
fi
# archive_mode takes effect only at a server start (`create` leaves PostgreSQL stopped; a
# restarted container finds it stopped too): `pg_autoctl run` below starts it with the include.
if pg_ctl -D "$PGDATA" status >/dev/null 2>&1; then pg_ctl -D "$PGDATA" -m fast -w stop; fi
(
  # Once this node is primary (or the roles have replicated to it), make sure they exist.
  until psql -d ledger -tAc "SELECT NOT pg_is_in_recovery() OR EXISTS (SELECT FROM pg_roles WHERE rolname = 'ledger_service')" 2>/dev/null | grep -q t; do
    sleep 2
  done
  psql -v ON_ERROR_STOP=1 -d ledger -v owner_pw="$LEDGER_OWNER_PASSWORD" -v service_pw="$LEDGER_SERVICE_PASSWORD" <<'SQL'
SELECT pg_is_in_recovery() AS standby \gset
\if :standby
\else
SELECT NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'ledger') AS missing \gset
\if :missing
CREATE ROLE ledger LOGIN PASSWORD :'owner_pw' NOSUPERUSER NOCREATEDB NOCREATEROLE;
ALTER DATABASE ledger OWNER TO ledger;
\endif
SELECT NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'ledger_service') AS missing \gset
\if :missing
CREATE ROLE ledger_service LOGIN PASSWORD :'service_pw' NOSUPERUSER NOCREATEDB NOCREATEROLE;
\endif
\endif
SQL
) &
exec pg_autoctl run --pgdata "$PGDATA"

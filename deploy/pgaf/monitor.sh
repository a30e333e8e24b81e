#!/bin/sh
# The pg_auto_failover monitor (compose.ha.yaml, service `monitor`): created on first start,
# then run. Its own pg_hba.conf admits the keepers (role autoctl_node) from the compose network only.
# Environment: PGDATA; optional PGPORT (5432), PGAF_HOSTNAME (the container's host name).
set -eu
: "${PGDATA:?}"
export PGPORT="${PGPORT:-5432}"
if [ ! -f "$PGDATA/postgresql.conf" ]; then
  pg_autoctl create monitor --pgdata "$PGDATA" --pgport "$PGPORT" --hostname "${PGAF_HOSTNAME:-$(hostname)}" \
    --ssl-self-signed --skip-pg-hba
  cat >> "$PGDATA/pg_hba.conf" <<'HBA'
# deploy/pgaf/monitor.sh: the keepers, over TLS, from the compose network only
hostssl pg_auto_failover autoctl_node samenet trust
HBA
fi
exec pg_autoctl run --pgdata "$PGDATA"

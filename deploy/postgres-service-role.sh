#!/bin/sh
# Runs once, when the postgres container initialises its data folder
# (/docker-entrypoint-initdb.d): the login role the ledger service runs as. It owns
# nothing; `ledger migrate` (as the owner, with LEDGER_SERVICE_ROLE set) grants it
# exactly the service's privileges after every upgrade.
set -eu
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
  -v role="ledger_service" -v password="$LEDGER_SERVICE_PASSWORD" <<'SQL'
CREATE ROLE :"role" LOGIN PASSWORD :'password' NOSUPERUSER NOCREATEDB NOCREATEROLE;
SQL

#!/bin/sh
# Creates Temporal's persistence and visibility databases in the compose stack's PostgreSQL and
# brings their schemas up to date. Idempotent: run again on every `docker compose up`.
set -eu
# The password comes from SQL_PASSWORD (docker-compose.yml).
tool() { temporal-sql-tool --plugin postgres12 --ep postgresql -p 5432 -u temporal "$@"; }
schema=/etc/temporal/schema/postgresql/v12
for db in temporal visibility; do
  name=temporal
  [ "$db" = visibility ] && name=temporal_visibility
  tool --db "$name" create || true          # exists already after the first run
  tool --db "$name" setup-schema -v 0.0 || true
  tool --db "$name" update-schema -d "$schema/$db/versioned"
done
echo "temporal schemas ready"

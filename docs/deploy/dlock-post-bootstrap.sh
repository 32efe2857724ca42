#!/bin/sh
# Patroni's post_bootstrap: runs once on the new primary with a superuser connection URL as $1.
# CREATE EXTENSION dlock in the postgres database and in template1 (so databases created later
# have it too); the standby gets both by replication. Install as /etc/patroni/dlock-post-bootstrap.sh.
set -eu
psql "$1" -v ON_ERROR_STOP=1 \
  -c 'CREATE EXTENSION IF NOT EXISTS dlock' \
  -c '\connect template1' \
  -c 'CREATE EXTENSION IF NOT EXISTS dlock'

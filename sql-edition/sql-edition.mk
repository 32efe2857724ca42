# The SQL-only edition (sql-edition/): `include sql-edition/sql-edition.mk` from the Makefile.
#   make sql-edition        builds $(BUILD)/sql-edition/dlock-sql--<version>.sql (its path is
#                           the last line printed), the pg_tle bundle, the database.dev layout
#                           and the one-file update (dlock-sql-update--<version>.sql)
#   make test-sql-edition   the edition's tests (sql-edition/tests/all.sh): the native pg_regress
#                           suite with the declared differences on 15 (and under the
#                           hostile-schema net) and 18, security, crash, waits, bundle, move to
#                           the native layout, conformance (Python runner)
#   make demo-sql           the edition's story in ten seconds on a throwaway cluster, installed
#                           as a managed service's database owner would (sql-edition/demo.sh)
#   make bench-sql-edition  pairs/s beside the hand-written table, the PL/pgSQL floor and the
#                           native extension, hand-off latency, the CPU of 100 parked waiters,
#                           instructions per pair (callgrind), and the table's size through a
#                           churn of 1M keys (make bench too)
.PHONY: sql-edition demo-sql test-sql-edition bench-sql-edition

sql-edition:
	@OUT=$(BUILD)/sql-edition bash sql-edition/build.sh

# The native extension installed (the move test restores into it) and the Python client built
# (the conformance runs use it).
test-sql-edition: setup install sql-edition
	@built=$$(bash tests/scripts/clients.sh build) && \
	 $(BUILD)/clients/venv/bin/python -m pip install -q --force-reinstall --no-deps "$$(echo "$$built" | head -n 1)"
	@BUILD=$(BUILD) PG18_CONFIG=$(PG18_CONFIG) bash sql-edition/tests/all.sh

demo-sql:
	@BUILD=$(BUILD) bash sql-edition/demo.sh

bench-sql-edition: sql-edition
	@BUILD=$(BUILD) bash sql-edition/bench/waiters.sh
	@BUILD=$(BUILD) bash sql-edition/bench/instructions.sh
	@BUILD=$(BUILD) bash sql-edition/bench/churn.sh

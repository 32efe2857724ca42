#!/usr/bin/env bash
# The contract's integration suites (tests/tests/*.rs, the dlock-tests package) against the
# edition: DLOCK_SQL_EDITION makes the harness install its one-file edition instead of CREATE
# EXTENSION. Every suite runs but those declared whole in ../differences/tests.txt; every test
# passes but those declared by name there (each with its reason; a declared name that no longer
# exists fails the run). PG_CONFIG picks the PostgreSQL (default 15).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
declared=$SQLED/differences/tests.txt
file=$(OUT=$BUILD/sql-edition bash "$SQLED/build.sh" | tail -n 1)
entries() { grep -v '^#' "$declared" | grep -v '^[[:space:]]*$'; }
whole=$(entries | awk -F' [|] ' '$2 == "*" { print $1 }')
ran=0 tests=0 skipped=0
for path in "$ROOT"/tests/tests/*.rs; do
  suite=$(basename "$path" .rs)
  grep -qxF "$suite" <<<"$whole" && continue
  skip=()
  listed=$(cd "$ROOT" && cargo test -q -p dlock-tests --test "$suite" -- --list --format terse 2>/dev/null | sed -n 's/: test$//p')
  while IFS= read -r name; do
    [ -n "$name" ] || continue
    grep -qxF "$name" <<<"$listed" || fail "$declared: $suite has no test $name"
    skip+=(--skip "$name")
    skipped=$((skipped + 1))
  done < <(entries | awk -F' [|] ' -v s="$suite" '$1 == s && $2 != "*" { print $2 }')
  out=$(cd "$ROOT" && DLOCK_SQL_EDITION=$file cargo test -q -p dlock-tests --test "$suite" -- --exact "${skip[@]}" 2>&1) ||
    { grep -E -A6 '^---- |panicked at' <<<"$out" | grep -vE '^ +[0-9]+: |^ +at ' | head -n 60
      # A shrunk random sequence is only useful whole.
      sed -n '/^minimal failing input: \[/,/^\]/p' <<<"$out" | head -n 200
      fail "$suite failed against the SQL edition"; }
  n=$(sed -n 's/^test result: ok\. \([0-9]*\) passed.*/\1/p' <<<"$out")
  ran=$((ran + 1)); tests=$((tests + n))
done
echo "contract: $ran suites, $tests tests passed against the SQL edition ($skipped declared tests skipped, $(wc -l <<<"$whole") suites declared whole)"

"""The conformance runner of the Python client (conformance/README.md).

    DLOCK_CONFORMANCE_DSN=postgresql://postgres@127.0.0.1:5432/postgres \
        python run.py --api sync|aio [--strict] [--only a,b] [scenarios dir]
"""

from __future__ import annotations

import argparse
import glob
import json
import logging
import os
import secrets
import signal
import sys
import time
from pathlib import Path

import psycopg

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from scenario import Environment, Failure, Scenario, load  # noqa: E402

SUITE = HERE.parent.parent
EDITION = """
SELECT CASE WHEN EXISTS (SELECT 1 FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_language l ON l.oid = p.prolang
                         WHERE p.proname = 'dlock_acquire' AND l.lanname = 'c') THEN 'native' ELSE 'sql' END
"""


def capabilities(dsn: str, pgbouncer_dsn: str | None) -> tuple[set[str], str]:
    """What this run can do, and the server's edition."""
    found: set[str] = set()
    with psycopg.connect(dsn, autocommit=True) as connection:
        if connection.execute("SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user").fetchone()[0]:
            found.add("admin")
        preload = connection.execute("SELECT current_setting('shared_preload_libraries')").fetchone()[0]
        if "dlock" in [name.strip() for name in preload.split(",")]:
            found.add("preload")
        edition = os.environ.get("DLOCK_EDITION") or connection.execute(EDITION).fetchone()[0]
    if pgbouncer_dsn:
        found.add("pgbouncer")
    if os.name == "posix" and hasattr(signal, "SIGSTOP"):
        found.add("sigstop")
    return found, edition


def differences(edition: str) -> dict[str, str]:
    """The scenarios the edition's declared differences skip, with why."""
    path = SUITE / "editions" / f"{edition}.json"
    if not path.exists():
        return {}
    declared = json.loads(path.read_text(encoding="utf-8"))
    return {d["scenario"]: d["why"] for d in declared.get("differences", [])}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--api", choices=["sync", "aio"], default="sync")
    parser.add_argument("--strict", action="store_true", help="unmet needs fail instead of skipping")
    parser.add_argument("--only", default="", help="comma-separated scenario names")
    parser.add_argument("scenarios", nargs="?", default=str(SUITE / "scenarios"))
    args = parser.parse_args()
    # The pool's reconnect attempts and the lost-lease warnings are expected in these scenarios.
    logging.basicConfig(level=logging.ERROR)
    for name in ("psycopg.pool", "dlock_client"):
        logging.getLogger(name).setLevel(logging.ERROR)

    dsn = os.environ["DLOCK_CONFORMANCE_DSN"]
    pgbouncer_dsn = os.environ.get("DLOCK_CONFORMANCE_PGBOUNCER_DSN") or None
    have, edition = capabilities(dsn, pgbouncer_dsn)
    skipped_by_edition = differences(edition)
    if args.api == "aio":
        from api_aio import Adapter
    else:
        from api_sync import Adapter
    env = Environment(
        dsn=dsn,
        pgbouncer_dsn=pgbouncer_dsn,
        run_id=secrets.token_hex(4),
        capabilities=have,
        adapter_factory=Adapter,
        child_command=[sys.executable, str(HERE / "child.py")],
    )
    print(f"conformance: python {args.api}, edition {edition}, run {env.run_id}, has {sorted(have)}", flush=True)
    only = {name for name in args.only.split(",") if name}
    passed = failed = skipped = 0
    for path in sorted(glob.glob(os.path.join(args.scenarios, "*.json"))):
        name = Path(path).stem
        if only and name not in only:
            continue
        spec = load(path)
        missing = sorted(set(spec.get("needs", [])) - have)
        if name in skipped_by_edition:
            print(f"skip {name}: a declared difference of the {edition} edition: {skipped_by_edition[name]}")
            skipped += 1
            continue
        if missing:
            if args.strict:
                print(f"FAIL {name}: needs {missing}, which this run has not (--strict)")
                failed += 1
            else:
                print(f"skip {name}: needs {missing}")
                skipped += 1
            continue
        started = time.monotonic()
        try:
            Scenario(name, spec, env).run()
        except Failure as e:
            print(f"FAIL {name}: {e}", flush=True)
            failed += 1
            continue
        print(f"ok   {name} ({time.monotonic() - started:.1f} s)", flush=True)
        passed += 1
    print(f"conformance: {passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""A leader that gives up its lead cleanly: three candidates, one election.

Each candidate waits in dlock_campaign to lead 'examples:scheduler'. The leader runs a few
rounds of work, keeping its lead with dlock_renew, then resigns with dlock_release; a waiting
candidate takes over at once. An observer LISTENs on the election's channel (dlock_watch) and
sees every change of leader. Connects with the libpq environment or DATABASE_URL.

Exits 1 unless every candidate led once, terms only grew, and the observer saw the changes.
"""

import os
import threading

import psycopg

ELECTION = "examples:scheduler"
CANDIDATES = 3
terms = []
record = threading.Lock()


def connect():
    return psycopg.connect(os.environ.get("DATABASE_URL", ""), autocommit=True)


def candidate(name: str) -> None:
    with connect() as conn:
        # Wait (up to 60 s) to lead; the lead lasts 5 s unless renewed.
        term = conn.execute(
            "SELECT dlock.dlock_campaign(%s, %s, %s, info => %s, wait => %s)",
            (ELECTION, name, "5 seconds", f"{name} at pid {os.getpid()}", "60 seconds"),
        ).fetchone()[0]
        if term is None:
            raise RuntimeError(f"{name}: never led")
        with record:
            terms.append((term, name))
        for _ in range(3):  # rounds of work, each one renewing the lead first
            if conn.execute(
                "SELECT dlock.dlock_renew(%s, %s, %s)", (ELECTION, name, "5 seconds")
            ).fetchone()[0] is None:
                raise RuntimeError(f"{name}: lost the lead")
            info = conn.execute("SELECT info FROM dlock.dlock_leader(%s)", (ELECTION,)).fetchone()[0]
            assert info.startswith(name), f"dlock_leader shows {info!r} while {name} leads"
        # Step down: the next candidate is granted in this release's own commit.
        conn.execute("SELECT dlock.dlock_release(%s, %s)", (ELECTION, name))


with connect() as observer:
    changes = []
    # Notifications are read whenever the connection talks to the server.
    observer.add_notify_handler(lambda n: changes.append(n.channel))
    channel = observer.execute("SELECT dlock.dlock_watch(%s)", (ELECTION,)).fetchone()[0]
    threads = [threading.Thread(target=candidate, args=(f"node-{i}",)) for i in range(CANDIDATES)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    observer.execute("SELECT pg_sleep(0.2)")  # collect what arrived meanwhile
    seen = changes.count(channel)

ordered = [t for t, _ in terms]
print(f"python election: terms {ordered} by {[n for _, n in terms]}, {seen} notifications on {channel}")
if len(terms) != CANDIDATES or ordered != sorted(ordered) or len(set(ordered)) != CANDIDATES or seen < CANDIDATES:
    raise SystemExit(1)

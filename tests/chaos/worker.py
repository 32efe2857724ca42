#!/usr/bin/python3
"""The SQL worker of `make chaos`: acquire -> fenced writes -> release in plain SQL (psycopg 3).

Same protocol as the Rust worker (chaos/src/worker.rs): every acknowledged grant goes to the
history file as one JSON line, written with one os.write so a kill -9 loses nothing acked;
stdout says `hold <key> <fence>` / `free` for the runner. Times in the history are the
server's. The client clock is skewed on purpose (--skew) and only ever sent as `client_at`:
dlock never reads client clocks, so the skew must change nothing.
"""
import argparse
import json
import os
import random
import sys
import time
from datetime import datetime, timedelta, timezone

import psycopg

ACQUIRE = (
    "SELECT dlock_acquire(%s, %s, %s * interval '1 second', %s * interval '1 second'),"
    " extract(epoch FROM statement_timestamp())::float8,"
    " extract(epoch FROM clock_timestamp())::float8"
)
# A session-bound lease (ttl NULL): no expiry; it ends when released or when this session ends.
ACQUIRE_BOUND = (
    "SELECT dlock_acquire(%s, %s, NULL, %s * interval '1 second'),"
    " extract(epoch FROM statement_timestamp())::float8,"
    " extract(epoch FROM clock_timestamp())::float8"
)
# Is the session-bound lease still ours? renew answers 'infinity' for it (and changes nothing):
# then it was held at the statement's start.
STILL_BOUND = (
    "SELECT dlock_renew(%s, %s, interval '1 second') = 'infinity',"
    " extract(epoch FROM statement_timestamp())::float8"
)
RELEASE = (
    "SELECT dlock_release(%s, %s), extract(epoch FROM statement_timestamp())::float8,"
    " extract(epoch FROM clock_timestamp())::float8"
)
EXPIRY = "SELECT extract(epoch FROM expires_at)::float8 FROM dlock_locks WHERE key = %s AND fence = %s"
# Fast mode (--fast): the same calls on leases kept in the server's shared memory.
FAST = {
    ACQUIRE: ACQUIRE.replace("dlock_acquire", "dlock_fast_acquire"),
    RELEASE: RELEASE.replace("dlock_release", "dlock_fast_release"),
    EXPIRY: "SELECT extract(epoch FROM expires_at)::float8 FROM dlock_fast_locks() WHERE key = %s AND fence = %s",
}
WRITE = "SELECT accepted, at FROM chaos_write(%s, %s, %s, %s, %s)"


class History:
    def __init__(self, path):
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def record(self, **event):
        os.write(self.fd, (json.dumps(event) + "\n").encode())


def say(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def connect(url):
    return psycopg.connect(url, autocommit=True, connect_timeout=3)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--name", required=True)
    p.add_argument("--dlock-url", required=True)
    p.add_argument("--resource-url", required=True)
    p.add_argument("--keys", required=True)
    p.add_argument("--ttl-min", type=float, default=1.0)
    p.add_argument("--ttl-max", type=float, default=2.0)
    p.add_argument("--hold-factor", type=float, default=1.3)
    p.add_argument("--wait", type=float, default=2.0)
    p.add_argument("--history", required=True)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--bound-rate", type=float, default=0.0,
                   help="share of iterations that take a session-bound lease (ttl NULL)")
    p.add_argument("--skew", type=float, default=0.0, help="seconds added to this worker's clock")
    p.add_argument("--fast", action="store_true", help="fast-mode leases (dlock_fast_*)")
    a = p.parse_args()
    rng = random.Random(a.seed)
    keys = a.keys.split(",")
    history = History(a.history)
    lock_db = data_db = None
    attempt = 0
    while True:
        try:
            if lock_db is None or lock_db.closed:
                lock_db = connect(a.dlock_url)
            if data_db is None or data_db.closed:
                data_db = connect(a.resource_url)
            attempt += 1
            # A fresh owner per attempt: an unacknowledged grant (connection cut mid-call) is
            # never silently re-entered by a later acquire.
            owner = f"{a.name}:{os.getpid()}:{attempt}"
            key = rng.choice(keys)
            ttl = rng.uniform(a.ttl_min, a.ttl_max)
            # Mostly short holds (many grants); some past the ttl, so the lease runs out under
            # the holder and its late end write meets the fence.
            if rng.random() < 0.15:
                hold = rng.uniform(0.8 * ttl, a.hold_factor * ttl)
            else:
                hold = rng.uniform(0.02, 0.4)
            # Some leases are session-bound: held until released or until this session ends.
            bound = rng.random() < a.bound_rate
            cycle(lock_db, data_db, history, owner, key, None if bound else ttl, hold, a)
        except psycopg.Error:
            for db in (lock_db, data_db):
                if db is not None and db.broken:
                    db.close()
            time.sleep(0.05)
        say("free")


def skewed_now(skew):
    return datetime.now(timezone.utc) + timedelta(seconds=skew)


def cycle(lock_db, data_db, history, owner, key, ttl, hold, a):
    """One cycle; `ttl` None: a session-bound lease."""
    if ttl is None:
        return bound_cycle(lock_db, data_db, history, owner, key, hold, a)
    sql = (lambda q: FAST[q]) if a.fast else (lambda q: q)
    fence, started, granted_by = lock_db.execute(sql(ACQUIRE), (key, owner, ttl, a.wait)).fetchone()
    if fence is None:
        return
    # The lease expires at its grant time + ttl, and it was granted after the statement began
    # (by the releaser's transaction when the server hands it over): a sure lower bound, made
    # exact below.
    # A fast-mode lease says so: a crash forgets it by design.
    history.record(ev="grant", owner=owner, key=key, fence=fence, requested_at=started,
                   granted_by=granted_by, live_until=started + ttl, **({"fast": True} if a.fast else {}))
    say(f"hold {key} {fence}")
    try:
        row = lock_db.execute(sql(EXPIRY), (key, fence)).fetchone()
        if row is not None:
            history.record(ev="expiry", owner=owner, key=key, fence=fence, live_until=row[0])
        if write(data_db, history, owner, key, fence, "start", a.skew):
            time.sleep(hold)
            write(data_db, history, owner, key, fence, "end", a.skew)
    finally:
        # Released even when a write failed: the lease is ours to give back either way.
        # The machine's real clock (not the skewed one): orders the release against a crash.
        history.record(ev="releasing", owner=owner, key=key, fence=fence, local=time.time())
        try:
            ok, lb, ub = lock_db.execute(sql(RELEASE), (key, owner)).fetchone()
        except psycopg.Error:
            history.record(ev="release", owner=owner, key=key, fence=fence, ok=None, lb=None, ub=None)
            raise
        history.record(ev="release", owner=owner, key=key, fence=fence, ok=ok, lb=lb, ub=ub)


def bound_cycle(lock_db, data_db, history, owner, key, hold, a):
    """A session-bound lease: it is surely held from its grant to the last moment the session
    was seen holding it (`live_until`, raised by each confirmed check), and the runner may kill
    this worker while it holds one: the key must then pass on at once."""
    fence, started, granted_by = lock_db.execute(ACQUIRE_BOUND, (key, owner, a.wait)).fetchone()
    if fence is None:
        return
    history.record(ev="grant", owner=owner, key=key, fence=fence, requested_at=started,
                   granted_by=granted_by, live_until=granted_by, bound=True)
    say(f"hold {key} {fence} bound")
    try:
        if write(data_db, history, owner, key, fence, "start", a.skew):
            time.sleep(hold)
            held, at = lock_db.execute(STILL_BOUND, (key, owner)).fetchone()
            if held:
                history.record(ev="renewed", owner=owner, key=key, fence=fence, live_until=at)
            write(data_db, history, owner, key, fence, "end", a.skew)
    finally:
        history.record(ev="releasing", owner=owner, key=key, fence=fence, local=time.time())
        try:
            ok, lb, ub = lock_db.execute(RELEASE, (key, owner)).fetchone()
        except psycopg.Error:
            history.record(ev="release", owner=owner, key=key, fence=fence, ok=None, lb=None, ub=None)
            raise
        history.record(ev="release", owner=owner, key=key, fence=fence, ok=ok, lb=lb, ub=ub)


def write(data_db, history, owner, key, fence, phase, skew):
    accepted, at = data_db.execute(WRITE, (key, fence, owner, phase, skewed_now(skew))).fetchone()
    history.record(ev="write", owner=owner, key=key, fence=fence, phase=phase, accepted=accepted, at=at)
    return accepted


if __name__ == "__main__":
    main()

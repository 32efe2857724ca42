"""A worker pool limited by a dlock semaphore: 8 workers, at most 3 at work at any moment.

Each worker takes one of the 3 permits of the key 'examples:render-farm' (a shared lease with
max_holders => 3), renews it while a job runs long, and gives it back. The permits live in
PostgreSQL, so the limit holds across processes and machines too. Connects with the usual
libpq environment (PGHOST, PGPORT, PGUSER, PGDATABASE) or DATABASE_URL.

Exits 1 if more than 3 workers ever worked at once, or a job was lost.
"""

import os
import threading
import time
import uuid

import psycopg

KEY = "examples:render-farm"
PERMITS = 3
WORKERS = 8
JOBS_PER_WORKER = 5

running = 0
most_at_once = 0
done = 0
counter = threading.Lock()


def connect():
    return psycopg.connect(os.environ.get("DATABASE_URL", ""), autocommit=True)


def work(worker: int) -> None:
    global running, most_at_once, done
    owner = f"worker-{worker}-{uuid.uuid4()}"  # unique per process: a lease is its owner's
    with connect() as conn:
        for job in range(JOBS_PER_WORKER):
            # Wait up to 30 s for a permit; the lease lasts 10 s unless renewed.
            fence = conn.execute(
                "SELECT dlock.dlock_acquire_shared(%s, %s, %s, %s, max_holders => %s)",
                (KEY, owner, "10 seconds", "30 seconds", PERMITS),
            ).fetchone()[0]
            if fence is None:
                raise RuntimeError(f"{owner}: no permit within 30 s")
            with counter:
                running += 1
                most_at_once = max(most_at_once, running)
            try:
                time.sleep(0.05)  # the job
                # A long job keeps its permit: renew before the ttl runs out.
                if conn.execute(
                    "SELECT dlock.dlock_renew(%s, %s, %s)", (KEY, owner, "10 seconds")
                ).fetchone()[0] is None:
                    raise RuntimeError(f"{owner}: lost the permit")
                time.sleep(0.05)
            finally:
                with counter:
                    running -= 1
                    done += 1
                conn.execute("SELECT dlock.dlock_release(%s, %s)", (KEY, owner))


threads = [threading.Thread(target=work, args=(i,)) for i in range(WORKERS)]
for t in threads:
    t.start()
for t in threads:
    t.join()

print(f"python semaphore: {done} jobs, at most {most_at_once} at once (limit {PERMITS})")
if most_at_once > PERMITS or done != WORKERS * JOBS_PER_WORKER:
    raise SystemExit(1)

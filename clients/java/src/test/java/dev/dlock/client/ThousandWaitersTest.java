package dev.dlock.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.zaxxer.hikari.HikariDataSource;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;

/**
 * The proof of issue 32: a thousand threads waiting on one client (a HikariCP pool of 4) hold at
 * most the pool's connections plus one (the listener), counted in {@code pg_stat_activity} all
 * through the wait and the hand-over.
 */
class ThousandWaitersTest extends ServerTest {
    static final int WAITERS = 1000;
    static final int POOL = 4;

    @Test
    void a_thousand_waiting_threads_hold_the_pool_and_one_more_connection() throws Exception {
        String app = app("thousand");
        HikariDataSource pool = hikari(URL, POOL, app);
        Dlock holder = client();
        Dlock waiters = closing(Dlock.connect(pool));
        Lease blocker = holder.lock(key()).acquire();

        AtomicLong most = new AtomicLong();
        AtomicReference<Throwable> sampling = new AtomicReference<>();
        Thread sampler = new Thread(() -> {
            try {
                while (!Thread.currentThread().isInterrupted()) {
                    most.accumulateAndGet(sessions(app), Math::max);
                    Thread.sleep(20);
                }
            } catch (InterruptedException e) {
                // Done.
            } catch (Throwable t) {
                sampling.set(t);
            }
        });

        List<Thread> threads = new ArrayList<>();
        List<Long> fences = java.util.Collections.synchronizedList(new ArrayList<>());
        AtomicReference<Throwable> failure = new AtomicReference<>();
        for (int i = 0; i < WAITERS; i++) {
            Thread t = new Thread(() -> {
                try (Lease lease = waiters.lock(key()).waitAtMost(Duration.ofSeconds(120)).acquire()) {
                    fences.add(lease.fence());
                } catch (Throwable e) {
                    failure.compareAndSet(null, e);
                }
            }, "waiter");
            t.setDaemon(true);
            threads.add(t);
        }
        // The sampler uses the admin session (another application_name) alone until it is joined.
        sampler.start();
        threads.forEach(Thread::start);
        eventually("all " + WAITERS + " are in line", () -> waiters.core().waits.users(key()) == WAITERS);
        Thread.sleep(1000); // a second of all of them waiting, sampled
        long whileWaiting = most.get();
        blocker.release();
        for (Thread t : threads) {
            t.join(120_000);
        }
        sampler.interrupt();
        sampler.join();
        if (sampling.get() != null) {
            throw new AssertionError(sampling.get());
        }
        if (failure.get() != null) {
            throw new AssertionError(failure.get());
        }
        assertEquals(WAITERS, fences.size(), "every waiter was granted");
        System.out.printf("thousand waiters: at most %d sessions while waiting, %d in all (pool %d + listener)%n",
                whileWaiting, most.get(), POOL);
        assertTrue(most.get() <= POOL + 1, "at most the pool and the listener: " + most.get());
        assertEquals(0, count("SELECT count(*) FROM dlock.dlock_locks WHERE key = ?", key()));
    }
}

package dev.dlock.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.zaxxer.hikari.HikariDataSource;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;

/** Waits: no pooled connection held, arrival order within a client, wake-up by notification and by
 *  expiry, the listener's loss, timeouts, interruption, and waiting for a free key. */
class WaitingTest extends ServerTest {
    private static final String LISTENER = "SELECT pid FROM pg_stat_activity WHERE application_name = ? "
            + "AND query LIKE '%dlock_watch%'";

    private static boolean waiting(Dlock client, String key) {
        return client.core().waits.hasLine(key);
    }

    @Test
    void a_wait_ends_not_acquired_when_its_time_runs_out() {
        Dlock a = client();
        Dlock b = client();
        Lease held = a.lock(key()).acquire();
        long started = System.nanoTime();
        NotAcquiredException e = assertThrows(NotAcquiredException.class,
                () -> b.lock(key()).waitAtMost(Duration.ofMillis(400)).acquire());
        long elapsed = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - started);
        assertTrue(elapsed >= 350 && elapsed < 5000, elapsed + " ms");
        assertTrue(e.waited());
        assertFalse(waiting(b, key()), "the waiter left its line");
        held.release();
    }

    @Test
    void a_release_wakes_a_waiter_by_its_notification() throws Exception {
        Dlock a = client();
        Dlock b = client();
        Lease held = a.lock(key()).ttl(Duration.ofSeconds(60)).acquire();
        CompletableFuture<Lease> waiter = async(
                () -> b.lock(key()).waitAtMost(Duration.ofSeconds(30)).acquire());
        eventually("the waiter is lined up", () -> waiting(b, key()));
        Thread.sleep(200); // past its first try: asleep until notified
        long released = System.nanoTime();
        held.release();
        Lease got = waiter.get(10, TimeUnit.SECONDS);
        assertTrue(got.fence() > held.fence());
        assertTrue(System.nanoTime() - released < Duration.ofMillis(1500).toNanos(),
                "woken by the notification, not by the 2 s recheck");
        got.release();
    }

    @Test
    void the_blocking_leases_expiry_wakes_a_waiter() {
        Dlock a = client();
        Dlock b = client();
        Lease held = a.lock(key()).ttl(Duration.ofSeconds(1)).watchdog(false).acquire();
        Lease next = b.lock(key()).waitAtMost(Duration.ofSeconds(20)).acquire();
        assertTrue(next.fence() > held.fence());
        next.release();
    }

    @Test
    void waiters_hold_no_pooled_connection() throws Exception {
        String app = app("budget");
        Dlock holder = client();
        Dlock a = client(b -> b.poolSize(2).property("ApplicationName", app));
        Lease blocker = holder.lock(key()).acquire();
        List<Long> fences = Collections.synchronizedList(new ArrayList<>());
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < 12; i++) {
            Dlock worker = a.withOwner("w" + i + "-" + UUID.randomUUID());
            Thread t = new Thread(() -> {
                try (Lease lease = worker.lock(key()).waitAtMost(Duration.ofSeconds(30)).acquire()) {
                    fences.add(lease.fence());
                }
            });
            t.start();
            threads.add(t);
        }
        eventually("all twelve are lined up", () -> a.core().waits.users(key()) == 12);
        long started = System.nanoTime();
        a.lock(key("other")).acquire().release(); // the pool of 2 is free for other calls
        assertTrue(System.nanoTime() - started < Duration.ofSeconds(5).toNanos());
        assertTrue(sessions(app) <= 3, "the pool and the listener: " + sessions(app));
        assertEquals(0, count("SELECT coalesce(sum(waiters), 0) FROM dlock.dlock_locks WHERE key = ?", key()),
                "none of them waits in the server");
        blocker.release();
        for (Thread t : threads) {
            t.join(30_000);
        }
        assertEquals(12, fences.size());
        List<Long> sorted = new ArrayList<>(fences);
        Collections.sort(sorted);
        assertEquals(sorted, fences, "granted one after another, fences growing");
    }

    @Test
    @SuppressWarnings("try") // the lease is held while the order is recorded
    void waiters_of_one_client_are_granted_in_arrival_order() throws Exception {
        Dlock holder = client();
        Dlock a = client();
        Lease blocker = holder.lock(key()).acquire();
        List<Integer> order = Collections.synchronizedList(new ArrayList<>());
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < 5; i++) {
            int n = i;
            Dlock worker = a.withOwner("w" + i + "-" + UUID.randomUUID());
            Thread t = new Thread(() -> {
                try (Lease lease = worker.lock(key()).waitAtMost(Duration.ofSeconds(30)).acquire()) {
                    order.add(n);
                }
            });
            t.start();
            threads.add(t);
            // The next arrives only once this one is in line.
            eventually("waiter " + i + " is in line", () -> a.core().waits.users(key()) == n + 1);
        }
        blocker.release();
        for (Thread t : threads) {
            t.join(30_000);
        }
        assertEquals(List.of(0, 1, 2, 3, 4), order);
    }

    @Test
    void a_lost_listener_is_replaced_and_its_waiters_still_woken() throws Exception {
        String app = app("listener");
        Dlock a = client();
        Dlock b = client(c -> c.property("ApplicationName", app));
        Lease held = a.lock(key()).ttl(Duration.ofSeconds(60)).acquire();
        CompletableFuture<Lease> waiter = async(
                () -> b.lock(key()).waitAtMost(Duration.ofSeconds(30)).acquire());
        eventually("the listener watches", sql(() -> scalar(LISTENER, app) != null));
        Object old = scalar(LISTENER, app);
        scalar("SELECT pg_terminate_backend(?)", old);
        eventually("a new listener watches the key again", sql(() -> {
            Object now = scalar(LISTENER, app);
            return now != null && !now.equals(old);
        }));
        held.release();
        Lease got = waiter.get(10, TimeUnit.SECONDS);
        assertTrue(got.fence() > held.fence());
        got.release();
    }

    @Test
    void an_interrupted_waiter_stops_and_keeps_its_interrupt_status() throws Exception {
        Dlock a = client();
        Dlock b = client();
        Lease held = a.lock(key()).acquire();
        AtomicReference<Throwable> failure = new AtomicReference<>();
        AtomicReference<Boolean> stillInterrupted = new AtomicReference<>();
        Thread waiter = new Thread(() -> {
            try {
                b.lock(key()).waitForever().acquire();
            } catch (Throwable t) {
                failure.set(t);
                stillInterrupted.set(Thread.currentThread().isInterrupted());
            }
        });
        waiter.start();
        eventually("the waiter is lined up", () -> waiting(b, key()));
        waiter.interrupt();
        waiter.join(10_000);
        assertTrue(failure.get() instanceof CancellationException, String.valueOf(failure.get()));
        assertEquals(Boolean.TRUE, stillInterrupted.get());
        assertFalse(waiting(b, key()));
        held.release();
    }

    @Test
    void wait_free_waits_without_taking_the_key() throws Exception {
        Dlock a = client();
        Dlock b = client();
        assertTrue(b.waitFree(key(), Duration.ZERO));
        Lease held = a.lock(key()).acquire();
        assertFalse(b.waitFree(key(), Duration.ofMillis(200)));
        CompletableFuture<Boolean> free = async(() -> b.waitFree(key(), Duration.ofSeconds(20)));
        eventually("the watcher is lined up", () -> waiting(b, key()));
        held.release();
        assertTrue(free.get(10, TimeUnit.SECONDS));
        assertEquals(0, count("SELECT count(*) FROM dlock.dlock_locks WHERE key = ?", key()));
    }

    @Test
    void a_hikari_pool_lends_no_connection_to_the_listener() throws Exception {
        String app = app("hikari");
        HikariDataSource pool = hikari(URL, 3, app);
        Dlock holder = client();
        Dlock a = closing(Dlock.connect(pool));
        Lease blocker = holder.lock(key()).acquire();
        List<CompletableFuture<Lease>> waiters = new ArrayList<>();
        for (int i = 0; i < 6; i++) {
            waiters.add(async(() -> a.lock(key()).waitAtMost(Duration.ofSeconds(30)).acquire()));
        }
        eventually("the listener watches", sql(() -> scalar(LISTENER, app) != null));
        assertTrue(sessions(app) <= 4, "the pool of 3 and the listener: " + sessions(app));
        assertEquals(0, pool.getHikariPoolMXBean().getActiveConnections(), "no pooled connection is held by a wait");
        blocker.release();
        for (CompletableFuture<Lease> w : waiters) {
            w.get(20, TimeUnit.SECONDS).release();
        }
        assertNotEquals(0, pool.getHikariPoolMXBean().getTotalConnections());
    }
}

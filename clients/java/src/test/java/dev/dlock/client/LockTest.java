package dev.dlock.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.sql.Statement;
import java.time.Duration;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/** Locks on a real server: exclusion, fences, reentrancy, renewal, loss, modes, errors. */
class LockTest extends ServerTest {
    @Test
    void an_exclusive_lock_keeps_other_owners_out_until_released() {
        Dlock a = client();
        Dlock b = client();
        Lease held = a.lock(key()).acquire();
        assertTrue(held.fence() > 0);
        NotAcquiredException busy = assertThrows(NotAcquiredException.class, () -> b.lock(key()).acquire());
        assertFalse(busy.waited());
        assertEquals(Optional.empty(), b.lock(key()).tryAcquire());
        assertTrue(held.release());
        Lease next = b.lock(key()).acquire();
        assertTrue(next.fence() > held.fence(), "every new grant has a larger fence");
        next.release();
    }

    @Test
    void a_second_release_answers_false_without_a_round_trip() throws Exception {
        Dlock a = client();
        Lease held = a.lock(key()).acquire();
        assertTrue(held.release());
        assertFalse(held.release());
        assertFalse(held.isHeld());
        assertEquals(0, count("SELECT count(*) FROM dlock.dlock_locks WHERE key = ?", key()));
    }

    @Test
    void the_same_owner_reenters_with_the_same_fence_and_one_more_hold() throws Exception {
        Dlock a = client();
        Lease first = a.lock(key()).acquire();
        Lease second = a.lock(key()).acquire();
        assertEquals(first.fence(), second.fence());
        assertEquals(2L, count("SELECT hold_count FROM dlock.dlock_locks WHERE key = ?", key()));
        first.release();
        assertTrue(second.holds(), "one hold is left");
        second.release();
        assertEquals(0, count("SELECT count(*) FROM dlock.dlock_locks WHERE key = ?", key()));
    }

    @Test
    void try_with_resources_releases_and_the_fence_guards_writes() throws Exception {
        Dlock a = client();
        try (Statement s = admin.createStatement()) {
            s.execute("CREATE TABLE IF NOT EXISTS java_fenced (id int PRIMARY KEY, v text)");
            s.execute("INSERT INTO java_fenced VALUES (1, 'old') ON CONFLICT (id) DO UPDATE SET v = 'old'");
        }
        long fence;
        try (Lease lease = a.lock(key()).acquire()) {
            fence = lease.fence();
            assertEquals(1, count("WITH u AS (UPDATE java_fenced SET v = 'new' WHERE id = 1 AND dlock.dlock_holds(?, ?) "
                    + "RETURNING 1) SELECT count(*) FROM u", key(), fence));
        }
        assertEquals(0, count("SELECT count(*) FROM dlock.dlock_locks WHERE key = ?", key()));
        assertEquals(0, count("WITH u AS (UPDATE java_fenced SET v = 'stale' WHERE id = 1 AND dlock.dlock_holds(?, ?) "
                + "RETURNING 1) SELECT count(*) FROM u", key(), fence), "a stale holder's write is refused");
    }

    @Test
    void the_watchdog_keeps_a_lease_for_many_times_its_ttl() throws Exception {
        Dlock a = client();
        Dlock b = client();
        Lease kept = a.lock(key()).ttl(Duration.ofMillis(900)).acquire();
        Thread.sleep(3000);
        assertFalse(kept.isLost());
        assertTrue(kept.isHeld());
        assertTrue(kept.holds());
        assertEquals(Optional.empty(), b.lock(key()).tryAcquire());
        assertTrue(kept.release());
    }

    @Test
    void without_the_watchdog_a_lease_runs_out_at_its_ttl_and_says_so() throws Exception {
        Dlock a = client();
        Lease fixed = a.lock(key()).ttl(Duration.ofMillis(800)).watchdog(false).acquire();
        fixed.lost().get(5, TimeUnit.SECONDS);
        assertFalse(fixed.isHeld());
        // The local deadline is no later than the server's, so lost() may complete a few
        // milliseconds before the server's clock reaches the expiry: wait for that first.
        long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
        while (count("SELECT count(*) FROM dlock.dlock_locks WHERE key = ? AND expires_at > now()", key()) > 0) {
            assertTrue(System.nanoTime() < until, "the server never let it go");
            Thread.sleep(20);
        }
        assertFalse(fixed.release(), "the server let it go");
    }

    @Test
    void a_force_released_lease_is_lost_and_closing_it_throws() throws Exception {
        Dlock a = client();
        Lease lease = a.lock(key()).ttl(Duration.ofSeconds(3)).acquire();
        assertTrue(a.forceRelease(key()), "the test role is a superuser");
        lease.lost().get(5, TimeUnit.SECONDS);
        assertTrue(lease.isLost());
        assertThrows(LeaseLostException.class, lease::renew);
        assertThrows(LeaseLostException.class, lease::close);
        lease.close(); // closing again is quiet: the hold was given back already
    }

    @Test
    void a_lost_signal_copy_completed_by_the_caller_changes_nothing() {
        Dlock a = client();
        Lease lease = a.lock(key()).acquire();
        assertTrue(lease.lost().complete(null));
        assertFalse(lease.isLost());
        assertFalse(lease.lost().isDone());
        assertTrue(lease.release());
    }

    @Test
    void a_session_bound_lease_lives_on_its_connection_until_released_or_closed() throws Exception {
        String app = app("bound");
        Dlock a = client(b -> b.property("ApplicationName", app));
        Dlock b = client();
        Lease bound = a.lock(key()).sessionBound().acquire();
        assertTrue(bound.sessionBound());
        assertEquals(Boolean.TRUE, scalar("SELECT NOT isfinite(expires_at) FROM dlock.dlock_locks WHERE key = ?", key()));
        assertEquals(Optional.empty(), bound.renew());
        assertTrue(bound.holds());
        assertTrue(bound.release());
        Lease again = a.lock(key()).sessionBound().acquire();
        assertTrue(again.fence() > bound.fence());
        Thread waiter = new Thread(() -> b.lock(key()).waitAtMost(Duration.ofSeconds(20)).acquire().release());
        waiter.start();
        a.close();
        waiter.join(20_000);
        assertFalse(waiter.isAlive(), "closing the client ended the lease");
    }

    @Test
    void readers_share_a_key_and_keep_a_writer_out() throws Exception {
        Dlock r1 = client();
        Dlock r2 = client();
        Dlock w = client();
        Lease s1 = r1.lock(key()).shared().acquire();
        Lease s2 = r2.lock(key()).shared().acquire();
        assertTrue(s2.fence() > s1.fence());
        assertEquals(2, count("SELECT count(*) FROM dlock.dlock_locks WHERE key = ? AND mode = 'shared'", key()));
        assertEquals(Optional.empty(), w.lock(key()).tryAcquire());
        s1.release();
        s2.release();
        Lease writer = w.lock(key()).acquire();
        ModeConflictException conflict = assertThrows(ModeConflictException.class, () -> w.lock(key()).shared().acquire());
        assertEquals("0A000", conflict.sqlState());
        writer.release();
    }

    @Test
    void a_semaphore_grants_its_permits_and_refuses_another_size() {
        Dlock a = client();
        Dlock b = client();
        Dlock c = client();
        Lease pa = a.semaphore(key(), 2).acquire();
        Lease pb = b.semaphore(key(), 2).acquire();
        assertEquals(Optional.empty(), c.semaphore(key(), 2).tryAcquire());
        InvalidArgumentException other = assertThrows(InvalidArgumentException.class, () -> c.semaphore(key(), 3).acquire());
        assertEquals("22023", other.sqlState());
        assertNotEquals("checked by the client before sending", other.detail(), "the server's word");
        pa.release();
        Lease pc = c.semaphore(key(), 2).acquire();
        pb.release();
        pc.release();
    }

    @Test
    void a_multi_key_lock_takes_all_or_none() throws Exception {
        Dlock x = client();
        Dlock y = client();
        MultiLease both = x.lockAll(List.of(key("k1"), key("k2"))).acquire();
        assertEquals(2, both.fences().size());
        assertEquals(List.of(key("k1"), key("k2")), both.keys());
        assertThrows(NotAcquiredException.class, () -> y.lockAll(List.of(key("k2"), key("k3"))).acquire());
        y.lock(key("k3")).acquire().release(); // nothing of the refused request is held
        assertTrue(both.holds());
        assertTrue(both.renew().isPresent());
        assertTrue(both.release());
        MultiLease later = y.lockAll(List.of(key("k2"), key("k1"))).acquire();
        assertTrue(later.fences().get(1) > both.fences().get(0));
        later.release();
        assertEquals(0, count("SELECT count(*) FROM dlock.dlock_locks WHERE key LIKE ?", key("k") + "%"));
    }

    @Test
    void the_server_refuses_a_ttl_above_its_max_ttl_and_nothing_changes() throws Exception {
        Dlock a = client();
        InvalidArgumentException e = assertThrows(InvalidArgumentException.class,
                () -> a.lock(key()).ttl(Duration.ofHours(25)).acquire());
        assertEquals("22023", e.sqlState());
        assertEquals(0, count("SELECT count(*) FROM dlock.dlock_locks WHERE key = ?", key()));
    }

    @Test
    void a_plain_role_may_not_force_a_release() throws Exception {
        try (Statement s = admin.createStatement()) {
            s.execute("DO $$BEGIN CREATE ROLE dlock_java_plain LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END$$");
            s.execute("GRANT USAGE ON SCHEMA dlock TO dlock_java_plain");
        }
        String url = URL.replace("user=postgres", "user=dlock_java_plain");
        Dlock asPlain = closing(Dlock.connect(url));
        PermissionDeniedException e = assertThrows(PermissionDeniedException.class, () -> asPlain.forceRelease(key()));
        assertEquals("42501", e.sqlState());
    }

    @Test
    void a_database_without_the_extension_is_named_in_the_error() throws Exception {
        try (Statement s = admin.createStatement()) {
            s.execute("SELECT 1 FROM pg_database WHERE datname = 'dlock_java_bare'");
            try (var rows = s.getResultSet()) {
                if (!rows.next()) {
                    s.execute("CREATE DATABASE dlock_java_bare");
                }
            }
        }
        Dlock bare = closing(Dlock.connect(URL.replaceFirst("/postgres\\?", "/dlock_java_bare?")));
        NotInstalledException e = assertThrows(NotInstalledException.class, () -> bare.lock(key()).acquire());
        assertTrue(e.getMessage().contains("dlock_java_bare"), e.getMessage());
    }

    @Test
    void the_watchdog_runs_on_the_applications_scheduler() throws Exception {
        ScheduledThreadPoolExecutor timers = new ScheduledThreadPoolExecutor(1);
        try {
            Dlock a = client(b -> b.scheduler(timers));
            Lease lease = a.lock(key()).ttl(Duration.ofMillis(600)).acquire();
            Thread.sleep(1500);
            assertTrue(timers.getCompletedTaskCount() >= 2, "its timers ran there");
            assertTrue(lease.holds());
            assertTrue(lease.release());
            a.close();
            assertFalse(timers.isShutdown(), "the client never shuts the application's scheduler down");
        } finally {
            timers.shutdownNow();
        }
    }

    @Test
    void closing_the_client_releases_what_it_holds() throws Exception {
        Dlock a = client();
        a.lock(key("one")).acquire();
        a.lockAll(List.of(key("two"), key("three"))).acquire();
        a.withOwner(a.owner() + "-copy").lock(key("four")).acquire();
        assertEquals(4, count("SELECT count(*) FROM dlock.dlock_locks WHERE key LIKE ?", key("") + "%"));
        a.close();
        assertEquals(0, count("SELECT count(*) FROM dlock.dlock_locks WHERE key LIKE ?", key("") + "%"));
    }
}

package dev.dlock.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.zaxxer.hikari.HikariDataSource;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/** Behind pgbouncer in transaction mode ({@code DLOCK_TEST_PGBOUNCER_JDBC_URL}, 4 server connections). */
class PgbouncerTest extends ServerTest {
    static final String PGBOUNCER = required("DLOCK_TEST_PGBOUNCER_JDBC_URL");

    private Dlock behindPgbouncer() {
        return closing(Dlock.builder(PGBOUNCER).pooler(Pooler.TRANSACTION).poolSize(2).build());
    }

    @Test
    void renewals_and_waits_get_through_the_pooler() throws Exception {
        Dlock a = behindPgbouncer();
        Dlock b = behindPgbouncer();
        assertEquals(Pooler.TRANSACTION, a.pooler());
        Lease held = a.lock(key()).ttl(Duration.ofMillis(1200)).acquire();
        Thread.sleep(3000);
        assertFalse(held.isLost(), "the watchdog's renewals got through");
        CompletableFuture<Lease> waiter = async(() -> b.lock(key()).waitAtMost(Duration.ofSeconds(20)).acquire());
        Thread.sleep(300);
        held.release();
        Lease next = waiter.get(5, TimeUnit.SECONDS);
        assertTrue(next.fence() > held.fence());
        CompletableFuture<Boolean> free = async(() -> a.waitFree(key(), Duration.ofSeconds(20)));
        Thread.sleep(300);
        next.release();
        assertTrue(free.get(5, TimeUnit.SECONDS));
    }

    @Test
    void nothing_is_prepared_on_the_servers_connections() {
        // pgjdbc prepares a statement on the server from its fifth use on; through a transaction
        // pooler the next use lands on another server connection, where it does not exist.
        // A Hikari pool of one, and a second client churning pgbouncer's four server connections.
        HikariDataSource pool = hikari(PGBOUNCER, 1, app("prepared"));
        Dlock a = closing(Dlock.builder(pool).pooler(Pooler.TRANSACTION).build());
        Dlock churn = behindPgbouncer();
        List<CompletableFuture<Void>> others = new ArrayList<>();
        for (int t = 0; t < 2; t++) {
            int n = t;
            others.add(async(() -> {
                for (int i = 0; i < 40; i++) {
                    churn.lock(key("churn" + n) + i).acquire().release();
                }
                return null;
            }));
        }
        for (int i = 0; i < 40; i++) {
            Lease lease = a.lock(key()).acquire();
            assertTrue(lease.holds());
            assertTrue(lease.release());
        }
        others.forEach(CompletableFuture::join);
    }

    @Test
    void what_needs_a_session_of_its_own_is_refused() {
        Dlock a = behindPgbouncer();
        assertThrows(UnsupportedOperationException.class, () -> a.lock(key()).sessionBound().acquire());
        assertThrows(UnsupportedOperationException.class, () -> a.election(key()).observe(leader -> { }));
        Leadership lead = a.election(key()).campaign("behind-pgbouncer");
        assertEquals("behind-pgbouncer", a.election(key()).leader().orElseThrow().info());
        assertTrue(lead.resign());
    }

    @Test
    void a_multi_key_wait_retries_through_the_pooler() throws Exception {
        Dlock a = behindPgbouncer();
        Dlock b = behindPgbouncer();
        MultiLease all = a.lockAll(List.of(key("m1"), key("m2"))).acquire();
        CompletableFuture<MultiLease> waiter = async(
                () -> b.lockAll(List.of(key("m2"), key("m1"))).waitAtMost(Duration.ofSeconds(20)).acquire());
        Thread.sleep(300);
        assertEquals(0, count("SELECT coalesce(sum(waiters), 0) FROM dlock.dlock_locks WHERE key LIKE ?", key("m") + "%"),
                "it waits holding no server connection");
        all.release();
        assertEquals(2, waiter.get(5, TimeUnit.SECONDS).fences().size());
    }
}

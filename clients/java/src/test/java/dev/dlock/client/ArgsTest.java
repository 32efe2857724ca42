package dev.dlock.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.function.Executable;

/**
 * Bad arguments are refused before any round trip: the client here points at a port where nothing
 * listens, so anything that reached for the server would fail with ConnectionFailedException
 * instead of the argument's own error.
 */
class ArgsTest {
    private final Dlock offline = Dlock.builder("jdbc:postgresql://127.0.0.1:1/postgres?connectTimeout=2").build();

    @AfterEach
    void close() {
        offline.close();
    }

    private static void refused(String sqlState, Executable call) {
        InvalidArgumentException e = assertThrows(InvalidArgumentException.class, call);
        assertEquals(sqlState, e.sqlState());
        assertTrue(e instanceof IllegalArgumentException);
    }

    @Test
    void keys_are_limited_in_bytes_not_characters() {
        refused("22023", () -> offline.lock("k".repeat(1025)));
        refused("22023", () -> offline.lock("é".repeat(513))); // 1026 bytes in 513 characters
        refused("22023", () -> offline.lock(""));
        // The limit itself, and 4-byte characters counted as 4.
        assertEquals(1024, offline.lock("é".repeat(512)).key().length() * 2);
        offline.lock("😀".repeat(256));
        refused("22023", () -> offline.lock("😀".repeat(256) + "x"));
    }

    @Test
    void text_postgresql_cannot_store_is_22021() {
        refused("22021", () -> offline.lock("a\u0000b"));
        refused("22021", () -> offline.lock("lone \ud800 surrogate"));
    }

    @Test
    void a_missing_key_is_a_null_pointer() {
        assertThrows(NullPointerException.class, () -> offline.lock(null));
        assertThrows(NullPointerException.class, () -> offline.lockAll(null));
        assertThrows(NullPointerException.class, () -> offline.lock("k").ttl(null));
    }

    @Test
    void durations_are_checked_where_they_are_given() {
        refused("22023", () -> offline.lock("k").ttl(Duration.ZERO));
        refused("22023", () -> offline.lock("k").ttl(Duration.ofMillis(-5)));
        refused("22023", () -> offline.lock("k").ttl(Duration.ofNanos(999)));
        refused("22023", () -> offline.lock("k").waitAtMost(Duration.ofMillis(-1)));
        refused("22023", () -> offline.lock("k").lockDelay(Duration.ofSeconds(-1)));
        refused("22023", () -> offline.lock("k").renewEvery(Duration.ZERO));
        refused("22023", () -> offline.election("e").ttl(Duration.ZERO));
        refused("22023", () -> offline.waitFree("k", Duration.ofMillis(-1)));
        offline.lock("k").ttl(Duration.ofNanos(1000)).waitAtMost(Duration.ZERO);
    }

    @Test
    void a_semaphore_needs_a_permit() {
        refused("22023", () -> offline.semaphore("k", 0));
        refused("22023", () -> offline.semaphore("k", -3));
    }

    @Test
    void multi_key_locks_take_one_to_64_distinct_keys() {
        refused("22023", () -> offline.lockAll(List.of()));
        refused("22023", () -> offline.lockAll(List.of("a", "a")));
        refused("22023", () -> offline.lockAll(List.of("a", "")));
        List<String> many = new ArrayList<>();
        for (int i = 0; i < 65; i++) {
            many.add("k" + i);
        }
        refused("22023", () -> offline.lockAll(many));
        assertEquals(64, offline.lockAll(many.subList(0, 64)).keys().size());
        List<String> withNull = new ArrayList<>(List.of("a"));
        withNull.add(null);
        assertThrows(NullPointerException.class, () -> offline.lockAll(withNull));
    }

    @Test
    void elections_check_their_name_and_info() {
        refused("22023", () -> offline.election(""));
        refused("22023", () -> offline.election("e").campaign("i".repeat(1025)));
        refused("22023", () -> offline.waitFree("", Duration.ofMillis(100)));
        refused("22023", () -> offline.forceRelease(""));
    }

    @Test
    void owners_are_checked_when_the_client_is_configured() {
        refused("22023", () -> Dlock.builder("jdbc:postgresql://127.0.0.1:1/postgres").owner("o".repeat(257)));
        refused("22023", () -> offline.withOwner(""));
        assertThrows(IllegalArgumentException.class, () -> Dlock.builder("jdbc:mysql://db/x"));
        assertThrows(IllegalArgumentException.class, () -> Dlock.builder("jdbc:postgresql://db/x").poolSize(0));
    }

    @Test
    void the_generated_owner_is_host_pid_random_and_fits() {
        String owner = offline.owner();
        String[] parts = owner.split(":");
        assertEquals(Long.toString(ProcessHandle.current().pid()), parts[parts.length - 2]);
        assertEquals(32, parts[parts.length - 1].length());
        assertTrue(owner.getBytes(java.nio.charset.StandardCharsets.UTF_8).length <= Args.MAX_OWNER_BYTES);
    }

    @Test
    void the_first_real_call_of_an_unreachable_client_fails_as_a_connection_failure() {
        ConnectionFailedException e = assertThrows(ConnectionFailedException.class, () -> offline.lock("k").tryAcquire());
        assertTrue(e.sqlState() == null || e.sqlState().startsWith("08"), e.sqlState());
    }

    @Test
    void huge_durations_are_clamped_not_wrapped() {
        assertEquals(Args.MAX_SECONDS, Args.seconds(Duration.ofSeconds(Long.MAX_VALUE)));
        assertEquals(1.5, Args.seconds(Duration.ofMillis(1500)));
    }
}

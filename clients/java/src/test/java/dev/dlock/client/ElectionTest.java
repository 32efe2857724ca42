package dev.dlock.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.Optional;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/** Elections: one leader at a time, growing terms, who leads, hand-over, observers. */
class ElectionTest extends ServerTest {
    /** The next leader the observer was given within 10 s. */
    private static Optional<Leader> next(BlockingQueue<Optional<Leader>> changes) throws InterruptedException {
        Optional<Leader> leader = changes.poll(10, TimeUnit.SECONDS);
        if (leader == null) {
            throw new AssertionError("no change of leader within 10 s");
        }
        return leader;
    }

    @Test
    void one_leader_at_a_time_and_a_waiting_candidate_takes_over_on_resignation() throws Exception {
        Dlock a = client();
        Dlock b = client();
        Election election = a.election(key());
        assertEquals(Optional.empty(), election.leader());
        Leadership lead = election.campaign("node-a");
        assertTrue(lead.term() > 0);
        Leader shown = b.election(key()).leader().orElseThrow();
        assertEquals("node-a", shown.info());
        assertEquals(lead.term(), shown.term());
        assertThrows(NotAcquiredException.class, () -> b.election(key()).waitAtMost(Duration.ZERO).campaign("node-b"));
        CompletableFuture<Leadership> candidate = async(() -> b.election(key()).campaign("node-b"));
        Thread.sleep(200);
        assertFalse(candidate.isDone());
        assertTrue(lead.resign());
        Leadership next = candidate.get(10, TimeUnit.SECONDS);
        assertTrue(next.term() > lead.term(), "terms only grow");
        assertEquals("node-b", a.election(key()).leader().orElseThrow().info());
        next.close();
        assertEquals(Optional.empty(), a.election(key()).leader());
    }

    @Test
    void an_observer_is_told_the_leader_now_and_every_change() throws Exception {
        Dlock a = client();
        Dlock watcher = client();
        BlockingQueue<Optional<Leader>> changes = new LinkedBlockingQueue<>();
        try (LeaderObserver observer = watcher.election(key()).observe(changes::add)) {
            assertEquals(Optional.empty(), next(changes), "nobody leads yet");
            Leadership lead = a.election(key()).campaign("node-a");
            Optional<Leader> seen = next(changes);
            assertEquals("node-a", seen.orElseThrow().info());
            assertEquals(lead.term(), seen.get().term());
            lead.resign();
            assertEquals(Optional.empty(), next(changes), "the resignation is notified");
            assertEquals(key(), observer.election());
        }
    }

    @Test
    void a_deposed_leader_is_told_and_its_term_no_longer_holds() throws Exception {
        Dlock a = client();
        Leadership lead = a.election(key()).ttl(Duration.ofSeconds(3)).campaign(null);
        assertTrue(lead.holds());
        assertTrue(a.forceRelease(key()));
        lead.lost().get(5, TimeUnit.SECONDS);
        assertFalse(lead.isLeading());
        assertFalse(lead.holds());
        assertThrows(LeaseLostException.class, lead::close);
    }

    @Test
    void an_observer_that_throws_keeps_observing() throws Exception {
        Dlock a = client();
        Dlock watcher = client();
        BlockingQueue<Optional<Leader>> changes = new LinkedBlockingQueue<>();
        try (LeaderObserver observer = watcher.election(key()).observe(leader -> {
            changes.add(leader);
            throw new IllegalStateException("the application's bug");
        })) {
            assertEquals(Optional.empty(), next(changes));
            Leadership lead = a.election(key()).campaign("x");
            assertEquals("x", next(changes).orElseThrow().info(), "still observing after the observer threw");
            lead.resign();
            assertEquals(Optional.empty(), next(changes));
            assertEquals(key(), observer.election());
        }
    }
}

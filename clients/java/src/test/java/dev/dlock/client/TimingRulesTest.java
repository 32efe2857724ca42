package dev.dlock.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.dlock.client.renewal.Schedule;
import dev.dlock.client.waiting.Backoff;
import org.junit.jupiter.api.Test;

/** The rules of the watchdog's schedule and of the pauses between tries, on given clock readings. */
class TimingRulesTest {
    private static final long MS = 1_000_000L;

    @Test
    void the_watchdog_renews_every_third_and_loses_the_lease_at_its_deadline() {
        // ttl 3 s, granted at 0 (the server took 10 ms), renewals every 1 s.
        Schedule s = new Schedule(3000 * MS, 3010 * MS, 1000 * MS, 0);
        assertEquals(1000 * MS, s.nextWake());
        assertEquals(Schedule.Due.SLEEP, s.due(999 * MS));
        assertEquals(Schedule.Due.RENEW, s.due(1000 * MS));
        // While a renewal is on its way the next look is the deadline, and nothing is asked twice.
        assertEquals(3010 * MS, s.nextWake());
        assertEquals(Schedule.Due.SLEEP, s.due(2000 * MS));
        assertEquals(Schedule.Due.LOST, s.due(3010 * MS));
    }

    @Test
    void a_renewal_moves_the_deadline_from_when_it_was_sent() {
        Schedule s = new Schedule(3000 * MS, 3000 * MS, 1000 * MS, 0);
        s.due(1000 * MS);
        s.renewed(1000 * MS, 1200 * MS);
        assertEquals(4000 * MS, s.deadline(), "sent + ttl, not answered + ttl");
        assertEquals(2200 * MS, s.nextWake());
        // A renewal by hand that was sent earlier never moves the deadline back.
        s.extended(500 * MS);
        assertEquals(4000 * MS, s.deadline());
    }

    @Test
    void a_failed_renewal_is_retried_sooner() {
        Schedule s = new Schedule(3000 * MS, 3000 * MS, 1000 * MS, 0);
        s.due(1000 * MS);
        s.retrySoon(1100 * MS);
        assertEquals(1350 * MS, s.nextWake());
        assertEquals(Schedule.Due.RENEW, s.due(1350 * MS));
    }

    @Test
    void without_renewals_a_lease_only_runs_out() {
        Schedule s = new Schedule(1000 * MS, 1000 * MS, 0, 0);
        assertEquals(1000 * MS, s.nextWake());
        assertEquals(Schedule.Due.SLEEP, s.due(999 * MS));
        assertEquals(Schedule.Due.LOST, s.due(1000 * MS));
    }

    @Test
    void pauses_double_up_to_the_maximum_with_a_random_half() {
        Backoff b = new Backoff(250 * MS);
        assertEquals(5 * MS, b.pause(null, 0.0));
        assertEquals(20 * MS, b.pause(null, 1.0));
        assertEquals(30 * MS, b.pause(null, 0.5));
        b.pause(null, 1.0);
        b.pause(null, 1.0);
        assertEquals(250 * MS, b.pause(null, 1.0));
        assertEquals(250 * MS, b.pause(null, 1.0), "never past the maximum");
    }

    @Test
    void pauses_end_at_the_blocking_leases_expiry_but_never_hammer() {
        Backoff b = new Backoff(250 * MS);
        b.pause(null, 1.0);
        b.pause(null, 1.0);
        b.pause(null, 1.0);
        assertEquals(50 * MS, b.pause(0.05, 1.0));
        assertEquals(Backoff.FIRST_PAUSE_NANOS, b.pause(0.0, 1.0), "a key a transaction keeps busy");
        assertTrue(b.pause(10.0, 1.0) <= 250 * MS);
    }
}

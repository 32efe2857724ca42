package dev.dlock.client.renewal;

/**
 * The deadline and the renewals of one TTL lease, on the monotonic clock
 * ({@link System#nanoTime()}); not thread-safe (the watchdog guards it).
 *
 * <p>The local deadline is never later than the server's expiry: a grant or renewal answered to
 * a statement sent at {@code sent} happened after {@code sent}, so {@code sent + ttl} (plus the
 * time the server itself took to grant, which it reports) is no later than what the server set.
 * Client and server clocks are never compared.
 */
public final class Schedule {
    /** Shortest pause before retrying a renewal that failed on a connection error. */
    static final long MIN_RETRY_NANOS = 10_000_000L;

    /** What the watchdog does when it wakes. */
    public enum Due {
        /** Nothing yet. */
        SLEEP,
        /** Renew now (the renewal counts as started). */
        RENEW,
        /** The deadline passed: the lease is lost. */
        LOST
    }

    private final long ttl;
    private final long renewEvery;
    private long deadline;
    private long nextRenewal;
    private boolean renewing;

    /**
     * A schedule.
     *
     * @param ttlNanos the lease's ttl
     * @param deadline the local deadline of its grant
     * @param renewEveryNanos how often to renew, or 0 for never (no watchdog: it only runs out)
     * @param now the current time
     */
    public Schedule(long ttlNanos, long deadline, long renewEveryNanos, long now) {
        this.ttl = ttlNanos;
        this.deadline = deadline;
        this.renewEvery = renewEveryNanos;
        this.nextRenewal = now + renewEveryNanos;
    }

    /**
     * The local deadline.
     *
     * @return a {@link System#nanoTime()} reading
     */
    public long deadline() {
        return deadline;
    }

    /**
     * When to look again: the next renewal, or the deadline if sooner (or if a renewal is already
     * on its way, whose answer is useless after the deadline).
     *
     * @return a {@link System#nanoTime()} reading
     */
    public long nextWake() {
        if (renewEvery == 0 || renewing || nextRenewal - deadline > 0) {
            return deadline;
        }
        return nextRenewal;
    }

    /**
     * What to do at {@code now}; a renewal it asks for counts as started.
     *
     * @param now the current time
     * @return sleep, renew or lost
     */
    public Due due(long now) {
        if (now - deadline >= 0) {
            return Due.LOST;
        }
        if (renewEvery != 0 && !renewing && now - nextRenewal >= 0) {
            renewing = true;
            return Due.RENEW;
        }
        return Due.SLEEP;
    }

    /**
     * A renewal sent at {@code sent} was answered with a new expiry (the watchdog's, or one made by hand).
     *
     * @param sent when it was sent
     */
    public void extended(long sent) {
        long renewed = sent + ttl;
        if (renewed - deadline > 0) {
            deadline = renewed;
        }
    }

    /**
     * The watchdog's renewal, sent at {@code sent}, succeeded at {@code now}.
     *
     * @param sent when it was sent
     * @param now when it was answered
     */
    public void renewed(long sent, long now) {
        extended(sent);
        renewing = false;
        nextRenewal = now + renewEvery;
    }

    /**
     * The watchdog's renewal failed on a connection error: the connection may come back before
     * the deadline, so retry sooner than usual.
     *
     * @param now the current time
     */
    public void retrySoon(long now) {
        renewing = false;
        nextRenewal = now + Math.max(renewEvery / 4, MIN_RETRY_NANOS);
    }
}

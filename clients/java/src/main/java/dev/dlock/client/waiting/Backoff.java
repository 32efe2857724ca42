package dev.dlock.client.waiting;

import java.util.concurrent.ThreadLocalRandom;

/**
 * Growing pauses between the tries of a wait that no notification can wake (behind a
 * transaction pooler), as the Rust client's {@code waiting/polling.rs}: from 10 ms, doubling up to
 * the client's maximum, each with a random half so that the waiters of many clients spread out,
 * and never past the blocking lease's expiry, which the server tells.
 */
public final class Backoff {
    /** The first pause after a busy answer. */
    public static final long FIRST_PAUSE_NANOS = 10_000_000L;
    /** The longest pause unless the client says otherwise: how late a waiter may notice a release,
     *  against how many tries per second a waiting key costs the server. */
    public static final long DEFAULT_MAX_NANOS = 250_000_000L;

    private final long max;
    private long step = FIRST_PAUSE_NANOS;

    /**
     * The pauses of one wait.
     *
     * @param maxNanos the longest pause
     */
    public Backoff(long maxNanos) {
        this.max = Math.max(maxNanos, FIRST_PAUSE_NANOS);
    }

    /**
     * The next pause: between half the current step and all of it, and no later than
     * {@code retryAfterSeconds}, though never below the first pause, so that a key a transaction
     * keeps busy (retry after 0) is not hammered.
     *
     * @param retryAfterSeconds the server's word on when the blocking lease runs out, or null
     * @return the pause in nanoseconds
     */
    public long pause(Double retryAfterSeconds) {
        return pause(retryAfterSeconds, ThreadLocalRandom.current().nextDouble());
    }

    /**
     * {@link #pause(Double)} with the random draw given (in [0, 1)), for tests.
     *
     * @param retryAfterSeconds when the blocking lease runs out, or null
     * @param random where between half the step and all of it
     * @return the pause in nanoseconds
     */
    public long pause(Double retryAfterSeconds, double random) {
        long current = step;
        step = Math.min(step * 2, max);
        double r = Math.min(Math.max(random, 0.0), 1.0);
        long pause = (long) (current / 2.0 + current / 2.0 * r);
        if (retryAfterSeconds != null) {
            pause = Math.min(pause, Math.max((long) (retryAfterSeconds * 1e9), FIRST_PAUSE_NANOS));
        }
        return pause;
    }
}

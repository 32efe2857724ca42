package dev.dlock.client.waiting;

import java.time.Duration;

/** When a wait ends, on the monotonic clock ({@link System#nanoTime()}), or never. */
public final class Deadline {
    /** Longer waits are taken as this (about 146 years): nanoTime differences never overflow. */
    static final long MAX_NANOS = 1L << 62;

    private static final Deadline NEVER = new Deadline(0, false);

    private final long at;
    private final boolean limited;

    private Deadline(long at, boolean limited) {
        this.at = at;
        this.limited = limited;
    }

    /**
     * The deadline {@code wait} from now.
     *
     * @param wait how long (not negative)
     * @return the deadline
     */
    public static Deadline after(Duration wait) {
        return new Deadline(System.nanoTime() + nanos(wait), true);
    }

    /**
     * No deadline: a wait without limit.
     *
     * @return the deadline that never passes
     */
    public static Deadline never() {
        return NEVER;
    }

    /**
     * A duration in nanoseconds, clamped to what deadlines can hold.
     *
     * @param duration a duration, not negative
     * @return its nanoseconds, at most about 146 years
     */
    public static long nanos(Duration duration) {
        if (duration.getSeconds() >= MAX_NANOS / 1_000_000_000L) {
            return MAX_NANOS;
        }
        return Math.min(duration.toNanos(), MAX_NANOS);
    }

    /**
     * Whether the wait has a limit.
     *
     * @return false for {@link #never()}
     */
    public boolean limited() {
        return limited;
    }

    /**
     * Nanoseconds left, never negative; {@link Long#MAX_VALUE} without a limit.
     *
     * @return what remains
     */
    public long remainingNanos() {
        return limited ? Math.max(at - System.nanoTime(), 0) : Long.MAX_VALUE;
    }

    /**
     * Whether the deadline has passed.
     *
     * @return true once no time remains
     */
    public boolean passed() {
        return limited && at - System.nanoTime() <= 0;
    }

    /**
     * Seconds left, as the server takes a wait; {@code null} without a limit.
     *
     * @return what remains, or null
     */
    public Double remainingSeconds() {
        return limited ? remainingNanos() / 1e9 : null;
    }

    /**
     * {@code pause} nanoseconds, shortened to what remains.
     *
     * @param pause a pause
     * @return the pause, at most the time left
     */
    public long cap(long pause) {
        return Math.min(pause, remainingNanos());
    }
}

package dev.dlock.client.waiting;

/**
 * What one try answered: a grant, or that the key is busy, with how long until the blocking lease
 * expires by itself (the server's word, so client clocks do not matter).
 *
 * @param granted what the try took, or {@code null} when the key was busy
 * @param retryAfterSeconds seconds until the blocking lease runs out, or {@code null} when only a
 *     release (or its holder's session ending) frees the key
 * @param <T> what a grant gives
 */
public record Tried<T>(T granted, Double retryAfterSeconds) {
    /**
     * A grant.
     *
     * @param value what was taken
     * @param <T> its type
     * @return the answer
     */
    public static <T> Tried<T> grant(T value) {
        return new Tried<>(value, null);
    }

    /**
     * A busy key.
     *
     * @param retryAfterSeconds when to try again, or {@code null}
     * @param <T> what a grant would give
     * @return the answer
     */
    public static <T> Tried<T> busy(Double retryAfterSeconds) {
        return new Tried<>(null, retryAfterSeconds == null ? null : Math.max(retryAfterSeconds, 0.0));
    }

    /**
     * Whether the try took the key.
     *
     * @return true for a grant
     */
    public boolean isGrant() {
        return granted != null;
    }
}

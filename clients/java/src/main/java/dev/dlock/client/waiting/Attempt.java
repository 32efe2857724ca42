package dev.dlock.client.waiting;

/**
 * One try of what a wait waits for.
 *
 * @param <T> what a grant gives
 */
@FunctionalInterface
public interface Attempt<T> {
    /**
     * Tries once, never queueing on the server.
     *
     * @param settleSeconds how long the try may wait on the server for a transaction that is
     *     changing the key ({@code null}: no limit; 0 behind a transaction pooler)
     * @return a grant, or busy with when to try again
     */
    Tried<T> attempt(Double settleSeconds);
}

package dev.dlock.client.renewal;

/** What the watchdog needs of a lease. */
public interface Renewable {
    /** The answer of one renewal. */
    enum Outcome {
        /** The lease has a new expiry. */
        RENEWED,
        /** The lease is no longer ours. */
        GONE,
        /** No answer (the connection failed): try again before the deadline. */
        UNREACHABLE
    }

    /**
     * Renews once, now.
     *
     * @return what the server answered
     */
    Outcome renewNow();

    /**
     * Tells the lease's holder it is lost.
     *
     * @param reason why, for the log
     */
    void lost(String reason);
}

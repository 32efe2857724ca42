package dev.dlock.client;

import java.time.Instant;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;

/**
 * The lead of an election, kept by the watchdog until resigned. Closed by try-with-resources it
 * resigns, throwing {@link LeaseLostException} if the lead was lost before.
 */
public final class Leadership implements AutoCloseable {
    private final Lease lease;

    Leadership(Lease lease) {
        this.lease = lease;
    }

    /**
     * The election's name.
     *
     * @return the name
     */
    public String election() {
        return lease.key();
    }

    /**
     * The term: greater than every earlier leader's. Pass it with every write made as leader
     * ({@code dlock_holds(election, term)}), so that a deposed leader's are refused.
     *
     * @return the term
     */
    public long term() {
        return lease.fence();
    }

    /**
     * Completes when the lead is lost while still wanted: stop acting as leader.
     *
     * @return the lost signal (a new copy each call)
     */
    public CompletableFuture<Void> lost() {
        return lease.lost();
    }

    /**
     * Whether this process still leads as far as it knows (without asking the server).
     *
     * @return true while leading
     */
    public boolean isLeading() {
        return lease.isHeld();
    }

    /**
     * Renews the lead now.
     *
     * @return the new expiry (server clock)
     * @throws LeaseLostException if the lead was lost
     */
    public Optional<Instant> renew() {
        return lease.renew();
    }

    /**
     * Whether the server still shows this term as the lead ({@code dlock_holds}).
     *
     * @return true if it does
     */
    public boolean holds() {
        return lease.holds();
    }

    /**
     * Gives up the lead now, so that the next candidate takes over at once.
     *
     * @return true if it was still ours
     */
    public boolean resign() {
        return lease.release();
    }

    /**
     * Resigns, unless resigned by hand already.
     *
     * @throws LeaseLostException if the lead was lost before
     */
    @Override
    public void close() {
        lease.close();
    }

    @Override
    public String toString() {
        return "Leadership[election=" + election() + ", term=" + term() + ", leading=" + isLeading() + "]";
    }
}

package dev.dlock.client;

import dev.dlock.client.renewal.Renewable;
import dev.dlock.client.renewal.Schedule;
import dev.dlock.client.renewal.Watchdog;
import dev.dlock.client.sql.Statements;
import dev.dlock.client.waiting.Deadline;
import java.lang.System.Logger.Level;
import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.time.Duration;
import java.time.Instant;
import java.time.OffsetDateTime;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * A held lock: one hold of a lease. A reentrant acquire by the same owner gives another
 * {@code Lease} with the same fence and one more hold; the key is free once every one has let go.
 *
 * <p>While it is held, the client's watchdog renews it every third of its ttl; {@link #lost()}
 * completes if it is lost anyway (a renewal answered that it is no longer ours, or no renewal got
 * through before its ttl ran out by the local clock, which is never later than the server's).
 * Closed by try-with-resources it is released, and {@link #close()} throws
 * {@link LeaseLostException} if the lease was lost before: whatever the block did may have
 * overlapped another holder's work.
 */
public class Lease implements AutoCloseable {
    final Core core;
    final Statements statements;
    final String owner;
    private final String key;
    private final long fence;
    /** The ttl in seconds, or {@code null} for a session-bound lease. */
    final Double ttlSeconds;
    private final CompletableFuture<Void> lost = new CompletableFuture<>();
    private final AtomicBoolean released = new AtomicBoolean();
    private volatile boolean ended;
    private volatile Watchdog.Watch watch;
    private volatile Instant expiresAt;
    /** The connection a session-bound lease lives on, kept out of the pool while it is held. */
    private Connection session;

    Lease(Core core, Statements statements, String owner, String key, long fence, Double ttlSeconds, Connection session) {
        this.core = core;
        this.statements = statements;
        this.owner = owner;
        this.key = key;
        this.fence = fence;
        this.ttlSeconds = ttlSeconds;
        this.session = session;
    }

    /**
     * Starts keeping the lease: its local deadline, and its watchdog's renewals (every
     * {@code renewEveryNanos}; 0: none, it only runs out).
     */
    void start(long sent, long serverElapsedNanos, Instant serverNow, long renewEveryNanos) {
        core.held.add(this);
        if (ttlSeconds == null) {
            return;
        }
        long ttl = Deadline.nanos(Duration.ofNanos((long) Math.min(ttlSeconds * 1e9, Long.MAX_VALUE)));
        expiresAt = serverNow == null ? null : serverNow.plusNanos(ttl);
        // The server's expiry is its grant time plus the ttl; the grant happened at least
        // `serverElapsedNanos` after `sent`, so this deadline is no later than the server's.
        Schedule schedule = new Schedule(ttl, sent + serverElapsedNanos + ttl, renewEveryNanos, sent);
        watch = core.watchdog.watch(new Renewal(), schedule);
    }

    /**
     * The locked key.
     *
     * @return the key (for a multi-key lease, its keys joined with {@code ", "})
     */
    public String key() {
        return key;
    }

    /**
     * The fence token: larger than any earlier grant's of this key. Pass it with every write the
     * lock protects ({@code ... WHERE dlock_holds(key, fence)}), so that a stale holder's are refused.
     *
     * @return the fence
     */
    public long fence() {
        return fence;
    }

    /**
     * The owner identity the lease is held as.
     *
     * @return the owner string
     */
    public String owner() {
        return owner;
    }

    /**
     * Whether the lease has no ttl and ends with its connection (which it keeps out of the pool).
     *
     * @return true for a session-bound lease
     */
    public boolean sessionBound() {
        return ttlSeconds == null;
    }

    /**
     * When the lease ends unless renewed, as last known (server clock).
     *
     * @return the expiry, or empty for a session-bound lease
     */
    public Optional<Instant> expiresAt() {
        return Optional.ofNullable(expiresAt);
    }

    /**
     * A future that completes (with {@code null}) when the lease is lost while still wanted, and
     * never once it was released. Each call gives a new copy, so completing or cancelling it
     * changes nothing for anyone else. Callbacks ({@code thenRun}) run on the watchdog's thread:
     * keep them short, or use the {@code ...Async} forms. To poll, {@link #isLost()} is cheaper.
     *
     * @return the lost signal
     */
    public CompletableFuture<Void> lost() {
        return lost.copy();
    }

    /** The signal itself, for the client's own callbacks. */
    CompletableFuture<Void> lostSignal() {
        return lost;
    }

    /**
     * Whether the lease was lost (the lost signal completed).
     *
     * @return true once lost
     */
    public boolean isLost() {
        return lost.isDone();
    }

    /**
     * Whether the lease is still ours as far as this process knows, without asking the server:
     * not released, not lost, and its ttl not run out by the local clock.
     *
     * @return true while held
     */
    public boolean isHeld() {
        if (ended || lost.isDone()) {
            return false;
        }
        Watchdog.Watch w = watch;
        return w == null || System.nanoTime() - w.deadline() < 0;
    }

    void markLost(String reason) {
        if (!ended && lost.complete(null)) {
            Core.LOG.log(Level.WARNING, "dlock: lease lost: key={0} fence={1}: {2}", key, Long.toString(fence), reason);
        }
    }

    /**
     * Renews the lease now for another ttl (a session-bound lease is only checked).
     *
     * @return the new expiry (server clock), or empty for a session-bound lease
     * @throws LeaseLostException if it is no longer ours (which also completes {@link #lost()})
     */
    public Optional<Instant> renew() {
        if (ttlSeconds == null) {
            if (!holds()) {
                markLost("the session-bound lease is gone");
                throw new LeaseLostException("the lease on '" + key + "' is gone");
            }
            return Optional.empty();
        }
        long sent = System.nanoTime();
        Instant expiry = renewTtl();
        if (expiry == null) {
            markLost("renewal answered that the lease is no longer ours");
            throw new LeaseLostException("the lease on '" + key + "' is no longer ours");
        }
        Watchdog.Watch w = watch;
        if (w != null) {
            w.extended(sent);
        }
        return Optional.of(expiry);
    }

    /** One renewal through the pool: the new expiry, or {@code null} if no longer ours. */
    Instant renewTtl() {
        Instant expiry = core.connections.one(statements.renew, Lease::instant, key, owner, ttlSeconds);
        if (expiry != null) {
            expiresAt = expiry;
        }
        return expiry;
    }

    static Instant instant(ResultSet rows) throws SQLException {
        if (!rows.next()) {
            return null;
        }
        OffsetDateTime at = rows.getObject(1, OffsetDateTime.class);
        return at == null ? null : at.toInstant();
    }

    /**
     * Asks the server whether the live lease on the key still carries this fence
     * ({@code dlock_holds}). Changes nothing.
     *
     * @return true if it does
     */
    public boolean holds() {
        Connection own;
        synchronized (this) {
            own = session;
            if (own != null) {
                return core.connections.run(own, statements.holds, Connections::bool, key, fence);
            }
        }
        return core.connections.one(statements.holds, Connections::bool, key, fence);
    }

    /**
     * Gives this hold back now.
     *
     * @return true if the lease was still ours; false if it had already ended (expired,
     *     force-released) or was released before (then without a round trip)
     */
    public boolean release() {
        if (!released.compareAndSet(false, true)) {
            return false;
        }
        ended = true;
        Watchdog.Watch w = watch;
        if (w != null) {
            w.forget();
        }
        core.held.remove(this);
        Connection own;
        synchronized (this) {
            own = session;
            session = null;
        }
        if (own == null) {
            return releaseCall();
        }
        boolean broken = false;
        try {
            return core.connections.run(own, statements.release, Connections::bool, key, owner);
        } catch (RuntimeException e) {
            // Not sure the release happened: the session goes, and the lease with it.
            broken = true;
            throw e;
        } finally {
            core.connections.giveBack(own, broken);
        }
    }

    /** The release statement of a lease that has no session of its own. */
    boolean releaseCall() {
        return core.connections.one(statements.release, Connections::bool, key, owner);
    }

    /**
     * Releases the lease (try-with-resources), unless it was released by hand already.
     *
     * @throws LeaseLostException if the lease was lost before it was closed: the work done under
     *     it may have overlapped another holder's
     */
    @Override
    public void close() {
        if (released.get()) {
            return;
        }
        boolean lostDuringWork = !isHeld();
        boolean stillOurs;
        try {
            stillOurs = release();
        } catch (DlockException e) {
            // The work finished while the lease was live as far as we know; it ends by its ttl
            // (or with its session) without us.
            Core.LOG.log(Level.WARNING, "dlock: release of {0} at close failed: {1}", key, e.getMessage());
            stillOurs = true;
        }
        if (lostDuringWork || !stillOurs) {
            throw new LeaseLostException("the lease on '" + key + "' was lost before it was closed");
        }
    }

    @Override
    public String toString() {
        return getClass().getSimpleName() + "[key=" + key + ", fence=" + fence + ", held=" + isHeld() + "]";
    }

    /** What the watchdog sees of this lease. */
    private final class Renewal implements Renewable {
        @Override
        public Outcome renewNow() {
            try {
                return renewTtl() != null ? Outcome.RENEWED : Outcome.GONE;
            } catch (ConnectionFailedException e) {
                Core.LOG.log(Level.DEBUG, "dlock: renewal of {0} failed, retrying: {1}", key, e.getMessage());
                return Outcome.UNREACHABLE;
            } catch (RuntimeException e) {
                Core.LOG.log(Level.WARNING, "dlock: renewal of {0} failed: {1}", key, e.getMessage());
                return Outcome.GONE;
            }
        }

        @Override
        public void lost(String reason) {
            markLost(reason);
        }
    }
}

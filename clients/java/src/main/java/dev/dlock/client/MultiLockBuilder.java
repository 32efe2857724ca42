package dev.dlock.client;

import dev.dlock.client.sql.Statements;
import dev.dlock.client.waiting.Deadline;
import dev.dlock.client.waiting.Tried;
import dev.dlock.client.waiting.Waits;
import java.sql.Array;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.CancellationException;

/**
 * A lock on several keys at once, all or none: {@code dlock.lockAll(List.of("a", "b"))}. The
 * server never holds a subset and takes the keys in one global order, so callers that list the
 * same keys in different orders never deadlock. Immutable, like {@link LockBuilder}.
 *
 * <p>A wait waits in the server's queue, holding one pooled connection for its length; behind a
 * transaction pooler it retries, holding no server connection between tries.
 */
public final class MultiLockBuilder {
    private final Core core;
    private final String owner;
    private final List<String> keys;
    private final Duration ttl;
    private final Duration wait;
    private final boolean watchdog;
    private final Duration renewEvery;
    private final Duration lockDelay;

    MultiLockBuilder(Core core, String owner, List<String> keys) {
        this(core, owner, keys, LockBuilder.DEFAULT_TTL, Duration.ZERO, true, null, Duration.ZERO);
    }

    private MultiLockBuilder(Core core, String owner, List<String> keys, Duration ttl, Duration wait,
            boolean watchdog, Duration renewEvery, Duration lockDelay) {
        this.core = core;
        this.owner = owner;
        this.keys = keys;
        this.ttl = ttl;
        this.wait = wait;
        this.watchdog = watchdog;
        this.renewEvery = renewEvery;
        this.lockDelay = lockDelay;
    }

    /**
     * How long the leases outlive their holder unless renewed.
     *
     * @param ttl positive
     * @return a builder with this ttl
     */
    public MultiLockBuilder ttl(Duration ttl) {
        return new MultiLockBuilder(core, owner, keys, Args.positive("ttl", ttl), wait, watchdog, renewEvery, lockDelay);
    }

    /**
     * How long to wait for every key to be free (zero, the default: one try).
     *
     * @param wait not negative
     * @return a builder with this wait
     */
    public MultiLockBuilder waitAtMost(Duration wait) {
        return new MultiLockBuilder(core, owner, keys, ttl, Args.notNegative("wait", wait), watchdog, renewEvery, lockDelay);
    }

    /**
     * Waits without limit.
     *
     * @return a builder that waits forever
     */
    public MultiLockBuilder waitForever() {
        return new MultiLockBuilder(core, owner, keys, ttl, null, watchdog, renewEvery, lockDelay);
    }

    /**
     * Whether the watchdog renews the leases while held (default true).
     *
     * @param renew false to let them run out
     * @return a builder with this choice
     */
    public MultiLockBuilder watchdog(boolean renew) {
        return new MultiLockBuilder(core, owner, keys, ttl, wait, renew, renewEvery, lockDelay);
    }

    /**
     * How often the watchdog renews (default: a third of the ttl).
     *
     * @param every positive
     * @return a builder with this interval
     */
    public MultiLockBuilder renewEvery(Duration every) {
        return new MultiLockBuilder(core, owner, keys, ttl, wait, watchdog, Args.positive("renewEvery", every), lockDelay);
    }

    /**
     * Should the leases expire rather than be released, keep the keys from new grants this long after.
     *
     * @param delay not negative
     * @return a builder with this lock-delay
     */
    public MultiLockBuilder lockDelay(Duration delay) {
        return new MultiLockBuilder(core, owner, keys, ttl, wait, watchdog, renewEvery, Args.notNegative("lockDelay", delay));
    }

    /**
     * The keys, in the order their fences will come.
     *
     * @return the keys
     */
    public List<String> keys() {
        return keys;
    }

    /**
     * Takes every key.
     *
     * @return the lease of all of them
     * @throws NotAcquiredException when some key stays held (at once, or when the wait ran out)
     */
    public MultiLease acquire() {
        return tryAcquire().orElseThrow(
                () -> new NotAcquiredException(String.join(", ", keys), wait == null || !wait.isZero()));
    }

    /**
     * Takes every key if it can, within the wait.
     *
     * @return the lease, or empty when some key stays held
     */
    public Optional<MultiLease> tryAcquire() {
        Statements statements = core.statements();
        boolean waits = wait == null || !wait.isZero();
        if (waits && core.connections.transactionPooler()) {
            Deadline deadline = wait == null ? Deadline.never() : Deadline.after(wait);
            try {
                return Optional.ofNullable(Waits.retry(deadline, core.waits.maxPollNanos(), settle -> send(statements, 0.0)));
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new CancellationException("dlock: interrupted while waiting for " + String.join(", ", keys));
            }
        }
        return Optional.ofNullable(send(statements, wait == null ? null : Args.seconds(wait)).granted());
    }

    private Tried<MultiLease> send(Statements statements, Double waitSeconds) {
        double ttlSeconds = Args.seconds(ttl);
        long sent = System.nanoTime();
        Acquisition.Answer[] answer = new Acquisition.Answer[1];
        List<Long> fences = core.connections.one(statements.acquireAll, rows -> read(rows, answer),
                keys.toArray(String[]::new), owner, ttlSeconds, waitSeconds, Args.seconds(lockDelay));
        if (fences == null) {
            return Tried.busy(null);
        }
        MultiLease lease = new MultiLease(core, statements, owner, keys, fences, ttlSeconds);
        long every = 0;
        if (watchdog) {
            every = renewEvery != null ? Deadline.nanos(renewEvery) : Deadline.nanos(ttl) / 3;
        }
        lease.start(sent, answer[0].serverElapsedNanos(), answer[0].serverClock(), every);
        return Tried.grant(lease);
    }

    private static List<Long> read(ResultSet rows, Acquisition.Answer[] answer) throws SQLException {
        if (!rows.next()) {
            return null;
        }
        Array array = rows.getArray(1);
        answer[0] = new Acquisition.Answer(null, rows.getDouble(2), rows.getDouble(3), null);
        if (array == null) {
            return null;
        }
        List<Long> fences = new ArrayList<>();
        for (Object fence : (Object[]) array.getArray()) {
            fences.add(((Number) fence).longValue());
        }
        return fences;
    }
}

package dev.dlock.client;

import dev.dlock.client.waiting.Deadline;
import java.time.Duration;
import java.util.Optional;

/**
 * A lock being described: {@code dlock.lock("k").ttl(Duration.ofSeconds(30)).waitAtMost(...)}.
 * Nothing happens until {@link #acquire()} or {@link #tryAcquire()}. Immutable: every setter
 * gives a new builder, so one may be kept in a field and acquired from many threads.
 *
 * <p>Defaults: a 30 s ttl renewed by the watchdog every third of it, no wait (one try), an
 * exclusive lease without lock-delay. A wait holds no pooled connection: the client's waiters of
 * a key line up locally, in arrival order, and only the head talks to the server, in short tries.
 */
public final class LockBuilder {
    /** The ttl of a lease unless said otherwise. */
    public static final Duration DEFAULT_TTL = Duration.ofSeconds(30);

    private final Core core;
    private final Request request;
    private final Duration ttl;
    private final Duration wait;
    private final boolean watchdog;
    private final Duration renewEvery;

    LockBuilder(Core core, Request request) {
        this(core, request, DEFAULT_TTL, Duration.ZERO, true, null);
    }

    private LockBuilder(Core core, Request request, Duration ttl, Duration wait, boolean watchdog, Duration renewEvery) {
        this.core = core;
        this.request = new Request(request.key(), request.owner(), request.kind(),
                ttl == null ? null : Args.seconds(ttl), request.permits(), request.info(), request.lockDelaySeconds());
        this.ttl = ttl;
        this.wait = wait;
        this.watchdog = watchdog;
        this.renewEvery = renewEvery;
    }

    /**
     * How long the lease outlives its holder unless renewed (the watchdog renews it while held).
     *
     * @param ttl at least a microsecond, at most the server's {@code dlock.max_ttl} (checked there)
     * @return a builder with this ttl
     * @throws InvalidArgumentException if not positive
     */
    public LockBuilder ttl(Duration ttl) {
        return new LockBuilder(core, request, Args.positive("ttl", ttl), wait, watchdog, renewEvery);
    }

    /**
     * No ttl: the lease is bound to its connection, which stays out of the pool while it is held;
     * it never expires and ends when released or when its client closes (or its session dies).
     * Refused behind a transaction pooler.
     *
     * @return a builder of a session-bound lease
     */
    public LockBuilder sessionBound() {
        return new LockBuilder(core, request, null, wait, watchdog, renewEvery);
    }

    /**
     * How long to wait for the key when another owner holds it (zero, the default: one try).
     *
     * @param wait not negative
     * @return a builder with this wait
     * @throws InvalidArgumentException if negative
     */
    public LockBuilder waitAtMost(Duration wait) {
        return new LockBuilder(core, request, ttl, Args.notNegative("wait", wait), watchdog, renewEvery);
    }

    /**
     * Waits for the key without limit (until granted, or the thread is interrupted).
     *
     * @return a builder that waits forever
     */
    public LockBuilder waitForever() {
        return new LockBuilder(core, request, ttl, null, watchdog, renewEvery);
    }

    /**
     * Whether the watchdog renews the lease while it is held (default true). Without it the lease
     * runs out at its ttl, and {@link Lease#lost()} says so then.
     *
     * @param renew false to let the lease run out
     * @return a builder with this choice
     */
    public LockBuilder watchdog(boolean renew) {
        return new LockBuilder(core, request, ttl, wait, renew, renewEvery);
    }

    /**
     * How often the watchdog renews (default: a third of the ttl, so that two renewals can fail
     * before the lease runs out).
     *
     * @param every positive
     * @return a builder with this interval
     */
    public LockBuilder renewEvery(Duration every) {
        return new LockBuilder(core, request, ttl, wait, watchdog, Args.positive("renewEvery", every));
    }

    /**
     * Should the lease expire rather than be released, keep the key from new grants this long after.
     *
     * @param delay not negative
     * @return a builder with this lock-delay
     */
    public LockBuilder lockDelay(Duration delay) {
        Request delayed = new Request(request.key(), request.owner(), request.kind(), request.ttlSeconds(),
                request.permits(), request.info(), Args.seconds(Args.notNegative("lockDelay", delay)));
        return new LockBuilder(core, delayed, ttl, wait, watchdog, renewEvery);
    }

    /**
     * The same lock as a shared lease (a read lock, {@code dlock_acquire_shared}): any number of
     * owners hold the key shared at once, and none while an exclusive lease holds it. Asking for a
     * key in the other mode than this owner holds it in is a {@link ModeConflictException}.
     *
     * @return a builder of a shared lease (a semaphore's builder is one already)
     */
    public LockBuilder shared() {
        if (request.kind() == Request.Kind.SHARED) {
            return this;
        }
        return new LockBuilder(core, request.shared(), ttl, wait, watchdog, renewEvery);
    }

    /**
     * The key this lock takes.
     *
     * @return the key
     */
    public String key() {
        return request.key();
    }

    /**
     * Takes the lock.
     *
     * @return the lease; close it (try-with-resources) to release it
     * @throws NotAcquiredException when another owner keeps the key (at once without a wait, or
     *     when the wait ran out)
     * @throws java.util.concurrent.CancellationException if the waiting thread was interrupted
     *     (its interrupt status is kept)
     */
    public Lease acquire() {
        return tryAcquire().orElseThrow(() -> new NotAcquiredException(request.key(), wait == null || !wait.isZero()));
    }

    /**
     * Takes the lock if it can, within the wait.
     *
     * @return the lease, or empty when another owner keeps the key
     */
    public Optional<Lease> tryAcquire() {
        long every = 0;
        if (ttl != null && watchdog) {
            every = renewEvery != null ? Deadline.nanos(renewEvery) : Deadline.nanos(ttl) / 3;
        }
        return Optional.ofNullable(new Acquisition(core, request, wait, every).take());
    }
}

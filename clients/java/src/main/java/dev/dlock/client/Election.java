package dev.dlock.client;

import dev.dlock.client.waiting.Deadline;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.time.Duration;
import java.time.OffsetDateTime;
import java.util.Objects;
import java.util.Optional;
import java.util.function.Consumer;

/**
 * An election, by name: {@code dlock.election("scheduler").campaign("node-a:8080")}. Immutable.
 *
 * <p>Its leader holds a lease on the election's name (which shares the key space of locks: do not
 * lock it as well). Its term is the lease's fence, so terms only grow, and work done as leader can
 * be fenced with it ({@code dlock_holds(election, term)}). Defaults: a 30 s ttl, and a campaign
 * that waits without limit.
 */
public final class Election {
    private final Core core;
    private final String owner;
    private final String name;
    private final Duration ttl;
    private final Duration wait;
    private final Duration lockDelay;

    Election(Core core, String owner, String name) {
        this(core, owner, name, LockBuilder.DEFAULT_TTL, null, Duration.ZERO);
    }

    private Election(Core core, String owner, String name, Duration ttl, Duration wait, Duration lockDelay) {
        this.core = core;
        this.owner = owner;
        this.name = name;
        this.ttl = ttl;
        this.wait = wait;
        this.lockDelay = lockDelay;
    }

    /**
     * How long a leader that stopped renewing keeps the lead.
     *
     * @param ttl positive
     * @return an election with this ttl
     */
    public Election ttl(Duration ttl) {
        return new Election(core, owner, name, Args.positive("ttl", ttl), wait, lockDelay);
    }

    /**
     * How long {@link #campaign} waits to lead (default: without limit; zero: one try).
     *
     * @param wait not negative
     * @return an election with this wait
     */
    public Election waitAtMost(Duration wait) {
        return new Election(core, owner, name, ttl, Args.notNegative("wait", wait), lockDelay);
    }

    /**
     * Campaigns without limit (the default).
     *
     * @return an election whose campaign waits forever
     */
    public Election waitForever() {
        return new Election(core, owner, name, ttl, null, lockDelay);
    }

    /**
     * Should a lead expire rather than be resigned, keep the election from a new leader this long after.
     *
     * @param delay not negative
     * @return an election with this lock-delay
     */
    public Election lockDelay(Duration delay) {
        return new Election(core, owner, name, ttl, wait, Args.notNegative("lockDelay", delay));
    }

    /**
     * The election's name.
     *
     * @return the name
     */
    public String name() {
        return name;
    }

    /**
     * Waits to lead, publishing {@code info} to {@link #leader()}. The wait holds no pooled connection.
     *
     * @param info what to publish (at most 1 kB, e.g. the leader's address), or {@code null}
     * @return the lead, renewed by the watchdog until resigned
     * @throws NotAcquiredException if the wait runs out
     */
    public Leadership campaign(String info) {
        Request request = new Request(name, owner, Request.Kind.LEADER, Args.seconds(ttl), null, Args.info(info),
                Args.seconds(lockDelay));
        Lease lease = new Acquisition(core, request, wait, Deadline.nanos(ttl) / 3).take();
        if (lease == null) {
            throw new NotAcquiredException(name, wait == null || !wait.isZero());
        }
        return new Leadership(lease);
    }

    /**
     * The current leader.
     *
     * @return the leader, or empty when nobody leads
     */
    public Optional<Leader> leader() {
        return Optional.ofNullable(core.connections.one(core.statements().leader, Election::readLeader, name));
    }

    private static Leader readLeader(ResultSet rows) throws SQLException {
        if (!rows.next()) {
            return null;
        }
        String info = rows.getString(1);
        long term = rows.getLong(2);
        OffsetDateTime since = rows.getObject(3, OffsetDateTime.class);
        OffsetDateTime expires = rows.getObject(4, OffsetDateTime.class);
        return new Leader(info, term, since == null ? null : since.toInstant(),
                expires == null ? null : expires.toInstant());
    }

    /**
     * Observes the leaders as they change: {@code observer} is called with the leader now (empty:
     * nobody leads), then with every change the server notifies (a new term, or nobody). It runs
     * on a thread of the observation's own; changes that come faster than it returns are merged
     * (each call has the leader when it was read, and differs from the one before). The election
     * is watched on the client's listener connection; each change costs one short call on a pooled
     * connection.
     *
     * @param observer called with each leader
     * @return the observation; close it to stop
     * @throws UnsupportedOperationException behind a transaction pooler (no notification passes
     *     it): poll {@link #leader()} there
     */
    public LeaderObserver observe(Consumer<Optional<Leader>> observer) {
        if (!core.waits.listens()) {
            throw new UnsupportedOperationException("dlock: observing an election needs the client's listener "
                    + "connection, which a client behind a transaction pooler has not: poll leader() instead");
        }
        return new LeaderObserver(this, core, Objects.requireNonNull(observer, "observer"));
    }
}

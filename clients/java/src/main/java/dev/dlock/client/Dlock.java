package dev.dlock.client;

import dev.dlock.client.sql.ListenerSource;
import java.time.Duration;
import java.util.Collection;
import java.util.Objects;
import java.util.Optional;
import javax.sql.DataSource;

/**
 * A dlock client: connections to one database (the application's {@link DataSource}, or a small
 * pool of its own made from a JDBC URL) and one owner identity.
 *
 * <pre>{@code
 * try (Dlock dlock = Dlock.connect(dataSource);
 *      Lease lease = dlock.lock("report:nightly").ttl(Duration.ofSeconds(30))
 *                         .waitAtMost(Duration.ofSeconds(10)).acquire()) {
 *     writeReport(lease.fence());
 * }
 * }</pre>
 *
 * <p>It opens no connection before its first call. Waits share one listener connection, opened
 * outside the pool (see {@link ListenerSource#forPool}). Closing the client releases the leases it
 * still holds, stops renewing and listening, and closes its own pool (never the application's).
 * It is safe to share between threads; one per application and database is the usual.
 */
public final class Dlock implements AutoCloseable {
    /** Pooled connections a client made from a URL opens at most unless said otherwise. */
    public static final int DEFAULT_POOL_SIZE = 10;

    private final Core core;
    private final String owner;
    private final boolean ownsCore;
    private final LockedInterceptor interceptor = new LockedInterceptor(this);

    Dlock(Core core, String owner, boolean ownsCore) {
        this.core = core;
        this.owner = owner;
        this.ownsCore = ownsCore;
    }

    /**
     * A client on the application's data source (a pool such as HikariCP), with the defaults.
     *
     * @param dataSource where connections come from
     * @return the client
     */
    public static Dlock connect(DataSource dataSource) {
        return builder(dataSource).build();
    }

    /**
     * A client with a small pool of its own ({@value #DEFAULT_POOL_SIZE} connections at most).
     *
     * @param jdbcUrl a {@code jdbc:postgresql:} URL (user and password may be in it)
     * @return the client
     */
    public static Dlock connect(String jdbcUrl) {
        return builder(jdbcUrl).build();
    }

    /**
     * Configures a client on the application's data source.
     *
     * @param dataSource where connections come from
     * @return the builder
     */
    public static DlockBuilder builder(DataSource dataSource) {
        return new DlockBuilder(Objects.requireNonNull(dataSource, "dataSource"), null);
    }

    /**
     * Configures a client with a pool of its own.
     *
     * @param jdbcUrl a {@code jdbc:postgresql:} URL
     * @return the builder
     */
    public static DlockBuilder builder(String jdbcUrl) {
        Objects.requireNonNull(jdbcUrl, "jdbcUrl");
        if (!jdbcUrl.startsWith("jdbc:postgresql:")) {
            throw new IllegalArgumentException("dlock: not a PostgreSQL JDBC URL (jdbc:postgresql://host/db): " + jdbcUrl);
        }
        return new DlockBuilder(null, jdbcUrl);
    }

    /**
     * The owner identity every lease of this client is taken as: {@code host:pid:random} unless given.
     *
     * @return the owner
     */
    public String owner() {
        return owner;
    }

    /**
     * What stands between the client and the server, as configured.
     *
     * @return the pooler mode
     */
    public Pooler pooler() {
        return core.connections.transactionPooler() ? Pooler.TRANSACTION : Pooler.SESSION;
    }

    /**
     * The same connections, listener and watchdog under another owner identity (e.g. threads of one
     * process that should count separately on a semaphore). Owners must be unguessable to others:
     * whoever knows one (and has the role) can renew and release its leases. Closing the copy
     * closes nothing; its original does.
     *
     * @param owner at most 256 bytes
     * @return a client of that owner
     */
    public Dlock withOwner(String owner) {
        return new Dlock(core, Args.owner(owner), false);
    }

    /**
     * Describes an exclusive lock on {@code key}.
     *
     * @param key at most 1024 bytes of UTF-8, not empty
     * @return the lock's builder
     */
    public LockBuilder lock(String key) {
        return new LockBuilder(core, new Request(Args.key(key), owner, Request.Kind.EXCLUSIVE, null, null, null, 0));
    }

    /**
     * Describes one permit of a counting semaphore of {@code permits} on {@code key}: a shared lease
     * granted only while fewer than {@code permits} owners hold the key. Everyone using the key must
     * pass the same number (another is refused by the server with 22023). Each holder is an owner:
     * threads that should count separately need a client each ({@link #withOwner}).
     *
     * @param key the key
     * @param permits 1 and up
     * @return the lock's builder
     */
    public LockBuilder semaphore(String key, int permits) {
        return new LockBuilder(core, new Request(Args.key(key), owner, Request.Kind.SHARED, null,
                Args.permits(permits), null, 0));
    }

    /**
     * Describes a lock on every key of {@code keys} at once, all or none; the fences come in the
     * order of {@code keys}.
     *
     * @param keys 1 to 64 keys, none twice
     * @return the lock's builder
     */
    public MultiLockBuilder lockAll(Collection<String> keys) {
        return new MultiLockBuilder(core, owner, Args.keys(keys));
    }

    /**
     * The election {@code name}: campaign for its lead, see who leads, observe changes.
     *
     * @param name the election (it shares the key space of locks)
     * @return the election
     */
    public Election election(String name) {
        return new Election(core, owner, Args.key(name));
    }

    /**
     * Waits without limit until no lease holds {@code key}, without taking it.
     *
     * @param key the key
     * @return true once it is free
     */
    public boolean waitFree(String key) {
        return waitFree(key, null);
    }

    /**
     * Waits up to {@code timeout} until no lease holds {@code key}, without taking it. Like a lock's
     * wait it holds no pooled connection.
     *
     * @param key the key
     * @param timeout how long (zero: look once; {@code null}: no limit)
     * @return true once it is free, false if the timeout elapsed first
     * @throws HeldHereException if the server session that looks holds the key itself (behind a
     *     transaction pooler, where the session is whichever the pooler lent, that only means held)
     */
    public boolean waitFree(String key, Duration timeout) {
        return new FreeWait(core, Args.key(key), timeout == null ? null : Args.notNegative("timeout", timeout)).await();
    }

    /**
     * Frees {@code key} whoever holds it. For administrators ({@code dlock_admin} members,
     * superusers); the holder finds out at its next renewal.
     *
     * @param key the key
     * @return true if it was held
     * @throws PermissionDeniedException for other roles (42501)
     */
    public boolean forceRelease(String key) {
        String checked = Args.key(key);
        return core.connections.one(core.statements().forceRelease, Connections::bool, checked);
    }

    /**
     * The lease of the innermost {@link Locked} method running on this thread (its fence for
     * guarded writes, its lost signal).
     *
     * @return the lease, or empty outside such a method
     */
    public static Optional<Lease> currentLease() {
        return LockedInterceptor.current();
    }

    /**
     * What {@link Locked} does around a call, for a framework's interceptor (see the Spring
     * example in the client's guide).
     *
     * @return this client's interceptor
     */
    public LockedInterceptor lockedInterceptor() {
        return interceptor;
    }

    /**
     * A proxy of {@code target} whose methods annotated {@link Locked} (on the interface, or on
     * the target's class) run under their lock; other methods are passed through. Every annotation
     * is checked now.
     *
     * @param type the interface
     * @param target the implementation
     * @param <T> the interface's type
     * @return the proxy
     * @throws IllegalArgumentException if {@code type} is not an interface or an annotation is invalid
     */
    public <T> T proxy(Class<T> type, T target) {
        return LockedProxy.of(interceptor, type, target);
    }

    /** The shared state, for the package's tests. */
    Core core() {
        return core;
    }

    /**
     * Releases the leases still held (best effort), stops renewing, and closes the listener and
     * the client's own pool. A {@link #withOwner} copy closes nothing: its original does.
     */
    @Override
    public void close() {
        if (ownsCore) {
            core.close();
        }
    }
}

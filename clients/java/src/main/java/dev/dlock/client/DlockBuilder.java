package dev.dlock.client;

import dev.dlock.client.sql.ConnectionSource;
import dev.dlock.client.sql.DataSourceConnections;
import dev.dlock.client.sql.ListenerSource;
import dev.dlock.client.sql.OwnPool;
import dev.dlock.client.waiting.Backoff;
import dev.dlock.client.waiting.Deadline;
import java.time.Duration;
import java.util.Objects;
import java.util.Properties;
import java.util.concurrent.ScheduledExecutorService;
import javax.sql.DataSource;

/** How a client connects and behaves: {@link Dlock#builder(DataSource)} or {@link Dlock#builder(String)}. */
public final class DlockBuilder {
    private final DataSource dataSource;
    private final String jdbcUrl;
    private final Properties properties = new Properties();
    private String owner;
    private Pooler pooler = Pooler.SESSION;
    private int poolSize = Dlock.DEFAULT_POOL_SIZE;
    private ScheduledExecutorService scheduler;
    private DataSource listenerDataSource;
    private Duration maxPollInterval = Duration.ofNanos(Backoff.DEFAULT_MAX_NANOS);

    DlockBuilder(DataSource dataSource, String jdbcUrl) {
        this.dataSource = dataSource;
        this.jdbcUrl = jdbcUrl;
    }

    /**
     * The owner identity of the client's leases (default {@code host:pid:random}); must be
     * unguessable to others.
     *
     * @param owner at most 256 bytes, not empty
     * @return this builder
     */
    public DlockBuilder owner(String owner) {
        this.owner = Args.owner(owner);
        return this;
    }

    /**
     * {@link Pooler#TRANSACTION} behind pgbouncer in transaction mode (default {@link Pooler#SESSION}).
     *
     * @param pooler the mode
     * @return this builder
     */
    public DlockBuilder pooler(Pooler pooler) {
        this.pooler = Objects.requireNonNull(pooler, "pooler");
        return this;
    }

    /**
     * The most connections of the client's own pool (a client made from a URL; default
     * {@value Dlock#DEFAULT_POOL_SIZE}). Its waits share one more, the listener.
     *
     * @param size 1 and up
     * @return this builder
     */
    public DlockBuilder poolSize(int size) {
        if (size < 1) {
            throw new IllegalArgumentException("dlock: a pool of no connections cannot lock anything");
        }
        this.poolSize = size;
        return this;
    }

    /**
     * A connection property for the client's own pool ({@code user}, {@code password},
     * {@code ApplicationName}, ...), beside the URL's (which win).
     *
     * @param name the pgjdbc property
     * @param value its value
     * @return this builder
     */
    public DlockBuilder property(String name, String value) {
        properties.setProperty(Objects.requireNonNull(name, "name"), Objects.requireNonNull(value, "value"));
        return this;
    }

    /**
     * Where the watchdog's timers run (default: one daemon thread of the client's). They are
     * short; renewal statements run on the client's own renewal threads (at most 4), so that a
     * stuck one never delays a lost signal. The client never shuts this scheduler down.
     *
     * @param scheduler the scheduler
     * @return this builder
     */
    public DlockBuilder scheduler(ScheduledExecutorService scheduler) {
        this.scheduler = Objects.requireNonNull(scheduler, "scheduler");
        return this;
    }

    /**
     * Where the listener connection comes from, when the pool's own settings cannot be read
     * (see {@link ListenerSource#forPool}): each connection it gives must be a new session
     * (a {@code PGSimpleDataSource}, say), never one of a pool.
     *
     * @param unpooled the data source
     * @return this builder
     */
    public DlockBuilder listenerDataSource(DataSource unpooled) {
        this.listenerDataSource = Objects.requireNonNull(unpooled, "unpooled");
        return this;
    }

    /**
     * Behind a transaction pooler, the longest pause between two tries of a wait (default
     * 250 ms): how late a waiter may notice a release, against how many tries per second a
     * waiting key costs the server.
     *
     * @param interval positive
     * @return this builder
     */
    public DlockBuilder maxPollInterval(Duration interval) {
        this.maxPollInterval = Args.positive("maxPollInterval", interval);
        return this;
    }

    /**
     * The client. No connection is opened before its first call.
     *
     * @return the client
     */
    public Dlock build() {
        ConnectionSource source;
        ListenerSource listener;
        if (dataSource != null) {
            source = new DataSourceConnections(dataSource);
            listener = listenerDataSource != null ? ListenerSource.of(listenerDataSource)
                    : ListenerSource.forPool(dataSource);
        } else {
            Properties connection = new Properties();
            connection.setProperty("ApplicationName", "dlock");
            connection.putAll(properties);
            OwnPool pool = new OwnPool(jdbcUrl, connection, poolSize);
            source = pool;
            listener = listenerDataSource != null ? ListenerSource.of(listenerDataSource) : ListenerSource.of(pool);
        }
        Connections connections = new Connections(source, pooler == Pooler.TRANSACTION);
        Core core = new Core(connections, listener, Deadline.nanos(maxPollInterval), scheduler);
        return new Dlock(core, owner != null ? owner : Owners.generate(), true);
    }
}

package dev.dlock.client;

import dev.dlock.client.renewal.Watchdog;
import dev.dlock.client.sql.ListenerSource;
import dev.dlock.client.sql.Statements;
import dev.dlock.client.waiting.Waits;
import java.lang.System.Logger.Level;
import java.util.ArrayList;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

/** What a client and its {@code withOwner} copies share, whatever their owner. */
final class Core {
    static final System.Logger LOG = System.getLogger("dev.dlock.client");
    /** Renewals of one client on their way at once, at most. */
    static final int RENEWAL_THREADS = 4;

    final Connections connections;
    final Waits waits;
    final Watchdog watchdog;
    /** Leases not yet released, released by {@link #close()}. */
    final Set<Lease> held = ConcurrentHashMap.newKeySet();

    private final ScheduledExecutorService timers;
    private final boolean ownsTimers;
    private final ThreadPoolExecutor renewals;
    private final Object finding = new Object();
    private volatile Statements statements;
    private volatile boolean closed;

    Core(Connections connections, ListenerSource listener, long maxPollNanos, ScheduledExecutorService scheduler) {
        this.connections = connections;
        this.waits = new Waits(connections.transactionPooler() ? null : listener, maxPollNanos);
        this.ownsTimers = scheduler == null;
        if (scheduler == null) {
            ScheduledThreadPoolExecutor own = new ScheduledThreadPoolExecutor(1, daemon("dlock-watchdog"));
            // Every release cancels its lease's timer: drop it from the queue at once.
            own.setRemoveOnCancelPolicy(true);
            this.timers = own;
        } else {
            this.timers = scheduler;
        }
        this.renewals = new ThreadPoolExecutor(RENEWAL_THREADS, RENEWAL_THREADS, 30, TimeUnit.SECONDS,
                new LinkedBlockingQueue<>(), daemon("dlock-renew"));
        this.renewals.allowCoreThreadTimeOut(true);
        this.watchdog = new Watchdog(timers, renewals);
    }

    private static ThreadFactory daemon(String name) {
        AtomicInteger count = new AtomicInteger();
        return work -> {
            Thread thread = new Thread(work, name + "-" + count.incrementAndGet());
            thread.setDaemon(true);
            return thread;
        };
    }

    /** The statements of this database, its extension's schema found on first use (and looked
     *  for again after a failure, e.g. before the extension was installed). */
    Statements statements() {
        Statements found = statements;
        if (found != null) {
            return found;
        }
        synchronized (finding) {
            if (statements == null) {
                String[] row = connections.one(Statements.FIND,
                        rows -> rows.next() ? new String[] {rows.getString(1), rows.getString(2)} : new String[2]);
                if (row[1] == null) {
                    throw new NotInstalledException("the dlock extension is not installed in database '" + row[0]
                            + "' (CREATE SCHEMA dlock; CREATE EXTENSION dlock SCHEMA dlock;)");
                }
                statements = new Statements(row[1]);
            }
            return statements;
        }
    }

    boolean closed() {
        return closed;
    }

    /** Releases the leases still held (best effort), stops renewing and listening, and closes the
     *  client's own pool. */
    void close() {
        if (closed) {
            return;
        }
        closed = true;
        for (Lease lease : new ArrayList<>(held)) {
            try {
                lease.release();
            } catch (DlockException e) {
                LOG.log(Level.DEBUG, "dlock: release of {0} at close failed: {1}", lease.key(), e.getMessage());
            }
        }
        if (ownsTimers) {
            timers.shutdownNow();
        }
        renewals.shutdownNow();
        waits.close();
        connections.source().close();
    }
}

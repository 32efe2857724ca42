package dev.dlock.conformance;

import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;
import dev.dlock.client.Dlock;
import dev.dlock.client.DlockBuilder;
import dev.dlock.client.Leader;
import dev.dlock.client.LeaderObserver;
import dev.dlock.client.Leadership;
import dev.dlock.client.Lease;
import dev.dlock.client.LockBuilder;
import dev.dlock.client.MultiLease;
import dev.dlock.client.Pooler;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.function.Consumer;

/** The conformance actions over dlock-client: how its API maps onto the scenarios'. */
final class Adapter {
    /** What a {@code lock} or {@code with_lock} step asks for: durations {@code null} for "none". */
    record LockArgs(String key, Duration ttl, Duration waitAtMost, boolean shared, Integer permits, boolean watchdog,
            Duration lockDelay) {}

    /** An election observed: the observation, and the leaders it was given, in order. */
    record Observation(LeaderObserver observer, BlockingQueue<Optional<Leader>> changes) {}

    private final List<HikariDataSource> pools = new ArrayList<>();

    /** A client: its own pool made from the URL, or a HikariCP pool the runner makes and hands over. */
    Dlock client(String jdbcUrl, boolean transactionPooler, boolean driverPool, int poolSize, String owner) {
        Pooler pooler = transactionPooler ? Pooler.TRANSACTION : Pooler.SESSION;
        DlockBuilder builder;
        if (driverPool) {
            HikariConfig config = new HikariConfig();
            config.setJdbcUrl(jdbcUrl);
            config.setMaximumPoolSize(poolSize);
            config.setMinimumIdle(1);
            HikariDataSource pool = new HikariDataSource(config);
            synchronized (pools) {
                pools.add(pool);
            }
            builder = Dlock.builder(pool);
        } else {
            builder = Dlock.builder(jdbcUrl).poolSize(poolSize);
        }
        builder.pooler(pooler);
        if (owner != null) {
            builder.owner(owner);
        }
        return builder.build();
    }

    void shutdown() {
        synchronized (pools) {
            pools.forEach(HikariDataSource::close);
            pools.clear();
        }
    }

    LockBuilder describe(Dlock client, LockArgs a) {
        LockBuilder lock = a.permits() != null ? client.semaphore(a.key(), a.permits()) : client.lock(a.key());
        lock = a.ttl() == null ? lock.sessionBound() : lock.ttl(a.ttl());
        lock = a.waitAtMost() == null ? lock.waitForever() : lock.waitAtMost(a.waitAtMost());
        lock = lock.watchdog(a.watchdog()).lockDelay(a.lockDelay());
        return a.shared() ? lock.shared() : lock;
    }

    Lease lock(Dlock client, LockArgs a) {
        return describe(client, a).acquire();
    }

    MultiLease lockAll(Dlock client, List<String> keys, Duration ttl, Duration wait) {
        var lock = client.lockAll(keys).ttl(ttl);
        return (wait == null ? lock.waitForever() : lock.waitAtMost(wait)).acquire();
    }

    /** try-with-resources, Java's way of holding a lock for a block: closing a lost lease throws. */
    void withLock(Dlock client, LockArgs a, Consumer<Lease> body) {
        try (Lease lease = describe(client, a).acquire()) {
            body.accept(lease);
        }
    }

    static List<Long> fences(Object lease) {
        if (lease instanceof MultiLease multi) {
            return multi.fences();
        }
        if (lease instanceof Leadership lead) {
            return List.of(lead.term());
        }
        return List.of(((Lease) lease).fence());
    }

    boolean release(Object lease) {
        return lease instanceof Leadership lead ? lead.resign() : ((Lease) lease).release();
    }

    void renew(Object lease) {
        if (lease instanceof Leadership lead) {
            lead.renew();
        } else {
            ((Lease) lease).renew();
        }
    }

    boolean holds(Object lease) {
        return lease instanceof Leadership lead ? lead.holds() : ((Lease) lease).holds();
    }

    boolean isHeld(Object lease) {
        return lease instanceof Leadership lead ? lead.isLeading() : ((Lease) lease).isHeld();
    }

    boolean waitLost(Object lease, long timeoutMillis) throws InterruptedException {
        var lost = lease instanceof Leadership lead ? lead.lost() : ((Lease) lease).lost();
        try {
            lost.get(timeoutMillis, TimeUnit.MILLISECONDS);
            return true;
        } catch (TimeoutException e) {
            return false;
        } catch (ExecutionException e) {
            throw new IllegalStateException("the lost signal failed", e.getCause());
        }
    }

    Leadership campaign(Dlock client, String election, String info, Duration ttl, Duration wait) {
        var e = client.election(election).ttl(ttl);
        return (wait == null ? e.waitForever() : e.waitAtMost(wait)).campaign(info);
    }

    static Map<String, Object> leader(Optional<Leader> leader) {
        if (leader.isEmpty()) {
            return null;
        }
        Map<String, Object> shown = new LinkedHashMap<>();
        shown.put("info", leader.get().info());
        shown.put("term", leader.get().term());
        return shown;
    }

    Map<String, Object> leader(Dlock client, String election) {
        return leader(client.election(election).leader());
    }

    Observation observe(Dlock client, String election) {
        BlockingQueue<Optional<Leader>> changes = new LinkedBlockingQueue<>();
        return new Observation(client.election(election).observe(changes::add), changes);
    }

    /** The next leader the observer was given, or a {@link TimeoutException}. */
    Map<String, Object> observeNext(Observation observation, long timeoutMillis)
            throws InterruptedException, TimeoutException {
        Optional<Leader> next = observation.changes().poll(timeoutMillis, TimeUnit.MILLISECONDS);
        if (next == null) {
            throw new TimeoutException("no change of leader within " + timeoutMillis + " ms");
        }
        return leader(next);
    }

    boolean waitFree(Dlock client, String key, Duration timeout) {
        return timeout == null ? client.waitFree(key) : client.waitFree(key, timeout);
    }
}

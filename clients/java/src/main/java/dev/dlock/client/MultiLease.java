package dev.dlock.client;

import dev.dlock.client.sql.Statements;
import java.sql.Connection;
import java.time.Instant;
import java.util.List;

/**
 * Every key of a multi-key lock, held together: one watchdog renews them all, {@link #lost()}
 * completes if any of them is lost, and releasing gives back all of them.
 *
 * <p>Renewals and releases go key by key, each in a transaction of its own, so that they never
 * hold one key's lock while waiting for another's (no cycle with a concurrent multi-key grant of
 * the same keys, whatever order the server locks them in).
 */
public final class MultiLease extends Lease {
    private final List<String> keys;
    private final List<Long> fences;

    MultiLease(Core core, Statements statements, String owner, List<String> keys, List<Long> fences, double ttlSeconds) {
        super(core, statements, owner, String.join(", ", keys), fences.get(0), ttlSeconds, null);
        this.keys = List.copyOf(keys);
        this.fences = List.copyOf(fences);
    }

    /**
     * The keys, in the order they were asked for.
     *
     * @return the keys
     */
    public List<String> keys() {
        return keys;
    }

    /**
     * The fence of each key, in the order of {@link #keys()}; {@link #fence()} is the first.
     *
     * @return the fences
     */
    public List<Long> fences() {
        return fences;
    }

    @Override
    Instant renewTtl() {
        Connections connections = core.connections;
        Connection connection = connections.take();
        boolean broken = false;
        Instant earliest = null;
        boolean all = true;
        try {
            for (String key : keys) {
                Instant expiry = connections.run(connection, statements.renew, Lease::instant, key, owner, ttlSeconds);
                if (expiry == null) {
                    all = false;
                } else if (earliest == null || expiry.isBefore(earliest)) {
                    earliest = expiry;
                }
            }
        } catch (ConnectionFailedException e) {
            broken = true;
            throw e;
        } finally {
            connections.giveBack(connection, broken);
        }
        return all ? earliest : null;
    }

    @Override
    public boolean holds() {
        return core.connections.one(statements.holdsAll, Connections::bool,
                keys.toArray(String[]::new), fences.toArray(Long[]::new));
    }

    @Override
    boolean releaseCall() {
        Connections connections = core.connections;
        Connection connection = connections.take();
        boolean broken = false;
        boolean all = true;
        try {
            for (String key : keys) {
                all &= connections.run(connection, statements.release, Connections::bool, key, owner);
            }
        } catch (ConnectionFailedException e) {
            broken = true;
            throw e;
        } finally {
            connections.giveBack(connection, broken);
        }
        return all;
    }
}

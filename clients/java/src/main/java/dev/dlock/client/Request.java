package dev.dlock.client;

import dev.dlock.client.sql.SqlText;
import dev.dlock.client.sql.Statements;

/**
 * What a single-key acquire asks for (an exclusive lease, a shared one or a semaphore's permit,
 * or an election's lead), its arguments already checked, and the statements that take it.
 *
 * @param key the key (or election)
 * @param owner the owner (or candidate)
 * @param kind which acquire
 * @param ttlSeconds the ttl, or {@code null} for a session-bound lease
 * @param permits a semaphore's size ({@code null}: no limit; shared leases only)
 * @param info what an election's leader publishes
 * @param lockDelaySeconds how long an expired lease keeps its key from new grants
 */
record Request(String key, String owner, Kind kind, Double ttlSeconds, Integer permits, String info,
        double lockDelaySeconds) {
    /** Which acquire. */
    enum Kind { EXCLUSIVE, SHARED, LEADER }

    /** A statement and its parameters. */
    record Call(SqlText sql, Object[] params) {}

    Request shared() {
        return new Request(key, owner, Kind.SHARED, ttlSeconds, permits, info, lockDelaySeconds);
    }

    /** The statement that waits up to {@code wait} seconds on the server ({@code null}: no limit). */
    Call waiting(Statements s, Double wait) {
        return switch (kind) {
            case SHARED -> new Call(s.acquireShared, new Object[] {key, owner, ttlSeconds, wait, permits, lockDelaySeconds});
            case LEADER -> new Call(s.campaign, new Object[] {key, owner, ttlSeconds, info, wait, lockDelaySeconds});
            // Exclusive leases without a lock-delay keep version 1's call, which every server has.
            case EXCLUSIVE -> lockDelaySeconds > 0
                    ? new Call(s.acquireDelayed, new Object[] {key, owner, ttlSeconds, wait, lockDelaySeconds})
                    : new Call(s.acquire, new Object[] {key, owner, ttlSeconds, wait});
        };
    }

    /** One try that never queues, then when to try again. Only the exclusive try waits up to
     *  {@code settle} ({@code null}: no limit) for a transaction that is changing the key. */
    Call trying(Statements s, Double settle) {
        return switch (kind) {
            case SHARED -> new Call(s.tryShared, new Object[] {key, owner, ttlSeconds, permits, lockDelaySeconds});
            case LEADER -> new Call(s.tryCampaign, new Object[] {key, owner, ttlSeconds, info, lockDelaySeconds});
            case EXCLUSIVE -> lockDelaySeconds > 0
                    ? new Call(s.tryDelayed, new Object[] {key, owner, ttlSeconds, lockDelaySeconds})
                    : new Call(s.tryAcquire, new Object[] {key, owner, ttlSeconds, settle});
        };
    }
}

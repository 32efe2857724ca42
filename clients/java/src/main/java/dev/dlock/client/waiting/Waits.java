package dev.dlock.client.waiting;

import dev.dlock.client.sql.ListenerSource;
import dev.dlock.client.sql.Statements;
import java.sql.SQLException;
import java.sql.SQLTransientConnectionException;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;

/**
 * The waiting state one client (and its {@code withOwner} copies) share: the local line of each
 * key waited for, and the listener.
 *
 * <p>The head of a line watches the key <em>before</em> it tries, so a release is either seen by
 * the try or notified after it (the extension's watch lock guarantees the order). The price: a
 * waiter here is not in the server's queue, so waits of other clients in the server go first, and
 * between clients the first to try after a release wins; within one client, waiters of a key are
 * granted in arrival order.
 */
public final class Waits implements AutoCloseable {
    /** How long a head sleeps at most when only a notification can free the key: a safety net
     *  in case one never comes. */
    public static final long RECHECK_NANOS = 2_000_000_000L;
    /** How long a watch may wait for the listener thread beyond the waiter's own deadline. */
    static final long WATCH_ANSWER_NANOS = 10_000_000_000L;

    private final Object lock = new Object();
    private final Map<String, KeyLine> lines = new HashMap<>();
    private final Map<String, Set<String>> byChannel = new HashMap<>();
    private final Listener listener;
    private final long maxPollNanos;

    /**
     * The waits of one client.
     *
     * @param listenerSource where the listener connects, or {@code null} behind a transaction
     *     pooler (no notification passes it: waits retry after pauses instead)
     * @param maxPollNanos the longest pause between two tries without a listener
     */
    public Waits(ListenerSource listenerSource, long maxPollNanos) {
        this.maxPollNanos = maxPollNanos;
        this.listener = listenerSource == null ? null : new Listener(listenerSource, new Listener.Events() {
            @Override
            public void notified(String channel) {
                Waits.this.notified(channel);
            }

            @Override
            public void lost() {
                Waits.this.lost();
            }

            @Override
            public boolean stillWanted(String key) {
                return hasLine(key);
            }
        });
    }

    /**
     * Whether waits hear of freed keys from the listener (not behind a transaction pooler).
     *
     * @return true with a listener
     */
    public boolean listens() {
        return listener != null;
    }

    /**
     * The longest pause between two tries without a listener.
     *
     * @return nanoseconds
     */
    public long maxPollNanos() {
        return maxPollNanos;
    }

    /**
     * Whether waiters of this client are lined up for {@code key} (a newcomer then queues behind
     * them instead of trying first).
     *
     * @param key the key
     * @return true if its line has anyone
     */
    public boolean hasLine(String key) {
        synchronized (lock) {
            return lines.containsKey(key);
        }
    }

    /**
     * How many waiters and watchers are in the line of {@code key}.
     *
     * @param key the key
     * @return 0 when it has no line
     */
    public int users(String key) {
        synchronized (lock) {
            KeyLine line = lines.get(key);
            return line == null ? 0 : line.users;
        }
    }

    /**
     * How long a try may wait on the server for a transaction changing the key: up to the
     * deadline, except behind a transaction pooler, where no call may hold a server connection
     * longer than one short statement.
     *
     * @param deadline the wait's deadline
     * @return seconds, or {@code null} for no limit
     */
    public Double settle(Deadline deadline) {
        return listener == null ? Double.valueOf(0.0) : deadline.remainingSeconds();
    }

    /**
     * Joins the local line of {@code key}; {@link #leave} when done.
     *
     * @param key the key
     * @return its line
     */
    public KeyLine enter(String key) {
        synchronized (lock) {
            KeyLine line = lines.computeIfAbsent(key, KeyLine::new);
            line.users++;
            return line;
        }
    }

    /**
     * Leaves the line; the last to leave stops watching the key (unless a colliding key still
     * needs its channel).
     *
     * @param line the line
     * @param statements the statements of the database (its unwatch)
     */
    public void leave(KeyLine line, Statements statements) {
        synchronized (lock) {
            line.users--;
            if (line.users > 0) {
                return;
            }
            lines.remove(line.key);
            boolean shared = false;
            for (Iterator<Set<String>> it = byChannel.values().iterator(); it.hasNext();) {
                Set<String> keys = it.next();
                if (keys.remove(line.key)) {
                    shared |= !keys.isEmpty();
                    if (keys.isEmpty()) {
                        it.remove();
                    }
                }
            }
            if (shared || line.watchedIn == 0 || listener == null) {
                return;
            }
        }
        listener.unwatch(line.key, statements.unwatch);
    }

    /** Makes sure the listener (connected first if need be) watches the line's key; false if the
     *  deadline passed before the listener answered. */
    boolean watch(KeyLine line, Statements statements, Deadline deadline) throws SQLException, InterruptedException {
        synchronized (lock) {
            if (line.watchedIn != 0 && line.watchedIn == listener.generation()) {
                return true;
            }
        }
        long patience = Math.max(deadline.remainingNanos(), WATCH_ANSWER_NANOS);
        Listener.Watching watching = listener.watch(line.key, statements.watch, statements.unwatch, patience);
        if (watching == null) {
            if (deadline.passed()) {
                return false;
            }
            throw new SQLTransientConnectionException("dlock: the listener connection did not answer", "08006");
        }
        synchronized (lock) {
            byChannel.computeIfAbsent(watching.channel(), c -> new HashSet<>()).add(line.key);
            line.watchedIn = watching.generation();
        }
        return true;
    }

    private void notified(String channel) {
        synchronized (lock) {
            for (String key : byChannel.getOrDefault(channel, Set.of())) {
                KeyLine line = lines.get(key);
                if (line != null) {
                    line.bump();
                }
            }
        }
    }

    private void lost() {
        synchronized (lock) {
            byChannel.clear();
            for (KeyLine line : lines.values()) {
                line.watchedIn = 0;
                line.bump();
            }
        }
    }

    /**
     * Waits to be the head of {@code line}, then tries until a grant or the deadline.
     *
     * @param line the key's line, entered
     * @param deadline when to give up
     * @param statements the statements of the database (watch, unwatch)
     * @param attempt one try
     * @param <T> what a grant gives
     * @return the grant, or {@code null} if the deadline passed first
     * @throws SQLException if watching failed
     * @throws InterruptedException if the waiting thread was interrupted
     */
    public <T> T waitInLine(KeyLine line, Deadline deadline, Statements statements, Attempt<T> attempt)
            throws SQLException, InterruptedException {
        if (!line.takeTurn(deadline)) {
            return null;
        }
        try {
            if (listener == null) {
                return retry(deadline, maxPollNanos, attempt);
            }
            Backoff soon = new Backoff(maxPollNanos);
            while (true) {
                // Read before watching and trying: a notification from here on is not missed.
                long seen = line.changes();
                if (!watch(line, statements, deadline)) {
                    return null;
                }
                Tried<T> tried = attempt.attempt(settle(deadline));
                if (tried.isGrant()) {
                    return tried.granted();
                }
                if (deadline.passed()) {
                    return null;
                }
                line.awaitChange(seen, deadline.cap(pause(tried.retryAfterSeconds(), soon)));
            }
        } finally {
            line.endTurn();
        }
    }

    /**
     * How long a head sleeps: until the blocking lease's expiry (never a busy loop when the server
     * says "now": then growing pauses), or the safety net when only a notification frees the key.
     *
     * @param retryAfterSeconds the server's word on when the blocking lease runs out, or null
     * @param soon the pauses of this wait when the server says "now"
     * @return nanoseconds
     */
    public static long pause(Double retryAfterSeconds, Backoff soon) {
        if (retryAfterSeconds == null) {
            return RECHECK_NANOS;
        }
        long until = (long) (retryAfterSeconds * 1e9);
        return until >= Backoff.FIRST_PAUSE_NANOS ? until : soon.pause(null);
    }

    /**
     * Tries with {@code attempt(0)} (no waiting on the server), pauses, again, until a grant or
     * the deadline (the last try is at the deadline).
     *
     * @param deadline when to give up
     * @param maxPollNanos the longest pause
     * @param attempt one try
     * @param <T> what a grant gives
     * @return the grant, or {@code null}
     * @throws InterruptedException if the waiting thread was interrupted
     */
    public static <T> T retry(Deadline deadline, long maxPollNanos, Attempt<T> attempt) throws InterruptedException {
        Backoff backoff = new Backoff(maxPollNanos);
        while (true) {
            Tried<T> tried = attempt.attempt(0.0);
            if (tried.isGrant()) {
                return tried.granted();
            }
            if (deadline.passed()) {
                return null;
            }
            TimeUnit.NANOSECONDS.sleep(deadline.cap(backoff.pause(tried.retryAfterSeconds())));
        }
    }

    /**
     * Watches a key for its own sake (an election's observer, a wait for a free key): joins the
     * key's line without taking a turn, so that the line's notifications reach it.
     *
     * @param key the key
     * @param statements the statements of the database
     * @return the watch; close it when done
     * @throws SQLException if watching failed
     * @throws InterruptedException if interrupted while the listener connected
     */
    public Watched watched(String key, Statements statements) throws SQLException, InterruptedException {
        return new Watched(this, enter(key), statements);
    }

    /** Closes the listener. */
    @Override
    public void close() {
        if (listener != null) {
            listener.close();
        }
    }
}

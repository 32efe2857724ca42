package dev.dlock.client.waiting;

import dev.dlock.client.sql.ListenerSource;
import dev.dlock.client.sql.SqlText;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.SQLTransientConnectionException;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import org.postgresql.PGConnection;
import org.postgresql.PGNotification;

/**
 * The listener: one connection on which every wait of a client hears of released keys.
 *
 * <p>One thread owns the connection. It runs the watch and unwatch calls it is handed, in the
 * order they come, and in between reads notifications with pgjdbc's
 * {@link PGConnection#getNotifications(int)}, which blocks the thread for at most
 * {@link #POLL_MILLIS} so that newly handed work waits no longer than that (JDBC offers no way to
 * wake a thread blocked on a socket). With no key watched it reads nothing and sleeps until handed
 * work. If the connection breaks, everyone waiting is told: they watch again on a new one, opened
 * by the next watch, and try again, since notifications may have been missed meanwhile.
 */
public final class Listener implements AutoCloseable {
    /** Longest a notification read blocks the listener thread while keys are watched. */
    public static final int POLL_MILLIS = 25;

    /** What the listener tells the waits. */
    public interface Events {
        /**
         * A notification on {@code channel}: its keys may be free.
         *
         * @param channel the channel {@code dlock_watch} returned
         */
        void notified(String channel);

        /** The connection broke: notifications may have been missed. */
        void lost();

        /**
         * Whether a waiter still wants the key watched (an unwatch handed before it came back is
         * then skipped).
         *
         * @param key the key
         * @return true if someone is in its line
         */
        boolean stillWanted(String key);
    }

    /**
     * A key watched on the listener.
     *
     * @param generation the connection it is watched on (a key watched on an older one must be
     *     watched again)
     * @param channel the channel of its notifications
     */
    public record Watching(long generation, String channel) {}

    private record Work(boolean watch, String key, SqlText sql, SqlText unwatch, CompletableFuture<Watching> done) {}

    private static final Work STOP = new Work(false, "", null, null, null);

    private final ListenerSource source;
    private final Events events;
    private final LinkedBlockingQueue<Work> work = new LinkedBlockingQueue<>();
    private final Object starting = new Object();
    private Thread thread;
    private volatile boolean closed;
    private volatile long generation;
    // Owned by the listener thread.
    private Connection connection;
    private PGConnection notifications;
    private final Map<String, SqlText> watched = new LinkedHashMap<>();

    /**
     * A listener that connects on its first watch.
     *
     * @param source where its connection comes from
     * @param events whom it tells
     */
    public Listener(ListenerSource source, Events events) {
        this.source = source;
        this.events = events;
    }

    /**
     * The current connection's generation (bumped by every new connection).
     *
     * @return the generation
     */
    public long generation() {
        return generation;
    }

    /**
     * Watches {@code key}, connecting first if need be.
     *
     * @param key the key
     * @param watch its {@code dlock_watch} statement
     * @param unwatch its {@code dlock_unwatch} statement
     * @param timeoutNanos how long to wait for the listener thread's answer
     * @return where it is watched, or {@code null} if the listener did not answer in time
     * @throws SQLException if the watch failed
     * @throws InterruptedException if the caller was interrupted meanwhile
     */
    public Watching watch(String key, SqlText watch, SqlText unwatch, long timeoutNanos)
            throws SQLException, InterruptedException {
        CompletableFuture<Watching> done = hand(new Work(true, key, watch, unwatch, new CompletableFuture<>()));
        try {
            return done.get(timeoutNanos, TimeUnit.NANOSECONDS);
        } catch (TimeoutException e) {
            return null;
        } catch (ExecutionException e) {
            if (e.getCause() instanceof SQLException failure) {
                throw failure;
            }
            throw new SQLTransientConnectionException("dlock: the listener failed: " + e.getCause(), "08006", e.getCause());
        }
    }

    /**
     * Stops watching {@code key} in the background, unless a new waiter wants it by then.
     *
     * @param key the key
     * @param unwatch its {@code dlock_unwatch} statement
     */
    public void unwatch(String key, SqlText unwatch) {
        if (!closed) {
            try {
                hand(new Work(false, key, unwatch, unwatch, new CompletableFuture<>()));
            } catch (SQLException e) {
                // Closed meanwhile: nothing is watched any more.
            }
        }
    }

    private CompletableFuture<Watching> hand(Work item) throws SQLException {
        synchronized (starting) {
            if (closed) {
                throw new SQLTransientConnectionException("dlock: the client is closed", "08003");
            }
            work.add(item);
            if (thread == null) {
                thread = new Thread(this::run, "dlock-listener");
                thread.setDaemon(true);
                thread.start();
            }
        }
        return item.done;
    }

    /** Closes the connection and ends the thread. */
    @Override
    public void close() {
        Thread running;
        synchronized (starting) {
            closed = true;
            running = thread;
            work.add(STOP);
        }
        if (running != null) {
            try {
                running.join(TimeUnit.SECONDS.toMillis(5));
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
    }

    private void run() {
        try {
            while (!closed) {
                Work item = notifications == null || watched.isEmpty() ? work.take() : work.poll();
                while (item != null && item != STOP) {
                    perform(item);
                    item = work.poll();
                }
                if (closed || item == STOP) {
                    break;
                }
                if (notifications != null && !watched.isEmpty()) {
                    receive(POLL_MILLIS);
                }
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        } finally {
            disconnect(false);
            SQLException gone = new SQLTransientConnectionException("dlock: the client is closed", "08003");
            for (Work left = work.poll(); left != null; left = work.poll()) {
                if (left.done != null) {
                    left.done.completeExceptionally(gone);
                }
            }
        }
    }

    private void perform(Work item) {
        if (!item.watch) {
            if (connection != null && watched.containsKey(item.key) && !events.stillWanted(item.key)) {
                try {
                    execute(item.sql, item.key);
                    watched.remove(item.key);
                } catch (SQLException e) {
                    brokenIf(e);
                }
            }
            item.done.complete(null);
            return;
        }
        boolean fresh = connection == null;
        try {
            item.done.complete(watchOn(item));
        } catch (SQLException first) {
            if (!brokenIf(first) || fresh) {
                item.done.completeExceptionally(first);
                return;
            }
            // An old connection that died while idle: one more try on a new one.
            try {
                item.done.complete(watchOn(item));
            } catch (SQLException second) {
                brokenIf(second);
                item.done.completeExceptionally(second);
            }
        }
    }

    private Watching watchOn(Work item) throws SQLException {
        connect();
        String channel = execute(item.sql, item.key);
        watched.put(item.key, item.unwatch);
        return new Watching(generation, channel);
    }

    private void connect() throws SQLException {
        if (connection != null) {
            return;
        }
        Connection opened = source.open();
        try {
            notifications = opened.unwrap(PGConnection.class);
        } catch (SQLException e) {
            opened.close();
            throw e;
        }
        connection = opened;
        watched.clear();
        generation++;
    }

    private String execute(SqlText sql, String key) throws SQLException {
        try (PreparedStatement statement = connection.prepareStatement(sql.jdbc())) {
            sql.bind(connection, statement, key);
            try (ResultSet rows = statement.executeQuery()) {
                return rows.next() ? rows.getString(1) : null;
            }
        }
    }

    private void receive(int timeoutMillis) {
        try {
            PGNotification[] received = notifications.getNotifications(timeoutMillis);
            if (received != null) {
                for (PGNotification notification : received) {
                    events.notified(notification.getName());
                }
            }
        } catch (SQLException e) {
            disconnect(true);
        }
    }

    /** Drops the connection if {@code failure} says the session is gone; whether it did. */
    private boolean brokenIf(SQLException failure) {
        String state = failure.getSQLState();
        boolean broken = state == null || state.startsWith("08") || state.startsWith("57P");
        try {
            broken = broken || connection == null || connection.isClosed();
        } catch (SQLException e) {
            broken = true;
        }
        if (broken) {
            disconnect(true);
        }
        return broken;
    }

    private void disconnect(boolean tell) {
        Connection gone = connection;
        connection = null;
        notifications = null;
        if (gone != null) {
            if (source.fromPool()) {
                // One of the application's pooled connections: leave no watch on it.
                for (Map.Entry<String, SqlText> entry : watched.entrySet()) {
                    try {
                        executeOn(gone, entry.getValue(), entry.getKey());
                    } catch (SQLException e) {
                        break;
                    }
                }
            }
            try {
                gone.close();
            } catch (SQLException e) {
                // Gone already.
            }
        }
        watched.clear();
        if (tell) {
            events.lost();
        }
    }

    private static void executeOn(Connection connection, SqlText sql, String key) throws SQLException {
        try (PreparedStatement statement = connection.prepareStatement(sql.jdbc())) {
            sql.bind(connection, statement, key);
            statement.execute();
        }
    }
}

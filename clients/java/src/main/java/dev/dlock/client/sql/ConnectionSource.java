package dev.dlock.client.sql;

import java.sql.Connection;
import java.sql.SQLException;

/** Where the client's pooled connections come from: the application's pool, or its own. */
public interface ConnectionSource extends AutoCloseable {
    /**
     * A connection, until {@link #giveBack}.
     *
     * @return a connection of the pool
     * @throws SQLException if none could be had
     */
    Connection take() throws SQLException;

    /**
     * Returns a connection taken with {@link #take()}.
     *
     * @param connection the connection
     * @param broken whether a statement on it failed as if the session were gone (it is not reused)
     */
    void giveBack(Connection connection, boolean broken);

    /** Closes the pool if it is the client's own; an application's pool is left alone. */
    @Override
    void close();
}

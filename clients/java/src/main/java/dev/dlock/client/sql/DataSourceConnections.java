package dev.dlock.client.sql;

import java.lang.reflect.Method;
import java.sql.Connection;
import java.sql.SQLException;
import javax.sql.DataSource;

/**
 * The application's {@link DataSource}, normally a pool (HikariCP and the like): a connection is
 * given back by closing it, and one whose session may be broken or may still carry a lease is
 * evicted from the pool first.
 */
public final class DataSourceConnections implements ConnectionSource {
    private final DataSource dataSource;

    /**
     * Connections of the application's data source.
     *
     * @param dataSource its pool
     */
    public DataSourceConnections(DataSource dataSource) {
        this.dataSource = dataSource;
    }

    /**
     * The application's data source.
     *
     * @return what connections come from
     */
    public DataSource dataSource() {
        return dataSource;
    }

    @Override
    public Connection take() throws SQLException {
        return dataSource.getConnection();
    }

    @Override
    public void giveBack(Connection connection, boolean broken) {
        if (broken && !evicted(connection)) {
            // A pool without an eviction call gets the connection back with its session ended: a
            // session that may still carry a lease (a session-bound one whose release failed)
            // must never serve another caller.
            try {
                connection.unwrap(Connection.class).close();
            } catch (SQLException e) {
                // Gone already.
            }
        }
        try {
            connection.close();
        } catch (SQLException e) {
            // Nothing to do: the pool discards what it cannot take back.
        }
    }

    /** Asks the pool to drop the connection, through its public {@code evictConnection(Connection)}
     *  (HikariCP's) when it has one; whether it did. */
    private boolean evicted(Connection connection) {
        try {
            Method evict = dataSource.getClass().getMethod("evictConnection", Connection.class);
            evict.invoke(dataSource, connection);
            return true;
        } catch (ReflectiveOperationException | RuntimeException e) {
            return false;
        }
    }

    @Override
    public void close() {
        // The application's pool is the application's to close.
    }
}

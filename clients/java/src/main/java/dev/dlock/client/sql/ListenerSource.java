package dev.dlock.client.sql;

import java.lang.reflect.Method;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.SQLException;
import java.util.Properties;
import javax.sql.DataSource;
import org.postgresql.ds.PGSimpleDataSource;

/**
 * Where the listener connection (one per client, on which every wait hears of freed keys) comes
 * from. It is opened outside the pool whenever the pool's settings can be had, so that waiting
 * costs the pool nothing: a thousand waiting threads hold the pool's connections plus this one.
 */
public interface ListenerSource {
    /**
     * Opens the listener connection.
     *
     * @return a connection in autocommit
     * @throws SQLException if connecting failed
     */
    Connection open() throws SQLException;

    /**
     * Whether {@link #open()} lends one of the application's pooled connections (which then
     * serves as the listener until the client closes) rather than opening one of its own.
     *
     * @return true if the listener is one of the pool's connections
     */
    boolean fromPool();

    /**
     * The listener of the client's own pool: a connection of the same settings, not counted in it.
     *
     * @param pool the client's pool
     * @return the source
     */
    static ListenerSource of(OwnPool pool) {
        return opened(pool::openUnpooled);
    }

    /**
     * A data source the application names for the listener: each connection it gives must be a
     * new session of its own (a {@link PGSimpleDataSource}, say), never one of a pool.
     *
     * @param unpooled the data source
     * @return the source
     */
    static ListenerSource of(DataSource unpooled) {
        return opened(unpooled::getConnection);
    }

    /**
     * The listener of an application's pool, opened with the pool's own settings where they can
     * be read: pgjdbc's {@link PGSimpleDataSource} is no pool and is used as it is; a pool that
     * wraps a data source ({@code getDataSource()}) or a URL ({@code getJdbcUrl()} or
     * {@code getUrl()}, with {@code getUsername()} or {@code getUser()}, {@code getPassword()} and
     * HikariCP's {@code getDataSourceProperties()}) is read through those public getters (HikariCP,
     * DBCP, c3p0, Tomcat's pool). Otherwise one connection of the pool serves as the listener.
     *
     * @param pool the application's data source
     * @return the source
     */
    static ListenerSource forPool(DataSource pool) {
        if (pool instanceof PGSimpleDataSource) {
            return of(pool);
        }
        Object wrapped = getter(pool, "getDataSource");
        if (wrapped instanceof DataSource inner && inner != pool) {
            return forPool(inner);
        }
        Object url = getter(pool, "getJdbcUrl");
        if (url == null) {
            url = getter(pool, "getUrl");
        }
        if (url instanceof String jdbcUrl && jdbcUrl.startsWith("jdbc:postgresql:")) {
            Properties properties = new Properties();
            if (getter(pool, "getDataSourceProperties") instanceof Properties extra) {
                properties.putAll(extra);
            }
            Object user = getter(pool, "getUsername");
            if (user == null) {
                user = getter(pool, "getUser");
            }
            if (user instanceof String name) {
                properties.setProperty("user", name);
            }
            if (getter(pool, "getPassword") instanceof String password) {
                properties.setProperty("password", password);
            }
            return opened(() -> {
                Connection connection = DriverManager.getConnection(jdbcUrl, properties);
                connection.setAutoCommit(true);
                return connection;
            });
        }
        return new ListenerSource() {
            @Override
            public Connection open() throws SQLException {
                Connection connection = pool.getConnection();
                connection.setAutoCommit(true);
                return connection;
            }

            @Override
            public boolean fromPool() {
                return true;
            }
        };
    }

    /** Opens connections of its own. */
    private static ListenerSource opened(Opener opener) {
        return new ListenerSource() {
            @Override
            public Connection open() throws SQLException {
                return opener.open();
            }

            @Override
            public boolean fromPool() {
                return false;
            }
        };
    }

    /** The result of a public no-argument getter of {@code target}, or null if it has none. */
    private static Object getter(Object target, String name) {
        try {
            Method method = target.getClass().getMethod(name);
            return method.invoke(target);
        } catch (ReflectiveOperationException | RuntimeException e) {
            return null;
        }
    }

    /** A way to open a connection. */
    @FunctionalInterface
    interface Opener {
        /**
         * Opens one.
         *
         * @return the connection
         * @throws SQLException if connecting failed
         */
        Connection open() throws SQLException;
    }
}
